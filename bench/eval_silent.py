"""The silent bugs (docs/silent-bugs.md) on held-out cases: seeds, steps K, tensors and batch sizes the §9 checks were not
tuned on (they were set on seed 42, K=400, @attn, batch 8), and clean runs of the same configs for false alarms.
Each case is trained through the CLI (`rank_desync` and its clean twin under torchrun, 2 processes, gloo), then
`minitrain diagnose --json` names it from its metrics alone. Scored once; the table goes into docs/silent-bugs.md.

    python bench/eval_silent.py --out /tmp/silent [--steps 900]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CAUSE = {"no_zero_grad": "grads_not_zeroed", "frozen_params": "frozen_parameters", "step_noop": "update_not_applied",
         "loss_sum": "loss_reduction", "rank_desync": "ranks_diverged", "none": "healthy"}

# (injection, seed, K, extra settings, processes)
CASES = [
    ("no_zero_grad", 7, 250, [], 1), ("no_zero_grad", 13, 610, [], 1), ("no_zero_grad", 21, 90, ["batch_size=16"], 1),
    ("frozen_params", 7, 300, ["injection_param=@mlp"], 1),
    ("frozen_params", 13, 700, ["injection_param=blocks.0.attn.qkv.weight"], 1),
    ("frozen_params", 21, 150, ["injection_param=@ln1"], 1),
    ("step_noop", 7, 520, [], 1), ("step_noop", 13, 180, ["batch_size=4"], 1),
    ("loss_sum", 7, 333, [], 1), ("loss_sum", 13, 640, ["batch_size=16"], 1), ("loss_sum", 21, 120, ["batch_size=4"], 1),
    ("rank_desync", 7, 450, [], 2), ("rank_desync", 13, 220, [], 2),
    ("none", 7, 0, [], 1), ("none", 13, 0, [], 1), ("none", 21, 0, ["batch_size=16"], 1),
    ("none", 5, 0, ["batch_size=4"], 1), ("none", 7, 0, [], 2),
]


def train(out: Path, injection: str, seed: int, k: int, extra: list[str], procs: int, steps: int) -> None:
    head = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)]
            if procs > 1 else [sys.executable])
    cmd = head + ["-m", "minitrain", "train", "--out", str(out), "--steps", str(steps), "--seed", str(seed),
                  "--no-progress", "--force", "--no-fork", "--set", "threads=1"]
    if injection != "none":
        cmd += ["--injection", injection, "--injection-step", str(k)]
    for s in extra:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, capture_output=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=900)
    args = ap.parse_args(argv)
    rows, wrong = [], 0
    for injection, seed, k, extra, procs in CASES:
        name = f"{injection}-s{seed}-k{k}{'-ddp' if procs > 1 else ''}{''.join('-' + e.split('=')[1] for e in extra)}"
        run = args.out / name.replace("@", "").replace("/", "_")
        if not (run / "results.json").exists():
            train(run, injection, seed, k, extra, procs, args.steps)
        d = json.loads(subprocess.run([sys.executable, "-m", "minitrain", "diagnose", "--json", str(run)],
                                      check=True, capture_output=True, text=True).stdout)
        want = CAUSE[injection]
        ok = d["cause"] == want
        delay = d.get("anomaly_step") - k if ok and injection != "none" and d.get("anomaly_step") is not None else None
        wrong += not ok
        rows.append({"case": name, "want": want, "named": d["cause"], "step": d.get("anomaly_step"), "K": k,
                     "delay": delay, "ok": ok})
        print(f"| {name} | {want} | {d['cause']} | {d.get('anomaly_step')} | {'' if delay is None else delay} | "
              f"{'yes' if ok else 'NO'} |", flush=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
