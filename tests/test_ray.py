"""lab/ray_backend.py: on a local Ray cluster (two CPUs, started here) the lab's runs are
the same bytes as on local processes, forks wait for their donor's checkpoint, and a worker killed mid-run is
retried and resumes from its checkpoint to the same bytes.

Opt-in (MINITRAIN_RAY_TESTS=1, with the `ray` extra installed): a local Ray 2.60 cluster listens on every
interface of the machine, not on 127.0.0.1 alone (docs/scale.md), and this project's servers bind to the
loopback only; so the suite does not start one unless asked to."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import LAB_LETTERS, SMALL, SMALL_K, assert_one_line_error, run_cli, small_config
from minitrain.lab import explore, runner
from minitrain.lab.parallel import run_lab
from minitrain.run import reader

if os.environ.get("MINITRAIN_RAY_TESTS") != "1":
    pytest.skip("a local Ray cluster listens beyond 127.0.0.1: opt in with MINITRAIN_RAY_TESTS=1",
                allow_module_level=True)
ray = pytest.importorskip("ray")
from minitrain.lab.ray_backend import RayCluster  # noqa: E402 - needs ray

WAIT = 300  # seconds a test waits for something that takes a few on an idle machine


def wait_for(what, seconds: float = WAIT):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.01)
    return None


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (starting one costs seconds); shut down at its end."""
    backend = RayCluster("local", jobs=2)
    yield backend
    ray.shutdown()


def test_the_lab_on_ray_is_the_same_bytes_as_on_local_processes(cluster, small_lab, tmp_path):
    """small_lab (conftest) trained the baseline and the three injections at SMALL_K in this process."""
    from minitrain import cli

    with open(os.devnull, "w") as quiet:
        lines = run_lab(tmp_path, small_config().seed, SMALL_K, sets=list(SMALL), main=cli.main, ray="local",
                        out=quiet)
    assert len(lines) == 4, lines
    for name in ("18-baseline", *(f"19-injection-{c}-k{SMALL_K}" for c in LAB_LETTERS.values())):
        ours = tmp_path / name / "metrics.jsonl"
        theirs = small_lab / name.removesuffix(f"-k{SMALL_K}") / "metrics.jsonl"
        assert ours.read_bytes() == theirs.read_bytes(), name
    for c in LAB_LETTERS.values():  # each injection run forked from the baseline's checkpoint at K
        forked = reader.manifest_of(tmp_path / f"19-injection-{c}-k{SMALL_K}").get("forked_from") or {}
        assert forked == {"run": "18-baseline", "checkpoint_step": SMALL_K}, (c, forked)


def test_a_killed_worker_is_retried_and_resumes_to_the_same_bytes(cluster, small_baseline, tmp_path):
    run = tmp_path / "run"
    job = runner.Job("run", call=explore.train_one, args=(small_config().to_dict(), str(run), None), run=run)
    killed = []

    def on_tick(jobs, final):  # once past the first checkpoint (step 20), kill the worker writing the run
        if not killed and not final and (reader.last_step(run) or 0) >= 25:
            pid = reader.live_pid(run)
            if pid is not None:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))

    done = runner.run_jobs([job], cluster, on_tick=on_tick, tick=0.01)
    assert killed, "the run ended before the test could kill its worker"
    assert done[0].returncode == 0, done[0].output
    manifest = reader.manifest_of(run)
    assert manifest["status"] == "finished"
    assert manifest.get("resumed_from_step", 0) >= 20, manifest  # resumed from a checkpoint, not from scratch
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


def test_a_job_that_fails_on_ray_is_one_line_and_its_exit_code(cluster, tmp_path):
    job = runner.Job("bad", call=explore.train_one, args=({"steps": -1}, str(tmp_path / "bad"), None))
    done = runner.run_jobs([job], cluster, tick=0.01)
    assert done[0].failed and done[0].returncode == 2, (done[0].returncode, done[0].output)
    assert "steps" in done[0].error(), done[0].output


def test_a_folder_taken_for_a_ray_address_is_one_line(tmp_path):
    proc = run_cli("explore", "--quick", "--ray", "experiments", cwd=tmp_path)
    assert_one_line_error(proc, "not a Ray address", "--ray=local")
    assert not (tmp_path / "experiments").exists()
