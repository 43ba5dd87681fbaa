"""The whole spike lab (`just lab`): the baseline, then the three injection runs forked from it at K, the
report and the index, with the independent parts run at the same time.

The three injection runs share steps 0..K-1 with the baseline and nothing after: each one forks from the
baseline's checkpoint at K (run/donors.find_donor) as soon as that checkpoint exists, while the baseline goes on
to its end. Every run is its own process (train_lab_run: what `minitrain lab-run` does, one torch thread
each) on lab/runner.py, at most `jobs` at a time (default: one per core). The runs are the same bytes as when
made one after another: a run is a function of its config and the checkpoint it forks from, never of the
order (tests/test_lab_parallel.py).

On Linux each run's process is forked from this one instead of starting a new interpreter, once this process
has imported torch, the loop and the page writers and prepared the data (runner.warm_up_runs, before the
first run starts). Every run then starts training at once instead of spending ~2 s of CPU on imports and
data, which the baseline would otherwise pay too, on the critical path. Elsewhere each run is a new
interpreter that imports train_lab_run.

Progress: one line per run (step, steps/s), redrawn in place on a terminal; elsewhere one line as each run
starts and ends.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from minitrain.core.course import LAB_INJECTIONS, lab_run_name
from minitrain.core.errors import EXIT_NON_FINITE, UserError
from minitrain.lab import ray_backend, runner
from minitrain.run import files, reader

WARNING = "minitrain: warning:"  # how a run's command starts a warning line (lab/runs.py)


def lab_overrides(seed: int, injection: str, k: int, sets: list[str] | None = None) -> list[str]:
    """One lab run's config overrides, as `minitrain lab-run` gives them."""
    return [f"seed={seed}", f"injection={injection}", f"injection_step={k}", *(sets or [])]


def lab_configs(seed: int, k: int, sets: list[str] | None = None) -> list:
    """The four runs' configs, as `minitrain lab-run` builds them (so a --set that breaks one of them, e.g.
    injection_step, is refused before anything trains): baseline, then A, B, C."""
    from minitrain.core.config import build_config

    return [build_config({}, lab_overrides(seed, inj, k, sets)) for inj in ("none", *LAB_INJECTIONS)]


def train_lab_run(overrides: list[str], experiments: str, force: bool) -> None:
    """One run of the parallel lab in its own process: `minitrain lab-run --no-progress --no-index`. Its
    summary line goes to the job's output; the process ends with the run's exit code."""
    from minitrain.core.config import build_config
    from minitrain.lab.runs import exit_code, lab_run

    out, line = lab_run(build_config({}, [*overrides, "progress=false"]), Path(experiments), force=force,
                        index=False)
    print(line)
    sys.exit(exit_code(out))


def fork_checkpoint(k: int, ckpt_every: int) -> int:
    """The baseline checkpoint an injection run at K forks from: the last one at or before K."""
    return (k // ckpt_every) * ckpt_every


def run_lab(experiments: Path, seed: int, k: int, jobs: int | None = None, sets: list[str] | None = None,
            force: bool = False, out=None, ray: str | None = None) -> list[str]:
    """Train the lab's four runs into `experiments` (up-to-date runs are left alone); returns each run's
    summary line. Raises UserError with the failing run's last message if any run fails. `ray`: run them as
    tasks on the Ray cluster at this address instead (`local`: one started here; docs/scale.md)."""
    experiments, out = Path(experiments), out or sys.stderr
    sets = list(sets or [])
    base_cfg = lab_configs(seed, k, sets)[0]  # every run's config is valid before any process starts
    baseline = lab_run_name("none", seed, k)
    names = [lab_run_name(inj, seed, k) for inj in ("none", *LAB_INJECTIONS)]
    if force:  # --force replaces only what minitrain wrote: refused before any run starts (files.RUN_FILES)
        for name in names:
            files.refuse_foreign_files(experiments / name)

    def job(injection: str) -> runner.Job:
        name = lab_run_name(injection, seed, k)
        args = (lab_overrides(seed, injection, k, sets), str(experiments), force)
        # the tails start once the baseline's checkpoint at K exists (or the baseline has ended)
        donor = None if injection == "none" else baseline
        return runner.Job(name, call=train_lab_run, args=args, run=experiments / name, steps=base_cfg.steps,
                          donor=donor, donor_step=fork_checkpoint(k, base_cfg.ckpt_every))

    backend = ray_backend.backend(ray, jobs)
    if getattr(backend, "fork", False):
        runner.warm_up()
        runner.warm_up_runs(base_cfg)
    try:
        done = runner.run_jobs([job(inj) for inj in ("none", *LAB_INJECTIONS)], backend,
                               on_tick=Progress(out).update)
    finally:
        backend.close()
    for line in (line for j in done for line in j.output if line.startswith(WARNING)):
        out.write(line + "\n")  # a child's warning (a page not written, say) is the user's to read
    failed = [j for j in done if j.failed]
    if failed:
        raise UserError(f"{failed[0].name} failed: {failed[0].error()}")
    refresh_tails(experiments / baseline, [j.run for j in done if j.name != baseline])
    return [line for j in done for line in j.output if line.startswith(j.name)]


def refresh_tails(baseline: Path, tails: list[Path]) -> None:
    """A tail that ended before the baseline did compared itself with a partial baseline: write its
    signature (expected vs observed) and its page (baseline overlay) again against the finished one."""
    from minitrain.analysis import signature
    from minitrain.lab import spoilers
    from minitrain.lab.runs import write_pages

    done = baseline / reader.RESULTS
    if not done.exists():
        return
    for tail in tails:
        sig = tail / "signature.json"
        if not (tail / reader.RESULTS).exists():
            continue
        if spoilers.is_sealed(tail):  # no signature before the reveal; the page against the finished baseline
            page = tail / "dashboard.html"
            if not page.exists() or page.stat().st_mtime < done.stat().st_mtime:
                write_pages(tail)
        elif not sig.exists() or sig.stat().st_mtime < done.stat().st_mtime:
            with reader.metrics_once():  # the signature and the page read the same two runs
                try:
                    signature.write(tail)
                except UserError:  # e.g. a run that diverged before K: it has no signature, as when run alone
                    continue
                write_pages(tail)


class Progress:
    """One line per run: on a terminal redrawn in place; otherwise a line when a run starts and ends."""

    def __init__(self, out):
        self.out = out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.drawn = 0
        self.said: set[tuple[str, str]] = set()

    def line(self, j: runner.Job) -> str:
        if j.state in ("waiting", "skipped"):
            return f"{j.name:<20} waiting for the baseline's checkpoint"
        step = reader.last_step(j.run)
        secs = (j.ended or time.perf_counter()) - j.started
        code = j.returncode
        state = ("running" if j.state == "running" else "done" if code == 0 else "non-finite, rows kept"
                 if code == EXIT_NON_FINITE else f"failed ({code})")
        where = "starting" if step is None else f"{step + 1}/{j.steps} steps"
        return f"{j.name:<20} {where:>16}  {secs:6.1f} s  {state}"

    def update(self, jobs: list[runner.Job], final: bool = False) -> None:
        if self.tty:
            text = "\n".join(self.line(j) for j in jobs)
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            self.out.write(up + "\n".join(f"{t}\x1b[K" for t in text.split("\n")) + "\n")
            self.out.flush()
            self.drawn = len(jobs)
            return
        for j in jobs:
            for event, due in (("start", j.state in ("running", "ended")), ("end", j.state == "ended")):
                if due and (j.name, event) not in self.said:
                    self.said.add((j.name, event))
                    self.out.write(self.line(j) + "\n")
        self.out.flush()
