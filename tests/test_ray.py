"""lab/ray_backend.py: on a local Ray cluster (two CPUs, started here, listening on 127.0.0.1 alone) the lab's
runs and a reduced regime map are the same bytes as on local processes, forks wait for their donor's checkpoint,
and a worker killed mid-run is retried and resumes from its checkpoint to the same bytes.

Runs wherever the `ray` extra is installed (skipped otherwise). One cluster for the module: starting it costs
seconds (GCS, raylet, two workers that import torch)."""
from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
import signal
from pathlib import Path

import pytest

from conftest import LAB_LETTERS, SMALL, SMALL_K, assert_one_line_error, run_cli, small_config
from minitrain.lab import explore, runner, sweep
from minitrain.lab.parallel import run_lab
from minitrain.lab.ray_backend import RayCluster
from minitrain.run import reader
from minitrain.views import explore as explore_page
from minitrain.views import index

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (pip install 'minitrain[ray]')", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (starting one costs seconds); shut down at its end. Ray must not be
    imported before it: RayCluster sets the switch that keeps the cluster on 127.0.0.1 before Ray's import."""
    backend = RayCluster("local", jobs=2)
    yield backend
    backend.close()


def descendants(pid: int) -> set[int]:
    """This process's children, their children, ... (Ray's GCS, raylet, workers and agents)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass  # it ended meanwhile
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in out]
        out.update(kids)
        todo += kids
    return out


def listening_addresses(pids: set[int]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The local addresses of the listening TCP sockets these processes hold (what `ss -ltnp` shows)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[len("socket:["):-1])
        except OSError:
            pass
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                col = line.split()
                if col[3] == "0A" and col[9] in inodes:  # 0A: LISTEN
                    raw = bytes.fromhex(col[1].split(":")[0])  # 32-bit words in host (little-endian) order
                    out.append(ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads listening sockets from Linux's /proc")
def test_the_local_cluster_listens_on_the_loopback_alone(cluster):
    addresses = listening_addresses(descendants(os.getpid()) | {os.getpid()})
    assert len(addresses) >= 3, addresses  # GCS, raylet, the workers: the check saw Ray's sockets
    beyond = [a for a in addresses if not (a.is_loopback or getattr(a, "ipv4_mapped", None)
                                           and a.ipv4_mapped.is_loopback)]
    assert not beyond, beyond


def test_the_lab_on_ray_is_the_same_bytes_as_on_local_processes(cluster, small_lab, tmp_path):
    """small_lab (conftest) trained the baseline and the three injections at SMALL_K in this process."""
    with open(os.devnull, "w") as quiet:
        lines = run_lab(tmp_path, small_config().seed, SMALL_K, sets=list(SMALL), ray="local", out=quiet)
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
    job = runner.Job("run", call=sweep.train_one, args=(small_config().to_dict(), str(run), None), run=run)
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
    job = runner.Job("bad", call=sweep.train_one, args=({"steps": -1}, str(tmp_path / "bad"), None))
    done = runner.run_jobs([job], cluster, tick=0.01)
    assert done[0].failed and done[0].returncode == 2, (done[0].returncode, done[0].output)
    assert "steps" in done[0].error(), done[0].output


ONE_CELL = (explore.Slice((3e-4,), (8,), ("course",), (explore.scale(50),)),)
# when a run started and ended, how long it took, when its page was written (manifest, results, pages), its id
CLOCK = re.compile(rb'\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\+0000)?|"seconds_this_session": ?[0-9.e-]+'
                   rb'|"run_id": ?"[0-9a-f]+"')  # and the run's id (what a shared MLflow store knows it by)
# the same of the whole map (cells.json, the page)
TIMING = ("seconds", "cpu_seconds", "cold_cpu_seconds", "generated", "load_average", "history")


def test_explore_on_ray_gives_the_same_map_and_run_folders_as_local_processes(cluster, tmp_path, monkeypatch):
    """A reduced `explore --ray`: its two baselines and one cell (K 40, 30 steps after), both ways."""
    monkeypatch.setattr(explore, "K", 40)
    monkeypatch.setattr(explore, "TAIL", 30)
    monkeypatch.setitem(explore.GRIDS, "one", ONE_CELL)
    tiny = ["warmup_steps=10", "eval_every=20", "spectral_every=0", "val_max_rows=64"]
    maps = {how: explore.run_explore(tmp_path / how, "one", jobs=2, overrides=tiny, log=lambda line: None, ray=ray)
            for how, ray in (("local", None), ("ray", "local"))}
    ours, theirs = tmp_path / "ray", tmp_path / "local"
    runs = sorted(p.relative_to(theirs) for p in (theirs / "runs").rglob("*") if p.is_file())
    assert len([r for r in runs if r.name == "metrics.jsonl"]) == 3, runs
    assert runs == sorted(p.relative_to(ours) for p in (ours / "runs").rglob("*") if p.is_file())
    # every file of every run byte for byte once its clock readings are blanked, but the seconds each run took
    # (sweep.COST), the lock (the pid of the process that wrote the run) and the runs table's row cache (the
    # times of the files it was read from)
    differ = [r for r in runs if r.name not in (sweep.COST, ".lock", index.ROW_CACHE)
              and CLOCK.sub(b"#", (ours / r).read_bytes()) != CLOCK.sub(b"#", (theirs / r).read_bytes())]
    assert not differ, differ
    # the page and the doc: the same bytes once the timing fields are the local run's
    same = {**maps["ray"], **{k: maps["local"][k] for k in TIMING}}
    assert {k: v for k, v in same.items() if k not in TIMING} == {k: v for k, v in maps["local"].items() if k not in TIMING}
    explore_page.write(tmp_path / "redrawn", same)
    assert (tmp_path / "redrawn" / "index.html").read_bytes() == (theirs / "index.html").read_bytes()
    assert explore_page.regimes_md(same) == (theirs / "regimes.md").read_text()


def test_a_folder_taken_for_a_ray_address_is_one_line(tmp_path):
    proc = run_cli("explore", "--quick", "--ray", "experiments", cwd=tmp_path)
    assert_one_line_error(proc, "not a Ray address", "--ray=local")
    assert not (tmp_path / "experiments").exists()


def test_reproduce_and_the_lr_sweep_run_on_ray(cluster, small_lab, tmp_path, monkeypatch):
    """`--ray` on reproduce (both stages' replays on the cluster) and lr-sweep: the same answers as locally
    (tests/test_reproduce.py, tests/test_natural.py)."""
    import json
    import shutil

    from minitrain.lab import lrsweep, reproduce

    monkeypatch.setitem(reproduce.GRID, "scale", [{"injection_scale": v} for v in (20.0, 50.0, 100.0)])
    exp = shutil.copytree(small_lab, tmp_path / "experiments")
    proc = run_cli("reproduce", str(exp / "19-injection-A"), "--baseline", str(exp / "18-baseline"), "--spoil",
                   "--kinds", "scale,bad_batch", "--window", "10", "--json", "--ray", check=True)
    best = json.loads(proc.stdout)["ranked"][0]
    assert (best["kind"], best["step"], best["magnitude"], best["level"]) == \
        ("scale", SMALL_K, {"injection_scale": 50.0}, "exact")
    monkeypatch.setitem(lrsweep.GRIDS, "tiny", {"lrs": (1e-3, 1e-1), "sets": (
        "steps=4", "warmup_steps=2", "eval_every=5", "ckpt_every=5", "spectral_every=0")})
    monkeypatch.setattr(lrsweep, "VARIANTS", lrsweep.VARIANTS[:1])
    lines = []
    data = lrsweep.run_lrsweep(tmp_path / "lr-sweep", "tiny", log=lines.append, ray="local")
    assert data["trained"] == 2 and "on the Ray cluster local" in lines[0]
    assert all((tmp_path / "lr-sweep" / r["dashboard"]).exists() for r in data["runs"])


DRIVER = """
import sys
from minitrain.lab.ray_backend import RayCluster
cluster = RayCluster("local", jobs=1)
print("ready", flush=True)
sys.stdin.read()  # until the test kills this process
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from Linux's /proc")
def test_no_ray_process_outlives_a_killed_driver():
    """A driver SIGKILLed with its local cluster up: GCS and raylet end with it, and the watchdog kills the
    agents the raylet started (ray::DashboardAgent, ray::RuntimeEnvAgent), which would live on."""
    import subprocess
    import sys
    import time

    from minitrain.lab.ray_backend import process_tree

    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline().strip() == "ready"
        below = process_tree(driver.pid)
        assert len(below) >= 3, below  # GCS, raylet, the agents, the watchdog
    finally:
        driver.kill()
        driver.wait()

    def left() -> list[int]:
        out = []
        for pid, start in below.items():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if fields[19] == start and fields[0] != "Z":
                    out.append(pid)
            except OSError:
                pass
        return out

    for _ in range(600):  # the watchdog acts when the pipe closes; Ray's own processes take a moment to end
        if not left():
            break
        time.sleep(0.05)
    assert not left(), [Path(f"/proc/{p}/cmdline").read_bytes()[:60] for p in left()]
