"""The natural suite: runs that fail with no injection at all, labelled by intervention, diagnosed blind.

    python bench/natural_suite.py                      # from experiments/lr-sweep/sweep.json, seeds 1 and 2
    python bench/natural_suite.py --seeds 1 2 3 --jobs 2 --suite DIR --doc docs/natural-suite.md

Where the cases come from: the LR sweep (`minitrain lr-sweep`, seed 42, where the §2.6-§2.8 thresholds were
set: analysis/thresholds.py). Every LR at which the sweep's plain model failed is a case; the plain model at
the sweep's best LR and at the lab's LR are healthy controls. Each case is trained again on HELD-OUT seeds, the plain config and each
intervention alone (qk_norm, z_loss, update_clip) at the same seed and LR; the case's truth is the cause whose
intervention alone removes the failure (analysis/lrsweep.py: failed, CAUSE_OF_REMEDY). A plain run that does
not fail on that seed is a healthy case; one that several or no interventions fix has no single cause, and any
answer that names none of the fixing causes is wrong there but healthy / unknown.

The walker (`stability.diagnose_run`, metrics only) diagnoses each plain run; the truth never reaches it.
Written: SUITE/report.md, SUITE/results.json (and --doc). `cases(suite, ...)` is the suite as the diagnosis
evaluation's registry takes it: it trains what is missing and returns the labelled plain runs.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from minitrain.analysis import lrsweep as judge
from minitrain.analysis import stability
from minitrain.analysis.definitions import sweep_failure
from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.lab import lrsweep, runner
from minitrain.lab.sweep import train_one
from minitrain.run import reader
from minitrain.run.completion import completed
from minitrain.run.files import atomic_write_text

INTERVENTIONS = tuple(judge.CAUSE_OF_REMEDY)  # qk_norm, z_loss, update_clip
NO_NAME = ("healthy", "unknown")
SEEDS = (1, 2)  # held out: the sweep (and every threshold of §2.6-§2.8) is seed 42


@dataclass
class Case:
    name: str  # folder: seedN/lrX/plain
    seed: int
    lr: float
    truth: str  # a cause, "healthy", or "none" (several or no intervention fixes it)
    accepted: tuple[str, ...]  # the answers that are right
    why: str  # why the plain run failed (or "did not fail")
    removed_by: tuple[str, ...] = ()
    result: dict = field(default_factory=dict)


def sweep_lrs(sweep: Path) -> tuple[str, list[float], float]:
    """The sweep's grid, its failed plain LRs and the plain model's best LR."""
    data, why = reader.read_optional_json(Path(sweep) / "sweep.json")
    if data is None:
        raise UserError(f"{sweep}/sweep.json not found ({why}); run `minitrain lr-sweep` first")
    failed = sorted(c["lr"] for c in data["natural_cases"])
    return data["grid"], failed, data["sensitivity"]["default"]["best_lr"]


def _variant_config(grid: str, name: str, lr: float, seed: int):
    return lrsweep.run_config(grid, lrsweep.BY_NAME[name], lr, [f"seed={seed}"])


def _folder(suite: Path, seed: int, lr: float, name: str) -> Path:
    return Path(suite) / f"seed{seed}" / f"lr{judge.fmt_lr(lr)}" / name


def train_all(suite: Path, grid: str, plan: list[tuple[int, float, tuple[str, ...]]], jobs: int) -> None:
    """Train every (seed, LR, variant) of the plan not already in the suite with the same config."""
    todo = []
    for seed, lr, names in plan:
        for name in names:
            cfg, out = _variant_config(grid, name, lr, seed), _folder(suite, seed, lr, name)
            if not completed(out, cfg):
                todo.append(runner.Job(str(out), call=train_one, args=(cfg.to_dict(), str(out), cfg.steps), run=out))
    t0 = time.perf_counter()
    for j in runner.run_jobs(todo, runner.LocalProcesses(jobs),
                             on_end=lambda j: print(f"[{time.perf_counter() - t0:.0f} s] {j.name}: "
                                                    f"{'failed: ' + j.error() if j.failed else 'trained'}", flush=True)):
        if j.failed:
            raise UserError(f"natural suite: training {j.run} failed ({j.error()})")


def summary(suite: Path, seed: int, lr: float, name: str) -> dict:
    return {"variant": name, "lr": lr, **judge.run_summary(reader.load_run(_folder(suite, seed, lr, name))["rows"])}


def cases(suite: Path, sweep: Path = Path("experiments/lr-sweep"), seeds=SEEDS, jobs: int = 2) -> list[Case]:
    """Train what is missing and return the suite's labelled plain runs."""
    grid, failed_lrs, best_lr = sweep_lrs(sweep)
    plan = [(s, lr, ("default", *INTERVENTIONS)) for s in seeds for lr in failed_lrs]
    controls = sorted({best_lr, build_config({}).lr_max} - set(failed_lrs))  # the best LR and the lab's own
    plan += [(s, lr, ("default",)) for s in seeds for lr in controls]
    train_all(suite, grid, plan, jobs)
    out = []
    for seed in seeds:
        # the failure bar of this seed: its own plain run at the sweep's best LR (analysis/lrsweep.py: failed)
        ref = summary(suite, seed, best_lr, "default")
        bar = ref["final_loss"] if ref["final_loss"] is not None else ref["initial_loss"]
        for lr in sorted({*failed_lrs, *controls}):
            plain = summary(suite, seed, lr, "default")
            why = sweep_failure(plain, bar, best_lr)
            if why is None:
                out.append(memorising(Case(f"seed{seed}/lr{judge.fmt_lr(lr)}/default", seed, lr, "healthy",
                                           ("healthy",), "did not fail"), suite))
                continue
            if lr in controls:  # a control that failed on this seed: no intervention was trained to label it
                out.append(memorising(Case(f"seed{seed}/lr{judge.fmt_lr(lr)}/default", seed, lr, "none", NO_NAME,
                                           f"{why} (a control: not labelled)"), suite))
                continue
            removed = tuple(n for n in INTERVENTIONS if sweep_failure(summary(suite, seed, lr, n), bar, best_lr) is None)
            causes = tuple(judge.CAUSE_OF_REMEDY[n] for n in removed)
            truth = causes[0] if len(causes) == 1 else "none"
            out.append(memorising(Case(f"seed{seed}/lr{judge.fmt_lr(lr)}/default", seed, lr, truth,
                                       (*causes, *NO_NAME) if truth == "none" else (truth,), why, removed), suite))
    return out


def overrides(cfg) -> list[str]:
    """A config as key=value overrides of the default one (the natural runs' fields are all scalars)."""
    base = build_config({}).to_dict()
    return [f"{k}={v}" for k, v in cfg.to_dict().items() if k != "seed" and v != base[k]]


def diagnosis_cases(suite: Path, sweep: Path, seeds=SEEDS, jobs: int = 2, split: str = "natural") -> list:
    """The suite as bench/eval_diagnosis.py's registry takes it: train what is missing (the interventions too:
    they label the cases), then each plain run as a diagnosis case whose folder is its run inside `suite` (the
    evaluation's runs folder + "natural/"), with its config as overrides, its truth, and the other causes its
    label accepts (`also`)."""
    import diagnosis_suites as ds

    grid, _, _ = sweep_lrs(sweep)
    out = []
    for c in cases(suite, sweep, seeds, jobs):
        sets = overrides(_variant_config(grid, "default", c.lr, c.seed))
        group = f"{Path(suite).name}/{Path(c.name).parent.as_posix()}"
        several = c.truth == "none"
        also = tuple(a for a in c.accepted if a not in (c.truth, *NO_NAME))
        out.append(ds.Case("default", c.seed, sets, c.truth, "unknown" if several else c.truth, "natural",
                           magnitude=f"LR {judge.fmt_lr(c.lr)}", split=split, group=group, borderline=several,
                           also=also, condition=f"{c.why}; fixed alone by {', '.join(c.removed_by) or '-'}"))
    return out


MEMORISED = 1.15  # last validation loss / best: a run that climbs this far after its best memorises its split


def validation_climb(run: Path) -> float:
    """The last validation loss over the best: how far validation climbed after its best."""
    val = [r["val_loss"] for r in reader.load_run(run)["rows"] if isinstance(r.get("val_loss"), (int, float))]
    return val[-1] / min(val) if val and min(val) > 0 else 1.0


def memorising(case: Case, suite: Path) -> Case:
    """A case whose label names no cause (a control, or one several interventions fix) but whose validation
    climbs MEMORISED x its best memorises its training split: what §2.E's leaf describes (an LR too high), read
    from the losses alone, so that answer is right too."""
    climb = validation_climb(Path(suite) / case.name)
    if case.truth in ("healthy", "none") and climb > MEMORISED:
        case.accepted = (*case.accepted, "lr_too_high")
        case.why += f"; memorises (last validation {climb:.2f} x its best)"
    return case


def evaluate(suite: Path, found: list[Case]) -> None:
    for c in found:
        d = stability.diagnose_run(Path(suite) / c.name)
        c.result = {"cause": d["cause"], "leaf": d["leaf"], "anomaly_step": d.get("anomaly_step"),
                    "right": d["cause"] in c.accepted,
                    "wrong_name": d["cause"] not in c.accepted and d["cause"] not in NO_NAME}


def render(found: list[Case], seeds, secs: float) -> str:
    right = sum(c.result["right"] for c in found)
    wrong = sum(c.result["wrong_name"] for c in found)
    labelled = [c for c in found if c.truth not in ("healthy", "none")]
    lines = ["# The natural suite: failures with no injection, labelled by intervention", "",
             "Generated by `python bench/natural_suite.py` (cases from the LR sweep, `minitrain lr-sweep`, whose seed "
             f"42 set the §2.6-§2.8 thresholds; these runs are held-out seeds {', '.join(map(str, seeds))}). A case's "
             "truth is the cause whose intervention alone (qk_norm, z_loss, update_clip) removes the plain run's "
             "failure at the same seed and LR; 'none' when several or none do (then healthy / unknown or any "
             "fixing cause is right).", "",
             f"**{right} of {len(found)} right; {wrong} wrong names; {len(labelled)} cases with a single cause, "
             f"{sum(c.result['right'] for c in labelled)} of them named.** ({secs:.0f} s)", "",
             "Wrong names by leaf: " + (", ".join(f"{leaf} x{n}" for leaf, n in sorted(Counter(
                 c.result["leaf"] for c in found if c.result["wrong_name"]).items())) or "none") + ". Healthy "
             "controls: the plain model at the sweep's best LR and at the lab's LR. A failure here is the training "
             "loss's; a case whose label names no cause but whose validation climbs 1.15x its best after it "
             "memorises its training split, which is what §2.E (`lr_too_high`) describes: that name is right too.", "",
             "| run | why the plain run failed | fixed alone by | truth | walker | leaf | right |",
             "|---|---|---|---|---|---|---|"]
    for c in found:
        lines.append(f"| {c.name} | {c.why} | {', '.join(c.removed_by) or '-'} | {c.truth} | {c.result['cause']} | "
                     f"{c.result['leaf']} | {'yes' if c.result['right'] else 'WRONG NAME' if c.result['wrong_name'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default="experiments/lr-sweep", help="the LR sweep's folder (its sweep.json)")
    ap.add_argument("--suite", default="experiments/natural-suite", help="where the suite's runs go")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--doc", help="also write the report there")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        found = cases(Path(args.suite), Path(args.sweep), args.seeds, args.jobs)
    except UserError as e:
        print(f"natural_suite: {e}", file=sys.stderr)
        return 2
    evaluate(Path(args.suite), found)
    text = render(found, args.seeds, time.perf_counter() - t0)
    atomic_write_text(Path(args.suite) / "report.md", text)
    atomic_write_text(Path(args.suite) / "results.json", json.dumps([asdict(c) for c in found], indent=1))
    if args.doc:
        atomic_write_text(Path(args.doc), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
