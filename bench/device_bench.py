"""Step time, tokens/s and peak memory of each preset on the device found here (CUDA when PyTorch sees a
GPU, else the CPU), for docs/benchmarks.md ("Devices and presets").

    python bench/device_bench.py [--presets course,medium,gpt2-small-shaped] [--steps 10] [--warmup 2]
                                 [--device auto|cpu|cuda] [--precision fp32|bf16] [--threads 1]

Each preset runs in its own subprocess, so its peak memory is its own: build_run, `--warmup` untimed steps,
then `--steps` timed calls of the real `loop.train_step` (forward, backward, clip, AdamW, full per-parameter
telemetry; no files written, no periodic validation or spectral norms). tokens/s counts the non-padding
input tokens of the global batch. Memory: peak CUDA allocation on a GPU, the process's peak RSS on a CPU
(Python and PyTorch included, about 0.3 GB). Prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch


def measure(preset: str, steps: int, warmup: int, device: str, precision: str, threads: int) -> dict:
    from minitrain import loop
    from minitrain.core.config import build_config

    cfg = build_config({}, [f"preset={preset}", f"device={device}", f"precision={precision}", f"threads={threads}",
                            f"steps={warmup + steps + 1}", "warmup_steps=1", "eval_every=1000000",
                            "spectral_every=0", "progress=false"])
    run = loop.build_run(cfg)
    dev = run.device
    times, tokens = [], []
    for step in range(1, warmup + steps + 1):  # step 0 would run the validation pass
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loop.train_step(run, step)  # its metrics row is one .tolist(): the step has finished on the device
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if step > warmup:
            times.append(time.perf_counter() - t0)
            tokens.append(int((~run.last_batch.key_pad).sum()))
    step_s = statistics.median(times)
    if dev.type == "cuda":
        memory_gb, memory_kind = torch.cuda.max_memory_allocated(dev) / 2**30, "peak CUDA allocated"
    else:  # ru_maxrss is in KiB on Linux
        memory_gb, memory_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak RSS"
    return {"preset": preset, "params": sum(p.numel() for p in run.model.parameters()),
            "batch": cfg.batch_size, "tokens_per_step": statistics.mean(tokens), "step_ms": step_s * 1e3,
            "tokens_per_s": statistics.mean(tokens) / step_s, "memory_gb": memory_gb, "memory_kind": memory_kind,
            "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else
            platform.processor() or platform.machine(), "precision": precision, "threads": threads,
            "steps_timed": steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="course,medium,gpt2-small-shaped")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the runs' default is 1)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode: measure this preset, print JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps, args.warmup, args.device, args.precision, args.threads)))
        return 0
    results = []
    for preset in args.presets.split(","):
        cmd = [sys.executable, __file__, "--one", preset, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--device", args.device, "--precision", args.precision, "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:  # e.g. out of memory: say so and go on with the next preset
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            print(f"{preset}: failed ({last})", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if not results:
        return 1
    r0 = results[0]
    print(f"Device: {r0['device']} ({r0['device_name']}), torch {torch.__version__}, precision {r0['precision']}, "
          f"{r0['threads']} CPU thread(s); median of {r0['steps_timed']} timed steps after {args.warmup} warm-up.\n")
    print(f"| preset | parameters | batch | tokens/step | step (ms) | tokens/s | memory (GB, {r0['memory_kind']}) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['preset']} | {r['params'] / 1e6:.2f}M | {r['batch']} | {r['tokens_per_step']:.0f} | "
              f"{r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | {r['memory_gb']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
