"""The one runner for many runs: the lab's four runs, explore's grid, the diagnosis suite and the benches.

    Job             one run described as data: a module-level function and its arguments, the run folder it
                    writes, and the donor it waits for (start once the donor's checkpoint at step K exists)
    run_jobs        start every job as soon as it may, at most `backend.slots` at a time, in the order given;
                    call back as jobs start and end (an ending job may add jobs); stop the rest on a failure
    LocalProcesses  one child process per job on this machine, forked from this one where that is safe
    InThisProcess   one job after another in this process (one worker: no process to start)

A backend starts a job and returns a handle with poll() -> exit code or None, wait(), terminate() and
finish() -> (output lines, result); close() ends the backend once its jobs have run. A backend for another
machine only needs these (lab/ray_backend.py).

Children never outlive the runner: on Linux each child gets SIGTERM when its parent dies (even by SIGKILL),
and a SIGTERM or Ctrl-C to the parent terminates the running children before it exits.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from minitrain.core.errors import EXIT_NON_FINITE, UserError
from minitrain.run import files

# A run that stopped on a non-finite value ended as designed: its rows are kept
OK_CODES = (0, EXIT_NON_FINITE)


@dataclass
class Job:
    name: str
    call: Callable  # a module-level function (a child process must find it by name) ...
    args: tuple = ()  # ... and its arguments; it may end with sys.exit(code) (EXIT_NON_FINITE: rows kept)
    run: Path | None = None  # the run folder it writes
    steps: int = 0  # how many steps that run will have (for progress)
    donor: str | None = None  # the job this one forks from: it starts once the donor ...
    donor_step: int | None = None  # ... has this checkpoint (None: once the donor has ended)
    # filled in by run_jobs
    state: str = "waiting"  # waiting | running | ended | skipped (its donor failed, or another job did)
    started: float = 0.0
    ended: float = 0.0
    returncode: int | None = None
    output: list[str] = field(default_factory=list)  # its stdout and stderr
    result: object = None  # what `call` returned
    handle: object = field(default=None, repr=False)

    @property
    def failed(self) -> bool:
        return self.state == "ended" and self.returncode not in OK_CODES

    def error(self) -> str:
        """The failed job's last message, as one line."""
        msg = next((line for line in reversed(self.output) if line.strip()), f"exit code {self.returncode}")
        return msg.removeprefix("minitrain: error: ")


def run_jobs(jobs: list[Job], backend=None, on_start=None, on_end=None, on_tick=None, tick: float = 0.25) -> list[Job]:
    """Run every job (see the module docstring); returns them all, added ones included, with their state.
    on_start(job) and on_end(job) are called in this process; on_end may return new jobs to run.
    on_tick(jobs, final) is called every `tick` seconds and once at the end. A failed job (an exit code
    other than 0 and EXIT_NON_FINITE) stops new starts; the running ones finish. Ctrl-C or SIGTERM
    terminates the running jobs, then re-raises."""
    backend = backend or LocalProcesses()
    every: dict[str, Job] = {}
    waiting: list[Job] = []
    running: list[Job] = []

    def add(new) -> None:
        for j in new or ():
            if j.name in every:
                raise ValueError(f"two jobs named {j.name!r}")
            if j.donor is not None and j.donor not in every and j.donor not in {n.name for n in new}:
                raise ValueError(f"job {j.name!r} waits for {j.donor!r}, which is not a job")
            every[j.name] = j
            waiting.append(j)

    def end(j: Job) -> None:
        j.returncode = j.handle.wait()
        j.ended = time.perf_counter()
        j.output, j.result = j.handle.finish()
        j.state = "ended"
        running.remove(j)

    def ready(j: Job) -> bool | None:
        """True: start it; False: not yet; None: never (its donor failed)."""
        if j.donor is None:
            return True
        d = every[j.donor]
        if d.state == "skipped" or d.failed:
            return None
        if d.state == "ended":
            return True
        return d.state == "running" and j.donor_step is not None and d.run is not None and \
            files.checkpoint_dir(d.run, j.donor_step).is_dir()

    add(jobs)
    with terminate_children_on_sigterm():
        try:
            while waiting or running:
                for j in [j for j in running if j.handle.poll() is not None]:
                    end(j)
                    if on_end:
                        add(on_end(j))
                if any(j.failed for j in every.values()):  # stop starting; let the running ones finish
                    for j in waiting:
                        j.state = "skipped"
                    waiting.clear()
                for j in list(waiting):
                    if len(running) >= backend.slots:
                        break
                    go = ready(j)
                    if go is None:
                        j.state = "skipped"
                        waiting.remove(j)
                    elif go:
                        waiting.remove(j)
                        j.state, j.started = "running", time.perf_counter()
                        with stop_signals_held():  # a Ctrl-C now would leave a child no one terminates
                            j.handle = backend.start(j)
                            running.append(j)
                        if on_start:
                            on_start(j)
                if on_tick:
                    on_tick(list(every.values()), False)
                if running and all(j.handle.poll() is None for j in running):
                    time.sleep(tick)
        except BaseException:
            for j in running:
                j.handle.terminate()
            raise
        finally:
            for j in list(running):
                end(j)
            if on_tick:
                on_tick(list(every.values()), True)
    return list(every.values())


# ---------------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------------


class LocalProcesses:
    """One child process per job, `jobs` at a time (default: one per core): forked from this process where
    forking is safe (can_fork), else a new interpreter that imports the job's function by name."""

    def __init__(self, jobs: int | None = None, fork: bool = True):
        self.slots = max(1, jobs or os.cpu_count() or 1)
        self.fork = fork and can_fork()
        self.warm = False

    def start(self, job: Job):
        log = tempfile.NamedTemporaryFile("w+", prefix="minitrain-job-", suffix=".log", delete=False)
        log.close()
        if self.fork and not self.warm:
            warm_up()
            self.warm = True
        return ChildProcess(job.call, job.args, log.name, "fork" if self.fork else "spawn")

    def close(self) -> None:
        pass


class InThisProcess:
    """One job after another in this process: for a single worker, where a child process would only add
    the cost of starting it. The output goes where this process's goes."""

    slots = 1

    def start(self, job: Job):
        return Done(job.call(*job.args))

    def close(self) -> None:
        pass


class Done:
    """A job that ended before start() returned."""

    def __init__(self, result):
        self.result = result

    def poll(self) -> int:
        return 0

    wait = poll

    def terminate(self) -> None:
        pass

    def finish(self) -> tuple[list[str], object]:
        return [], self.result


class ChildProcess:
    """A multiprocessing child running fn(*args), its stdout and stderr in the file `log`; its return
    value comes back through a pipe."""

    def __init__(self, fn, args: tuple, log: str, how: str):
        ctx = multiprocessing.get_context(how)
        self.log = log
        self.conn, child_end = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=child_main, args=(fn, args, log, child_end, os.getpid()))
        self.process.start()
        child_end.close()
        self.result = None

    def poll(self) -> int | None:
        if not self.conn.closed and self.conn.poll():  # read the value at once: a full pipe would stall the child
            try:
                self.result = self.conn.recv()
            except EOFError:  # it ended without one (sys.exit, an error)
                pass
            self.conn.close()
        return self.process.exitcode

    def wait(self) -> int | None:
        self.process.join()
        self.poll()
        return self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()

    def finish(self) -> tuple[list[str], object]:
        self.conn.close()
        return read_log(self.log), self.result


def read_log(path: str) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    finally:
        os.unlink(path)


def child_main(fn, args: tuple, log: str, conn, parent: int) -> None:
    """A child's first steps: die with its parent, write to its log (whatever sys.stdout was in the parent:
    a test's capture, say), then run; a UserError is one line and its exit code, as from the CLI."""
    die_with_parent(parent)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked child inherits run_jobs' handler: SIGTERM kills it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the parent while it started us
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    try:
        conn.send(fn(*args))
    except UserError as e:
        print(f"minitrain: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)


# ---------------------------------------------------------------------------------------------------
# Children die with their parent
# ---------------------------------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """In a child: on Linux, ask the kernel for SIGTERM when the parent dies (by any signal, SIGKILL
    included); then, if the parent is already gone, exit now."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def stop_signals_held():
    """Ctrl-C and SIGTERM wait (pending, not lost) while a child is being started, so that the child is among
    the running jobs run_jobs terminates before the signal's exception can leave it behind (multiprocessing
    would then join it at exit, and the parent would never die)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def terminate_children_on_sigterm():
    """While jobs run, SIGTERM to this process exits through Python (SystemExit 143) so that run_jobs
    terminates its children first; only in the main thread, and only where nobody else handles SIGTERM."""
    def exit_on_term(signum, frame):
        raise SystemExit(128 + signum)

    ours = False
    try:
        ours = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        if ours:
            signal.signal(signal.SIGTERM, exit_on_term)
    except ValueError:  # not the main thread
        ours = False
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# ---------------------------------------------------------------------------------------------------
# Forking from this process
# ---------------------------------------------------------------------------------------------------


def can_fork() -> bool:
    """Forking a process that has imported torch is safe on Linux when no OpenMP thread team exists yet
    (warm_up keeps this process at one thread); macOS's frameworks are not fork-safe, Windows cannot fork."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def warm_up() -> None:
    """Before the first fork: import torch (the largest import), and keep this process at one OpenMP
    thread (no thread team exists at a fork: the children may start their own)."""
    import torch

    torch.set_num_threads(1)


def warm_up_runs(cfg) -> None:
    """What each forked run would otherwise do first, done once here: the imports (the loop; the signature
    and page writers) and the data (kept by data.prepare's cache)."""
    from minitrain import loop  # noqa: F401
    from minitrain.analysis import readings, signature  # noqa: F401
    from minitrain.core import numerics
    from minitrain.core.data import prepare
    from minitrain.views import dashboard  # noqa: F401

    numerics.apply(cfg.numerics, 1)  # before this process's first kernel: the forked runs inherit its choice
    prepare(cfg)
    # the tokenizer was trained with its thread pool here; a forked child must not use that pool (and
    # the library warns unless this is set)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
