"""`minitrain export RUN --tensorboard DIR`: a run folder as TensorBoard event files, so it opens in
TensorBoard beside the user's other runs (through the `tensorboard` package's event-file writer; the
optional extra `minitrain[tensorboard]`).

DIR/<run name>/events.out.tfevents.* holds, per step:

    loss/train, loss/val, loss/regular, loss/irregular     the metrics row's losses
    lr                                                     the learning rate
    grad_norm/pre_clip, grad_norm/post_clip, grad_norm/clipped (1 when clipping engaged)
    logit_max, activation/layer_<i>, nonfinite
    batch/distinct_tokens, batch/top_token_share, batch/rare_share, batch/dup_rows
    <tensor name>/<statistic>                              per parameter tensor, one tag group per tensor
                                                           (statistics named in run/sinks.py TENSOR_STATS)

and, as text (the TensorBoard "Text" tab): `run/summary` at step 0 (model, config, status), `events/injection`
at the step an injection fired, `events/anomaly` at every step the field's spike detectors flag, and
`events/diagnosis` at the walker's anomaly step when the run carries a diagnosis.json (`minitrain diagnose
--write`; the export never walks a run itself, so it reveals nothing a sealed lab run withholds).
Values are the metrics file's own numbers; a null (non-finite) value is written as NaN, except `val_loss`
and the per-verb losses, whose null means "not measured at this step": they get no point there.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from minitrain.analysis.detectors import run_detectors
from minitrain.core.errors import UserError
from minitrain.run import reader
from minitrain.run.sinks import as_float, row_scalars

EVENTS_GLOB = "events.out.tfevents.*"

def export_tensorboard(run: Path, out_dir: Path, force: bool = False) -> dict:
    """Write RUN's metrics as event files under OUT_DIR/<run name>/; returns what was written. The file is
    written in a temporary folder beside it and moved into place whole."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise UserError("export --tensorboard needs the tensorboard package; install it with "
                        "pip install -e '.[tensorboard]'") from None
    r = reader.load_run(Path(run))
    rows = r["rows"]
    if not rows:
        raise UserError(f"{Path(run) / reader.METRICS} has no rows yet; nothing to export")
    dest = Path(out_dir) / r["name"]
    old = sorted(dest.glob(EVENTS_GLOB)) if dest.is_dir() else []
    if old and not force:
        raise UserError(f"{dest} already holds TensorBoard events; pass --force to replace them, or choose another DIR")
    dest.mkdir(parents=True, exist_ok=True)
    t0, per_step = _clock(r["manifest"], len(rows))
    text_meta = text_metadata.create_summary_metadata(display_name="", description="")

    def event(step: int, values) -> "event_pb2.Event":
        return event_pb2.Event(wall_time=t0 + step * per_step, step=step, summary=summary_pb2.Summary(value=values))

    def text_value(tag: str, text: str):
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto())
        return summary_pb2.Summary.Value(tag=tag, metadata=text_meta, tensor=tensor)

    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".export."))
    try:
        writer = EventFileWriter(str(tmp), filename_suffix=".minitrain")
        tags: set[str] = set()
        for row in rows:
            values = row_scalars(row)
            tags.update(tag for tag, _ in values)
            writer.add_event(event(int(row["step"]), [summary_pb2.Summary.Value(tag=t, simple_value=v)
                                                      for t, v in values]))
        texts = run_texts(r)
        for step, tag, text in texts:
            writer.add_event(event(step, [text_value(tag, text)]))
        writer.close()
        for path in old:
            path.unlink()
        for path in tmp.glob(EVENTS_GLOB):
            os.replace(path, dest / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"dir": str(dest), "steps": len(rows), "scalar_tags": len(tags), "texts": len(texts)}


def _clock(manifest: dict, n: int) -> tuple[float, float]:
    """Wall time of step 0 and seconds per step, from the manifest's start and end (1 s/step if unknown)."""

    def parse(s):
        try:
            return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except (TypeError, ValueError):
            return None

    start, end = parse(manifest.get("started")), parse(manifest.get("ended"))
    if start is None:
        return 0.0, 1.0
    return start, ((end - start) / n if end is not None and end > start else 1.0)


def run_texts(r: dict) -> list[tuple[int, str, str]]:
    """(step, tag, text) of a loaded run (reader.load_run): its summary at the first step, the injection's
    step, every step a field spike detector flags, and the diagnosis' anomaly step when the run has one."""
    manifest, rows = r["manifest"], r["rows"]
    cfg = reader.config_of(manifest)
    probe = manifest.get("probe") or {}
    lines = [f"**{r['name']}**: {manifest.get('status', 'unknown')}, {len(rows)} steps"]
    if probe:
        lines.append(f"recorded by the minitrain probe on {probe.get('model')} with {probe.get('optimizer')} "
                     f"({probe.get('kind')}); absent: {', '.join(probe.get('absent') or {}) or 'nothing'}")
    if cfg:
        plain = [k for k in sorted(cfg) if not isinstance(cfg[k], (dict, list))]
        lines.append("config: " + ", ".join(f"{k}={cfg[k]}" for k in plain))
    lines += [f"note: {n}" for n in [*r["notes"], r["data_note"]] if n]
    out = [(int(rows[0]["step"]), "run/summary", "\n\n".join(lines))]
    inj = manifest.get("injection") if isinstance(manifest.get("injection"), dict) else {}
    if inj.get("record") and isinstance(cfg.get("injection_step"), int):
        record = json.dumps(inj["record"], sort_keys=True)
        out.append((cfg["injection_step"], "events/injection", f"injection {cfg.get('injection')} fired: {record}"))
    steps = [int(row["step"]) for row in rows]
    flagged: dict[int, list[str]] = {}
    for name, idx in run_detectors(np.array([as_float(row.get("loss")) for row in rows]),
                                   np.array([as_float(row.get("grad_norm")) for row in rows])).items():
        for i in idx:
            flagged.setdefault(steps[i], []).append(name)
    for step in sorted(flagged):
        out.append((step, "events/anomaly", f"spike detectors flag step {step}: {', '.join(sorted(flagged[step]))}"))
    d = r["diagnosis"] or {}
    if isinstance(d.get("anomaly_step"), int):
        out.append((d["anomaly_step"], "events/diagnosis",
                    f"{d.get('leaf')} {d.get('title')} (cause {d.get('cause')}): {d.get('diagnosis')}"))
    return out
