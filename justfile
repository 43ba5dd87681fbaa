# minitrain task runner. The lab's commands read shell variables, exactly as the lab prints them:
#   seed=42 injection=scale injection_step=500 just phase-19-train
# Recipes use the project's virtual environment (made by ./dev, or `just setup`).

set shell := ["bash", "-euo", "pipefail", "-c"]
export PATH := justfile_directory() + "/.venv/bin:" + env_var("PATH")
export PYTHONUNBUFFERED := "1"

# list the recipes
default:
    @just --list --unsorted

# create .venv and install minitrain with its pinned dependencies (idempotent)
setup:
    ./dev --setup-only

# train the phase-18 baseline into experiments/18-baseline
phase-18-train *args:
    minitrain lab-run --injection none {{args}}

# one lab run from the shell variables seed, injection (none|scale|bad_batch|v_corrupt), injection_step
phase-19-train *args:
    minitrain lab-run --from-env {{args}}

# the whole lab: baseline + injections A, B, C at step 500 (seed 42), forked from the baseline
lab:
    minitrain lab-run --injection none
    minitrain lab-run --injection scale --injection-step 500
    minitrain lab-run --injection bad_batch --injection-step 500
    minitrain lab-run --injection v_corrupt --injection-step 500

# run the whole test suite (installs the test tools and a headless Chromium if missing)
test *args:
    ./dev --setup-only --test-tools
    python -m pytest {{args}}

# benchmarks: step time of the project's loop against a bare PyTorch loop, telemetry cost
bench:
    python bench/run.py
