"""lab/runner.py: jobs start in order as their donors allow, results and errors come back, and no child
outlives its parent (SIGTERM, Ctrl-C or SIGKILL to the parent), for the runner itself, the lab and explore
(every process below the lab's or explore's process, read from /proc, ends with it)."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import ForkedCLI, as_a_new_process, small_args
from minitrain.core.errors import EXIT_NON_FINITE, UserError
from minitrain.lab import runner
from minitrain.run import files, reader

WAIT = 120  # seconds a test waits for something that takes well under one on an idle machine


def wait_for(what, seconds: float = WAIT):
    """Poll until what() is truthy; its value, or None when it never was (a loaded machine is slow)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    return None


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for a reaper counts: it runs no code)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


# --- job functions (module level: a child process finds them by name) -------------------------------


def square(x: int) -> int:
    return x * x


def refuse(what: str) -> None:
    raise UserError(f"no {what}")


def crash() -> None:
    raise ValueError("broken")


def donor(run: str, step: int, go: str) -> bool:
    """Write the checkpoint folder at `step`, then wait (still running) for the dependent to start."""
    files.checkpoint_dir(Path(run), step).mkdir(parents=True)
    return wait_for(Path(go).exists) is not None


def stop_non_finite() -> None:
    print("run: stopped at step 3")
    sys.exit(EXIT_NON_FINITE)


def touch(path: str) -> None:
    Path(path).touch()


def sleep_forever(pidfile: str) -> None:
    Path(pidfile).write_text(str(os.getpid()))
    time.sleep(3600)


# --- order, results, errors ----------------------------------------------------------------------


def test_jobs_run_in_order_and_an_ending_job_can_add_jobs():
    order = []

    def on_end(j):
        order.append(j.name)
        return [runner.Job("c", call=square, args=(4,))] if j.name == "a" else None

    done = runner.run_jobs([runner.Job("a", call=square, args=(2,)), runner.Job("b", call=square, args=(3,))],
                           runner.InThisProcess(), on_end=on_end)
    assert order == ["a", "b", "c"]
    assert [(j.name, j.state, j.result) for j in done] == [("a", "ended", 4), ("b", "ended", 9), ("c", "ended", 16)]


def test_a_child_returns_its_value_and_a_failure_its_last_line():
    done = runner.run_jobs([runner.Job("ok", call=square, args=(7,)), runner.Job("user", call=refuse, args=("data",)),
                            runner.Job("bug", call=crash)], runner.LocalProcesses(3))
    ok, user, bug = done
    assert (ok.returncode, ok.result, ok.failed) == (0, 49, False)
    assert user.failed and user.returncode == 2 and user.error() == "no data"
    assert bug.failed and bug.returncode == 1 and bug.error() == "ValueError: broken"


def test_a_dependent_starts_once_the_donors_checkpoint_exists(tmp_path):
    run, go = tmp_path / "donor", tmp_path / "go"
    done = runner.run_jobs([runner.Job("donor", call=donor, args=(str(run), 40, str(go)), run=run),
                            runner.Job("tail", call=touch, args=(str(go),), donor="donor", donor_step=40)],
                           runner.LocalProcesses(2), tick=0.05)
    assert [j.state for j in done] == ["ended", "ended"]
    assert done[0].result is True  # the tail ran while its donor was still running


def test_a_failed_donor_skips_its_dependents_and_a_failure_stops_new_starts():
    done = runner.run_jobs([runner.Job("base", call=crash), runner.Job("tail", call=square, args=(2,), donor="base"),
                            runner.Job("other", call=square, args=(3,))], runner.LocalProcesses(1))
    assert [j.state for j in done] == ["ended", "skipped", "skipped"]


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "new-interpreter"])
def test_a_job_ends_with_its_exit_code_and_a_non_finite_stop_is_no_failure(fork):
    job, = runner.run_jobs([runner.Job("nan", call=stop_non_finite)], runner.LocalProcesses(1, fork=fork))
    assert (job.returncode, job.failed, job.output) == (EXIT_NON_FINITE, False, ["run: stopped at step 3"])


def test_a_donor_that_is_not_a_job_is_refused():
    with pytest.raises(ValueError, match="not a job"):
        runner.run_jobs([runner.Job("tail", call=square, args=(1,), donor="nobody")], runner.InThisProcess())


# --- children die with their parent ---------------------------------------------------------------

def forked_parent(pidfile: Path) -> int:
    """A parent that runs one job which sleeps forever, as a process forked from this one (its imports are
    done, as ForkedCLI's are) that ends as a new `python` would: SystemExit's code, and killed by SIGINT on
    an uncaught Ctrl-C. Its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        as_a_new_process()
        runner.run_jobs([runner.Job("sleeper", call=sleep_forever, args=(str(pidfile),))], runner.LocalProcesses(1))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        os._exit(code)


def exit_code(pid: int) -> int | None:
    """PID's exit code as subprocess reports it (-N: killed by signal N) once it has ended, else None."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_no_child_outlives_its_parent(tmp_path, sig):
    """SIGTERM and Ctrl-C: the runner terminates its children, then exits; SIGKILL: the kernel tells each
    child (PR_SET_PDEATHSIG)."""
    parent, code = forked_parent(tmp_path / "pid"), None
    try:
        pid = wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text())
        assert pid, "the child never started"
        os.kill(parent, sig)
        assert wait_for(lambda: gone(int(pid))), f"child {pid} still runs after its parent got {sig!r}"
        ended = wait_for(lambda: (c := exit_code(parent)) is not None and [c])  # a list: 0 is an answer too
        assert ended, f"the parent still runs after {sig!r}"
        code = ended[0]
        # SIGTERM: exit 143 through Python; Ctrl-C: KeyboardInterrupt re-raised; SIGKILL: killed
        assert code == (128 + sig if sig == signal.SIGTERM else -sig)
    finally:
        if code is None:
            os.kill(parent, signal.SIGKILL)
            os.waitpid(parent, 0)


def descendants(pid: int) -> set[int]:
    """Every process below PID now (its children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # it ended while we looked
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def assert_no_process_outlives(parent: ForkedCLI, run: Path, sig: int) -> None:
    """Once RUN is being trained, signal the parent (the command, forked from this process: its imports are
    done) and every process that was below it has to end (the runs, and anything else the command started,
    such as a multiprocessing resource tracker)."""
    pid = wait_for(lambda: reader.live_pid(run))
    assert pid, f"{run} never started"
    below = descendants(parent.pid)
    assert int(pid) in below
    parent.send_signal(sig)
    assert parent.wait(timeout=WAIT) == (128 + sig if sig == signal.SIGTERM else -sig)
    def left() -> list[int]:
        return [p for p in below if not gone(p)]

    wait_for(lambda: not left())
    assert not left(), f"still running after the parent got {sig!r}: " + ", ".join(
        f"{p} {Path(f'/proc/{p}/cmdline').read_bytes()[:80]!r}" for p in left())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_killing_minitrain_lab_stops_its_runs(tmp_path, sig):
    """`minitrain lab` terminated (its handler stops the runs) or killed outright (no handler runs: the
    kernel's parent-death signal does): no process of it is left."""
    parent = ForkedCLI("lab", "--experiments", str(tmp_path), "--jobs", "1",
                       *small_args("steps=100000", "ckpt_every=100000"))
    try:
        assert_no_process_outlives(parent, tmp_path / "18-baseline", sig)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_killing_minitrain_explore_stops_its_runs(tmp_path, sig):
    parent = ForkedCLI("explore", str(tmp_path), "--quick", "--jobs", "1")
    try:
        lock = wait_for(lambda: next((tmp_path / "explore" / "runs").glob("*/baseline/.lock"), None)
                        if (tmp_path / "explore" / "runs").is_dir() else None)
        assert lock, "no run started"
        assert_no_process_outlives(parent, lock.parent, sig)
    finally:
        parent.kill()
        parent.wait()


def test_a_ray_cluster_beyond_the_loopback_is_stopped_and_refused():
    """lab/ray_backend.py's check, without Ray: a local cluster whose node took the machine's address (Ray
    imported before the loopback switch was set) is shut down at once and the command refused in one line."""
    from types import SimpleNamespace

    from minitrain.lab import ray_backend

    stopped = []
    fake = SimpleNamespace(util=SimpleNamespace(get_node_ip_address=lambda: "192.0.2.2"),
                           shutdown=lambda: stopped.append(True))
    with pytest.raises(UserError, match=ray_backend.LOOPBACK_ENV):
        ray_backend.check_loopback(fake)
    assert stopped == [True]
    for loopback in ("127.0.0.1", "::1"):  # the loopback is kept running
        ray_backend.check_loopback(SimpleNamespace(util=SimpleNamespace(get_node_ip_address=lambda: loopback),
                                                   shutdown=lambda: stopped.append(True)))
    assert stopped == [True]


def test_a_ray_address_where_nothing_listens_is_one_line_at_once():
    """`--ray HOST:PORT` with no cluster there: refused after one TCP connection, without Ray installed or
    its minutes of retries."""
    import socket

    from minitrain.lab import ray_backend

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(UserError, match="nothing answers there"):
            ray_backend.RayCluster(address)
    with socket.socket() as s:  # a listening socket is let through to Ray
        s.bind(("127.0.0.1", 0))
        s.listen()
        ray_backend.refuse_unreachable(f"127.0.0.1:{s.getsockname()[1]}")
