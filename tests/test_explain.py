"""`minitrain explain`: counterfactual replays of the small lab's runs (conftest.small_lab, K = 60), cut a few
steps after the anomaly (counterfactual.AFTER shortened to keep the suite fast)."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import SMALL_K, assert_one_line_error, run_cli
from minitrain.analysis import counterfactual
from minitrain.lab import spoilers
from minitrain.run import reader

S = SMALL_K


@pytest.fixture
def lab(small_lab, tmp_path, monkeypatch):
    """A revealed copy of the small lab (the page then shows the replays' item)."""
    monkeypatch.setattr(counterfactual, "AFTER", 5)
    exp = shutil.copytree(small_lab, tmp_path / "experiments")
    spoilers.mark_revealed(exp, "test")
    return exp


def test_a_bad_batch_is_data_driven_and_the_swap_removes_it(lab):
    run = lab / "19-injection-B"
    proc = run_cli("explain", str(run), "--jobs", "1", check=True)
    assert f"data-driven: the batch at {S} alone causes it" in proc.stdout
    assert "identical replay: bit-identical to the recorded rows" in proc.stdout
    rep = reader.read_json(run / "diagnosis.json", "diagnosis")["counterfactuals"]
    assert rep["key"] == "data" and rep["agrees_with_walker"] is True and rep["reproduced"] is True
    rows = {r["name"]: r for r in rep["table"]}
    assert rows["identical"]["verdict"]["still_there"] is True
    assert rows["batch_at_S"]["verdict"]["removed"] is True
    assert rows["batches_before"]["verdict"]["still_there"] is True  # only the batch at S matters
    # skip_batch acts on the update at S: judged on the update and the loss after S, not the batch's duplicates
    remedy_line = next(line for line in rep["lines"] if line.startswith("the leaf's remedy (skip_batch)"))
    assert "acts on the update at S" in remedy_line and "does not remove it" not in remedy_line, remedy_line
    assert "mean loss excess over the steps after S" in remedy_line and "|\u0394w|/|w| at S" in remedy_line
    assert rows["remedy"]["measure"]["update_at_S"] < rows["identical"]["measure"]["update_at_S"]
    assert (run / "explain" / f"s{S}-batch_at_S" / "metrics.jsonl").exists()
    assert f"replays at step {S} (minitrain explain)" in (run / "dashboard.html").read_text()
    # cached: a second call trains nothing
    again = run_cli("explain", str(run), "--jobs", "1", check=True)
    assert "0 replays trained" in again.stdout
    # a recorded row changed after the checkpoint: the identical replay no longer reproduces it, said first
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if json.loads(line)["step"] == S + 2)
    row = json.loads(lines[i])
    row["loss"] += 1e-3
    lines[i] = json.dumps(row, separators=(",", ":")) + "\n"
    (run / "metrics.jsonl").write_text("".join(lines))
    changed = run_cli("explain", str(run), "--jobs", "1", check=True)
    first = changed.stdout.split("conclusion: ", 1)[1]
    assert first.startswith(f"the identical replay does NOT reproduce the recorded rows (first difference at step {S + 2})")


def test_a_corrupted_second_moment_is_state_driven_and_the_remedy_removes_it(lab):
    rep = json.loads(run_cli("explain", str(lab / "19-injection-C"), "--jobs", "1", "--json", check=True).stdout)
    assert rep["key"] == "state_at" and rep["agrees_with_walker"] is True
    rows = {r["name"]: r for r in rep["table"]}
    assert rows["remedy"]["remedy"] == "restore_moments" and rows["remedy"]["verdict"]["removed"] is True
    assert rows["batch_at_S"]["verdict"]["still_there"] is True
    assert "the leaf's remedy (restore_moments) removes it" in rep["lines"]


def test_explain_refuses_a_sealed_run_and_says_which_retention_would_have_allowed_it(small_lab, tmp_path):
    exp = shutil.copytree(small_lab, tmp_path / "experiments")
    assert_one_line_error(run_cli("explain", str(exp / "19-injection-B")), "--spoil")
    for step in reader.rows_by_step(exp / "18-baseline"):  # no checkpoint at or before K anywhere
        shutil.rmtree(exp / "18-baseline" / "checkpoints" / f"step-{step:06d}", ignore_errors=True)
    assert_one_line_error(run_cli("explain", str(exp / "19-injection-B"), "--spoil"),
                          f"ckpt_keep_steps=[{S}]", "ckpt_keep_last=0")
