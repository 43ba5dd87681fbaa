import json
import shutil

from conftest import small_config
from minitrain import trainer
from minitrain.run import files


def test_a_zclip_run_resumes_byte_identically(tmp_path):
    """ZClip keeps an EMA of the gradient norm: it travels in the checkpoint, so a resume continues it."""
    cfg = small_config("remedy=zclip", "remedy_zclip_z=1.0", "remedy_zclip_warmup=5")
    whole = tmp_path / "whole"
    trainer.train(cfg, whole)
    manifest = json.loads((whole / "manifest.json").read_text())
    assert manifest["remedy"]["action_count"] > 0  # the remedy acted after the resume point too
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    for step in files.list_checkpoints(cut):
        if step > 40:
            shutil.rmtree(files.checkpoint_dir(cut, step))
    manifest["status"] = "running"  # as if killed after the checkpoint at step 40
    (cut / "manifest.json").write_text(json.dumps(manifest))
    trainer.resume(cut)
    assert (cut / "metrics.jsonl").read_bytes() == (whole / "metrics.jsonl").read_bytes()
    assert json.loads((cut / "manifest.json").read_text())["remedy"]["action_count"] == manifest["remedy"]["action_count"]


# ---------------------------------------------------------------------------------------------------
# The verdict against noise and the re-walk after the fix
# ---------------------------------------------------------------------------------------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from conftest import SMALL_K  # noqa: E402
from minitrain.analysis import compare, fixcheck  # noqa: E402
from minitrain.lab.remediate import remediate  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "remediation.md"


def test_the_noise_band_is_the_measured_one():
    """REMEDY_NOISE is the band bench/remediation_noise.py measured and wrote into docs/remediation.md."""
    block = DOC.read_text().split("<!-- remediation-noise:begin -->")[1].split("<!-- remediation-noise:end -->")[0]
    measured = json.loads(re.search(r"^band: (\{.*\})$", block, re.M).group(1))
    assert measured == pytest.approx(compare.REMEDY_NOISE, rel=1e-9)
    assert set(compare.REMEDY_NOISE) == {key for key, _ in compare.REMEDY_MEASURES}


@pytest.mark.parametrize("before,after,verdict", [
    (0.00017, 0.00044, "no better"),  # B's skip_batch: 0.00027 nats, well inside what clean forks show
    (0.00067, 0.0000079, "no better"),  # C's targeted restore: 99% closer, still inside the band
    (0.01, 0.001, "better"), (0.001, -0.01, "worse"),  # beyond the band, either sign of the difference
])
def test_better_or_worse_only_beyond_the_noise_of_clean_runs(before, after, verdict):
    noise = compare.REMEDY_NOISE["final_val_loss_diff"]
    v = compare.remedy_verdict({"final_val_loss_diff": before}, {"final_val_loss_diff": after})
    assert v["verdict"] == verdict and v["noise"] == noise and v["line"].startswith(verdict)
    assert ("within" if verdict == "no better" else "beyond") + f" the noise of clean runs ({noise:.2g} nats)" in v["line"]


def test_fix_outcome_judges_the_steps_after_the_fix_point():
    before = {"leaf": "§6.A", "cause": "optimizer_state_corruption", "anomaly_step": 500}
    again = {"leaf": "§6.A", "cause": "optimizer_state_corruption", "anomaly_step": 700, "judged_from": 502}
    assert fixcheck.fix_outcome(before, again)["outcome"] == "not fixed"
    clean = {"leaf": "§8.A", "cause": "healthy", "anomaly_step": None, "judged_from": 502}
    assert fixcheck.fix_outcome(before, clean) == {
        "outcome": "fixed", "line": "fixed: the walk after the fix point (steps 502..) no longer finds §6.A "
                                    "(optimizer_state_corruption)"}
    early = {"leaf": "§6.C", "cause": "optimizer_setting", "anomaly_step": 450, "judged_from": 0}
    assert fixcheck.fix_outcome(before, early)["outcome"] == "undecided"  # it stopped before reaching the fault


def test_a_successful_fix_is_reported_as_one(small_lab, tmp_path):
    """C (Adam's v of one tensor x100, which persists) remediated by restoring that tensor's moments: the whole
    re-run still shows the corruption at K (logged before the restore at K+1), the walk after the fix point
    does not, and remediate reports it fixed; the unremediated run judged the same way is not."""
    exp = tmp_path / "experiments"
    shutil.copytree(small_lab, exp)
    (exp / "REVEALED.json").write_text('{"revealed_at": "2000-01-01T00:00:00.000000Z", "revealed_by": "t"}')
    rep = remediate(exp / "19-injection-C", force=True)
    assert rep["remedy"] == "restore_moments" and rep["fix_step"] == SMALL_K + 1
    assert (rep["walker_after"]["leaf"], rep["walker_after"]["anomaly_step"]) == ("§6.A", SMALL_K)
    assert rep["walker_after_fix"]["judged_from"] == SMALL_K + 2
    assert rep["fix"]["outcome"] == "fixed", rep["fix"]
    unfixed = fixcheck.walk_after_fix(exp / "19-injection-C", exp / "18-baseline", SMALL_K + 1, SMALL_K)
    assert fixcheck.fix_outcome(rep["walker_before"], unfixed)["outcome"] == "not fixed"


def test_remediate_gives_one_verdict_and_the_page_marks_agree():
    """B skipped: the bad batch is gone after the fix point, the walk stops at §6.B at K+1 (Adam's v missed the
    skipped update), the loss is no better than the noise. One verdict says all three, marked warn, and the
    page's walker item (the whole re-run, which keeps the original's fault rows) is not a red verdict beside it."""
    from minitrain.analysis import health

    before = {"leaf": "§4.A", "cause": "bad_batch", "anomaly_step": 500}
    after = {"leaf": "§6.B", "cause": "optimizer_state_corruption", "anomaly_step": 501, "judged_from": 501}
    against = {"verdict": "no better", "line": "no better on final validation loss: 0.00027 nats further"}
    fix = fixcheck.fix_outcome(before, after)
    one = fixcheck.conclusion(fix, after, against)
    assert one["outcome"] == "fault gone, a side effect" and one["mark"] == "warn"
    assert "§6.B" in one["line"] and "no better" in one["line"] and not one["line"].startswith("fixed")
    rep = {"remedy": "skip_batch", "baseline": "18-baseline", "verdict": against, "fix": fix, "conclusion": one}
    assert [(i["value"], i["verdict"]) for i in health.remedy_items(rep)] == [("fault gone, a side effect", "warn")]
    walker = {"label": "stability check", "value": "§4.A bad batch at step 500", "verdict": "bad", "detail": ""}
    assert health.whole_rerun(walker)["verdict"] == "info"
    clean = fixcheck.conclusion(fixcheck.fix_outcome(before, {"leaf": "§8.A", "cause": "healthy"}),
                                {"leaf": "§8.A", "cause": "healthy"}, against)
    assert (clean["outcome"], clean["mark"]) == ("fixed", "ok")
