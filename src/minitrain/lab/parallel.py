"""The whole spike lab (`just lab`): the baseline, then the three injection runs forked from it at K, the
report and the index, with the independent parts run at the same time.

The three injection runs share steps 0..K-1 with the baseline and nothing after: each one forks from the
baseline's checkpoint at K (loop.find_donor) as soon as that checkpoint exists, while the baseline goes on
to its end. Every run is its own process (`minitrain lab-run`, one torch thread each), at most `jobs` at a
time (default: one per core). The runs are the same bytes as when made one after another: a run is a
function of its config and the checkpoint it forks from, never of the order (tests/test_lab_parallel.py).

Given the CLI's entry point (`main`, as `minitrain lab` does) on Linux, each run's process is forked from
this one instead of starting a new interpreter: the baseline once torch is imported; the injection runs
once this process has also imported `torch._dynamo` (which torch.optim's Optimizer imports), the loop and
the page writers and prepared the data (done while the baseline trains its first K steps). An injection
run then starts training at once instead of spending ~2.5 s of CPU on imports and data. Without `main`
(or elsewhere) each run is a new `python -m minitrain lab-run`.

Progress: one line per run (step, steps/s), redrawn in place on a terminal; elsewhere one line as each run
starts and ends.
"""
from __future__ import annotations

import multiprocessing
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
    argv: list[str]  # the CLI's arguments ("lab-run", ...)
    steps: int
    proc: "subprocess.Popen | ForkedRun | None" = None
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


def lab_configs(seed: int, k: int, sets: list[str] | None = None) -> list:
    """The four runs' configs, as `minitrain lab-run` builds them (so a --set that breaks one of them, e.g.
    injection_step, is refused before anything trains): baseline, then A, B, C."""
    from minitrain.core.config import build_config

    return [build_config({}, [f"seed={seed}", f"injection={inj}", f"injection_step={k}", *(sets or [])])
            for inj in ("none", *LAB_INJECTIONS)]


def fork_checkpoint(k: int, ckpt_every: int) -> int:
    """The baseline checkpoint an injection run at K forks from: the last one at or before K."""
    return (k // ckpt_every) * ckpt_every


def run_lab(experiments: Path, seed: int, k: int, jobs: int | None = None, sets: list[str] | None = None,
            force: bool = False, out=None, main=None) -> list[str]:
    """Train the lab's four runs into `experiments` (up-to-date runs are left alone); returns each run's
    summary line. Raises UserError with the failing run's last message if any run fails. `main`: the CLI's
    entry point, to fork each run from this process (module docstring) where the platform allows it."""
    experiments, out = Path(experiments), out or sys.stderr
    sets = list(sets or [])
    jobs = max(1, jobs or os.cpu_count() or 1)
    base_cfg = lab_configs(seed, k, sets)[0]  # every run's config is valid before any process starts
    common = ["--seed", str(seed), "--experiments", str(experiments), "--no-progress", "--no-index"]
    for kv in sets:
        common += ["--set", kv]
    if force:
        common.append("--force")

    def job(injection: str) -> Job:
        name = reader.lab_run_name(injection, seed, k)
        argv = ["lab-run", "--injection", injection, "--injection-step", str(k), *common]
        return Job(name, argv, base_cfg.steps)

    fork = main is not None and can_fork()
    if fork:
        warm_up()  # torch alone: the baseline does the rest itself while this process readies the tails

    def start(j: Job) -> None:
        j.log = tempfile.TemporaryFile("w+")
        if fork:
            j.proc = ForkedRun(main, j.argv, j.log)
        else:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            j.proc = subprocess.Popen([sys.executable, "-m", "minitrain", *j.argv], stdout=j.log,
                                      stderr=subprocess.STDOUT, text=True, env=env)
        j.started = time.perf_counter()

    baseline, tails = job("none"), [job(inj) for inj in LAB_INJECTIONS]
    fork_at = files.checkpoint_dir(experiments / baseline.name, fork_checkpoint(k, base_cfg.ckpt_every))
    show = Progress([baseline, *tails], experiments, out)
    start(baseline)
    if fork:
        warm_up_tails(base_cfg)  # on the other core, while the baseline starts
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


def can_fork() -> bool:
    """Forking a process that has imported torch is safe on Linux when no OpenMP thread team exists yet
    (warm_up keeps this process at one thread); macOS's frameworks are not fork-safe, Windows cannot fork."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def warm_up() -> None:
    """Before forking the baseline: import torch (the largest import), and keep this process at one
    OpenMP thread (no thread team exists at a fork: the children may start their own)."""
    import torch

    torch.set_num_threads(1)


def warm_up_tails(cfg) -> None:
    """What each injection run would otherwise do first, done once here while the baseline trains: the
    imports (torch._dynamo, which torch.optim's Optimizer imports on first use; the loop; the signature and
    page writers) and the data (kept by data.prepare's cache)."""
    import torch._dynamo  # noqa: F401

    from minitrain import loop  # noqa: F401
    from minitrain.analysis import readings, signature  # noqa: F401
    from minitrain.core.data import prepare
    from minitrain.views import dashboard  # noqa: F401

    prepare(cfg)
    # the tokenizer was trained with its thread pool here; a forked child must not use that pool (and
    # the library warns unless this is set)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


class ForkedRun:
    """A child forked from this process, running the CLI's `main(argv)` with its output in `log`; the
    part of subprocess.Popen's interface run_lab uses (poll, wait, terminate, returncode)."""

    def __init__(self, main, argv: list[str], log):
        self.process = multiprocessing.get_context("fork").Process(target=_forked_main, args=(main, argv, log.fileno()))
        self.process.start()

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int | None:
        self.process.join()
        return self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()


def _forked_main(main, argv: list[str], fd: int) -> None:
    os.dup2(fd, 1)  # the run's stdout and stderr go to its log, as a subprocess's would, whatever
    os.dup2(fd, 2)  # sys.stdout was in the parent (a test's capture, say)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.exit(main(argv))


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
