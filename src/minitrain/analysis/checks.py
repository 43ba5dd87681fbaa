"""The checks of the stability tree: each measures one thing on the run's Evidence and says whether it
matched its threshold (analysis/thresholds.py), with the measured value in words.

A node's check answers its question; a leaf's rule-out checks look for evidence that contradicts the leaf
(the walker then moves on instead of naming it). `near` says how close a check that did not match came to
its threshold (1 = at it), so the walker can name the closest leaves when it answers `unknown`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from minitrain.analysis.evidence import Evidence, trailing_median_fast
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt
from minitrain.run.nonfinite import non_finite_in


@dataclass(frozen=True)
class Crossing:
    """How far a matched rule was crossed, in the rule's own units: `measured` against `threshold` (both in
    `units`; a robust-z rule measures in units of the run's own noise). `ratio` >= 1 means crossed; the walker's
    confidence reads it. `units` "exact" marks an identity (a NaN, an LR of 0): no degree to it."""

    measured: float
    threshold: float
    units: str

    @property
    def ratio(self) -> float | None:
        if self.units == "exact" or not (math.isfinite(self.measured) and self.threshold > 0):
            return None
        return self.measured / self.threshold


EXACT = Crossing(math.nan, math.nan, "exact")
X_THRESHOLD = "x the threshold's own unit (no noise measure applies)"
SIGMA = "σ of the run's own trailing noise (robust z)"


@dataclass(frozen=True)
class Finding:
    """One node's measurement: the value, how it reads against the threshold, whether it matched."""

    matched: bool
    value: float | None
    shown: str
    index: int | None = None  # row index of the step the finding points at
    extra: dict = field(default_factory=dict)
    near: float | None = None  # how close an unmatched finding came to its threshold (1 = at it; None = n/a)
    crossing: Crossing | None = None  # the reading in the rule's units against its threshold (None: no degree)


def miss(why: str) -> Finding:
    return Finding(False, None, f"not measurable ({why})")


def _near(value: float, threshold: float, log: bool = True) -> float | None:
    """Closeness of a value to a threshold it must exceed: value / threshold (in log space for ratios)."""
    if value is None or not math.isfinite(value) or threshold <= 0 or value <= 0:
        return None
    if log:
        return max(0.0, math.log(value)) / math.log(threshold) if threshold > 1 else None
    return value / threshold


# --- §1 did the run start? ---


def check_loss0_high(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(not math.isfinite(x) or x > T["loss0_high"], x, f"step-0 loss {fmt(x)}", 0,
                   crossing=Crossing(x, T["loss0_high"], "nats") if math.isfinite(x) else EXACT)


def check_loss0_low(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(x < T["loss0_low"], x, f"step-0 loss {fmt(x)}", 0,
                   crossing=Crossing(T["loss0_low"] / x, 1.0, X_THRESHOLD) if x > 0 else EXACT)


def check_loss0_band(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(abs(x - ev.ln_v) > T["loss0_band"], x,
                   f"step-0 loss {fmt(x)}, ln V = {ev.ln_v:.3f} (V = {ev.vocab}{'' if ev.vocab_size else ', assumed'})", 0,
                   crossing=Crossing(abs(x - ev.ln_v), T["loss0_band"], "nats from ln V"))


def _gn1(ev: Evidence) -> tuple[float, int]:
    """The first step's gradient norm (the course's "step 1" counts from 1; our rows count from 0): the only
    gradient that reflects the initialisation alone, before any update."""
    return ev.grad_norm[0], 0


def check_gn1_high(ev: Evidence) -> Finding:
    x, i = _gn1(ev)
    return Finding(math.isfinite(x) and x > T["gn1_high"], x, f"first-step (step {ev.step_at(i)}) grad norm {fmt(x)}", i,
                   crossing=Crossing(x, T["gn1_high"], "L2 norm"))


def check_gn1_low(ev: Evidence) -> Finding:
    x, i = _gn1(ev)
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
    lo, hi = _lr_range(ev)
    if len(ev.rows) < 10 or not hi > 0:
        return miss("fewer than 10 steps")
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
        return Finding(False, x, f"largest one-step LR change x{fmt(float(ratio[i]), 3)} at step {ev.step_at(i)}", i,
                       near=_near(x, T["lr_jump"]))
    start = int(big[0])
    end = next((int(b) for b in np.flatnonzero(jumps) if b > start and np.sign(log[b]) != np.sign(log[start])), None)
    mult = float(ratio[start])
    span = (f"back {end - start} steps later (step {ev.step_at(end)})" if end is not None else "not back by the end")
    return Finding(True, float(math.exp(abs(log[start]))),
                   f"LR x{fmt(mult, 3)} in one step at step {ev.step_at(start)}, {span}", start,
                   {"multiplier": mult, "start": ev.step_at(start), "steps": (end - start) if end is not None else None},
                   crossing=Crossing(float(math.exp(abs(log[start]))), T["lr_jump"], "x one-step LR change"))


def check_update_ratio(ev: Evidence) -> Finding:
    """How far each step moves the weights: the median over tensors of |update| / |weight|, then its median
    over the run. With Adam the update's size follows the LR, whatever the gradient's size."""
    ur = ev.update_ratio
    if not np.isfinite(ur).any():
        return miss("no per-parameter update ratios (telemetry: basic?)")
    if len(ur) < T["ur_run_steps"]:  # "over the run" needs a run (and one that died early is §3.1's)
        return miss(f"a run of {len(ur)} steps; the LR's size is judged on runs of {T['ur_run_steps']:g}+ steps")
    med = float(np.nanmedian(ur))
    hi = float(np.nanquantile(ur, 0.9))
    return Finding(med > T["ur_high"], med,
                   f"median update-to-weight ratio {fmt(med, 3)} (90th percentile {fmt(hi, 3)}); "
                   f"healthy here about 1e-3", None, {"median": med, "p90": hi},
                   near=med / T["ur_high"], crossing=Crossing(med, T["ur_high"], "update / weight"))


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
    # closeness: the weakest of its three conditions
    near = min(T["mask_train"] * base / max(float(np.nanmin(train)), 1e-9), (best_val / base) / T["mask_val"],
               (last_val / best_val) / T["mask_rise"])
    return Finding(matched, best_val / base, shown, int(idx[best_at]),
                   {"train_min": float(np.nanmin(train)), "best_val": best_val, "last_val": last_val,
                    "ngram_val_loss": base}, near=min(near, 1.0),
                   crossing=Crossing(near, 1.0, "x the threshold of its weakest condition"))


def check_target_leak(ev: Evidence) -> Finding:
    """Training loss far below the n-gram baseline while validation ends up worse than an untrained model's
    (above ln V): the model learned something that is confidently wrong at validation time, e.g. to copy an
    input that holds its target. A broken mask's validation stays near the baseline; a memorising run's
    stays below ln V."""
    idx, val = val_points(ev)
    if not ev.ngram_val_loss or len(idx) < 2:
        return miss("no n-gram baseline or fewer than 2 validation points")
    train = train_smooth(ev)
    worst_at = int(np.argmax(val))
    worst = float(val[worst_at])
    low = float(np.nanmin(train))
    matched = worst > T["leak_val"] * ev.ln_v and low < T["mask_train"] * ev.ngram_val_loss and worst_at > 0
    first = next((int(j) for j, v in zip(idx, val) if v > T["leak_val"] * ev.ln_v and j > 0), None)
    if first is not None:  # the onset: the first loss jump since validation was last normal (within x1.15 of its best)
        normal = [int(j) for n, j in enumerate(idx) if j < first and val[n] <= T["mask_rise"] * val[:n + 1].min()]
        start = normal[-1] if normal else 0
        jumps = np.flatnonzero(ev.loss_z[start:first + 1] >= T["outlier_z"])
        if len(jumps):
            first = start + int(jumps[0])
        elif ev.loss[0] < ev.ln_v - T["loss0_band"]:  # below chance from step 0: it leaked from the start
            first = 0
    return Finding(matched, worst / ev.ln_v,
                   f"worst validation loss {fmt(worst)} = {worst / ev.ln_v:.2f} x ln V at step "
                   f"{ev.step_at(int(idx[worst_at]))}; smoothed training loss down to {fmt(low)} = "
                   f"{low / ev.ngram_val_loss:.2f} x the n-gram baseline", first if matched else int(idx[worst_at]),
                   {"worst_val": worst, "ln_v": ev.ln_v, "train_min": low},
                   near=(worst / ev.ln_v) / T["leak_val"] if worst_at > 0 else None,
                   crossing=Crossing(float(np.max(val[idx > 0])) / ev.ln_v if (idx > 0).any() else math.nan,
                                     T["leak_val"], "x ln V (worst validation after step 0)"))


def check_not_learning(ev: Evidence) -> Finding:
    if len(ev.rows) < 20:
        return miss("fewer than 20 steps")
    tail = ev.loss[len(ev.loss) - max(10, len(ev.loss) // 10):]
    end = float(np.nanmedian(tail))
    share = end / ev.loss[0]
    return Finding(share > T["not_learning"], share, f"final training loss {fmt(end)} = {share:.0%} of step-0 loss",
                   crossing=Crossing(share, T["not_learning"], "share of the step-0 loss"))


# --- §4 batch anomalies ---


def check_dup_rows(ev: Evidence) -> Finding:
    dup, rows = ev.batch("dup_rows"), ev.batch_rows
    share = np.where(rows > 1, dup / np.maximum(rows, 1), np.nan)
    if not np.isfinite(share).any():
        return miss("no batch composition in the metrics")
    i = int(np.nanargmax(share))
    return Finding(share[i] >= T["dup_share"], float(share[i]),
                   f"largest duplicated-row share {share[i]:.0%} ({int(dup[i])} of {int(rows[i])} rows) "
                   f"at step {ev.step_at(i)}", i, near=float(share[i]) / T["dup_share"],
                   crossing=Crossing(float(share[i]), T["dup_share"], "share of the batch"))


def check_data_outlier(ev: Evidence) -> Finding:
    """One batch whose own loss (measured before the update) is far above the run's recent losses, whose
    gradient jumps with it, and after which the next batch's loss is back to normal: the batch was the
    outlier, not the model. Needs no duplicated rows. Both jumps are read in units of the run's own trailing
    noise (robust z): a batch of 2 has a far noisier loss than a batch of 16, and a fixed number of nats would
    fit one of them only."""
    excess, z, gz = ev.loss_excess, ev.loss_z, ev.gn_z
    if not np.isfinite(z).any():
        return miss("too few steps")
    after = np.append(excess[1:], np.nan)
    before = np.insert(excess[:-1], 0, np.nan)
    # one step: the loss is normal again after it, and was normal before it (a fault that lasts is not one batch)
    back = np.where(np.isfinite(after), after <= T["outlier_back"] * excess, True)
    alone = np.where(np.isfinite(before), before <= T["outlier_back"] * excess, True)
    # noise alone is not enough: a memorised run's loss (~1e-4) has so little spread that a +0.1 nat wobble reads
    # hundreds of σ; a bad batch also moves the batch mean by at least a row's worth of chance-level loss
    big = excess >= T["outlier_rows"] * ev.row_loss_unit
    hit = (z >= T["outlier_z"]) & (gz >= T["outlier_gn_z"]) & big & back & alone
    # the step shown: the hit, else the largest jump among those of a row's worth (else the largest of all)
    pool = hit if hit.any() else big & np.isfinite(z) if (big & np.isfinite(z)).any() else np.isfinite(z)
    i = int(np.nanargmax(np.where(pool, z, np.nan)))
    rare = ev.batch("rare_share")
    rare_ratio = rare / trailing_median_fast(rare)
    nxt = f"{after[i]:+.2f}" if np.isfinite(after[i]) else "n/a (last step)"
    prv = f"{before[i]:+.2f}" if np.isfinite(before[i]) else "n/a"
    return Finding(bool(hit[i]), float(z[i]),
                   f"{'loss jump' if hit[i] else 'largest loss jump'} +{excess[i]:.2f} nats = {z[i]:.1f} σ of the run's "
                   f"own loss noise at step {ev.step_at(i)}, pre-clip grad norm x{fmt(math.exp(ev.gn_log_ratio[i]), 3)} "
                   f"its median = {gz[i]:.1f} σ, {excess[i] / ev.row_loss_unit if ev.row_loss_unit else math.inf:.2g} "
                   f"rows' worth of chance-level loss (ln V / batch = {ev.row_loss_unit:.3g} nats), previous step "
                   f"{prv} and next step {nxt} nats; rare-token share "
                   f"x{fmt(rare_ratio[i], 3)} its median", i,
                   {"next_excess": float(after[i]) if np.isfinite(after[i]) else None, "loss_z": float(z[i]),
                    "grad_norm_ratio": float(math.exp(ev.gn_log_ratio[i])), "grad_norm_z": float(gz[i]),
                    "rare_share_ratio": float(rare_ratio[i])},
                   near=float(z[i]) / T["outlier_z"], crossing=Crossing(float(z[i]), T["outlier_z"], SIGMA))


def check_stuck_loader(ev: Evidence) -> Finding:
    """The same batch served on consecutive steps: the data order here never repeats a batch (epoch
    permutations), so a run of identical batches is the loader, not chance."""
    runs = ev.repeat_run
    if not len(runs) or not any(p is not None for p in ev.batch_prints):
        return miss("no batch composition in the metrics")
    i = int(np.argmax(runs))
    n = int(runs[i])
    start = i - n
    return Finding(n >= T["stuck_steps"], n,
                   f"longest run of identical batches: {n + 1} steps in a row ({n} repeats of step "
                   f"{ev.step_at(start)}'s batch, up to step {ev.step_at(i)})" if n else
                   "no batch equals the one before it", start if n else None,
                   {"repeats": n, "first_step": ev.step_at(start), "last_step": ev.step_at(i)},
                   near=n / T["stuck_steps"], crossing=Crossing(n, T["stuck_steps"], "repeats"))


# --- §5 initialisation ---


def check_logit0(ev: Evidence) -> Finding:
    x = ev.logit_max[0]
    if not math.isfinite(x) and ev.rows[0].get("logit_max") is None and "logit_max" not in ev.rows[0]:
        return miss("no logit_max in the metrics")
    act = ev.rows[0].get("act")
    return Finding(not math.isfinite(x) or x > T["logit0_high"], x,
                   f"step-0 largest |logit| {fmt(x)}; step-0 activations {act}", 0,
                   crossing=Crossing(x, T["logit0_high"], "|logit|") if math.isfinite(x) else EXACT)


def check_came_from_s1(ev: Evidence) -> Finding:
    loss0, (gn, i) = ev.loss[0], _gn1(ev)
    off = not math.isfinite(loss0) or abs(loss0 - ev.ln_v) > T["loss0_band"] or (math.isfinite(gn) and gn > T["gn1_high"])
    return Finding(off, loss0, f"step-0 loss {fmt(loss0)} (ln V {ev.ln_v:.3f}), first-step grad norm {fmt(gn)}", 0)
    # no crossing of its own: §1 decided, and its finding carries the degree


# --- §6 optimizer state / update dynamics ---


def v_threshold(vf: dict) -> float:
    """§6.1's bound on |log f|: the larger of the fixed factor and the run's own rounding noise times a margin."""
    return max(math.log(T["v_factor"]), T["v_noise_mult"] * vf["noise"])


def check_v_factor(ev: Evidence) -> Finding:
    vf = ev.v_factor
    if vf is None:
        return miss("no per-parameter optimizer statistics (telemetry: basic?)")
    if vf["noise"] > T["v_fit_noise"]:  # one step's factor means nothing when no single recurrence fits (§6.3)
        return Finding(False, None, f"not measurable: v does not follow one recurrence over the run (residual "
                                    f"noise {vf['noise']:.1e} > {T['v_fit_noise']:g}; §6.3 asks why)")
    thr = v_threshold(vf)
    return Finding(abs(vf["log_factor"]) > thr, vf["factor"],
                   f"{vf['tensor']}: v changed by x{fmt(vf['factor'])} beyond g^2 at step {ev.step_at(vf['index'])} "
                   f"(allowed x{math.exp(-thr):.4g}..x{math.exp(thr):.4g}; rounding noise {vf['noise']:.1e})",
                   vf["index"], {"tensor": vf["tensor"]}, near=abs(vf["log_factor"]) / thr if thr > 0 else None,
                   crossing=Crossing(abs(vf["log_factor"]) / vf["noise"], thr / vf["noise"],
                                     "x the run's own rounding noise of log f") if vf["noise"] > 0 else None)


def check_v_up(ev: Evidence) -> Finding:
    vf = ev.v_factor
    if vf is None:  # e.g. a run that stopped non-finite at step 0: no optimizer statistics at all
        return miss("no per-parameter optimizer statistics (telemetry: basic?)")
    return Finding(vf["factor"] > 1, vf["factor"], f"factor x{fmt(vf['factor'])} on {vf['tensor']}", vf["index"])


def check_v_regime(ev: Evidence) -> Finding:
    """Adam's v follows one recurrence over the whole run unless the optimizer changed: when β2 (or eps, or the
    optimizer itself) changes at step K, the fit of §6.1 matches one side of K and fails on every tensor on the
    other, so its residual noise is orders of magnitude above rounding (clean: ~1e-4). The step where the
    per-step residual flips from bad to good (or back) is K."""
    vf = ev.v_factor
    if vf is None:
        return miss("no per-parameter optimizer statistics (telemetry: basic?)")
    if not vf["noise"] > T["v_fit_noise"]:
        return Finding(False, vf["noise"], f"v follows one recurrence (fitted β2 {vf['beta2']:.4g}; residual noise "
                                           f"{vf['noise']:.1e})", near=vf["noise"] / T["v_fit_noise"],
                       crossing=Crossing(vf["noise"], T["v_fit_noise"], "residual |log f| (99th percentile)"))
    split = ev.regime_split()
    if split is None:
        return miss("too few steps to split the run")
    k, before, after = split
    return Finding(True, vf["noise"], f"v stops following one recurrence at step {ev.step_at(k)}: fitted β2 "
                                      f"{fmt(before, 4)} before, {fmt(after, 4)} from then on (residual noise "
                                      f"{vf['noise']:.1e})", k, {"beta2_before": before, "beta2_after": after},
                   crossing=Crossing(vf["noise"], T["v_fit_noise"], "residual |log f| (99th percentile)"))


# --- §7 gradient-norm spikes, before / after clipping ---


def clipping_case(ev: Evidence) -> str:
    """Which texts of a clipping-dependent leaf are true for this run."""
    return "clipping on" if ev.clipping else "clipping off"


def _describe_gn(ev: Evidence, i: int) -> str:
    parts = [f"pre-clip grad norm {fmt(ev.grad_norm[i])} = x{math.exp(ev.gn_log_ratio[i]):.3g} its trailing median "
             f"at step {ev.step_at(i)}"]
    if ev.g_log_ratio is not None:
        parts.append(f"per-tensor g x{math.exp(np.nanmin(ev.g_log_ratio[i])):.3g}..x{math.exp(np.nanmax(ev.g_log_ratio[i])):.3g}")
    parts.append(f"loss x{math.exp(ev.loss_log_ratio[i]):.2f} its median; clipped norm {fmt(ev.grad_norm_clipped[i])}")
    return "; ".join(parts)


def check_gn_all_up(ev: Evidence) -> Finding:
    """Every tensor's gradient jumped together, more than the loss explains, each by many times its own natural
    step-to-step variation: the gradient was scaled, not the data changed (a natural spike comes with a
    surprising batch and moves a few tensors)."""
    if ev.g_log_ratio is None:
        return miss("no per-parameter gradient norms (telemetry: basic?)")
    z = ev.g_all_up_z
    if not np.isfinite(z).any():
        return miss("too few steps")
    i = int(np.nanargmax(z))
    return Finding(z[i] >= T["gn_all_up_z"], float(z[i]),
                   f"every tensor's g {z[i]:.1f} σ or more of its own noise above its median, beyond the loss's rise "
                   f"(x{math.exp(ev.g_all_up[i]):.3g} or more) at step {ev.step_at(i)}; " + _describe_gn(ev, i), i,
                   near=max(0.0, float(z[i])) / T["gn_all_up_z"], crossing=Crossing(float(z[i]), T["gn_all_up_z"], SIGMA))


def check_gn_all_down(ev: Evidence) -> Finding:
    if ev.g_log_ratio is None:
        return miss("no per-parameter gradient norms (telemetry: basic?)")
    z = -ev.g_all_down_z
    if not np.isfinite(z).any():
        return miss("too few steps")
    i = int(np.nanargmax(z))
    return Finding(z[i] >= T["gn_all_down_z"], float(-z[i]),
                   f"every tensor's g {z[i]:.1f} σ or more of its own noise below its median, beyond the loss's fall "
                   f"(x{math.exp(ev.g_all_down[i]):.3g} or less) at step {ev.step_at(i)}; " + _describe_gn(ev, i), i,
                   near=max(0.0, float(z[i])) / T["gn_all_down_z"],
                   crossing=Crossing(float(z[i]), T["gn_all_down_z"], SIGMA + ", downwards"))


def check_gn_huge(ev: Evidence) -> Finding:
    z = ev.gn_beyond_loss_z
    if not np.isfinite(z).any():
        return miss("too few steps")
    j = int(np.nanargmax(z))
    r = ev.gn_log_ratio[j] - max(0.0, float(np.nan_to_num(ev.loss_log_ratio[j])))
    return Finding(z[j] >= T["gn_huge_z"], float(z[j]),
                   f"largest jump beyond the loss's: x{math.exp(r):.3g} = {z[j]:.1f} σ of the norm's own noise; "
                   + _describe_gn(ev, j), j, near=max(0.0, float(z[j])) / T["gn_huge_z"],
                   crossing=Crossing(float(z[j]), T["gn_huge_z"], SIGMA))


def check_loss_jump(ev: Evidence) -> Finding:
    """Any loss jump far beyond the run's own natural variation that no question above explained: something
    happened that this tree has no leaf for."""
    z = np.where(ev.loss_excess >= T["outlier_rows"] * ev.row_loss_unit, ev.loss_z, np.nan)  # as §4.2: a row's worth
    if not np.isfinite(z).any():
        z = ev.loss_z
        if not np.isfinite(z).any():
            return miss("too few steps")
    i = int(np.nanargmax(z))
    big = ev.loss_excess[i] >= T["outlier_rows"] * ev.row_loss_unit
    return Finding(bool(z[i] >= T["loss_jump_z"] and big), float(z[i]),
                   f"largest loss jump +{ev.loss_excess[i]:.2f} nats = {z[i]:.1f} σ of the run's own loss noise at "
                   f"step {ev.step_at(i)}" + ("" if big else f", under a row's worth of chance-level loss "
                                                            f"({ev.row_loss_unit:.3g} nats)"), i,
                   near=float(z[i]) / T["loss_jump_z"],
                   crossing=Crossing(float(z[i]), T["loss_jump_z"], SIGMA))


# --- rule-outs: evidence that contradicts a leaf its node led to (each reviewed for what else trips the node) ---


def rule_out_lr_too_large(ev: Evidence, at: Finding) -> Finding:
    """A run whose LR is far too large also memorises, drives training loss to ~0 and climbs in validation."""
    f = check_update_ratio(ev)
    return Finding(f.matched, f.value, f.shown)


def rule_out_val_not_climbing(ev: Evidence, at: Finding) -> Finding:
    """A too-high LR memorises the training split: validation climbs after an early best. Updates larger than
    this model's healthy ones whose validation never climbed did not do what the leaf names: another optimizer
    setting also moves the weights further per step (beta1 0.5: ~2.5x) with no harm to see."""
    idx, val = val_points(ev)
    if len(idx) < 3:
        return Finding(False, None, "fewer than 3 validation points")
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


# --- §2.6-§2.8 natural instabilities (Wortsman et al. 2023, 2023b): signals of `natural_signals` runs ---


def natural_series(ev: Evidence, key: str, reduce=max) -> np.ndarray:
    """A natural-instability signal per row (NaN where not measured: it is measured on detail steps only);
    a per-layer list is reduced over layers by `reduce`."""
    out = np.full(len(ev.rows), np.nan)
    for i, r in enumerate(ev.rows):
        v = r.get(key)
        if isinstance(v, list):
            v = [x for x in v if isinstance(x, (int, float)) and math.isfinite(x)]
            v = reduce(v) if v else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[i] = v
    return out


def loss_spikes(ev: Evidence) -> list[int]:
    """Row indices where a loss spike starts: the loss `outlier_z` σ of the run's own loss noise above its
    trailing median, the step before below that, and the step after still above half of it (a one-batch outlier
    is back at once: §4.2)."""
    z = np.nan_to_num(ev.loss_z, nan=0.0)
    return [i for i in range(1, len(z) - 1)
            if z[i] >= T["outlier_z"] and z[i - 1] < T["outlier_z"] and z[i + 1] >= 0.5 * z[i]]


def loss_degraded(ev: Evidence) -> tuple[int | None, str]:
    """Where the training loss got worse on its own (None: it never did): the first non-finite value, the first
    loss spike, or the first step where the smoothed loss (21-step median) climbs `loss_rise` nats above
    its running minimum. A healthy run here only falls (natural late spikes are one-batch outliers)."""
    if ev.nonfinite_index is not None:
        return ev.nonfinite_index, f"a non-finite value at step {ev.step_at(ev.nonfinite_index)}"
    spikes = loss_spikes(ev)
    smooth = train_smooth(ev)
    rise = smooth - np.fmin.accumulate(np.where(np.isfinite(smooth), smooth, np.inf))
    up = np.flatnonzero(rise >= T["loss_rise"])
    first = min([*spikes[:1], *up[:1]], default=None)
    if first is None:
        return None, (f"the loss never got worse (smoothed loss at most {fmt(float(np.nanmax(rise)), 3)} nats above "
                      f"its running minimum, no spike)" if len(rise) else "no loss")
    if spikes and first == spikes[0]:
        return first, f"a loss spike at step {ev.step_at(first)} (+{ev.loss_excess[first]:.2f} nats)"
    return first, f"the smoothed loss {fmt(float(rise[first]), 3)} nats above its running minimum at step {ev.step_at(first)}"


def _signal_with_harm(ev: Evidence, values: np.ndarray, threshold: float, what: str, unit: str) -> Finding:
    """A natural signal beyond its threshold while the loss got worse (loss_degraded): matched at the first
    step where the signal is beyond it."""
    if not np.isfinite(values).any():
        return miss(f"no {what} in the metrics (natural_signals off)")
    top = int(np.nanargmax(values))
    over = np.flatnonzero(values > threshold)
    harm_at, harm = loss_degraded(ev)
    shown = f"largest {what} {fmt(float(values[top]), 4)}{unit} at step {ev.step_at(top)} (threshold {threshold:g}); {harm}"
    if not len(over):
        return Finding(False, float(values[top]), shown, top, near=_near(float(values[top]), threshold, log=False))
    first = int(over[0])
    return Finding(harm_at is not None, float(values[top]), shown, first,
                   {"first_over": ev.step_at(first), "loss_worse_at": ev.step_at(harm_at)},
                   near=None if harm_at is not None else 0.99)


def check_attn_logit_growth(ev: Evidence) -> Finding:
    """Attention-logit growth: the largest pre-softmax attention logit (any layer) beyond `attn_logit_high`
    while the loss got worse."""
    return _signal_with_harm(ev, natural_series(ev, "attn_logit_max"), T["attn_logit_high"],
                             "pre-softmax attention logit", "")


def check_logz_drift(ev: Evidence) -> Finding:
    """Output-logit divergence: |mean log Z| of the output logits beyond `logz_far` while the loss got worse."""
    return _signal_with_harm(ev, np.abs(natural_series(ev, "logz_mean")), T["logz_far"], "|mean log Z|", " nats")


def rms_series(ev: Evidence) -> np.ndarray:
    """Per row the largest per-tensor update RMS (params.r), NaN where not measured (detail steps only)."""
    if "r" not in ev.param_keys or not ev.param_names:
        return np.full(len(ev.rows), np.nan)
    r = np.stack([ev.param(n, "r") for n in ev.param_names], 1)
    ok = np.isfinite(r).any(1)
    return np.where(ok, np.nanmax(np.where(np.isfinite(r), r, -np.inf), 1), np.nan)


RMS_LEAD = (1, 8)  # StableAdamW: spikes follow an update RMS above 1 by 1-8 steps


def check_rms_before_spike(ev: Evidence) -> Finding:
    """Second-moment under-estimation: a loss spike starts 1-8 steps after some tensor's update RMS
    (sqrt(mean(g^2 / v_hat))) was measured above `rms_high`."""
    rms = rms_series(ev)
    if not np.isfinite(rms).any():
        return miss("no per-tensor update RMS (params.r) in the metrics")
    # before v has averaged a few of its own memories (1 / (1 - beta2) steps) its bias-corrected estimate is
    # from a handful of gradients, and a large RMS there is the start of training, not an under-estimate
    spikes = [s for s in loss_spikes(ev) if ev.steps[s] >= T["rms_from_step"]]
    lo, hi = RMS_LEAD
    for s in spikes:
        window = rms[max(0, s - hi):max(0, s - lo + 1)]
        if np.isfinite(window).any() and np.nanmax(window) > T["rms_high"]:
            j = max(0, s - hi) + int(np.nanargmax(window))
            return Finding(True, float(rms[j]), f"update RMS {fmt(float(rms[j]), 3)} (> {T['rms_high']:g}) at step "
                           f"{ev.step_at(j)}, then a loss spike at step {ev.step_at(s)} (+{ev.loss_excess[s]:.2f} nats)",
                           j, {"spike_step": ev.step_at(s), "spike_index": s})
    top = int(np.nanargmax(rms))
    return Finding(False, float(rms[top]), f"largest update RMS {fmt(float(rms[top]), 3)} at step {ev.step_at(top)}; "
                   f"{len(spikes)} loss spike(s), none {lo}-{hi} steps after an RMS above {T['rms_high']:g}", top,
                   near=_near(float(rms[top]), T["rms_high"], log=False) if spikes else None)


def rule_out_logits_large_from_start(ev: Evidence, at: Finding) -> Finding:
    """Growth means the logits were not that large at first: a run whose attention logits are already beyond
    the threshold at their first measurement started that way (an initialisation, §5)."""
    v = natural_series(ev, "attn_logit_max")
    idx = np.flatnonzero(np.isfinite(v))
    first = float(v[idx[0]]) if len(idx) else math.nan
    return Finding(bool(len(idx) and first > T["attn_logit_high"]), first,
                   f"largest attention logit {fmt(first, 4)} already at step {ev.step_at(int(idx[0])) if len(idx) else None}")


def rule_out_v_left_recurrence(ev: Evidence, at: Finding) -> Finding:
    """A second moment that under-estimates g^2 because something changed v (a corruption, a restore) is §6's:
    v left its recurrence within the RMS-to-spike window."""
    f = check_v_factor(ev)
    if not f.matched or f.index is None or at.index is None:
        return Finding(False, None, "v followed its recurrence" if not f.matched else "not measurable")
    near = at.index - RMS_LEAD[1] <= f.index <= at.extra.get("spike_index", at.index)
    return Finding(bool(near), f.value, f"v left its recurrence at step {ev.step_at(f.index)}: {f.shown}")
