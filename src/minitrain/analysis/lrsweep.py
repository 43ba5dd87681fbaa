"""What the LR sweep shows (`minitrain lr-sweep`, lab/lrsweep.py), judged once: each run's summary, the
LR-sensitivity number, which runs fail, the natural cases labelled by intervention, and the papers' claims
against this model.

Definitions (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training instabilities"):

    final loss        the median training loss over the last 10% of steps (a run stopped by a non-finite value
                      has none: it diverged). The training loss, not validation: validation here is dominated
                      by four held-out verbs and by memorisation of a ~2k-row split (docs/lab-findings.md), so
                      it measures generalisation, not whether optimisation succeeded, which is what the paper's
                      loss measures on a dataset seen once.
    LR sensitivity    the mean over the sweep's LRs (uniform in log LR) of min(final loss, initial loss) minus
                      the best final loss of that variant; a diverged run counts as the initial loss.
    a failed run      one that diverged (a non-finite value), or, at an LR above the plain model's best, ends
                      FAIL_NATS above the plain model's best final loss, or has a loss spike (definitions.robust_spikes:
                      `outlier_z` σ of its own noise above its trailing median, not a one-batch outlier);
                      the rule is definitions.sweep_failure.
    labelled by intervention  a failed plain run's cause is the intervention whose run alone, at the same seed
                      and LR, does not fail (qk_norm: attention-logit growth; z_loss: output-logit divergence;
                      update_clip: second-moment under-estimation); when several or none do, it has no label.
"""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.checks import RMS_LEAD
from minitrain.analysis.definitions import robust_spikes, sweep_failure
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.regimes import fmt_lr
from minitrain.analysis.thresholds import T
from minitrain.core.fmt import fmt

__all__ = ["fmt_lr", "run_summary", "summary_line", "sensitivity", "judge_sweep", "parameter_count", "CAUSE_OF_REMEDY"]

FINAL_SHARE = 0.1  # the final loss is the median over this share of the last steps
GROWTH = 3.0  # a signal "grows with LR" when it is this many times its value at the best LR
SENSITIVITY_MARGIN = 0.1  # "lower LR sensitivity": lower than the plain model's by at least this share
MIN_SPIKES = 3  # the spike claims need at least this many plain-model spikes to be judged
# the intervention that answers each natural cause (the tree's leaves name the same causes: analysis/causes.py)
CAUSE_OF_REMEDY = {"qk_norm": "attention_logit_growth", "z_loss": "output_logit_divergence",
                   "update_clip": "second_moment_underestimate"}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _series(rows: list[dict], key: str, reduce) -> list[tuple[int, float]]:
    """(step, value) at the steps that carry `key` (a number, or a list reduced by `reduce`)."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, list):
            v = [x for x in v if _finite(x)]
            v = reduce(v) if v else None
        if _finite(v):
            out.append((int(r["step"]), float(v)))
    return out


def _rms(rows: list[dict]) -> list[tuple[int, float]]:
    """(step, largest per-tensor update RMS `params.r`) at the steps that measured it (detail steps)."""
    out = []
    for r in rows:
        vals = [st.get("r") for st in (r.get("params") or {}).values() if isinstance(st, dict)]
        vals = [v for v in vals if _finite(v)]
        if vals:
            out.append((int(r["step"]), max(vals)))
    return out


def run_summary(rows: list[dict]) -> dict:
    """One run's numbers for the sweep (JSON-able)."""
    ev = Evidence(rows)
    loss = ev.loss
    diverged = ev.nonfinite_index is not None
    n = len(loss)
    tail = loss[n - max(1, int(round(FINAL_SHARE * n))):]
    tail = tail[np.isfinite(tail)]
    final = None if diverged or not len(tail) else float(np.median(tail))
    attn = _series(rows, "attn_logit_max", max)
    ent = _series(rows, "attn_entropy_min", min)
    logz_max = _series(rows, "logz_max", max)
    logz_mean = _series(rows, "logz_mean", max)
    logit_mean = _series(rows, "logit_mean", max)
    rms = _rms(rows)
    val = [float(r["val_loss"]) for r in rows if _finite(r.get("val_loss"))]
    spike_at = robust_spikes(ev.loss_z)
    rms_steps = {s: v for s, v in rms}
    preceded = [i for i in spike_at if any(rms_steps.get(int(ev.steps[i]) - d, 0.0) > T["rms_high"]
                                           for d in range(RMS_LEAD[0], RMS_LEAD[1] + 1))]
    top = lambda s: max(s, key=lambda p: p[1]) if s else (None, None)  # noqa: E731
    low = lambda s: min(s, key=lambda p: p[1]) if s else (None, None)  # noqa: E731
    return {
        "steps_done": n, "diverged": diverged,
        "diverged_at": ev.step_at(ev.nonfinite_index) if diverged else None,
        "initial_loss": float(loss[0]) if n and math.isfinite(loss[0]) else None,
        "final_loss": final, "final_val_loss": val[-1] if val else None,
        "attn_logit_max": top(attn)[1], "attn_logit_max_step": top(attn)[0],
        "attn_entropy_min": low(ent)[1], "attn_entropy_min_step": low(ent)[0],
        "logz_max": top(logz_max)[1], "logz_mean_final": logz_mean[-1][1] if logz_mean else None,
        "logz_mean_far": max((abs(v) for _, v in logz_mean), default=None),
        "logit_mean_final": logit_mean[-1][1] if logit_mean else None,
        "rms_max": top(rms)[1], "rms_max_step": top(rms)[0],
        "spikes": [ev.step_at(i) for i in spike_at], "spikes_after_rms": [ev.step_at(i) for i in preceded],
    }


def summary_line(s: dict) -> str:
    """The progress line's words for one run."""
    end = f"diverged at step {s['diverged_at']}" if s["diverged"] else f"final loss {fmt(s['final_loss'], 3)}"
    return (f"{end}; largest attention logit {fmt(s['attn_logit_max'], 3)}, log Z max {fmt(s['logz_max'], 3)}, "
            f"update RMS max {fmt(s['rms_max'], 3)}, {len(s['spikes'])} loss spike(s)")


def capped(s: dict) -> float | None:
    """min(final loss, initial loss); a diverged run counts as its initial loss."""
    if s.get("initial_loss") is None:
        return None
    return s["initial_loss"] if s["final_loss"] is None else min(s["final_loss"], s["initial_loss"])


def sensitivity(runs: list[dict]) -> dict:
    """The paper's LR sensitivity over one variant's runs: mean of capped final loss minus the best."""
    vals = [(r["lr"], capped(r)) for r in runs if capped(r) is not None]
    if not vals:
        return {"sensitivity": None, "best_loss": None, "best_lr": None}
    best_lr, best = min(vals, key=lambda p: p[1])
    return {"sensitivity": float(np.mean([v - best for _, v in vals])), "best_loss": best, "best_lr": best_lr}


def judge_sweep(runs: list[dict], lrs: list[float]) -> dict:
    """Per variant its sensitivity; per LR which runs failed; the natural cases labelled by intervention;
    the papers' claims against what the runs show."""
    by = {}
    for r in runs:
        by.setdefault(r["variant"], {})[r["lr"]] = r
    variants = {name: sensitivity(list(rs.values())) for name, rs in by.items()}
    plain = variants.get("default") or {}
    ref_best, ref_lr = plain.get("best_loss"), plain.get("best_lr")
    failures = {}
    if ref_best is not None:
        for r in runs:
            why = sweep_failure(r, ref_best, ref_lr)
            if why:
                failures[f"{r['variant']}@{fmt_lr(r['lr'])}"] = why
    cases = natural_cases(by, failures)
    return {"sensitivity": variants, "failures": failures, "natural_cases": cases,
            "claims": claims(by, variants, failures, cases, lrs)}


def natural_cases(by: dict, failures: dict) -> list[dict]:
    """Every failed plain run, with the interventions that remove its failure at the same LR and its label."""
    out = []
    for lr, r in sorted((by.get("default") or {}).items()):
        key = f"default@{fmt_lr(lr)}"
        if key not in failures:
            continue
        removed = [name for name in CAUSE_OF_REMEDY
                   if lr in by.get(name, {}) and f"{name}@{fmt_lr(lr)}" not in failures]
        label = CAUSE_OF_REMEDY[removed[0]] if len(removed) == 1 else None
        out.append({"lr": lr, "why": failures[key], "removed_by": removed, "cause": label})
    return out


def _at_top(by: dict, name: str, key: str, lrs: list[float]):
    """A variant's value of `key` at the highest LR that has it."""
    for lr in sorted(lrs, reverse=True):
        v = (by.get(name) or {}).get(lr, {}).get(key)
        if v is not None:
            return lr, v
    return None, None


def claims(by: dict, variants: dict, failures: dict, cases: list[dict], lrs: list[float]) -> list[dict]:
    """The papers' claims, each with what this sweep shows and a verdict: reproduced, partly (the signal
    behaves as reported but nothing fails from it), or not at this scale."""
    plain = by.get("default") or {}
    best_lr = (variants.get("default") or {}).get("best_lr")
    out = []

    def growth(key: str) -> tuple[float | None, float | None, float | None]:
        base = (plain.get(best_lr) or {}).get(key)
        top_lr, top = _at_top(by, "default", key, lrs)
        return base, top, top_lr

    def claim(cid, paper, observed, verdict):
        out.append({"id": cid, "paper": paper, "observed": observed, "verdict": verdict})

    # attention-logit growth
    base, top, top_lr = growth("attn_logit_max")
    qk_top = _at_top(by, "qk_norm", "attn_logit_max", lrs)[1]
    grows = base is not None and top is not None and top >= GROWTH * max(base, 1e-9)
    fixed = [c for c in cases if c["cause"] == "attention_logit_growth"]
    claim("attention-logit-growth",
          "At high LR the largest pre-softmax attention logit grows until attention is near one-hot and the loss "
          "diverges; qk-layernorm prevents it.",
          f"plain model: largest attention logit {fmt(base, 3)} at its best LR {fmt_lr(best_lr) if best_lr else 'n/a'}, "
          f"{fmt(top, 3)} at LR {fmt_lr(top_lr) if top_lr else 'n/a'}; with qk_norm {fmt(qk_top, 3)}; failures that "
          f"qk_norm alone removes: {', '.join(fmt_lr(c['lr']) for c in fixed) or 'none'}",
          "reproduced" if grows and fixed else "partly" if grows else "not at this scale")
    # entropy collapse
    ent_base, ent_top, ent_lr = growth("attn_entropy_min")
    collapse = ent_top is not None and ent_top <= T["attn_entropy_low"]
    claim("entropy-collapse", "Attention entropy collapses (near one-hot attention) with the logit growth.",
          f"plain model: smallest attention entropy {fmt(ent_base, 3)} nats at its best LR, {fmt(ent_top, 3)} at "
          f"LR {fmt_lr(ent_lr) if ent_lr else 'n/a'} (collapse: <= {T['attn_entropy_low']:g})",
          "reproduced" if collapse and fixed else "partly" if collapse else "not at this scale")
    # output-logit divergence
    z_base, z_top, z_lr = growth("logz_mean_far")
    zl_top = _at_top(by, "z_loss", "logz_mean_far", lrs)[1]
    drifts = z_top is not None and z_top >= T["logz_far"]
    zfixed = [c for c in cases if c["cause"] == "output_logit_divergence"]
    claim("output-logit-divergence",
          "At high LR the output logits drift so that log Z moves far from 0 and the loss degrades; the z-loss "
          "(1e-4) prevents it.",
          f"plain model: largest |mean log Z| {fmt(z_base, 3)} at its best LR, {fmt(z_top, 3)} at LR "
          f"{fmt_lr(z_lr) if z_lr else 'n/a'}; with z_loss {fmt(zl_top, 3)}; failures that z_loss alone removes: "
          f"{', '.join(fmt_lr(c['lr']) for c in zfixed) or 'none'}",
          "reproduced" if drifts and zfixed else "partly" if drifts else "not at this scale")
    # LR sensitivity
    ref = (variants.get("default") or {}).get("sensitivity")
    for name, what in (("qk_norm", "qk-layernorm"), ("z_loss", "z-loss"), ("qk_norm+z_loss", "both"),
                       ("warmup", "a longer warmup")):
        s = (variants.get(name) or {}).get("sensitivity")
        lower = ref is not None and s is not None and s <= (1 - SENSITIVITY_MARGIN) * ref
        claim(f"sensitivity-{name}", f"LR sensitivity is lower with {what} than without.",
              f"LR sensitivity {fmt(s, 3)} with {what} against {fmt(ref, 3)} for the plain model (lower: by "
              f"{SENSITIVITY_MARGIN:.0%} or more)",
              "reproduced" if lower else "not at this scale")
    # StableAdamW
    n_spikes = sum(len(r["spikes"]) for r in plain.values())
    n_after = sum(len(r["spikes_after_rms"]) for r in plain.values())
    claim("spikes-follow-rms",
          f"Loss spikes follow {RMS_LEAD[0]}-{RMS_LEAD[1]} steps after Adam's second moment under-estimates g^2 "
          "(update RMS well above 1).",
          f"plain model: {n_spikes} loss spike(s) over the sweep (judged from {MIN_SPIKES}), {n_after} of them with an update RMS above "
          f"{T['rms_high']:g} measured {RMS_LEAD[0]}-{RMS_LEAD[1]} steps before (RMS is measured on detail steps)",
          "reproduced" if n_spikes >= MIN_SPIKES and 2 * n_after >= n_spikes else
          "partly" if n_after else "not at this scale")
    uc = sum(len(r["spikes"]) for r in (by.get("update_clip") or {}).values())
    ufixed = [c for c in cases if c["cause"] == "second_moment_underestimate"]
    claim("update-clipping", "Update clipping (StableAdamW) removes those spikes.",
          f"loss spikes: {n_spikes} in the plain runs, {uc} with update clipping; failures that update clipping "
          f"alone removes: {', '.join(fmt_lr(c['lr']) for c in ufixed) or 'none'}",
          "reproduced" if n_spikes >= MIN_SPIKES and 2 * uc <= n_spikes else "not at this scale")
    return out


def parameter_count(cfg) -> int:
    """Parameters of the model a config builds (without building it)."""
    d, h = cfg.d_model, cfg.d_model // cfg.n_head
    per_block = 4 * d * d + 2 * d * cfg.d_ff + 2 * d + (2 * h if cfg.qk_norm else 0)
    return cfg.vocab_size * d + cfg.n_layer * per_block + d + cfg.vocab_size
