"""DDP under torchrun (gloo on CPU), devices, bf16, presets and the corpus-size knob.

One torchrun launch (2 processes) runs the whole distributed side through the real CLI, `minitrain.cli.main`:
a 30-step baseline, the three injections at K=15 forked from it, and two refusals. The single-process
counterparts (batch 8 on one process) are trained in this process.

Tolerance: world size 2 with per-rank batch 4 sums the same numbers as one process with batch 8, in another
order (per-rank partial sums, then the all-reduce), so rows agree to float32 rounding, not bit for bit.
Stated bound over 30 steps: |loss difference| < 1e-5 and relative grad_norm difference < 1e-5
(measured on this machine: 9.5e-7 and 1.2e-7). Telemetry rounded to 5 significant digits: relative 1e-3.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import small_config
from minitrain import loop, trainer
from minitrain.lab.runs import train_run
from minitrain.run import files
from minitrain.core.config import PRESETS, TrainConfig, build_config
from minitrain.core.data import prepare
from minitrain.core.errors import UserError

STEPS, K = 30, 15
DDP_SET = [f"steps={STEPS}", "ckpt_every=10", "eval_every=10", "spectral_every=10", "warmup_steps=10",
           "progress=false", "ckpt_keep_last=0"]  # every checkpoint kept: the injections fork at K
INJECTIONS = ("scale", "bad_batch", "v_corrupt")
LOSS_TOL, NORM_TOL, TELEMETRY_TOL = 1e-5, 1e-5, 1e-3

# Runs on every rank under torchrun. Each rank records the exit codes it saw (a test-only file per rank).
DRIVER = '''
import json, os, sys
from minitrain.cli import main

exp, sets = sys.argv[1], sys.argv[2:]
common = [a for kv in sets for a in ("--set", kv)]
codes = {"base": main(["train", "--out", f"{exp}/base", *common])}
for inj in ("scale", "bad_batch", "v_corrupt"):
    codes[inj] = main(["train", "--out", f"{exp}/inj-{inj}", *common, "--injection", inj, "--injection-step", "%d"])
codes["existing_folder"] = main(["train", "--out", f"{exp}/base", *common])
codes["odd_batch"] = main(["train", "--out", f"{exp}/odd", *common, "--set", "batch_size=7"])
with open(f"{exp}/rank{os.environ['RANK']}.json", "w") as f:
    json.dump(codes, f)
''' % K


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_bytes().splitlines()]


def manifest(run) -> dict:
    return json.loads((run / "manifest.json").read_text())


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """(experiments folder, torchrun's stderr) after the 2-process driver ran."""
    exp = tmp_path_factory.mktemp("ddp")
    driver = exp / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(driver), str(exp), *DDP_SET], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exp, proc.stderr


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The same runs on one process with the global batch of 8 (injections fork from the baseline too)."""
    exp = tmp_path_factory.mktemp("single")
    train_run(build_config({}, DDP_SET), exp / "base")  # as `minitrain train` does: the run, then its page
    for inj in INJECTIONS:
        train_run(build_config({}, [*DDP_SET, f"injection={inj}", f"injection_step={K}"]), exp / f"inj-{inj}")
    return exp


def assert_rows_match(got: list[dict], want: list[dict]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(STEPS))
    for a, b in zip(got, want):
        s = a["step"]
        assert abs(a["loss"] - b["loss"]) < LOSS_TOL, (s, a["loss"], b["loss"])
        assert abs(a["grad_norm"] - b["grad_norm"]) < NORM_TOL * b["grad_norm"], (s, a["grad_norm"], b["grad_norm"])
        for key in ("loss_regular", "loss_irregular", "val_loss"):
            assert (a[key] is None) == (b[key] is None), (s, key)
            if b[key] is not None:
                assert abs(a[key] - b[key]) < LOSS_TOL, (s, key, a[key], b[key])
        assert a["lr"] == b["lr"] and a["clipped"] == b["clipped"] and a["injected"] == b["injected"]
        assert a["batch"] == b["batch"], s  # composition of the GLOBAL batch, exactly
        assert math.isclose(a["logit_max"], b["logit_max"], rel_tol=TELEMETRY_TOL), s
        for x, y in zip(a["act"], b["act"]):
            assert math.isclose(x, y, rel_tol=TELEMETRY_TOL), s
        for name, stats in b["params"].items():  # per-parameter g: the all-reduced (global) gradients
            assert math.isclose(a["params"][name]["g"], stats["g"], rel_tol=TELEMETRY_TOL, abs_tol=1e-9), (s, name)


def test_two_processes_of_batch_4_match_one_process_of_batch_8(ddp, single):
    exp, _ = ddp
    assert_rows_match(rows(exp / "base"), rows(single / "base"))
    m = manifest(exp / "base")
    assert m["status"] == "finished" and m["hardware"]["world_size"] == 2
    assert m["distributed"] == {"world_size": 2, "backend": "gloo", "replicas_agree": True}
    assert m["config_hash"] == manifest(single / "base")["config_hash"]  # the world size is not config


def test_rank_0_alone_writes_a_normal_run_folder(ddp, single):
    exp, _ = ddp
    listing = lambda run: sorted(str(p.relative_to(run)) for p in run.rglob("*"))  # noqa: E731
    assert listing(exp / "base") == listing(single / "base")
    weights, opt, _ = files.load_checkpoint(files.checkpoint_dir(exp / "base", STEPS))
    want, _, _ = files.load_checkpoint(files.checkpoint_dir(single / "base", STEPS))
    assert set(weights) == set(want) and not any("module." in n for n in [*weights, *opt])
    assert all(t.device.type == "cpu" for t in weights.values())


@pytest.mark.parametrize("injection", INJECTIONS)
def test_each_injection_fires_once_on_every_rank_at_k(ddp, single, injection):
    exp, _ = ddp
    run = exp / f"inj-{injection}"
    got = rows(run)
    assert [(r["step"], r["injected"]) for r in got if r["injected"]] == [(K, injection)]
    m = manifest(run)
    assert m["forked_from"] == {"run": "base", "checkpoint_step": 10}
    assert m["injection"]["record"]["step"] == K
    assert m["injection"]["record"]["fired_steps_by_rank"] == [[K], [K]]  # gathered from both ranks
    assert m["distributed"]["replicas_agree"]  # a rank that skipped it would have other weights
    assert_rows_match(got, rows(single / f"inj-{injection}"))  # same meaning as on one process
    if injection == "bad_batch":  # the global batch was replaced: every rank took its share of the copies
        assert got[K]["batch"]["dup_rows"] == 7 and got[K]["batch"]["rows"] == [-1] * 8
        assert m["injection"]["record"]["copies"] == 8


def test_a_refusal_on_rank_0_stops_every_rank_with_one_line(ddp):
    exp, stderr = ddp
    for r in (0, 1):
        codes = json.loads((exp / f"rank{r}.json").read_text())
        assert codes == {"base": 0, "scale": 0, "bad_batch": 0, "v_corrupt": 0,
                         "existing_folder": 2, "odd_batch": 2}, (r, codes)
    assert stderr.count("already holds a run") == 1
    assert stderr.count("does not split over 2 processes") == 1
    assert not (exp / "odd").exists()


def test_a_two_process_run_resumes_on_one_process(ddp, tmp_path):
    """The state a kill right after the step-20 checkpoint leaves (checkpoints up to 20, rows past it, status
    running), resumed by one process with batch 8: it finishes, every step once, close to the 2-process run."""
    exp, _ = ddp
    out = tmp_path / "resumed"
    shutil.copytree(exp / "base", out)
    for step in files.list_checkpoints(out):
        if step > 20:
            shutil.rmtree(files.checkpoint_dir(out, step))
    (out / "results.json").unlink()
    files.atomic_write_json(out / "manifest.json", {**manifest(out), "status": "running"})
    res = trainer.resume(out)
    assert res["status"] == "finished" and res["steps_done"] == STEPS
    whole, resumed = rows(exp / "base"), rows(out)
    assert [r["step"] for r in resumed] == list(range(STEPS))
    cut = (exp / "base" / "metrics.jsonl").read_bytes().splitlines()[:20]
    assert (out / "metrics.jsonl").read_bytes().splitlines()[:20] == cut  # rows before the checkpoint kept
    for a, b in zip(resumed[20:], whole[20:]):
        assert abs(a["loss"] - b["loss"]) < LOSS_TOL, a["step"]
        assert abs(a["grad_norm"] - b["grad_norm"]) < NORM_TOL * b["grad_norm"], a["step"]
    m = manifest(out)
    assert m["status"] == "finished" and m["resumed_from_step"] == 20
    assert m["hardware"]["world_size"] == 1 and m["distributed"] is None


# --- devices and precision -------------------------------------------------------------------------


def test_bf16_is_refused_on_cpu():
    with pytest.raises(UserError, match="bf16"):
        build_config({}, ["precision=bf16"])  # device=cpu
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="needs a CUDA device"):
            loop.build_run(small_config("device=auto", "precision=bf16"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_device_cuda_without_a_gpu_is_a_user_error():
    with pytest.raises(UserError, match="no CUDA GPU"):
        loop.build_run(small_config("device=cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision,tol", [("fp32", 1e-3), ("bf16", 0.1)])
def test_short_cuda_run_tracks_the_cpu_run(tmp_path, precision, tol):
    sets = ["steps=20", "ckpt_every=10", "eval_every=10", "warmup_steps=5"]
    trainer.train(small_config(*sets), tmp_path / "cpu")
    trainer.train(small_config(*sets, "device=cuda", f"precision={precision}"), tmp_path / "gpu")
    got, want = rows(tmp_path / "gpu"), rows(tmp_path / "cpu")
    assert [r["step"] for r in got] == list(range(20))
    for a, b in zip(got, want):
        assert abs(a["loss"] - b["loss"]) < tol, (a["step"], a["loss"], b["loss"])
    assert manifest(tmp_path / "gpu")["hardware"]["device"].startswith("cuda")
    # its checkpoints are CPU tensors: the same run continues on the CPU
    shutil.rmtree(files.checkpoint_dir(tmp_path / "gpu", 20))
    files.atomic_write_json(tmp_path / "gpu" / "manifest.json",
                               {**manifest(tmp_path / "gpu"), "status": "running"})
    if precision == "bf16":  # bf16 stays a GPU option: continue it on the GPU
        assert trainer.resume(tmp_path / "gpu")["status"] == "finished"
    else:
        assert trainer.resume(tmp_path / "gpu", device="cpu")["status"] == "finished"


# --- presets and the corpus-size knob --------------------------------------------------------------


def test_presets_set_defaults_that_explicit_fields_override():
    assert build_config({}, ["preset=course"]).to_dict() == {**TrainConfig().to_dict(), "preset": "course"}
    big = build_config({}, ["preset=gpt2-small-shaped"])
    assert (big.n_layer, big.d_model, big.n_head, big.d_ff, big.corpus_scale) == (12, 768, 12, 3072, 8)
    assert build_config({"n_layer": 2}, ["preset=gpt2-small-shaped"]).n_layer == 2  # the YAML value wins
    assert build_config({}, ["preset=medium", "batch_size=4"]).batch_size == 4
    assert set(PRESETS) >= {"course", "gpt2-small-shaped"}
    with pytest.raises(UserError, match="unknown preset"):
        build_config({}, ["preset=gpt9"])


def test_new_fields_at_their_defaults_keep_every_config_hash():
    """precision, corpus_scale and preset were added later: old runs keep their hashes (resumable, up to date)."""
    sets = ["steps=60", "ckpt_every=20", "eval_every=20", "spectral_every=20", "warmup_steps=10", "progress=false",
            "injection_step=30"]
    assert build_config({}, sets).hash() == "6503dc3569c97163"  # its hash before these fields existed
    assert build_config({}, [*sets, "preset=course", "device=auto"]).hash() == "6503dc3569c97163"
    assert build_config({}, [*sets, "corpus_scale=2"]).hash() != "6503dc3569c97163"


def test_default_corpus_is_unchanged_and_scale_widens_it():
    from minitrain.core import corpus

    assert corpus.data_manifest(corpus.generate(42), [], [], 42, ["walk"])["rows"] == 2320
    assert prepare(build_config({}, [])).manifest["hash"] == "87ef29acf62f1086"  # the data hash before the knob
    wide = corpus.generate(42, scale=2)
    assert len(wide) > 4000 and len({r.fingerprint for r in wide}) == len(wide)
    assert corpus.find_sentence("She has written the letter.") is not None
