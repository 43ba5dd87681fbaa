"""One judgment per concept: the page (the dashboard's data), the walker, the post-mortem and the lab report read
the same run the same way. One test per concept: the course's spike flag, the recovery after K, and "v back
within 10%" (with its tensor) for a corruption that shrinks v, where a rule that picks the largest ratio
would name another tensor than the one corrupted."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import small_config
from minitrain import loop
from minitrain.analysis import compare, definitions, detectors, signature, stability
from minitrain.core.fmt import fmt
from minitrain.lab import postmortem
from minitrain.views import dashboard

B_K, C_K = 40, 40
C_TENSOR = "blocks.0.attn.qkv.weight"


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html", "*.md", "signature.json"))
    return dst


@pytest.fixture(scope="module")
def lab(small_baseline, tmp_path_factory) -> Path:
    """A small lab of its own: the shared baseline copied beside a bad batch at K=40 and a x0.01 corruption of
    one tensor's Adam v at K=40."""
    exp = tmp_path_factory.mktemp("agreement")
    copy_run(small_baseline, exp / "18-baseline")
    loop.train(small_config("injection=bad_batch", f"injection_step={B_K}"), exp / "19-injection-B")
    loop.train(small_config("injection=v_corrupt", f"injection_step={C_K}", "injection_factor=0.01",
                            f"injection_param={C_TENSOR}"), exp / "19-injection-C")
    return exp


def post_mortem(run: Path, baseline: Path | None) -> str:
    return postmortem.render(run, baseline, postmortem.template_path().read_text())


def test_the_spike_flag_is_one_on_the_page_in_the_post_mortem_and_in_the_detector_table(lab, tmp_path):
    """Two loss bumps on the baseline: at step 70 (70 steps of history, short of the rule's 100) and at step
    110 (a full window). Every reader flags the same steps: 110 and not 70."""
    run = copy_run(lab / "18-baseline", tmp_path / "bumped")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for step in (70, 110):
        rows[step]["loss"] += 3.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    page = dashboard.build_payload(run)
    table = detectors.run_detectors([r["loss"] for r in rows], [r["grad_norm"] for r in rows])["course"]
    flagged = [rows[i]["step"] for i in table]
    assert 110 in flagged and 70 not in flagged
    assert page["spikes"] == postmortem.evidence(run, None)["spike_flags"] == flagged
    health = {h["label"]: h for h in page["health"]}["course spike flags"]
    assert health["value"].endswith(", ".join(map(str, flagged))) and definitions.ROLLING_RULE in health["detail"]
    assert f"steps {', '.join(map(str, flagged))}" in post_mortem(run, None)


def test_recovery_is_one_in_the_lab_report_the_post_mortem_and_the_reveal(lab):
    run, base = lab / "19-injection-B", lab / "18-baseline"
    report = signature.report(lab)  # the lab report: writes each injection run's signature.json
    sig = json.loads((run / "signature.json").read_text())
    measured = compare.measure(run, base, B_K)  # what the learner's reveal and `remediate` read
    assert isinstance(sig["recovery_steps"], int)
    assert measured["recovery_steps"] == sig["recovery_steps"]
    row = next(line for line in report.splitlines() if line.startswith("| 19-injection-B | bad_batch |"))
    assert f"| {fmt(sig['recovery_steps'])} |" in row
    assert f"steps to recover (until {definitions.RECOVERY_RULE}): {fmt(sig['recovery_steps'])}" in post_mortem(run, base)


def test_v_back_is_one_for_a_corruption_that_shrinks_v(lab):
    """x0.01 on one tensor's v: the lab report, the reveal's measurements, the walker's evidence, the page's top
    mover of v and the post-mortem all name that tensor, and count the same steps until its v is back."""
    run, base = lab / "19-injection-C", lab / "18-baseline"
    sig = signature.write(run, base)
    measured = compare.measure(run, base, C_K)
    verdict = stability.diagnose_run(run)
    page = dashboard.build_payload(run, base)
    assert verdict["cause"] == "optimizer_state_corruption" and verdict["anomaly_step"] == C_K
    assert (sig["v_param"] == measured["v_jump_param"] == verdict["evidence"]["tensor"]
            == page["movers"]["vm"][0]["name"] == C_TENSOR)
    # row K logs v after K's own update: x0.01 then plus (1 - beta2) g^2, still far below the baseline's
    assert sig["v_ratio_at_k"] == measured["v_jump_ratio_at_K"] < 1 / definitions.V_JUMP
    assert isinstance(sig["v_decay_steps"], int) and sig["v_decay_steps"] > 0
    assert measured["v_steps_to_within_10pct"] == sig["v_decay_steps"]
    assert f"Adam v of {C_TENSOR} x{fmt(sig['v_ratio_at_k'], 3)} the baseline at K" in post_mortem(run, base)
