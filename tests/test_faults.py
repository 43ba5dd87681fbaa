"""Faults and bad input (issue 11): nothing is lost, every refusal is one line with exit code 2, a run that
diverges stops with exit code 3 and keeps everything so far. docs/reliability.md lists each fault with the
test below that proves what the project promises for it.

The numbered comments (# 1. .. # 11.) follow the issue's numbered cases; the rest are faults found on the way.
Small runs (tests/conftest.py SMALL); the few tests that need a real process (SIGKILL, a second writer)
start `python -m minitrain` as a subprocess and never wait on the clock: they poll the run's files.
"""
from __future__ import annotations

import errno
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SMALL_K, ForkedCLI, assert_one_line_error, run_cli, small_args, small_config
from minitrain import loop, trainer
from minitrain.core.config import build_config
from minitrain.core.errors import EXIT_NON_FINITE, UserError
from minitrain.lab import learner
from minitrain.run import files, provenance, reader
from minitrain.run.files import atomic

K = SMALL_K  # the small lab's injection step (conftest.small_lab)


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones included) by relative path: 'untouched' means equal snapshots."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def without_lock_holder(snap: dict[str, bytes]) -> dict[str, bytes]:
    """A snapshot less the lock file's content: a refused command takes the lock (writing its own pid there) before
    it reads the run and refuses; which pid the copied lock named depends on which test process built the run."""
    return {k: v for k, v in snap.items() if Path(k).name != ".lock"}


def strict(text: str | bytes):
    """json.loads that fails on NaN / Infinity tokens (not JSON; a browser's JSON.parse rejects them)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def assert_strict_json_everywhere(run: Path) -> None:
    for p in Path(run).rglob("*.json"):
        strict(p.read_text())
    if (Path(run) / "metrics.jsonl").exists():
        for line in (Path(run) / "metrics.jsonl").read_text().splitlines():
            strict(line)


def copy_run(src: Path, dst: Path, status: str | None = None) -> Path:
    """A copy of a run folder to damage; `status` rewrites its manifest's status (e.g. 'running': killed)."""
    shutil.copytree(src, dst)
    if status:
        m = json.loads((dst / "manifest.json").read_text())
        m["status"] = status
        (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def flip_byte(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def results_without_timing(run: Path) -> dict:
    res = json.loads((run / "results.json").read_text())
    res.pop("seconds_this_session")
    return res


def temporaries(run: Path) -> list[str]:
    return [p.name for p in Path(run).rglob(".*") if p.name != reader.LOCK_NAME]


@pytest.fixture()
def exp(tmp_path, small_baseline) -> Path:
    """A private experiments folder holding a copy of the small baseline (18-baseline) to fork from or damage."""
    e = tmp_path / "exp"
    e.mkdir()
    copy_run(small_baseline, e / "18-baseline")
    return e


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process that holds RUN's lock (as a live `train` does) until it is killed."""
    code = ("import sys, time; from pathlib import Path; from minitrain.run import files; "
            "files.lock_run(Path(sys.argv[1])); print('locked', flush=True); time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.stdout.readline().strip() == "locked"
    return proc


def start_train(out: Path, *args: str) -> ForkedCLI:
    return ForkedCLI("train", "--out", str(out), *args)


def rows_written(run: Path) -> int:
    try:
        return (Path(run) / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return -1


# ---------------------------------------------------------------------------------------------------
# 1. --force replaces only a minitrain run, never the current folder, a parent, or a git repository
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    {"thesis.tex": b"chapter one\n"},
    {"metrics.jsonl": b'{"step":0}\n', "notes.txt": b"mine\n"},  # looks like a run, is not one
    {"manifest.json": b'{"title": "my data set"}\n'},  # a manifest, but not minitrain's
])
def test_force_refuses_a_folder_that_is_not_a_run(tmp_path, content):
    d = tmp_path / "mine"
    d.mkdir()
    for name, data in content.items():
        (d / name).write_bytes(data)
    before = snapshot(d)
    for force in ([], ["--force"]):
        proc = run_cli("train", "--out", str(d), *force, *small_args("steps=5"))
        assert_one_line_error(proc, "not a minitrain run", "choose another --out")
        assert snapshot(d) == before


def test_force_refuses_the_current_folder_and_its_parents(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run")
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--out", ".", "--force", *small_args("steps=5"), cwd=run),
                          "current folder or one of its parents")
    assert_one_line_error(run_cli("train", "--out", "..", "--force", *small_args("steps=5"), cwd=run / "checkpoints"),
                          "current folder or one of its parents")
    assert snapshot(run) == before


def test_force_refuses_a_folder_holding_a_git_repository(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run")
    (run / "notes" / ".git").mkdir(parents=True)
    (run / "notes" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--out", str(run), "--force", *small_args("steps=5")),
                          "is a git repository")
    assert snapshot(run) == before


def test_force_replaces_a_run_and_a_folder_killed_at_birth_needs_no_force(tmp_path):
    run = tmp_path / "run"
    run_cli("train", "--out", str(run), *small_args("steps=6"), check=True)
    run_cli("train", "--out", str(run), "--force", *small_args("steps=4"), check=True)
    assert rows_written(run) == 4 and (run / reader.LOCK_NAME).exists()
    # a run killed right after it took its lock (nothing else written yet) is trained again without --force
    born = tmp_path / "born"
    born.mkdir()
    files.lock_run(born).release()
    run_cli("train", "--out", str(born), *small_args("steps=4"), check=True)
    assert rows_written(born) == 4


# ---------------------------------------------------------------------------------------------------
# 2. One writer per run folder: an flock held for the whole run, released by the OS when the process dies
# ---------------------------------------------------------------------------------------------------


def test_a_live_run_refuses_every_writer_and_readers_say_it_is_live(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "exp" / "run", status="running")
    holder = hold_lock(run)
    try:
        run_cli("diagnose", str(run), check=True)  # readers first: they may write their own page
        proc = run_cli("dashboard", str(run), "--no-baseline")
        assert proc.returncode == 0 and f"is live (process {holder.pid} is training it)" in proc.stderr
        before = snapshot(run)
        pid = f"process {holder.pid} is writing it"
        assert_one_line_error(run_cli("train", "--resume", str(run)), "is live", pid)
        assert_one_line_error(run_cli("train", "--out", str(run), *small_args()), "is live", pid)
        assert_one_line_error(run_cli("train", "--out", str(run), "--force", *small_args()), "is live", pid)
        assert_one_line_error(run_cli("remediate", str(run)), "is live", pid)
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()
    # the OS released the lock with the process: the run is no longer live and resumes
    assert reader.live_pid(run) is None
    run_cli("train", "--resume", str(run), check=True)
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


def test_a_child_forked_by_the_writer_does_not_keep_its_run_live(tmp_path):
    """A writer that forks a long-lived child while it holds the lock (the lab's forked runs, a DataLoader's
    workers) is SIGKILLed: the lock dies with the writer, not with the child, and --resume may take it."""
    run = tmp_path / "run"
    run.mkdir()
    # the child says so once its fork handler has run, so the test never races the child's first steps
    code = ("import os, sys, time; from pathlib import Path; from minitrain.run import files; "
            "files.lock_run(Path(sys.argv[1])); pid = os.fork()\n"
            "if pid == 0: print('child', os.getpid(), flush=True); time.sleep(3600); os._exit(0)\n"
            "time.sleep(3600)")
    writer = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    child = int(writer.stdout.readline().split()[1])
    try:
        assert reader.live_pid(run) == str(writer.pid)
        writer.kill()
        writer.wait()
        assert reader.live_pid(run) is None  # the child lives on, without the lock
        files.lock_run(run).release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_writer_starts_no_subprocess_while_it_holds_its_lock(tmp_path, monkeypatch):
    """A child started by subprocess shares the writer's descriptors until it execs: killed in that window,
    the writer would leave its run locked. The run's subprocess (git, for the manifest) runs before the lock."""
    run, again, held = tmp_path / "run", tmp_path / "again", []
    real = subprocess.run

    def spy(*args, **kwargs):
        held.extend(reader.live_pid(r) for r in (run, again))  # None: no lock file, or nobody holds it
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    provenance.process_environment.cache_clear()  # as in a fresh process: uname and git run during this train
    trainer.train(small_config("steps=2"), run)
    trainer.resume(copy_run(run, again, status="running"))
    assert held and held == [None] * len(held)


def test_a_second_train_on_a_really_live_run_is_refused_and_no_step_is_duplicated(tmp_path, small_baseline):
    run = tmp_path / "live"
    proc = start_train(run, *small_args())
    try:
        while proc.poll() is None and rows_written(run) < 5:
            time.sleep(0.005)
        # stopped, it holds its lock but cannot finish while the second writer (a new interpreter) starts
        os.kill(proc.pid, signal.SIGSTOP)
        assert proc.poll() is None, "the run ended before the second writer could try"
        assert_one_line_error(run_cli("train", "--resume", str(run)), "is live", f"process {proc.pid}")
    finally:
        proc.kill()  # SIGKILL ends a stopped process too
        proc.wait()
    run_cli("train", "--resume", str(run), check=True)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(120))
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


def test_removing_a_live_run_is_refused(tmp_path, small_baseline):
    """What `blind-runs --force` does to each old run before a new draw: refused while one is live."""
    run = copy_run(small_baseline, tmp_path / "01")
    holder = hold_lock(run)
    try:
        before = snapshot(run)
        with pytest.raises(UserError, match=f"is live: process {holder.pid}"):
            files.remove_run_dir(run)
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()
    files.remove_run_dir(run)
    assert not run.exists()


# ---------------------------------------------------------------------------------------------------
# 3. Non-finite values anywhere stop the run cleanly at that step (exit 3), even at a spectral-norm step
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, stop, what", [
    (["init_scale=1e6"], 0, "gradient norm"),  # step 0 is a spectral-norm step
    (["injection=scale", "injection_step=40", "injection_scale=1e308"], 40, "gradient norm"),  # K=40: spectral
    (["injection=v_corrupt", "injection_step=30", "injection_factor=1e308"], 30, "Adam's v of lm_head.bias"),
])
def test_divergence_stops_cleanly_and_keeps_everything(tmp_path, overrides, stop, what):
    run = tmp_path / "diverged"
    proc = run_cli("train", "--out", str(run), "--no-fork", *small_args(*overrides))
    assert proc.returncode == EXIT_NON_FINITE, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"stopped at step {stop}: non-finite {what}" in proc.stdout
    rows = [strict(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(stop + 1))  # up to and including the step
    res, manifest = strict((run / "results.json").read_text()), strict((run / "manifest.json").read_text())
    assert res["status"] == manifest["status"] == "non_finite"
    assert res["first_nonfinite_step"] == stop and manifest["non_finite"] == {"step": stop, "what": what}
    assert (run / "dashboard.html").exists()
    assert_strict_json_everywhere(run)
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--resume", str(run)), f"stopped at step {stop}", "will not continue")
    assert snapshot(run) == before


def test_non_finite_in_any_signal_is_named():
    base = {"loss": 1.0, "grad_norm": 1.0, "logit_max": 2.0, "act": [1.0], "sigma": {"a": 1.0},
            "params": {"w": {"g": 1.0, "u": 1.0, "vx": 1.0}}}
    assert loop.non_finite_in(base) is None
    cases = {"loss": "loss", "grad_norm": "gradient norm", "logit_max": "logits"}
    for key, what in cases.items():
        assert loop.non_finite_in({**base, key: None}) == what
    assert loop.non_finite_in({**base, "act": [1.0, None]}) == "activations"
    assert loop.non_finite_in({**base, "sigma": {"a": None}}) == "spectral norm of a"
    assert loop.non_finite_in({**base, "params": {"w": {"g": 1.0, "u": None}}}) == "weights (update) of w"
    assert loop.non_finite_in({**base, "params": {"w": {"vx": None}}}) == "Adam's v of w"


def test_non_finite_weights_are_caught_before_a_checkpoint_is_written():
    run = loop.build_run(small_config())
    assert loop.non_finite_weights(run.model) is None
    name, p = list(run.model.named_parameters())[-1]
    p.data[0] = math.inf
    assert loop.non_finite_weights(run.model) == f"weights of {name}"


# ---------------------------------------------------------------------------------------------------
# 4. Killed after the final checkpoint, before results.json: the resume writes the same results
# ---------------------------------------------------------------------------------------------------


def test_killed_after_the_final_checkpoint_resumes_to_the_same_results(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    (run / "results.json").unlink()
    proc = run_cli("train", "--resume", str(run))
    assert proc.returncode == 0 and "finished 120 steps" in proc.stdout, proc.stdout + proc.stderr
    assert results_without_timing(run) == results_without_timing(small_baseline)
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------------------
# 5. A fork verifies its donor: checksums, config, and rows complete and unchanged up to K
# ---------------------------------------------------------------------------------------------------


def _truncate_lines(path: Path, n: int) -> None:
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:n]))


def _edit_a_digit(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[10] = lines[10].replace(b'"step":10', b'"step":19')  # same length, other content
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize("damage, needles", [
    (lambda b: _truncate_lines(b / "metrics.jsonl", 50), ["18-baseline/metrics.jsonl", "truncated", "--no-fork"]),
    (lambda b: _edit_a_digit(b / "metrics.jsonl"), ["18-baseline/metrics.jsonl", "edited", "--no-fork"]),
    (lambda b: flip_byte(files.checkpoint_dir(b, K) / "model.safetensors"),
     ["step-000060/model.safetensors", "sha256"]),
    (lambda b: flip_byte(files.checkpoint_dir(b, K) / "optimizer.safetensors"),
     ["step-000060/optimizer.safetensors", "sha256"]),
], ids=["metrics-truncated", "metrics-edited", "model-byte-flipped", "optimizer-byte-flipped"])
def test_a_fork_refuses_a_damaged_donor_and_touches_nothing(exp, damage, needles):
    donor = exp / "18-baseline"
    damage(donor)
    before = snapshot(donor)
    out = exp / "19-injection-A"
    proc = run_cli("train", "--out", str(out), *small_args("injection=scale", f"injection_step={K}"))
    assert_one_line_error(proc, *needles)
    assert not out.exists() and snapshot(donor) == before
    if "--no-fork" in needles:  # --no-fork trains it from step 0, as the message says
        run_cli("train", "--out", str(out), "--no-fork", *small_args("injection=scale", f"injection_step={K}"),
                check=True)
        assert json.loads((out / "manifest.json").read_text())["forked_from"] is None


def test_a_fork_refuses_a_donor_checkpoint_of_another_config(exp):
    donor = exp / "18-baseline"
    meta = files.checkpoint_dir(donor, K) / "manifest.json"
    m = json.loads(meta.read_text())
    m["trunk_hash"] = "0123456789abcdef"  # the run's manifest says one config, its checkpoint another
    meta.write_text(json.dumps(m))
    proc = run_cli("train", "--out", str(exp / "inj"), *small_args("injection=scale", f"injection_step={K}"))
    assert_one_line_error(proc, "step-000060", "another config", "--no-fork")


# ---------------------------------------------------------------------------------------------------
# 6. A flipped byte in a checkpoint is refused on resume, naming the file
# ---------------------------------------------------------------------------------------------------


def test_a_flipped_byte_in_a_checkpoint_is_refused_then_the_one_before_resumes(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    (run / "results.json").unlink()
    flip_byte(files.checkpoint_dir(run, 120) / "model.safetensors")
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--resume", str(run)), "step-000120/model.safetensors", "sha256",
                          "delete")
    assert without_lock_holder(snapshot(run)) == without_lock_holder(before)
    shutil.rmtree(files.checkpoint_dir(run, 120))  # what the message says to do
    run_cli("train", "--resume", str(run), check=True)
    assert snapshot(run / "checkpoints") == snapshot(small_baseline / "checkpoints")
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


def test_checkpoints_record_the_sha256_of_each_file_and_of_the_rows_before_them(small_baseline):
    import hashlib

    path = files.checkpoint_dir(small_baseline, 60)
    meta = json.loads((path / "manifest.json").read_text())
    for name in ("model.safetensors", "optimizer.safetensors"):
        assert meta["sha256"][name] == hashlib.sha256((path / name).read_bytes()).hexdigest()
    rows = (small_baseline / "metrics.jsonl").read_bytes()[:meta["metrics_bytes"]]
    assert meta["metrics_sha256"] == hashlib.sha256(rows).hexdigest() and rows.count(b"\n") == 60


def test_an_edited_metrics_file_is_refused_on_resume(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    _edit_a_digit(run / "metrics.jsonl")
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--resume", str(run)), "metrics.jsonl", "edited")
    assert without_lock_holder(snapshot(run)) == without_lock_holder(before)


# ---------------------------------------------------------------------------------------------------
# 7. Strict JSON in every file: a non-finite value is null plus a flag; readers take old files' tokens
# ---------------------------------------------------------------------------------------------------


def test_strict_json_writes_null_and_flags_where():
    text = files.strict_json({"a": 1.0, "b": {"c": math.inf}, "d": [0.5, math.nan]}, sort_keys=True)
    obj = strict(text)
    assert obj["b"]["c"] is None and obj["d"] == [0.5, None]
    assert obj["non_finite_values"] == {"b.c": "inf", "d[1]": "nan"}
    assert strict(files.dumps_row({"step": 3, "x": -math.inf}))["non_finite_values"] == {"x": "-inf"}


def test_an_infinite_injection_factor_writes_strict_json_and_a_dashboard(tmp_path):
    run = tmp_path / "inf"
    proc = run_cli("train", "--out", str(run), *small_args("injection=v_corrupt", "injection_step=30",
                                                             "injection_factor=1e308"))
    assert proc.returncode == EXIT_NON_FINITE and "Traceback" not in proc.stderr, proc.stderr
    assert "warning" not in proc.stderr  # the dashboard was written
    manifest = strict((run / "manifest.json").read_text())
    assert manifest["injection"]["record"]["v_mean_after"] is None
    assert manifest["non_finite_values"] == {"injection.record.v_mean_after": "inf"}
    assert_strict_json_everywhere(run)
    proc = run_cli("dashboard", str(run))
    assert proc.returncode == 0 and (run / "dashboard.html").exists(), proc.stderr


def test_readers_take_the_infinity_token_of_files_written_before_strict_json(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "old")
    text = (run / "manifest.json").read_text().replace('"status": "finished"', '"legacy": Infinity, "status": "finished"')
    (run / "manifest.json").write_text(text)
    assert reader.read_json(run / "manifest.json", "manifest")["legacy"] is None
    run_cli("dashboard", str(run), check=True)


# ---------------------------------------------------------------------------------------------------
# 8. Bad input: one line, exit code 2, nothing created; resource bounds before any work
# ---------------------------------------------------------------------------------------------------


def _bad_config_file(tmp_path: Path, kind: str) -> list[str]:
    if kind == "folder":
        (tmp_path / "cfgdir").mkdir()
        return ["--config", str(tmp_path / "cfgdir")]
    f = tmp_path / "c.yaml"
    f.write_bytes({"latin1": "steps: 40\nnote: caf\xe9\n".encode("latin-1"),
                   "int_key": b"steps: 40\n1: 2\n",
                   "list": b"- steps\n- 40\n",
                   "missing": None}[kind] or b"")
    if kind == "missing":
        f.unlink()
    return ["--config", str(f)]


@pytest.mark.parametrize("kind, needle", [
    ("folder", "is a folder"),
    ("latin1", "not UTF-8"),
    ("int_key", "not a field name"),
    ("list", "must hold a mapping"),
    ("missing", "not found"),
])
def test_a_bad_config_file_is_one_line(tmp_path, kind, needle):
    out = tmp_path / "run"
    assert_one_line_error(run_cli("train", "--out", str(out), *_bad_config_file(tmp_path, kind)), needle)
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--seed", "99999999999999999999999"], "seed must be an integer from 0 to 4294967295"),
    (["--seed", "-1"], "seed must be an integer from 0"),
    (["--set", "corpus_seed=4294967296"], "corpus_seed must be an integer from 0"),
    (["--set", "threads=100000"], "threads must be positive and at most 256"),
    (["--set", "batch_size=1e8"], "batch_size' expects int"),
    (["--set", "batch_size=100000000"], "batch_size must be positive and at most 65536"),
    (["--set", "steps=1000000000000"], "steps must be positive and at most 10000000"),
    (["--set", "steps=" + "9" * 5000], "steps' expects int"),
    (["--set", "context=100000"], "context must be at least 8 and at most 8192"),
    (["--set", "corpus_scale=1000"], "corpus_scale must be positive and at most 64"),
    (["--set", "n_layer=128", "--set", "d_model=4096", "--set", "n_head=32"], "parameters, more than the 1000M"),
    (["--set", "ckpt_keep_last=-1"], "ckpt_keep_last must be >= 0"),
    (["--set", "ckpt_keep_steps=500,x"], "ckpt_keep_steps' expects list[int]"),
])
def test_resource_bounds_and_bad_numbers_are_one_line_before_any_work(tmp_path, args, needle):
    out = tmp_path / "run"
    assert_one_line_error(run_cli("train", "--out", str(out), *args), needle)
    assert not out.exists()


def test_an_unwritable_out_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert_one_line_error(run_cli("train", "--out", str(blocker / "run"), *small_args("steps=3")), "cannot write")
    assert_one_line_error(run_cli("train", "--out", str(blocker), *small_args("steps=3")), "not a folder")
    assert_one_line_error(run_cli("train", "--out", "/proc/minitrain-run", *small_args("steps=3")), "cannot write")
    assert blocker.read_text() == "x"


def _fail_with_enospc_at(monkeypatch, target, name: str, nth: int, partial: bool = False):
    """Make `target.name` raise ENOSPC on its nth call (after writing half its bytes when `partial`)."""
    real, calls = getattr(target, name), {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == nth:
            if partial:  # a metrics row cut in the middle, as a full disk leaves it
                writer, row = args
                data = files.dumps_row(row).encode()
                writer.f.write(data[: len(data) // 2])
                writer.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, flaky)


@pytest.mark.parametrize("where", ["metrics row", "checkpoint file"])
def test_a_full_disk_is_one_line_and_the_run_resumes_to_the_same_bytes(tmp_path, small_baseline, monkeypatch, where):
    run = tmp_path / "run"
    if where == "metrics row":
        _fail_with_enospc_at(monkeypatch, files.MetricsWriter, "write", 75, partial=True)
    else:
        _fail_with_enospc_at(monkeypatch, atomic, "write_synced", 7)  # 3 files per checkpoint: inside the third
    assert_one_line_error(run_cli("train", "--out", str(run), *small_args()), "disk full",
                          f"resume it with 'minitrain train --resume {run}'")
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # no half checkpoint
    monkeypatch.undo()
    run_cli("train", "--resume", str(run), check=True)
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


def test_a_seal_file_missing_keys_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli("learner", "init", "ana", check=True)
    d = tmp_path / "learners" / "ana" / "phase-19"
    text = "anything"
    (d / "spike-diagnoses.seal.json").write_text(json.dumps({"sha256": learner.sha256_text(text), "text": text}))
    for command in ("grade", "reveal", "check"):
        assert_one_line_error(run_cli(command, "ana"), "spike-diagnoses.seal.json is damaged",
                              "missing lab, file, sealed_at")


# ---------------------------------------------------------------------------------------------------
# 9. The justfile passes every argument on as one word, never as shell code
# ---------------------------------------------------------------------------------------------------


def _just() -> str:
    just = shutil.which("just", path=str(Path(sys.executable).parent)) or shutil.which("just")
    if just is None:
        pytest.skip("just is not installed")
    return just


@pytest.mark.parametrize("recipe", [["learner"], ["grade"], ["diagnose"], ["postmortem"], ["remediate"],
                                    ["run-break"], ["phase-19-train", "--experiments"]], ids=lambda r: r[0])
def test_just_quotes_every_argument(tmp_path, recipe):
    evil = "zed; touch PWNED; echo $(touch PWNED2) `touch PWNED3`"
    p = subprocess.run([_just(), "--justfile", str(ROOT / "justfile"), "--working-directory", str(tmp_path),
                        *recipe, evil], capture_output=True, text=True,
                       env={**os.environ, "injection": "bogus"})
    assert p.returncode != 0
    assert not [f for f in tmp_path.iterdir() if f.name.startswith("PWNED")]
    if recipe[0] not in ("run-break", "phase-19-train"):
        assert "zed; touch PWNED" in p.stderr, p.stderr  # it reached minitrain as one argument


# ---------------------------------------------------------------------------------------------------
# 10. Reveal history: each reveal is logged; a seal made after a reveal is flagged by grade and check
# ---------------------------------------------------------------------------------------------------


@pytest.fixture()
def lab(small_lab, tmp_path):
    """This test's own experiments/ with 18-baseline and 19-injection-A/B/C at K (a reveal marks its lab
    revealed): a copy of conftest.small_lab."""
    return shutil.copytree(small_lab, tmp_path / "experiments")


def test_reveal_history_flags_a_reseal_after_the_reveal(lab, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exp = ["--experiments", str(lab)]
    run_cli("learner", "init", "zoe", check=True)
    d = tmp_path / "learners" / "zoe" / "phase-19"
    run_cli("reveal", "zoe", "--force", *exp, check=True)  # sealed empty, solutions shown
    first_seal = json.loads((d / "spike-diagnoses.seal.json").read_text())
    proc = run_cli("grade", "zoe", *exp)
    assert "reveals logged: 1" in proc.stdout and "RE-SEALED" not in proc.stdout
    # the cheat: delete the seal, write the answers just seen, reveal again
    (d / "spike-diagnoses.seal.json").unlink()
    (d / "spike-diagnoses.md").write_text((d / "spike-diagnoses.md").read_text() + "\n<!-- edited -->\n")
    proc = run_cli("reveal", "zoe", "--force", *exp)
    assert proc.returncode == 0 and "RE-SEALED AFTER A REVEAL" in proc.stdout
    proc = run_cli("grade", "zoe", *exp)
    assert "reveals logged: 2" in proc.stdout and "RE-SEALED AFTER A REVEAL" in proc.stdout
    assert first_seal["sha256"][:16] in proc.stdout
    grade = json.loads((d / "grade-spike.json").read_text())
    assert grade["reveals"] == 2 and any("RE-SEALED" in f for f in grade["flags"])
    proc = run_cli("check", "zoe", *exp)
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "sealed before the reveal" in x)
    assert line.startswith("[FAIL]") and "RE-SEALED AFTER A REVEAL" in line
    history = [json.loads(x) for x in (d / learner.HISTORY_NAME).read_text().splitlines()]
    assert [h["new_seal"] for h in history] == [True, True] and history[1]["prev"] is not None


def test_reveal_history_deleted_or_edited_is_flagged_even_with_every_learner_trace_gone(lab, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exp = ["--experiments", str(lab)]
    run_cli("learner", "init", "max", check=True)
    d = tmp_path / "learners" / "max" / "phase-19"
    run_cli("reveal", "max", "--force", *exp, check=True)
    run_cli("reveal", "max", "--force", *exp, check=True)
    hist = d / learner.HISTORY_NAME
    lines = hist.read_text().splitlines()
    hist.write_text(lines[1] + "\n")  # the first line removed: the chain breaks
    assert "was edited" in run_cli("grade", "max", *exp).stdout
    hist.unlink()  # deleted: the seal still says it was revealed
    assert "the history was deleted" in run_cli("grade", "max", *exp).stdout
    # every trace in the learner's folder deleted: the lab's own REVEALED.json still dates the first reveal
    for name in ("spike-diagnoses.seal.json", "reveal-spike.md", "grade-spike.json"):
        (d / name).unlink()
    run_cli("reveal", "max", "--force", *exp, check=True)
    out = run_cli("grade", "max", *exp).stdout
    assert "REVEALED.json says the lab was revealed at" in out and "this seal was made at" in out


# ---------------------------------------------------------------------------------------------------
# 11. Retention: the checkpoints a fork or a remedy needs and the last few; temp folders cleaned on resume
# ---------------------------------------------------------------------------------------------------


def test_retention_policy_of_the_default_lab():
    cfg = build_config({}, [])
    every = list(range(100, 2001, 100))
    assert files.checkpoints_to_keep(every, cfg, ended=True) == {400, 500, 2000}  # fork at 500, ZClip from 400
    assert files.checkpoints_to_keep(every[:12], cfg, ended=False) == {400, 500, 1100, 1200}  # last 2 while running
    forked = list(range(600, 2001, 100))  # an injection run forked from the baseline at 500
    assert files.checkpoints_to_keep(forked, cfg, ended=True) == {2000}
    assert files.checkpoints_to_keep(every, build_config({}, ["ckpt_keep_last=0"]), ended=True) == set(every)
    odd = build_config({}, ["ckpt_keep_steps=[250, 1000]", "ckpt_keep_last=3"])
    assert files.checkpoints_to_keep(every, odd, ended=False) == {200, 900, 1000, 1800, 1900, 2000}


def test_retention_on_a_real_run_keeps_the_fork_point(tmp_path):
    exp = tmp_path / "exp"
    keep = ["ckpt_keep_last=2", "ckpt_keep_steps=60"]
    run_cli("train", "--out", str(exp / "base"), *small_args(*keep), check=True)
    assert files.list_checkpoints(exp / "base") == [20, 60, 120]  # 60: fork point, 20: ZClip's start (<= 35)
    run_cli("train", "--out", str(exp / "inj"), *small_args(*keep, "injection=scale", "injection_step=60"), check=True)
    assert json.loads((exp / "inj" / "manifest.json").read_text())["forked_from"] == {"run": "base",
                                                                                      "checkpoint_step": 60}
    assert files.list_checkpoints(exp / "inj") == [120]


def test_temporary_checkpoint_folders_and_files_are_cleaned_on_resume(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    (run / "results.json").unlink()
    tmp_ckpt = run / "checkpoints" / ".step-000140.k2j3h4"
    tmp_ckpt.mkdir()
    (tmp_ckpt / "model.safetensors").write_bytes(b"half")
    (run / ".manifest.json.abc123.tmp").write_text("{")
    run_cli("train", "--resume", str(run), check=True)
    assert temporaries(run) == []
    assert snapshot(run / "checkpoints") == snapshot(small_baseline / "checkpoints")


# ---------------------------------------------------------------------------------------------------
# Resume at any point: a randomized SIGKILL test, and the states a kill can leave
# ---------------------------------------------------------------------------------------------------


def test_resume_of_a_run_killed_before_its_manifest(tmp_path, small_baseline):
    run = tmp_path / "run"
    run.mkdir()
    files.lock_run(run).release()
    shutil.copy(small_baseline / "config.yaml", run / "config.yaml")
    run_cli("train", "--resume", str(run), check=True)
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()
    assert json.loads((run / "manifest.json").read_text())["status"] == "finished"


KILL_SEED = 1  # the SIGKILL test's draws unless MINITRAIN_KILL_SEED says otherwise


def test_sigkill_at_random_points_of_an_injection_run_resumes_to_the_same_bytes(exp):
    """Kill a forked injection run (scale at K) at random points: while it copies the donor's rows, between
    checkpoints, inside a checkpoint's temp folder, after the last row. Resume each (or re-train one killed
    before it wrote its config) and compare with an uninterrupted run: metrics, results (timing aside) and
    every checkpoint file, byte for byte. The kill points come from a fixed seed (the same draws every run);
    MINITRAIN_KILL_SEED=N replays seed N, MINITRAIN_KILL_SEED=random draws a fresh one (printed)."""
    args = small_args("injection=scale", f"injection_step={K}")
    ref = exp / "ref"
    run_cli("train", "--out", str(ref), *args, check=True)
    asked = os.environ.get("MINITRAIN_KILL_SEED", str(KILL_SEED))
    seed = random.SystemRandom().randrange(10**6) if asked == "random" else int(asked)
    print(f"MINITRAIN_KILL_SEED={seed}")
    rng = random.Random(seed)
    # where to kill: once its config is written (fork setup), twice after a random number of its own rows,
    # once after its last row (final checkpoint, results, dashboard); each after a random extra delay
    phases = [("config", 0, 0.05), ("rows", rng.randint(61, 119), 0.1), ("rows", rng.randint(61, 119), 0.1),
              ("rows", 120, 0.6)]
    for i, (phase, target, spread) in enumerate(phases):
        out = exp / f"killed-{i}"
        delay = rng.uniform(0, spread)
        proc = start_train(out, *args)
        while proc.poll() is None and (rows_written(out) < target if phase == "rows" else not (out / "config.yaml").exists()):
            time.sleep(0.002)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left = sorted(p.name for p in out.rglob("*")) if out.exists() else []
        note = f"seed {seed}, kill {i}: {phase} {target} + {delay:.3f} s, exit {proc.returncode}, " \
               f"{rows_written(out)} rows, {len(left)} paths"
        print(note)
        status = reader.manifest_of(out).get("status")
        if proc.returncode == 0 or status == "finished":  # it ended before the kill (or had just ended)
            pass
        elif (out / "config.yaml").exists():
            run_cli("train", "--resume", str(out), check=True)
        else:  # killed before it wrote anything but its lock: train it again (no --force needed)
            run_cli("train", "--out", str(out), *args, check=True)
        assert (out / "metrics.jsonl").read_bytes() == (ref / "metrics.jsonl").read_bytes(), note
        assert results_without_timing(out) == results_without_timing(ref), note
        assert snapshot(out / "checkpoints") == snapshot(ref / "checkpoints"), note
        assert temporaries(out) == [], note


def test_no_recipe_interpolates_an_argument_unquoted():
    """Every recipe passes its arguments on as "$@" or {{quote(x)}}: no bare {{x}} reaches the shell."""
    text = (Path(__file__).resolve().parents[1] / "justfile").read_text()
    bare = [line.strip() for line in text.splitlines() if re.search(r"\{\{(?!\s*quote\()", line)]
    assert not bare, bare


@pytest.mark.parametrize("damage", [{"run": "../elsewhere", "checkpoint_step": 60}, {"run": "18-baseline",
                                    "checkpoint_step": "sixty"}, {"run": ["18-baseline"], "checkpoint_step": 60},
                                    {"run": "18-baseline", "checkpoint_step": -20}],
                         ids=["path", "word", "list", "negative"])
def test_a_damaged_fork_origin_is_one_line_on_resume(tmp_path, small_baseline, damage):
    """A fork killed before its first own checkpoint resumes from the donor its manifest records: a record
    minitrain never writes is refused in one line, nothing read through it and nothing written."""
    exp = tmp_path / "exp"
    shutil.copytree(small_baseline, exp / "18-baseline")
    run = exp / "inj"
    res = trainer.train(small_config("injection=scale", f"injection_step={K}"), run, stop_at=K + 1)
    assert res["status"] == "stopped" and not files.list_checkpoints(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["forked_from"]["checkpoint_step"] == K
    manifest["forked_from"] = damage
    (run / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(run)
    assert_one_line_error(run_cli("train", "--resume", str(run)), "damaged fork origin", "--force")
    assert snapshot(run) == before
