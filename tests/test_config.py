import pytest

from conftest import assert_one_line_error, run_cli
from minitrain.core import config_sections
from minitrain.core.config import FLAT_NAMES, TrainConfig, build_config, config_listing, load_yaml
from minitrain.core.config_sections import HASH_V1_FIELDS
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


# ---- sections, flat aliases and the versioned hash ----------------------------------------------------------

SECTIONED = """\
seed: 7
optim: {lr_max: 0.001, grad_clip: none}
data:
  val_verbs: [walk, see]
checkpoint: {every: 50, keep_steps: [50, 100]}
experiment:
  injection: {kind: scale, step: 150, param: tok_emb.weight, factor: 0.01}
  remedy: {kind: zclip}
  replay: {steps: [60], offset: 3}
"""
FLAT = """\
seed: 7
lr_max: 0.001
grad_clip: none
val_verbs: [walk, see]
ckpt_every: 50
ckpt_keep_steps: [50, 100]
injection: scale
injection_step: 150
injection_param: tok_emb.weight
injection_factor: 0.01
remedy: zclip
swap_steps: [60]
swap_offset: 3
"""


def test_sectioned_and_flat_yaml_build_the_same_config(tmp_path):
    (tmp_path / "s.yaml").write_text(SECTIONED)
    (tmp_path / "f.yaml").write_text(FLAT)
    s, f = (build_config(load_yaml(tmp_path / name)) for name in ("s.yaml", "f.yaml"))
    assert s == f and s.hash() == f.hash()
    assert (s.optim.lr_max, s.lr_max, s.grad_clip, s.ckpt_every) == (0.001, 0.001, 0.0, 50)
    assert (s.experiment.injection.kind, s.injection, s.injection_step, s.injection_factor) == ("scale", "scale", 150, 0.01)
    assert s.to_dict() == f.to_dict() and list(s.to_dict()) == list(HASH_V1_FIELDS)  # the written form stays flat


def test_both_forms_mix_but_a_field_given_twice_is_refused():
    assert build_config({"steps": 5, "optim": {"lr_max": 0.001}}).steps == 5
    with pytest.raises(UserError, match=r"lr_max is given twice \(as lr_max and optim.lr_max\)"):
        build_config({"lr_max": 0.002, "optim": {"lr_max": 0.001}})
    with pytest.raises(UserError, match="config section 'optim' holds fields"):
        build_config({"optim": 0.001})


@pytest.mark.parametrize("flat, value", [("lr_max", "0.001"), ("injection_factor", "0.01"),
                                         ("injection_param", "tok_emb.weight"), ("injection", "scale"),
                                         ("ckpt_keep_steps", "[100,300]"), ("telemetry", "basic"), ("seed", "3")])
def test_set_of_a_flat_name_and_its_sectioned_name_agree(flat, value):
    by_flat, by_section = build_config({}, [f"{flat}={value}"]), build_config({}, [f"{FLAT_NAMES[flat]}={value}"])
    assert by_flat == by_section and by_flat.hash() == by_section.hash()
    assert by_flat != build_config({})


def test_every_field_has_one_flat_name_and_one_place():
    assert FLAT_NAMES["lr_max"] == "optim.lr_max" and FLAT_NAMES["injection_step"] == "experiment.injection.step"
    assert FLAT_NAMES["swap_offset"] == "experiment.replay.offset" and FLAT_NAMES["telemetry"] == "metrics.telemetry"
    c = TrainConfig()
    for flat, dotted in FLAT_NAMES.items():
        value = c
        for part in dotted.split("."):
            value = getattr(value, part)
        assert getattr(c, flat) == value == getattr(TrainConfig, flat), flat  # on the class: the course default


def test_flat_names_are_read_only_aliases_and_a_typo_is_an_attribute_error():
    c = TrainConfig(init_scale=100.0)
    assert c.init_scale == c.model.init_scale == 100.0
    d = c.replace(lr_max=1e-3, injection_step=7)
    assert (d.lr_max, d.injection_step, d.init_scale, c.lr_max) == (1e-3, 7, 100.0, 3e-4)
    with pytest.raises(AttributeError, match=r"read-only \(it is optim.lr_max\)"):
        c.lr_max = 1.0
    with pytest.raises(AttributeError):
        c.lr_maxx
    with pytest.raises(TypeError, match="lr_maxx"):
        TrainConfig(lr_maxx=1.0)


@pytest.mark.parametrize("key, needle", [
    ("lr_mx", "unknown config key 'lr_mx' (did you mean lr_max (optim.lr_max)"),
    ("optim.lr_mx", "unknown config key 'optim.lr_mx' (did you mean lr_max (optim.lr_max)"),
    ("injection_stp", "(did you mean injection_step (experiment.injection.step)"),
    ("model.lr_max", "(did you mean lr_max (optim.lr_max)"),
])
def test_an_unknown_name_names_the_closest_field_and_its_section(key, needle):
    with pytest.raises(UserError) as e:
        build_config({}, [f"{key}=1"])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_listing_is_by_section_and_reads_back_as_the_same_config(tmp_path):
    text = config_listing(build_config({}, ["preset=medium"]))
    assert "\n# optim\nsteps: 2000\nlr_max: 0.0003\n" in text and "\n# model\nn_layer: 4\n" in text
    assert "\n# experiment.injection\ninjection: none  # experiment.injection.kind\n" in text
    assert "injection_step: 500  # experiment.injection.step\n" in text
    (tmp_path / "c.yaml").write_text(text)
    assert build_config(load_yaml(tmp_path / "c.yaml")) == build_config({}, ["preset=medium"])


# The config hash and trunk hash of each config below, computed by the code on main at 18511d1 (the flat
# TrainConfig, before the sections) with `build_config({}, SETS).hash()` / `.trunk_hash()`, and for the lab with
# `lab.parallel.lab_configs(42, 500, SETS)`. The sections must not move any of them: runs stay up to date and
# resumable.
HASHES_ON_MAIN = {
    (): ("1e9fabb0ac28298f", "b576c1022e0582b7"),
    ("preset=medium",): ("a4902ded112778b6", "ea6465825a241853"),
    ("preset=gpt2-small-shaped",): ("c416e10613c96a4f", "c932ba564e0f2248"),
    ("remedy=zclip",): ("14398b6a1990ea7e", "ce4aa9f4f81434fc"),
    ("swap_steps=[300,1000]", "swap_offset=7"): ("8d10f87813b285e7", "079f3bd2e795b7d1"),
    ("numerics=portable",): ("2d0049a8a54ef76c", "03deda47031de0c6"),
    ("injection=lr_spike", "injection_mult=5", "injection_span=10"): ("e16ee01fd417b730", "b576c1022e0582b7"),
    ("blind=true", "injection=scale", "injection_factor=0.01", "injection_param=tok_emb.weight"):
        ("917e9217c2572cfe", "b576c1022e0582b7"),
}
LAB_HASHES_ON_MAIN = {  # baseline, A, B, C of `just lab` (and `preset=pretraining-like just lab`)
    (): [("1e9fabb0ac28298f", "b576c1022e0582b7"), ("a6768e44241aa571", "b576c1022e0582b7"),
         ("77d29f285fb7015c", "b576c1022e0582b7"), ("facfd8f950e37d39", "b576c1022e0582b7")],
    ("preset=pretraining-like",): [("8901e82f18bac3be", "2880a4c324b7f6f9"), ("c26ac60a2ee8182c", "2880a4c324b7f6f9"),
                                   ("e150e5efbafb344f", "2880a4c324b7f6f9"), ("6ee25f48f5105b3d", "2880a4c324b7f6f9")],
}


@pytest.mark.parametrize("sets", HASHES_ON_MAIN)
def test_the_hash_of_every_existing_config_is_unchanged(sets):
    cfg = build_config({}, list(sets))
    assert (cfg.hash(), cfg.trunk_hash()) == HASHES_ON_MAIN[sets]
    sectioned = build_config({}, [f"{FLAT_NAMES[k]}={v}" for k, v in (s.split("=", 1) for s in sets)])
    assert (sectioned.hash(), sectioned.trunk_hash()) == HASHES_ON_MAIN[sets]


@pytest.mark.parametrize("sets", LAB_HASHES_ON_MAIN)
def test_the_lab_runs_keep_their_hashes(sets):
    from minitrain.lab.parallel import lab_configs

    assert [(c.hash(), c.trunk_hash()) for c in lab_configs(42, 500, list(sets))] == LAB_HASHES_ON_MAIN[sets]
    # `seed=42 injection=scale injection_step=500 just phase-19-train` builds run A's config
    phase_19 = build_config({}, ["seed=42", "injection=scale", "injection_step=500"])
    assert phase_19.hash() == LAB_HASHES_ON_MAIN[()][1][0]


def test_a_field_added_after_hash_version_1_is_left_out_at_its_default(monkeypatch):
    assert config_sections.HASH_VERSION == 1
    assert all(config_sections.omitted_at_default(k) for k in config_sections.HASH_OMIT_AT_DEFAULT)
    assert config_sections.omitted_at_default("a_field_added_later") and not config_sections.omitted_at_default("lr_max")
    cfg = build_config({})

    def hash_with_new_field(value):
        monkeypatch.setattr(TrainConfig, "to_dict", lambda self: {**{n: getattr(self, n) for n in FLAT_NAMES},
                                                                   "a_field_added_later": value})
        return cfg.hash()

    monkeypatch.setitem(config_sections.COURSE_DEFAULTS, "a_field_added_later", 0)
    assert hash_with_new_field(0) == HASHES_ON_MAIN[()][0] != hash_with_new_field(1)
