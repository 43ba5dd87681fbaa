"""The learner's workflow end to end: seal, reveal, grade, check on the lab's runs; blind labs; remedies;
post-mortems. The parts alone: test_learner_workspace.py, _parse.py, _grading.py, _done.py (the hook).

Small runs (120 steps, K = 60, checkpoints every 20). The lab's runs are conftest.small_lab (shared with
test_injections.py); each test that writes works on its own copy."""
import json
import re
import shutil

import pytest

from conftest import assert_one_line_error, read_only, run_cli, small_args, small_config
from minitrain.analysis.definitions import RECOVERY_RULE
from minitrain import loop
from minitrain.lab import blind
from minitrain.run import redact
from minitrain.lab import learner
from minitrain.lab.remediate import remediate
from minitrain.core import remedy
from minitrain.core.config import build_config
from minitrain.core.errors import UserError

K = 60
SPIKE_FAULTS = ("scale", "bad_batch", "v_corrupt")


# ---------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------


@pytest.fixture()
def lab(small_lab, tmp_path):
    """This test's own experiments/ with 18-baseline and 19-injection-A/B/C at K (a copy of conftest.small_lab)."""
    exp = tmp_path / "experiments"
    shutil.copytree(small_lab, exp)
    return exp


@pytest.fixture()
def blind_lab(small_blind_lab):
    """conftest.small_blind_lab: a sealed, shuffled spike lab in 19-blind/ beside the baseline (read-only)."""
    return small_blind_lab


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A working directory with learners/ (the CLI's defaults are relative to it)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_sections(path, sections: dict[str, dict]):
    """Fill a diagnoses file: {run id: {field: value}} (fields as the template names them)."""
    text = path.read_text()
    for run_id, fields in sections.items():
        block = re.search(rf"(?ms)^## [^\n]*\n- run: {re.escape(run_id)}\n.*?(?=^## |\Z)", text)
        assert block, run_id
        new = f"## Run {run_id}\n- run: {run_id}\n" + "".join(f"- {k}: {v}\n" for k, v in fields.items()) + "\n"
        text = text[:block.start()] + new + text[block.end():]
    path.write_text(text)


# ---------------------------------------------------------------------------------------------------
# Remedies
# ---------------------------------------------------------------------------------------------------


def _train_rows(cfg):
    run = loop.build_run(cfg)
    rows = []
    loop.run_steps(run, 0, rows.append)
    return run, rows


def test_remedy_fields_at_their_defaults_leave_the_config_hash_alone():
    from minitrain.core import config

    cfg = small_config()
    remedy_fields = [k for k in cfg.to_dict() if k.startswith("remedy")]
    assert remedy_fields and all(k in config.HASH_OMIT_AT_DEFAULT for k in remedy_fields)
    hashed = {k for k, v in cfg.to_dict().items()
              if k not in config.NON_NUMERIC_FIELDS and not (k in config.HASH_OMIT_AT_DEFAULT and v == config._DEFAULTS[k])}
    assert not hashed & set(remedy_fields)  # runs made before remedies existed keep their hash
    assert small_config("remedy=zclip").hash() != cfg.hash()
    assert small_config("blind=true").hash() == cfg.hash()  # blind changes no number


def test_bad_remedy_settings_are_one_line_errors():
    with pytest.raises(UserError, match="unknown remedy"):
        small_config("remedy=skip")
    with pytest.raises(UserError, match="remedy_step"):
        small_config("remedy=skip_batch")
    assert_one_line_error(run_cli("train", "--out", "/tmp/never", *small_args("remedy=nope")), "unknown remedy")


def test_skip_batch_makes_no_update_at_its_step():
    run, rows = _train_rows(small_config("steps=70", "injection=bad_batch", f"injection_step={K}",
                                         "remedy=skip_batch", f"remedy_step={K}"))
    assert all(p["u"] == 0 for p in rows[K]["params"].values())  # weights untouched at K
    before = next(r for r in reversed(rows[:K]) if "u" in next(iter(r["params"].values())))  # u: detail steps only
    assert all(p["u"] > 0 for p in before["params"].values())
    assert rows[K]["batch"]["dup_rows"] == 7  # the bad batch is still seen (and logged)
    assert [a["step"] for a in remedy.remedy_record(run.remedy)["actions"]] == [K]
    _, plain = _train_rows(small_config("steps=70", "injection=bad_batch", f"injection_step={K}"))
    assert rows[:K] == plain[:K] and rows[K + 1]["loss"] != plain[K + 1]["loss"]


def test_restore_moments_puts_back_the_pre_spike_second_moment():
    cfg = small_config("steps=70", "injection=v_corrupt", f"injection_step={K}")
    _, corrupt = _train_rows(cfg)
    run, fixed = _train_rows(cfg.replace(remedy="restore_moments", remedy_step=K + 1))
    _, base = _train_rows(small_config("steps=70"))
    vm = lambda rows, s: rows[s]["params"]["lm_head.bias"]["vm"]  # noqa: E731
    assert vm(corrupt, K + 1) / vm(base, K + 1) > 20
    assert 0.5 < vm(fixed, K + 1) / vm(base, K + 1) < 2
    action = remedy.remedy_record(run.remedy)["actions"][0]
    assert action["step"] == K + 1 and action["from_checkpoint_step"] == K  # ckpt_every=20: boundary at K


def test_zclip_down_weights_the_scaled_step_only():
    cfg = small_config("steps=70", "injection=scale", f"injection_step={K}")
    run, rows = _train_rows(cfg.replace(remedy="zclip"))
    _, plain = _train_rows(cfg)
    actions = remedy.remedy_record(run.remedy)["actions"]
    at_k = [a for a in actions if a["step"] == K]
    assert at_k and at_k[0]["factor"] < 0.1 and at_k[0]["z"] > 2.5
    assert len(actions) <= 3  # a detector, not a second clip: it acts on outliers only
    if all(a["step"] >= K for a in actions):
        assert rows[:K] == plain[:K]  # nothing changes before the first action
    assert rows[K + 1]["loss"] != plain[K + 1]["loss"]  # the down-weighted step changed the trajectory


def test_remedy_none_is_byte_identical_to_the_loop_without_the_remedy_hook(small_baseline, monkeypatch):
    """The baseline was trained through apply_remedy with remedy none; these rows with the hook taken out
    (every optimizer step taken, nothing measured)."""
    from minitrain.run.files import dumps_row

    monkeypatch.setattr(loop, "apply_remedy", lambda step, grad_norm, ctx: True)
    _, rows = _train_rows(small_config())
    assert b"".join(dumps_row(r).encode() for r in rows) == (small_baseline / "metrics.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------------------
# Blind labs: nothing in the run folders tells which run carries which fault before the reveal
# ---------------------------------------------------------------------------------------------------

SECRET_WORDS = ("bad_batch", "v_corrupt", '"scale"', "She has written", "letter.", "injection_step",
                "injection_scale", "injection_factor", "injection_param", "injection_sentence", "init_scale",
                "causal_mask", "lm_head.bias x")
VOLATILE = ("started", "ended", "name", "hardware", "versions", "git_sha", "run_id")  # run_id: random, says nothing


def _public_files(folder):
    return [p for p in folder.rglob("*") if p.is_file() and ".sealed" not in p.parts]


def _check_no_leak(folder):
    for path in _public_files(folder):
        if path.suffix in (".safetensors",):
            continue
        text = path.read_text(errors="replace")
        if path.name == "SEALED.json":
            continue
        for word in SECRET_WORDS:
            assert word not in text, (path, word)
    runs = [folder / r for r in blind.RUN_IDS]
    # identical config files but for each run's own seed (drawn, so it says nothing about the fault)
    assert len({re.sub(rb"(?m)^seed: \d+\n", b"", (r / "config.yaml").read_bytes()) for r in runs}) == 1
    manifests = [json.loads((r / "manifest.json").read_text()) for r in runs]
    for m in manifests:
        assert m["injection"] == {"withheld": redact.WITHHELD}
        assert m["config_hash"] == m["trunk_hash"] == redact.WITHHELD
        m.pop("seed", None), m["config"].pop("seed", None)
    stripped = [{k: v for k, v in m.items() if k not in VOLATILE} for m in manifests]
    assert stripped[0] == stripped[1] == stripped[2]  # the manifests differ only in names, times, ids and seeds
    for r in runs:
        for line in (r / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            assert row["injected"] is None and row["batch"]["rows"] == [None] * 8
        for ck in (r / "checkpoints").glob("*/manifest.json"):
            meta = json.loads(ck.read_text())
            assert meta["config_hash"] == meta["injection_fired"] == redact.WITHHELD
    pages = [r / "dashboard.html" for r in runs if (r / "dashboard.html").exists()]
    payloads = [re.search(r'id="dashboard-data">(.*?)</script>', p.read_text(), re.S).group(1) for p in pages]
    assert len({json.dumps(json.loads(x)["injection"]) for x in payloads}) <= 1


def test_blind_spike_lab_does_not_leak_the_mapping(blind_lab, tmp_path):
    folder = blind_lab / "19-blind"
    _check_no_leak(folder)
    for run_id in blind.RUN_IDS:  # the index was rebuilt by the command that made them: one sealed row each
        assert _index_row(blind_lab, f"19-blind/{run_id}").startswith("sealed")
    public = json.loads((folder / "SEALED.json").read_text())
    secret = json.loads((folder / ".sealed" / "mapping.json").read_text())
    assert public["mapping_sha256"] == blind.mapping_digest(secret["salt"], secret["mapping"])
    assert sorted(v["fault"] for v in secret["mapping"].values()) == sorted(SPIKE_FAULTS)
    # the runs do carry their faults: the v_corrupt run's v jumps at K, the scale run's grad norm does
    by_fault = {v["fault"]: k for k, v in secret["mapping"].items()}

    def row(fault, at=None):
        k = secret["mapping"][by_fault[fault]]["overrides"]["injection_step"] if at is None else at
        return json.loads((folder / by_fault[fault] / "metrics.jsonl").read_text().splitlines()[k])

    k_scale = secret["mapping"][by_fault["scale"]]["overrides"]["injection_step"]
    assert row("scale")["grad_norm"] > 20 * row("scale", k_scale - 1)["grad_norm"]
    assert row("bad_batch")["batch"]["dup_rows"] == 7
    # own seed and K, recorded in the sealed mapping: never the named runs' (seed 42, K of the lab)
    for entry in secret["mapping"].values():
        o = entry["overrides"]
        assert o["seed"] != 42 and o["injection_step"] != 60
    # the sealed store is checked against the published hash
    tampered = dict(secret, mapping={**secret["mapping"], "01": secret["mapping"]["02"]})
    copy = shutil.copytree(folder, tmp_path / "19-blind")
    (copy / ".sealed" / "mapping.json").write_text(json.dumps(tampered))
    with pytest.raises(UserError, match="changed after the runs"):
        blind.open_mapping(copy)



@pytest.mark.parametrize("seed", range(5))
def test_random_draws_shuffle_the_faults_and_stay_in_range(seed):
    import random

    mapping = blind.draw_mapping("spike", True, 2000, rng=random.Random(seed))
    assert sorted(e["fault"] for e in mapping.values()) == sorted(SPIKE_FAULTS)
    for entry in mapping.values():
        o = entry["overrides"]
        assert 400 <= o["injection_step"] <= 1400 and o["injection_step"] != 500 and o["seed"] != 42
        assert 20 <= o.get("injection_scale", 50) <= 100 and 30 <= o.get("injection_factor", 100) <= 320
        build_config({}, [f"{k}={v}" for k, v in o.items()])  # every draw is a valid config
    fixed = blind.draw_mapping("break-it", False, 120, rng=random.Random(seed))
    assert sorted(e["fault"] for e in fixed.values()) == ["bad_init", "broken_mask", "no_warmup"]


def test_random_must_be_0_or_1():
    assert_one_line_error(run_cli("blind-runs", "spike", "--random", "2"), "--random expects 0 or 1")


def test_a_blind_run_cannot_be_resumed(blind_lab, tmp_path):
    copy = tmp_path / "01"
    shutil.copytree(blind_lab / "19-blind" / "01", copy)
    m = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**m, "status": "running"}))
    assert_one_line_error(run_cli("train", "--resume", str(copy)), "blind run")


def test_break_it_lab_runs_one_run_at_a_time_and_does_not_leak(tmp_path):
    args = small_args("steps=60")  # what is checked is where each run's settings go, not its training
    sets = [kv for kv in args if kv != "--set"]
    proc = run_cli("blind-runs", "break-it", "--run", "02", "--experiments", str(tmp_path), *args)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "19-break-it"
    assert (folder / "02" / "manifest.json").exists() and not (folder / "01").exists()
    # it says when a run starts (minutes of training, no progress bar off a terminal), before its summary line
    assert proc.stdout.index("19-break-it/02: training 60 steps (run 2 of 3") < proc.stdout.index("19-break-it/02: finished")
    mapping = blind.open_mapping(folder)
    for run_id in ("01", "03"):
        blind.make_lab("break-it", folder, sets, only=run_id)
    _check_no_leak(folder)
    for run_id, entry in mapping.items():
        cfg = json.loads((folder / run_id / "manifest.json").read_text())["config"]
        assert "init_scale" not in cfg and "warmup_steps" not in cfg and "causal_mask" not in cfg
        rows = [json.loads(x) for x in (folder / run_id / "metrics.jsonl").read_text().splitlines()]
        if entry["fault"] == "no_warmup":
            assert rows[0]["lr"] == small_config().lr_max  # the evidence stays: LR at its maximum from step 0
    # other settings than the sealed lab's are refused; a new draw needs --force
    assert_one_line_error(run_cli("blind-runs", "break-it", "--experiments", str(tmp_path)), "--force")


# ---------------------------------------------------------------------------------------------------
# The whole procedure, end to end
# ---------------------------------------------------------------------------------------------------


def _index_row(exp, name: str) -> str:
    """The stability-check column of a run's row in EXP/index.html."""
    m = re.search(rf'href="{re.escape(name)}/dashboard.html".*?<td[^>]*>([^<]*)</td></tr>', (exp / "index.html").read_text())
    return m.group(1)


def _page(run) -> dict:
    return json.loads(re.search(r'id="dashboard-data">(.*?)</script>', (run / "dashboard.html").read_text(), re.S)[1])


def _reference_sections(refs, runs, overrides=None):
    out = {}
    for fault, run_id in runs.items():
        ref = refs[fault]
        out[run_id] = {"node": f"{ref.leaf} ({ref.cause})", "diagnosis": ref.diagnosis, "remediation": ref.remediation}
        out[run_id].update((overrides or {}).get(fault, {}))
    return out


def test_the_lab_end_to_end(lab, workdir):
    exp = ["--experiments", str(lab)]
    assert run_cli("learner", "init", "ana", cwd=workdir).returncode == 0
    d = workdir / "learners" / "ana" / "phase-19"
    # revealing an empty file is refused, and seals nothing
    assert_one_line_error(run_cli("reveal", "ana", *exp, cwd=workdir), "0 of 3 diagnoses filled")
    assert not (d / "spike-diagnoses.seal.json").exists()
    _, refs = learner.read_reference(learner.LABS["spike"])
    runs = {f: f"19-injection-{letter}" for f, letter in learner.LAB_LETTERS.items()}
    write_sections(d / "spike-diagnoses.md", _reference_sections(refs, runs, {
        # B stops at the question that turns to the leaf, so its cause comes from the cause field
        "bad_batch": {"node": "4.1", "cause": "bad batch"}}))
    # before the reveal the lab's answers are sealed: diagnose asks for --spoil, pages and index say "sealed",
    # and the page carries none of the tree's answers (tests/test_no_spoilers.py looks at everything else)
    assert not (lab / "REVEALED.json").exists()
    b_run = str(lab / "19-injection-B")
    assert_one_line_error(run_cli("diagnose", b_run, cwd=workdir), "not revealed yet", "--spoil")
    assert run_cli("dashboard", b_run, cwd=workdir).returncode == 0
    page = _page(lab / "19-injection-B")
    assert page["sealed"] and set(page["checks"]) == {"signals"} and _index_row(lab, "19-injection-B").startswith("sealed")
    assert not (lab / "19-injection-B" / "signature.json").exists() and not (lab / "lab-report.md").exists()
    proc = run_cli("reveal", "ana", *exp, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    # the reveal opens the lab: its pages and index are rewritten with the walker's verdict
    assert json.loads((lab / "REVEALED.json").read_text())["revealed_by"] == "ana"
    page = _page(lab / "19-injection-B")
    assert not page["sealed"] and page["checks"]["verdict"]["leaf"] == "§4.A"
    assert _index_row(lab, "19-injection-B").startswith("§4.A bad batch")
    assert "§4.A" in run_cli("diagnose", b_run, cwd=workdir).stdout
    seal = json.loads((d / "spike-diagnoses.seal.json").read_text())
    assert seal["sha256"] == learner.sha256_text((d / "spike-diagnoses.md").read_text())
    assert seal["sealed_at"] <= seal["revealed_at"]
    # the reference, completed with the learner's own numbers
    assert "Injection A" in proc.stdout and "§7.A" in proc.stdout
    base_gn = json.loads((lab / "18-baseline" / "metrics.jsonl").read_text().splitlines()[K])["grad_norm"]
    a_gn = json.loads((lab / "19-injection-A" / "metrics.jsonl").read_text().splitlines()[K])["grad_norm"]
    assert f"pre-clip grad norm at K: {a_gn:.4g} (baseline {base_gn:.4g})" in proc.stdout
    assert "duplicated rows in the batch at K: 7 (baseline 0)" in proc.stdout
    assert "<!-- measured:" not in proc.stdout and (d / "reveal-spike.md").exists()
    # the reveal writes what was withheld (the signatures and the lab report) and names what it opened
    assert (lab / "19-injection-B" / "signature.json").exists() and (lab / "lab-report.md").exists()
    assert "expected vs observed" in proc.stdout and str(lab / "19-injection-B" / "dashboard.html") in proc.stdout
    assert f"(seed 42, K = {K})" in proc.stdout and "at K = 500 the loss" not in proc.stdout
    proc = run_cli("grade", "ana", *exp, cwd=workdir)
    assert proc.returncode == 0 and "3/3 correct" in proc.stdout, proc.stdout + proc.stderr
    # check: everything but the stop condition holds until lessons.md has three new lines
    proc = run_cli("check", "ana", *exp, cwd=workdir)
    assert proc.returncode == 1 and proc.stdout.count("[PASS]") == 5 and "[FAIL] stop condition" in proc.stdout, proc.stdout
    with open(d / "notes" / "lessons.md", "a") as f:
        f.write("A scaled gradient shows only in the pre-clip norm when clipping is always on.\n"
                "A bad batch: duplicated rows and rare tokens, its own loss high at K.\n"
                "Corrupted Adam v: no spike, one tensor's v jumps and decays at beta2.\n")
    proc = run_cli("check", "ana", *exp, cwd=workdir)
    assert proc.returncode == 0 and proc.stdout.count("[PASS]") == 6, proc.stdout
    assert "no-op by default" in proc.stdout and "same metrics bytes with and without maybe_inject" in proc.stdout
    # an edit after the reveal is flagged; the sealed text is still what counts
    text = (d / "spike-diagnoses.md").read_text()
    (d / "spike-diagnoses.md").write_text(text.replace("§7.A (gradient_explosion)", "§4.A"))
    proc = run_cli("grade", "ana", *exp, cwd=workdir)
    assert "3/3 correct" in proc.stdout and "EDITED AFTER THE REVEAL" in proc.stdout
    assert "would score 2/3" in proc.stdout
    proc = run_cli("check", "ana", *exp, cwd=workdir)
    assert proc.returncode == 1 and "EDITED after the seal" in proc.stdout


def test_one_wrong_diagnosis_scores_two_and_is_explained(lab, workdir):
    learner.init_learner("bob", workdir / "learners")
    d = workdir / "learners" / "bob" / "phase-19"
    _, refs = learner.read_reference(learner.LABS["spike"])
    runs = {f: f"19-injection-{letter}" for f, letter in learner.LAB_LETTERS.items()}
    write_sections(d / "spike-diagnoses.md", _reference_sections(refs, runs, {
        "v_corrupt": {"node": "§7.A", "diagnosis": "the gradients were scaled at K"}}))
    learner.reveal("bob", learner.LABS["spike"], workdir / "learners", lab)
    g = learner.grade("bob", learner.LABS["spike"], workdir / "learners", lab)
    assert g.score == 2 and not g.edited
    miss = next(v for v in g.verdicts if not v.correct)
    assert miss.fault == "v_corrupt" and "§7.A" in miss.why and "§6.A" in miss.why
    report = learner.grade_report("bob", g)
    assert "2/3 correct" in report and "MISS" in report


def test_banana_scores_zero(lab, workdir):
    learner.init_learner("eve", workdir / "learners")
    d = workdir / "learners" / "eve" / "phase-19"
    _, refs = learner.read_reference(learner.LABS["spike"])
    runs = {f: f"19-injection-{letter}" for f, letter in learner.LAB_LETTERS.items()}
    sections = _reference_sections(refs, runs)
    for fields in sections.values():
        fields.update(diagnosis="banana", remediation="banana")
    write_sections(d / "spike-diagnoses.md", sections)
    learner.reveal("eve", learner.LABS["spike"], workdir / "learners", lab)
    g = learner.grade("eve", learner.LABS["spike"], workdir / "learners", lab)
    assert g.score == 0 and all("names no failure mode" in v.why for v in g.verdicts)


def test_grade_and_reveal_need_the_right_state(workdir, lab):
    assert_one_line_error(run_cli("grade", "nobody", cwd=workdir), "learner init nobody")
    learner.init_learner("dee", workdir / "learners")
    assert_one_line_error(run_cli("grade", "dee", "--experiments", str(lab), cwd=workdir), "not sealed yet")
    # --force reveals an unfilled file; the empty sections then score 0
    proc = run_cli("reveal", "dee", "--force", "--experiments", str(lab), cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "0/3 correct" in run_cli("grade", "dee", "--experiments", str(lab), cwd=workdir).stdout


def test_blind_lab_is_graded_through_the_sealed_mapping(blind_lab, workdir):
    exp = shutil.copytree(blind_lab, workdir / "experiments")
    folder = exp / "19-blind"
    learner.init_learner("cy", workdir / "learners")
    d = workdir / "learners" / "cy" / "phase-19"
    mapping = json.loads((folder / ".sealed" / "mapping.json").read_text())["mapping"]  # the test may peek
    _, refs = learner.read_reference(learner.LABS["blind"])
    runs = {entry["fault"]: f"19-blind/{run_id}" for run_id, entry in mapping.items()}
    write_sections(d / "blind-diagnoses.md", _reference_sections(refs, runs))
    assert not (folder / "REVEALED.json").exists()
    proc = run_cli("reveal", "cy", "--lab", "blind", "--experiments", str(exp), cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((folder / "REVEALED.json").read_text())["mapping"] == mapping
    assert "sealed mapping:" in proc.stdout
    for run_id, entry in mapping.items():  # each run's own seed and K, not the named lab's
        seed, k = entry["overrides"]["seed"], entry["overrides"]["injection_step"]
        assert f"`19-blind/{run_id}` (sealed mapping: {run_id} carried {entry['fault']})**" in proc.stdout
        assert f"(seed {seed}, K = {k})" in proc.stdout
    # no baseline of a blind run's seed: the v jump, its tensor and the recovery against the run's own median
    sections = {s.split("`", 1)[0]: s for s in proc.stdout.split("## Injection ")}
    measured = {fault: {line.split(": ", 1)[0].strip("- "): line.split(": ", 1)[1]
                        for line in next(s for s in sections.values() if f"carried {fault})" in s).splitlines()
                        if line.startswith("  - ") and ": " in line} for fault in ("bad_batch", "v_corrupt")}
    assert "against its own median" in proc.stdout
    assert "seals your `blind-diagnoses.md`" in proc.stdout and "spike-diagnoses.md" not in proc.stdout
    v = measured["v_corrupt"]
    assert v["tensor with the v jump"] == "lm_head.bias" and float(v["Adam v jump at K (run / baseline)"]) > 10, v
    assert v["steps until its v is within 10% of the baseline"] != "n/a", v
    assert measured["bad_batch"][f"recovery steps (until {RECOVERY_RULE})"] != "n/a", measured["bad_batch"]
    proc = run_cli("grade", "cy", "--lab", "blind", "--experiments", str(exp), cwd=workdir)
    assert "3/3 correct" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------------
# Post-mortem and remediation
# ---------------------------------------------------------------------------------------------------


def test_postmortem_fills_the_template_and_never_overwrites(lab):
    run = lab / "19-injection-B"
    out = run / "postmortem.md"
    out.unlink(missing_ok=True)
    # it names the walker's leaf: refused on a sealed run, as diagnose is; --spoil is logged in the lab folder
    assert_one_line_error(run_cli("postmortem", str(run)), "not revealed yet", "--spoil")
    assert not out.exists() and not (lab / "SPOILED.json").exists()
    proc = run_cli("postmortem", str(run), "--spoil")
    assert proc.returncode == 0, proc.stderr
    spoiled = json.loads((lab / "SPOILED.json").read_text())["spoils"]
    assert [(x["run"], x["command"]) for x in spoiled] == [("19-injection-B", "postmortem")]
    (lab / "REVEALED.json").write_text('{"revealed_at": "2000-01-01T00:00:00.000000Z", "revealed_by": "t"}')
    text = out.read_text()
    assert "{{" not in text and "## 5. Impact, measured against the baseline" in text
    assert "`18-baseline`" in text and f"at step {K}" in text and "7 duplicated rows" in text
    out.write_text("my edits\n")
    assert_one_line_error(run_cli("postmortem", str(run)), "--force")
    assert out.read_text() == "my edits\n"
    assert run_cli("postmortem", str(run), "--force").returncode == 0 and out.read_text() != "my edits\n"


@pytest.mark.parametrize("fault,remedy", [("bad_batch", "skip_batch"), ("v_corrupt", "restore_moments")])
def test_remediate_reruns_from_before_the_anomaly(lab, fault, remedy):
    run = lab / f"19-injection-{learner.LAB_LETTERS[fault]}"
    # the remedy it picks names the cause: refused on a sealed run, as diagnose and postmortem are
    assert_one_line_error(run_cli("remediate", str(run)), "not revealed yet", "--spoil")
    assert not (lab / f"{run.name}-remediated").exists()
    (lab / "REVEALED.json").write_text('{"revealed_at": "2000-01-01T00:00:00.000000Z", "revealed_by": "t"}')
    rep = remediate(run, remedy, force=True)
    out = lab / f"{run.name}-remediated"
    assert rep["remedy"] == remedy and (out / "remediation.json").exists()
    assert rep["from_checkpoint"]["step"] <= K  # the last checkpoint before the anomaly (in the baseline it forked from)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    orig = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(len(orig)))
    assert rows[:K] == orig[:K]
    assert json.loads((out / "manifest.json").read_text())["remedy"]["actions"]
    # one page: remediated vs original vs baseline
    page = json.loads(re.search(r'id="dashboard-data">(.*?)</script>', (out / "dashboard.html").read_text(), re.S)[1])
    assert page["name"] == out.name and [(r["name"], r["role"]) for r in page["runs"]][1:] == [
        ("18-baseline", "baseline"), (run.name, "compare")]
    assert K <= page["diffs"][1]["first_difference"] <= K + 1
    assert rep["dashboards"] == [str(out / "dashboard.html")]
    # a verdict against the baseline, on a named measure, by how much; the page shows it
    v = rep["verdict"]
    assert v["verdict"] in ("better", "no better", "worse") and v["measure"] == "final validation loss"
    assert v["by"] == pytest.approx(abs(v["after"]) - abs(v["before"])) and v["line"].startswith(v["verdict"])
    item = next(h for h in page["health"] if h["label"].startswith(f"remedy {remedy}"))
    assert item["detail"] == rep["conclusion"]["line"] and v["line"] in item["detail"]  # one verdict, the loss in it
    assert item["value"] == rep["conclusion"]["outcome"]
    assert _index_row(lab, out.name).startswith("§")  # the index was rebuilt: the remediation has its row
    assert rows[K + 2]["loss"] != orig[K + 2]["loss"]  # the remedy changed what follows K
    # both runs are measured against the baseline (whether the remedy helps is measured, not assumed:
    # docs/remediation.md records it)
    for m in (rep["measured_before"], rep["measured_after"]):
        assert m["baseline"] == "18-baseline" and isinstance(m["mean_loss_diff_after_K"], float)
    assert "mean loss diff" in rep["summary"]


# ---------------------------------------------------------------------------------------------------
# Traces: an interrupted reveal, a reveal or a spoil before the seal
# ---------------------------------------------------------------------------------------------------


def _fill_with_the_reference(workdir, name):
    learner.init_learner(name, workdir / "learners")
    d = workdir / "learners" / name / "phase-19"
    _, refs = learner.read_reference(learner.LABS["spike"])
    runs = {f: f"19-injection-{letter}" for f, letter in learner.LAB_LETTERS.items()}
    write_sections(d / "spike-diagnoses.md", _reference_sections(refs, runs))
    return d


def test_an_interrupted_reveal_has_logged_itself_before_it_unsealed_anything(lab, workdir, monkeypatch):
    from minitrain.lab.learner import revealing

    d = _fill_with_the_reference(workdir, "ana")
    exp = ["--experiments", str(lab)]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(revealing, "open_lab", interrupted)  # Ctrl-C at the first step that unseals
    proc = run_cli("reveal", "ana", *exp, cwd=workdir)
    assert proc.returncode == 130 and "run the same command again" in proc.stderr and "--resume" not in proc.stderr
    assert len(learner.read_history(d)[0]) == 1 and not (lab / "REVEALED.json").exists()
    monkeypatch.undo()
    # deleting the seal and re-sealing edited diagnoses is seen: the history was written first
    (d / "spike-diagnoses.seal.json").unlink()
    (d / "spike-diagnoses.md").write_text((d / "spike-diagnoses.md").read_text().replace("§7.A", "§7.A "))
    assert run_cli("reveal", "ana", *exp, cwd=workdir).returncode == 0
    assert "RE-SEALED AFTER A REVEAL" in run_cli("grade", "ana", *exp, cwd=workdir).stdout


def test_the_lab_folder_keeps_the_traces_a_learner_cannot_delete(lab, workdir):
    d = _fill_with_the_reference(workdir, "bo")
    exp = ["--experiments", str(lab)]
    assert run_cli("diagnose", str(lab / "19-injection-A"), "--spoil", cwd=workdir).returncode == 0
    assert run_cli("reveal", "bo", *exp, cwd=workdir).returncode == 0
    proc = run_cli("grade", "bo", *exp, cwd=workdir)
    assert "SPOILED BEFORE THE SEAL: 'diagnose' showed the answer for 19-injection-A" in proc.stdout
    # the learner deletes their seal, history and reveal, edits, and reveals again: REVEALED.json remains
    (lab / "SPOILED.json").unlink()
    for name in ("spike-diagnoses.seal.json", "reveal-history.jsonl", "reveal-spike.md"):
        (d / name).unlink()
    assert run_cli("reveal", "bo", *exp, cwd=workdir).returncode == 0
    proc = run_cli("grade", "bo", *exp, cwd=workdir)
    assert "3/3 correct" in proc.stdout and "REVEALED BEFORE THE SEAL" in proc.stdout and "by bo" in proc.stdout
    proc = run_cli("check", "bo", *exp, cwd=workdir)
    assert "[FAIL] spike-diagnoses.md sealed before the reveal" in proc.stdout and "REVEALED BEFORE" in proc.stdout


def test_a_break_is_reported_wrong_from_step_0_not_at_an_anomaly_step(lab, tmp_path):
    from minitrain.lab.learner import revealing

    exp = tmp_path / "experiments"
    shutil.copytree(lab / "18-baseline", exp / "19-break-it" / "03", ignore=shutil.ignore_patterns("checkpoints"))
    mapping = {"03": {"fault": "broken_mask", "overrides": {"seed": 7}}}
    text = revealing.measured_block("broken_mask", "19-break-it/03", learner.LABS["break-it"], exp, mapping)
    assert "the break is there from step 0" in text and "anomaly at step" not in text, text
