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
import stat
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
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def number(cell) -> tuple[bool, float | None]:
    """(is it a number, its value or None when non-finite) of one cell: every spelling Python's float reads
    ("-nan" as C's printf writes it, "+inf", "1e5") is a number; anything else is text."""
    if isinstance(cell, bool) or not isinstance(cell, (int, float, str)):
        return False, None
    try:
        v = float(cell)
    except (ValueError, OverflowError):
        return False, None
    return True, (v if math.isfinite(v) else None)


MAX_SOURCE_BYTES = 4 << 30  # a history file larger than this is not a training log (and would not fit in memory)


def as_series(series: dict) -> "Series":
    """A reader's plain {tag: {step: value}} as a Series (nothing noted while reading)."""
    out = Series()
    out.update(series)
    return out


class Series(dict):
    """{tag: {step: value or None}} read from a source, with what reading it noted: {tag: [(row, cell)]} of
    the first text cells of each column (`text`), and how many points a later one replaced (`repeated`)."""

    def __init__(self):
        super().__init__()
        self.text: dict[str, tuple[int, str]] = {}
        self.repeated = 0


# --- reading each kind of source: {tag: {step: value}} ------------------------------------------------


def read_tensorboard(source: Path) -> Series:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise UserError("importing TensorBoard events needs the tensorboard package; install it with "
                        "pip install -e '.[tensorboard]'") from None
    event_files = [source] if source.is_file() else sorted(source.rglob("events.out.tfevents*"))
    for f in event_files:
        check_records(f)
    acc = EventAccumulator(str(source), size_guidance={"scalars": 0})  # 0: keep every point, not a sample
    acc.Reload()
    out = Series()
    for tag in acc.Tags().get("scalars", []):
        out[tag] = {}
        for e in acc.Scalars(tag):
            step = whole_step(e.step, source, tag)
            out.repeated += step in out[tag]
            out[tag][step] = finite(e.value)  # a restarted writer's later point wins
    return out


def check_records(path: Path) -> None:
    """An events file cut short (a copy interrupted, a disk that filled) ends inside a record: TensorBoard's
    reader stops there without a word, and the run would import as a shorter "finished" one. The file is a
    sequence of records (8-byte length, 4-byte CRC, data, 4-byte CRC): walk their lengths to its end."""
    regular_file(path)
    size, at = path.stat().st_size, 0
    with open(path, "rb") as f:
        while at < size:
            head = f.read(12)
            length = int.from_bytes(head[:8], "little") if len(head) == 12 else None
            if length is None or at + 12 + length + 4 > size:
                raise UserError(f"{path} is damaged or truncated (it ends inside the record at byte {at}); "
                                "import a complete copy of the events file")
            at += 12 + length + 4
            f.seek(at)


def whole_step(value, source: Path, where) -> int:
    """A step as the readers keep it: a whole number from 0 to reader.MAX_STEP (a fractional step would
    collapse onto its neighbour, 1e300 would be refused by every reader later)."""
    ok, v = number(value)
    if not ok or v is None or v != int(v) or not -reader.MAX_STEP <= v <= reader.MAX_STEP:
        raise UserError(f"{source} {where}: step {value!r} is not a whole number of at most "
                        f"{reader.MAX_STEP}; give the step column of the log")
    return int(v)


def read_table(records, source: Path) -> Series:
    """Rows of a CSV or JSONL history; the step is the first STEP_COLUMNS column present, else the row index.
    An empty cell, or a key W&B leaves out, is "not logged at this step"; a cell that is no number is text,
    kept aside (a text column is not a signal; a signal column with text in it is refused in build_rows)."""
    out = Series()
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise UserError(f"{source} line {i + 1} is not a JSON object; give one logged step per line")
        keys = {norm_tag(k): k for k in rec}
        col = next((keys[c] for c in STEP_COLUMNS if c in keys and rec[keys[c]] not in (None, "")), None)
        step = whole_step(rec[col], source, f"row {i + 1}") if col else i
        for k, v in rec.items():
            if k == col or v is None or v == "" or isinstance(v, (dict, list)):
                continue
            ok, value = number(v)
            if not ok:
                out.text.setdefault(k, (i + 1, str(v)[:40]))
                continue
            column = out.setdefault(k, {})
            out.repeated += step in column
            column[step] = value
    return out


def regular_file(source: Path) -> None:
    """Only a regular file is read, and only up to MAX_SOURCE_BYTES: a FIFO would block forever, /dev/zero
    would fill the memory."""
    try:
        st = source.stat()
    except OSError as e:
        raise UserError(f"{source} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{source} is not a regular file (a pipe, a device or a socket); give a history file")
    if st.st_size > MAX_SOURCE_BYTES:
        raise UserError(f"{source} is {st.st_size >> 20} MiB, over the {MAX_SOURCE_BYTES >> 20} MiB a history may be; "
                        "give the training log itself")


def read_text(source: Path) -> str:
    """The file's text: UTF-8 with or without a byte-order mark (Excel writes one); a NUL byte is damage."""
    regular_file(source)
    with open(source, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise UserError(f"{source} grew past {MAX_SOURCE_BYTES >> 20} MiB while it was read; give the training log itself")
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise UserError(f"{source} line {line} holds a NUL byte: the file is damaged or not a text history")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # a history is text: bytes that are no UTF-8 are damage (or another encoding)
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{source} line {line} is not UTF-8 text: the file is damaged, or save it as UTF-8") from None


def read_csv(text: str, source: Path) -> list[dict]:
    rows = []
    old = csv.field_size_limit(MAX_SOURCE_BYTES)  # a long text cell (a W&B config column) is still a cell
    try:
        table = csv.DictReader(text.splitlines())
        for i, rec in enumerate(table):
            if None in rec or None in rec.values():  # more or fewer cells than the header names
                raise UserError(f"{source} row {i + 1} has {len(rec) - (None in rec) + len(rec.get(None) or ())} "
                                f"cells where the header has {len(table.fieldnames)}: the file is damaged or truncated")
            rows.append(rec)
    except csv.Error as e:
        raise UserError(f"{source} line {table.line_num}: not CSV ({e})") from None
    finally:
        csv.field_size_limit(old)
    return rows


def read_source(source: Path) -> tuple[str, Series, dict]:
    """(kind, {tag: {step: value}}, facts of the run the source itself holds)."""
    source = Path(source)
    if not source.exists():
        raise UserError(f"{source} does not exist; give a TensorBoard log folder, an events file, a .csv or a .jsonl")
    if source.is_dir() or source.name.startswith("events.out.tfevents"):
        return "tensorboard", read_tensorboard(formats.tensorboard_run(source)), {}
    text = read_text(source)
    if formats.is_trainer_state(source):
        series, facts = formats.read_trainer_state(source, text)
        return "trainer_state", as_series(series), facts
    if formats.is_printed_log(source, text):
        return "printed_log", as_series(formats.read_printed_log(source, text)), {}
    if source.suffix.lower() == ".csv":
        return "csv", read_table(formats.unpanel(read_csv(text, source)), source), {}
    if source.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        records = []
        for i, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    records.append(reader.loads_json(line))
                except (ValueError, UnicodeError):
                    raise UserError(f"{source} line {i + 1} is not JSON; give one JSON object per line") from None
        return "jsonl", read_table(records, source), {}
    raise UserError(f"{source}: unknown kind of history; give a TensorBoard log folder, an events file, a .csv or a .jsonl")


# --- building the rows ---------------------------------------------------------------------------------


def build_rows(series: Series, mapping: dict[str, str], source: Path) -> tuple[list[dict], dict, dict]:
    """The metrics rows, {signal: source tag} of the tags that were mapped, and what was not taken as it
    stood: {"carried_forward": {signal: rows}, "dropped": {what: points}} (the manifest records it)."""
    used: dict[str, str] = {}
    for tag in sorted(series):
        signal = signal_of(tag, mapping)
        if signal is not None and signal not in used:
            used[signal] = tag
    for tag in sorted(series.text):  # a signal's column with text in it, even one that holds no number at all
        if signal_of(tag, mapping) is not None:
            row, cell = series.text[tag]
            raise UserError(f"{source} row {row}: {tag} holds {cell!r}, which is not a number; give its values "
                            "(nan and inf are numbers), or leave the cell empty where it was not logged")
    missing = [s for s in REQUIRED if s not in used]
    if missing:
        if not series and not series.text:
            raise UserError(f"{source} holds no logged values: it is empty, damaged or truncated")
        tags = ", ".join(sorted(set(series) | set(series.text))) or "none"
        raise UserError(f"{source} has no {' / '.join(missing)} the import recognises (its tags: {tags}); map one "
                        f"with --map TAG={missing[0]}")
    # a signal the source lacks is left out of the rows (null would read as non-finite): the walker reads its
    # absence as not measured
    cols = {s: series[t] for s, t in used.items()}
    steps = sorted(cols["loss"])
    rows = [{"step": step} for step in steps if step >= 0]
    if not rows:
        raise UserError(f"{source}: the {used['loss']} tag has no point at a step >= 0; nothing to import")
    carried: dict[str, int] = {}
    dropped: dict[str, int] = {}
    if steps[0] < 0:
        dropped["loss before step 0"] = len(steps) - len(rows)
    for s in ("loss", "lr", "grad_norm", "grad_norm_clipped", "logit_max"):
        if s in cols:
            n = fill_forward(rows, s, cols[s])
            if n:
                carried[s] = n
    for r in rows:
        r["val_loss"] = None
        r["injected"] = None
    n_val = place_val(rows, cols.get("val_loss", {}))
    if n_val:
        dropped["val_loss before the first training step"] = n_val
    if series.repeated:
        dropped["points a later one at the same step replaced"] = series.repeated
    order = ("step", "loss", "lr", "grad_norm", "grad_norm_clipped", "logit_max", "val_loss", "injected")
    rows = [{k: r[k] for k in order if k in r} for r in rows]
    return rows, used, {"carried_forward": carried, "dropped": dropped}


def fill_forward(rows: list[dict], signal: str, col: dict[int, float | None]) -> int:
    """Set rows[i][signal] to the signal's value at that step, or where it was not logged there (an LR logged
    every 10 steps) its last value before it (before its first point: that first value). One pass over both
    sorted sequences. Returns how many rows got a carried value."""
    points = sorted(col.items())
    j, carried = 0, 0
    last = points[0][1]
    for r in rows:
        while j < len(points) and points[j][0] < r["step"]:
            last = points[j][1]
            j += 1
        if j < len(points) and points[j][0] == r["step"]:
            r[signal] = last = points[j][1]
        else:
            r[signal] = last
            carried += 1
    return carried


def place_val(rows: list[dict], col: dict[int, float | None]) -> int:
    """Each validation loss onto the last training step at or before it (one pass). Returns how many points
    had no training step before them (dropped)."""
    i, dropped = -1, 0
    for step, value in sorted(col.items()):
        while i + 1 < len(rows) and rows[i + 1]["step"] <= step:
            i += 1
        if i < 0:
            dropped += 1
        elif value is not None:
            rows[i]["val_loss"] = value
    return dropped


def import_run(source: Path, out: Path, mapping: list[str] = (), force: bool = False,
               vocab_size: int | None = None, batch_size: int | None = None, log_every: int | None = None) -> dict:
    """Write OUT as a minitrain run folder from SOURCE; returns a summary."""
    source, out = Path(source), Path(out)
    maps = parse_map(list(mapping))
    kind, series, own = read_source(source)
    rows, used, notes = build_rows(series, maps, source)
    non_finite = next(({"step": r["step"], "what": what} for r in rows if (what := non_finite_in(r))), None)
    status = "non_finite" if non_finite else "finished"
    facts = run_facts(source, rows, own, vocab_size, batch_size, log_every)
    cfg = {"injection": "none", **({"vocab_size": facts["vocab_size"]} if facts.get("vocab_size") else {}),
           **({"batch_size": facts["batch_size"]} if facts.get("batch_size") else {})}
    unmapped = sorted(t for t in {*series, *series.text} if t not in used.values())
    fields = {"seed": None, "config": cfg, "injection": {"injection": "none"}, "ended": now_iso(),
              "imported": {"source": str(source), "kind": kind, "signals": used, "unmapped_tags": unmapped, **notes,
                           "facts": facts,
                           "absent": {**ABSENT, **{s: "not in the source" for s in SIGNALS if s not in used}}}}
    val = next((r["val_loss"] for r in reversed(rows) if r["val_loss"] is not None), None)
    results = record.results(status, len(rows), rows[-1]["loss"], val, non_finite=non_finite)
    lock = files.claim_run_dir(out, force, resumable=False)
    try:
        files.atomic_write_bytes(out / reader.METRICS, b"".join(files.dumps_row(r).encode() for r in rows))
        record.write_results(out, results)
        record.write_manifest(out, status, fields)
    finally:
        lock.release()
    return {"out": str(out), "kind": kind, "steps": len(rows), "signals": used, "unmapped": unmapped, **notes,
            "facts": facts}


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

