"""What the probe costs on a model the project did not write: a tiny `transformers` GPT-2 (random init) trained
on the project's corpus by a plain PyTorch loop, with and without `minitrain.probe.attach`, in one process,
in interleaved blocks (the machine is shared and noisy: the median of per-round ratios is the figure), with
the probe's default per-tensor telemetry ('full') and with global signals only ('basic').

    python bench/probe_bench.py [--steps-per-block 50] [--rounds 8] [--layers 2] [--width 64]

Needs the `transformers` extra. Prints a markdown table; docs/probe.md records it with the date and load.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def make_loop(data, args, probe_dir: Path | None, telemetry: str = "full"):
    """One model + AdamW + warmup/cosine schedule + clipping at 1.0; with the probe when probe_dir is set."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=data.tokenizer.get_vocab_size(), n_positions=64, n_embd=args.width, n_layer=args.layers,
        n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
        pad_token_id=0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    total = args.rounds * args.steps_per_block + args.steps_per_block
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))
    probe = None
    if probe_dir is not None:
        from minitrain.probe import attach

        probe = attach(model, opt, probe_dir, force=True, tokenizer=data.tokenizer, token_counts=data.token_counts,
                       telemetry=telemetry)
    state = {"step": 0}

    def steps(n: int) -> None:
        for _ in range(n):
            b = data.train_batch(state["step"], 8, 42)
            mask = (~b.key_pad).long()
            out = model(input_ids=b.x, attention_mask=mask, labels=b.x.masked_fill(b.key_pad, -100))
            out.loss.backward()
            if probe is not None:
                probe.log(out.loss, b.x, attention_mask=mask)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            state["step"] += 1

    return steps, probe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps-per-block", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from minitrain.core.config import TrainConfig
    from minitrain.core.data import prepare

    data = prepare(TrainConfig())
    names = ("bare", "probe, telemetry basic", "probe, telemetry full")
    with tempfile.TemporaryDirectory() as tmp:
        loops = {"bare": make_loop(data, args, None)[0]}
        probes = []
        for name, tel in ((names[1], "basic"), (names[2], "full")):
            fn, probe = make_loop(data, args, Path(tmp) / tel, tel)
            loops[name] = fn
            probes.append(probe)
        for fn in loops.values():  # warm up (allocator, the first AdamW step)
            fn(args.steps_per_block)
        times = {n: [] for n in names}
        ratios = {n: [] for n in names[1:]}
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            this = {}
            for name in order:
                t0 = time.perf_counter()
                loops[name](args.steps_per_block)
                this[name] = (time.perf_counter() - t0) * 1000 / args.steps_per_block
                times[name].append(this[name])
            for name in names[1:]:
                ratios[name].append(this[name] / this["bare"])
            print(f"round {r + 1}: " + ", ".join(f"{n} {this[n]:.2f} ms/step" for n in names), file=sys.stderr)
        for probe in probes:
            probe.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"probe overhead on a transformers GPT-2 (n_layer {args.layers}, n_embd {args.width}, batch 8, "
          f"AdamW, clip 1.0), {args.rounds} interleaved rounds of {args.steps_per_block} steps, "
          f"torch {torch.__version__}, {args.threads} thread(s), {platform.machine()}, load {load:.1f}")
    print()
    print("| loop | median ms/step | ratio to bare (median of per-round ratios) | range |")
    print("|---|---|---|---|")
    print(f"| bare loop | {statistics.median(times['bare']):.2f} | 1.00 | |")
    for name in names[1:]:
        print(f"| same loop + {name} | {statistics.median(times[name]):.2f} | {statistics.median(ratios[name]):.3f} | "
              f"{min(ratios[name]):.3f}-{max(ratios[name]):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
