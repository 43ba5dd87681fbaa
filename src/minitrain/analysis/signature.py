"""Expected vs observed: what each injection did to the run, measured against the baseline of the same seed.

Because runs are deterministic and an injection run shares steps 0..K-1 (and every batch after K) with its
baseline, the difference injected - baseline at each step is exactly the injection's effect, not noise.

Measured for each injection run (`signature.json`):
  loss_at_k / baseline_loss_at_k      the loss of the batch at K (measured before K's update)
  max_excess, max_excess_step        largest loss excess over the baseline at or after K
  grad_norm_ratio_vs_baseline_at_k   pre-clip norm at K / baseline's pre-clip norm at K
  pre_post_clip_ratio_at_k           pre-clip / post-clip norm at K
  recovery_steps                     first n such that, from step K + n on, every WINDOW-step mean of
                                     (loss - baseline) is within TOL: a per-step difference never settles
                                     to zero once two trajectories part (they drift apart chaotically by
                                     a few hundredths), but its windowed mean does
  v_ratio_at_k, v_decay_steps        for v_corrupt: the tensor's mean v over the baseline's at K, and
                                     steps until that ratio is within 10% of 1
Each lab prediction (the lab text's) is then checked against these numbers and marked holds / does not hold.
"""
from __future__ import annotations

import json
from pathlib import Path

from minitrain.analysis.compare import SPIKE, TOL, WINDOW, loss_difference, recovery_steps
from minitrain.run import files, reader
from minitrain.core.errors import UserError
from minitrain.core.fmt import fmt

PREDICTIONS = {
    "scale": [
        ("loss spike visible at K", lambda s: s["excess_at_k_window"] > SPIKE),
        ("pre-clip grad norm ~50x the baseline at K", lambda s: 25 <= s["grad_norm_ratio_vs_baseline_at_k"] <= 100),
        ("clipping engages (post-clip ~1.0)", lambda s: abs(s["grad_norm_clipped_at_k"] - 1.0) < 1e-6),
        ("loss recovers within 20-40 steps", lambda s: s["recovery_steps"] is not None and 20 <= s["recovery_steps"] <= 40),
    ],
    "bad_batch": [
        ("smaller loss spike than A", None),  # compared across runs in the lab report
        ("larger grad-norm spike than A", None),
        ("recovery takes ~50 steps", lambda s: s["recovery_steps"] is not None and 30 <= s["recovery_steps"] <= 80),
    ],
    "v_corrupt": [
        ("no loss spike at K", lambda s: abs(s["loss_at_k"] - s["baseline_loss_at_k"]) < SPIKE),
        ("a slow rise over the next ~30 steps (a plateau)",
         lambda s: s["max_excess"] > SPIKE and s["max_excess_step"] - s["injection_step"] >= 5),
        ("the corruption decays as v's EMA forgets it", lambda s: s["v_decay_steps"] is not None),
    ],
}


def lab_signature(run: Path, baseline: Path) -> dict:
    m = reader.read_json(Path(run) / "manifest.json", "manifest")
    cfg = m["config"]
    if cfg["injection"] == "none":
        raise UserError(f"{run} has no injection; a signature compares an injection run with its baseline")
    rows, base = reader.rows_by_step(run), reader.rows_by_step(baseline)
    k = cfg["injection_step"]
    diff = loss_difference(rows, base)
    n = len(diff)
    if n <= k:
        raise UserError(f"{run} or {baseline} ends before the injection step {k}; finish the runs first")
    after = [(i, d) for i, d in enumerate(diff) if i >= k and d is not None]
    max_step, max_excess = max(after, key=lambda t: t[1])
    recovery = recovery_steps(diff, k)
    sig = {
        "run": Path(run).name,
        "baseline": Path(baseline).name,
        "injection": cfg["injection"],
        "injection_step": k,
        "loss_at_k": rows[k]["loss"],
        "baseline_loss_at_k": base[k]["loss"],
        "excess_at_k_window": max(d for i, d in after if i <= k + 5),
        "max_excess": max_excess,
        "max_excess_step": max_step,
        "grad_norm_at_k": rows[k]["grad_norm"],
        "baseline_grad_norm_at_k": base[k]["grad_norm"],
        "grad_norm_ratio_vs_baseline_at_k": rows[k]["grad_norm"] / base[k]["grad_norm"],
        "grad_norm_clipped_at_k": rows[k]["grad_norm_clipped"],
        "pre_post_clip_ratio_at_k": rows[k]["grad_norm"] / rows[k]["grad_norm_clipped"],
        "recovery_tolerance_nats": TOL,
        "recovery_steps": recovery,
        "final_loss_difference": diff[n - 1],
        "v_ratio_at_k": None,
        "v_decay_steps": None,
    }
    if cfg["injection"] == "v_corrupt" and "params" in rows[k]:
        name = cfg["injection_param"].replace("lm_head.weight", "tok_emb.weight")
        ratios = [(i, rows[i]["params"][name]["vm"] / base[i]["params"][name]["vm"])
                  for i in range(k, n) if base[i]["params"][name]["vm"]]
        sig["v_param"] = name
        sig["v_ratio_at_k"] = ratios[0][1] if ratios else None
        back = next((i for i, r in ratios if abs(r - 1) <= 0.1), None)
        sig["v_decay_steps"] = None if back is None else back - k
    sig["predictions"] = [
        {"prediction": text, "holds": None if check is None else bool(check(sig))}
        for text, check in PREDICTIONS.get(cfg["injection"], [])
    ]
    return sig


def write(run: Path, baseline: Path | None = None) -> dict:
    baseline = baseline or reader.find_baseline(run)
    if baseline is None:
        raise UserError(f"no baseline run beside {run}; train it first (just phase-18-train) or pass --baseline")
    sig = lab_signature(run, baseline)
    files.atomic_write_json(Path(run) / "signature.json", sig)
    return sig




def report(experiments: Path) -> str:
    """The lab report: one table of measured values per injection, then each prediction vs observation."""
    sigs = []
    for run in sorted(Path(experiments).glob("19-injection-*")):
        if (run / "manifest.json").exists() and reader.find_baseline(run):
            sigs.append(write(run))
    if not sigs:
        raise UserError(f"no injection runs with a baseline in {experiments}; run `just lab` first")
    by_inj = {s["injection"]: s for s in sigs}
    lines = ["# Spike-injection lab: expected vs observed", "",
             f"Measured against the baseline of the same seed; recovery = steps after K until every {WINDOW}-step "
             f"mean of the loss difference stays within {TOL} nats; a spike = an excess above {SPIKE} nats.", "",
             "| run | injection | K | loss at K (baseline) | max excess (step) | pre-clip norm at K (x baseline) | "
             "pre/post clip at K | recovery steps | v ratio at K |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sigs:
        lines.append(
            f"| {s['run']} | {s['injection']} | {s['injection_step']} | {fmt(s['loss_at_k'])} "
            f"({fmt(s['baseline_loss_at_k'])}) | {fmt(s['max_excess'])} ({s['max_excess_step']}) | "
            f"{fmt(s['grad_norm_at_k'])} (x{fmt(s['grad_norm_ratio_vs_baseline_at_k'])}) | "
            f"{fmt(s['pre_post_clip_ratio_at_k'])} | {fmt(s['recovery_steps'])} | {fmt(s['v_ratio_at_k'])} |")
    lines += ["", "| run | the lab predicts | holds here? |", "|---|---|---|"]
    for s in sigs:
        for p in s["predictions"]:
            holds = p["holds"]
            if holds is None and s["injection"] == "bad_batch" and "scale" in by_inj:
                a = by_inj["scale"]
                if "loss spike" in p["prediction"]:
                    holds = s["excess_at_k_window"] < a["excess_at_k_window"]
                elif "grad-norm" in p["prediction"]:
                    holds = s["grad_norm_ratio_vs_baseline_at_k"] > a["grad_norm_ratio_vs_baseline_at_k"]
            lines.append(f"| {s['run']} | {p['prediction']} | {fmt(holds)} |")
    lines += ["", "Why predictions fail here, when they do: see docs/lab-findings.md.", ""]
    text = "\n".join(lines)
    files.atomic_write_text(Path(experiments) / "lab-report.md", text)
    return text
