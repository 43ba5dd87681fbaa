"""§2.6-§2.8: natural instabilities (Wortsman et al. 2023, 2023b), read from the signals of `natural_signals`
runs, with their leaves' rule-outs."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.checks.optimizer_gradient import check_v_factor
from minitrain.analysis.checks.run_lr_loss import train_smooth
from minitrain.analysis.definitions import robust_spikes
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.checks.finding import Finding, miss, near_ratio
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


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


def loss_degraded(ev: Evidence) -> tuple[int | None, str]:
    """Where the training loss got worse on its own (None: it never did): the first non-finite value, the first
    loss spike, or the first step where the smoothed loss (21-step median) climbs `loss_rise` nats above
    its running minimum. A healthy run here only falls (natural late spikes are one-batch outliers)."""
    if ev.nonfinite_index is not None:
        return ev.nonfinite_index, f"a non-finite value at step {ev.step_at(ev.nonfinite_index)}"
    spikes = robust_spikes(ev.loss_z)
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
        return Finding(False, float(values[top]), shown, top, near=near_ratio(float(values[top]), threshold, log=False))
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
    spikes = [s for s in robust_spikes(ev.loss_z) if ev.steps[s] >= T["rms_from_step"]]
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
                   near=near_ratio(float(rms[top]), T["rms_high"], log=False) if spikes else None)


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
