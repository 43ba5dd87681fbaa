"""`minitrain remediate RUN`: walk a run, re-run it from the last checkpoint before its anomaly with the leaf's
remedy (core/remedy.py holds the in-step part), walk again and compare against the baseline in one page."""
from __future__ import annotations

from pathlib import Path

from minitrain.core.config import build_config
from minitrain.core.errors import Interrupted, UserError
from minitrain.core.fmt import fmt
from minitrain.core.remedy import REGISTRY
from minitrain.lab import blind
from minitrain.analysis.causes import CAUSES
from minitrain.analysis.compare import measure, remedy_verdict
from minitrain.analysis.fixcheck import conclusion, fix_outcome, walk_after_fix
from minitrain.lab import spoilers
from minitrain.lab.runs import REMEDIATED, interrupted
from minitrain.lab.learner import walk
from minitrain.run import files, reader
from minitrain.views import dashboard


def fix_for(cause: str | None) -> str | None:
    """The causes registry's fix for a cause: a registered remedy's name, or a config fix (re-run from step 0)."""
    c = CAUSES.get(cause or "")
    return (c.remedy or c.config_fix) if c else None


def checkpoint_before(run: Path, limit: int) -> tuple[Path, int] | None:
    """The latest checkpoint at or before step `limit` holding this run's state: in the run itself, or in the
    run it was forked from (whose steps before the fork are this run's too)."""
    best = None
    run, seen = Path(run), set()
    while run is not None and run.resolve() not in seen:
        seen.add(run.resolve())
        steps = [s for s in files.list_checkpoints(run) if s <= limit]
        if steps and (best is None or steps[-1] > best[1]):
            best = (run, steps[-1])
        forked = reader.manifest_of(run).get("forked_from") or {}
        if not forked.get("run"):
            break
        limit = min(limit, int(forked.get("checkpoint_step", limit)))
        run = run.parent / forked["run"]
    return best


def remediate(run: Path, remedy_name: str | None = None, baseline: Path | None = None,
              force: bool = False, spoil: bool = False) -> dict:
    """Walk RUN, re-run it from the last checkpoint before the anomaly with the leaf's remedy into
    RUN-remediated, walk that, measure both against the baseline and write RUN-remediated/dashboard.html
    (remediated vs original vs baseline). The remedy it picks names the leaf's cause: a run of a learner lab
    not revealed yet is refused unless `spoil` (logged, as `minitrain diagnose --spoil` is)."""
    run = Path(run)
    if not (run / "manifest.json").exists():
        raise UserError(f"{run} is not a run folder (no manifest.json); give e.g. experiments/19-injection-B")
    spoilers.gate(run, "remediate", spoil)
    if run.name.endswith(REMEDIATED):
        raise UserError(f"{run} is already a remediation; remediate the original run")
    files.refuse_if_live(run)  # its metrics are still being written: the walk would judge half a run
    manifest = reader.read_json(run / "manifest.json", "manifest")
    config = manifest.get("config") or {}
    cfg = blind.true_config(run) if config.get("blind") else build_config(config, [])
    verdict = walk(run)
    if not verdict:
        raise UserError(f"the stability walker could not read {run}; see 'minitrain diagnose {run}'")
    cause, anomaly = verdict.get("cause"), verdict.get("anomaly_step")
    name = remedy_name or fix_for(cause)
    if name is None:
        raise UserError(f"the walker stops at {verdict.get('leaf')} ({cause}), which has no registered remedy; "
                        f"apply its remediation by hand, or pick one with --remedy ({', '.join(REGISTRY)})")
    donor, overrides, fix_step = None, ["progress=false", "blind=false"], 0  # a config fix: from step 0
    if name in REGISTRY:
        if anomaly is None:
            raise UserError(f"the walker names no anomaly step for {run}, so {name} has no step to act at")
        remedy_step = anomaly + 1 if name == "restore_moments" else anomaly
        if remedy_step >= cfg.steps:
            raise UserError(f"the anomaly is at the run's last step ({anomaly}); there is nothing after it to remedy")
        start_limit = anomaly - cfg.remedy_zclip_warmup if name == "zclip" else anomaly
        donor = checkpoint_before(run, max(0, start_limit))
        overrides += [f"remedy={name}", f"remedy_step={remedy_step}"]
        fix_step = remedy_step
        tensor = (verdict.get("evidence") or {}).get("tensor")
        if name == "restore_moments" and tensor:  # the walker names the tensor whose v moved: restore only it
            overrides.append(f"remedy_param={tensor}")
    elif "=" in name:
        overrides.append(name)  # a config fix: the whole run again from step 0
    else:
        raise UserError(f"unknown remedy '{name}'; valid: {', '.join([*REGISTRY, *(c.config_fix for c in CAUSES.values() if c.config_fix)])}")
    new_cfg = build_config(cfg.to_dict(), overrides)
    out = run.parent / f"{run.name}{REMEDIATED}"
    try:
        return _train_and_report(run, out, new_cfg, donor, force, name, verdict, baseline, fix_step, anomaly)
    except KeyboardInterrupt:  # the same command again continues (train_or_continue): say so, not --resume
        raise Interrupted(f"run 'minitrain remediate {run}' again: it continues {out} from its last "
                          "checkpoint (or reuses it, once ended) and writes remediation.json") from None


def _train_and_report(run: Path, out: Path, new_cfg, donor, force: bool, name: str, verdict: dict,
                      baseline: Path | None, fix_step: int, anomaly: int | None) -> dict:
    res = train_or_continue(new_cfg, out, donor, force)
    baseline = Path(baseline) if baseline else reader.find_baseline(run)
    after = walk(out) or {}  # the whole re-run, as `diagnose` walks it
    judged = walk_after_fix(out, baseline, fix_step, anomaly)  # the steps after the fix point
    k = anomaly
    before_m, after_m = measure(run, baseline, k), measure(out, baseline, k)
    summary = _summary(name, before_m, after_m, verdict, judged)
    against = remedy_verdict(before_m, after_m)
    page = out / "dashboard.html"
    done = reader.manifest_of(out).get("remedy") or {}  # what the remedy did, as the run recorded it
    report = {"run": run.name, "remediated": out.name, "baseline": baseline.name if baseline else None,
              "walker_before": verdict, "walker_after": after, "remedy": name,
              "from_checkpoint": {"run": donor[0].name, "step": donor[1]} if donor else None,
              "status": res.get("status"), "measured_before": before_m, "measured_after": after_m,
              "walker_after_fix": judged, "fix_step": fix_step, "fix": fix_outcome(verdict, judged),
              "verdict": against, "conclusion": conclusion(fix_outcome(verdict, judged), judged, against),
              "actions": done.get("actions"), "action_count": done.get("action_count"),
              "dashboards": [str(page)], "summary": summary}
    files.atomic_write_json(out / "remediation.json", report)
    # one page, remediated vs original vs baseline (it shows the verdict from remediation.json), then the index
    dashboard.write_dashboard(out, baseline=baseline, compare=[run])
    spoilers.refresh(spoilers.experiments_of(out))
    return report


def train_or_continue(cfg, out: Path, donor: tuple[Path, int] | None, force: bool) -> dict:
    """The remediation run: trained (replacing RUN-remediated with --force), or, when RUN-remediated holds
    this very config (a remediate killed or interrupted, the same command again), continued from its last
    checkpoint, or taken as it is when it has ended. Another config there is refused without --force."""
    from minitrain import trainer  # here: a remediate that fails on its arguments never imports torch

    if not force:
        if interrupted(out, cfg):
            return trainer.resume(out)
        manifest = reader.manifest_of(out)
        if manifest.get("config_hash") == cfg.hash() and manifest.get("status") in ("finished", "non_finite"):
            return reader.results_of(out) or {"status": manifest["status"]}
        if manifest and files.is_minitrain_run(out):
            raise UserError(f"{out} holds a remediation of another config (another remedy or settings); pass "
                            "--force to replace it")
    return trainer.train(cfg, out, force=force, fork=False, donor=donor)


def _summary(name: str, before: dict, after: dict, walk_before: dict, walk_after: dict) -> str:

    parts = [f"remedy {name}"]
    for label, key in (("mean loss diff K+1..K+50", "mean_loss_diff_after_K"),
                       ("max loss diff after K", "max_loss_diff_after_K"),
                       ("recovery steps", "recovery_steps"), ("final val loss diff", "final_val_loss_diff")):
        if key in before or key in after:
            parts.append(f"{label} {fmt(before.get(key))} -> {fmt(after.get(key))}")
    parts.append(f"walker {walk_before.get('leaf')} ({walk_before.get('cause')}) -> re-walk "
                 f"{walk_after.get('leaf')} ({walk_after.get('cause')})")
    return "; ".join(parts)
