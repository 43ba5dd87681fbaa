"""What a None in a metrics row means: each value is written as null when it is not finite. THE non-finite rule:
the loop stops a run on the first row holding one, and the walker's §3.1, the page's marker, the lab report and
the LR sweep all read it from here (analysis/definitions.py lists it with the other definitions), so they all
name the same step."""
from __future__ import annotations

PARAM_STAT_WHAT = {"g": "gradient", "u": "weights (update)", "ur": "weights (update ratio)", "vm": "Adam's v",
                   "vx": "Adam's v", "vn": "Adam's v", "r": "Adam's update statistic"}


def non_finite_in(row: dict) -> str | None:
    """What in this step's row is non-finite (None when everything is finite): the loss, the gradient norm,
    the logits, an activation, a spectral norm, or a per-tensor statistic (weights, gradients, Adam's moments)."""
    if row["loss"] is None:
        return "loss"
    if row.get("grad_norm", 0.0) is None:  # absent (an imported log without one): not measured, not non-finite
        return "gradient norm"
    if row.get("logit_max", 0.0) is None:
        return "logits"
    if any(a is None for a in row.get("act") or []):
        return "activations"
    for name, sigma in (row.get("sigma") or {}).items():
        if sigma is None:
            return f"spectral norm of {name}"
    for name, stats in (row.get("params") or {}).items():
        for key, value in stats.items():
            if value is None:
                return f"{PARAM_STAT_WHAT.get(key, key)} of {name}"
    return None


def is_non_finite(row: dict) -> bool:
    """Whether this step's row is a non-finite step: a value in it is non-finite (non_finite_in), or it counts
    non-finite values in the loss or the gradients (the `nonfinite` field, docs/metrics.md)."""
    return non_finite_in(row) is not None or bool(row.get("nonfinite"))


def first_non_finite_step(rows: list[dict]) -> int | None:
    """The step of the first non-finite row (is_non_finite); None when every row is finite."""
    return next((row["step"] for row in rows if is_non_finite(row)), None)
