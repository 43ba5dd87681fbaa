"""Metrics sinks (run/sinks.py): TensorBoard and MLflow mirrors of metrics.jsonl, read back through each
library's own reader (tensorboard's EventAccumulator, MLflow's MlflowClient), while the metrics bytes stay
those of the same run made without sinks in this session (conftest.small_lab)."""
from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest
import torch

from conftest import SMALL_K, run_cli, small_args
from minitrain.run import reader, sinks

FLUSH_POLLS = 600  # looks at the event file before a test gives up on the periodic flush (2 s apart)


def tb_scalars(folder: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)} if tag in acc.Tags()["scalars"] else {}


def mlflow_history(run: Path, metric: str) -> dict[int, float]:
    import os

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run / sinks.MLFLOW_DIR).resolve().as_uri())
    exp = client.get_experiment_by_name(sinks.MLFLOW_EXPERIMENT)
    (found,) = client.search_runs([exp.experiment_id])
    assert found.data.tags[sinks.MLFLOW_RUN_TAG] == run.name
    return {m.step: m.value for m in client.get_metric_history(found.info.run_id, metric)}


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6)  # TensorBoard and MLflow keep float32 / float64 of the row's value


def test_a_forked_run_logs_to_tensorboard_and_mlflow_and_keeps_its_bytes(small_baseline, small_lab, tmp_path):
    exp = tmp_path / "experiments"
    shutil.copytree(small_baseline, exp / "18-baseline")
    run = exp / "19-injection-A"
    run_cli("train", "--out", str(run), "--injection", "scale", "--injection-step", str(SMALL_K),
            *small_args("log=tensorboard,mlflow"), check=True)
    without_sinks = (small_lab / "19-injection-A" / "metrics.jsonl").read_bytes()
    assert (run / "metrics.jsonl").read_bytes() == without_sinks  # sinks change no byte
    assert json.loads((run / "manifest.json").read_text())["forked_from"]["checkpoint_step"] == SMALL_K
    rows = reader.read_metrics(run / "metrics.jsonl")[0]
    # every row, the donor's rows before K included (replayed from metrics.jsonl when the sinks open)
    for tag, key in (("loss/train", "loss"), ("grad_norm/pre_clip", "grad_norm"), ("lr", "lr")):
        tb = tb_scalars(run / sinks.TENSORBOARD_DIR, tag)
        ml = mlflow_history(run, tag)
        assert sorted(tb) == sorted(ml) == [r["step"] for r in rows], tag
        assert all(close(tb[r["step"]], r[key]) and close(ml[r["step"]], r[key]) for r in rows), tag
    val = tb_scalars(run / sinks.TENSORBOARD_DIR, "loss/val")
    assert sorted(val) == [r["step"] for r in rows if r.get("val_loss") is not None]
    name = next(iter(rows[0]["params"]))  # per-tensor statistics: at the steps telemetry measured them
    vx = tb_scalars(run / sinks.TENSORBOARD_DIR, f"{name}/adam_v_max")
    assert sorted(vx) == [r["step"] for r in rows if "vx" in (r.get("params") or {}).get(name, {})] and len(vx) > 10


def test_an_unknown_or_missing_sink_is_one_line_before_any_write(tmp_path):
    r = run_cli("train", "--out", str(tmp_path / "r"), *small_args("log=tensorboard,wandb"))
    assert r.returncode == 2 and "unknown sink wandb" in r.stderr and "\n" not in r.stderr.strip()
    assert not (tmp_path / "r").exists()
    with pytest.raises(Exception, match="unknown sink"):
        sinks.parse_log("jsonl,csv")
    assert sinks.parse_log("jsonl") == () and sinks.parse_log("tensorboard, jsonl,tensorboard") == ("tensorboard",)


def test_the_probe_writes_tensorboard_live_and_mlflow(tmp_path):
    """A foreign loop with the probe: the events are readable while it trains (before close)."""
    from minitrain.probe import attach

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    run = tmp_path / "mine"
    probe = attach(model, opt, run, log="tensorboard,mlflow", config={"lr": 1e-2})

    def step():
        ids = torch.randint(0, 16, (4, 6))
        loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        probe.log(loss, ids)
        opt.step()

    for _ in range(5):
        step()
    for _ in range(FLUSH_POLLS):  # flushed every 2 s, not at close
        if len(tb_scalars(run / sinks.TENSORBOARD_DIR, "loss/train")) >= 5:
            break
        time.sleep(0.1)  # a poll interval: the loop ends on the condition, or after FLUSH_POLLS looks
    assert len(tb_scalars(run / sinks.TENSORBOARD_DIR, "loss/train")) == 5, "never flushed while the run was open"
    assert sorted(mlflow_history(run, "loss/train")) == [0, 1, 2, 3, 4]
    for _ in range(3):
        step()
    probe.close()
    rows = reader.read_metrics(run / "metrics.jsonl")[0]
    tb = tb_scalars(run / sinks.TENSORBOARD_DIR, "loss/train")
    assert sorted(tb) == list(range(8)) and all(close(tb[r["step"]], r["loss"]) for r in rows)
    assert sorted(mlflow_history(run, "grad_norm/pre_clip")) == list(range(8))


# --- issue 37: a shared store, a full disk, a store that does not answer -----------------------------------


def store_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(sinks.MLFLOW_EXPERIMENT)
    return client.search_runs([exp.experiment_id]) if exp else []


def mirrored(run: Path) -> None:
    """Open the MLflow sink on RUN (a run folder with a manifest), write one row, close it."""
    from minitrain.run import record

    if not (run / reader.MANIFEST).exists():
        run.mkdir(parents=True)
        record.write_manifest(run, "running", {"config": {}})
    s = sinks.open_sinks("mlflow", run, {})
    s.write({"step": 0, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0})
    s.close()


def test_a_shared_mlflow_store_keeps_every_folders_run(tmp_path, monkeypatch):
    """Same folder names elsewhere (a/r1, b/r1; the lab's 19-blind/01 and 19-break-it/01) are other runs, and a
    name MLflow's filter language would choke on is only a tag."""
    uri = (tmp_path / "store").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    for run in ("a/r1", "b/r1", "it's"):
        mirrored(tmp_path / run)
    assert sorted(r.data.tags[sinks.MLFLOW_RUN_TAG] for r in store_runs(uri)) == ["it's", "r1", "r1"]
    mirrored(tmp_path / "a" / "r1")  # a resume of a/r1 replaces its own run only
    found = store_runs(uri)
    ids = {json.loads((tmp_path / p / "manifest.json").read_text())["run_id"] for p in ("a/r1", "b/r1", "it's")}
    assert len(found) == 3 and {r.data.tags[sinks.MLFLOW_ID_TAG] for r in found} == ids


def test_a_full_disk_in_the_mlflow_sink_is_one_line_and_the_run_resumes(tmp_path, monkeypatch):
    import errno

    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from conftest import assert_one_line_error

    real, calls = MlflowClient.log_batch, []

    def full(self, run_id, metrics=(), *args, **kwargs):
        if metrics:
            calls.append(1)
            if len(calls) > 30:
                try:
                    raise OSError(errno.ENOSPC, "No space left on device")
                except OSError as e:
                    raise MlflowException(str(e))  # as MLflow's file store does: the OSError its context
        return real(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", full)
    run = tmp_path / "r"
    assert_one_line_error(run_cli("train", "--out", str(run), *small_args("log=mlflow")), "disk full",
                          f"minitrain train --resume {run}")
    monkeypatch.setattr(MlflowClient, "log_batch", real)  # space freed
    for f in (p for p in (run / sinks.MLFLOW_DIR).rglob("*") if p.is_file() and "metrics" in p.parts):
        f.write_text(f.read_text() + "17000")  # what the full disk left: a line cut short
    run_cli("train", "--resume", str(run), check=True)
    assert reader.manifest_of(run)["status"] == "finished"
    rows = reader.read_metrics(run / "metrics.jsonl")[0]
    assert sorted(mlflow_history(run, "loss/train")) == [r["step"] for r in rows]
    (run / "explain").mkdir()  # every folder a run's own commands write is theirs to replace
    (run / sinks.TENSORBOARD_DIR).mkdir()
    run_cli("train", "--out", str(run), "--force", *small_args("steps=5"), check=True)


def test_an_mlflow_server_that_does_not_answer_is_one_line_before_any_work(tmp_path):
    import socket

    from conftest import assert_one_line_error

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli("train", "--out", str(tmp_path / "r"), *small_args("log=mlflow"),
                   env={"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    assert_one_line_error(proc, "the MLflow tracking server does not answer")
    assert not (tmp_path / "r").exists()
