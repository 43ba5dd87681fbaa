"""`minitrain import SOURCE --out RUN`: a run made elsewhere as a minitrain run folder, so that `diagnose`,
`dashboard`, `index` and `serve` read it.

SOURCE is one of:
    a TensorBoard log folder (or one events.out.tfevents.* file)   read with tensorboard's EventAccumulator
    a .csv history (W&B's exported run history, a Lightning CSVLogger metrics.csv, ...)
    a .jsonl history (one JSON object per logged step: nanoGPT's wandb.log dicts, W&B's history export)
    a Hugging Face trainer_state.json, or nanoGPT's printed log (run/formats.py)

Each tag (or column) is mapped to a minitrain signal by its usual names (TAGS; case, "-" and spaces do not
matter); `--map TAG=SIGNAL` maps any other. A row is written per step that logged a training loss; a
validation loss logged at a step without one goes to the last training step at or before it. A source
without a training loss is refused with the tags it has, so that the user maps it; one without an LR or a
gradient norm is imported without them, and the walker says which checks that leaves untestable. The
vocabulary size, logging interval and batch size come from a flag, else from the files beside the log (HF's
config.json, trainer_state.json), else stay unknown (never assumed). Everything else minitrain measures (per-tensor
statistics, batch composition, activations, the n-gram baseline) is absent from an imported run, and the
walker answers "not measured" where a question reads it; the manifest's `imported.absent` lists them.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.run import files, formats, reader, record
from minitrain.run.nonfinite import non_finite_in
from minitrain.core.provenance import now_iso

SIGNALS = ("loss", "lr", "grad_norm", "val_loss", "grad_norm_clipped", "logit_max")
REQUIRED = ("loss",)
# usual names of each signal in other trainers' logs (compared after norm_tag): HF Trainer (train/*), Lightning
# (train_loss, lr-Adam, grad_2.0_norm_total), fairseq (gnorm), Composer (loss/train/total, lr-DecoupledAdamW/group0),
# torchtitan (loss_metrics/global_avg_loss, grad_norm), Megatron (lm loss, learning-rate, grad-norm), DeepSpeed
# (Train/Samples/*: its steps are samples, so a DeepSpeed run's logging interval reads in samples)
TAGS = {
    "loss": ("loss", "train/loss", "train_loss", "loss/train", "training_loss", "train/loss_step", "trainloss",
             "train/lm_loss", "lm_loss", "train_loss_step", "loss/train/total", "loss_metrics/global_avg_loss",
             "lm loss", "train/samples/train_loss", "train/samples/loss"),
    "lr": ("lr", "learning_rate", "train/lr", "train/learning_rate", "lr/group_0", "optimizer/lr", "lr-adamw",
           "lr-adam", "learningrate", "lr-sgd", "lr-decoupledadamw/group0", "lr-adamw/group0", "learning-rate",
           "train/samples/lr", "lr_step"),
    "grad_norm": ("grad_norm", "train/grad_norm", "gradient_norm", "grad_norm/pre_clip", "grad-norm", "total_norm",
                  "train/gradient_norm", "grad_norm/total", "optimizer/grad_norm", "gradnorm", "gnorm",
                  "grad_2.0_norm_total", "grad_2.0_norm/total", "l2-norm/grad/global", "train/samples/grad_norm"),
    "val_loss": ("val_loss", "val/loss", "eval/loss", "eval_loss", "validation_loss", "loss/val", "valid/loss",
                 "validation/loss", "val/lm_loss", "valloss"),
    "grad_norm_clipped": ("grad_norm/post_clip", "grad_norm_clipped", "clipped_grad_norm"),
    "logit_max": ("logit_max", "logits/max", "max_logit"),
}
STEP_COLUMNS = ("step", "_step", "iter", "iteration", "global_step", "trainer/global_step", "iter_num")
ABSENT = {"params": "per-tensor statistics (gradient, update, Adam moments)", "batch": "batch composition",
          "act": "activations per layer", "ngram": "the n-gram baseline"}


def norm_tag(tag: str) -> str:
    return str(tag).strip().lower().replace(" ", "_").replace("-", "_")


def parse_map(items: list[str]) -> dict[str, str]:
    """--map TAG=SIGNAL options as {normalised tag: signal}."""
    out = {}
    for item in items or ():
        tag, sep, signal = str(item).rpartition("=")
        if not sep or not tag or signal not in SIGNALS:
            raise UserError(f"--map {item!r}: write TAG=SIGNAL with SIGNAL one of {', '.join(SIGNALS)}")
        out[norm_tag(tag)] = signal
    return out


def signal_of(tag: str, mapping: dict[str, str]) -> str | None:
    t = norm_tag(tag)
    if t in mapping:
        return mapping[t]
    return next((s for s, names in TAGS.items() if t in {norm_tag(n) for n in names}), None)


def finite(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# --- reading each kind of source: {tag: {step: value}} ------------------------------------------------


def read_tensorboard(source: Path) -> dict[str, dict[int, float | None]]:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise UserError("importing TensorBoard events needs the tensorboard package; install it with "
                        "pip install -e '.[tensorboard]'") from None
    acc = EventAccumulator(str(source), size_guidance={"scalars": 0})  # 0: keep every point, not a sample
    acc.Reload()
    out: dict[str, dict[int, float | None]] = {}
    for tag in acc.Tags().get("scalars", []):
        out[tag] = {int(e.step): finite(e.value) for e in acc.Scalars(tag)}  # a restarted writer's later point wins
    return out


def read_table(records: list[dict], source: Path) -> dict[str, dict[int, float | None]]:
    """Rows of a CSV or JSONL history; the step is the first STEP_COLUMNS column present, else the row index."""
    out: dict[str, dict[int, float | None]] = {}
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise UserError(f"{source} line {i + 1} is not a JSON object; give one logged step per line")
        keys = {norm_tag(k): k for k in rec}
        col = next((keys[c] for c in STEP_COLUMNS if c in keys and rec[keys[c]] not in (None, "")), None)
        step_value = finite(rec[col]) if col else i
        if step_value is None:
            raise UserError(f"{source} row {i + 1}: step {rec.get(col)!r} is not a number")
        step = int(step_value)
        for k, v in rec.items():
            if k == col or v is None or v == "" or isinstance(v, (dict, list, bool)):
                continue  # an empty CSV cell or a key W&B leaves out: not logged at this step
            if finite(v) is None and str(v).strip().lower() not in ("nan", "inf", "-inf", "infinity", "-infinity"):
                continue  # text columns (run names, timestamps as text)
            out.setdefault(k, {})[step] = finite(v)
    return out


def read_source(source: Path) -> tuple[str, dict[str, dict[int, float | None]], dict]:
    """(kind, {tag: {step: value}}, facts of the run the source itself holds)."""
    source = Path(source)
    if not source.exists():
        raise UserError(f"{source} does not exist; give a TensorBoard log folder, an events file, a .csv or a .jsonl")
    if source.is_dir() or source.name.startswith("events.out.tfevents"):
        return "tensorboard", read_tensorboard(formats.tensorboard_run(source)), {}
    text = source.read_text(encoding="utf-8", errors="replace")
    if formats.is_trainer_state(source):
        return "trainer_state", *formats.read_trainer_state(source, text)
    if formats.is_printed_log(source, text):
        return "printed_log", formats.read_printed_log(source, text), {}
    if source.suffix.lower() == ".csv":
        return "csv", read_table(formats.unpanel(list(csv.DictReader(text.splitlines()))), source), {}
    if source.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        records = []
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    records.append(reader.loads_json(line))
                except ValueError:
                    raise UserError(f"{source} line {i + 1} is not JSON; give one JSON object per line") from None
        return "jsonl", read_table(records, source), {}
    raise UserError(f"{source}: unknown kind of history; give a TensorBoard log folder, an events file, a .csv or a .jsonl")


# --- building the rows ---------------------------------------------------------------------------------


def build_rows(series: dict[str, dict[int, float | None]], mapping: dict[str, str], source: Path) -> tuple[list[dict], dict]:
    """The metrics rows and {signal: source tag} of the tags that were mapped."""
    used: dict[str, str] = {}
    for tag in sorted(series):
        signal = signal_of(tag, mapping)
        if signal is not None and signal not in used:
            used[signal] = tag
    missing = [s for s in REQUIRED if s not in used]
    if missing:
        tags = ", ".join(sorted(series)) or "none"
        raise UserError(f"{source} has no {' / '.join(missing)} the import recognises (its tags: {tags}); map one "
                        f"with --map TAG={missing[0]}")
    # a signal the source lacks is left out of the rows (null would read as non-finite): the walker reads its
    # absence as not measured
    cols = {s: series[t] for s, t in used.items()}
    rows = []
    for step in sorted(cols["loss"]):
        if step < 0:
            continue
        row = {"step": step}
        for s in ("loss", "lr", "grad_norm", "grad_norm_clipped", "logit_max"):
            if s in cols:
                row[s] = cols[s].get(step, _last_before(cols[s], step))
        row["val_loss"] = None
        row["injected"] = None
        rows.append(row)
    if not rows:
        raise UserError(f"{source}: the {used['loss']} tag has no point at a step >= 0; nothing to import")
    for step, value in sorted(cols.get("val_loss", {}).items()):  # onto the last training step at or before it
        at = [r for r in rows if r["step"] <= step]
        if at and value is not None:
            at[-1]["val_loss"] = value
    return rows, used


def _last_before(col: dict[int, float | None], step: int) -> float | None:
    """A signal logged less often than the loss (an LR logged every 10 steps): its last value before `step`."""
    earlier = [s for s in col if s <= step]
    return col[max(earlier)] if earlier else col[min(col)]


def import_run(source: Path, out: Path, mapping: list[str] = (), force: bool = False,
               vocab_size: int | None = None, batch_size: int | None = None, log_every: int | None = None) -> dict:
    """Write OUT as a minitrain run folder from SOURCE; returns a summary."""
    source, out = Path(source), Path(out)
    maps = parse_map(list(mapping))
    kind, series, own = read_source(source)
    rows, used = build_rows(series, maps, source)
    non_finite = next(({"step": r["step"], "what": what} for r in rows if (what := non_finite_in(r))), None)
    status = "non_finite" if non_finite else "finished"
    facts = run_facts(source, rows, own, vocab_size, batch_size, log_every)
    cfg = {"injection": "none", **({"vocab_size": facts["vocab_size"]} if facts.get("vocab_size") else {}),
           **({"batch_size": facts["batch_size"]} if facts.get("batch_size") else {})}
    unmapped = sorted(t for t in series if t not in used.values())
    fields = {"seed": None, "config": cfg, "injection": {"injection": "none"}, "ended": now_iso(),
              "imported": {"source": str(source), "kind": kind, "signals": used, "unmapped_tags": unmapped,
                           "facts": facts,
                           "absent": {**ABSENT, **{s: "not in the source" for s in SIGNALS if s not in used}}}}
    val = next((r["val_loss"] for r in reversed(rows) if r["val_loss"] is not None), None)
    results = record.results(status, len(rows), rows[-1]["loss"], val, non_finite=non_finite)
    lock = files.claim_run_dir(out, force)
    try:
        files.atomic_write_bytes(out / reader.METRICS, b"".join(files.dumps_row(r).encode() for r in rows))
        record.write_results(out, results)
        record.write_manifest(out, status, fields)
    finally:
        lock.release()
    return {"out": str(out), "kind": kind, "steps": len(rows), "signals": used, "unmapped": unmapped, "facts": facts}


def run_facts(source: Path, rows: list[dict], own: dict, vocab_size: int | None, batch_size: int | None,
              log_every: int | None) -> dict:
    """What is known of the run beyond its series, each with where it came from: a flag wins, then the log
    itself, then the files beside it (formats.config_facts); the logging interval else reads from the logged
    steps (their most common spacing). Unknown stays out: nothing is assumed."""
    beside = formats.config_facts(source)
    facts: dict = {}
    for key, flag in (("vocab_size", vocab_size), ("batch_size", batch_size), ("log_every", log_every)):
        if flag:
            facts[key], facts[f"{key}_from"] = int(flag), "flag"
        elif own.get(key):
            facts[key], facts[f"{key}_from"] = int(own[key]), own.get(f"{key}_from", source.name)
        elif beside.get(key):
            facts[key], facts[f"{key}_from"] = int(beside[key]), beside[f"{key}_from"]
    steps = [r["step"] for r in rows]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    if "log_every" not in facts and gaps:
        facts["log_every"], facts["log_every_from"] = max(set(gaps), key=gaps.count), "the logged steps"
    facts["first_step"] = steps[0]
    return facts

