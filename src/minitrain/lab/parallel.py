"""The whole spike lab (`just lab`): the baseline, then the three injection runs forked from it at K, the
report and the index, with the independent parts run at the same time.

The three injection runs share steps 0..K-1 with the baseline and nothing after: each one forks from the
baseline's checkpoint at K (loop.find_donor) as soon as that checkpoint exists, while the baseline goes on
to its end. Every run is its own process (`minitrain lab-run`, one torch thread each), at most `jobs` at a
time (default: one per core). The runs are the same bytes as when made one after another: a run is a
function of its config and the checkpoint it forks from, never of the order (tests/test_lab_parallel.py).

Progress: one line per run (step, steps/s), redrawn in place on a terminal; elsewhere one line as each run
starts and ends.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.core.errors import EXIT_NON_FINITE, UserError
from minitrain.run import files, reader

LAB_INJECTIONS = ("scale", "bad_batch", "v_corrupt")  # A, B, C


@dataclass
class Job:
    name: str  # the run folder's name
    argv: list[str]
    steps: int
    proc: subprocess.Popen | None = None
    log: object = None  # its stdout and stderr (a temporary file: a pipe could fill up and stall it)
    started: float = 0.0
    ended: float = 0.0
    output: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def last_step(run: Path) -> int | None:
    """The step of the last complete row of RUN/metrics.jsonl, reading only its tail."""
    path = run / reader.METRICS
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            lines = f.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines[:-1]):  # the text after the last newline is a row still being written
        if line.startswith(b'{"step":'):  # every row starts with its step (files.MetricsWriter)
            digits = line[8:].split(b",", 1)[0].strip()
            if digits.isdigit():
                return int(digits)
    return None


def fork_checkpoint(k: int, ckpt_every: int) -> int:
    """The baseline checkpoint an injection run at K forks from: the last one at or before K."""
    return (k // ckpt_every) * ckpt_every


def run_lab(experiments: Path, seed: int, k: int, jobs: int | None = None, sets: list[str] | None = None,
            force: bool = False, out=None) -> list[str]:
    """Train the lab's four runs into `experiments` (up-to-date runs are left alone); returns each run's
    summary line. Raises UserError with the failing run's last message if any run fails."""
    from minitrain.core.config import build_config

    experiments, out = Path(experiments), out or sys.stderr
    sets = list(sets or [])
    jobs = max(1, jobs or os.cpu_count() or 1)
    base_cfg = build_config({}, [f"seed={seed}", "injection=none", *sets])  # validates before any process starts
    common = ["--seed", str(seed), "--experiments", str(experiments), "--no-progress"]
    for kv in sets:
        common += ["--set", kv]
    if force:
        common.append("--force")

    def job(injection: str) -> Job:
        name = reader.lab_run_name(injection, seed, k)
        argv = [sys.executable, "-m", "minitrain", "lab-run", "--injection", injection, "--injection-step", str(k), *common]
        return Job(name, argv, base_cfg.steps)

    baseline, tails = job("none"), [job(inj) for inj in LAB_INJECTIONS]
    fork_at = files.checkpoint_dir(experiments / baseline.name, fork_checkpoint(k, base_cfg.ckpt_every))
    show = Progress([baseline, *tails], experiments, out)
    start(baseline)
    waiting = list(tails)
    try:
        while baseline.running or any(j.running for j in tails) or waiting:
            # the tails may start once the baseline's checkpoint at K exists (or the baseline has ended)
            ready = fork_at.is_dir() or not baseline.running
            if baseline.proc.poll() not in (None, 0, EXIT_NON_FINITE):  # the baseline failed: stop there
                break
            while ready and waiting and sum(j.running for j in (baseline, *tails)) < jobs:
                start(waiting.pop(0))
            show.update()
            time.sleep(0.25)
    except BaseException:
        for j in (baseline, *tails):
            if j.running:
                j.proc.terminate()
        raise
    finally:
        for j in (baseline, *tails):
            if j.proc is not None:
                j.proc.wait()
                j.ended = j.ended or time.perf_counter()
                j.log.seek(0)
                j.output = j.log.read().splitlines()
                j.log.close()
        show.update(final=True)
    # a run that stopped on a non-finite value (EXIT_NON_FINITE) ended as designed: its rows are kept
    failed = [j for j in (baseline, *tails) if j.proc is not None and j.proc.returncode not in (0, EXIT_NON_FINITE)]
    if failed:
        j = failed[0]
        msg = next((line for line in reversed(j.output) if line.strip()), f"exit code {j.proc.returncode}")
        raise UserError(f"{j.name} failed: {msg.removeprefix('minitrain: error: ')}")
    refresh_tails(experiments / baseline.name, [experiments / j.name for j in tails])
    return [line for j in (baseline, *tails) for line in j.output if line.startswith(j.name)]


def start(j: Job) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    j.log = tempfile.TemporaryFile("w+")
    j.proc = subprocess.Popen(j.argv, stdout=j.log, stderr=subprocess.STDOUT, text=True, env=env)
    j.started = time.perf_counter()


def refresh_tails(baseline: Path, tails: list[Path]) -> None:
    """A tail that ended before the baseline did compared itself with a partial baseline: write its
    signature (expected vs observed) and its page (baseline overlay) again against the finished one."""
    from minitrain.analysis import signature
    from minitrain.lab.runs import write_pages

    done = baseline / reader.RESULTS
    if not done.exists():
        return
    for tail in tails:
        sig = tail / "signature.json"
        if not (tail / reader.RESULTS).exists():
            continue
        if not sig.exists() or sig.stat().st_mtime < done.stat().st_mtime:
            try:
                signature.write(tail)
            except UserError:  # e.g. a run that diverged before K: it has no signature, as when run alone
                continue
            write_pages(tail)


class Progress:
    """One line per run: on a terminal redrawn in place; otherwise a line when a run starts and ends."""

    def __init__(self, jobs: list[Job], experiments: Path, out):
        self.jobs, self.experiments, self.out = jobs, experiments, out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.drawn = 0
        self.said: set[tuple[str, str]] = set()

    def line(self, j: Job) -> str:
        if j.proc is None:
            return f"{j.name:<20} waiting for the baseline's checkpoint"
        step = last_step(self.experiments / j.name)
        secs = (j.ended or time.perf_counter()) - j.started
        code = j.proc.returncode
        state = ("running" if j.running else "done" if code == 0 else "non-finite, rows kept" if code == EXIT_NON_FINITE
                 else f"failed ({code})")
        where = "starting" if step is None else f"{step + 1}/{j.steps} steps"
        return f"{j.name:<20} {where:>16}  {secs:6.1f} s  {state}"

    def update(self, final: bool = False) -> None:
        for j in self.jobs:
            if j.proc is not None and not j.running and not j.ended:
                j.ended = time.perf_counter()
        if self.tty:
            text = "\n".join(self.line(j) for j in self.jobs)
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            self.out.write(up + "\n".join(f"{t}\x1b[K" for t in text.split("\n")) + "\n")
            self.out.flush()
            self.drawn = len(self.jobs)
            return
        for j in self.jobs:
            for event, due in (("start", j.proc is not None), ("end", j.proc is not None and not j.running)):
                if due and (j.name, event) not in self.said:
                    self.said.add((j.name, event))
                    self.out.write(self.line(j) + "\n")
        self.out.flush()
