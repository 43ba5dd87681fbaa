import json

import pytest

from conftest import small_config
from minitrain import loop
from minitrain.run import files, reader
from minitrain.core.errors import UserError


def test_atomic_write_leaves_no_temp_files_and_normal_permissions(tmp_path):
    p = tmp_path / "a" / "b.json"
    files.atomic_write_json(p, {"x": 1})
    files.atomic_write_json(p, {"x": 2})
    assert json.loads(p.read_text()) == {"x": 2}
    assert [q.name for q in p.parent.iterdir()] == ["b.json"]
    assert p.stat().st_mode & 0o044  # readable by others, unlike mkstemp's 0600


def test_read_metrics_tolerates_a_partial_last_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step":0,"loss":1.0}\n{"step":1,"loss":0.9}\n{"step":2,"lo')
    rows, note = reader.read_metrics(p)
    assert [r["step"] for r in rows] == [0, 1] and "step 1" in note
    p.write_text('{"step":0}\ngarbage\n{"step":2}\n')
    with pytest.raises(UserError, match="line 2 is corrupt"):
        reader.read_metrics(p)


def test_non_finite_loss_stops_cleanly_and_keeps_rows(tmp_path):
    out = tmp_path / "diverged"
    res = loop.train(small_config("lr_max=1e4", "lr_min=1", "warmup_steps=0"), out)
    assert res["status"] == "non_finite"
    rows, note = reader.read_metrics(out / "metrics.jsonl")
    assert note is None and rows[-1]["step"] == res["stopped_at_step"] < 119
    assert rows[-1]["loss"] is None or rows[-1]["grad_norm"] is None
    assert json.loads((out / "manifest.json").read_text())["status"] == "non_finite"
    # every line is strict JSON (no NaN literals a browser could not parse)
    for line in (out / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_checkpoint_round_trip_restores_weights_and_moments(small_baseline):
    run = loop.build_run(small_config())
    path = files.checkpoint_dir(small_baseline, 60)
    weights, opt, meta = files.load_checkpoint(path)
    files.restore(run.model, run.opt, weights, opt, path)
    assert meta["step"] == 60 and meta["config_hash"] == small_config().hash()
    for name, p in run.model.named_parameters():
        assert p.detach().equal(weights[name])
        st = run.opt.state[p]
        assert st["exp_avg_sq"].equal(opt[f"exp_avg_sq.{name}"]) and float(st["step"]) == 60.0


def test_checkpoints_hold_no_pickle(small_baseline):
    for f in (small_baseline / "checkpoints").rglob("*"):
        if f.is_file():
            assert f.suffix in (".safetensors", ".json"), f
            assert not f.read_bytes().startswith(b"\x80")  # pickle protocol header
