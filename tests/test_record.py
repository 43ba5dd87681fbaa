"""run/record.py, THE writer of a run's manifest.json and results.json: minitrain's runs, probe runs and imported
runs share its schema; and the checkpoint checks of run/files/checkpoints.py on values of the wrong shape."""
from __future__ import annotations

import json
import shutil

import pytest

from minitrain.core.errors import UserError
from minitrain.run import files, record
from minitrain.run.importer import import_run

ALWAYS = {"status", "steps_done", "final_train_loss", "final_val_loss", "final_val_ppl", "ngram_val_loss",
          "ngram_val_ppl"}


def test_results_hold_one_schema_with_the_non_finite_step_and_what():
    plain = record.results("finished", 10, 3.0, 2.5)
    assert set(plain) == ALWAYS and plain["ngram_val_loss"] is None
    full = record.results("non_finite", 8, None, float("nan"), {"val_loss": 4.0, "val_ppl": 54.6},
                          {"step": 7, "what": "logits"})
    assert set(full) == ALWAYS | {"first_nonfinite_step", "non_finite"}  # no margin: no finite val loss
    assert full["first_nonfinite_step"] == 7 and full["non_finite"]["what"] == "logits"
    assert record.results("finished", 10, 3.0, 2.5, {"val_loss": 4.0, "val_ppl": 54.6})["val_loss_margin_vs_ngram"] == 1.5


def test_the_manifest_keeps_what_was_written_and_its_first_start(tmp_path):
    first = record.write_manifest(tmp_path / "run", "running", {"seed": 1, "probe": {"absent": {}}})
    again = record.write_manifest(tmp_path / "run" / ".", "finished", {"ended": "later"})
    assert again["started"] == first["started"] and again["probe"] == {"absent": {}} and again["seed"] == 1
    assert again["name"] == "run" and again["status"] == "finished" and again["schema_version"] == first["schema_version"]


def test_a_trained_and_an_imported_run_write_the_same_results_keys(tmp_path, small_baseline):
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps({"step": s, "loss": 3.0 - s / 10, "lr": 1e-3,
                                           "grad_norm": "nan" if s == 4 else 1.0}) + "\n" for s in range(6)))
    import_run(history, tmp_path / "imported")
    imported = json.loads((tmp_path / "imported" / "results.json").read_text())
    trained = json.loads((small_baseline / "results.json").read_text())
    assert set(imported) == ALWAYS | {"first_nonfinite_step", "non_finite"}
    assert imported["non_finite"] == {"step": 4, "what": "gradient norm"}
    assert set(trained) - {"seconds_this_session", "val_loss_margin_vs_ngram"} == ALWAYS


def test_a_checkpoint_manifest_of_the_wrong_shape_is_one_line(tmp_path, small_baseline):
    run = tmp_path / "run"
    shutil.copytree(small_baseline, run)
    path = files.checkpoint_dir(run, 60)
    meta = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**meta, "metrics_bytes": "many"}))
    with pytest.raises(UserError, match="damaged manifest.json \\('metrics_bytes' is str\\)"):
        files.load_checkpoint(path)


@pytest.mark.parametrize("line", [b'{"loss": 1.0}', b"[1, 2]", b'{"step": "0"}', b"{not json", b"\xff\xfe"])
def test_rows_without_their_step_before_a_checkpoint_without_checksums_are_refused(tmp_path, small_baseline, line):
    _, _, meta = files.load_checkpoint(files.checkpoint_dir(small_baseline, 60))
    rows = (small_baseline / "metrics.jsonl").read_bytes()[:meta["metrics_bytes"]].splitlines(keepends=True)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(line + b"\n" + b"".join(rows[1:]))
    old = {**meta, "metrics_sha256": None, "metrics_bytes": metrics.stat().st_size}
    with pytest.raises(UserError, match="does not hold steps 0..59"):
        files.verify_metrics_prefix(metrics, old, tmp_path)
    metrics.write_bytes(b"".join(rows))
    assert files.verify_metrics_prefix(metrics, {**old, "metrics_bytes": len(b"".join(rows))}, tmp_path)
