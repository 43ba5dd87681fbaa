"""The regime map (`minitrain explore`): where do the lab's 10 predictions hold, and where are they absorbed?

The lab's predictions come from large-scale pretraining, where the clip threshold sits above most steps'
gradient norm. With the course's settings this model's healthy pre-clip norm is above 1.0 on every step, so
clipping at 1.0 engages always (docs/lab-findings.md). This sweeps the settings that decide whether a fault is
visible and judges every prediction in every cell with the lab report's own definitions (analysis/signature.py:
PREDICTIONS, judge; analysis/compare.py: spike, recovery). Nothing here redefines a verdict.

A *trunk* is (peak lr, batch size, clip threshold) and has one baseline. A *cell* is one injection at K forked
from its trunk's baseline (same config but the injection: both share steps 0..K-1 and every batch after) and
run TAIL steps past K. Clip thresholds are relative to the trunk's own healthy norm: `course` (the config's
1.0), `median` and `p99` of the pre-clip norm of the unclipped healthy run over steps [warmup, K + TAIL), and
`off`. Every run keeps the lab's 2000-step schedule, so the learning rate at K is the lab's, and stops at
K + TAIL (status "stopped"). Runs are cached by config hash (the folder name carries the trunk hash and each
manifest the config hash): a re-run trains only what is new. Runs train on one worker process per core.
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from minitrain.analysis import signature
from minitrain.analysis.compare import SPIKE, TOL, WINDOW, clip_limit
from minitrain.core.config import PRESETS, TrainConfig, build_config
from minitrain.core.errors import UserError
from minitrain.run import files, reader
from minitrain.views import explore as page

K = 500  # the lab's injection step
TAIL = 250  # steps after K: recovery needs full WINDOW-step windows; v of x1000 takes ~200 steps to decay
CLIP_OFF = 0  # grad_clip "off" (compare.CLIP_OFF): the loop then never scales a gradient
CLIPS = ("course", "median", "p99", "off")  # in threshold order
AXES = {  # axis -> what it means (page and doc); the order breaks ties for the default heat-map axes
    "clip": "clip threshold, relative to the healthy run's pre-clip norm",
    "factor": "injection magnitude (A: gradient multiplier; C: multiplier of v)",
    "target": "the tensor whose Adam v is corrupted (C)",
    "vs_a": "the injection A (gradient multiplier) that B is compared with",
    "lr": "peak learning rate (lr_min scaled with it)",
    "batch": "batch size",
}
COST = "explore-cost.json"  # beside a run explore trained: its CPU and wall seconds (training and dashboard)
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


def fmt_lr(lr: float) -> str:
    m, e = f"{lr:.0e}".split("e")
    return f"{m}e{int(e)}"


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


def calibrate(off_run: Path, cfg: TrainConfig, stop: int) -> dict:
    """Quantiles of the unclipped healthy run's pre-clip norm over steps [warmup, stop)."""
    import numpy as np

    rows = reader.rows_by_step(off_run)
    norms = np.array([r["grad_norm"] for s, r in rows.items() if cfg.warmup_steps <= s < stop and r.get("grad_norm")])
    if len(norms) == 0:
        raise UserError(f"{off_run} has no finite gradient norm in steps [{cfg.warmup_steps}, {stop}); "
                        "the clip grid cannot be placed on it")
    q = {name: float(f"{np.percentile(norms, p):.4g}") for name, p in
         (("min", 0), ("median", 50), ("p90", 90), ("p99", 99), ("max", 100))}
    return {**q, "steps": [cfg.warmup_steps, stop]}


def clip_rate(run: Path, lo: int, hi: int) -> float | None:
    """Share of steps in [lo, hi) on which clipping engaged (pre-clip norm above the threshold)."""
    flags = [bool(r.get("clipped")) for s, r in reader.rows_by_step(run).items() if lo <= s < hi]
    return sum(flags) / len(flags) if flags else None


def is_done(run: Path, cfg: TrainConfig, stop: int) -> bool:
    """The cache: the folder holds this exact config (by hash), trained to `stop` or ended non-finite."""
    m, res = reader.manifest_of(run), reader.results_of(run)
    return bool(m) and m.get("config_hash") == cfg.hash() and (
        res.get("status") == "non_finite" or (res.get("status") in ("stopped", "finished")
                                              and res.get("steps_done") == stop))


def train_one(cfg_dict: dict, out: str, stop: int) -> float:
    """Worker process: train one run to `stop` (an injection run forks from its baseline's checkpoint at K),
    then its dashboard. Returns the CPU seconds it took."""
    from minitrain.lab import runs

    t0, w0 = time.process_time(), time.perf_counter()
    runs.train_run(build_config(cfg_dict), Path(out), force=True, stop_at=stop)
    cpu = time.process_time() - t0
    files.atomic_write_json(Path(out) / COST, {"cpu_seconds": round(cpu, 2),
                                               "wall_seconds": round(time.perf_counter() - w0, 2)})
    return cpu


def prediction_ids(injection: str) -> list[str]:
    """A1..A4, B1..B3, C1..C3: the lab's letter of the injection, then the prediction's place in its list."""
    return [f"{reader.LAB_LETTERS[injection]}{i + 1}" for i in range(len(signature.PREDICTIONS[injection]))]


# ---------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------


class Sweep:
    """Trains a grid's runs on `jobs` worker processes in dependency order: the unclipped baselines first
    (they place median and p99), then the other baselines, then every cell, forked at K."""

    def __init__(self, out: Path, grid: str, jobs: int | None, overrides: list[str], log):
        for o in overrides:
            if o.split("=", 1)[0].strip().replace("-", "_") in GRID_FIELDS:
                raise UserError(f"--set {o}: the grid sets this field itself; leave it out")
        build_config({}, overrides)  # a bad override fails here, in one line, before anything runs
        if jobs is not None and jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.out, self.grid, self.overrides, self.log = Path(out), grid, overrides, log
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.trunks = trunks_of(grid)
        self.stop = K + TAIL
        self.calib: dict[tuple, dict] = {}
        self.folder: dict[tuple, Path] = {}
        self.sigs: dict[tuple, dict] = {}  # (trunk key, variant) -> signature
        self.trained = self.reused = 0
        self.cpu_seconds = 0.0  # trained in this invocation
        self.cold_cpu_seconds = 0.0  # every run of the grid, cached ones at what they cost when trained
        self.n_cells = sum(len(t.variants) for t in self.trunks)
        self.done_cells = 0
        self.t0 = time.perf_counter()

    def elapsed(self) -> str:
        s = int(time.perf_counter() - self.t0)
        return f"{s // 60}:{s % 60:02d}"

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

    def run(self) -> None:
        self.log(f"explore: grid {self.grid!r}: {len(self.trunks)} trunks, {self.n_cells} cells (K={K}, "
                 f"{TAIL} steps after K), {self.jobs} worker process{'es' if self.jobs > 1 else ''}")
        pending: list[tuple] = [("base", t) for t in sorted(self.trunks, key=lambda t: t.clip != "off")]
        running: dict = {}
        with ProcessPoolExecutor(max_workers=self.jobs, mp_context=get_context("spawn")) as pool:
            while pending or running:
                i = 0
                while i < len(pending):  # cached runs are taken at once; the rest fill free workers in order
                    got = self.resolve(pending[i])
                    if got is None:
                        i += 1
                        continue
                    cfg, run = got
                    if is_done(run, cfg, self.stop):
                        pending.extend(self.finished(pending.pop(i), run, None))
                        i = 0
                    elif len(running) < self.jobs:
                        running[pool.submit(train_one, cfg.to_dict(), str(run), self.stop)] = (pending.pop(i), run)
                    else:
                        i += 1
                if not running:
                    if pending:  # pragma: no cover - every median / p99 trunk has its "off" trunk
                        raise UserError("explore: runs wait for a calibration that never came")
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    task, run = running.pop(fut)
                    try:
                        seconds = fut.result()
                    except UserError:
                        raise
                    except Exception as e:  # noqa: BLE001 - one line naming the run, not a worker traceback
                        raise UserError(f"explore: training {run} failed ({type(e).__name__}: {e}); "
                                        "run `minitrain explore` again to continue") from None
                    pending.extend(self.finished(task, run, seconds))

    def finished(self, task: tuple, run: Path, seconds: float | None) -> list[tuple]:
        """Record a trained (or cached: seconds None) run and print its line; returns the tasks it unblocks."""
        t = task[1]
        cost = reader.read_optional_json(run / COST)[0] or {}
        self.cold_cpu_seconds += cost.get("cpu_seconds", 0.0) if seconds is None else seconds
        if seconds is None:
            self.reused += 1
        else:
            self.trained += 1
            self.cpu_seconds += seconds
        how = "cached" if seconds is None else f"{seconds:.1f} CPU s"
        if task[0] == "base":
            if t.clip == "off":
                self.calib[(t.lr, t.batch)] = calibrate(run, base_config(t, self.overrides), self.stop)
            clip = "" if t.clip in ("course", "off") else f" at {t.clip_value:g}"
            self.log(f"[base  {self.elapsed()}] {t.label}{clip}: healthy steps clipped after K "
                     f"{pct(clip_rate(run, K, self.stop))} ({how})")
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
        verdicts = list(zip(prediction_ids(v.injection), signature.judge(sig, a)))
        held = " ".join(i for i, p in verdicts if p["holds"]) or "-"
        failed = " ".join(i for i, p in verdicts if p["holds"] is False) or "-"
        self.log(f"{head}: holds {held} | fails {failed} ({how})")
        return []


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


# ---------------------------------------------------------------------------------------------------
# The map: every prediction judged in every cell
# ---------------------------------------------------------------------------------------------------


def axis_value(axis: str, x) -> str:
    if axis == "lr":
        return fmt_lr(x)
    if axis in ("factor", "vs_a"):
        return f"x{x:g}"
    return str(x)


def axis_sort(axis: str, value: str):
    if axis == "clip":
        return CLIPS.index(value)
    if axis in ("factor", "vs_a"):
        return float(value[1:])
    if axis in ("lr", "batch"):
        return float(value)
    return value


def collect(sw: Sweep) -> dict:
    """The map as data (OUT/cells.json); the page and the doc are drawn from it."""
    def href(path: Path) -> str:
        return (path / "dashboard.html").relative_to(sw.out).as_posix()

    trunks, preds = [], {}
    for inj, plist in signature.PREDICTIONS.items():
        for pid, p in zip(prediction_ids(inj), plist):
            preds[pid] = {"id": pid, "injection": inj, "letter": reader.LAB_LETTERS[inj], "text": p.text, "points": []}
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
        a_sigs = [(v, sw.sigs[(t.key, v)]) for v in t.variants if v.injection == "scale" and (t.key, v) in sw.sigs]
        for v in t.variants:
            sig = sw.sigs.get((t.key, v))
            if sig is None:
                continue
            coords = {"clip": t.clip, "lr": fmt_lr(t.lr), "batch": str(t.batch),
                      **{k: axis_value(k, x) for k, x in v.coords}}
            for n, (pid, p) in enumerate(zip(prediction_ids(v.injection), signature.PREDICTIONS[v.injection])):
                for av, a in (a_sigs if p.needs_a else [(None, None)]):
                    verdict = signature.judge(sig, a)[n]
                    c = {**coords, **({"vs_a": axis_value("vs_a", dict(av.coords)["factor"])} if av else {})}
                    preds[pid]["points"].append({
                        "coords": c, "holds": verdict["holds"], "measured": verdict["measured"],
                        "run": href(sw.folder[t.key] / v.name), "baseline": href(base),
                        "healthy_clip_rate": trunks[-1]["clipped_after_k"], "update_gain_at_k": update_gain(sig),
                        "signature": {k: sig.get(k) for k in SIGNATURE_KEYS}})
    lab = build_config({}, sw.overrides)  # the lab's own setting of every axis: the page's default slice
    lab_coords = {"clip": "course", "lr": fmt_lr(lab.lr_max), "batch": str(lab.batch_size), "target": lab.injection_param,
                  "vs_a": axis_value("vs_a", lab.injection_scale)}
    axes: dict[str, set] = {}
    for p in preds.values():
        p["lab_coords"] = {**lab_coords, "factor": axis_value("factor", lab.injection_scale if p["injection"] == "scale"
                                                               else lab.injection_factor)}
        names = [a for a in AXES if any(a in pt["coords"] for pt in p["points"])]
        p["axes"] = names
        p["default_axes"] = most_telling_axes(p["points"], names)
        p["holds_in"] = sum(1 for pt in p["points"] if pt["holds"])
        p["region"] = region(p["points"], names)
        for a in names:
            axes.setdefault(a, set()).update(pt["coords"][a] for pt in p["points"])
    return {
        "grid": sw.grid, "K": K, "tail": TAIL, "stop": sw.stop, "overrides": sw.overrides,
        "schedule_steps": build_config({}, sw.overrides).steps,
        "definitions": {"spike_nats": SPIKE, "recovery_tolerance_nats": TOL, "recovery_window": WINDOW},
        "axes": {a: {"label": AXES[a], "values": sorted(vals, key=lambda x: axis_sort(a, x))} for a, vals in axes.items()},
        "trunks": trunks, "predictions": list(preds.values()),
        "seconds": round(time.perf_counter() - sw.t0, 1), "cpu_seconds": round(sw.cpu_seconds, 1),
        "cold_cpu_seconds": round(sw.cold_cpu_seconds, 1), "runs": sw.trained + sw.reused,
        "trained": sw.trained, "reused": sw.reused, "jobs": sw.jobs, "cells": sw.n_cells,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
    }


def update_gain(sig: dict) -> float | None:
    """How much larger a gradient the optimizer received at K than the baseline's: post-clip norm at K over
    the baseline's post-clip norm (its pre-clip norm, clipped at the same threshold). 1.0 means clipping
    handed Adam the baseline's own norm."""
    base = sig.get("baseline_grad_norm_at_k")
    if not base or sig.get("grad_norm_clipped_at_k") is None:
        return None
    return sig["grad_norm_clipped_at_k"] / min(base, clip_limit(sig["grad_clip"]))


SIGNATURE_KEYS = ("excess_at_k_window", "max_excess", "max_excess_step", "grad_norm_ratio_vs_baseline_at_k",
                  "grad_norm_clipped_at_k", "recovery_steps", "v_ratio_at_k", "v_decay_steps", "final_loss_difference")


def most_telling_axes(points: list[dict], axes: list[str]) -> list[str]:
    """The two axes along which the verdict changes most often (pairs of cells that differ in that axis alone
    and disagree; then their share of such pairs; then the order of AXES). The page's default heat-map axes."""
    def flips(a: str) -> tuple[int, float]:
        groups: dict = {}
        for p in points:
            groups.setdefault(tuple((k, v) for k, v in sorted(p["coords"].items()) if k != a), []).append(p["holds"])
        pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups.values())
        disagree = sum(g.count(True) * g.count(False) for g in groups.values())
        return disagree, disagree / pairs if pairs else 0.0

    order = list(AXES)
    varied = [a for a in axes if len({p["coords"][a] for p in points}) > 1]
    return sorted(varied, key=lambda a: (*(-x for x in flips(a)), order.index(a)))[:2]


def region(points: list[dict], axes: list[str]) -> str:
    """Where a prediction holds, in words: 'nowhere on the grid', 'everywhere on the grid', a union of boxes
    ('clip off, lr 3e-3; clip off, factor x500'), or 'everywhere except' such a union when that is shorter.
    A box fixes some axes to some values and holds (or fails) in every cell of the grid inside it."""
    if not points:
        return "not measured"
    held = sum(1 for p in points if p["holds"])
    if held == 0:
        return "nowhere on the grid"
    if held == len(points):
        return "everywhere on the grid"
    varied = [a for a in axes if len({p["coords"][a] for p in points}) > 1]
    where, where_not = cover(points, varied, True), cover(points, varied, False)
    return "; ".join(where) if len(where) <= len(where_not) else "everywhere except " + "; ".join(where_not)


def cover(points: list[dict], varied: list[str], verdict: bool) -> list[str]:
    """Boxes covering every cell with this verdict and no other: greedily the box covering the most cells not
    yet covered (each axis free or fixed to one value), then boxes that differ in one axis only are merged."""
    values = {a: sorted({p["coords"][a] for p in points}, key=lambda x: axis_sort(a, x)) for a in varied}
    boxes: list[dict] = [{}]
    for a in varied:
        boxes = [{**b, **({a: v} if v is not None else {})} for b in boxes for v in (None, *values[a])]
    good = []
    for box in boxes:
        cells = {i for i, p in enumerate(points) if all(p["coords"][a] == v for a, v in box.items())}
        if cells and all(points[i]["holds"] == verdict for i in cells):
            good.append((box, cells))
    todo, chosen = {i for i, p in enumerate(points) if p["holds"] == verdict}, []
    while todo:
        box, cells = max(good, key=lambda bc: (len(bc[1] & todo), -len(bc[0])))
        chosen.append({a: [v] for a, v in box.items()})
        todo -= cells
    merged = True
    while merged:  # {clip: [course]} + {clip: [p99]} -> {clip: [course, p99]}
        merged = False
        for i, x in enumerate(chosen):
            for y in chosen[i + 1:]:
                diff = [a for a in x if x[a] != y.get(a)]
                if x.keys() == y.keys() and len(diff) == 1:
                    x[diff[0]] = sorted(set(x[diff[0]]) | set(y[diff[0]]), key=lambda v: axis_sort(diff[0], v))
                    chosen.remove(y)
                    merged = True
                    break
            if merged:
                break
    return [", ".join(f"{a} {'/'.join(box[a])}" for a in varied if a in box) for box in chosen]


# ---------------------------------------------------------------------------------------------------
# The command: sweep, then cells.json, index.html (the page) and regimes.md (the doc)
# ---------------------------------------------------------------------------------------------------


def run_explore(out: Path, grid: str = "default", jobs: int | None = None, overrides: list[str] | None = None,
                doc: Path | None = None, log=print) -> dict:
    """`minitrain explore`: train (or reuse) every cell of GRID under OUT/runs, then write OUT/cells.json,
    OUT/index.html and OUT/regimes.md (and `doc`, when given). Returns the map's data."""
    sw = Sweep(Path(out), grid, jobs, list(overrides or []), log)
    sw.run()
    data = collect(sw)
    prev = reader.read_optional_json(Path(out) / "cells.json")[0] or {}
    if prev.get("grid") == grid:  # what each invocation on this folder cost (the first one trained it cold)
        data["history"] = prev.get("history") or [{k: prev.get(k) for k in HISTORY_KEYS}]
    data.setdefault("history", []).append({k: data[k] for k in HISTORY_KEYS})
    files.atomic_write_json(Path(out) / "cells.json", data)
    where = page.write(Path(out), data)
    text = regimes_md(data)
    files.atomic_write_text(Path(out) / "regimes.md", text)
    if doc:
        files.atomic_write_text(Path(doc), text)
    log(f"explore: {data['cells']} cells in {data['seconds']:.0f} s ({sw.trained} runs trained in "
        f"{sw.cpu_seconds:.0f} CPU s, {sw.reused} reused); map {where}; doc {doc or Path(out) / 'regimes.md'}")
    return data


HISTORY_KEYS = ("generated", "seconds", "cpu_seconds", "trained", "reused", "jobs", "load_average")


def regimes_md(data: dict) -> str:
    """The doc: the clip grid and how often it engages, then for each prediction where it holds, with the
    measured numbers behind it and the mechanism (MECHANISMS) that draws the boundary."""
    from minitrain.core.fmt import fmt

    lines = [f"# Where the lab's predictions hold: the regime map ({data['grid']} grid)", "",
             "Generated by `minitrain explore" + (" --quick" if data["grid"] == "quick" else "") + "` "
             "(page: `experiments/explore/index.html`, one heat map per prediction, every cell linked to its "
             "runs' dashboards). Each cell is an injection at "
             f"K={data['K']} forked from its trunk's baseline and run {data['tail']} steps past K, on the lab's "
             f"{data['schedule_steps']}-step schedule (so the learning rate at K is the lab's), stopped at step "
             f"{data['stop']}. Every verdict uses the lab report's definitions (`analysis/signature.py`): a spike "
             f"is a loss excess above {data['definitions']['spike_nats']} nats; recovered = every "
             f"{data['definitions']['recovery_window']}-step mean of the loss difference within "
             f"{data['definitions']['recovery_tolerance_nats']} nats.", "",
             f"Cost: the {data['runs']} runs of the grid ({data['cells']} cells) took {data['cold_cpu_seconds']:.0f} CPU s of "
             f"training and dashboards, one core each: about {data['cold_cpu_seconds'] / data['jobs'] / 60:.1f} min "
             f"on {data['jobs']} idle cores. Invocations on this folder (wall time depends on what else the "
             "machine runs; the load average is the machine's at the end):", "",
             "| when | wall | runs trained (CPU s) | reused from the cache | workers | load average |",
             "|---|---|---|---|---|---|",
             *(f"| {h.get('generated') or 'n/a'} | {h.get('seconds', 0):.0f} s | {h.get('trained')} "
               f"({h.get('cpu_seconds', 0):.0f}) | {h.get('reused')} | {h.get('jobs')} | {fmt(h.get('load_average'), 2)} |"
               for h in data.get("history", [])), "",
             "## The clip grid and how often the healthy run clips", "",
             "Thresholds are placed on the unclipped healthy run's pre-clip gradient norm over steps "
             "[warmup, K + tail): `median` and `p99` of it; `course` is the config's 1.0.", "",
             "| lr | batch | clip | threshold | healthy norm median / p99 / max | healthy steps clipped before K | after K |",
             "|---|---|---|---|---|---|---|"]
    for t in data["trunks"]:
        c = t["calibration"] or {}
        lines.append(f"| {t['lr']} | {t['batch']} | {t['clip']} | {fmt(t['clip_value']) if t['clip_value'] else 'off'} | "
                     f"{fmt(c.get('median'))} / {fmt(c.get('p99'))} / {fmt(c.get('max'))} | "
                     f"{pct(t['clipped_before_k'])} | {pct(t['clipped_after_k'])} |")
    lines += ["", "## Summary: where each prediction holds", "",
              "| | injection | the lab predicts | holds in | where |", "|---|---|---|---|---|"]
    lines += [f"| {p['id']} | {p['letter']} `{p['injection']}` | {p['text']} | {p['holds_in']} of {len(p['points'])} | "
              f"{p['region']} |" for p in data["predictions"]]
    clip = PRESETS["pretraining-like"]["grad_clip"]
    lines += ["", f"The `pretraining-like` preset (`--preset pretraining-like`; `preset=pretraining-like just lab`) "
              f"runs the course model with grad_clip = {fmt(clip)}, near the 99th percentile of the healthy unclipped "
              "norm over the lab's 2000 steps, so that clipping engages rarely, as in large-scale pretraining. It was "
              "chosen from the clip grid above, not from any prediction; its lab report, and which predictions hold "
              "in it, is in `docs/lab-pretraining-like.md`.", "",
              "## Prediction by prediction", ""]
    for p in data["predictions"]:
        lines += [f"### {p['id']} ({p['letter']}, `{p['injection']}`): {p['text']}", "",
                  f"**Holds in {p['holds_in']} of {len(p['points'])} cells: {p['region']}.**", ""]
        axes = [a for a in p["axes"] if len({pt["coords"][a] for pt in p["points"]}) > 1]
        gain = p["injection"] != "v_corrupt"
        lines += ["| " + " | ".join(axes) + " | holds | measured | healthy steps clipped after K |"
                  + (" gradient Adam got at K (x baseline's) |" if gain else ""), "|" + "---|" * (len(axes) + 3 + gain)]
        for pt in sorted(p["points"], key=lambda q: [axis_sort(a, q["coords"][a]) for a in axes]):
            lines.append("| " + " | ".join(pt["coords"][a] for a in axes) +
                         f" | {'yes' if pt['holds'] else 'no'} | {pt['measured']} | {pct(pt['healthy_clip_rate'])} |"
                         + (f" x{fmt(pt['update_gain_at_k'], 3)} |" if gain else ""))
        lines += ["", MECHANISMS.get(p["id"], ""), ""]
    return "\n".join(lines).rstrip() + "\n"


# The mechanism behind each prediction's boundary, in words; the numbers are in the tables above each one.
MECHANISMS: dict[str, str] = {
    "A1": "Mechanism: clipping rescales the whole gradient to the threshold, so wherever the x-factor gradient "
          "crosses it (every finite threshold here, for every factor) Adam receives a gradient of norm "
          "`threshold` pointing in the baseline's own direction: with `course` that is exactly the baseline's "
          "clipped gradient (the healthy run clips on every step), so the update is the baseline's up to "
          "rounding; at `median` and `p99` it is at most threshold / healthy norm times the baseline's (the last "
          "column), too little to move the loss. Only without clipping does Adam get the full multiple: m "
          "jumps by 0.1 x factor x g while v, an average of g², moves only 5% towards factor² x g², so the "
          "next updates are several times the usual size and the loss rises for about ten steps (Adam's m "
          "carries the kick: the largest excess comes a few steps after K, which is why the K..K+5 window "
          "sees only part of it). Whether it crosses the 0.1-nat line then depends on the factor, the batch "
          "size and the learning rate; at the 10x learning rate even a small kick is amplified (see B3).",
    "A2": "Mechanism: arithmetic. The pre-clip norm is measured after the injection and before clipping, and an "
          "injection run shares every weight and batch with its baseline up to K: the ratio is the injected "
          "factor exactly, in every regime. This is the signature that survives everywhere, which is why the "
          "stability check reads the pre-clip norm panel, not the loss.",
    "A3": "Mechanism: a x5 (or larger) gradient is above every finite threshold on this grid, so clipping engages "
          "at K whenever it is on; the post-clip norm is then the threshold (1.0 only for `course`). With "
          "clipping off there is nothing to engage.",
    "A4": "Mechanism: the lab's 20-40 steps needs a spike that then fades. Where clipping engages there is no "
          "spike (recovery 0 steps: the windowed difference never leaves the band). Without clipping the kick "
          "is real but the runs then differ for good: the injected run's weights were moved, and the two "
          "trajectories never come back within 0.02 nats for 20 steps on end inside the measured tail "
          "(or only after 100+ steps at the high learning rate).",
    "B1": "Mechanism: B's \"spike\" is the bad batch's own loss, measured before the update: a batch of 8 copies "
          "of a rare sentence scores about 1 nat above an ordinary batch whatever the clip or the learning "
          "rate. A's loss excess is zero where clipping engages and a fraction of a nat without it, so B's is "
          "the larger spike everywhere on the grid: the lab's ordering assumes A spikes hard, which needs "
          "clipping off and a large factor, and even then A's excess stays below B's.",
    "B2": "Mechanism: the bad batch's pre-clip norm is a few times the healthy one (its gradient lands on a "
          "few rare rows of the embedding); A's is exactly the injected factor (A2). So B's is larger only "
          "against an A of x5 or less, and only where the bad batch's ratio happens to exceed 5 (a trunk "
          "with a small healthy norm).",
    "B3": "Mechanism: at the course learning rate one step on one bad batch is forgotten at once (recovery 1 "
          "step: only the batch's own loss at K is off); there is no 50-step recovery because there is "
          "almost nothing to recover from. At the 10x learning rate the same small perturbation is amplified: "
          "the two trajectories part chaotically and their windowed difference stays outside the band for "
          "about 200 steps or beyond the tail (A at p99 drifts the same way after a gradient only 1.8x the "
          "baseline's: A4's table), which is again not the lab's ~50 steps.",
    "C1": "Mechanism: by construction. v is corrupted after the loss at K is measured, and it changes only the "
          "size of later updates; the loss at K is the baseline's exactly, in every regime.",
    "C2": "Mechanism: multiplying v by f divides that tensor's updates by about sqrt(f) until v's EMA forgets "
          "it (beta2 = 0.95: about 1/20 per step), so the tensor learns more slowly and the loss falls behind "
          "the baseline's over tens of steps: a rise relative to the baseline, not a spike. Whether it "
          "crosses 0.1 nats depends on how much the tensor still has to learn: the token embedding (tied "
          "with the output head) at x100 or x1000 does, the output bias stays far below at the course "
          "learning rate, and shrinking v (x0.01: larger steps for a few dozen steps) barely shows there. At "
          "the 10x learning rate every embedding cell crosses 0.1 nats, x0.01 included, and the bias cells "
          "scatter around the line: there any perturbation grows into a tenth-of-a-nat drift (B3), so a "
          "verdict there says the run is sensitive, not which way v was corrupted.",
    "C3": "Mechanism: Adam's v is an EMA of g² with beta2 = 0.95, so a corruption by f decays like 0.95^n and "
          "is within 10% after about ln(f / 0.1) / 0.05 steps for f > 1 (about 140 for x100, 180 for x1000) "
          "and a few dozen for f < 1; a cell fails only when the tail ends before that.",
}
