"""The named definitions every judgment of a run is built from, each in one place. The callers import them from
here; none restates a number or a rule.

    non-finite              run/nonfinite.py (the loop stops on it, so it lives below the loop; listed here):
                            a null value in the row, or a non-zero count of non-finite values
    excess_over_baseline    the loss this many nats (SPIKE) above the baseline's at the same step: a spike
                            visible on the loss panel. The lab report (signature.py), explore's cells and the
                            counterfactuals' "clipping contains it" read it; it needs a baseline of the same seed.
    rolling_zscore_spike    the loss above mean + 3 std of the previous 100 finite losses (the course's flag,
                            detectors.py's "course" row). The dashboard's "course spike flags" and the post-mortem
                            show it; it also fires on clean runs, so it decides nothing.
    robust_spike            the start of a loss jump `outlier_z` σ of the run's own loss noise above its trailing
                            median, the next step still above half of it (one-batch outliers are §4.2's). The
                            walker (§2.6-§2.8) and the LR sweep's "failed" read it.
    recovery                every WINDOW-step mean of (loss - baseline) from step K + n on within TOL nats
    v back / v jumped       a tensor's Adam v within V_BACK of the baseline's; moved more than V_JUMP-fold
    clip off                grad_clip == CLIP_OFF (0: none / off / null in the config)
    LR too high (sweep)     a sweep run at an LR above the plain model's best that ends FAIL_NATS above that
                            best, diverges, or has a robust_spike
    untrained loss          what an untrained model scores: ln V when V is known, else the first logged loss
                            when that row is the untrained model's (step 0 or 1, every step logged); else
                            ln LARGEST_VOCAB, a bound above any vocabulary's
    capped norm             a logged gradient norm whose largest value recurs on CAPPED_SHARE of the rows: the
                            clip's return capped at max_norm, logged after clipping (a pre-clip norm never
                            repeats one float); the checks that read a pre-clip norm do not read it

docs/metrics.md ("Definitions") has the same table with the pages that show each.
"""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt
from minitrain.run.nonfinite import first_non_finite_step, is_non_finite, non_finite_in

__all__ = ["first_non_finite_step", "is_non_finite", "non_finite_in", "SPIKE", "excess_over_baseline",
           "ROLLING_WINDOW", "ROLLING_SIGMA", "ROLLING_RULE", "trailing_mean_std", "rolling_zscore_spike",
           "rolling_zscore_spikes", "ROBUST_RULE", "robust_spikes", "TOL", "WINDOW", "RECOVERY_RULE",
           "recovery_steps", "V_BACK", "V_JUMP", "v_back", "v_jumped", "CLIP_OFF", "clipping_off", "clip_limit",
           "FAIL_NATS", "sweep_failure", "LARGEST_VOCAB", "untrained_loss", "CAPPED_SHARE", "CAPPED_MIN_ROWS", "capped_norm"]

# --- spikes: three definitions for three questions ---------------------------------------------------------------

SPIKE = 0.1  # nats: excess_over_baseline's threshold (a loss excess this large is visible on the loss panel)


def excess_over_baseline(excess: float) -> bool:
    """Whether a loss excess over the baseline at the same step (run - baseline, nats) is a spike."""
    return excess > SPIKE


ROLLING_WINDOW, ROLLING_SIGMA = 100, 3.0
ROLLING_RULE = f"loss > mean + {ROLLING_SIGMA:g} std of the previous {ROLLING_WINDOW} steps"


def trailing_mean_std(x: np.ndarray, window: int, min_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the finite values among the `window` before each step (NaN until
    `min_count` exist)."""
    n = len(x)
    mean, std = np.full(n, np.nan), np.full(n, np.nan)
    finite = np.where(np.isfinite(x), x, 0.0)
    ok = np.isfinite(x).astype(float)
    c1, c2, cn = (np.concatenate([[0.0], np.cumsum(a)]) for a in (finite, finite ** 2, ok))
    for t in range(n):
        lo = max(0, t - window)
        k = cn[t] - cn[lo]
        if k >= min_count:
            m = (c1[t] - c1[lo]) / k
            mean[t] = m
            std[t] = math.sqrt(max(0.0, (c2[t] - c2[lo]) / k - m * m))
    return mean, std


def rolling_zscore_spike(loss: np.ndarray, window: int = ROLLING_WINDOW, sigma: float = ROLLING_SIGMA) -> np.ndarray:
    """Per row, whether the loss is a rolling-z-score spike (ROLLING_RULE); judged only with a full window."""
    mean, std = trailing_mean_std(loss, window, window)
    with np.errstate(invalid="ignore"):
        return np.isfinite(loss) & (loss > mean + sigma * std)


def rolling_zscore_spikes(steps: list[int], loss: list[float | None]) -> list[int]:
    """The steps (not row indices) where rolling_zscore_spike fires.

    A step is judged only once it has a full window of 100 finite losses before it: that is the course's rule
    as written ("the previous 100 steps"). A bound built from fewer steps rests on fewer batches, taken where
    the loss is still falling from ln V, so its mean and spread are not the steady ones a 3-sigma rule assumes."""
    x = np.array([np.nan if v is None else v for v in loss], dtype=float)
    return [int(steps[i]) for i in np.flatnonzero(rolling_zscore_spike(x))]


ROBUST_RULE = (f"loss {T['outlier_z']:g} σ of the run's own loss noise above its trailing median, "
               "and still above half of that the step after")


def robust_spikes(loss_z: np.ndarray) -> list[int]:
    """Row indices where a robust spike starts: the loss `outlier_z` σ of its own noise above its trailing
    median (`loss_z`, evidence.Evidence.loss_z), the step before below that, and the step after still above half
    of it (a one-batch outlier is back at once: §4.2)."""
    z = np.nan_to_num(loss_z, nan=0.0)
    return [i for i in range(1, len(z) - 1)
            if z[i] >= T["outlier_z"] and z[i - 1] < T["outlier_z"] and z[i + 1] >= 0.5 * z[i]]


# --- recovery ----------------------------------------------------------------------------------------------------

TOL = 0.02  # nats: "recovered" once the windowed loss difference stays this close to zero
WINDOW = 20  # steps in the windowed mean used for recovery
RECOVERY_RULE = f"every {WINDOW}-step mean of the loss difference stays within {TOL} nats"


def recovery_steps(diff: list[float | None], k: int) -> int | None:
    """The first n >= 0 such that, from step K + n on, every forward WINDOW-step mean of the loss difference is
    within TOL (RECOVERY_RULE); None: never, within the run. A per-step difference never settles to zero once
    two trajectories part (they drift apart chaotically by a few hundredths), but its windowed mean does."""
    vals = [d if d is not None else float("inf") for d in diff]
    last_start = max(k, len(vals) - WINDOW)  # only full windows (the run's last WINDOW steps form the last)
    last_bad = None
    for t in range(k, last_start + 1):
        window = vals[t:t + WINDOW]
        if abs(sum(window) / len(window)) > TOL:
            last_bad = t
    if last_bad is None:
        return 0
    return None if last_bad == last_start else last_bad + 1 - k


# --- Adam's v against the baseline's -------------------------------------------------------------------------------

V_BACK = 0.10  # "v back": the tensor's v within this share of the baseline's
V_JUMP = 2.0  # a tensor's v this many times the baseline's (or 1/this): a jump worth naming


def v_back(ratio: float) -> bool:
    """Whether a tensor's v over the baseline's is back within V_BACK of 1."""
    return abs(ratio - 1) <= V_BACK


def v_jumped(ratio: float | None) -> bool:
    """Whether a tensor's v over the baseline's lies outside [1/V_JUMP, V_JUMP]."""
    return ratio is not None and math.isfinite(ratio) and ratio > 0 and abs(math.log(ratio)) > math.log(V_JUMP)


# --- clipping ------------------------------------------------------------------------------------------------------

CLIP_OFF = 0.0  # grad_clip of a run without clipping: the config's one encoding (none / off / null read as 0)


def clipping_off(grad_clip: float | None) -> bool:
    """Whether a run's grad_clip means no clipping: CLIP_OFF (or None, in a record that lacks the field)."""
    return not grad_clip


def clip_limit(grad_clip: float | None) -> float:
    """The pre-clip norm above which a run's gradient is cut back: its grad_clip, or infinity when it is off."""
    return math.inf if clipping_off(grad_clip) else grad_clip


# --- LR too high, as the LR sweep decides it ------------------------------------------------------------------------

FAIL_NATS = 1.0  # a run at an LR above the best ends this far above the best final loss: failed


def sweep_failure(run: dict, ref_best: float, ref_best_lr: float) -> str | None:
    """Why a sweep run failed, or None: it diverged (non-finite), or at an LR above the plain model's best
    (`ref_best_lr`) it ends FAIL_NATS above that best final loss, or it has a robust spike (`run["spikes"]`,
    lrsweep.run_summary)."""
    if run["diverged"]:
        return f"diverged (non-finite at step {run['diverged_at']})"
    if run["lr"] > ref_best_lr and run["final_loss"] is not None and run["final_loss"] >= ref_best + FAIL_NATS:
        return f"final loss {fmt(run['final_loss'], 3)} >= best {fmt(ref_best, 3)} + {FAIL_NATS:g}"
    if run["spikes"]:
        return f"loss spike(s) at step {', '.join(str(s) for s in run['spikes'][:5])}"
    return None


# --- what an untrained model scores ---------------------------------------------------------------------------------


LARGEST_VOCAB = 2 ** 20  # no tokenizer in use has more tokens (the largest are ~262k): ln of it bounds any ln V


def untrained_loss(vocab_size: int | None, first_loss: float, first_row_untrained: bool) -> tuple[float, str]:
    """The loss an untrained model scores, and what it was taken from: ln V (uniform over the vocabulary) when
    V is known, else the first logged loss when that row is the untrained model's own, else ln LARGEST_VOCAB:
    a bound above any vocabulary's, so a loss read against it can only be judged too high less often."""
    if vocab_size:
        return math.log(vocab_size), f"ln V = {math.log(vocab_size):.3g}"
    if first_row_untrained and math.isfinite(first_loss):
        return float(first_loss), f"the first logged loss {first_loss:.3g}"
    return math.log(LARGEST_VOCAB), f"ln 2^20 = {math.log(LARGEST_VOCAB):.3g}, above any vocabulary in use"


# --- a gradient norm logged after clipping --------------------------------------------------------------------------

CAPPED_SHARE = 0.1  # the largest logged norm recurs on at least this share of the rows: capped at max_norm
CAPPED_MIN_ROWS = 5  # ... and on at least this many rows (a short log repeats a value by chance)


def capped_norm(norm: np.ndarray) -> float | None:
    """The cap, when a logged gradient norm is the clip's return capped at max_norm (capped norm): its largest
    value, equal (to 1e-6) on CAPPED_SHARE of the finite rows and CAPPED_MIN_ROWS or more; else None."""
    x = norm[np.isfinite(norm)]
    if not len(x) or not x.max() > 0:
        return None
    top = float(x.max())
    at_top = int(np.sum(np.abs(x - top) <= 1e-6 * top))
    return top if at_top >= max(CAPPED_MIN_ROWS, CAPPED_SHARE * len(x)) else None
