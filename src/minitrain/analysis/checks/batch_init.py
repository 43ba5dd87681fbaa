"""§4-§5: batch anomalies (duplicated rows, an outlier batch, a stuck loader) and the initialisation."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.checks.run_lr_loss import first_step_gn
from minitrain.analysis.evidence import Evidence, trailing_median_fast
from minitrain.analysis.checks.finding import EXACT, SIGMA, Crossing, Finding, miss
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt


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
    # the norm's jump is read where a pre-clip norm was logged; a log of the loss alone is judged by the loss
    gn_up = gz >= T["outlier_gn_z"] if ev.has("grad_norm") else np.ones(len(z), dtype=bool)
    hit = (z >= T["outlier_z"]) & gn_up & big & back & alone
    # the step shown: the hit, else the largest jump among those of a row's worth (else the largest of all)
    pool = hit if hit.any() else big & np.isfinite(z) if (big & np.isfinite(z)).any() else np.isfinite(z)
    i = int(np.nanargmax(np.where(pool, z, np.nan)))
    rare = ev.batch("rare_share")
    rare_ratio = rare / trailing_median_fast(rare)
    nxt = f"{after[i]:+.2f}" if np.isfinite(after[i]) else "n/a (last step)"
    prv = f"{before[i]:+.2f}" if np.isfinite(before[i]) else "n/a"
    return Finding(bool(hit[i]), float(z[i]),
                   f"{'loss jump' if hit[i] else 'largest loss jump'} +{excess[i]:.2f} nats = {z[i]:.1f} σ of the run's "
                   f"own loss noise at step {ev.step_at(i)}, "
                   + (f"pre-clip grad norm x{fmt(math.exp(ev.gn_log_ratio[i]), 3)} its median = {gz[i]:.1f} σ, "
                      if ev.has("grad_norm") else "no pre-clip grad norm logged, ")
                   + f"{excess[i] / ev.row_loss_unit if ev.row_loss_unit else math.inf:.2g} "
                   f"rows' worth of chance-level loss (ln V / batch = {ev.row_loss_unit:.3g} nats), previous step "
                   f"{prv} and next step {nxt} nats"
                   + (f"; rare-token share x{fmt(rare_ratio[i], 3)} its median" if ev.has("batch.rare_share") else ""),
                   i,
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
    loss0, (gn, i) = ev.loss[0], first_step_gn(ev)
    off = not math.isfinite(loss0) or abs(loss0 - ev.ln_v) > T["loss0_band"] or (math.isfinite(gn) and gn > T["gn1_high"])
    return Finding(off, loss0, f"step-0 loss {fmt(loss0)} (ln V {ev.ln_v:.3f}), first-step grad norm {fmt(gn)}", 0)
    # no crossing of its own: §1 decided, and its finding carries the degree
