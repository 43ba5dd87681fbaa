"""What `minitrain explain` judges: whether the walker's anomaly is still there in a counterfactual replay, and
what the set of replays concludes, in the tree's words.

The anomaly is measured on a replay's rows (the recorded rows before its checkpoint, then the replayed ones)
by the same statistics the walker uses (evidence.py): the loss excess at S (nats above the 50-step trailing
median), the pre-clip norm at S over its trailing median, the largest loss excess after S in the replayed
window, and the DECIDING signal of the leaf's cause, judged by the tree's own threshold:

    bad_batch decided by §4.1                the batch's repeated-row share >= dup_share
                                             at S
    bad_batch (otherwise), target_leak       loss excess at S, in σ of the >= outlier_z, and a row's worth
                                             run's own noise               (outlier_rows x ln V / batch)
    stuck_loader                             the longest run of repeated   >= stuck_steps
                                             batches from S in the window
    lr_spike                                 the LR's one-step change at S outside [1/lr_jump, lr_jump]
    gradient_explosion                       every tensor's g jump at S    >= gn_all_up_z (σ, beyond the loss)
    optimizer_state_corruption / _setting    the tensor's Adam v at the    outside [1/V_JUMP, V_JUMP]
                                             window's end over its v at S-1
    any other cause                          loss excess at S (as bad_batch) or the pre-clip norm jump at S
                                             (>= gn_huge_z σ beyond the loss's)

A counterfactual "removes" the anomaly when the identical replay shows it and the counterfactual does not. The
leaf's remedy is judged on what it changes: one that puts the state back (restore_moments) on the deciding
signal; one that acts on the update at S (skip_batch, zclip), which cannot change the signal logged at S, on the
update at S and the loss excess over the steps after it.
Each counterfactual has a kind: data (a batch replaced or skipped), state (Adam's moments put back), clipping
(the clip changed), and the conclusion follows the first kind that removes it.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from minitrain.analysis.definitions import V_JUMP, clipping_off, excess_over_baseline, v_jumped
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.thresholds import T
from minitrain.core.config import TrainConfig

FEW = 3  # "the few steps before S": their batches swapped, Adam's moments put back before them
AFTER = 20  # replays run to S + AFTER: the window the after-effect is measured over

# the counterfactual kind of each registered remedy (core/remedy.py)
REMEDY_KIND = {"skip_batch": "data", "restore_moments": "state", "zclip": "clipping"}

# what the walker's cause says drove the anomaly, in the counterfactuals' terms
EXPECTED_KIND = {"bad_batch": "data", "stuck_loader": "data", "target_leak": "data",
                 "optimizer_state_corruption": "state", "optimizer_setting": "state",
                 "gradient_explosion": "step", "lr_spike": "step"}

CONCLUSIONS = {
    "data": "data-driven: the batch at {s} alone causes it",
    "data_before": "data-driven: the batches before {s} cause it",
    "state": "state-driven: the optimizer state before {s} causes it",
    "state_at": "state-driven: the optimizer state changed at {s} carries it",
    "step": "made at step {s} itself: neither its batch nor the state before it causes it",
    "absent": "the identical replay does not show the anomaly: nothing to explain at {s}",
}
KIND_OF_CONCLUSION = {"data": "data", "data_before": "data", "state": "state", "state_at": "state", "step": "step",
                      "absent": None}


def involves_clipping(cause: str | None, case: str | None) -> bool:
    """Whether the leaf's mechanism involves clipping (its remedy or its text per clipping case)."""
    return cause == "gradient_explosion" or bool(case and "clipping" in case)


def _f(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def measure(ev: Evidence, step: int, cause: str | None, tensor: str | None = None, until: int | None = None,
            decided_by: str | None = None) -> dict:
    """The anomaly at `step` on one replay's rows (those before step `until`, default all): the walker's
    statistics at `step`, the loss excess after it (its mean over the window: a batch's own loss wanders by
    a few tenths of a nat, the mean of twenty does not) and the deciding signal."""
    # all-NaN windows are expected in a broken replay: they read as "not there", not as warnings (as in walk)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _measure(ev, step, cause, tensor, until, decided_by)


def _measure(ev: Evidence, step: int, cause: str | None, tensor: str | None, until: int | None,
             decided_by: str | None) -> dict:
    where = np.flatnonzero(ev.steps == step)
    if not len(where):
        return {"step": step, "missing": True, "present": None}
    i = int(where[0])
    end = len(ev.steps) if until is None else int(np.searchsorted(ev.steps, until))
    after = ev.loss_excess[i + 1:end]
    finite = after[np.isfinite(after)]
    out = {"step": step, "loss_excess": _f(ev.loss_excess[i]),
           "grad_norm_ratio": _f(math.exp(ev.gn_log_ratio[i])) if np.isfinite(ev.gn_log_ratio[i]) else None,
           "after_mean_loss_excess": _f(finite.mean()) if len(finite) else None,
           "after_max_loss_excess": _f(finite.max()) if len(finite) else None,
           "after_steps": int(len(after)), "update_at_S": _largest_update(ev, i)}
    out.update(_deciding(ev, i, end - 1, cause, tensor, out, decided_by))
    return out


def _largest_update(ev: Evidence, i: int) -> float | None:
    """The largest update-to-weight ratio over the tensors at row i (what a remedy on the update changes)."""
    if "ur" not in ev.param_keys or not ev.param_names:
        return None
    ur = np.array([ev.param(n, "ur")[i] for n in ev.param_names], dtype=float)
    return _f(np.nanmax(ur)) if np.isfinite(ur).any() else None


def _deciding(ev: Evidence, i: int, end: int, cause: str | None, tensor: str | None, m: dict,
              decided_by: str | None) -> dict:
    if cause == "bad_batch" and decided_by == "§4.1" and ev.batch_rows[i] > 1:
        share = float(ev.batch("dup_rows")[i] / ev.batch_rows[i])
        return {"signal": "share of the batch's rows that repeat a row of it, at S", "value": _f(share),
                "unit": "share", "threshold": f">= {T['dup_share']:g}",
                "present": bool(np.isfinite(share) and share >= T["dup_share"])}
    if cause == "lr_spike" and np.isfinite(ev.lr_step_ratio[i]):
        r = float(ev.lr_step_ratio[i])
        return {"signal": "the LR's one-step change at S", "value": r, "unit": "x",
                "threshold": f"outside [1/{T['lr_jump']:g}, {T['lr_jump']:g}]",
                "present": abs(math.log(r)) >= math.log(T["lr_jump"])}
    if cause == "stuck_loader":
        run = int(ev.repeat_run[i:end + 1].max()) if end >= i else 0
        return {"signal": "the longest run of repeated batches from S", "value": float(run), "unit": "steps",
                "threshold": f">= {T['stuck_steps']:g}", "present": run >= T["stuck_steps"]}
    if cause in ("optimizer_state_corruption", "optimizer_setting") and tensor and tensor in ev.param_names and i > 0:
        vm = ev.param(tensor, "vm")
        ratio = vm[end] / vm[i - 1] if vm[i - 1] > 0 else math.nan
        present = v_jumped(float(ratio))
        return {"signal": f"Adam v of {tensor} at step {int(ev.steps[end])} / at step {int(ev.steps[i - 1])}",
                "value": _f(ratio), "unit": "x", "threshold": f"outside [1/{V_JUMP:g}, {V_JUMP:g}]",
                "present": present}
    if cause == "gradient_explosion" and ev.g_log_ratio is not None and np.isfinite(ev.g_all_up_z[i]):
        up = float(ev.g_all_up_z[i])
        return {"signal": "every tensor's gradient jump at S (beyond the loss's)", "value": up, "unit": "σ",
                "threshold": f">= {T['gn_all_up_z']:g} σ", "present": up >= T["gn_all_up_z"]}
    z, gz = _f(ev.loss_z[i]), _f(ev.gn_beyond_loss_z[i])
    loss_on = z is not None and z >= T["outlier_z"] and ev.loss_excess[i] >= T["outlier_rows"] * ev.row_loss_unit
    row = f"{T['outlier_rows']:g} x ln V / batch nats"
    if cause in ("bad_batch", "target_leak") or gz is None:
        return {"signal": "loss excess at S, in σ of the run's own loss noise", "value": z, "unit": "σ",
                "threshold": f">= {T['outlier_z']:g} σ and >= {row}", "present": loss_on}
    return {"signal": "loss excess at S or pre-clip norm jump at S (beyond the loss's)",
            "value": z if loss_on else gz, "unit": "σ",
            "threshold": f">= {T['outlier_z']:g} σ and >= {row}, or >= {T['gn_huge_z']:g} σ",
            "present": loss_on or gz >= T["gn_huge_z"]}


def verdict_of(m: dict, identical: dict) -> dict:
    """One counterfactual against the identical replay: still there? and by how much (its deciding value
    over the identical replay's)."""
    if m.get("missing"):
        return {"still_there": None, "by": "no row at S in this replay"}
    there = bool(m["present"])
    a, b = m.get("value"), identical.get("value")
    if a is None or b is None:
        by = "not measured"
    elif m.get("unit") == "x":
        by = f"x{b:.3g} -> x{a:.3g}"
    elif m.get("unit") == "share":
        by = f"{b:.0%} -> {a:.0%}"
    elif m.get("unit") == "steps":
        by = f"{b:g} -> {a:g} steps"
    else:
        by = f"{b:+.3f} -> {a:+.3f} {m.get('unit', '')}".rstrip()
    return {"still_there": there, "removed": bool(identical.get("present")) and not there, "by": by}


def conclude(rows: list[dict], cause: str | None, reproduced: dict, grad_clip: float | None) -> dict:
    """The conclusion of a set of counterfactuals. `rows`: {"name", "kind", "measure", "verdict"}, the identical
    replay first; `reproduced`: {"exact": bool, "first_difference": step or None}."""
    lines = []
    if not reproduced.get("exact"):
        lines.append("the identical replay does NOT reproduce the recorded rows"
                     + (f" (first difference at step {reproduced['first_difference']})"
                        if reproduced.get("first_difference") is not None else "")
                     + ": the run was not deterministic or its files were changed; the counterfactuals below "
                       "compare with the replay, not with the record")
    by = {r["name"]: r for r in rows}
    identical = by["identical"]["measure"]

    def removes(name: str) -> bool:
        return name in by and bool(by[name]["verdict"].get("removed"))

    remedy = next((r for r in rows if r["name"] == "remedy"), None)
    if not identical.get("present"):
        key = "absent"
    elif removes("batch_at_S"):
        key = "data"
    elif removes("batches_before"):
        key = "data_before"
    elif removes("state_before"):
        key = "state"
    elif remedy and remedy["kind"] == "state" and remedy["verdict"].get("removed"):
        key = "state_at"
    else:
        key = "step"
    main = CONCLUSIONS[key].format(s=identical.get("step"))
    lines.append(main)
    if remedy and remedy["kind"] == "state":  # it puts the state back: the deciding signal is what it changes
        lines.append(f"the leaf's remedy ({remedy['remedy']}) "
                     + ("removes it" if remedy["verdict"].get("removed") else "does not remove it"
                        + _after_note(remedy["measure"], identical)))
    elif remedy:  # it acts on the update at S: the batch's own signal at S is logged before it, and stays
        lines.append(_update_remedy_line(remedy["remedy"], remedy["measure"], identical))
    clip = next((r for r in rows if r["kind"] == "clipping" and r["name"] != "remedy"), None)
    if clip:
        lines.append(_clipping_line(clip["measure"], identical, grad_clip))
    kind = KIND_OF_CONCLUSION[key]
    expected = EXPECTED_KIND.get(cause or "")
    agrees = None if expected is None or kind is None else expected == kind
    if agrees is False:
        lines.append(f"the counterfactuals disagree with the walker: its cause {cause} implies {expected}-driven, "
                     f"the replays say {kind}-driven")
    return {"conclusion": main, "key": key, "kind": kind,
            "expected_kind": expected, "agrees_with_walker": agrees, "reproduced": bool(reproduced.get("exact")),
            "lines": lines}


def _update_remedy_line(name: str, m: dict, identical: dict) -> str:
    """A remedy that acts on the update at S (skip_batch, zclip), judged on what it is meant to change: the
    update at S and the loss excess over the steps after S (the signal at S is logged before it acts)."""
    parts = []
    a, b = m.get("update_at_S"), identical.get("update_at_S")
    if a is not None and b is not None:
        parts.append(f"largest |\u0394w|/|w| at S {b:.3g} -> {a:.3g}")
    a, b = m.get("after_mean_loss_excess"), identical.get("after_mean_loss_excess")
    if a is None or b is None:
        return f"the leaf's remedy ({name}) acts on the update at S; the replay has no rows after S to judge it"
    parts.append(f"mean loss excess over the steps after S {b:+.3f} -> {a:+.3f} nats")
    if excess_over_baseline(b) and not excess_over_baseline(a):
        what = "removes the anomaly's cost after S"
    elif excess_over_baseline(a):
        what = "leaves a spike's excess after S"
    else:
        what = "changes the update at S; the excess after S is below a spike's with and without it"
    return f"the leaf's remedy ({name}) acts on the update at S, not on the batch's own signal there: {what} (" \
           + "; ".join(parts) + ")"


def _after_note(m: dict, identical: dict) -> str:
    a, b = m.get("after_mean_loss_excess"), identical.get("after_mean_loss_excess")
    if a is None or b is None:
        return ""
    return f" at S (mean loss excess over the steps after it {b:+.3f} -> {a:+.3f} nats)"


def _clipping_line(m: dict, identical: dict, grad_clip: float | None) -> str:
    """Does clipping contain the anomaly's effect? The mean loss excess after S with and without it: clipping
    contains it when turning it off adds a spike's excess (definitions.excess_over_baseline)."""
    a, b = m.get("after_mean_loss_excess"), identical.get("after_mean_loss_excess")
    if a is None or b is None:
        return "clipping: the replay has no rows after S to compare"
    if clipping_off(grad_clip):  # the run had no clipping; the counterfactual turns it on
        on, off = a, b
    else:
        on, off = b, a
    words = (f"mean loss excess over the steps after S {off:+.3f} nats without clipping, {on:+.3f} with it "
             f"at {TrainConfig.grad_clip if clipping_off(grad_clip) else grad_clip:g}")
    if excess_over_baseline(off - on):
        return ("clipping would contain it: " if clipping_off(grad_clip) else "clipping contains it: ") + words
    return "clipping changes little: " + words
