"""§6-§7: Adam's second moment against its own recurrence, and gradient-norm spikes before / after clipping."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.evidence import Evidence
from minitrain.analysis.checks.finding import SIGMA, Crossing, Finding, miss
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


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
    if in_warmup(ev, vf["index"]) and abs(vf["log_factor"]) <= math.log(T["v_factor_warmup"]):
        return Finding(False, vf["factor"],
                       f"{vf['tensor']}: v changed by x{fmt(vf['factor'])} beyond g^2 at step {ev.step_at(vf['index'])}, "
                       f"during the warmup (the LR still rising), where v moves with the growing updates: allowed "
                       f"x{1 / T['v_factor_warmup']:.4g}..x{T['v_factor_warmup']:g} there", vf["index"],
                       {"tensor": vf["tensor"]}, near=abs(vf["log_factor"]) / math.log(T["v_factor_warmup"]),
                       crossing=Crossing(abs(vf["log_factor"]) / vf["noise"], math.log(T["v_factor_warmup"]) / vf["noise"],
                                         "x the run's own rounding noise of log f") if vf["noise"] > 0 else None)
    return Finding(abs(vf["log_factor"]) > thr, vf["factor"],
                   f"{vf['tensor']}: v changed by x{fmt(vf['factor'])} beyond g^2 at step {ev.step_at(vf['index'])} "
                   f"(allowed x{math.exp(-thr):.4g}..x{math.exp(thr):.4g}; rounding noise {vf['noise']:.1e})",
                   vf["index"], {"tensor": vf["tensor"]}, near=abs(vf["log_factor"]) / thr if thr > 0 else None,
                   crossing=Crossing(abs(vf["log_factor"]) / vf["noise"], thr / vf["noise"],
                                     "x the run's own rounding noise of log f") if vf["noise"] > 0 else None)


def in_warmup(ev: Evidence, i: int) -> bool:
    """Whether row i lies in a warmup: before the LR first reaches the schedule's top (its 90th percentile, so
    that a one-off spike above it is not the peak), at an LR below it."""
    lr = ev.lr
    ok = np.isfinite(lr)
    if not ok.any():
        return False
    top = float(np.quantile(lr[ok], 0.9))
    if not top > 0:
        return False
    reached = np.flatnonzero(ok & (lr >= top * (1 - T["lr_flat"])))
    return bool(len(reached)) and i < int(reached[0]) and bool(lr[i] < top)


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
    parts.append(f"loss x{math.exp(ev.loss_log_ratio[i]):.2f} its median"
                 + (f"; clipped norm {fmt(ev.grad_norm_clipped[i])}" if ev.has("grad_norm_clipped") else ""))
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
