"""`minitrain postmortem RUN`: theory/04-loss-spike-postmortem-template.md filled from a run's evidence.

Every sentence it writes comes from a number in the run folder (metrics, manifest, results), the stability
walker's verdict, or the baseline run; the learner then edits the file. It never overwrites an existing
post-mortem unless --force. A run of a learner lab not revealed yet is refused unless --spoil (lab/spoilers.py).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from minitrain.run import files, reader
from minitrain.core.errors import UserError
from minitrain.core.fmt import fmt
from minitrain.analysis.causes import CAUSES
from minitrain.analysis.compare import measure, v_jumped
from minitrain.analysis.definitions import RECOVERY_RULE, ROLLING_RULE, rolling_zscore_spikes
from minitrain.lab import spoilers
from minitrain.lab.learner import REPO_ROOT, walk

TEMPLATE = "theory/04-loss-spike-postmortem-template.md"




def template_path(explicit: Path | None = None) -> Path:
    for cand in ([Path(explicit)] if explicit else []) + [Path.cwd() / TEMPLATE, REPO_ROOT / TEMPLATE]:
        if cand.is_file():
            return cand
    raise UserError(f"post-mortem template {TEMPLATE} not found; run from the repository or pass --template FILE")


def _fill(template: str, parts: dict[str, str]) -> str:
    return re.sub(r"\{\{([a-z_]+)\}\}", lambda m: parts.get(m.group(1), m.group(0)), template)


def evidence(run: Path, baseline: Path | None) -> dict:
    """Everything the post-mortem says, as numbers and words."""
    manifest = reader.manifest_of(run)
    cfg = manifest.get("config") or {}
    verdict = walk(run) or {}
    injected = cfg.get("injection") if cfg.get("injection", "none") != "none" else None
    k = cfg.get("injection_step") if injected else verdict.get("anomaly_step")
    m = measure(run, baseline, k)
    rows, _ = reader.read_metrics(run / "metrics.jsonl")
    flags = rolling_zscore_spikes([r["step"] for r in rows], [r.get("loss") for r in rows])
    return {"manifest": manifest, "config": cfg, "verdict": verdict, "injected": injected, "K": k,
            "measure": m, "spike_flags": flags}


def render(run: Path, baseline: Path | None, template: str) -> str:
    ev = evidence(run, baseline)
    m, v, cfg = ev["measure"], ev["verdict"], ev["config"]
    k, cause = ev["K"], v.get("cause") or "unknown"
    base = f"`{baseline.name}`" if baseline else "no baseline"
    what = (f"The stability walker stops at {v.get('leaf', '?')} ({cause}): {v.get('diagnosis', 'no diagnosis')}"
            if v else "The stability walker could not run on this folder; describe what the dashboard shows.")
    if ev["injected"]:
        inj = (ev["manifest"].get("injection") or {})
        what += f"\n\nThis run carries a deliberate injection: `{ev['injected']}` at step {k} ({_settings(inj)})."
    when = []
    if k is not None:
        when.append(f"- anomaly at step {k}" + (" (the injection step)" if ev["injected"] else " (walker's anomaly step)"))
    if m.get("first_step_differing") is not None:
        when.append(f"- first step whose loss differs from {base}: {m['first_step_differing']}")
    if m.get("non_finite_step") is not None:
        when.append(f"- first non-finite loss or gradient: step {m['non_finite_step']}")
    detection = []
    if m.get("grad_norm_at_K") is not None:
        detection.append(f"- pre-clip gradient norm at K: {fmt(m['grad_norm_at_K'])} against "
                         f"{fmt(m.get('baseline_grad_norm_at_K'))} in the baseline (x{fmt(m.get('grad_norm_ratio_at_K'), 3)})")
    if m.get("loss_at_K") is not None:
        detection.append(f"- loss at K: {fmt(m['loss_at_K'])} against {fmt(m.get('baseline_loss_at_K'))}")
    if v_jumped(m):
        detection.append(f"- Adam v of {m['v_jump_param']} x{fmt(m['v_jump_ratio_at_K'], 3)} the baseline at K")
    if m.get("dup_rows_at_K"):
        detection.append(f"- batch at K: {m['dup_rows_at_K']} duplicated rows, rare-token share {fmt(m.get('rare_share_at_K'))}")
    flags = ev["spike_flags"]
    detection.append(f"- course spike flag ({ROLLING_RULE}): "
                     + (f"steps {', '.join(map(str, flags[:8]))}" + (" ..." if len(flags) > 8 else "") if flags else "never raised"))
    if v.get("path"):
        detection.append(f"- stability-check walk: {' → '.join(map(str, v['path']))}")
    root = (f"{cause}: {v.get('diagnosis', '')}" if v else "unknown (the walker could not run)")
    impact = []
    for label, key in (("mean loss difference over K+1..K+50", "mean_loss_diff_after_K"),
                       ("largest loss difference after K", "max_loss_diff_after_K"),
                       (f"steps to recover (until {RECOVERY_RULE})", "recovery_steps"),
                       ("final validation loss difference", "final_val_loss_diff")):
        if key in m:
            impact.append(f"- {label}: {fmt(m[key])}" + (f" (step {m['max_loss_diff_step']})" if key == "max_loss_diff_after_K" else ""))
    if not impact:
        impact.append(f"- no step-by-step comparison: {'no baseline' if baseline is None else 'no anomaly step'}")
    from minitrain.lab.remediate import fix_for

    remedy = fix_for(cause)
    remediation = (v.get("remediation") or "") + (f"\n\nRegistered remedy: `minitrain remediate {run}` (applies `{remedy}`)."
                                                   if remedy else "")
    remediated = run.parent / f"{run.name}-remediated" / "remediation.json"
    measured, unreadable = reader.read_optional_json(remediated)
    if measured is not None or unreadable:
        remediation += (f"\n\nMeasured in `{remediated.parent.name}`: "
                        + (str(measured.get("summary", "")) if measured is not None else f"({unreadable})"))
    evidence_lines = [f"- {key}: {fmt(val)}" for key, val in m.items() if val is not None]
    return _fill(template, {
        "run": run.name, "baseline": baseline.name if baseline else "none",
        "generated": time.strftime("%Y-%m-%d %H:%M"), "status": str(ev["manifest"].get("status", "unknown")),
        "what_happened": what, "when": "\n".join(when) or "- no anomaly step found",
        "detection": "\n".join(detection), "root_cause": root, "impact": "\n".join(impact),
        "remediation": remediation.strip() or "(none prescribed)", "prevention": CAUSES[cause].prevention if cause in CAUSES else "(yours to write)",
        "evidence": "\n".join(evidence_lines),
    })


def _settings(inj: dict) -> str:
    skip = ("injection", "point", "step", "record")
    return ", ".join(f"{k}={v}" for k, v in inj.items() if k not in skip) or "default settings"


def write_postmortem(run: Path, baseline: Path | None = None, out: Path | None = None, force: bool = False,
                     template: Path | None = None, experiments: Path | None = None, spoil: bool = False) -> Path:
    """The post-mortem names the walker's leaf, cause and path: a run of a lab not revealed yet is refused
    unless `spoil` (logged, as `minitrain diagnose --spoil` is)."""
    run = Path(run)
    if not (run / "metrics.jsonl").exists():
        raise UserError(f"{run} is not a run folder (no metrics.jsonl); give e.g. experiments/19-injection-B")
    reader.check_run(run)
    spoilers.gate(run, "postmortem", spoil)
    if baseline is not None and not (Path(baseline) / "metrics.jsonl").exists():
        raise UserError(f"--baseline {baseline} is not a run folder (no metrics.jsonl)")
    if baseline is None:
        baseline = reader.find_baseline(run, experiments)
    out = Path(out) if out else run / "postmortem.md"
    if out.exists() and not force:
        raise UserError(f"{out} exists (your edits may be in it); pass --force to overwrite it or --out another file")
    text = render(run, Path(baseline) if baseline else None, template_path(template).read_text())
    files.atomic_write_text(out, text)
    return out
