"""The noise of `minitrain remediate`'s verdict: the same comparison made between clean runs.

    python bench/remediation_noise.py [--out experiments/remediation-noise] [--seeds 1 2 3 4 5] [--jobs 2]

`remedy_verdict` (analysis/compare.py) compares |original - baseline| with |remediated - baseline| on the
final validation loss (and the mean training loss over K+1..K+50). The remediated run shares the original's
steps up to K and differs after it, so ANY change at K moves that distance a little, fault or not. To see how
much, the same comparison is made where nothing is wrong: on each clean seed (not the lab's 42), a clean
2000-step baseline, and three clean forks of it at K = 500, each a harmless one-step change with no fault in
the run: one clean batch skipped at K, one skipped at K+1, and every tensor's Adam moments put back at K+1 to
the checkpoint at K. For every pair (P, Q) of the three forks, |Q - baseline| - |P - baseline| is one draw of
the verdict's `by` when the remedy achieved nothing. The band is the largest |by| over all pairs and seeds,
per measure; analysis/compare.py's REMEDY_NOISE holds it (rounded up to two significant digits) and
docs/remediation.md gets the table between its `remediation-noise` markers. For context the table also gives
the clean seeds' own spread (final validation loss of each clean seed against the lab's seed-42 baseline).

Cost: per seed one full run and three 1500-step tails (about 5 full runs of CPU per seed); finished runs are
reused.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from minitrain import trainer  # noqa: E402
from minitrain.analysis.compare import REMEDY_MEASURES, measure  # noqa: E402
from minitrain.core.config import build_config  # noqa: E402
from minitrain.run import reader  # noqa: E402

K = 500
FORKS = {  # name: the overrides of a clean fork at K (a harmless one-step change, no fault)
    "skip-K": ["remedy=skip_batch", f"remedy_step={K}"],
    "skip-K+1": ["remedy=skip_batch", f"remedy_step={K + 1}"],
    "restore-K+1": ["remedy=restore_moments", f"remedy_step={K + 1}"],
}
DOC = ROOT / "docs" / "remediation.md"
BEGIN, END = "<!-- remediation-noise:begin -->", "<!-- remediation-noise:end -->"


def finished(run: Path) -> bool:
    return (run / "results.json").exists() and reader.results_of(run).get("status") == "finished"


def one_seed(out: Path, seed: int) -> dict:
    """The clean baseline of `seed` and its three clean forks; each fork's measure() against the baseline."""
    base = out / f"seed{seed}" / "baseline"
    cfg = build_config({}, [f"seed={seed}", "progress=false"])
    if not finished(base):
        trainer.train(cfg, base, force=True, fork=False)
    measured = {}
    for name, sets in FORKS.items():
        run = out / f"seed{seed}" / name
        if not finished(run):
            trainer.train(build_config(cfg.to_dict(), sets), run, force=True, fork=False, donor=(base, K))
        measured[name] = measure(run, base, K)
    return {"seed": seed, "val": reader.results_of(base).get("final_val_loss"), "forks": measured}


def null_draws(seeds: list[dict]) -> dict[str, list[float]]:
    """Per measure: |Q - base| - |P - base| for every ordered pair of clean forks of every seed."""
    out: dict[str, list[float]] = {key: [] for key, _ in REMEDY_MEASURES}
    for s in seeds:
        for p, q in itertools.permutations(s["forks"].values(), 2):
            for key in out:
                if p.get(key) is not None and q.get(key) is not None:
                    out[key].append(abs(q[key]) - abs(p[key]))
    return out


def round_up(x: float) -> float:
    """x rounded up to two significant digits."""
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - 1
    return float(f"{math.ceil(x / 10 ** e) * 10 ** e:.2g}")


def render(seeds: list[dict], draws: dict[str, list[float]], lab_val: float | None) -> str:
    bands = {key: round_up(max(abs(d) for d in draws[key])) for key, _ in REMEDY_MEASURES}
    lines = [BEGIN,
             f"Measured by `python bench/remediation_noise.py` on {len(seeds)} clean seeds "
             f"({', '.join(str(s['seed']) for s in seeds)}), K = {K}: per seed a clean baseline and three clean "
             "forks at K (" + ", ".join(f"`{n}`" for n in FORKS) + "). Distance of each fork to its own baseline, "
             "in nats:", "",
             "| seed | fork | final validation | mean training K+1..K+50 |", "|---|---|---|---|"]
    for s in seeds:
        for name, m in s["forks"].items():
            lines.append(f"| {s['seed']} | `{name}` | {abs(m['final_val_loss_diff']):.2g} | "
                         f"{abs(m['mean_loss_diff_after_K']):.2g} |")
    lines += ["", "The verdict's `by` (|Q - baseline| - |P - baseline|) over every ordered pair of clean forks of a "
              f"seed ({len(draws[REMEDY_MEASURES[0][0]])} draws): what the comparison reads when no remedy did anything.", "",
              "| measure | largest abs(by) | median abs(by) | band (`REMEDY_NOISE`) |", "|---|---|---|---|"]
    for key, label in REMEDY_MEASURES:
        a = sorted(abs(d) for d in draws[key])
        lines.append(f"| {label} | {a[-1]:.2g} | {a[len(a) // 2]:.2g} | {bands[key]:.2g} |")
    vals = [s["val"] for s in seeds if s["val"] is not None]
    if vals and lab_val is not None:
        spread = max(abs(v - lab_val) for v in vals)
        lines += ["", f"For scale: the clean seeds' final validation loss is {min(vals):.3f} .. {max(vals):.3f}, up to "
                  f"{spread:.2g} nats from the lab's seed-42 baseline ({lab_val:.3f}); a remediated run is compared "
                  "with its own trunk, so the paired band above, not this seed spread, is the comparison's noise."]
    lines += ["", "band: " + json.dumps(bands), END]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "remediation-noise")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--lab-baseline", type=Path, default=ROOT / "experiments" / "18-baseline",
                    help="the lab's baseline, for the seed spread (skipped when missing)")
    args = ap.parse_args(argv)
    with ProcessPoolExecutor(args.jobs) as pool:
        seeds = list(pool.map(one_seed, [args.out] * len(args.seeds), args.seeds))
    draws = null_draws(seeds)
    lab_val = reader.results_of(args.lab_baseline).get("final_val_loss") if finished(args.lab_baseline) else None
    block = render(seeds, draws, lab_val)
    write_doc(block)
    print(block)
    return 0


def write_doc(block: str) -> None:
    """Put `block` between the markers of docs/remediation.md (appended when they are missing)."""
    text = DOC.read_text()
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
