"""What `minitrain reproduce` judges: how far a candidate perturbation's metrics are from a run's, and whether
the best one reproduces the run exactly, within rounding, or only approximately.

The distance is stated once, here: over every row of the compared window, the mean absolute log ratio
|ln(a / b)| of the logged signals (loss, pre-clip and clipped gradient norm, LR, and per tensor the gradient
norm g and Adam's mean second moment vm), averaged over every value compared. A value one run has and the
other lacks (a row after a divergence, a null) counts MISSING. Zero means the same numbers; a ratio of 2 in
one signal of one row out of a hundred rows adds about ln 2 / (100 x values per row).
"""
from __future__ import annotations

import math

STEP_SIGNALS = ("loss", "grad_norm", "grad_norm_clipped", "lr")
TENSOR_SIGNALS = ("g", "vm")
MISSING = 10.0  # |ln ratio| charged for a value one side lacks: farther than any ratio a run logs
TINY = 1e-30  # keeps the log of an exact zero (Adam's v before the first step) finite
ROUNDING = 1e-6  # a distance below this is float32 rounding (a relative 1e-7 per value), not a difference

LEVELS = ("exact", "within rounding", "approximate")
DEFINITION = ("mean |ln(run / hypothesis)| over every row of the window and every logged value (loss, "
              "grad_norm, grad_norm_clipped, lr, each tensor's g and vm); a value one side lacks counts "
              f"{MISSING:g}")


def _log_gap(a, b) -> float:
    ok_a = isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)
    ok_b = isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
    if not ok_a and not ok_b:
        return 0.0
    if ok_a != ok_b:
        return MISSING
    return abs(math.log((abs(a) + TINY) / (abs(b) + TINY)))


def distance(run_rows: dict[int, dict], hyp_rows: dict[int, dict], steps: range) -> float:
    """The stated distance (module docstring) of a hypothesis's rows from the run's over `steps`."""
    total, n = 0.0, 0
    for s in steps:
        a, b = run_rows.get(s), hyp_rows.get(s)
        if a is None and b is None:
            continue
        if a is None or b is None:
            total += MISSING * len(STEP_SIGNALS)
            n += len(STEP_SIGNALS)
            continue
        for key in STEP_SIGNALS:
            total += _log_gap(a.get(key), b.get(key))
            n += 1
        pa, pb = a.get("params") or {}, b.get("params") or {}
        for name in pa.keys() | pb.keys():
            ta, tb = pa.get(name) or {}, pb.get(name) or {}
            for key in TENSOR_SIGNALS:
                total += _log_gap(ta.get(key), tb.get(key))
                n += 1
    return total / n if n else 0.0


def level(identical_rows: bool, dist: float) -> str:
    """exact: every compared row has the same bytes; within rounding: the distance is below ROUNDING;
    else approximate."""
    if identical_rows:
        return "exact"
    return "within rounding" if dist <= ROUNDING else "approximate"


def first_difference(a: dict[int, bytes], b: dict[int, bytes]) -> int | None:
    """The first step both hold whose row differs, comparing the rows' bytes."""
    differ = [s for s in a.keys() & b.keys() if a[s] != b[s]]
    return min(differ) if differ else None
