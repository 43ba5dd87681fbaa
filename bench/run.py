"""Benchmarks: the project's training loop against a bare PyTorch loop of the same model, and the cost of
telemetry, measured in one process with interleaved blocks (the machine is shared and noisy: ratios of
medians of interleaved blocks are what we report, never absolute seconds alone).

    python bench/run.py [--steps-per-block 50] [--rounds 8] [--full-run]

Prints a markdown table; paste it into docs/benchmarks.md with the date and machine.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from minitrain import loop
from minitrain.run import files
from minitrain.core.config import build_config


def bare_loop(cfg):
    """The same model, data and optimizer with nothing else: no metrics, no eval, no checkpoints."""
    run = loop.build_run(cfg)
    model, opt = run.model, run.opt
    model.record_activations = False
    params = list(model.parameters())

    def steps(start: int, stop: int) -> None:
        for step in range(start, stop):
            batch = run.data.train_batch(step, cfg.batch_size, cfg.seed)
            for group in opt.param_groups:
                group["lr"] = loop.lr_at(step, cfg)
            loss, _ = loop.masked_loss(model(batch.x, batch.key_pad), batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()

    return steps


def project_loop(cfg, folder: Path):
    """The real loop writing a real run folder (metrics every step, eval, checkpoints)."""
    run = loop.build_run(cfg, folder)
    files.prepare_run_dir(folder, force=True)
    run.metrics = files.MetricsWriter(folder / "metrics.jsonl")

    def steps(start: int, stop: int) -> None:
        loop.run_steps(run, start, stop_at=stop)

    return steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps-per-block", type=int, default=100,
                    help="a multiple of eval_every and ckpt_every (100), so every block does the same work")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--full-run", action="store_true", help="also time one default 2000-step baseline end to end")
    args = ap.parse_args()
    n, rounds = args.steps_per_block, args.rounds
    total = n * rounds + 10
    base = ["progress=false", f"steps={max(total, 2000)}"]
    tmp = Path(tempfile.mkdtemp(prefix="minitrain-bench-"))
    loops = {
        "bare PyTorch loop": bare_loop(build_config({}, base)),
        "minitrain loop, telemetry basic, no validation": project_loop(
            build_config({}, base + ["telemetry=basic", "eval_every=1000000"]), tmp / "basic-noval"),
        "minitrain loop, telemetry basic": project_loop(build_config({}, base + ["telemetry=basic"]), tmp / "basic"),
        "minitrain loop, telemetry full": project_loop(build_config({}, base + ["telemetry=full"]), tmp / "full"),
    }
    for fn in loops.values():  # warm up
        fn(0, 10)
    times: dict[str, list[float]] = {k: [] for k in loops}
    for r in range(rounds):
        start = 10 + r * n
        for name, fn in loops.items():
            t0 = time.perf_counter()
            fn(start, start + n)
            times[name].append((time.perf_counter() - t0) / n * 1000)
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    bare_t, basic_t = times["bare PyTorch loop"], times["minitrain loop, telemetry basic"]

    def ratio(name: str, ref: list[float]) -> float:  # per round, then the median: load drifts between rounds
        return statistics.median(a / b for a, b in zip(times[name], ref))

    print(f"\nMachine: {platform.machine()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}; "
          f"{rounds} interleaved rounds of {n} steps; median per-step time, median of per-round ratios.\n")
    print("| loop | ms/step (median) | vs bare | vs telemetry basic |")
    print("|---|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m:.2f} | {ratio(name, bare_t):.3f}x | {ratio(name, basic_t):.3f}x |")
    if args.full_run:
        out = tmp / "18-baseline"
        t0 = time.perf_counter()
        res = loop.train(build_config({}, ["progress=false"]), out, force=True)
        wall = time.perf_counter() - t0
        print(f"\nDefault 2000-step baseline end to end (corpus, tokenizer, training, eval, checkpoints): "
              f"{wall:.1f} s wall; final val loss {res['final_val_loss']:.3f} vs n-gram {res['ngram_val_loss']:.3f}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
