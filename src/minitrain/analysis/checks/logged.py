"""Checks that read only what any trainer logs every step (the loss and the pre-clip gradient norm): asked
where the per-tensor statistics and batch composition that §4.3 and §7.1 read were not measured (an imported
log), so that a fault with a mark in the loss and norm alone is still named. On runs that measured those, the
richer check decides and these answer no."""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minitrain.analysis.checks.finding import SIGMA, X_THRESHOLD, Crossing, Finding, miss
from minitrain.analysis.evidence import MAD_TO_SIGMA, Evidence, nanmedian, trailing_spread
from minitrain.analysis.thresholds import MIN_HISTORY, WINDOW, T
from minitrain.core.fmt import fmt


def check_loss_memorised_run(ev: Evidence) -> Finding:
    """A stuck loader without batch composition: the same batch served again and again is memorised, so the
    loss falls at every step (a batch's own noise, which makes a real run's loss wobble, is gone) for many
    steps, then jumps back most of the way when new batches arrive."""
    if ev.has("batch"):
        return miss("batch composition measured: §4.3 reads the batches themselves")
    if not ev.knows("every_step"):
        return _memorised_rows(ev)
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


def _robust_sigma(x: np.ndarray) -> float:
    """A normal variable's standard deviation from x's median absolute deviation (NaNs left out)."""
    return MAD_TO_SIGMA * float(np.nanmedian(np.abs(x - np.nanmedian(x))))


def _row_noise(x: np.ndarray) -> float:
    """A log's own row-to-row noise: the robust spread of the change from one row to the next, over sqrt(2)."""
    return _robust_sigma(np.diff(x)) / math.sqrt(2)


def _memorised_rows(ev: Evidence) -> Finding:
    """§4.4 in a log written every N steps (a row is one step's loss or the interval's mean): a memorised batch
    makes the loss fall at every row from where it began, several times as fast as it fell over the rows before
    (a healthy run's fall does not speed up), and far beyond the log's own noise; new batches then put it back at
    least where the fall began in one row. A run of falls shorter than stuck_fall_rows (fewer repeated steps than
    that many intervals) is not read."""
    loss, k_min = ev.loss, int(T["stuck_fall_rows"])
    noise = _row_noise(loss)
    if not noise > 0:
        return miss("no row-to-row noise to read a fall against")
    best: tuple[float, int, int, float] | None = None  # (fall against the rows before's pace, start, rows, pace)
    falls = np.diff(loss) < 0
    i = 0
    while i < len(falls):
        j = i + int(falls[i])
        while j < len(falls) and falls[j]:
            j += 1
        end = j
        # the memorised part is where the fall sped up: each start within the run, against the rows before it
        for start in range(i, end - k_min + 1):
            k = end - start
            w = min(k, k_min)
            if start < w or end + 1 >= len(loss):
                continue
            fall = float(loss[start] - loss[end])
            before = float(loss[start - w] - loss[start]) / w * k  # the rows before's pace, over as many rows
            speed = fall / before if before > 0 else math.inf
            # among equal speeds (a flat loss before: any start is infinitely faster) the fastest pace
            if fall >= T["stuck_fall_z"] * noise and loss[end + 1] >= loss[start] \
                    and (best is None or (speed, fall / k) > (best[0], best[3])):
                best = (speed, start, k, fall / k)
        i = max(j, i + 1)
    if best is None:
        return Finding(False, 0.0, f"no run of {k_min}+ rows whose loss fell at every row beyond the log's noise, "
                       "then came back where it began", None, near=0.0)
    speed, start, k, _ = best
    end = start + k
    return Finding(speed >= T["stuck_speed"], speed,
                   f"the loss fell at every one of {k} rows from step {ev.step_at(start)} ({fmt(loss[start])} to "
                   f"{fmt(loss[end])}), x{speed:.3g} as fast as over the rows before, then came back to "
                   f"{fmt(loss[end + 1])} in one row", start + 1,
                   {"repeats": k, "first_step": ev.step_at(start + 1), "last_step": ev.step_at(end)},
                   near=speed / T["stuck_speed"], crossing=Crossing(speed, T["stuck_speed"], X_THRESHOLD))


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


def _smooth(x: np.ndarray) -> np.ndarray:
    """The loss, median over the surrounding rows (a tenth of the log, at most 21): a coarse log keeps its shape."""
    w = max(1, min(21, len(x) // 10)) | 1
    return nanmedian(sliding_window_view(np.pad(x, w // 2, mode="edge"), w))  # np.nanmedian's values, every row at once


def _fall(loss: np.ndarray, rows: np.ndarray) -> float:
    """How far the loss fell over `rows`: the median of their first third less that of their last third (nats)."""
    k = max(1, len(rows) // 3)
    return float(np.nanmedian(loss[rows[:k]]) - np.nanmedian(loss[rows[-k:]]))


def _event(ev: Evidence, rows: np.ndarray) -> int | None:
    """A step among `rows` whose loss went outlier_z σ of its own noise above its trailing median: an event (a
    scaled gradient, a stuck loader's return) that stalls a loss too, so a stall there is not read as the LR's.
    Read on a log of every step only: a coarse log's trailing window spans most of the run, and the one-step
    faults it could be are not testable there anyway."""
    if not ev.knows("every_step"):
        return None
    z = ev.loss_z[rows]
    hits = np.flatnonzero(np.isfinite(z) & (z >= T["outlier_z"]))
    return int(rows[hits[0]]) if len(hits) else None


def _event_said(ev: Evidence, event: int | None) -> str:
    return "" if event is None else (f"; a loss jump of {T['outlier_z']:g} σ at step {ev.step_at(event)} is an event "
                                     "that stalls a loss too, not read as the LR's size")


def check_lr_too_high_loss(ev: Evidence) -> Finding:
    """§2.9: the LR's size read from the loss and the LR (lr_loss_reading), where the update-to-weight ratio
    (§2.5) was not measured; a run that measured it is §2.5's."""
    if ev.has("params.ur"):
        return miss("update-to-weight ratio measured: §2.5 reads it")
    return lr_loss_reading(ev)


def lr_loss_reading(ev: Evidence) -> Finding:
    """What the loss says of the LR's size: at the peak LR the loss climbed above an untrained model's; or it
    stalled at the peak and fell only once the LR decayed; or, with the LR held at its peak, it stalled far
    above where training takes it. Each reading scales with the run: its untrained loss (definitions.py: ln V,
    else its own first loss, else a bound above any vocabulary's), its own loss level and its own LR."""
    lr, n = ev.lr, len(ev.loss)
    if n < 8 or not np.nanmax(lr) > 0:
        return miss("too few rows or no LR")
    untrained, said = ev.untrained
    peak = float(np.nanmax(lr))
    loss = _smooth(ev.loss)
    at_peak = np.flatnonzero(lr >= T["lr_peak_share"] * peak)
    # as the LR reaches its peak, not long after: a loss that leaves a long stay at the peak at once is an
    # event the LR log missed (a spike between logged rows), not the LR's size
    soon = ev.steps[at_peak[0]] + T["peak_onset_share"] * (ev.steps[-1] - ev.steps[0])
    worse = [i for i in at_peak if loss[i] > T["above_untrained"] * untrained and ev.steps[i] <= soon]
    if worse:
        i = worse[0]
        x = float(loss[i] / untrained)
        return Finding(True, x, f"at the peak LR (step {ev.step_at(i)}, LR {fmt(lr[i], 3)}) the smoothed loss "
                       f"{fmt(loss[i])} = x{x:.3g} an untrained model's ({said})", i,
                       {"pattern": "above untrained", "smoothed_loss": float(loss[i]), "untrained_loss": untrained},
                       crossing=Crossing(x, T["above_untrained"], "x the untrained loss"))
    decayed = np.flatnonzero((lr <= T["lr_decay_share"] * peak) & (np.arange(n) > at_peak[-1]))
    if len(at_peak) >= 6 and len(decayed) >= 6:
        fall_p, fall_d = _fall(loss, at_peak), _fall(loss, decayed)
        share = fall_d / float(np.nanmedian(loss[decayed]))
        noise = _row_noise(ev.loss[at_peak])  # the loss's own row-to-row noise at the peak
        r = fall_p / noise if noise > 0 else math.inf
        event = _event(ev, at_peak)
        hit = share >= T["decay_fall"] and r <= T["stall_noise"] and event is None
        return Finding(hit, r, f"the loss fell {fmt(fall_p, 3)} nats at the peak LR (steps {ev.step_at(at_peak[0])}-"
                       f"{ev.step_at(at_peak[-1])}) = {r:.2g} σ of its own row-to-row noise there, and {fmt(fall_d, 3)} "
                       f"({share:.0%}) once the LR decayed: {'a stall at the peak' if hit else 'no stall'}"
                       + _event_said(ev, event),
                       int(at_peak[0]), {"pattern": "stall at the peak", "fall_at_peak": fall_p, "fall_decayed": fall_d,
                                         "fall_at_peak_in_noise": r},
                       near=T["stall_noise"] / r if r > 0 else None,
                       crossing=Crossing(share, T["decay_fall"], "share of its level the loss fell once the LR "
                                         "decayed") if hit else None)
    half = np.arange(n // 2, n)
    if not (lr[half] >= T["lr_peak_share"] * peak).all():
        return Finding(False, None, "the LR neither held its peak over the run's second half nor decayed after it")
    q2 = float(np.nanmedian(ev.loss[n // 4:n // 2]))
    q4 = float(np.nanmedian(ev.loss[3 * n // 4:]))
    fell, level = (q2 - q4) / q2, q4 / untrained
    event = _event(ev, half)
    hit = fell < T["stall_share"] and level >= T["stall_level"] and event is None
    return Finding(hit, level, f"with the LR held at its peak the loss's median went {fmt(q2)} -> {fmt(q4)} from the "
                   f"run's second quarter to its last ({fell:+.1%}), at {level:.2f} of an untrained model's ({said})"
                   + _event_said(ev, event),
                   n // 2, {"pattern": "stall at a held peak", "second_quarter": q2, "last_quarter": q4,
                            "untrained_loss": untrained}, near=level / T["stall_level"],
                   crossing=Crossing(level, T["stall_level"], "share of the untrained loss") if hit else None)


def _learning(loss: np.ndarray, k: int) -> bool:
    """Whether the run was still learning before row k: over the trailing window its loss fell at least
    stall_share of its level (a run stalled at a too-high LR climbs out of a plateau, not out of progress)."""
    before = loss[max(0, k - WINDOW):k + 1]
    if len(before) < 2 * MIN_HISTORY:
        return False
    k5 = max(1, len(before) // 5)
    first, last = float(np.nanmedian(before[:k5])), float(np.nanmedian(before[-k5:]))
    return first > 0 and (first - last) / first >= T["stall_share"]


def check_loss_climb_after_scale(ev: Evidence) -> Finding:
    """A gradient scaled by a common factor, read from the loss alone (no pre-clip norm logged: §7.5 reads the
    norm where there is one): the loss is normal at step K, then rises at every step from K+1 on for
    climb_steps and goes on, without falling back into its noise, far out of it, while the LR stays steady. With clipping off the scaled gradient enters Adam's first moment, which
    keeps pushing along it for ~1/(1-β1) steps; an LR spike (a one-step jump), a bad batch (back at once) and a
    stuck loader (falls) leave other shapes; a run stalled at a too-high LR (§2.9's) climbs out of a plateau, so
    the climb counts only where the loss was still falling before K."""
    if ev.has("grad_norm"):
        return miss("a pre-clip gradient norm logged: §7.5 reads it")
    z, loss = ev.loss_z, ev.loss
    if not np.isfinite(z).any():
        return miss("too few steps")
    best: tuple[float, int, int] | None = None  # (z reached, first rising row, rises)
    i = 1
    while i < len(loss):
        j = i
        while j < len(loss) and loss[j] > loss[j - 1]:
            j += 1
        n = j - i
        start = i - 1  # step K: the last row before the climb
        if n >= T["climb_steps"] and np.isfinite(z[start]) and z[start] < T["climb_from_z"] \
                and np.isfinite(z[j - 1]) and _learning(loss, start):
            # the excursion the climb began: on while the loss stays out of its noise (a dip inside it is noise)
            end = j
            while end < min(len(loss), start + WINDOW) and np.isfinite(z[end]) and z[end] >= T["climb_from_z"]:
                end += 1
            top = float(np.nanmax(z[start:end]))
            steady = ev.lr_step_ratio[start:end]
            if (best is None or top > best[0]) and \
                    not np.any(np.isfinite(steady) & ((steady > T["lr_jump"]) | (steady < 1 / T["lr_jump"]))):
                best = (top, i, n)
        i = max(j, i + 1)
    if best is None:
        return Finding(False, 0.0, f"no climb of {T['climb_steps']:g}+ rising steps from a normal loss at a "
                       "steady LR", None, near=0.0)
    top, first, n = best
    return Finding(top >= T["outlier_z"], top, f"the loss was normal at step {ev.step_at(first - 1)} "
                   f"({fmt(loss[first - 1])}), then rose at every one of {n} steps and went on out of its noise to "
                   f"{top:.1f} σ of it above its trailing median, the LR steady", first,
                   near=top / T["outlier_z"], crossing=Crossing(top, T["outlier_z"], SIGMA))


def check_interval_outlier(ev: Evidence) -> Finding:
    """A bad batch in a log written every N steps (§4.2 needs every step): one row's loss far above both its
    neighbours while they agree with each other, and no other row's bump half its size. Where the row is a mean
    over its interval (HF) one bad batch moves it by its own excess / N, so the guard is a row's worth of
    chance-level loss / N; the bump is read in units of the log's own row-to-row curvature noise (a coarse log
    has too few rows for a trailing window)."""
    every = int((ev.imported or {}).get("log_every", 1) or 1)
    if every <= 1:
        return miss("every step logged: §4.2 reads the steps themselves")
    loss, n = ev.loss, len(ev.loss)
    if n < T["coarse_min_rows"]:
        return miss(f"fewer than {T['coarse_min_rows']:g} logged rows")
    bump = np.full(n, np.nan)
    bump[1:-1] = loss[1:-1] - (loss[:-2] + loss[2:]) / 2
    spread = _robust_sigma(bump)
    if not spread > 0:
        return miss("no row-to-row noise to read a bump against")
    z = bump / spread
    apart = np.full(n, np.nan)
    apart[1:-1] = np.abs(loss[2:] - loss[:-2])
    # both neighbours back at the level the row before them held: the loss was stationary before the bump (not
    # the first rows' fall) and stayed where it was after (a scaled gradient, averaged into the same interval,
    # damages the model: its rows stay up), so the row before the previous one is needed
    left = np.full(n, np.nan)
    left[2:-1] = np.maximum(np.abs(loss[1:-2] - loss[:-3]), np.abs(loss[3:] - loss[:-3]))
    guard = T["outlier_rows"] * ev.row_loss_unit / every
    # one bad batch stands alone: a noisy run (an LR too high) has several bumps of a size
    second = np.sort(bump[np.isfinite(bump)])[-2]
    alone = np.where(np.isfinite(bump), second <= T["outlier_back"] * bump, False)
    hit = (z >= T["outlier_z"]) & (bump >= guard) & (apart <= T["outlier_back"] * bump) \
        & (left <= T["outlier_back"] * bump) & alone
    i = int(np.nanargmax(np.where(hit, z, np.nan))) if hit.any() else int(np.nanargmax(z))
    return Finding(bool(hit[i]), float(z[i]), f"{'row' if hit[i] else 'largest row bump'} at step {ev.step_at(i)}: "
                   f"loss {fmt(loss[i])}, +{bump[i]:.3g} nats over its neighbours' mean = {z[i]:.1f} σ of the log's "
                   f"own row-to-row noise (guard {guard:.3g} nats: a row's worth / {every}), neighbours "
                   f"{fmt(loss[i - 1])} and {fmt(loss[i + 1])}", i, near=float(z[i]) / T["outlier_z"],
                   crossing=Crossing(float(z[i]), T["outlier_z"], SIGMA))
