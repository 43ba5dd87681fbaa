"""Checks that read only what any trainer logs every step (the loss and the pre-clip gradient norm): asked
where the per-tensor statistics and batch composition that §4.3 and §7.1 read were not measured (an imported
log), so that a fault with a mark in the loss and norm alone is still named. On runs that measured those, the
richer check decides and these answer no."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.checks.finding import SIGMA, X_THRESHOLD, Crossing, Finding, miss
from minitrain.analysis.evidence import Evidence, trailing_spread
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


def check_loss_memorised_run(ev: Evidence) -> Finding:
    """A stuck loader without batch composition: the same batch served again and again is memorised, so the
    loss falls at every step (a batch's own noise, which makes a real run's loss wobble, is gone) for many
    steps, then jumps back most of the way when new batches arrive."""
    if ev.has("batch"):
        return miss("batch composition measured: §4.3 reads the batches themselves")
    loss = ev.loss
    if len(loss) < T["stuck_fall_steps"] + 2:
        return miss("too few steps")
    falls = np.diff(loss) < 0
    spread = trailing_spread(loss)
    best: tuple[float, int, int] | None = None  # (share of the fall recovered, start, length)
    i = 0
    while i < len(falls):
        if not falls[i]:
            i += 1
            continue
        j = i
        while j < len(falls) and falls[j]:
            j += 1
        start, end = i, j  # loss[start] > loss[start+1] > ... > loss[end]; loss[end+1] >= loss[end]
        fall = loss[start] - loss[end]
        n = end - start
        if end + 1 < len(loss) and n >= T["stuck_fall_steps"] and fall > 0 and np.isfinite(spread[start]) \
                and fall >= T["stuck_fall_z"] * spread[start]:
            back = (loss[end + 1] - loss[end]) / fall
            if best is None or back > best[0]:
                best = (float(back), start, n)
        i = j
    if best is None:
        return Finding(False, 0.0, f"no run of {T['stuck_fall_steps']:g}+ steps whose loss fell at every step "
                       "beyond its own noise", None, near=0.0)
    back, start, n = best
    return Finding(back >= T["stuck_back"], back,
                   f"the loss fell at every one of {n} steps from step {ev.step_at(start)} ({fmt(loss[start])} to "
                   f"{fmt(loss[start + n])}), then jumped back {back:.0%} of that fall in one step", start,
                   {"repeats": n, "first_step": ev.step_at(start), "last_step": ev.step_at(start + n)},
                   near=back / T["stuck_back"], crossing=Crossing(back, T["stuck_back"], X_THRESHOLD))


def check_gn_scaled(ev: Evidence) -> Finding:
    """A gradient scaled by a common factor, without per-tensor norms (§7.1): the pre-clip norm jumps by a
    factor no natural spike reaches while that step's own loss is normal (the scale came after the loss was
    computed: a loss scale never unscaled, a hook), then the loss reacts on the next steps."""
    if ev.has("params.g"):
        return miss("per-tensor gradients measured: §7.1 reads them")
    r = ev.gn_log_ratio
    if not np.isfinite(r).any():
        return miss("too few steps")
    z = ev.loss_z
    normal = np.where(np.isfinite(z), z < T["outlier_z"], False)
    pool = np.where(normal & np.isfinite(r), r, np.nan)
    if not np.isfinite(pool).any():
        return miss("no step with a normal loss and a gradient norm")
    j = int(np.nanargmax(pool))
    x = float(math.exp(pool[j]))
    return Finding(x >= T["gn_scaled"], x, f"pre-clip grad norm {fmt(ev.grad_norm[j])} = x{x:.3g} its trailing "
                   f"median at step {ev.step_at(j)}, whose loss was normal ({fmt(z[j], 3)} σ)", j,
                   near=math.log(x) / math.log(T["gn_scaled"]) if x > 1 else 0.0,
                   crossing=Crossing(x, T["gn_scaled"], "x the norm's trailing median"))
