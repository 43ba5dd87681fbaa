"""The runner's backend on a Ray cluster (`--ray [ADDRESS]`): sweeps past one machine (docs/scale.md).

    RayCluster   one Ray task per job, one CPU each, `slots` at a time (default: the cluster's CPUs)

Ray is an optional extra (`pip install 'minitrain[ray]'`). Without an address (or with `local`) this process
starts a private cluster on this machine whose every port listens on 127.0.0.1 alone (LOOPBACK_ENV below;
checked once it runs); with one (`auto`, HOST:PORT, ray://HOST:PORT) it joins an existing cluster and ships
this process's minitrain package to the workers.

What travels is small: the job's function (by name) and its arguments, the driver's working folder and a
few environment variables. What does not travel is the run folder: a worker writes it where the job says,
as a local child does. So the experiments folder must be one shared filesystem, mounted at the same path
on every node: the runner reads a donor's checkpoint there to start its forks, and the progress lines read
each run's rows there while it trains. Shipping the folders back instead would give a fork nothing to
start from until its donor ended.

A local cluster's processes end with this one even when it is killed outright (SIGKILL): Ray's GCS and
raylet do by themselves, but the agents the raylet starts (DashboardAgent, RuntimeEnvAgent) outlive it, so a
watchdog process (Reaper, Linux) that holds a pipe from this one kills them when that pipe closes unannounced.

A worker that dies mid-run (killed, its node lost) is retried by Ray, up to RETRIES times. The retry runs
the same job again, and a run of the same config left unfinished resumes from its last checkpoint
(lab/runs.py: lab_run, resume_run), so the retried run's metrics are the same bytes as an unkilled one's.
"""
from __future__ import annotations

import io
import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from minitrain.core import numerics
from minitrain.core.errors import UserError
from minitrain.lab import runner

RETRIES = 3  # tries after a worker dies (Ray's default for tasks); an exception in the job is not retried
# environment variables a worker takes from this process (where the data cache is, say; the kernel choices a
# user made here, so a worker computes as this machine would: each run's manifest records the worker's numerics)
PASSED_ENV = ("MINITRAIN_CACHE", "XDG_CACHE_HOME", "TOKENIZERS_PARALLELISM", *numerics.KERNEL_ENV)
ADDRESS = re.compile(r"^(local|auto|ray://[^\s]+|[A-Za-z0-9_.\-\[\]:]+:\d+)$")
# Ray's switch for a machine that is never part of a multi-node cluster (its default on Windows and macOS):
# the node's address is then 127.0.0.1, and GCS, raylet, workers and agents listen there alone, where on
# Linux they would listen on every interface. Ray reads it when it is first imported.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
CONNECT_TIMEOUT = 10.0  # seconds a cluster's address has to accept a TCP connection (refuse_unreachable)


def check_address(address: str | None) -> str:
    """`local` (a private cluster here), `auto`, HOST:PORT or ray://HOST:PORT; anything else is one line
    (e.g. `--ray EXPERIMENTS`, where argparse took the folder for the address)."""
    address = address or "local"
    if not ADDRESS.match(address):
        raise UserError(f"--ray {address}: not a Ray address (local, auto, HOST:PORT or ray://HOST:PORT); "
                        "to use a local cluster, put --ray after the other arguments or write --ray=local")
    return address


def refuse_unreachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """HOST:PORT or ray://HOST:PORT: one TCP connection first. Where nothing listens, `ray.init` retries for
    minutes before it gives up; this says so in one line within `timeout` seconds."""
    if address in ("local", "auto"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not port.isdigit():
        return  # ray://HOST: Ray's own default port, left to Ray
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise UserError(f"--ray {address}: nothing answers there ({e.strerror or e}); start the cluster with "
                        "'ray start --head', check the address, or leave it out for a local cluster") from None


def backend(ray: str | None, jobs: int | None = None):
    """The runner's backend for a command's `--ray` value: a Ray cluster at that address, else (None) local
    processes, `jobs` at a time. Close it when the jobs have run."""
    if ray is None:
        return runner.LocalProcesses(jobs)
    return RayCluster(ray, jobs)


class RayCluster:
    """One Ray task per job (module docstring): the job's function called in the worker."""

    def __init__(self, address: str | None = None, jobs: int | None = None):
        address = check_address(address)
        if jobs is not None and jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        if address == "local":
            os.environ[LOOPBACK_ENV] = "0"  # before Ray's first import (LOOPBACK_ENV)
        refuse_unreachable(address)
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs Ray: pip install 'minitrain[ray]'") from None
        self.ray = ray
        self.reaper = None
        self.started = not ray.is_initialized()  # this object started (or joined) Ray: close() ends it
        if self.started:
            package = Path(__file__).resolve().parents[1]  # src/minitrain
            env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
            if address == "local":  # same machine: the workers import this very package from where it is
                env["PYTHONPATH"] = os.pathsep.join([str(package.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
                self.reaper = Reaper()
                ray.init(address="local", num_cpus=jobs or os.cpu_count() or 1, include_dashboard=False,
                         log_to_driver=False, runtime_env={"env_vars": env})
                self.reaper.watch()
                check_loopback(ray)
            else:  # other machines: Ray uploads the package (a megabyte) once per session
                try:
                    ray.init(address=address, log_to_driver=False,
                             runtime_env={"env_vars": env, "py_modules": [str(package)]})
                except ConnectionError as e:
                    raise UserError(f"--ray {address}: no Ray cluster there ({e}); start one with 'ray start "
                                    "--head' or leave the address out for a local one") from None
        self.slots = max(1, jobs or int(ray.cluster_resources().get("CPU", 1)))
        self.task = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(run_in_worker)

    def close(self) -> None:
        """Stop the local cluster this object started, or leave the one it joined."""
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        if self.reaper:
            self.reaper.close()
            self.reaper = None
        self.started = False

    def start(self, job: runner.Job):
        if self.reaper:  # the processes the cluster has started by now (an agent may come up late)
            self.reaper.watch()
        return RayTask(self.ray, self.task.remote(job.call, job.args, os.getcwd()))


def process_tree(pid: int) -> dict[int, str]:
    """{pid: its start time} of every process below `pid` (Linux's /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # it ended while we looked
            children.setdefault(int(fields[1]), []).append(int(entry))
            started[int(entry)] = fields[19]  # starttime: a pid reused later is another process
    out, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out[child] = started[child]
                todo.append(child)
    return out


DONE = "done"  # what close() tells the watchdog: the cluster was shut down, nothing to kill


class Reaper:
    """The watchdog of a local cluster (module docstring): told the cluster's processes as they appear, it
    kills those still running (the same start time) once this process has gone without saying DONE. In its
    own session, so that Ctrl-C at the terminal does not stop it before this process has cleaned up."""

    def __init__(self):
        self.proc = None
        if os.path.isdir("/proc"):
            self.proc = subprocess.Popen([sys.executable, "-c", "from minitrain.lab.ray_backend import reap; reap()"],
                                         stdin=subprocess.PIPE, text=True, start_new_session=True)
            self.told: set[int] = {self.proc.pid}

    def watch(self) -> None:
        if self.proc is None:
            return
        new = {pid: start for pid, start in process_tree(os.getpid()).items() if pid not in self.told}
        self.told.update(new)
        self.proc.stdin.write("".join(f"{pid} {start}\n" for pid, start in new.items()))
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.write(DONE + "\n")
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def reap() -> None:
    """The watchdog's body: read `PID START` lines until DONE (nothing to do) or the end of the pipe (the
    driver died): then SIGKILL each listed process that is still the one listed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watched = {}
    for line in sys.stdin:
        if line.strip() == DONE:
            return
        pid, start = line.split()
        watched[int(pid)] = start
    for pid, start in watched.items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                same = f.read().rsplit(")", 1)[1].split()[19] == start
            if same:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            pass  # it has ended


def check_loopback(ray) -> None:
    """A local cluster must listen on 127.0.0.1 alone: its node address says where its services listen. Ray
    imported before LOOPBACK_ENV was set (by other code in this process) picks the machine's address:
    then the cluster is stopped at once and the command refused."""
    node = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node).is_loopback:
        ray.shutdown()
        raise UserError(f"--ray local: the Ray cluster took the address {node}, not 127.0.0.1, so it would listen "
                        f"beyond this machine (Ray was imported before minitrain could set {LOOPBACK_ENV}=0); "
                        f"set {LOOPBACK_ENV}=0 in the environment, or train without --ray")


class RayTask:
    """A submitted job: its exit code, output lines and result come back with the task's value."""

    def __init__(self, ray, ref):
        self.ray, self.ref = ray, ref
        self.code: int | None = None
        self.output: list[str] = []
        self.result = None

    def poll(self) -> int | None:
        if self.code is None:
            ready, _ = self.ray.wait([self.ref], timeout=0)
            if ready:
                self.collect()
        return self.code

    def wait(self) -> int:
        if self.code is None:
            self.collect()
        return self.code

    def collect(self) -> None:
        try:
            self.code, self.output, self.result = self.ray.get(self.ref)
        except Exception as e:  # noqa: BLE001 - the job raised, was cancelled, or its retries ran out
            self.code, self.output = 1, str(e).splitlines() or [type(e).__name__]

    def terminate(self) -> None:
        self.ray.cancel(self.ref, force=True)

    def finish(self) -> tuple[list[str], object]:
        return self.output, self.result


def run_in_worker(fn, args: tuple, cwd: str) -> tuple[int, list[str], object]:
    """In a Ray worker: run fn(*args) from the driver's working folder (relative run paths mean the same
    there); returns (exit code, its output lines, its value). A UserError is one line and its exit code, as
    from the CLI; any other exception is its traceback and exit code 1."""
    os.chdir(cwd)
    out = io.StringIO()
    code, result = 0, None
    with redirect_stdout(out), redirect_stderr(out):
        try:
            result = fn(*args)
        except UserError as e:
            print(f"minitrain: error: {e}", file=sys.stderr)
            code = e.exit_code
        except SystemExit as e:  # a job that ends with sys.exit(code)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # noqa: BLE001 - a crash is the job's failure, not the worker's
            traceback.print_exc()
            code = 1
    return code, out.getvalue().splitlines(), result
