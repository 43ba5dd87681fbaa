import hashlib
import json
import math
import shutil

import pytest

from conftest import assert_one_line_error, run_cli, small_config
from minitrain import loop, trainer
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


def test_metrics_rows_wait_for_their_block_and_are_on_disk_before_an_offset_or_digest_is_given(tmp_path):
    """train's writer keeps rows until `flush_every` seconds have passed since its last block, or until
    flush, tell, digest or close: the offset and sha256 a checkpoint records always describe rows on disk."""
    rows = [{"step": i, "loss": 1 / (i + 3), "params": {"w": {"g": 0.5, "vm": 1.2e-06}}} for i in range(5)]
    lines = [files.dumps_row(r).encode() for r in rows]
    p = tmp_path / "metrics.jsonl"
    w = files.MetricsWriter(p, flush_every=3600)
    for row in rows[:3]:
        w.write(row)
    assert p.read_bytes() == b""
    assert w.tell() == len(b"".join(lines[:3])) and p.read_bytes() == b"".join(lines[:3])
    w.write(rows[3])
    assert w.digest() == hashlib.sha256(b"".join(lines[:4])).hexdigest() == hashlib.sha256(p.read_bytes()).hexdigest()
    w.flushed_at -= 3600  # the block's time has passed: the next row goes out with it
    w.write(rows[4])
    assert p.read_bytes() == b"".join(lines)
    w.write({"step": 5, "loss": math.nan})
    w.close()  # the end writes what waits, still strict JSON
    assert p.read_bytes() == b"".join(lines) + files.dumps_row({"step": 5, "loss": math.nan}).encode()
    assert b"NaN" not in p.read_bytes()
    q = tmp_path / "probe.jsonl"  # flush_every 0 (the probe's): every row on disk as it comes
    w = files.MetricsWriter(q)
    w.write(rows[0])
    assert q.read_bytes() == lines[0]
    w.close()


def test_non_finite_loss_stops_cleanly_and_keeps_rows(tmp_path):
    out = tmp_path / "diverged"
    res = trainer.train(small_config("lr_max=1e4", "lr_min=1", "warmup_steps=0"), out)
    assert res["status"] == "non_finite"
    rows, note = reader.read_metrics(out / "metrics.jsonl")
    assert note is None and rows[-1]["step"] == res["first_nonfinite_step"] < 119
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


# --- one rule for the steps of metrics.jsonl: strictly increasing (run/reader.py says why) ------------

ROW = '{{"step":{},"loss":6.0,"lr":0.001,"grad_norm":1.0}}\n'


@pytest.mark.parametrize("steps, line, needle", [
    ([0, 1, 2, 2, 3], 4, "step 2 after step 2"),  # a repeated step
    ([0, 1, 2, 1, 2], 4, "step 1 after step 2"),  # two files joined: the steps go back
], ids=["repeated", "unordered"])
def test_repeated_or_unordered_steps_are_refused_by_every_reader(tmp_path, steps, line, needle):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(ROW.format(s) for s in steps))
    for read in (lambda: reader.read_metrics(run / "metrics.jsonl"), lambda: reader.load_run(run),
                 lambda: reader.rows_by_step(run)):
        with pytest.raises(UserError, match=f"line {line} has {needle}"):
            read()
    for command in ("diagnose", "dashboard"):  # the walker and the page read the same rows
        assert_one_line_error(run_cli(command, str(run)), f"line {line} has {needle}", "repeated or unordered")


@pytest.mark.parametrize("line", ['[1, 2]', '{"loss": 6.0}', '{"step": "3"}', '{"step": true}'])
def test_a_row_without_an_integer_step_is_refused(tmp_path, line):
    path = tmp_path / "metrics.jsonl"
    path.write_text(ROW.format(0) + line + "\n" + ROW.format(2))
    with pytest.raises(UserError, match="line 2 is not a minitrain metrics row"):
        reader.read_metrics(path)


def test_a_resume_rewrites_the_tail_without_repeating_a_step(tmp_path, small_baseline):
    """Why the rule can be strict: a run killed after step 89 (rows past its checkpoint at 80 on disk,
    the last one half written) resumes from step 80 and writes each step once."""
    run = tmp_path / "run"
    shutil.copytree(small_baseline, run)
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (run / "metrics.jsonl").write_bytes(b"".join(lines[:90]) + lines[90][:20])
    for step in files.list_checkpoints(run):
        if step > 80:
            shutil.rmtree(files.checkpoint_dir(run, step))
    (run / "results.json").unlink()
    manifest = reader.read_json(run / "manifest.json", "manifest")
    files.atomic_write_json(run / "manifest.json", {**manifest, "status": "running"})
    trainer.resume(run)
    rows, note = reader.read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(120)) and note is None
    assert (run / "metrics.jsonl").read_bytes() == (small_baseline / "metrics.jsonl").read_bytes()


# --- the run's other files, through the reader -----------------------------------------------------


def test_config_and_tokenizer_of_a_run(tmp_path, small_baseline):
    from minitrain.core.config import build_config

    assert build_config(reader.read_config(small_baseline)).hash() == small_config().hash()
    tok, note = reader.tokenizer_of(small_baseline)
    assert note is None and tok["model"]["vocab"]
    assert reader.tokenizer_of(tmp_path) == (None, None)
    (tmp_path / "tokenizer.json").write_text('{"model": ')  # a damaged file is refused, never assumed
    with pytest.raises(UserError, match="tokenizer.json is damaged"):
        reader.tokenizer_of(tmp_path)
    with pytest.raises(UserError, match="config file .*config.yaml not found"):
        reader.read_config(tmp_path)


def test_a_fork_copies_exactly_the_rows_its_checkpoint_verified(small_baseline):
    path = files.checkpoint_dir(small_baseline, 60)
    _, _, meta = files.load_checkpoint(path)
    prefix = files.verify_metrics_prefix(small_baseline / "metrics.jsonl", meta, path)
    assert prefix == (small_baseline / "metrics.jsonl").read_bytes()[:meta["metrics_bytes"]]
    assert [json.loads(line)["step"] for line in prefix.splitlines()] == list(range(60))


@pytest.mark.parametrize("content, says", [('{"summary": "loss back within 0.02 nats"}', "loss back within 0.02 nats"),
                                           ('{"summary": ', "(remediation.json is unreadable")])
def test_the_postmortem_reads_the_remediated_run_through_the_reader(tmp_path, small_baseline, content, says):
    run = tmp_path / "18-baseline"
    shutil.copytree(small_baseline, run, ignore=shutil.ignore_patterns("checkpoints"))
    (tmp_path / "18-baseline-remediated").mkdir()
    (tmp_path / "18-baseline-remediated" / "remediation.json").write_text(content)
    proc = run_cli("postmortem", str(run), "--out", str(tmp_path / "pm.md"))
    assert proc.returncode == 0, proc.stderr
    assert f"Measured in `18-baseline-remediated`: {says}" in (tmp_path / "pm.md").read_text()
