"""Short replays of a run: its config with a few changes, forked from a kept checkpoint (the run's own or the
run it was forked from), cut a short window after the step of interest. `minitrain explain` replays
counterfactuals, `minitrain reproduce` candidate perturbations; both through here.

Each replay is a run folder (locked while it trains, like any run) under a parent the caller names
(RUN/explain/, RUN/reproduce/). It is cached: a folder whose manifest shows the same config hash, the same
fork point and a finished window is not trained again. Replays run as jobs on the one runner (lab/runner.py),
one process per core, with a line of progress as each ends. Their checkpoints are deleted once they end: a
replay is read, never resumed or forked.
"""
from __future__ import annotations

import resource
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.lab import runner
from minitrain.run import files, reader, redact
from minitrain.run.completion import completed

# replays never change these: no progress bar in a child, no secrets withheld, one checkpoint at most on disk
REPLAY_SETTINGS = {"progress": False, "blind": False, "ckpt_keep_last": 1, "ckpt_keep_steps": []}


@dataclass
class Replay:
    name: str  # its folder under the parent
    description: str  # what it changes, in words (the table's first column)
    kind: str  # identical | data | state | remedy | clipping | hypothesis
    overrides: dict  # config fields changed from the run's
    start: tuple[Path, int]  # (run folder holding the checkpoint, its step)
    stop: int  # the replay trains steps start..stop-1
    extra: dict = field(default_factory=dict)  # what the caller wants to keep with it (a remedy's name, ...)
    # filled in by run_replays
    folder: Path | None = None
    cached: bool = False
    status: str | None = None


def replay_config(base: dict, overrides: dict):
    return build_config({**base, **overrides, **REPLAY_SETTINGS}, [])


def train_replay(cfg_dict: dict, out: str, donor: str, step: int, stop: int) -> str:
    """One replay (module level: a forked child runs it). Returns its status."""
    cfg = build_config(cfg_dict, [])
    out_path = Path(out)
    from minitrain import trainer

    res = trainer.train(cfg, out_path, force=files.is_minitrain_run(out_path), fork=False,
                     donor=(Path(donor), step), stop_at=min(stop, cfg.steps))
    shutil.rmtree(out_path / "checkpoints", ignore_errors=True)
    return res["status"]


def run_replays(replays: list[Replay], parent: Path, base: dict, jobs: int | None = None, out=None,
                label: str = "replay", backend=None) -> dict:
    """Train every replay that is not cached, at most `jobs` at a time (on `backend` when given: a Ray
    cluster, say; else local processes); fills in folder, cached and status.
    Returns the cost: {"trained", "cached", "seconds", "cpu_seconds"}."""
    out = out or sys.stderr
    parent = Path(parent)
    todo = []
    for r in replays:
        cfg = replay_config(base, r.overrides)
        r.folder = parent / r.name
        files.refuse_if_live(r.folder)
        if completed(r.folder, cfg, r.stop, forked_from=r.start):
            r.cached, r.status = True, reader.manifest_of(r.folder).get("status")
            continue
        todo.append(runner.Job(r.name, call=train_replay, run=r.folder, steps=r.stop,
                               args=(cfg.to_dict(), str(r.folder), str(r.start[0]), r.start[1], r.stop)))
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    total, cached = len(replays), len(replays) - len(todo)
    if cached:
        out.write(f"{label}: {cached} of {total} cached under {parent}\n")
    if todo:
        backend = backend or runner.LocalProcesses(jobs)
        if getattr(backend, "fork", False):  # the forked children start with the imports and the data
            runner.warm_up_runs(replay_config(base, {}))
        state = {"ended": cached}

        def on_end(j: runner.Job):
            state["ended"] += 1
            what = "done" if j.returncode in runner.OK_CODES else f"failed: {j.error()}"
            out.write(f"{label} [{state['ended']}/{total}] {j.name}: {what} ({j.ended - j.started:.1f} s)\n")
            out.flush()

        done = runner.run_jobs(todo, backend, on_end=on_end)
        failed = [j for j in done if j.failed]
        if failed:
            raise UserError(f"replay {failed[0].name} failed: {failed[0].error()}")
        by_name = {j.name: j for j in done}
        for r in replays:
            if r.name in by_name:
                r.status = by_name[r.name].result or reader.manifest_of(r.folder).get("status")
    return {"trained": len(todo), "cached": cached, "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(cpu_seconds() - cpu0, 2)}


def cpu_seconds() -> float:
    """CPU seconds of this process and its ended children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def comparable_rows(rows: dict[int, dict], blind: bool) -> dict[int, bytes]:
    """Rows as the bytes a metrics file holds them, withheld as a blind run writes them when `blind`."""
    out = {}
    for s, row in rows.items():
        row = dict(row, batch=dict(row["batch"])) if isinstance(row.get("batch"), dict) else dict(row)
        out[s] = files.dumps_row(redact.withhold_row(row) if blind else row).encode()
    return out
