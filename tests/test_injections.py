import json
import shutil

import pytest
import torch

from conftest import LAB_LETTERS, SMALL_K, assert_one_line_error, run_cli, small_args, small_config
from minitrain import loop, trainer
from minitrain.core.injections import REGISTRY, maybe_inject

K = SMALL_K


def rows(run_dir):
    return (run_dir / "metrics.jsonl").read_bytes().splitlines()


@pytest.fixture(scope="module")
def lab(small_lab):
    """The three lab injections at K, forked from the small baseline (conftest.small_lab): {injection: run}."""
    return {name: small_lab / f"19-injection-{letter}" for name, letter in LAB_LETTERS.items()}


def test_registry_has_the_lab_injections_and_the_faults_at_their_points():
    assert {n: (i.point, i.lasts) for n, i in REGISTRY.items()} == {
        "scale": ("grads", "step"), "bad_batch": ("batch", "step"), "v_corrupt": ("optimizer_state", "step"),
        "lr_spike": ("lr", "span"), "corrupt_batch": ("batch", "step"), "stuck_loader": ("batch", "span"),
        "target_leak": ("batch", "span"), "adam_setting": ("optimizer_state", "rest"),
        "no_zero_grad": ("grads", "rest"), "frozen_params": ("step", "rest"), "step_noop": ("step", "rest"),
        "loss_sum": ("loss", "rest"), "rank_desync": ("loss", "rest")}


def test_hook_is_a_no_op_by_default():
    cfg = small_config()
    sentinel = object()
    for point in ("batch", "grads", "optimizer_state"):
        assert maybe_inject(point, K, sentinel, None) is sentinel
    run = loop.build_run(cfg)
    assert run.inject is None  # injection: none builds no injection context at all


def test_rows_before_k_are_the_baselines_bytes(lab, small_baseline):
    base = rows(small_baseline)
    for name, run_dir in lab.items():
        r = rows(run_dir)
        assert r[:K] == base[:K], name
        assert json.loads(r[K])["injected"] == name
        assert all(json.loads(x)["injected"] is None for x in r[K + 1:])
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": K}
        assert manifest["injection"]["record"]["step"] == K


def test_fork_is_byte_identical_to_a_run_from_scratch(lab, tmp_path):
    scratch = tmp_path / "scratch"
    trainer.train(small_config("injection=bad_batch", f"injection_step={K}"), scratch, fork=False)
    assert json.loads((scratch / "manifest.json").read_text())["forked_from"] is None
    assert rows(scratch) == rows(lab["bad_batch"])
    # a K between checkpoints forks from the checkpoint before it and recomputes the gap
    odd = tmp_path / "odd"
    (tmp_path / "18-baseline").symlink_to(lab["scale"].parent / "18-baseline")
    trainer.train(small_config("injection=scale", "injection_step=71"), odd)
    assert json.loads((odd / "manifest.json").read_text())["forked_from"]["checkpoint_step"] == 60
    trainer.train(small_config("injection=scale", "injection_step=71"), tmp_path / "odd-scratch", fork=False)
    assert rows(odd) == rows(tmp_path / "odd-scratch")


def test_scale_multiplies_the_pre_clip_norm_and_is_clipped(lab, small_baseline):
    base = json.loads(rows(small_baseline)[K])
    inj = json.loads(rows(lab["scale"])[K])
    assert inj["grad_norm"] == pytest.approx(50.0 * base["grad_norm"], rel=1e-5)
    assert inj["grad_norm_clipped"] == pytest.approx(1.0) and inj["clipped"]
    for name, p in inj["params"].items():
        assert p["g"] == pytest.approx(50.0 * base["params"][name]["g"], rel=1e-3), name
    record = json.loads((lab["scale"] / "manifest.json").read_text())["injection"]
    assert record["injection_scale"] == 50.0 and record["record"]["tensors"] == 15


def test_bad_batch_replaces_the_batch_with_copies(small_baseline):
    cfg = small_config("injection=bad_batch", f"injection_step={K}")
    run = loop.build_run(cfg)
    loop.run_steps(run, 0, stop_at=K + 1)
    batch = run.last_batch
    expected, info = run.data.sentence_batch("She has written the letter.", cfg.batch_size, cfg.context)
    assert torch.equal(batch.x, expected.x) and torch.equal(batch.y, expected.y)
    assert batch.rows == [-1] * cfg.batch_size
    assert all(torch.equal(batch.x[0], batch.x[i]) for i in range(cfg.batch_size))
    assert run.data.tokenizer.decode(info["token_ids"][1:-1]).endswith("en:She has written the letter.")
    loop.train_step(run, K + 1)  # only at K
    assert run.last_batch.rows != [-1] * cfg.batch_size


@pytest.mark.parametrize("factor", [100.0, 0.01])
def test_v_corrupt_scales_one_second_moment_only(factor):
    cfg = small_config("injection=v_corrupt", f"injection_step={K}", f"injection_factor={factor}",
                       "injection_param=blocks.0.mlp.fc.weight")
    run = loop.build_run(cfg)
    loop.run_steps(run, 0, stop_at=K)
    state = loop.optimizer_moments(run.model, run.opt)
    before = {k: {n: t.clone() for n, t in d.items()} for k, d in state.items()}
    maybe_inject("optimizer_state", K, state, run.inject)
    for kind in ("m", "v"):
        for name, t in state[kind].items():
            if kind == "v" and name == "blocks.0.mlp.fc.weight":
                assert torch.equal(t, before[kind][name] * factor)
            else:
                assert torch.equal(t, before[kind][name]), (kind, name)
    assert run.inject.record["touched"] == "blocks.0.mlp.fc.weight"
    assert run.inject.record["shape"] == [256, 64]


def test_lm_head_weight_is_an_alias_of_the_tied_embedding():
    run = loop.build_run(small_config("injection=v_corrupt", "injection_step=5", "injection_param=lm_head.weight"))
    assert run.cfg.injection_param == "tok_emb.weight"


@pytest.mark.parametrize("args, needles", [
    (["--injection", "explode"], ["unknown injection 'explode'", "scale, bad_batch, v_corrupt, lr_spike"]),
    (["--injection", "corrupt_batch", "--injection-step", "60", "--set", "injection_mode=garble"], ["injection_mode", "random"]),
    (["--injection", "corrupt_batch", "--injection-step", "60", "--set", "injection_rows=-1"], ["injection_rows"]),
    (["--injection", "lr_spike", "--injection-step", "60", "--set", "injection_mult=0"], ["injection_mult"]),
    (["--injection", "stuck_loader", "--injection-step", "60", "--set", "injection_span=-2"], ["injection_span"]),
    (["--injection", "adam_setting", "--injection-step", "60", "--set", "injection_beta2=1"], ["injection_beta2"]),
    (["--injection", "scale", "--injection-step", "-1"], ["injection_step must be within [0, 119]"]),
    (["--injection", "scale", "--injection-step", "120"], ["injection_step must be within [0, 119]"]),
    (["--injection", "v_corrupt", "--injection-step", "60", "--set", "injection_param=lm_head.bais"], ["unknown parameter", "lm_head.bias"]),
    (["--injection", "bad_batch", "--injection-step", "60", "--set", "injection_sentence=The quick brown fox."], ["not a sentence"]),
    (["--injection", "bad_batch", "--injection-step", "60", "--set", "context=8"], ["context"]),
    (["--injection", "scale", "--injection-step", "sixty"], ["injection_step", "expects int"]),
])
def test_bad_injection_input(tmp_path, args, needles):
    out = tmp_path / "run"
    assert_one_line_error(run_cli("train", "--out", str(out), *small_args(), *args), *needles)
    assert not out.exists()


def test_just_phase_19_train_reads_shell_variables(tmp_path, small_baseline):
    """`seed=42 injection=scale injection_step=500 just phase-19-train`, as the lab prints it (the baseline it
    forks from is the small one, as `injection=none just phase-19-train` makes it)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    just = shutil.which("just", path=str(Path(sys.executable).parent)) or shutil.which("just")  # the venv's first
    if just is None:
        pytest.skip("just is not installed")
    root = Path(__file__).resolve().parents[1]
    extra = ["--experiments", str(tmp_path)] + small_args()
    shutil.copytree(small_baseline, tmp_path / "18-baseline")
    env = {**os.environ, "seed": "42", "injection": "scale", "injection_step": "60"}
    p = subprocess.run([just, "--justfile", str(root / "justfile"), "phase-19-train", *extra], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "19-injection-A-k60" / "manifest.json").exists()
    env["injection_step"] = "abc"
    p = subprocess.run([just, "--justfile", str(root / "justfile"), "phase-19-train", *extra], env=env,
                       capture_output=True, text=True)
    assert p.returncode != 0 and "shell variable injection_step='abc' is not an integer" in p.stderr


# ---------------------------------------------------------------------------------------------------
# The faults beyond the lab's three (issue 12)
# ---------------------------------------------------------------------------------------------------

FAULTS = {
    "lr_spike": ("injection_mult=10", "injection_span=5"),
    "corrupt_batch": ("injection_mode=shift", "injection_rows=4"),
    "stuck_loader": ("injection_span=8",),
    "target_leak": ("injection_span=0",),
    "adam_setting": ("injection_beta2=0.6", "injection_eps=1e-12"),
}


@pytest.fixture(scope="module")
def faults(small_baseline, tmp_path_factory):
    """Each new fault at K, forked from a copy of the small baseline in this module's own folder."""
    exp = tmp_path_factory.mktemp("faults")
    shutil.copytree(small_baseline, exp / "18-baseline")
    out = {}
    for name, sets in FAULTS.items():
        out[name] = exp / f"fault-{name}"
        if not out[name].exists():
            trainer.train(small_config(f"injection={name}", f"injection_step={K}", *sets), out[name])
    return out


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_forks_at_k_and_is_recorded(faults, small_baseline, name):
    base, r = rows(small_baseline), rows(faults[name])
    assert r[:K] == base[:K] and r[K] != base[K] or name in ("lr_spike", "adam_setting")
    manifest = json.loads((faults[name] / "manifest.json").read_text())
    assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": K}
    settings = manifest["injection"]
    assert settings["injection"] == name and settings["step"] == K and settings["lasts"] == REGISTRY[name].lasts
    for p in REGISTRY[name].params:
        assert p in settings, p
    assert settings["record"]["step"] == K and settings["record"]["touched"]


@pytest.mark.parametrize("name", ["stuck_loader", "corrupt_batch"])
def test_fault_fork_is_byte_identical_to_a_run_from_scratch(faults, tmp_path, name):
    trainer.train(small_config(f"injection={name}", f"injection_step={K}", *FAULTS[name]), tmp_path / "s", fork=False)
    assert rows(tmp_path / "s") == rows(faults[name])


def test_resume_inside_a_stuck_loader_span_is_byte_identical(small_baseline, tmp_path):
    """The stuck batch is rebuilt from step K's data order, so a run resumed inside the span (checkpoint 60,
    K = 55) serves the same batch and ends with the same bytes."""
    import shutil

    from minitrain.run import files

    run = tmp_path / "stuck"
    trainer.train(small_config("injection=stuck_loader", f"injection_step={K - 5}", "injection_span=10"), run)
    whole = rows(run)
    for step in files.list_checkpoints(run):
        if step > K:
            shutil.rmtree(files.checkpoint_dir(run, step))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    trainer.resume(run)
    assert rows(run) == whole


def test_lr_spike_multiplies_the_logged_lr_for_its_span(faults, small_baseline):
    base = [json.loads(x)["lr"] for x in rows(small_baseline)]
    got = [json.loads(x)["lr"] for x in rows(faults["lr_spike"])]
    for step, (b, g) in enumerate(zip(base, got)):
        assert g == pytest.approx(b * (10.0 if K <= step < K + 5 else 1.0), rel=1e-12), step


def test_corrupt_batch_rows_stay_distinct_and_only_the_chosen_rows_change(small_baseline):
    for mode in ("random", "shift", "mismatch"):
        cfg = small_config("injection=corrupt_batch", f"injection_step={K}", f"injection_mode={mode}",
                           "injection_rows=3")
        run = loop.build_run(cfg)
        clean = run.data.train_batch(K, cfg.batch_size, cfg.seed)
        bad = maybe_inject("batch", K, clean, run.inject)
        changed = [i for i in range(cfg.batch_size)
                   if not (torch.equal(bad.x[i], clean.x[i]) and torch.equal(bad.y[i], clean.y[i]))]
        assert changed == run.inject.record["rows"] and len(changed) == 3, mode
        seqs = {tuple(r) for r in bad.x.tolist()}
        assert len(seqs) == cfg.batch_size, mode  # no duplicated rows: the old bad-batch check cannot see it
        assert maybe_inject("batch", K, clean, run.inject).x.equal(bad.x), mode  # deterministic
        assert maybe_inject("batch", K + 1, clean, run.inject) is clean  # at K only


def test_stuck_loader_and_target_leak_batches(small_baseline):
    cfg = small_config("injection=stuck_loader", f"injection_step={K}", "injection_span=3")
    run = loop.build_run(cfg)
    at_k = run.data.train_batch(K, cfg.batch_size, cfg.seed)
    for step in (K + 1, K + 2):
        assert maybe_inject("batch", step, run.data.train_batch(step, cfg.batch_size, cfg.seed), run.inject).x.equal(at_k.x)
    later = run.data.train_batch(K + 3, cfg.batch_size, cfg.seed)
    assert maybe_inject("batch", K + 3, later, run.inject) is later
    leak = loop.build_run(small_config("injection=target_leak", f"injection_step={K}", "injection_span=0"))
    b = leak.data.train_batch(100, cfg.batch_size, cfg.seed)
    out = maybe_inject("batch", 100, b, leak.inject)  # span 0: to the end
    assert torch.equal(out.x, b.y) and torch.equal(out.y, b.y)


def test_adam_setting_changes_the_optimizer_from_k_on(faults):
    cfg = small_config("injection=adam_setting", f"injection_step={K}", "injection_beta2=0.6", "injection_eps=1e-12")
    run = loop.build_run(cfg)
    maybe_inject("optimizer_state", K - 1, {}, run.inject)
    assert run.opt.param_groups[0]["betas"] == (0.9, 0.95)
    maybe_inject("optimizer_state", K, {}, run.inject)
    assert all(g["betas"] == (0.9, 0.6) and g["eps"] == 1e-12 for g in run.opt.param_groups)


def test_config_lists_every_injection():
    out = run_cli("config", check=True).stdout
    for name, inj in REGISTRY.items():
        assert f"#   {name}" in out and inj.summary in out, name


def test_a_fault_trains_from_the_lab_command(tmp_path):
    proc = run_cli("lab-run", "--experiments", str(tmp_path), "--injection", "stuck_loader", "--injection-step", "60",
                   *small_args("injection_span=5"))
    assert proc.returncode == 0, proc.stderr
    run = next(tmp_path.glob("19-injection-*"))
    assert json.loads((run / "manifest.json").read_text())["injection"]["injection"] == "stuck_loader"


@pytest.mark.parametrize("injection, extra, cause, delay", [
    ("no_zero_grad", [], "grads_not_zeroed", 1),  # the first missing zero_grad() follows step K
    ("frozen_params", ["injection_param=@mlp"], "frozen_parameters", 0),
    ("step_noop", [], "update_not_applied", 0),
    ("loss_sum", [], "loss_reduction", 0),
])
def test_each_silent_bug_is_named_at_the_step_it_began(tmp_path, injection, extra, cause, delay):
    """Nothing spikes, the loss still falls: §9 names the bug from the step's own signals (core/silent.py)."""
    from minitrain.analysis.walk import diagnose_run

    run = tmp_path / injection
    run_cli("train", "--out", str(run), "--injection", injection, "--injection-step", str(K), "--no-fork",
            *small_args(*extra), check=True)
    d = diagnose_run(run)
    assert (d["cause"], d["anomaly_step"]) == (cause, K + delay)


def test_a_group_that_names_no_parameter_is_one_line(tmp_path):
    r = run_cli("train", "--out", str(tmp_path / "r"), "--injection", "frozen_params", "--injection-step", "5",
                *small_args("injection_param=@nothing"))
    assert_one_line_error(r, "names no parameter")
