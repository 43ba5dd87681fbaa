"""Rule-outs of the §2-§6 leaves: evidence that contradicts a leaf its node led to (the walker then moves on
instead of naming it). Each takes the run's Evidence and the node's Finding."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.checks.run_lr_loss import check_update_ratio, peak_update_ratio, train_smooth, val_points
from minitrain.analysis.checks.logged import lr_loss_reading
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.checks.finding import Finding
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


def rule_out_lr_too_large(ev: Evidence, at: Finding) -> Finding:
    """A run whose LR is far too large also memorises, drives training loss to ~0 and climbs in validation."""
    f = check_update_ratio(ev)
    return Finding(f.matched, f.value, f.shown)


def rule_out_updates_above_course(ev: Evidence, at: Finding) -> Finding:
    """A broken mask at the course's LR moves the weights as a healthy run does; a run whose updates at the
    peak LR are larger than that (an LR several times the course's, even one §2.5 does not call too high, as
    qk-layernorm keeps the updates smaller at a given LR) memorises and climbs in validation the same way."""
    if len(ev.rows) < T["ur_run_steps"]:  # early in any run the ratio is high whatever the LR (as §2.5)
        return Finding(False, None, f"a run of {len(ev.rows)} steps: updates judged on {T['ur_run_steps']:g}+ steps")
    med = peak_update_ratio(ev)
    return Finding(bool(math.isfinite(med) and med > T["mask_ur"]), med,
                   f"median update-to-weight ratio {fmt(med, 3)} at the peak LR (a broken mask at the course's LR: "
                   f"at most {T['mask_ur']:g})")


def rule_out_collapse_after_best_val(ev: Evidence, at: Finding) -> Finding:
    """A mask broken from step 0 lets training peek from the start: its training loss falls below half the
    baseline while validation is still improving. When it falls there only after validation's best, something
    changed mid-run (inputs that hold their targets from step K on, say), not the mask."""
    idx, val = val_points(ev)
    train = train_smooth(ev)
    below = np.flatnonzero(train < T["mask_train"] * ev.ngram_val_loss) if ev.ngram_val_loss else []
    if not len(idx) or not len(below):
        return Finding(False, None, "not measurable")
    best = int(idx[int(np.argmin(val))])
    return Finding(int(below[0]) > best, ev.step_at(int(below[0])),
                   f"training loss below {T['mask_train']:g} x the baseline from step {ev.step_at(int(below[0]))}; "
                   f"best validation at step {ev.step_at(best)}")


def rule_out_val_not_climbing(ev: Evidence, at: Finding) -> Finding:
    """A too-high LR memorises the training split: validation climbs after an early best. Updates larger than
    this model's healthy ones whose validation never climbed did not do what the leaf names: another optimizer
    setting also moves the weights further per step (beta1 0.5: ~2.5x) with no harm to see. Unless the loss
    shows the harm another way (it climbed or stalled at the peak LR, logged.lr_loss_reading): a run too short
    to memorise, or validated on the probe path, then keeps §2.E."""
    idx, val = val_points(ev)
    if len(idx) < 3:
        return Finding(False, None, "fewer than 3 validation points")
    stalled = lr_loss_reading(ev)  # a validation that never climbed clears nothing when the loss itself shows harm
    if stalled.matched:
        return Finding(False, None, f"validation never climbed, but the loss shows the LR's harm: {stalled.shown}")
    best, last = float(np.min(val)), float(val[-1])
    return Finding(last <= T["mask_rise"] * best, last / best,
                   f"last validation {fmt(last)} = {last / best:.2f} x its best {fmt(best)} (a memorising run climbs "
                   f"above {T['mask_rise']:g}x)")


def rule_out_val_above_untrained(ev: Evidence, at: Finding) -> Finding:
    """A broken mask's validation (causal) stays near the n-gram baseline; above ln V the model learned
    something confidently wrong at validation time (a leak), not merely to peek."""
    idx, val = val_points(ev)
    val = val[idx > 0]  # step 0's is the untrained model's own (about ln V)
    if not len(val):
        return Finding(False, None, "no validation points after step 0")
    worst = float(np.max(val))
    return Finding(worst > T["leak_val"] * ev.ln_v, worst,
                   f"worst validation loss {fmt(worst)} vs ln V {ev.ln_v:.3f}")


def rule_out_v_spread(ev: Evidence, at: Finding) -> Finding:
    """A corruption touches one tensor's v at one step; when many tensors' v leave the recurrence at the same
    step, the optimizer itself changed (its beta2 or eps, or it was rebuilt)."""
    vf = ev.v_factor
    if vf is None or at.index is None:
        return Finding(False, None, "not measurable")
    thr = max(math.log(T["v_factor"]), T["v_noise_mult"] * vf["noise"])
    off = [n for n, lf in vf["log_f_by_tensor"].items() if at.index < len(lf) and np.isfinite(lf[at.index])
           and abs(lf[at.index]) > thr]
    share = len(off) / max(1, len(vf["log_f_by_tensor"]))
    return Finding(share > T["v_spread"], share, f"{len(off)} of {len(vf['log_f_by_tensor'])} tensors' v left "
                                                 f"the recurrence at step {ev.step_at(at.index)}")


def rule_out_loss0_below_chance(ev: Evidence, at: Finding) -> Finding:
    """A wrong init or loss reduction makes the step-0 loss too HIGH (or the gradient too large); an untrained
    model cannot score below chance (ln V) unless its training inputs reveal the targets. (Below 4.0, §1.2 has
    already said: not an untrained model.)"""
    x = ev.loss[0]
    val0 = ev.val_loss[0] if np.isfinite(ev.val_loss[0]) else None
    shown = f"step-0 training loss {fmt(x)} < ln V - {T['loss0_band']} = {ev.ln_v - T['loss0_band']:.3f}" + (
        f" while step-0 validation is {fmt(val0)}" if val0 is not None else "")
    return Finding(bool(math.isfinite(x) and x < ev.ln_v - T["loss0_band"]), x, shown)
