"""Apply README.md's trace rule to the generated runs and check cases.py's `traceable` against it.

    python bench/foreign3/trace.py [--cache build/foreign-suite-blind3]

Reads each run's log the way its trainer wrote it (TensorBoard scalars, the W&B history CSV, HF's
trainer_state.json), never through minitrain. Prints, per run, the rule that fired (or none); exit 1 when a
fault's verdict differs from cases.py. Healthy runs are printed too: a rule firing on one says how noisy it is.
"""
import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from foreign3.cases import CASES  # noqa: E402
from foreign_suite import ROOT, run_key, source_path  # noqa: E402

WHOLE_RUN = {"lr_too_high", "attention_logit_growth"}  # faults whose rule 1 counts from step 0 to the end


def read_tensorboard(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    names = {"train_loss": "loss", "lr-Adam": "lr", "lr-AdamW": "lr", "grad_2.0_norm_total": "grad_norm"}
    return {names[t]: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"] if t in names}


def read_wandb_csv(path):
    names = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm"}
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            for col, sig in names.items():
                if row.get(col, "") != "":
                    out.setdefault(sig, {})[int(row["_step"])] = float(row[col])
    return out


def read_trainer_state(path):
    names = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm"}
    out = {}
    for entry in json.loads(path.read_text())["log_history"]:
        for key, sig in names.items():
            if key in entry and "train_runtime" not in entry:
                out.setdefault(sig, {})[entry["step"]] = float(entry[key])
    return out


def logged(case, run):
    if case.trainer == "opt":
        return read_trainer_state(run / "trainer_state.json")
    if case.source == "wandb":
        return read_wandb_csv(source_path(case, run))
    return read_tensorboard(next(p.parent for p in source_path(case, run).rglob("events.out.tfevents*")))


def trace(case, series):
    """The first rule of README.md that fires in the fault's window, as 'rule N at step S', or None."""
    start = case.fault_step or 0
    end = start + case.fault_len + 2 * case.log_every + 20
    loss = sorted(series["loss"].items())
    whole = bool(set(case.accept) & WHOLE_RUN)
    for i, (step, value) in enumerate(loss):
        if not math.isfinite(value) and start <= step <= end:
            return f"rule 5 at {step}"
        earlier = [v for _, v in loss[:i] if math.isfinite(v)]
        if not earlier or not (whole or start <= step <= end):
            continue
        low = min(earlier)
        if value > low + max(0.3, 0.15 * low):
            return f"rule 1 at {step}"
        past_first_fall = step >= 0.2 * case.config["steps"]
        if (start <= step <= end and past_first_fall and len(earlier) >= 5
                and value < 0.75 * statistics.median(earlier[-5:])):
            return f"rule 2 at {step}"
    norms = sorted(series.get("grad_norm", {}).items())
    for i, (step, value) in enumerate(norms):
        if not start <= step <= end:
            continue
        if not math.isfinite(value):
            return f"rule 5 at {step}"
        ref = [v for _, v in norms[max(0, i - 10):i]] or [v for _, v in norms[i + 1:i + 11]]
        if len(ref) >= 3 and value > 5 * statistics.median(ref):
            return f"rule 3 at {step}"
    lrs = sorted(series.get("lr", {}).items())
    if lrs and "no_warmup" in case.accept and lrs[0][1] >= max(v for _, v in lrs):
        return f"rule 4 at {lrs[0][0]}"
    for (s0, v0), (s1, v1) in zip(lrs, lrs[1:]):
        rising = v1 > v0 and s1 <= case.config.get("warmup", 0) + case.log_every
        if start <= s1 <= end and not rising and max(v1 / v0, v0 / v1) > 2:
            return f"rule 4 at {s1}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=str(ROOT / "build" / "foreign-suite-blind3"))
    args = ap.parse_args()
    differ = []
    for case in CASES:
        run = Path(args.cache) / f"{case.name}-{run_key(case)}"
        if not (run / "trained.json").exists():
            print(f"{case.name}: not generated in {args.cache}", file=sys.stderr)
            return 2
        verdict = trace(case, logged(case, run))
        mark = "healthy" if case.healthy else ("trace" if case.traceable else "no trace")
        print(f"{case.name:28s} {mark:9s} {verdict or '-'}")
        if not case.healthy and (verdict is not None) != case.traceable:
            differ.append(case.name)
    if differ:
        print(f"cases.py's traceable differs from the rule on: {', '.join(differ)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
