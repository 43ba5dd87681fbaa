"""Metrics sinks: where a run's rows go besides metrics.jsonl, chosen by the config's `log` field.

    --set log=tensorboard,mlflow        (default: jsonl alone)

metrics.jsonl is always written (files.MetricsWriter) and stays the source of truth: every other sink is a
mirror of it, written live as each row is written, and rebuilt from it when a run starts, forks or resumes.
So a sink never changes a metrics byte, and what a sink shows at step S is what metrics.jsonl holds up to S.

    jsonl          metrics.jsonl (always on; naming it is allowed)
    tensorboard    RUN/tensorboard/events.out.tfevents.*, through the tensorboard package's own event-file
                   writer (`minitrain[tensorboard]`); open it with `tensorboard --logdir EXPERIMENTS`
    mlflow         an MLflow run through MLflow's own client (`minitrain[mlflow]`): in the tracking store
                   MLFLOW_TRACKING_URI names, else a local file store RUN/mlruns (`mlflow ui
                   --backend-store-uri RUN/mlruns`); the run's public config as params

The scalars are the ones `minitrain export --tensorboard` writes (row_scalars: one tag per row field, per
tensor statistic and per layer), so a live TensorBoard and an exported one read alike. The cost of each sink
against metrics.jsonl alone is measured in docs/benchmarks.md ("Metrics sinks").
"""
from __future__ import annotations

import math
import os
import shutil
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from minitrain.core.config import LOG_SINKS as SINKS
from minitrain.core.errors import UserError
from minitrain.run import reader

TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
MLFLOW_EXPERIMENT = "minitrain"
MLFLOW_RUN_TAG = "minitrain.run"  # the run folder's name, for people reading the store
# the manifest's run_id: what a resumed run finds its MLflow run again by. Unique to the run, so that in a
# shared store the same folder name elsewhere (a/r1 and b/r1, the lab's 19-blind/01 and 19-break-it/01) is
# another run, never replaced
MLFLOW_ID_TAG = "minitrain.run_id"
STORE_TIMEOUT_S = 5.0  # how long `--set log=mlflow` waits for a tracking server before any work
MLFLOW_BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics per call

# metrics-row key of a per-tensor statistic -> its TensorBoard tag suffix (docs/metrics.md defines them)
TENSOR_STATS = {"g": "grad_norm_pre_clip", "u": "update_norm", "ur": "update_to_weight", "vm": "adam_v_mean",
                "vx": "adam_v_max", "vn": "adam_v_norm", "r": "rms_g2_over_v_hat"}
ROW_SCALARS = {"loss": "loss/train", "val_loss": "loss/val", "loss_regular": "loss/regular",
               "loss_irregular": "loss/irregular", "lr": "lr", "grad_norm": "grad_norm/pre_clip",
               "grad_norm_clipped": "grad_norm/post_clip", "logit_max": "logit_max", "nonfinite": "nonfinite"}
BATCH_SCALARS = ("distinct_tokens", "top_token_share", "rare_share", "dup_rows")


def row_scalars(row: dict) -> list[tuple[str, float]]:
    """(tag, value) of every scalar a metrics row holds; absent keys give no tag, nulls give NaN (except the
    validation and per-verb losses, whose null means "not measured at this step": no point there)."""
    out = []
    for key, tag in ROW_SCALARS.items():
        if key in row and (row[key] is not None or key in ("loss", "grad_norm", "grad_norm_clipped")):
            out.append((tag, as_float(row[key])))
    if "clipped" in row:
        out.append(("grad_norm/clipped", 1.0 if row["clipped"] else 0.0))
    for i, a in enumerate(row.get("act") or []):
        out.append((f"activation/layer_{i}", as_float(a)))
    batch = row.get("batch") if isinstance(row.get("batch"), dict) else {}
    for key in BATCH_SCALARS:
        if key in batch:
            out.append((f"batch/{key}", as_float(batch[key])))
    for name, stats in (row.get("params") or {}).items():
        for key, value in (stats or {}).items():
            out.append((f"{name}/{TENSOR_STATS.get(key, key)}", as_float(value)))
    for name, value in (row.get("sigma") or {}).items():
        out.append((f"{name}/spectral_norm", as_float(value)))
    return out


def as_float(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def parse_log(value: str) -> tuple[str, ...]:
    """The sinks a `log` value names besides jsonl ("tensorboard,mlflow" -> ("tensorboard", "mlflow"))."""
    names = [n.strip() for n in str(value or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in SINKS]
    if unknown:
        raise UserError(f"log={value!r}: unknown sink {', '.join(unknown)}; choose from {', '.join(SINKS)} "
                        "(comma-separated, e.g. --set log=tensorboard,mlflow)")
    return tuple(dict.fromkeys(n for n in names if n != "jsonl"))


def check_installed(names: tuple[str, ...]) -> None:
    """Fail before any work when a named sink's library is missing (one line that says what to install)."""
    import importlib.util

    for name, module in (("tensorboard", "tensorboard"), ("mlflow", "mlflow")):
        if name in names and importlib.util.find_spec(module) is None:
            raise UserError(f"log={name} needs the {module} package; install it with pip install -e '.[{name}]'")
    if "mlflow" in names:
        check_store(os.environ.get("MLFLOW_TRACKING_URI", ""))


def check_store(uri: str) -> None:
    """An MLflow tracking server that does not answer is one line before any work, not MLflow's minutes of
    retries then a traceback: one connection, with a short timeout. (A file store needs no check.)"""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname or "", port), timeout=STORE_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        raise UserError(f"MLFLOW_TRACKING_URI={uri}: the MLflow tracking server does not answer "
                        f"({getattr(e, 'strerror', None) or e}); start it, or unset MLFLOW_TRACKING_URI to log "
                        "to the run's own mlruns/") from None


def mlflow_failure(e: Exception, run: Path) -> Exception:
    """What an MLflow client call that failed becomes: the OSError underneath when a write failed (MLflow
    wraps it), which the trainer turns into the disk's one line as for any other file; else one line."""
    cause = e
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return cause
    return UserError(f"the MLflow sink of {run} failed: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}")


class TensorBoardSink:
    """Scalars into RUN/tensorboard/ with tensorboard's EventFileWriter, flushed every `flush_secs`."""

    def __init__(self, run: Path, flush_secs: float = 2.0):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.event_pb2, self.summary_pb2 = event_pb2, summary_pb2
        self.writer = EventFileWriter(str(Path(run) / TENSORBOARD_DIR), flush_secs=flush_secs,
                                      filename_suffix=".minitrain")
        # A session that starts at step 0: TensorBoard's reader drops what older event files hold from that
        # step on (a resumed or forced run's earlier session), then this one replays metrics.jsonl.
        self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=0,
                                              session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

    def write(self, row: dict) -> None:
        values = [self.summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in row_scalars(row)]
        self.writer.add_event(self.event_pb2.Event(wall_time=time.time(), step=int(row["step"]),
                                                   summary=self.summary_pb2.Summary(value=values)))

    def close(self) -> None:
        self.writer.close()


def clear_local_runs(store: Path) -> None:
    """The runs in a run's own store (RUN/mlruns: they mirror its metrics.jsonl alone), deleted before it is
    rebuilt, so that what a full disk or a kill left half-written there never stops a resume. The store's
    folders stay (MLflow keeps one store object per URI, which expects them)."""
    if not store.is_dir() or store.is_symlink():
        return
    for exp in store.iterdir():
        for child in exp.iterdir() if exp.is_dir() and not exp.is_symlink() else ():
            if child.is_dir() and not child.is_symlink() and (child / "metrics").is_dir():
                shutil.rmtree(child)


class MLflowSink:
    """Metrics into one MLflow run through MLflow's client (one log_batch per row). Every failure of the
    client is one line (mlflow_failure): a full disk reads as every other writer's."""

    def __init__(self, run: Path, params: dict):
        self.run = Path(run)
        try:
            self.open(params)
        except Exception as e:  # noqa: BLE001 - MLflow's own errors, sorted by mlflow_failure
            raise self.failure(e) from None

    def failure(self, e: Exception) -> Exception:
        from mlflow.exceptions import MlflowException

        if isinstance(e, (MlflowException, OSError)):
            return mlflow_failure(e, self.run)
        return e  # anything else is a bug, and surfaces

    def open(self, params: dict) -> None:
        local = self.run / MLFLOW_DIR
        uri = os.environ.get("MLFLOW_TRACKING_URI") or local.resolve().as_uri()
        if uri.startswith("file:"):  # MLflow 3 asks for this opt-in before it uses a local file store
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            clear_local_runs(local)
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self.Metric = Metric
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(MLFLOW_EXPERIMENT)
        name = self.run.resolve().name
        key = str(reader.manifest_of(self.run).get("run_id") or "")
        if key.isalnum():  # this run's earlier MLflow run (a resume) is replaced: rebuilt from metrics.jsonl
            for old in self.client.search_runs([exp_id], filter_string=f"tags.`{MLFLOW_ID_TAG}` = '{key}'"):
                self.client.delete_run(old.info.run_id)
        tags = {MLFLOW_RUN_TAG: name, **({MLFLOW_ID_TAG: key} if key else {})}
        self.run_id = self.client.create_run(exp_id, run_name=name, tags=tags).info.run_id
        plain = [Param(k, str(v)[:500]) for k, v in sorted(params.items()) if not isinstance(v, (dict, list))]
        for i in range(0, len(plain), 100):
            self.client.log_batch(self.run_id, params=plain[i:i + 100])

    def write(self, row: dict) -> None:
        now, step = int(time.time() * 1000), int(row["step"])
        # MLflow's metric names allow "/", "." and "_"; a NaN is kept (MLflow stores it)
        metrics = [self.Metric(t, v, now, step) for t, v in row_scalars(row)]
        try:
            for i in range(0, len(metrics), MLFLOW_BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i:i + MLFLOW_BATCH])
        except Exception as e:  # noqa: BLE001 - sorted by failure()
            raise self.failure(e) from None

    def close(self, status: str = "FINISHED") -> None:
        try:
            self.client.set_terminated(self.run_id, status)
        except Exception as e:  # noqa: BLE001 - sorted by failure()
            raise self.failure(e) from None


class Sinks:
    """The sinks of one run besides metrics.jsonl: write(row) after each metrics row, close() at the end."""

    def __init__(self, sinks: list):
        self.sinks = sinks

    def write(self, row: dict) -> None:
        for s in self.sinks:
            s.write(row)

    def close(self) -> None:
        for s in self.sinks:
            s.close()

    def __bool__(self) -> bool:
        return bool(self.sinks)


def open_sinks(log: str, run: Path, params: dict | None = None) -> Sinks:
    """The sinks `log` names, opened for the run folder and filled with the rows metrics.jsonl holds already
    (a fork's donor rows, a resume's rows before its checkpoint), so each mirrors the file from step 0."""
    names = parse_log(log)
    if not names:
        return Sinks([])
    check_installed(names)
    run = Path(run)
    path = run / reader.METRICS
    rows = reader.read_metrics(path)[0] if path.exists() else []
    sinks = Sinks([TensorBoardSink(run) if name == "tensorboard" else MLflowSink(run, params or {}) for name in names])
    for row in rows:
        sinks.write(row)
    return sinks
