"""What the stability tree reads on one run, laid out for the page: every question of the tree with this
run's measured value and threshold, the walker's verdict, and the per-step signals that only the tree
computes (§6.1's factor f, §7.1/§7.2's per-tensor gradient ratios), so each of them can be read off a
panel. The judging is stability.py's; this module only evaluates it everywhere instead of along one path.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from minitrain.analysis import stability
from minitrain.core.errors import UserError


def _num(x: float, digits: int = 5) -> float | None:
    return float(f"{x:.{digits}g}") if x is not None and math.isfinite(x) else None


def _ratio_series(log_values: np.ndarray) -> list[float | None]:
    return [_num(math.exp(x)) if np.isfinite(x) else None for x in log_values]


def questions(ev: stability.Evidence) -> list[dict]:
    """Every question of the tree, in reading order, evaluated on this run (not only those on the walk)."""
    out = []
    for section in stability.TREE:
        for it in section.items:
            if not isinstance(it, stability.Node):
                continue
            try:
                f = it.check(ev)
                measured, answer, step = f.shown, "yes" if f.matched else "no", ev.step_at(f.index)
            except (IndexError, ValueError, ZeroDivisionError) as e:  # a metric the run lacks
                measured, answer, step = f"cannot be measured here ({type(e).__name__})", "no", None
            out.append({"id": it.id, "question": it.question, "metric": it.metric, "panel": it.panel,
                        "threshold": it.threshold, "measured": measured, "answer": answer, "step": step})
    return out


def signals(ev: stability.Evidence) -> dict:
    """Per-step signals of §6.1 (f, the factor by which Adam's v moved beyond g², farthest from 1 over the
    tensors) and §7.1/§7.2 (smallest and largest per-tensor g / trailing median, the loss's own jump divided
    out), with their thresholds; empty without per-tensor telemetry."""
    out: dict = {"steps": [int(s) for s in ev.steps]}
    vf = ev.v_factor
    if vf:
        logs = np.stack(list(vf["log_f_by_tensor"].values()), 1)
        far = np.nanargmax(np.nan_to_num(np.abs(logs), nan=-1.0), axis=1)
        out["v_factor"] = _ratio_series(logs[np.arange(len(logs)), far])
        out["v_factor_band"] = [_num(math.exp(-stability.v_threshold(vf))), _num(math.exp(stability.v_threshold(vf)))]
        out["v_factor_noise"] = [_num(math.exp(-vf["noise"])), _num(math.exp(vf["noise"]))]
        out["v_factor_beta2"] = _num(vf["beta2"], 6)
    if ev.g_log_ratio is not None:
        out["g_all_up"] = _ratio_series(ev.g_all_up)
        out["g_all_down"] = _ratio_series(ev.g_all_down)
        out["g_all_thresholds"] = [stability.T["gn_all_down"], stability.T["gn_all_up"]]
    return out


def read(run: Path) -> dict | None:
    """The walker's verdict, every question and the tree's signals for one run; None when the walker cannot
    read it (no metrics, unordered steps: `minitrain diagnose RUN` says why)."""
    try:
        ev = stability.load_evidence(Path(run))
    except UserError:
        return None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        verdict = stability.walk(ev)
        return {"verdict": {k: verdict[k] for k in ("leaf", "title", "cause", "anomaly_step")},
                "questions": questions(ev), "signals": signals(ev)}
