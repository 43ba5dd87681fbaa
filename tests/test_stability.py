"""The stability check: the tree as data, its generated markdown, and the walker's verdict on real runs.

The real runs are the evaluation's quick suite (bench/eval_diagnosis.py --quick: 200-step runs, one clean
run per seed with every injection forked beside it); leaves that need long runs or faults the loop cannot
make are golden-tested on the clean run's metrics edited in one place.
"""
from __future__ import annotations

import copy
import importlib
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, run_cli
from minitrain.analysis import stability
from minitrain.core.errors import UserError
from minitrain.run import reader

sys.path.insert(0, str(ROOT / "bench"))
import eval_diagnosis  # noqa: E402


@pytest.fixture(scope="session")
def quick_suite(tmp_path_factory):
    """The quick evaluation suite, trained once and scored: {case name: Case}, plus the folder."""
    suite = tmp_path_factory.mktemp("diagnosis-suite")
    cases = eval_diagnosis.quick_suite()
    eval_diagnosis.ensure_runs(cases, suite, eval_diagnosis.QUICK_BASE, jobs=1)
    eval_diagnosis.evaluate(cases, suite)
    return suite, {c.folder: c for c in cases}


def run_of(quick_suite, prefix: str) -> tuple[Path, "eval_diagnosis.Case"]:
    suite, cases = quick_suite
    [name] = [n for n in cases if n.startswith(prefix)]
    return suite / name, cases[name]


# --- the tree as data ------------------------------------------------------------------------------


def test_tree_is_well_formed():
    ids = [it.id for s in stability.TREE for it in s.items]
    assert len(ids) == len(set(ids))
    assert [s.id for s in stability.TREE][:7] == ["§1", "§2", "§3", "§4", "§5", "§6", "§7"]
    assert stability.SECTIONS["§5"].title.lower().startswith("is the initialisation")
    leaves = [it for s in stability.TREE for it in s.items if isinstance(it, stability.Leaf)]
    assert set(stability.CAUSES) - {"unknown"} <= {lf.cause for lf in leaves}
    for lf in leaves:
        assert lf.diagnosis.endswith(".") and lf.remediation.endswith(".")
    for s in stability.TREE:
        for it in s.items:
            if isinstance(it, stability.Node):
                assert it.metric and it.panel and any(ch.isdigit() for ch in it.threshold), it.id
    # the course's §1 sends a bad step-0 loss to the init section
    assert stability.ITEMS["§1.1"].yes == "§5.1"


def test_every_leaf_is_reachable():
    reached, todo = set(), ["§1.1"]
    while todo:
        cur = todo.pop()
        if cur in reached:
            continue
        reached.add(cur)
        it = stability.ITEMS[cur]
        if isinstance(it, stability.Node):
            todo += [it.yes, it.no or stability.next_node(cur)]
        elif it.rule_out:  # a ruled-out leaf: the walk goes on, and may end at §8.B (unknown)
            todo += ([it.resume] if it.resume else []) + ["§8.B"]
    assert reached == set(stability.ITEMS)


def test_markdown_is_generated_and_committed_file_is_fresh():
    text = stability.render_markdown()
    assert text.splitlines()[0] == "# Stability check"
    assert stability.RULE in text.split("## §1")[0]  # the rule comes first
    for it_id, it in stability.ITEMS.items():
        assert f"**{it_id}" in text
        if isinstance(it, stability.Node):
            assert it.threshold in text
    committed = (ROOT / stability.MD_NAME).read_text()
    assert committed == text, "stability-check.md is stale: run 'minitrain stability-md'"


def test_stale_check_fails_on_an_edited_file(tmp_path):
    (tmp_path / stability.MD_NAME).write_text(stability.render_markdown() + "edited\n")
    proc = run_cli("stability-md", "--root", str(tmp_path), "--check")
    assert_one_line_error(proc, "stale")
    run_cli("stability-md", "--root", str(tmp_path), check=True)
    assert (tmp_path / stability.MD_NAME).read_text() == stability.render_markdown()


# --- golden verdicts on real runs ------------------------------------------------------------------


@pytest.mark.parametrize("prefix, leaf, cause", [
    ("seed1/clean", "§8.A", "healthy"),
    ("seed2/clean", "§8.A", "healthy"),
    ("seed1/scale-x50-", "§7.A", "gradient_explosion"),
    ("seed1/scale-x0.01-", "§7.B", "gradient_explosion"),
    ("seed1/v_corrupt-at-step0", "§8.A", "healthy"),  # at step 0 Adam has no state: no trace, no guess
    ("seed1/bad_batch-", "§4.A", "bad_batch"),
    ("seed1/v_corrupt-x100-", "§6.A", "optimizer_state_corruption"),
    ("seed1/v_corrupt-x0.01-", "§6.B", "optimizer_state_corruption"),
    ("seed1/break-init-x100", "§5.A", "bad_init"),
    ("seed1/break-no-warmup", "§2.C", "no_warmup"),
    ("seed1/break-nonfinite", "§3.A", "non_finite"),
    ("seed1/lr-constant", "§2.A", "lr_schedule"),
    ("seed1/lr-zero", "§2.B", "lr_schedule"),
])
def test_golden_leaf_on_real_runs(quick_suite, prefix, leaf, cause):
    run, case = run_of(quick_suite, prefix)
    result = stability.diagnose_run(run)
    assert (result["leaf"], result["cause"]) == (leaf, cause), result["path"]
    if case.kind == "injection" and cause != "healthy":
        assert result["anomaly_step"] == case.k
    assert result["path"][0] == "§1.1" and result["path"][-1] == leaf
    for key in ("leaf", "cause", "anomaly_step", "diagnosis", "remediation", "path", "evidence"):
        assert key in result


def test_v_corrupt_evidence_names_the_tensor_and_factor(quick_suite):
    run, case = run_of(quick_suite, "seed1/v_corrupt-x100-")
    ev = stability.diagnose_run(run)["evidence"]
    assert ev["tensor"] == "lm_head.bias"
    assert ev["v_factor"] == pytest.approx(100, rel=1e-3)
    assert ev["fitted_beta2"] == pytest.approx(0.95, abs=1e-4)
    assert ev["other_tensors_largest_factor_at_step"] < 1.01
    assert ev["r_ratio_at_step"] < 0.5  # g^2 / v moves the opposite way


def _strip_injection(src: Path, dst: Path) -> None:
    """A copy of a run with every trace of which injection ran removed (and another folder name)."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m.pop("injection", None)
    m["name"] = dst.name
    for key in list(m.get("config", {})):
        if key.startswith("injection"):
            m["config"].pop(key)
    (dst / "manifest.json").write_text(json.dumps(m))
    rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        r["injected"] = None
        r["batch"]["rows"] = [i if x == -1 else x for i, x in enumerate(r["batch"]["rows"])]  # -1 = injected row
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (dst / "config.yaml").unlink(missing_ok=True)


@pytest.mark.parametrize("prefix", ["seed1/scale-x50-", "seed1/bad_batch-", "seed1/v_corrupt-x100-"])
def test_walker_never_reads_the_injection_record(quick_suite, tmp_path, prefix):
    run, _ = run_of(quick_suite, prefix)
    blind = tmp_path / "01"
    _strip_injection(run, blind)
    assert stability.diagnose_run(blind) == stability.diagnose_run(run)


def test_baseline_adds_difference_curves(quick_suite):
    run, case = run_of(quick_suite, "seed1/bad_batch-")
    base = run.parent / "clean"
    result = stability.diagnose_run(run, base)
    cmp = result["evidence"]["baseline"]
    assert cmp["first_differing_step"] == case.k
    assert cmp["loss_minus_baseline"][str(case.k - 1)] == 0
    assert cmp["loss_minus_baseline"][str(case.k)] > 0.1
    assert result["cause"] == stability.diagnose_run(run)["cause"]  # the baseline is evidence, not a vote


# --- leaves the loop cannot make in a short run: the clean run's metrics, edited in one place ---------


def _edited(quick_suite, tmp_path, edit) -> Path:
    src, _ = run_of(quick_suite, "seed1/clean")
    dst = tmp_path / "run"
    dst.mkdir()
    for name in ("results.json", "tokenizer.json"):
        shutil.copy(src / name, dst / name)
    rows = [json.loads(line) for line in (src / "metrics.jsonl").read_text().splitlines()]
    edit(rows)
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _set(key, fn):
    def edit(rows):
        for r in rows:
            r[key] = fn(r)
    return edit


def test_leaf_not_untrained(quick_suite, tmp_path):
    run = _edited(quick_suite, tmp_path, lambda rows: rows[0].update(loss=3.0))
    assert stability.diagnose_run(run)["leaf"] == "§1.A"


def test_leaf_no_gradient_signal(quick_suite, tmp_path):
    run = _edited(quick_suite, tmp_path, lambda rows: rows[0].update(grad_norm=1e-5))
    assert stability.diagnose_run(run)["leaf"] == "§1.B"


def test_leaf_wrong_starting_loss_with_small_logits(quick_suite, tmp_path):
    run = _edited(quick_suite, tmp_path, lambda rows: rows[0].update(loss=7.2))
    result = stability.diagnose_run(run)
    assert result["leaf"] == "§5.B" and "§5.1" in result["path"]


def test_leaf_broken_mask(quick_suite, tmp_path):
    """Training loss far below the n-gram baseline while validation (causal) never gets below it: what a
    2000-step causal_mask=false run shows (the full suite checks that on real runs): the training loss collapses
    from the start, before validation's best."""
    def edit(rows):
        n = len(rows)
        for i, r in enumerate(rows):
            r["loss"] = 6.2 * math.exp(-i / 20) + 0.05
            if r["val_loss"] is not None:
                r["val_loss"] = 6.2 if i == 0 else (3.7 if i < n // 2 else 4.6)
    run = _edited(quick_suite, tmp_path, edit)
    result = stability.diagnose_run(run)
    assert (result["leaf"], result["cause"]) == ("§3.B", "broken_mask")



def test_leaf_target_leak_at_its_onset_before_validation_passes_ln_v(quick_suite, tmp_path):
    """A leak that starts mid-run is named at its onset: a loss jump far outside the run's own noise, after
    which validation climbs for good (here 1.5x its best, far below ln V); the same jump with validation back
    to normal is one bad batch, not a leak."""
    def edit(climb):
        def apply(rows):
            rows[120]["loss"] += 3.0
            best = min(r["val_loss"] for r in rows[:121] if r["val_loss"] is not None)
            for r in rows[121:]:
                if r["val_loss"] is not None:
                    r["val_loss"] = climb * best
        return apply
    (tmp_path / "leak").mkdir()
    (tmp_path / "batch").mkdir()
    leak = stability.diagnose_run(_edited(quick_suite, tmp_path / "leak", edit(1.5)))
    assert (leak["leaf"], leak["anomaly_step"]) == ("§3.D", 120)
    one_batch = stability.diagnose_run(_edited(quick_suite, tmp_path / "batch", edit(1.0)))
    assert one_batch["leaf"] != "§3.D"

def test_leaf_not_learning(quick_suite, tmp_path):
    run = _edited(quick_suite, tmp_path, _set("loss", lambda r: 6.25))
    assert stability.diagnose_run(run)["leaf"] == "§3.C"


def test_leaf_data_outlier_without_duplicates(quick_suite, tmp_path):
    def edit(rows):  # one batch's own loss and gradient up, the next batch normal: no duplicated row needed
        rows[120]["loss"] += 2.0
        rows[120]["grad_norm"] *= 3
    run = _edited(quick_suite, tmp_path, edit)
    result = stability.diagnose_run(run)
    assert (result["leaf"], result["anomaly_step"]) == ("§4.A", 120) and "§4.2" in result["path"]


def test_leaf_unexplained_spike_with_basic_telemetry(quick_suite, tmp_path):
    def edit(rows):
        for r in rows:
            r.pop("params", None)  # telemetry: basic
        rows[150]["grad_norm"] *= 60
    run = _edited(quick_suite, tmp_path, edit)
    result = stability.diagnose_run(run)
    assert (result["leaf"], result["anomaly_step"]) == ("§7.C", 150)
    s61 = next(p for p in result["walk"] if p["node"] == "§6.1")
    assert "not measured" in s61["measured"] and s61["not_measured"] == ["params.vm", "params.g"]
    assert {"§6.1", "§7.1", "§7.2"} <= set(result["not_measured"])


def test_clean_run_with_basic_telemetry_is_healthy(quick_suite, tmp_path):
    run = _edited(quick_suite, tmp_path, lambda rows: [r.pop("params", None) for r in rows])
    assert stability.diagnose_run(run)["cause"] == "healthy"


# --- bad input ---------------------------------------------------------------------------------------


def test_empty_metrics_is_a_clear_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="empty"):
        stability.diagnose_run(tmp_path)
    assert_one_line_error(run_cli("diagnose", str(tmp_path)), "empty")


@pytest.mark.parametrize("content, needle", [
    ('{"step": 0, "loss": 6.2, "lr": 0.1, "grad_norm": 3}\nnot json\n{"step": 2}\n', "corrupt"),
    ('{"step": 0, "lr": 0.1}\n', "not a minitrain metrics row"),
    ('{"step": 1, "loss": 6.2, "lr": 0.1, "grad_norm": 3}\n{"step": 0, "loss": 6.2, "lr": 0.1, "grad_norm": 3}\n',
     "unordered"),
    ("[1, 2]\n", "not a minitrain metrics row"),
])
def test_corrupt_metrics_are_a_clear_error(tmp_path, content, needle):
    (tmp_path / "metrics.jsonl").write_text(content)
    assert_one_line_error(run_cli("diagnose", str(tmp_path)), needle)


def test_missing_run_is_a_clear_error(tmp_path):
    assert_one_line_error(run_cli("diagnose", str(tmp_path / "nope")), "not a folder")
    assert_one_line_error(run_cli("diagnose", str(tmp_path)), "missing")


def test_partial_last_line_is_tolerated(quick_suite, tmp_path):
    src, _ = run_of(quick_suite, "seed1/clean")
    dst = tmp_path / "killed"
    shutil.copytree(src, dst)
    with open(dst / "metrics.jsonl", "a") as f:
        f.write('{"step": 200, "loss": 1.')
    result = stability.diagnose_run(dst)
    assert result["cause"] == "healthy" and "incomplete" in result["note"]


# --- the command ---------------------------------------------------------------------------------------


def test_cli_json_text_and_write(quick_suite):
    run, case = run_of(quick_suite, "seed1/scale-x50-")
    proc = run_cli("diagnose", str(run), "--json", "--write", check=True)
    out = json.loads(proc.stdout)
    assert (out["cause"], out["anomaly_step"]) == ("gradient_explosion", case.k)
    assert json.loads((run / "diagnosis.json").read_text())["leaf"] == out["leaf"]
    text = run_cli("diagnose", str(run), "--baseline", str(run.parent / "clean"), check=True).stdout
    for needle in ("§1.1", "§7.A", "diagnosis:", "remediation:", "threshold", "against baseline", "re-walk from §1"):
        assert needle in text


def test_eval_report_scores_the_quick_suite(quick_suite):
    suite, cases = quick_suite
    cs = list(cases.values())
    res = eval_diagnosis.results_of(cs, [], 0.0, ["quick"])
    text = eval_diagnosis.render_report(res)
    assert "| split |" in text and "| walker |" in text and "Margins of the tuned thresholds" in text
    assert all(eval_diagnosis.correct(c) for c in cs if not c.borderline), \
        [(c.name, c.result["cause"], c.result["anomaly_step"]) for c in cs if not eval_diagnosis.correct(c)]
    assert eval_diagnosis.failures(res) == []
    rows = {r["detector"]: r for r in res["detectors"]}
    assert rows["walker"]["quiet_runs_flagged"][0] == 0
    assert set(rows) == {d.name for d in importlib.import_module("minitrain.analysis.detectors").DETECTORS} | {"walker"}
    # every named verdict carries a confidence; the batch of 2 (outside the vocabulary) names nothing
    assert all(c.result["confidence"]["level"] in ("exact", "strong", "moderate", "weak")
               for c in cs if c.result["cause"] not in eval_diagnosis.NO_NAME)
    assert cases["quick-oov/oov-batch-2"].result["cause"] in eval_diagnosis.NO_NAME


def test_eval_fails_loudly_on_a_wrong_name_or_a_missing_run(quick_suite, tmp_path):
    suite, cases = quick_suite
    case = copy.deepcopy(cases["seed1/clean"])
    res = eval_diagnosis.results_of([case], ["seed9/gone"], 0.0, ["quick"])
    assert eval_diagnosis.failures(res) == ["missing run: seed9/gone"]
    case.result["cause"] = "bad_batch"  # a clean run named a registered cause
    res = eval_diagnosis.results_of([case], [], 0.0, ["quick"])
    assert eval_diagnosis.failures(res) == ["wrong name: seed1/clean"]
    # a suite folder without the runs: every run missing, exit 1 (nothing trained with --no-train)
    assert eval_diagnosis.main(["--quick", "--no-train", "--suite", str(tmp_path / "empty")]) == 1


def test_verdicts_say_how_strongly_the_deciding_rule_was_crossed(quick_suite):
    run, case = run_of(quick_suite, "seed1/scale-x50-")
    out = stability.diagnose_run(run)
    conf = out["confidence"]
    assert conf["rule"] == "§7.1" and "σ" in conf["units"] and conf["level"] == "strong"
    assert conf["crossing"] == pytest.approx(conf["measured"] / conf["threshold"])
    assert "confidence:" in stability.format_report(out, "x")
    bad, _ = run_of(quick_suite, "seed1/bad_batch-")
    conf = stability.diagnose_run(bad)["confidence"]
    assert conf["rule"] == "§4.1" and conf["level"] in ("strong", "moderate")
    clean, _ = run_of(quick_suite, "seed1/clean")
    conf = stability.diagnose_run(clean)["confidence"]
    assert conf["level"] == "n/a" and conf["nearest_rule"]


# --- issue 12: the faults beyond the lab's three, rule-outs, unknown --------------------------------


def test_leaf_lr_spike_on_the_logged_lr(quick_suite, tmp_path):
    def edit(rows):
        for r in rows[100:110]:
            r["lr"] *= 10
    result = stability.diagnose_run(_edited(quick_suite, tmp_path, edit))
    assert (result["leaf"], result["cause"], result["anomaly_step"]) == ("§2.D", "lr_spike", 100)
    assert result["evidence"]["multiplier"] == pytest.approx(10, rel=0.05) and result["evidence"]["steps"] == 10


def test_update_ratio_question_on_long_runs_only():
    """§2.5 reads the median update-to-weight ratio at the peak LR over a run of 1000+ steps (ur measured on
    detail steps)."""
    from minitrain.analysis.checks import check_update_ratio
    from minitrain.analysis.evidence import Evidence

    def ev(n, ur):
        return Evidence([{"step": i, "loss": 1.0, "lr": 1e-3, "grad_norm": 1.0,
                          "params": {"w": {"g": 1.0, "vm": 1.0, **({"ur": ur} if i % 10 == 0 else {})}}}
                         for i in range(n)])
    assert check_update_ratio(ev(1200, 0.008)).matched  # x8 the healthy 1e-3
    assert not check_update_ratio(ev(1200, 0.001)).matched
    short = check_update_ratio(ev(200, 0.05))
    assert not short.matched and "judged on runs of 1000+ steps" in short.shown
    # a cosine to 0: the LR, and with it the ratio, is low over most of the run; read at the peak it is not
    import numpy as np

    rows = ev(1200, 0.008).rows
    for r in rows[400:]:
        r["lr"] = 1e-5
        if "ur" in r["params"]["w"]:
            r["params"]["w"]["ur"] = 8e-5
    decayed = Evidence(rows)
    assert float(np.nanmedian(decayed.update_ratio)) < 1e-3 and check_update_ratio(decayed).matched


def test_leaf_stuck_loader_from_repeated_batches(quick_suite, tmp_path):
    def edit(rows):
        for r in rows[101:106]:
            r["batch"] = json.loads(json.dumps(rows[100]["batch"]))
    run = _edited(quick_suite, tmp_path, edit)
    result = stability.diagnose_run(run)
    assert (result["leaf"], result["cause"], result["anomaly_step"]) == ("§4.B", "stuck_loader", 100)
    # a blind run has no row ids: the token statistics alone still show it
    (tmp_path / "blind").mkdir()
    blind = _edited(quick_suite, tmp_path / "blind", lambda rows: (edit(rows), [r["batch"].update(
        rows=[None] * len(r["batch"]["rows"])) for r in rows]))
    assert stability.diagnose_run(blind)["leaf"] == "§4.B"


def test_unknown_names_the_two_closest_leaves_and_what_ruled_them_out(quick_suite, tmp_path):
    def edit(rows):  # the loss jumps and stays up for a while: not one bad batch, and nothing else fits
        for r in rows[120:126]:
            r["loss"] += 2.0
        rows[120]["grad_norm"] *= 3
    result = stability.diagnose_run(_edited(quick_suite, tmp_path, edit))
    assert (result["leaf"], result["cause"], result["anomaly_step"]) == ("§8.B", "unknown", 120)
    closest = {c["leaf"]: c for c in result["closest"]}
    assert len(closest) == 2 and "§4.A" in closest
    assert "§4.2 answered no" in closest["§4.A"]["ruled_out_by"] and "next step" in closest["§4.A"]["ruled_out_by"]
    text = stability.format_report(result, "run")
    assert "closest: §4.A" in text


def test_a_ruled_out_leaf_is_not_named(quick_suite, tmp_path):
    """Training loss collapses and validation climbs (the broken-mask question answers yes), but validation ends
    above ln V: a mask lets training peek and its causal validation stays near the n-gram baseline, so the mask
    is ruled out and the walk goes on to the target-leak question."""
    def edit(rows):
        for i, r in enumerate(rows):
            if i > 40:
                r["loss"] = 0.05
        for step, val in ((50, 4.0), (100, 5.5), (150, 7.0)):
            rows[step]["val_loss"] = val
    result = stability.diagnose_run(_edited(quick_suite, tmp_path, edit))
    asked = next(p for p in result["walk"] if p["node"] == "§3.2")
    assert asked["answer"] == "yes" and asked["ruled_out"]["leaf"] == "§3.B"
    assert "validation ends above ln V" in asked["ruled_out"]["by"][0]
    assert (result["leaf"], result["cause"]) == ("§3.D", "target_leak")
    assert result["decided_by"] == "§3.4"


def test_clipping_off_changes_the_explosion_texts(quick_suite, tmp_path):
    run, case = run_of(quick_suite, "seed1/scale-x50-")
    on = stability.diagnose_run(run)
    assert on["case"] == "clipping on" and "clipping cut the update" in on["diagnosis"]
    from conftest import small_config
    from minitrain import loop

    loop.train(small_config("grad_clip=0"), tmp_path / "clean")
    loop.train(small_config("grad_clip=0", "injection=scale", "injection_step=90"), tmp_path / "scale")
    off = stability.diagnose_run(tmp_path / "scale")
    assert (off["leaf"], off["case"], off["anomaly_step"]) == ("§7.A", "clipping off", 90)
    assert "clipping cut" not in off["diagnosis"] and "clipping is off" in off["diagnosis"]
    assert stability.diagnose_run(tmp_path / "clean")["cause"] == "healthy"
    md = stability.render_markdown()
    assert "clipping off: diagnosis:" in md and "clipping on: diagnosis:" in md


# --- one policy for the walker and the page: a missing signal is "not measured", a bug raises -------------------


def _copy_run(src: Path, dst: Path, edit=None) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    if edit is not None:
        rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
        edit(rows)
        (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def _buggy(ev):
    return len(ev.loss) + "steps"  # a bug in a check: TypeError, whatever the run


@pytest.fixture
def buggy_dup_rows_check():
    """§4.1's check replaced by one with a bug; the one Node object the walker (ITEMS) and the page (TREE) share."""
    node = stability.ITEMS["§4.1"]
    original = node.check
    object.__setattr__(node, "check", _buggy)  # Node is frozen: the tree is data, edited here for one test
    yield node
    object.__setattr__(node, "check", original)


def test_a_check_that_raises_is_a_bug_in_the_walker_and_the_page(small_baseline, tmp_path, buggy_dup_rows_check):
    from minitrain.analysis import readings

    run = _copy_run(small_baseline, tmp_path / "run")
    with pytest.raises(TypeError):
        stability.diagnose_run(run)
    with pytest.raises(TypeError):
        readings.read(run)
    with pytest.raises(TypeError):
        readings.assess(reader.load_run(run), sealed=False)


def test_a_missing_signal_reads_not_measured_in_the_walker_and_the_page(small_baseline, tmp_path,
                                                                       buggy_dup_rows_check):
    """§4.1 needs batch.dup_rows: on a run that never logged batch composition its check is not run at all
    (the buggy one would raise), and the walker and the page say the same words."""
    from minitrain.analysis import readings

    run = _copy_run(small_baseline, tmp_path / "run", lambda rows: [r.pop("batch", None) for r in rows])
    walked = next(p for p in stability.diagnose_run(run)["walk"] if p["node"] == "§4.1")
    shown = next(q for q in readings.read(run)["questions"] if q["id"] == "§4.1")
    assert walked["measured"] == shown["measured"] == "not measured (this run has no batch.dup_rows)"
    assert walked["answer"] == shown["answer"] == "no"
    assert walked["not_measured"] == shown["not_measured"] == ["batch.dup_rows"]
