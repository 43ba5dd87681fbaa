"""The regime map (`minitrain explore`): where do the lab's 10 predictions hold, and where are they absorbed?

The lab's predictions come from large-scale pretraining, where the clip threshold sits above most steps'
gradient norm. With the course's settings this model's healthy pre-clip norm is above 1.0 on every step, so
clipping at 1.0 engages always (docs/lab-findings.md). This sweeps the settings that decide whether a fault is
visible and judges every prediction in every cell with the lab report's own definitions (analysis/signature.py:
PREDICTIONS, judge; analysis/definitions.py: spike, recovery). Nothing here redefines a verdict.

A *trunk* is (peak lr, batch size, clip threshold) and has one baseline. A *cell* is one injection at K forked
from its trunk's baseline (same config but the injection: both share steps 0..K-1 and every batch after) and
run TAIL steps past K. Clip thresholds are relative to the trunk's own healthy norm: `course` (the config's
1.0), `median` and `p99` of the pre-clip norm of the unclipped healthy run over steps [warmup, K + TAIL), and
`off`. Every run keeps the lab's 2000-step schedule, so the learning rate at K is the lab's, and stops at
K + TAIL (status "stopped"). Runs are cached by config hash (the folder name carries the trunk hash and each
manifest the config hash): a re-run trains only what is new. Each run is its own process on lab/runner.py,
at most one per core, or a task on a Ray cluster (`--ray`, lab/ray_backend.py).

The judgments behind the map are analysis/regimes.py's; its page and doc are drawn by views/explore.py.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.analysis import regimes, signature
from minitrain.analysis.definitions import CLIP_OFF, SPIKE, TOL, WINDOW
from minitrain.analysis.regimes import CLIPS, axis_value, calibrate, clip_rate, fmt_lr
from minitrain.core.config import TrainConfig, build_config
from minitrain.core.course import LAB_K
from minitrain.core.errors import UserError
from minitrain.lab import runner, sweep
from minitrain.lab.sweep import COST, train_one
from minitrain.run import files, reader
from minitrain.run.completion import completed
from minitrain.views import explore as page

K = LAB_K  # the lab's injection step
TAIL = 250  # steps after K: recovery needs full WINDOW-step windows; v of x1000 takes ~200 steps to decay
GRID_FIELDS = ("injection", "injection_step", "injection_scale", "injection_param", "injection_factor", "steps",
               "grad_clip", "lr_max", "lr_min", "batch_size", "ckpt_every")  # the sweep sets these itself


@dataclass(frozen=True)
class Variant:
    """One injection of a trunk: its config overrides and its coordinates on the map."""

    injection: str
    sets: tuple[str, ...] = ()
    coords: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        c = dict(self.coords)
        return "-".join([self.injection, *([str(c["target"])] if "target" in c else []),
                         *([f"x{c['factor']:g}"] if "factor" in c else [])])


def scale(f: float) -> Variant:
    return Variant("scale", (f"injection_scale={f}",), (("factor", f),))


def v_corrupt(target: str, f: float) -> Variant:
    return Variant("v_corrupt", (f"injection_param={target}", f"injection_factor={f}"), (("target", target), ("factor", f)))


BAD_BATCH = Variant("bad_batch")
LAB_C = v_corrupt("lm_head.bias", 100)  # the lab's own C
STRONG_C = v_corrupt("tok_emb.weight", 1000)  # the C that moves the loss (docs/lab-findings.md)


@dataclass(frozen=True)
class Slice:
    """A product of settings: every (lr, batch, clip) trunk of it gets every variant of it."""

    lrs: tuple[float, ...]
    batches: tuple[int, ...]
    clips: tuple[str, ...]
    variants: tuple[Variant, ...]


GRIDS: dict[str, tuple[Slice, ...]] = {
    # the lab's three injections as the lab sets them, and C's strongest case, at the course lr (16 cells)
    "quick": (Slice((3e-4,), (8,), CLIPS, (scale(50), BAD_BATCH, LAB_C, STRONG_C)),),
    "default": (
        # A's magnitude and B, at every clip threshold and both learning rates (32 cells)
        Slice((3e-4, 3e-3), (8,), CLIPS, (scale(5), scale(50), scale(500), BAD_BATCH)),
        # C: two tensors, v factors both ways, with clipping always on and off (24 cells) ...
        Slice((3e-4, 3e-3), (8,), ("course", "off"),
              tuple(v_corrupt(t, f) for t in ("lm_head.bias", "tok_emb.weight") for f in (0.01, 100, 1000))),
        # ... and the lab's C and the strong C at the two intermediate thresholds (8 cells)
        Slice((3e-4, 3e-3), (8,), ("median", "p99"), (LAB_C, STRONG_C)),
        # batch size: 4x the rows per step, a smaller and steadier healthy norm (6 cells)
        Slice((3e-4,), (32,), ("course", "off"), (scale(50), BAD_BATCH, STRONG_C)),
    ),
}


@dataclass
class Trunk:
    lr: float
    batch: int
    clip: str
    clip_value: float | None = None  # None: the config's own (course); median / p99 after calibration
    variants: list[Variant] = field(default_factory=list)

    @property
    def key(self) -> tuple:
        return (self.lr, self.batch, self.clip)

    @property
    def label(self) -> str:
        return f"lr{fmt_lr(self.lr)}-b{self.batch}-clip-{self.clip}"


def trunks_of(grid: str) -> list[Trunk]:
    if grid not in GRIDS:
        raise UserError(f"unknown grid {grid!r}; valid grids: {', '.join(GRIDS)}")
    out: dict[tuple, Trunk] = {}
    for sl in GRIDS[grid]:
        for lr in sl.lrs:
            for b in sl.batches:
                for clip in ("off", *sl.clips):  # the unclipped healthy run places median and p99
                    t = out.setdefault((lr, b, clip), Trunk(lr, b, clip))
                    if clip in sl.clips:
                        t.variants += [v for v in sl.variants if v not in t.variants]
    return list(out.values())


def base_config(t: Trunk, overrides: list[str]) -> TrainConfig:
    """A trunk's baseline: the lab's schedule (warmup, cosine over cfg.steps) with lr_max and lr_min scaled."""
    ref = build_config({}, overrides)
    sets = [*overrides, "progress=false", f"ckpt_every={K}", f"lr_max={t.lr}",
            f"lr_min={t.lr * ref.lr_min / ref.lr_max:.6g}", f"batch_size={t.batch}"]
    if t.clip_value is not None:
        sets.append(f"grad_clip={t.clip_value}")
    return build_config({}, sets)


def cell_config(base: TrainConfig, v: Variant) -> TrainConfig:
    return build_config(base.to_dict(), [f"injection={v.injection}", f"injection_step={K}", *v.sets])


# ---------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------


class Sweep(sweep.Sweep):
    """Trains a grid's runs on the runner, `jobs` at a time, in dependency order: the unclipped baselines
    first (they place median and p99), then the other baselines, then every cell, forked at K."""

    command = "explore"
    grid_fields = GRID_FIELDS

    def __init__(self, out: Path, grid: str, jobs: int | None, overrides: list[str], log, ray: str | None = None):
        super().__init__(out, grid, jobs, overrides, log, ray)
        self.trunks = trunks_of(grid)
        self.stop = K + TAIL
        self.calib: dict[tuple, dict] = {}
        self.folder: dict[tuple, Path] = {}
        self.sigs: dict[tuple, dict] = {}  # (trunk key, variant) -> signature
        # every run of the grid, cached ones at what they cost when trained; in hundredths of a second, as
        # COST keeps them, so that the total does not depend on the order of the additions
        self.cold_cpu_hundredths = 0
        self.n_cells = sum(len(t.variants) for t in self.trunks)
        self.done_cells = 0
        self.waiting: list[tuple] = []  # median / p99 baselines until their calibration comes
        self.task: dict[str, tuple] = {}  # a running job's name -> (its task, its run folder)

    def resolve(self, task: tuple) -> tuple[TrainConfig, Path] | None:
        """The task's config and folder; None while it waits (a median / p99 baseline before calibration)."""
        t = task[1]
        if task[0] == "cell":
            return cell_config(base_config(t, self.overrides), task[2]), self.folder[t.key] / task[2].name
        if t.clip in ("median", "p99"):
            if (t.lr, t.batch) not in self.calib:
                return None
            t.clip_value = self.calib[(t.lr, t.batch)][t.clip]
        elif t.clip == "off":
            t.clip_value = CLIP_OFF
        cfg = base_config(t, self.overrides)
        self.folder[t.key] = self.out / "runs" / f"{t.label}-{cfg.trunk_hash()[:8]}"
        return cfg, self.folder[t.key] / "baseline"

    def start_line(self) -> str:
        return (f"explore: grid {self.grid!r}: {len(self.trunks)} trunks, {self.n_cells} cells (K={K}, "
                f"{TAIL} steps after K), {self.workers()}")

    def first_jobs(self) -> list[runner.Job]:
        return self.jobs_of([("base", t) for t in sorted(self.trunks, key=lambda t: t.clip != "off")])

    def run(self) -> None:
        self.train()
        if self.waiting:  # pragma: no cover - every median / p99 trunk has its "off" trunk
            raise UserError("explore: runs wait for a calibration that never came")

    def jobs_of(self, tasks: list[tuple]) -> list[runner.Job]:
        """The jobs that train these tasks, in order; a cached run is taken at once (and the tasks it unblocks
        after the others), a median / p99 baseline waits for its calibration."""
        jobs, tasks = [], list(tasks)
        while tasks:
            task = tasks.pop(0)
            got = self.resolve(task)
            if got is None:
                self.waiting.append(task)
                continue
            cfg, run = got
            if completed(run, cfg, self.stop):
                tasks += self.finished(task, run, None)
                continue
            self.task[str(run)] = (task, run)
            jobs.append(runner.Job(str(run), call=train_one, args=(cfg.to_dict(), str(run), self.stop, False), run=run))
        return jobs

    def ended(self, job: runner.Job) -> list[runner.Job]:
        task, run = self.task.pop(job.name)
        waiting, self.waiting = self.waiting, []
        return self.jobs_of(waiting + self.finished(task, run, job.result))

    def finished(self, task: tuple, run: Path, seconds: float | None) -> list[tuple]:
        """Record a trained (or cached: seconds None) run and print its line; returns the tasks it unblocks."""
        t = task[1]
        cost = reader.read_optional_json(run / COST)[0] or {}
        self.cold_cpu_hundredths += round(100 * (cost.get("cpu_seconds", 0.0) if seconds is None else seconds))
        how = self.counted(seconds)
        if task[0] == "base":
            if t.clip == "off":
                self.calib[(t.lr, t.batch)] = calibrate(run, base_config(t, self.overrides), self.stop)
            clip = "" if t.clip in ("course", "off") else f" at {t.clip_value:g}"
            self.log(f"[base  {self.elapsed()}] {t.label}{clip}: healthy steps clipped after K "
                     f"{page.pct(clip_rate(run, K, self.stop))} ({how})")
            return [("cell", t, v) for v in t.variants]
        v = task[2]
        self.done_cells += 1
        head = f"[{self.done_cells:>{len(str(self.n_cells))}}/{self.n_cells} {self.elapsed()}] {t.label} {v.name}"
        try:
            sig = signature.lab_signature(run, self.folder[t.key] / "baseline")
        except UserError as e:
            self.log(f"{head}: not measured ({e})")
            return []
        self.sigs[(t.key, v)] = sig
        a = next((self.sigs[(t.key, w)] for w in t.variants if w.injection == "scale" and (t.key, w) in self.sigs), None)
        held, failed = regimes.held_and_failed(sig, a)
        self.log(f"{head}: holds {' '.join(held) or '-'} | fails {' '.join(failed) or '-'} ({how})")
        return []


# ---------------------------------------------------------------------------------------------------
# The map: every prediction judged in every cell (analysis/regimes.py)
# ---------------------------------------------------------------------------------------------------


def collect(sw: Sweep) -> dict:
    """The map as data (OUT/cells.json); the page and the doc are drawn from it."""
    def href(path: Path) -> str:
        return (path / "dashboard.html").relative_to(sw.out).as_posix()

    trunks, points = [], []
    for t in sw.trunks:
        if t.key not in sw.folder:
            continue
        base = sw.folder[t.key] / "baseline"
        cfg = base_config(t, sw.overrides)
        trunks.append({"label": t.label, "lr": fmt_lr(t.lr), "batch": t.batch, "clip": t.clip,
                       "clip_value": None if t.clip == "off" else cfg.grad_clip,
                       "clipped_before_k": clip_rate(base, cfg.warmup_steps, K),
                       "clipped_after_k": clip_rate(base, K, sw.stop),
                       "calibration": sw.calib.get((t.lr, t.batch)), "baseline": href(base),
                       "cells": len(t.variants)})
        a_sigs = [(dict(v.coords)["factor"], sw.sigs[(t.key, v)]) for v in t.variants
                  if v.injection == "scale" and (t.key, v) in sw.sigs]
        for v in t.variants:
            sig = sw.sigs.get((t.key, v))
            if sig is None:
                continue
            coords = {"clip": t.clip, "lr": fmt_lr(t.lr), "batch": str(t.batch),
                      **{k: axis_value(k, x) for k, x in v.coords}}
            links = {"run": href(sw.folder[t.key] / v.name), "baseline": href(base),
                     "healthy_clip_rate": trunks[-1]["clipped_after_k"]}
            points += regimes.cell_points(sig, a_sigs, links, coords)
    lab = build_config({}, sw.overrides)  # the lab's own setting of every axis: the page's default slice
    lab_coords = {"clip": "course", "lr": fmt_lr(lab.lr_max), "batch": str(lab.batch_size), "target": lab.injection_param,
                  "vs_a": axis_value("vs_a", lab.injection_scale)}
    lab_factors = {inj: lab.injection_scale if inj == "scale" else lab.injection_factor for inj in signature.PREDICTIONS}
    predictions, axes = regimes.predictions_map(points, lab_coords, lab_factors)
    return {
        "grid": sw.grid, "K": K, "tail": TAIL, "stop": sw.stop, "overrides": sw.overrides,
        "schedule_steps": build_config({}, sw.overrides).steps,
        "definitions": {"spike_nats": SPIKE, "recovery_tolerance_nats": TOL, "recovery_window": WINDOW},
        "axes": axes, "trunks": trunks, "predictions": predictions,
        "seconds": round(time.perf_counter() - sw.t0, 1), "cpu_seconds": round(sw.cpu_seconds, 1),
        "cold_cpu_seconds": round(sw.cold_cpu_hundredths / 100, 1), "runs": sw.trained + sw.reused,
        "trained": sw.trained, "reused": sw.reused, "jobs": sw.jobs, "cells": sw.n_cells,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
    }


# ---------------------------------------------------------------------------------------------------
# The command: sweep, then cells.json, index.html (the page) and regimes.md (the doc)
# ---------------------------------------------------------------------------------------------------


def run_explore(out: Path, grid: str = "default", jobs: int | None = None, overrides: list[str] | None = None,
                doc: Path | None = None, log=print, ray: str | None = None) -> dict:
    """`minitrain explore`: train (or reuse) every cell of GRID under OUT/runs, then write OUT/cells.json,
    OUT/index.html and OUT/regimes.md (and `doc`, when given). Returns the map's data. `ray`: train on the
    Ray cluster at this address (`local`: one started here; docs/scale.md)."""
    sw = Sweep(Path(out), grid, jobs, list(overrides or []), log, ray)
    sw.run()
    data = collect(sw)
    prev = reader.read_optional_json(Path(out) / "cells.json")[0] or {}
    if prev.get("grid") == grid:  # what each invocation on this folder cost (the first one trained it cold)
        data["history"] = prev.get("history") or [{k: prev.get(k) for k in HISTORY_KEYS}]
    data.setdefault("history", []).append({k: data[k] for k in HISTORY_KEYS})
    files.atomic_write_json(Path(out) / "cells.json", data)
    where = page.write(Path(out), data)
    text = page.regimes_md(data)
    files.atomic_write_text(Path(out) / "regimes.md", text)
    if doc:
        files.atomic_write_text(Path(doc), text)
    log(f"explore: {data['cells']} cells in {data['seconds']:.0f} s ({sw.trained} runs trained in "
        f"{sw.cpu_seconds:.0f} CPU s, {sw.reused} reused); map {where}; doc {doc or Path(out) / 'regimes.md'}")
    return data


HISTORY_KEYS = ("generated", "seconds", "cpu_seconds", "trained", "reused", "jobs", "load_average")
