"""Layer 1: what a training run is made of (config, data, model, injections, telemetry, devices)."""
