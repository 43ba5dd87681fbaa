import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ForkedCLI, assert_one_line_error, run_cli, small_args, small_config
from minitrain import loop, trainer
from minitrain.run import reader


def metrics_bytes(run_dir) -> bytes:
    return (run_dir / "metrics.jsonl").read_bytes()


def test_run_starts_like_an_untrained_model(small_baseline):
    rows = [json.loads(line) for line in metrics_bytes(small_baseline).splitlines()]
    assert abs(rows[0]["loss"] - math.log(512)) < 0.5
    assert 0.1 <= rows[1]["grad_norm"] <= 10
    assert [r["step"] for r in rows] == list(range(120))
    assert rows[0]["val_loss"] is not None and rows[1]["val_loss"] is None
    assert all(r["injected"] is None for r in rows)


def test_run_folder_contents(small_baseline):
    m = json.loads((small_baseline / "manifest.json").read_text())
    for key in ("seed", "versions", "config", "config_hash", "git_sha", "data_manifest_hash", "hardware",
                "started", "ended", "schema_version", "ngram_baseline"):
        assert key in m, key
    assert m["status"] == "finished"
    res = json.loads((small_baseline / "results.json").read_text())
    assert res["final_val_loss"] is not None and res["ngram_val_loss"] > 0
    ckpts = sorted(p.name for p in (small_baseline / "checkpoints").iterdir())
    assert ckpts == [f"step-{s:06d}" for s in (20, 40, 60, 80, 100, 120)]
    assert (small_baseline / "tokenizer.json").exists() and (small_baseline / "config.yaml").exists()


def test_same_seed_same_bytes_other_seed_differs(tmp_path, small_baseline):
    trainer.train(small_config(), tmp_path / "again")
    assert metrics_bytes(tmp_path / "again") == metrics_bytes(small_baseline)
    trainer.train(small_config("seed=7"), tmp_path / "seed7")
    assert metrics_bytes(tmp_path / "seed7") != metrics_bytes(small_baseline)


def test_existing_run_folder_is_refused_unless_force(small_baseline, tmp_path):
    before = metrics_bytes(small_baseline)
    proc = run_cli("train", "--out", str(small_baseline), *small_args())
    assert_one_line_error(proc, "already holds a run", "--force")
    assert metrics_bytes(small_baseline) == before
    target = tmp_path / "forced"
    run_cli("train", "--out", str(target), *small_args("steps=10"), check=True)
    run_cli("train", "--out", str(target), "--force", *small_args("steps=12"), check=True)
    assert len(metrics_bytes(target).splitlines()) == 12


def test_kill_and_resume_gives_identical_bytes(tmp_path, small_baseline):
    """A real SIGKILL in the middle of the run, then --resume: the metrics file is byte-identical."""
    out = tmp_path / "killed"
    proc = ForkedCLI("train", "--out", str(out), *small_args())
    metrics = out / "metrics.jsonl"
    while proc.poll() is None:  # kill once it is past two checkpoints, wherever it is in a step
        if metrics.exists() and metrics.read_bytes().count(b"\n") >= 50:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    run_cli("train", "--resume", str(out), check=True)
    assert metrics_bytes(out) == metrics_bytes(small_baseline)
    assert json.loads((out / "manifest.json").read_text())["status"] == "finished"


def test_resume_of_a_finished_run_is_refused(small_baseline):
    assert_one_line_error(run_cli("train", "--resume", str(small_baseline)), "already ended")


def test_corrupt_or_truncated_checkpoint_on_resume(tmp_path):
    out = tmp_path / "run"
    trainer.train(small_config("steps=60"), out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["status"] = "running"  # pretend it was killed after its last checkpoint
    (out / "manifest.json").write_text(json.dumps(manifest))
    before = metrics_bytes(out)
    weights = out / "checkpoints" / "step-000060" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # truncated
    proc = run_cli("train", "--resume", str(out))
    assert_one_line_error(proc, "step-000060", "corrupt or truncated", "delete")
    assert metrics_bytes(out) == before
    weights.write_bytes(b"\x00" * 64)  # garbage
    assert_one_line_error(run_cli("train", "--resume", str(out)), "step-000060")
    (out / "checkpoints" / "step-000060" / "manifest.json").write_text("{not json")
    assert_one_line_error(run_cli("train", "--resume", str(out)), "manifest")
    assert metrics_bytes(out) == before


def test_lr_schedule_warmup_then_cosine():
    cfg = small_config("steps=200", "warmup_steps=20", "lr_max=1e-3", "lr_min=1e-4")
    lrs = [loop.lr_at(s, cfg) for s in range(200)]
    assert lrs[0] == pytest.approx(1e-3 / 20) and lrs[19] == pytest.approx(1e-3)
    assert lrs[199] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[19:], lrs[20:]))


def test_weight_decay_on_matrices_only():
    run = loop.build_run(small_config())
    decayed = {id(p) for p in run.opt.param_groups[0]["params"]}
    for name, p in run.model.named_parameters():
        assert (id(p) in decayed) == (p.dim() >= 2), name
    assert run.opt.param_groups[0]["weight_decay"] == 0.1 and run.opt.param_groups[1]["weight_decay"] == 0.0


@pytest.mark.slow
def test_the_default_run_beats_the_ngram_baseline_at_step_500_of_its_schedule(tmp_path):
    """The default run on its full 2000-step schedule, validated on the default 256 rows every 100 steps, is
    clearly below the n-gram baseline (by 0.5 nat) at step 500: seed 42 measures 3.42 against 4.12 there (it
    ends near 3.16). The run stops right after that validation. The lab's full 2000-step runs are recorded by
    hash in docs/architecture.md ("Reference outputs")."""
    res = trainer.train(small_config("steps=2000", "ckpt_every=1000", "eval_every=100", "warmup_steps=100",
                                  "spectral_every=50", "val_max_rows=256"), tmp_path / "full", stop_at=501)
    assert res["status"] == "stopped" and res["steps_done"] == 501
    rows, _ = reader.read_metrics(tmp_path / "full" / "metrics.jsonl")
    step, val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None][-1]
    assert step == 500 and val < res["ngram_val_loss"] - 0.5, (step, val, res)


def test_stop_at_ends_early_on_the_full_schedule_and_resume_finishes_it(tmp_path, small_baseline):
    """`stop_at` (minitrain explore) keeps the schedule of cfg.steps, ends with status 'stopped', and a resume
    finishes the run with the bytes of an uninterrupted one."""
    out = tmp_path / "stopped"
    res = trainer.train(small_config(), out, stop_at=60)
    assert res["status"] == "stopped" and res["steps_done"] == 60
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 59 and rows[-1]["lr"] == loop.lr_at(59, small_config())
    assert trainer.resume(out)["status"] == "finished"
    assert metrics_bytes(out) == metrics_bytes(small_baseline)


def test_clip_with_telemetrys_norms_equals_torchs_clip_bit_for_bit():
    import torch

    g = torch.Generator().manual_seed(3)
    for scale in (0.01, 1.0, 100.0):  # below, around and far above the clip
        a = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in ((64, 64), (512,), (3, 7))]
        b = [torch.nn.Parameter(p.detach().clone()) for p in a]
        c = [torch.nn.Parameter(p.detach().clone()) for p in a]
        for p, q, r in zip(a, b, c):
            p.grad = torch.randn(p.shape, generator=g) * scale
            q.grad, r.grad = p.grad.clone(), p.grad.clone()
        total_a = torch.nn.utils.clip_grad_norm_(a, 1.0)
        total_b = loop.clip_grad_norm([q.grad for q in b], 1.0, list(torch._foreach_norm([q.grad for q in b])))
        total_c = loop.clip_grad_norm([r.grad for r in c], 1.0)  # taking the norms itself
        assert torch.equal(total_a, total_b) and torch.equal(total_a, total_c)
        assert all(torch.equal(p.grad, q.grad) and torch.equal(p.grad, r.grad) for p, q, r in zip(a, b, c))
