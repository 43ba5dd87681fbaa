"""`minitrain explain RUN [--step S]`: prove (or refute) the walker's diagnosis by replay.

From the last kept checkpoint at or before S (S: the walker's anomaly step unless given), replay a few
counterfactuals to S + AFTER and measure, on each, whether the anomaly at S is still there
(analysis/counterfactual.py judges):

    identical        the run as recorded: it must give the recorded rows bit for bit (said first if not)
    batch_at_S       the batch at S replaced by another batch of the same data order (config swap_steps)
    batches_before   the batches of the FEW steps before S replaced, the batch at S kept
    state_before     Adam's moments put back FEW steps before S to those of an earlier checkpoint boundary
                     (the restore_moments remedy), the weights and every batch kept
    remedy           the leaf's registered remedy, applied as `minitrain remediate` applies it
    clipping         clipping off (or on at the course's threshold), where the leaf involves clipping

The replays are run folders under RUN/explain/ (lab/replays.py: locked, cached by config hash, on the one
runner). The table and the conclusion go to RUN/diagnosis.json beside the walker's verdict (key
"counterfactuals") and to the run's page as evidence.
"""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.analysis import counterfactual as cf
from minitrain.analysis.definitions import clipping_off
from minitrain.analysis.evidence import load_evidence
from minitrain.analysis.report import write_diagnosis
from minitrain.analysis.walk import diagnose_run
from minitrain.core.config import TrainConfig, build_config
from minitrain.core.errors import UserError
from minitrain.core.remedy import REGISTRY as REMEDIES
from minitrain.lab import blind, spoilers
from minitrain.lab.remediate import checkpoint_before, fix_for
from minitrain.lab.replays import Replay, comparable_rows, cpu_seconds, run_replays
from minitrain.run import files, reader
from minitrain.views import dashboard

FOLDER = "explain"


def run_config(run: Path, manifest: dict):
    """The config RUN was trained with (a blind run's secret fields included, after its reveal)."""
    config = reader.config_of(manifest)
    if not config:
        raise UserError(f"{run}/manifest.json holds no config; explain replays minitrain runs only")
    return blind.true_config(run) if config.get("blind") else build_config(config, [])


def retention_advice(run: Path, limit: int, cfg) -> str:
    return (f"no checkpoint of {run} (or of the run it was forked from) is kept at or before step {limit}; "
            f"train it again keeping one: --set ckpt_keep_steps=[{limit}] (the last checkpoint at or before "
            f"{limit}, and the one before {limit} - remedy_zclip_warmup) or --set ckpt_keep_last=0 (every "
            f"checkpoint, {cfg.steps // cfg.ckpt_every} of them)")


def kept_state(run: Path, cfg, limit: int) -> tuple[Path, int] | None:
    """The latest kept checkpoint holding RUN's state at or before step `limit`: the run's own or its donor's
    (remediate.checkpoint_before), else, for a run whose fork point is withheld (a blind run), its baseline's at
    or before the fault's step when both were made with the same config but the fault."""
    found = checkpoint_before(run, limit)
    if found is None and cfg.injection != "none":
        base = reader.find_baseline(run)
        if base is not None and reader.manifest_of(base).get("trunk_hash") == cfg.trunk_hash():
            found = checkpoint_before(base, min(limit, cfg.injection_step))
    return found


def plan(run: Path, cfg, verdict: dict, s: int, stop: int) -> tuple[list[Replay], list[str]]:
    """The counterfactual replays of RUN at step s, and a note for each one that cannot be made."""
    notes: list[str] = []
    c0 = kept_state(run, cfg, s)
    if c0 is None:
        raise UserError(retention_advice(run, s, cfg))
    if s - c0[1] > 2 * cfg.ckpt_every:
        notes.append(f"the nearest kept checkpoint is at step {c0[1]}, {s - c0[1]} steps before {s}: "
                     + retention_advice(run, s, cfg).split("; ", 1)[1])
    prefix = f"s{s}-"
    out = [Replay(prefix + "identical", "identical replay", "identical", {}, c0, stop)]
    out.append(Replay(prefix + "batch_at_S", f"batch at {s} swapped", "data",
                      {"swap_steps": [s], "swap_offset": cfg.steps}, c0, stop))
    first = s - cf.FEW
    early = kept_state(run, cfg, first - 1) if first >= 1 else None
    if early is None:
        notes.append(f"no checkpoint before step {first}: the batches before {s} and the earlier optimizer state "
                     "are not replayed; " + retention_advice(run, first - 1, cfg).split("; ", 1)[1])
    else:
        out.append(Replay(prefix + "batches_before", f"batches {first}..{s - 1} swapped", "data",
                          {"swap_steps": list(range(first, s)), "swap_offset": cfg.steps}, early, stop))
    if early is not None and cfg.remedy != "none":  # the state replay is a remedy: it would replace the run's own
        notes.append(f"the run applies the remedy {cfg.remedy}; Adam's earlier state is not replayed (that replay "
                     "is itself a remedy and would take the run's away)")
    elif early is not None:
        boundary = (first - 1) // cfg.ckpt_every * cfg.ckpt_every  # restore_moments' last snapshot before `first`
        out.append(Replay(prefix + "state_before", f"Adam state of step {boundary} put back at {first}", "state",
                          {"remedy": "restore_moments", "remedy_step": first, "remedy_param": ""}, early, stop))
    name = fix_for(verdict.get("cause"))
    if name in REMEDIES:
        step = s + 1 if name == "restore_moments" else s
        limit = s - cfg.remedy_zclip_warmup if name == "zclip" else s
        start = kept_state(run, cfg, max(0, limit))
        tensor = (verdict.get("evidence") or {}).get("tensor") if name == "restore_moments" else None
        if start is None:
            notes.append(f"the leaf's remedy {name} needs a checkpoint at or before {limit}; "
                         + retention_advice(run, limit, cfg).split("; ", 1)[1])
        elif step < cfg.steps:
            out.append(Replay(prefix + "remedy", f"remedy {name} at {step}" + (f" ({tensor})" if tensor else ""),
                              cf.REMEDY_KIND.get(name, "remedy"),
                              {"remedy": name, "remedy_step": step, "remedy_param": tensor or ""}, start, stop,
                              {"remedy": name}))
    elif name:
        notes.append(f"the leaf's fix is a config change ({name}): it re-runs from step 0, not a replay at {s}")
    if cf.involves_clipping(verdict.get("cause"), verdict.get("case")):
        clip = TrainConfig.grad_clip if clipping_off(cfg.grad_clip) else 0.0
        words = f"clipping on at {clip:g}" if clip else "clipping off"
        out.append(Replay(prefix + "clipping", words, "clipping", {"grad_clip": clip}, c0, stop))
    return out, notes


def explain(run: Path, step: int | None = None, spoil: bool = False, jobs: int | None = None, out=None) -> dict:
    """Replay RUN's counterfactuals at step S, judge them, write them into diagnosis.json and the page."""
    out = out or sys.stderr
    cpu0 = cpu_seconds()
    run = Path(run)
    if not (run / reader.MANIFEST).exists():
        raise UserError(f"{run} is not a run folder (no manifest.json); give e.g. experiments/19-injection-B")
    if spoilers.is_sealed(run) and not spoil:
        raise UserError(f"{run} is a run of the {spoilers.lab_of(run)} lab, which is not revealed yet: walk "
                        "stability-check.md on its dashboard first and reveal ('minitrain reveal NAME'), or pass "
                        "--spoil to see the replays' answer now")
    files.refuse_if_live(run)
    manifest = reader.read_json(run / reader.MANIFEST, "manifest")
    cfg = run_config(run, manifest)
    verdict = diagnose_run(run)
    s = step if step is not None else verdict.get("anomaly_step")
    if s is None:
        raise UserError(f"the walker names no anomaly step for {run} ({verdict['leaf']} {verdict['title']}); "
                        "give one with --step S")
    recorded = reader.rows_by_step(run)
    if s not in recorded:
        raise UserError(f"{run} has no row at step {s} (its rows: {min(recorded)}..{max(recorded)}); "
                        "give a step of the run with --step")
    stop = min(s + cf.AFTER + 1, max(recorded) + 1)
    replays, notes = plan(run, cfg, verdict, s, stop)
    with files.lock_run(run):  # nothing else writes the run while its diagnosis and page are rewritten
        cost = run_replays(replays, run / FOLDER, cfg.to_dict(), jobs, out, label="explain")
        report = judge(run, cfg, verdict, s, replays, recorded, notes, bool(reader.config_of(manifest).get("blind")))
        report["cost"] = {**cost, "cpu_seconds_total": round(cpu_seconds() - cpu0, 2)}
        write_diagnosis(run, {**verdict, "counterfactuals": report})
        sealed = spoilers.is_sealed(run)
        dashboard.write_dashboard(run, sealed=sealed)
    spoilers.refresh(spoilers.experiments_of(run))
    return report


def judge(run: Path, cfg, verdict: dict, s: int, replays: list[Replay], recorded: dict[int, dict],
          notes: list[str], blind_run: bool) -> dict:
    """Measure the anomaly on the record and on every replay; the table and the conclusion."""
    cause, tensor = verdict.get("cause"), (verdict.get("evidence") or {}).get("tensor")
    how = {"cause": cause, "tensor": tensor, "decided_by": verdict.get("decided_by")}
    identical = next(r for r in replays if r.kind == "identical")
    same = reproduced(identical, recorded, blind_run)
    measures = {r.name: cf.measure(load_evidence(r.folder), s, **how) for r in replays}
    base = measures[identical.name]
    rows = [{"name": "recorded", "description": "the run as recorded", "kind": "record", "from": None,
             "measure": (m := cf.measure(load_evidence(run), s, until=identical.stop, **how)), "verdict": cf.verdict_of(m, base)}]
    for r in replays:
        m = measures[r.name]
        rows.append({"name": r.name.split("-", 1)[1], "description": r.description, "kind": r.kind,
                     "from": {"run": r.start[0].name, "step": r.start[1]}, "folder": str(r.folder),
                     "cached": r.cached, "status": r.status, "measure": m, "verdict": cf.verdict_of(m, base),
                     **r.extra})
    result = cf.conclude(rows[1:], cause, same, cfg.grad_clip)
    return {"step": s, "walker": {"leaf": verdict.get("leaf"), "cause": cause, "title": verdict.get("title"),
                                  "anomaly_step": verdict.get("anomaly_step")},
            "signal": base.get("signal"), "threshold": base.get("threshold"), "window": [identical.start[1], identical.stop],
            "identical": same, "table": rows, "notes": notes, **result}


def reproduced(identical: Replay, recorded: dict[int, dict], blind_run: bool) -> dict:
    """Does the identical replay give the recorded rows, bit for bit, over its window?"""
    mine = {s: r for s, r in reader.rows_by_step(identical.folder).items() if s >= identical.start[1]}
    want = {s: r for s, r in recorded.items() if identical.start[1] <= s < identical.stop}
    a, b = comparable_rows(mine, blind_run), comparable_rows(want, blind_run)
    differ = sorted(s for s in set(a) | set(b) if a.get(s) != b.get(s))
    return {"exact": not differ, "steps_compared": len(b), "first_difference": differ[0] if differ else None}


def format_report(run: Path, rep: dict) -> str:
    w = rep["walker"]
    lines = [f"explain {Path(run).name} at step {rep['step']}: walker {w['leaf']} {w['title']} ({w['cause']}"
             + (f", step {w['anomaly_step']})" if w.get("anomaly_step") is not None else ")"),
             f"deciding signal: {rep['signal']} (there when {rep['threshold']}); replays of steps "
             f"{rep['window'][0]}..{rep['window'][1] - 1} under {Path(run) / FOLDER}",
             "loss@S: loss excess at S over its 50-step trailing median (nats); norm@S: pre-clip gradient norm at S "
             "over its trailing median",
             "",
             f"{'intervention':<42} {'from':<18} {'loss@S':>7} {'norm@S':>7}  {'still there?':<13} by how much"]
    for row in rep["table"]:
        v = row["verdict"]
        there = "-" if v.get("still_there") is None else "yes" if v["still_there"] else "no"
        frm = "-" if not row["from"] else f"{row['from']['run']}@{row['from']['step']}"
        by = v["by"] if row["name"] != "recorded" else _value(row["measure"])
        m = row["measure"]
        loss = "-" if m.get("loss_excess") is None else f"{m['loss_excess']:+.3f}"
        norm = "-" if m.get("grad_norm_ratio") is None else f"x{m['grad_norm_ratio']:.3g}"
        lines.append(f"{row['description']:<42} {frm:<18} {loss:>7} {norm:>7}  {there:<13} {by}")
    same = rep["identical"]
    lines.append("")
    lines.append(f"identical replay: {'bit-identical' if same['exact'] else 'DIFFERS'} to the recorded rows over "
                 f"{same['steps_compared']} steps")
    lines += [f"conclusion: {line}" if i == 0 else f"            {line}" for i, line in enumerate(rep["lines"])]
    lines += [f"note: {n}" for n in rep["notes"]]
    c = rep.get("cost") or {}
    if c:
        lines.append(f"cost: {c['trained']} replays trained, {c['cached']} cached, {c['cpu_seconds_total']:.1f} CPU s in all")
    return "\n".join(lines)


def _value(m: dict) -> str:
    v = m.get("value")
    if v is None:
        return "not measured"
    if m.get("unit") == "share":
        return f"{v:.0%}"
    if m.get("unit") == "steps":
        return f"{v:g} steps"
    return f"x{v:.3g}" if m.get("unit") == "x" else f"{v:+.3f} {m.get('unit', '')}"
