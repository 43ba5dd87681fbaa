import pytest

from conftest import assert_one_line_error, run_cli
from minitrain.core.config import TrainConfig, build_config, load_yaml
from minitrain.core.errors import UserError


def test_defaults_are_the_course_defaults():
    c = TrainConfig()
    assert (c.n_layer, c.d_model, c.n_head, c.d_ff, c.context, c.vocab_size) == (2, 64, 4, 256, 32, 512)
    assert (c.beta1, c.beta2, c.eps, c.weight_decay, c.grad_clip) == (0.9, 0.95, 1e-8, 0.1, 1.0)
    assert (c.steps, c.batch_size, c.seed, c.warmup_steps) == (2000, 8, 42, 100)
    assert c.injection == "none"


def test_set_overrides_and_types():
    c = build_config({"steps": 10}, ["lr_max=0.001", "causal_mask=false", "val_verbs=[walk, see]", "seed=7"])
    assert c.steps == 10 and c.lr_max == 0.001 and c.causal_mask is False and c.val_verbs == ["walk", "see"]
    assert c.seed == 7


@pytest.mark.parametrize("overrides, needle", [
    (["stepz=10"], "unknown config key 'stepz' (did you mean steps"),
    (["steps=ten"], "expects int"),
    (["steps=0"], "steps must be positive"),
    (["steps=-5"], "steps must be positive"),
    (["lr_max=nan"], "expects float"),
    (["causal_mask=maybe"], "expects bool"),
    (["d_model=65"], "multiple of n_head"),
    (["noequals"], "key=value"),
    (["grad_clip=-1"], "grad_clip must be >= 0 (0 or none = no clipping)"),
    (["grad_clip=sometimes"], "expects float"),
])
def test_bad_values_are_one_line_user_errors(overrides, needle):
    with pytest.raises(UserError) as e:
        build_config({}, overrides)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_yaml_unknown_key_and_bad_yaml(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("steps: 5\nbogus: 1\n")
    with pytest.raises(UserError, match="unknown config key 'bogus'"):
        build_config(load_yaml(f))
    f.write_text("steps: [1,\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_yaml(f)


def test_hash_ignores_presentation_but_not_numbers():
    a, b = build_config({}, []), build_config({}, ["progress=false"])
    assert a.hash() == b.hash()
    assert a.hash() != build_config({}, ["seed=1"]).hash()
    # the trunk hash ignores injection settings: that is what lets an injection run fork its baseline
    inj = build_config({}, ["injection=scale", "injection_step=7"])
    assert inj.trunk_hash() == a.trunk_hash() and inj.hash() != a.hash()


def test_cli_bad_config_exits_2_without_traceback(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("train", "--out", str(out), "--set", "stepz=3")
    assert_one_line_error(proc, "unknown config key 'stepz'")
    assert not out.exists()
    proc = run_cli("train", "--out", str(out), "--set", "steps=0")
    assert_one_line_error(proc, "steps must be positive")
    proc = run_cli("train", "--out", str(out), "--set", "lr_max=abc")
    assert_one_line_error(proc, "lr_max")
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "none", "off", "None"])
def test_grad_clip_can_be_turned_off(value, tmp_path):
    assert build_config({}, [f"grad_clip={value}"]).grad_clip == 0.0
    f = tmp_path / "c.yaml"
    f.write_text("grad_clip: null\n")
    assert build_config(load_yaml(f)).grad_clip == 0.0


def test_a_run_without_clipping_logs_the_full_norm_and_never_clips():
    from conftest import small_config
    from minitrain import loop

    run = loop.build_run(small_config("grad_clip=none", "steps=12"))
    rows = []
    loop.run_steps(run, 0, on_row=rows.append)
    assert all(r["grad_norm_clipped"] == r["grad_norm"] and r["clipped"] is False for r in rows)
    assert max(r["grad_norm"] for r in rows) > 1.0  # with clipping at 1.0 these steps would have been cut


def test_help_and_config_errors_import_neither_torch_nor_dynamo(tmp_path):
    """`--help` and a one-line config error return before torch is imported (well under a second;
    no wall-clock limit here, the imports are the measure)."""
    import subprocess
    import sys

    cases = [["--help"], ["train", "--help"], ["train", "--out", str(tmp_path / "r"), "--set", "bogus=1"],
             ["train", "--out", str(tmp_path / "r"), "--set", "injection=nope"],
             ["lab-run", "--injection", "scale", "--injection-step", "-3"],
             ["lab", "--experiments", str(tmp_path), "--set", "injection_step=99999"], ["config", "--help"]]
    code = ("import sys\nfrom minitrain import cli\nimport contextlib, io\n"
            "for argv in %r:\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        try:\n            cli.main(argv)\n        except SystemExit:\n            pass\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n" % cases)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    assert not (tmp_path / "r").exists()
