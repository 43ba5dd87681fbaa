"""Apply README.md's trace rule to each faulty run of bench/foreign2 as generated in the cache: does the
fault leave a mark in what its trainer logged? Prints one line per fault with the rule that fired, and exits
1 when a result differs from the `traced` recorded in cases.py.

    python bench/foreign2/trace.py [--cache build/foreign-suite-blind2]

Reads the file the user imports with that format's own reader (tensorboard's EventAccumulator, csv, json),
not with minitrain.
"""
import argparse
import csv
import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foreign_suite import ROOT, run_key, source_path  # noqa: E402
from foreign2.cases import CASES  # noqa: E402

# the names these three trainers give each signal
NAMES = {"loss": ("train/loss", "loss", "train_loss"),
         "lr": ("train/lr", "train/learning_rate", "learning_rate", "lr", "lr-Adam"),
         "grad_norm": ("train/grad_norm", "grad_norm", "grad_2.0_norm_total")}
ITER = re.compile(r"^iter (\d+): loss (\S+?),")


def logged(case, path):
    """{signal: [(step, value), ...]} as the file holds it."""
    if case.source.startswith("tb"):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        run = path if any(p.name.startswith("events") for p in path.iterdir()) else next(path.iterdir())
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        table = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    elif case.source == "trainer_state":
        table = {}
        for entry in json.loads(path.read_text())["log_history"]:
            if "train_runtime" not in entry:
                for key, value in entry.items():
                    table.setdefault(key, []).append((entry["step"], value))
    elif case.source == "printlog":
        rows = [ITER.match(line) for line in path.read_text().splitlines()]
        table = {"loss": [(int(m.group(1)), float(m.group(2))) for m in rows if m]}
    else:
        table = {}
        for row in csv.DictReader(path.open()):
            for key, value in row.items():
                if key != "step" and value != "":
                    table.setdefault(key, []).append((int(row["step"]), float(value)))
    out = {}
    for signal, names in NAMES.items():
        found = [table[n] for n in names if n in table]
        if found:
            out[signal] = sorted(found[0])
    return out


def trace(case, series):
    """The first rule of README.md's trace rule that fires, or None."""
    lo = case.fault_step if case.fault_step is not None else -math.inf
    hi = case.fault_step + case.fault_len + 2 * case.log_every + 5 if case.fault_step is not None else math.inf
    loss = series["loss"]
    first = math.ceil(0.1 * len(loss)) if case.fault_step is None else 0
    for i, (step, value) in enumerate(loss):
        if lo <= step <= hi and i >= first:
            if not math.isfinite(value):
                return f"loss non-finite at {step}"
            if i and value > min(v for _, v in loss[:i]) + 0.5:
                return f"loss {value:.3f} at {step} > running min {min(v for _, v in loss[:i]):.3f} + 0.5"
    if case.fault_step is not None and "lr" in series:
        before = [v for s, v in series["lr"] if s < lo]
        for step, value in series["lr"]:
            if before and lo <= step <= hi and value > 2 * before[-1]:
                return f"lr {value:.3g} at {step} > 2x {before[-1]:.3g}"
    if "grad_norm" in series:
        norms = series["grad_norm"]
        base = [v for s, v in norms if s < lo] if case.fault_step is not None else [v for _, v in norms]
        if base:
            med = statistics.median(base)
            for step, value in norms:
                if lo <= step <= hi and value > 10 * med:
                    return f"grad_norm {value:.3g} at {step} > 10x median {med:.3g}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(ROOT / "build" / "foreign-suite-blind2"))
    args = ap.parse_args()
    differ = []
    for case in CASES:
        if case.healthy:
            continue
        run = Path(args.cache) / f"{case.name}-{run_key(case)}"
        if not (run / "trained.json").exists():
            raise SystemExit(f"{case.name}: not generated in {args.cache}; run bench/foreign_suite.py --part blind2 "
                             f"--import-only first")
        series = logged(case, source_path(case, run))
        why = trace(case, series)
        print(f"{case.name:34s} {'trace' if why else 'no trace':8s} {why or ''}")
        if bool(why) != case.traceable or case.traced is None:
            differ.append(case.name)
    traced = sum(1 for c in CASES if not c.healthy and c.traced)
    print(f"{traced} of {sum(not c.healthy for c in CASES)} faults traced in cases.py")
    if differ:
        print(f"differs from cases.py: {', '.join(differ)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
