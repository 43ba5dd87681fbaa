"""The LR-sensitivity sweep (`minitrain lr-sweep`): final loss against learning rate for the plain model and
the interventions that Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training
instabilities") and 2023b (StableAdamW) report against natural instabilities.

Every run is a whole run of the lab's schedule (warmup, cosine to lr_max / 10) at one peak LR, with the
natural-instability signals on (attention logits and entropy, log Z: core/telemetry.py). A *variant* is the
config change of one intervention: the plain model, qk-layernorm, z-loss, both, a longer warmup, update
clipping. Runs go through lab/runner.py, `jobs` at a time, one progress line each, and are cached by config
hash like explore's: a re-run trains only what is new. What the runs show (final loss, the LR-sensitivity
number, the largest attention logit and log Z, the claims of the papers against this model) is judged by
analysis/lrsweep.py; views/lrsweep.py draws the page and the doc.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from minitrain.analysis import lrsweep as judge
from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.core.provenance import git_sha
from minitrain.lab import runner, sweep
from minitrain.lab.sweep import COST, train_one
from minitrain.run import files, reader
from minitrain.run.completion import completed
from minitrain.views import lrsweep as page


@dataclass(frozen=True)
class Variant:
    name: str
    sets: tuple[str, ...]
    what: str


Z_LOSS = 1e-4  # PaLM's coefficient (the paper's default)
LONG_WARMUP = 4  # x the lab's warmup steps
VARIANTS = (
    Variant("default", (), "the plain model (the lab's config)"),
    Variant("qk_norm", ("qk_norm=true",), "qk-layernorm: LayerNorm on each head's queries and keys"),
    Variant("z_loss", (f"z_loss={Z_LOSS}",), f"z-loss, coefficient {Z_LOSS:g} (PaLM)"),
    Variant("qk_norm+z_loss", ("qk_norm=true", f"z_loss={Z_LOSS}"), "both"),
    Variant("warmup", (), f"a longer warmup: {LONG_WARMUP}x the lab's"),
    Variant("update_clip", ("update_clip=true",), "update clipping (StableAdamW): lr / max(1, RMS) per tensor"),
)
BY_NAME = {v.name: v for v in VARIANTS}

# the grids: peak LRs (one run per variant and LR) and the config each run gets besides
GRIDS: dict[str, dict] = {
    # 3 orders of magnitude in half-decades; half the lab's schedule (1000 steps: 42 runs fit an hour on 2 cores)
    "default": {"lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1), "sets": ("steps=1000",)},
    # 3 orders, 150 steps: a few minutes on 2 cores
    "quick": {"lrs": (1e-3, 3e-2, 1.0), "sets": ("steps=150", "warmup_steps=15", "eval_every=50", "ckpt_every=50",
                                                 "spectral_every=0")},
}
GRID_FIELDS = ("lr_max", "lr_min", "qk_norm", "z_loss", "update_clip", "warmup_steps", "natural_signals", "steps")


def run_config(grid: str, variant: Variant, lr: float, overrides: list[str]):
    """One run's config: the grid's settings, the user's overrides, the variant, the LR (lr_min = lr / 10 as
    the lab's 3e-4 -> 3e-5)."""
    base = build_config({}, [*GRIDS[grid]["sets"], *overrides])
    sets = [*GRIDS[grid]["sets"], *overrides, "progress=false", "natural_signals=true", f"lr_max={lr:g}",
            f"lr_min={lr * base.lr_min / base.lr_max:.6g}", *variant.sets]
    if variant.name == "warmup":
        sets.append(f"warmup_steps={min(base.steps - 1, LONG_WARMUP * base.warmup_steps)}")
    return build_config({}, sets)


def run_folder(out: Path, variant: Variant, lr: float, cfg) -> Path:
    return Path(out) / "runs" / f"{variant.name}-lr{judge.fmt_lr(lr)}-{cfg.hash()[:8]}"


class Sweep(sweep.Sweep):
    command = "lr-sweep"
    grid_fields = GRID_FIELDS

    def __init__(self, out: Path, grid: str, jobs: int | None, overrides: list[str], log, ray: str | None = None):
        if grid not in GRIDS:
            raise UserError(f"unknown grid {grid!r}; valid grids: {', '.join(GRIDS)}")
        super().__init__(out, grid, jobs, overrides, log, ray)
        self.tasks = [(v, lr) for lr in GRIDS[grid]["lrs"] for v in VARIANTS]
        self.runs: dict[tuple[str, float], Path] = {}
        self.summaries: dict[tuple[str, float], dict] = {}
        self.by_job: dict[str, tuple[Variant, float]] = {}

    def start_line(self) -> str:
        return (f"lr-sweep: grid {self.grid!r}: {len(VARIANTS)} variants x {len(GRIDS[self.grid]['lrs'])} LRs = "
                f"{len(self.tasks)} runs, {self.workers()}")

    def first_jobs(self) -> list[runner.Job]:
        jobs = []
        for v, lr in self.tasks:
            cfg = run_config(self.grid, v, lr, self.overrides)
            folder = run_folder(self.out, v, lr, cfg)
            self.runs[(v.name, lr)] = folder
            if completed(folder, cfg):
                self.finished(v, lr, None)
                continue
            self.by_job[str(folder)] = (v, lr)
            jobs.append(runner.Job(str(folder), call=train_one, args=(cfg.to_dict(), str(folder), cfg.steps, False),
                                   run=folder, steps=cfg.steps))
        return jobs

    def ended(self, job: runner.Job) -> list[runner.Job]:
        self.finished(*self.by_job[job.name], job.result)
        return []

    def run(self) -> None:
        self.train()

    def finished(self, v: Variant, lr: float, seconds: float | None) -> None:
        run = self.runs[(v.name, lr)]
        how = self.counted(seconds)
        s = judge.run_summary(reader.load_run(run)["rows"])
        s["cpu_seconds"] = (reader.read_optional_json(run / COST)[0] or {}).get("cpu_seconds")
        self.summaries[(v.name, lr)] = s
        done = self.trained + self.reused
        self.log(f"[{done:>{len(str(len(self.tasks)))}}/{len(self.tasks)} {self.elapsed()}] {v.name} lr "
                 f"{judge.fmt_lr(lr)}: {judge.summary_line(s)} ({how})")


def collect(sw: Sweep) -> dict:
    """The sweep as data (OUT/sweep.json): every run's summary, and analysis/lrsweep.py's judgments."""
    lrs = list(GRIDS[sw.grid]["lrs"])
    runs = []
    for (name, lr), s in sw.summaries.items():
        runs.append({"variant": name, "lr": lr, **s,
                     "dashboard": (sw.runs[(name, lr)] / "dashboard.html").relative_to(sw.out).as_posix(),
                     "folder": sw.runs[(name, lr)].relative_to(sw.out).as_posix()})
    runs.sort(key=lambda r: ([v.name for v in VARIANTS].index(r["variant"]), r["lr"]))
    cfg = run_config(sw.grid, VARIANTS[0], lrs[0], sw.overrides)
    return {
        "grid": sw.grid, "lrs": lrs, "overrides": sw.overrides, "steps": cfg.steps, "seed": cfg.seed,
        "preset": cfg.preset, "weight_decay": cfg.weight_decay, "warmup_steps": cfg.warmup_steps, "long_warmup_steps": min(cfg.steps - 1, LONG_WARMUP * cfg.warmup_steps),
        "z_loss": Z_LOSS, "params": judge.parameter_count(cfg),
        "variants": [{"name": v.name, "what": v.what} for v in VARIANTS],
        "runs": runs, **judge.judge_sweep(runs, lrs),
        "commit": git_sha(short=True), "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(time.perf_counter() - sw.t0, 1), "cpu_seconds": round(sw.cpu_seconds, 1),
        "trained": sw.trained, "reused": sw.reused, "jobs": sw.jobs,
        "cold_cpu_seconds": round(sum(r.get("cpu_seconds") or 0.0 for r in runs), 1),
    }


def run_lrsweep(out: Path, grid: str = "default", jobs: int | None = None, overrides: list[str] | None = None,
                doc: Path | None = None, log=print, ray: str | None = None) -> dict:
    """`minitrain lr-sweep`: train (or reuse) every run of GRID under OUT/runs, then write OUT/sweep.json,
    OUT/index.html (the page) and OUT/natural-instabilities.md (and `doc`, when given). `ray`: train on the
    Ray cluster at this address (`local`: one started here; docs/scale.md)."""
    sw = Sweep(Path(out), grid, jobs, list(overrides or []), log, ray)
    sw.run()
    data = collect(sw)
    files.atomic_write_json(Path(out) / "sweep.json", data)
    where = page.write(Path(out), data)
    text = page.natural_md(data)
    files.atomic_write_text(Path(out) / "natural-instabilities.md", text)
    if doc:
        files.atomic_write_text(Path(doc), text)
    log(f"lr-sweep: {len(data['runs'])} runs in {data['seconds']:.0f} s ({sw.trained} trained in "
        f"{sw.cpu_seconds:.0f} CPU s, {sw.reused} reused); page {where}; doc {doc or Path(out) / 'natural-instabilities.md'}")
    return data
