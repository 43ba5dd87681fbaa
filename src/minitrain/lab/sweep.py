"""What explore and lr-sweep share: a grid of runs trained on the runner, cached by config hash.

    train_one   a worker's job: train one run to its stop (or resume it), its page, and its cost file
    Sweep       the base of both sweeps: the checks on the command's arguments (--set, --jobs), the backend
                (local processes or a Ray cluster), one start line, the count of runs trained and reused,
                the runs tables written once at the end, and the one-line failure
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.lab import ray_backend, runner, spoilers
from minitrain.run import files

COST = "explore-cost.json"  # beside a run a sweep trained: its CPU and wall seconds (training and dashboard)


def train_one(cfg_dict: dict, out: str, stop: int, index: bool = True) -> float:
    """Worker process: train one run to `stop` (an injection run forks from its baseline's checkpoint at K),
    then its dashboard, and the index of its folder's runs unless `index` is False (a sweep writes each
    folder's index once at its end: rewritten after every run, it read every run beside it each time).
    A run of this config left unfinished (its worker killed: a retry, or the sweep run again) resumes from its
    last checkpoint, to the same bytes. Returns the CPU seconds it took."""
    from minitrain.lab import runs

    t0, w0 = time.process_time(), time.perf_counter()
    cfg = build_config(cfg_dict)
    if runs.interrupted(Path(out), cfg):
        runs.resume_run(Path(out), stop_at=stop, index=index)
    else:
        runs.train_run(cfg, Path(out), index=index, force=True, stop_at=stop)
    cpu = round(time.process_time() - t0, 2)  # the value kept in COST: a cached run counts the same
    files.atomic_write_json(Path(out) / COST, {"cpu_seconds": cpu,
                                               "wall_seconds": round(time.perf_counter() - w0, 2)})
    return cpu


class Sweep:
    """A command that trains many runs. A subclass names its command and the config fields it sets itself,
    and gives its start line and its first jobs; `train` runs them (and those the jobs' ends add)."""

    command = "sweep"  # the command's name, in its messages
    grid_fields: tuple[str, ...] = ()  # config fields the sweep sets itself: no --set for them

    def __init__(self, out: Path, grid: str, jobs: int | None, overrides: list[str], log, ray: str | None = None):
        for o in overrides:
            if o.split("=", 1)[0].strip().replace("-", "_") in self.grid_fields:
                raise UserError(f"--set {o}: the grid sets this field itself; leave it out")
        build_config({}, overrides)  # a bad override fails here, in one line, before anything runs
        if jobs is not None and jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.out, self.grid, self.overrides, self.log = Path(out), grid, list(overrides), log
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.jobs_asked, self.ray = jobs, ray  # ray: a Ray cluster's address (lab/ray_backend.py), else local
        self.trained = self.reused = 0
        self.cpu_seconds = 0.0  # trained in this invocation
        self.indexed: set[Path] = set()  # the folders of the runs trained here: their index.html, at the end
        self.t0 = time.perf_counter()

    def elapsed(self) -> str:
        s = int(time.perf_counter() - self.t0)
        return f"{s // 60}:{s % 60:02d}"

    def counted(self, seconds: float | None) -> str:
        """Count a trained run (its CPU seconds) or a cached one (None); returns how its line says so."""
        if seconds is None:
            self.reused += 1
            return "cached"
        self.trained += 1
        self.cpu_seconds += seconds
        return f"{seconds:.1f} CPU s"

    def workers(self) -> str:
        where = f" on the Ray cluster {self.ray}" if self.ray is not None else ""
        return f"{self.jobs} worker process{'es' if self.jobs > 1 else ''}{where}"

    def start_line(self) -> str:
        raise NotImplementedError

    def first_jobs(self) -> list[runner.Job]:
        raise NotImplementedError

    def ended(self, job: runner.Job) -> list[runner.Job]:
        """A job ended: the jobs it lets start."""
        raise NotImplementedError

    def train(self) -> None:
        """Run the sweep's jobs, then write the runs tables of the folders trained into; a failed run is a
        UserError (the runs that ended stay: the command again continues)."""
        backend = ray_backend.backend(self.ray, self.jobs if self.ray is None else self.jobs_asked)
        self.jobs = backend.slots
        self.log(self.start_line())
        warm = not getattr(backend, "fork", False)  # only a forking backend gains from this process's imports

        def warm_up(job: runner.Job) -> None:  # once, after the first run is forked: the others start at once
            nonlocal warm
            if not warm:
                runner.warm_up_runs(build_config(job.args[0]))
                warm = True

        def ended(job: runner.Job) -> list[runner.Job]:
            self.indexed.add(Path(job.run).parent)
            return [] if job.failed else self.ended(job)

        try:
            done = runner.run_jobs(self.first_jobs(), backend, on_start=warm_up, on_end=ended)
        finally:
            backend.close()
        for folder in sorted(f for f in self.indexed if f.is_dir()):  # each folder's runs table, once
            spoilers.refresh(folder)
        failed = next((j for j in done if j.failed), None)
        if failed:
            raise UserError(f"{self.command}: training {failed.run} failed ({failed.error()}); "
                            f"run `minitrain {self.command}` again to continue")
