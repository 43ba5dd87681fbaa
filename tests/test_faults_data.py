"""Faults that lose or corrupt a run's data, and the messages around a finished run (docs/reliability.md,
"Data kept: forks, locks, partial writes, --force"). Each test reproduces one fault first, then checks the
fix: a resumed fork re-verifies its donor; the run lock never follows a link; tokenizer.json is written
atomically and a damaged one is refused; --force replaces only what minitrain wrote; a finished run without
its page is not "up to date"; a killed remediation continues; Ctrl-C while a page is written says what to run.
"""
from __future__ import annotations

import errno
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import SMALL_K, assert_one_line_error, run_cli, small_args, small_config
from conftest import fingerprint as snapshot
from minitrain import loop, trainer
from minitrain.lab import parallel, runner
from minitrain.core.errors import UserError
from minitrain.run import files, reader
from minitrain.run.files import atomic
from minitrain.views import dashboard
from test_faults import copy_run

K = SMALL_K


def killed_after_its_last_row(src: Path, dst: Path) -> Path:
    """A copy of a finished run as a kill after its last row leaves it: status running, no results, no page."""
    run = copy_run(src, dst, status="running")
    for name in ("results.json", "dashboard.html"):
        (run / name).unlink(missing_ok=True)
    return run


# ---------------------------------------------------------------------------------------------------
# A resumed fork re-verifies its donor
# ---------------------------------------------------------------------------------------------------


FORK_K = 20  # the small baseline's first checkpoint: the cheapest fork to re-make a donor for


def test_a_resumed_fork_refuses_a_donor_remade_with_another_config(tmp_path, small_baseline):
    exp = tmp_path / "exp"
    copy_run(small_baseline, exp / "18-baseline")
    out = exp / "19-injection-A"
    # forked at K, stopped one step later: no checkpoint of its own, so a resume forks from the donor again
    trainer.train(small_config("injection=scale", f"injection_step={FORK_K}"), out, stop_at=FORK_K + 1)
    assert reader.manifest_of(out)["forked_from"]["checkpoint_step"] == FORK_K
    assert files.list_checkpoints(out) == []
    # the donor is re-made with another learning rate (it holds a checkpoint at K again)
    trainer.train(small_config("lr_max=0.001"), exp / "18-baseline", force=True, stop_at=FORK_K)
    before = snapshot(out)
    proc = run_cli("train", "--resume", str(out))
    assert_one_line_error(proc, "18-baseline", "changed since", f"--config {out / 'config.yaml'} --force")
    assert snapshot(out) == before


def test_a_resumed_fork_records_and_checks_its_donor_checksums(tmp_path, small_baseline):
    exp = tmp_path / "exp"
    copy_run(small_baseline, exp / "18-baseline")
    out = exp / "19-injection-A"
    trainer.train(small_config("injection=scale", f"injection_step={FORK_K}"), out, stop_at=FORK_K + 1)
    ckpt = json.loads((files.checkpoint_dir(exp / "18-baseline", FORK_K) / "manifest.json").read_text())
    donor = reader.manifest_of(out)["forked_from_checksums"]
    assert donor["sha256"] == ckpt["sha256"] and donor["metrics_sha256"] == ckpt["metrics_sha256"]
    assert donor["trunk_hash"] == ckpt["trunk_hash"]
    # a donor checkpoint whose files verify but are not the ones this run forked from (another checkpoint's)
    d = files.checkpoint_dir(exp / "18-baseline", FORK_K)
    other = files.checkpoint_dir(exp / "18-baseline", FORK_K + 20)
    for name in ("model.safetensors", "optimizer.safetensors"):
        shutil.copy(other / name, d / name)
    meta = json.loads((d / "manifest.json").read_text())
    meta["sha256"] = json.loads((other / "manifest.json").read_text())["sha256"]
    (d / "manifest.json").write_text(json.dumps(meta))
    assert_one_line_error(run_cli("train", "--resume", str(out)), "changed since", "model.safetensors")


# ---------------------------------------------------------------------------------------------------
# The run lock never follows a link; nothing outside the run folder is written
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["symlink", "hardlink", "foreign-file"])
@pytest.mark.parametrize("command", ["resume", "force"])
def test_a_lock_that_is_not_ours_is_refused_and_the_victim_keeps_its_bytes(tmp_path, small_baseline, how, command):
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    (run / "results.json").unlink()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the user's thesis\n")
    lock = run / reader.LOCK_NAME
    lock.unlink()
    if how == "symlink":
        lock.symlink_to(Path("..") / "victim.txt")
    elif how == "hardlink":
        os.link(victim, lock)
    else:
        lock.write_bytes(b"someone else's file\n")
    args = ["--resume", str(run)] if command == "resume" else ["--out", str(run), "--force", *small_args("steps=3")]
    proc = run_cli("train", *args)
    assert_one_line_error(proc, str(lock), "not minitrain's lock")
    assert victim.read_bytes() == b"the user's thesis\n"
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


@pytest.mark.parametrize("name", ["metrics.jsonl", "checkpoints"])
def test_a_linked_metrics_file_or_checkpoints_folder_is_refused(tmp_path, small_baseline, name):
    """A received run folder whose metrics.jsonl (or checkpoints/) links outside it: a resume would truncate
    or prune the target. Refused before anything is written."""
    run = copy_run(small_baseline, tmp_path / "run", status="running")
    (run / "results.json").unlink()
    outside = tmp_path / f"outside-{name}"
    os.replace(run / name, outside)
    (run / name).symlink_to(outside)
    before = snapshot(outside) if outside.is_dir() else outside.read_bytes()
    assert_one_line_error(run_cli("train", "--resume", str(run)), str(run / name), "link")
    assert (snapshot(outside) if outside.is_dir() else outside.read_bytes()) == before


# ---------------------------------------------------------------------------------------------------
# tokenizer.json: written atomically, rewritten by a resume, refused when damaged
# ---------------------------------------------------------------------------------------------------


def test_a_full_disk_while_writing_the_tokenizer_leaves_no_half_file_and_resume_writes_it(tmp_path, monkeypatch):
    real = atomic.write_synced
    cut = {}

    def disk_full_in_the_tokenizer(path, data):
        if "tokenizer.json" in Path(path).name:  # half its bytes reach the disk, then the disk is full
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            cut["size"] = len(data)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(atomic, "write_synced", disk_full_in_the_tokenizer)
    run = tmp_path / "run"
    assert_one_line_error(run_cli("train", "--out", str(run), *small_args("steps=3")), "disk full")
    assert cut, "tokenizer.json was not written through atomic.write_synced (not atomically)"
    assert not (run / "tokenizer.json").exists() and not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()
    run_cli("train", "--resume", str(run), check=True)
    tok, _ = reader.tokenizer_of(run)
    assert len((run / "tokenizer.json").read_bytes()) == cut["size"] and tok["model"]["vocab"]


def test_the_tokenizer_file_is_the_tokenizers_own_bytes(tmp_path, small_baseline):
    from minitrain.core.data import prepare

    data = prepare(small_config())
    out = tmp_path / "tok.json"
    data.tokenizer.save(str(out))
    assert (small_baseline / "tokenizer.json").read_bytes() == out.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "not-a-tokenizer"])
def test_a_damaged_tokenizer_is_refused_in_one_line_not_assumed(tmp_path, small_baseline, damage):
    run = copy_run(small_baseline, tmp_path / "run")
    path = run / "tokenizer.json"
    path.write_bytes(path.read_bytes()[:5000] if damage == "truncated" else b'{"model": 3}')
    proc = run_cli("diagnose", str(run))
    assert_one_line_error(proc, "tokenizer.json", "damaged")


# ---------------------------------------------------------------------------------------------------
# --force replaces only what minitrain wrote
# ---------------------------------------------------------------------------------------------------


def test_force_names_the_files_minitrain_did_not_write_and_keeps_them(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "run")
    (run / "postmortem.md").write_text("# my post-mortem, edited by hand\n")
    (run / "notes.txt").write_text("what I saw at step 60\n")
    (run / "checkpoints" / "mine.txt").write_text("a note among the checkpoints\n")
    before = snapshot(run)
    proc = run_cli("train", "--out", str(run), "--force", *small_args("steps=3"))
    assert_one_line_error(proc, "minitrain did not write", "notes.txt", "postmortem.md", "checkpoints/mine.txt",
                          "move them out")
    assert snapshot(run) == before
    # moved out, --force replaces the run
    for name in ("postmortem.md", "notes.txt", "checkpoints/mine.txt"):
        os.replace(run / name, tmp_path / Path(name).name)
    run_cli("train", "--out", str(run), "--force", *small_args("steps=3"), check=True)
    assert reader.manifest_of(run)["config"]["steps"] == 3


def test_every_file_of_a_finished_run_is_minitrains(small_baseline):
    assert files.foreign_files(small_baseline) == []
    assert {p.name for p in small_baseline.iterdir()} <= files.RUN_FILES


def test_the_lab_with_force_names_foreign_files_before_anything_runs(tmp_path, small_lab):
    exp = tmp_path / "exp"  # the lab at K = 60 names its injection runs 19-injection-X-k60
    shutil.copytree(small_lab / "18-baseline", exp / "18-baseline")
    shutil.copytree(small_lab / "19-injection-B", exp / "19-injection-B-k60")
    (exp / "19-injection-B-k60" / "postmortem.md").write_text("mine\n")
    before = snapshot(exp)
    proc = run_cli("lab", "--experiments", str(exp), "--injection-step", str(K), "--force", *small_args())
    assert_one_line_error(proc, "19-injection-B-k60", "postmortem.md", "minitrain did not write")
    assert snapshot(exp) == before


def test_a_new_blind_draw_does_not_delete_foreign_files(tmp_path, small_baseline):
    run = copy_run(small_baseline, tmp_path / "01")
    (run / "notes.txt").write_text("mine\n")
    with pytest.raises(UserError, match="notes.txt"):
        files.remove_run_dir(run)
    assert (run / "notes.txt").read_text() == "mine\n"


# ---------------------------------------------------------------------------------------------------
# A finished run without its page is not "up to date"; a child's warning reaches the user
# ---------------------------------------------------------------------------------------------------


def test_a_finished_lab_run_without_its_page_is_not_up_to_date(tmp_path, small_baseline, monkeypatch):
    exp = tmp_path / "exp"
    run = copy_run(small_baseline, exp / "18-baseline", status="running")
    (run / "results.json").unlink()
    (run / "dashboard.html").unlink()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dashboard, "write_dashboard", disk_full)  # a full disk when the run ends
    proc = run_cli("lab-run", "--experiments", str(exp), *small_args())
    assert proc.returncode == 0 and "warning: dashboard.html not written" in proc.stderr, proc.stderr
    assert not (run / "dashboard.html").exists()
    monkeypatch.undo()
    proc = run_cli("lab-run", "--experiments", str(exp), *small_args())
    assert proc.returncode == 0 and (run / "dashboard.html").exists(), proc.stdout + proc.stderr
    assert "wrote its missing dashboard.html" in proc.stdout
    proc = run_cli("lab-run", "--experiments", str(exp), *small_args())
    assert "up to date" in proc.stdout and "missing" not in proc.stdout


class OneLog:
    """A backend whose every job ends at once with the given output lines (no process)."""

    slots = 4

    def __init__(self, lines):
        self.lines = lines

    def start(self, job):
        lines = [f"{job.name}: finished 120 steps", *self.lines(job)]
        return type("Ended", (), {"poll": lambda s: 0, "wait": lambda s: 0, "terminate": lambda s: None,
                                  "finish": lambda s: (lines, None)})()

    def close(self):
        pass


def test_a_lab_childs_warning_reaches_the_user(tmp_path, monkeypatch):
    def warning(job):
        return ([f"minitrain: warning: dashboard.html not written (OSError: disk full); retry with "
                 f"'minitrain dashboard {job.run}'"] if job.name.startswith("19-injection-A") else [])

    monkeypatch.setattr(runner, "LocalProcesses", lambda *a, **k: OneLog(warning))
    err = io.StringIO()
    lines = parallel.run_lab(tmp_path / "exp", seed=42, k=K, sets=small_args()[1::2], out=err)
    assert len(lines) == 4
    assert "minitrain: warning: dashboard.html not written" in err.getvalue()
    assert "19-injection-A" in err.getvalue()


# ---------------------------------------------------------------------------------------------------
# A killed remediation continues; train --resume of one says how to finish it
# ---------------------------------------------------------------------------------------------------


def test_a_killed_remediation_continues_and_writes_its_report(tmp_path, small_lab, monkeypatch):
    exp = tmp_path / "exp"
    for name in ("18-baseline", "19-injection-B"):
        shutil.copytree(small_lab / name, exp / name)
    (exp / "REVEALED.json").write_text('{"revealed_at": "2000-01-01T00:00:00.000000Z", "revealed_by": "t"}')
    original = exp / "19-injection-B"
    out = exp / "19-injection-B-remediated"
    real = loop.train_step

    def killed_at_100(run, step):
        if step == 100:
            raise KeyboardInterrupt
        return real(run, step)

    monkeypatch.setattr(loop, "train_step", killed_at_100)
    proc = run_cli("remediate", str(original), "--baseline", str(exp / "18-baseline"))
    assert proc.returncode == 130 and "--resume" not in proc.stderr, proc.stderr
    assert f"minitrain remediate {original}" in proc.stderr
    assert not (out / "remediation.json").exists() and files.list_checkpoints(out)[-1] == 100
    monkeypatch.undo()
    # the same command again continues it from its checkpoint at 100
    proc = run_cli("remediate", str(original), "--baseline", str(exp / "18-baseline"))
    assert proc.returncode == 0, proc.stderr
    assert reader.manifest_of(out)["resumed_from_step"] == 100
    report = json.loads((out / "remediation.json").read_text())
    assert report["status"] == "finished" and report["remedy"] == "skip_batch"
    # killed again after its last row (report not written): train --resume finishes the rows and says how
    # to write the report, and remediate writes it from the finished run without training again
    (out / "remediation.json").unlink()
    m = json.loads((out / "manifest.json").read_text())
    m["status"] = "running"
    (out / "manifest.json").write_text(json.dumps(m))
    (out / "results.json").unlink()
    proc = run_cli("train", "--resume", str(out))
    assert proc.returncode == 0 and f"minitrain remediate {original}" in proc.stderr, proc.stderr
    assert "remediation.json" in proc.stderr
    rows = (out / "metrics.jsonl").read_bytes()
    proc = run_cli("remediate", str(original), "--baseline", str(exp / "18-baseline"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "remediation.json").read_text())["verdict"] == report["verdict"]
    assert (out / "metrics.jsonl").read_bytes() == rows


def test_a_remediation_of_another_remedy_is_not_replaced_without_force(tmp_path, small_lab):
    exp = tmp_path / "exp"
    for name in ("18-baseline", "19-injection-B"):
        shutil.copytree(small_lab / name, exp / name)
    (exp / "REVEALED.json").write_text('{"revealed_at": "2000-01-01T00:00:00.000000Z", "revealed_by": "t"}')
    out = copy_run(small_lab / "18-baseline", exp / "19-injection-B-remediated")
    before = snapshot(out)
    proc = run_cli("remediate", str(exp / "19-injection-B"))
    assert_one_line_error(proc, "another config", "--force")
    assert "--resume" not in proc.stderr and snapshot(out) == before


# ---------------------------------------------------------------------------------------------------
# Ctrl-C while a finished run writes its page
# ---------------------------------------------------------------------------------------------------


def test_ctrl_c_while_a_finished_run_writes_its_page_says_to_run_dashboard(tmp_path, small_baseline, monkeypatch):
    run = killed_after_its_last_row(small_baseline, tmp_path / "run")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dashboard, "write_dashboard", interrupted)
    proc = run_cli("train", "--resume", str(run))
    assert proc.returncode == 130
    assert "--resume" not in proc.stderr and f"minitrain dashboard {run}" in proc.stderr, proc.stderr
    assert reader.manifest_of(run)["status"] == "finished"
    monkeypatch.undo()
    run_cli("dashboard", str(run), check=True)  # what the message says
    assert (run / "dashboard.html").exists()
