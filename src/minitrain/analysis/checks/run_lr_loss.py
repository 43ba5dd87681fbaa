"""§1-§3: did the run start, is the LR schedule applying, is the loss healthy."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.evidence import ASSUMED_VOCAB, Evidence
from minitrain.analysis.checks.finding import EXACT, X_THRESHOLD, Crossing, Finding, miss, near_ratio
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt
from minitrain.run.nonfinite import non_finite_in


# --- §1 did the run start? ---


def scaled_to_vocab(ev: Evidence, key: str) -> float:
    """A step-0 loss bound the course gives in nats for its vocabulary, as the same multiple of this run's
    ln V (a character vocabulary of 30 starts near 3.4 nats, the course's 512 near 6.2)."""
    return T[key] * ev.ln_v / math.log(ASSUMED_VOCAB)


def check_loss0_high(ev: Evidence) -> Finding:
    x, bound = ev.loss[0], scaled_to_vocab(ev, "loss0_high")
    return Finding(not math.isfinite(x) or x > bound, x, f"step-0 loss {fmt(x)} (bound {bound:.3g} at ln V "
                   f"{ev.ln_v:.3g})", 0, crossing=Crossing(x, bound, "nats") if math.isfinite(x) else EXACT)


def check_loss0_low(ev: Evidence) -> Finding:
    x, bound = ev.loss[0], scaled_to_vocab(ev, "loss0_low")
    return Finding(x < bound, x, f"step-0 loss {fmt(x)} (bound {bound:.3g} at ln V {ev.ln_v:.3g})", 0,
                   crossing=Crossing(bound / x, 1.0, X_THRESHOLD) if x > 0 else EXACT)


def check_loss0_band(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(abs(x - ev.ln_v) > T["loss0_band"], x,
                   f"step-0 loss {fmt(x)}, ln V = {ev.ln_v:.3f} (V = {ev.vocab}{'' if ev.vocab_size else ', assumed'})", 0,
                   crossing=Crossing(abs(x - ev.ln_v), T["loss0_band"], "nats from ln V"))


def first_step_gn(ev: Evidence) -> tuple[float, int]:
    """The first step's gradient norm (the course's "step 1" counts from 1; our rows count from 0): the only
    gradient that reflects the initialisation alone, before any update."""
    return ev.grad_norm[0], 0


def check_gn1_high(ev: Evidence) -> Finding:
    x, i = first_step_gn(ev)
    return Finding(math.isfinite(x) and x > T["gn1_high"], x, f"first-step (step {ev.step_at(i)}) grad norm {fmt(x)}", i,
                   crossing=Crossing(x, T["gn1_high"], "L2 norm"))


def check_gn1_low(ev: Evidence) -> Finding:
    x, i = first_step_gn(ev)
    return Finding(math.isfinite(x) and x < T["gn1_low"], x, f"first-step (step {ev.step_at(i)}) grad norm {fmt(x)}", i,
                   crossing=Crossing(T["gn1_low"] / x, 1.0, X_THRESHOLD) if x > 0 else EXACT)


# --- §2 is the LR schedule applying? ---


def _lr_range(ev: Evidence) -> tuple[float, float]:
    lr = ev.lr[np.isfinite(ev.lr)]
    return (float(lr.min()), float(lr.max())) if len(lr) else (math.nan, math.nan)


def check_lr_constant(ev: Evidence) -> Finding:
    lo, hi = _lr_range(ev)
    if len(ev.rows) < 3 or not hi > 0:
        return Finding(False, None, f"LR range [{fmt(lo)}, {fmt(hi)}]")
    rel = (hi - lo) / hi
    return Finding(rel < T["lr_flat"], rel, f"LR {fmt(lo)}..{fmt(hi)}, relative range {fmt(rel, 3)}",
                   crossing=Crossing(T["lr_flat"] / rel, 1.0, X_THRESHOLD) if rel > 0 else EXACT)


def check_lr_zero(ev: Evidence) -> Finding:
    lo, hi = _lr_range(ev)
    return Finding(hi == 0, hi, f"largest LR {fmt(hi)}", crossing=EXACT)


def check_no_warmup(ev: Evidence) -> Finding:
    """The first step at (near) the peak LR. Where the schedule the user meant is unknown (an imported run),
    no warmup is judged against the peak's size (T['warmup_lr']) and only in a schedule that varies: a constant
    LR is a choice whose size is §2.5's question, and a small peak needs no warmup."""
    lo, hi = _lr_range(ev)
    if len(ev.rows) < 10 or not hi > 0:
        return miss("fewer than 10 steps")
    if not ev.knows("schedule"):
        if hi < T["warmup_lr"]:
            return miss(f"peak LR {fmt(hi)} below {T['warmup_lr']:g}: small enough to start at")
        if (hi - lo) / hi < T["lr_flat"]:
            return miss(f"a constant LR {fmt(hi)}: no schedule, so no warmup to miss (its size is §2.5's)")
    share = ev.lr[0] / hi
    return Finding(share >= T["warmup_share"], share,
                   f"first-step LR {fmt(ev.lr[0])} = {share:.0%} of the peak {fmt(hi)}", 0,
                   crossing=Crossing(share, T["warmup_share"], "share of the peak LR"))


def check_lr_jump(ev: Evidence) -> Finding:
    """A one-step change of the LR by more than x1.8 (up or down) from step 2 on, out of a steady schedule (the
    step before changed it by less than x1.2): a linear warmup changes it by at most x1.5 from step 2 and a
    cosine far less, so the schedule did not make it; a warmup from an LR of 0 (transformers' schedules) or a
    decay to 0 changes it by large factors near those ends, but then the step before does too."""
    ratio = ev.lr_step_ratio.copy()
    ratio[:2] = np.nan
    if not np.isfinite(ratio).any():
        return miss("fewer than 3 steps with a non-zero LR")
    log = np.nan_to_num(np.log(ratio), nan=0.0)
    jumps = np.abs(log) >= math.log(T["lr_jump"])
    # a jump out of a steady schedule: near the ends of a warmup from 0 or a decay to 0 every step is a big factor
    before = np.abs(np.log(np.concatenate([[np.nan], ev.lr_step_ratio[:-1]])))
    steady = np.isfinite(before) & (before < math.log(T["lr_steady"]))
    big = np.flatnonzero(jumps & steady)
    if not len(big):
        i = int(np.argmax(np.where(steady, np.abs(log), 0.0)))
        x = float(math.exp(abs(log[i])))
        if not np.isfinite(ratio[i]):  # no steady step changed the LR at all (a constant LR)
            return Finding(False, 1.0, "the LR never changed from one step to the next", None, near=0.0)
        return Finding(False, x, f"largest one-step LR change x{fmt(float(ratio[i]), 3)} at step {ev.step_at(i)}", i,
                       near=near_ratio(x, T["lr_jump"]))
    start = int(big[0])
    end = next((int(b) for b in np.flatnonzero(jumps) if b > start and np.sign(log[b]) != np.sign(log[start])), None)
    mult = float(ratio[start])
    span = (f"back {end - start} steps later (step {ev.step_at(end)})" if end is not None else "not back by the end")
    return Finding(True, float(math.exp(abs(log[start]))),
                   f"LR x{fmt(mult, 3)} in one step at step {ev.step_at(start)}, {span}", start,
                   {"multiplier": mult, "start": ev.step_at(start), "steps": (end - start) if end is not None else None},
                   crossing=Crossing(float(math.exp(abs(log[start]))), T["lr_jump"], "x one-step LR change"))


def peak_update_ratio(ev: Evidence) -> float:
    """The median update-to-weight ratio over the steps that ran at half the peak LR or more. With Adam the
    update's size follows the LR, whatever the gradient's size; read at the schedule's peak, the ratio does not
    depend on how long a warmup or a decay (to 0, say) kept the LR low."""
    ur = ev.update_ratio
    _, hi = _lr_range(ev)
    peak = np.isfinite(ur) & (ev.lr >= T["ur_peak_share"] * hi)
    return float(np.median(ur[peak])) if peak.any() else math.nan


def check_update_ratio(ev: Evidence) -> Finding:
    """How far each step moves the weights at the schedule's peak (peak_update_ratio)."""
    ur = ev.update_ratio
    if not np.isfinite(ur).any():
        return miss("no per-parameter update ratios (telemetry: basic?)")
    if len(ur) < T["ur_run_steps"]:  # "over the run" needs a run (and one that died early is §3.1's)
        return miss(f"a run of {len(ur)} steps; the LR's size is judged on runs of {T['ur_run_steps']:g}+ steps")
    med = peak_update_ratio(ev)
    if not math.isfinite(med):
        return miss("no update ratio measured at the peak LR")
    whole = float(np.nanmedian(ur))
    return Finding(med > T["ur_high"], med,
                   f"median update-to-weight ratio {fmt(med, 3)} at {T['ur_peak_share']:.0%} of the peak LR or more "
                   f"(over the whole run {fmt(whole, 3)}); healthy here about 1e-3 to 4e-3", None,
                   {"median_at_peak": med, "median": whole},
                   near=med / T["ur_high"], crossing=Crossing(med, T["ur_high"], "update / weight at the peak LR"))


# --- §3 loss health ---


def check_nonfinite(ev: Evidence) -> Finding:
    i = ev.nonfinite_index
    if i is None:
        return Finding(False, 0, "no non-finite loss, gradient norm or count")
    what = non_finite_in(ev.rows[i]) or "non-finite count"
    return Finding(True, 1, f"first non-finite value at step {ev.step_at(i)} ({what})", i, crossing=EXACT)


def val_points(ev: Evidence) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(np.isfinite(ev.val_loss))
    return idx, ev.val_loss[idx]


def train_smooth(ev: Evidence) -> np.ndarray:
    """Training loss, median over the surrounding 21 steps (one batch's loss is noisy)."""
    from numpy.lib.stride_tricks import sliding_window_view

    if len(ev.loss) < 21:
        return ev.loss.copy()
    padded = np.pad(ev.loss, 10, mode="edge")
    return np.nanmedian(sliding_window_view(padded, 21), axis=1)


def check_mask(ev: Evidence) -> Finding:
    """A model that sees the future in training drives its training loss far below the n-gram baseline but
    never learns causal prediction: validation (always causal) bottoms out near the baseline, then climbs
    while training loss keeps falling. A healthy model, even one that memorises its split, first gets
    validation well below the baseline; a short healthy run has not climbed yet."""
    idx, val = val_points(ev)
    if not ev.ngram_val_loss or len(idx) < 3:
        return miss("no n-gram baseline or fewer than 3 validation points")
    base = ev.ngram_val_loss
    train = train_smooth(ev)
    best_at = int(np.argmin(val))
    best_val, last_val = float(val[best_at]), float(val[-1])
    below = np.flatnonzero(train < T["mask_train"] * base)
    shown = (f"smoothed training loss down to {fmt(float(np.nanmin(train)))} = {np.nanmin(train) / base:.2f} x "
             f"baseline {fmt(base)}; best validation {fmt(best_val)} = {best_val / base:.2f} x baseline at step "
             f"{ev.step_at(int(idx[best_at]))}, last {fmt(last_val)} = {last_val / best_val:.2f} x best")
    matched = len(below) > 0 and best_val > T["mask_val"] * base and last_val > T["mask_rise"] * best_val
    # closeness: the weakest of its three conditions (each as a multiple of its own threshold)
    near = min(T["mask_train"] * base / max(float(np.nanmin(train)), 1e-9), (best_val / base) / T["mask_val"],
               (last_val / best_val) / T["mask_rise"])
    return Finding(matched, best_val / base, shown, int(idx[best_at]),
                   {"train_min": float(np.nanmin(train)), "best_val": best_val, "last_val": last_val,
                    "ngram_val_loss": base}, near=min(near, 1.0),
                   crossing=Crossing(near, 1.0, "x the threshold of its weakest condition"))


def leak_onset(ev: Evidence) -> tuple[int, float] | None:
    """The first loss jump of at least `outlier_z` σ of the run's own noise and a row's worth of chance-level
    loss (as §4.2 reads one) after which validation is measured again, and how far the last validation loss
    climbed over the best one before the jump (None: no such jump)."""
    idx, val = val_points(ev)
    jumps = np.flatnonzero((np.nan_to_num(ev.loss_z, nan=0.0) >= T["outlier_z"])
                           & (ev.loss_excess >= T["outlier_rows"] * ev.row_loss_unit))
    for j in jumps:
        if (idx <= j).any() and (idx > j).any():
            return int(j), float(val[-1] / val[idx <= j].min())
    return None


def check_target_leak(ev: Evidence) -> Finding:
    """Training loss far below the n-gram baseline while validation ends up worse than an untrained model's
    (above ln V): the model learned something that is confidently wrong at validation time, e.g. to copy an
    input that holds its target. A broken mask's validation stays near the baseline; a memorising run's
    stays below ln V. Before validation gets there, a leak that starts mid-run is seen at its onset: a loss
    jump far outside the run's own noise (the first batch whose inputs hold their targets), after which
    validation climbs `leak_climb` x its best before the jump and stays there (a bad batch is one step: the
    model recovers and validation does not climb)."""
    idx, val = val_points(ev)
    if not ev.ngram_val_loss or len(idx) < 2:
        return miss("no n-gram baseline or fewer than 2 validation points")
    train = train_smooth(ev)
    worst_at = int(np.argmax(val))
    worst = float(val[worst_at])
    low = float(np.nanmin(train))
    above = worst > T["leak_val"] * ev.ln_v and low < T["mask_train"] * ev.ngram_val_loss and worst_at > 0
    onset = leak_onset(ev)
    climbed = onset is not None and onset[1] > T["leak_climb"]
    first = next((int(j) for j, v in zip(idx, val) if v > T["leak_val"] * ev.ln_v and j > 0), None)
    if climbed:
        first = onset[0]
    elif first is not None:  # the onset: the first loss jump since validation was last normal (within x1.15 of its best)
        normal = [int(j) for n, j in enumerate(idx) if j < first and val[n] <= T["mask_rise"] * val[:n + 1].min()]
        start = normal[-1] if normal else 0
        jumps = np.flatnonzero(ev.loss_z[start:first + 1] >= T["outlier_z"])
        if len(jumps):
            first = start + int(jumps[0])
        elif ev.loss[0] < ev.ln_v - T["loss0_band"]:  # below chance from step 0: it leaked from the start
            first = 0
    shown = (f"worst validation loss {fmt(worst)} = {worst / ev.ln_v:.2f} x ln V at step "
             f"{ev.step_at(int(idx[worst_at]))}; smoothed training loss down to {fmt(low)} = "
             f"{low / ev.ngram_val_loss:.2f} x the n-gram baseline")
    if onset is not None:
        shown += (f"; loss jump at step {ev.step_at(onset[0])} ({ev.loss_z[onset[0]]:.1f} σ), last validation "
                  f"{onset[1]:.2f} x its best before it")
    worst_after_0 = float(np.max(val[idx > 0])) / ev.ln_v if (idx > 0).any() else math.nan
    crossing = (Crossing(worst_after_0, T["leak_val"], "x ln V (worst validation after step 0)") if above or not climbed
                else Crossing(onset[1], T["leak_climb"], "x validation's best before the loss jump"))
    return Finding(above or climbed, worst / ev.ln_v, shown, first if above or climbed else int(idx[worst_at]),
                   {"worst_val": worst, "ln_v": ev.ln_v, "train_min": low,
                    "onset": ev.step_at(onset[0]) if onset else None, "climb": onset[1] if onset else None},
                   near=(worst / ev.ln_v) / T["leak_val"] if worst_at > 0 else None, crossing=crossing)


def check_not_learning(ev: Evidence) -> Finding:
    if len(ev.rows) < 20:
        return miss("fewer than 20 steps")
    tail = ev.loss[len(ev.loss) - max(10, len(ev.loss) // 10):]
    end = float(np.nanmedian(tail))
    share = end / ev.loss[0]
    return Finding(share > T["not_learning"], share, f"final training loss {fmt(end)} = {share:.0%} of step-0 loss",
                   crossing=Crossing(share, T["not_learning"], "share of the step-0 loss"))
