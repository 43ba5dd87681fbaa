"""§9: the silent bugs: steps that run and a loss that still falls, but a step that does not do what
the loop says. The per-step signals are core/silent.py's, written into a row only at a step where they fired."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minitrain.analysis.evidence import Evidence, nanmedian, trailing_median_fast
from minitrain.analysis.checks.finding import EXACT, Crossing, Finding, X_THRESHOLD, miss
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


def _first_run(hits: list[bool], length: int) -> int | None:
    """The first index that starts `length` hits in a row."""
    streak = 0
    for i, hit in enumerate(hits):
        streak = streak + 1 if hit else 0
        if streak == length:
            return i - length + 1
    return None


def _tensors(ev: Evidence) -> int:
    return len(ev.param_names) or max((len(r.get("unchanged") or ()) for r in ev.rows), default=0)


def check_grads_carried(ev: Evidence) -> Finding:
    hits = ["grads_carried" in r for r in ev.rows]
    i = _first_run(hits, int(T["silent_steps"]))
    if i is None:
        return Finding(False, float(sum(hits)), f"no gradient carried the previous step's ({sum(hits)} steps "
                                                 f"flagged, {T['silent_steps']:g} in a row needed)")
    return Finding(True, ev.rows[i]["grads_carried"], f"from step {ev.step_at(i)} each gradient is the fresh one "
                   f"plus the previous step's (digest residual {ev.rows[i]['grads_carried']:.2g} of what was left)",
                   i, crossing=EXACT)


def _unchanged_run(ev: Evidence, every: bool) -> tuple[int | None, list[str]]:
    n = _tensors(ev)
    hits = [bool(r.get("unchanged")) and (len(r["unchanged"]) >= n) == every for r in ev.rows]
    i = _first_run(hits, int(T["silent_steps"]))
    return i, (list(ev.rows[i]["unchanged"]) if i is not None else [])


def check_update_not_applied(ev: Evidence) -> Finding:
    i, names = _unchanged_run(ev, every=True)
    if i is None:
        return Finding(False, None, "every step changed some weights")
    return Finding(True, float(len(names)), f"from step {ev.step_at(i)} the optimizer step changed no weight "
                   f"(all {len(names)} tensors equal before and after, LR > 0)", i, crossing=EXACT)


def check_frozen_parameters(ev: Evidence) -> Finding:
    i, names = _unchanged_run(ev, every=False)
    if i is None:
        return Finding(False, None, "every step changed every tensor it had a gradient for")
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return Finding(True, float(len(names)), f"from step {ev.step_at(i)} {len(names)} of {_tensors(ev)} tensors "
                   f"stopped changing ({shown})", i, {"tensors": names}, crossing=EXACT)


def check_loss_reduction(ev: Evidence) -> Finding:
    """A loss summed over tokens instead of averaged multiplies every gradient by the batch's token count from
    the step it began, for good, while the loss itself (a token mean when logged apart) does not move: a lasting
    level shift of the pre-clip norm by at least a row's worth of tokens, the loss's own level unchanged."""
    gn = ev.grad_norm
    n = len(gn)
    w = int(T["silent_window"])
    if n < 2 * w:
        return miss("too few steps")
    before = trailing_median_fast(gn)
    # every w-step window's median at once (ahead[i]: steps i..i+w-1), the same values as np.nanmedian's
    ahead_gn, ahead_loss = (nanmedian(sliding_window_view(x, w)) for x in (gn, ev.loss))
    # the loss's level read against the same trailing window as the norm's: a run an event damaged (an LR spike
    # throws the loss up and the norm with it, for good) moved the loss, a summed loss does not
    loss_before = np.exp(trailing_median_fast(np.log(np.where(ev.loss > 0, ev.loss, np.nan))))
    last = float(ahead_gn[-1])
    best, at = 0.0, None
    for i in range(w, n - w):
        if not (np.isfinite(before[i]) and before[i] > 0):
            continue
        ratio = float(ahead_gn[i]) / before[i]
        loss_move = max(abs(float(ahead_loss[i] / ahead_loss[i - w]) - 1),
                        abs(float(ahead_loss[i] / loss_before[i]) - 1))
        if last / before[i] >= T["loss_sum_shift"] and loss_move < T["loss_sum_loss_move"] and ratio > best:
            best, at = ratio, i
            if ratio >= T["loss_sum_shift"]:
                break
    if at is None:
        return Finding(False, None, "the pre-clip norm never shifted for good")
    if best >= T["loss_sum_shift"]:  # the onset: the window's first step already that far up
        at = next(j for j in range(at, at + w) if gn[j] / before[at] >= T["loss_sum_shift"])
    return Finding(best >= T["loss_sum_shift"], best, f"pre-clip grad norm x{fmt(best, 3)} its trailing median "
                   f"from step {ev.step_at(at)} on, for good, the loss's level unchanged (a summed loss scales the "
                   f"gradient by the batch's token count)", at, near=best / T["loss_sum_shift"],
                   crossing=Crossing(best, T["loss_sum_shift"], X_THRESHOLD))


def check_ranks_diverged(ev: Evidence) -> Finding:
    i = next((j for j, r in enumerate(ev.rows) if r.get("ranks_differ")), None)
    if i is None:
        return Finding(False, None, "the ranks' weights agree at every step (or one process)")
    names = ev.rows[i]["ranks_differ"]
    return Finding(True, float(len(names)), f"at step {ev.step_at(i)} the ranks' weights differ on {len(names)} "
                   f"tensors ({', '.join(names[:3])})", i, {"tensors": names}, crossing=EXACT)
