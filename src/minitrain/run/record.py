"""THE writer of a run's record: manifest.json (what the run is, where it was made, how it is going) and
results.json (how it ended). minitrain's trainer, the probe and `minitrain import` all write through here, so
the three kinds of run folder share one schema (docs/metrics.md); run/reader.py reads it back, older folders
included.

    manifest.json   schema_version, name, status, started (once), and the writer's fields: seed, config,
                    injection, and the environment (run/provenance.py) of a run trained here, or the `probe` /
                    `imported` block saying what recorded it; `ended` once it has ended
    results.json    status, steps_done, final_train_loss, final_val_loss, final_val_ppl, ngram_val_loss,
                    ngram_val_ppl (null when unknown), val_loss_margin_vs_ngram when both are known, and at a
                    non-finite value `non_finite` ({step, what}: run/nonfinite.py) with `first_nonfinite_step`
"""
from __future__ import annotations

import math
import os
import uuid
from pathlib import Path

from minitrain import SCHEMA_VERSION
from minitrain.run.files.atomic import atomic_write_json
from minitrain.core.provenance import now_iso
from minitrain.run.reader import MANIFEST, RESULTS, read_json

VAL_PPL_CAP = 50.0  # a validation loss at or past this is a diverged run: its perplexity is not reported


def write_manifest(out: Path, status: str, fields: dict) -> dict:
    """Write RUN/manifest.json: the manifest written before (a resume, a probe learning its batch size) with
    FIELDS and STATUS over it; `started` is set the first time. Returns what was written."""
    path = Path(out) / MANIFEST
    old = read_json(path, "manifest") if path.exists() else {}
    manifest = {**old, "schema_version": SCHEMA_VERSION, "name": Path(os.path.abspath(out)).name, **fields,
                "status": status}
    manifest.setdefault("started", now_iso())
    manifest.setdefault("run_id", uuid.uuid4().hex)  # what a shared MLflow store knows this run by (run/sinks.py)
    atomic_write_json(path, manifest)
    return manifest


def results(status: str, steps_done: int | None, final_train_loss: float | None, final_val_loss: float | None,
            ngram: dict | None = None, non_finite: dict | None = None) -> dict:
    """results.json's object. `ngram`: the n-gram baseline ({val_loss, val_ppl}) when the run has one;
    `non_finite`: {step, what} of the first non-finite value (run/nonfinite.py), if any."""
    val = final_val_loss if final_val_loss is not None and math.isfinite(final_val_loss) else None
    res = {
        "status": status,
        "steps_done": steps_done,
        "final_train_loss": final_train_loss,
        "final_val_loss": val,
        "final_val_ppl": math.exp(val) if val is not None and val < VAL_PPL_CAP else None,
        "ngram_val_loss": ngram["val_loss"] if ngram else None,
        "ngram_val_ppl": ngram["val_ppl"] if ngram else None,
    }
    if val is not None and ngram:
        res["val_loss_margin_vs_ngram"] = ngram["val_loss"] - val
    if non_finite:
        res["first_nonfinite_step"] = non_finite["step"]
        res["non_finite"] = non_finite
    return res


def write_results(out: Path, res: dict) -> None:
    atomic_write_json(Path(out) / RESULTS, res)
