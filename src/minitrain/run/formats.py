"""The log formats other trainers write, read into {tag: {step: value}} for `minitrain import`, and the facts
of a run that their config files hold (vocabulary size, logging interval, batch size).

    trainer_state.json   Hugging Face Trainer's save_state(): its `log_history` (one dict per logging step)
    a printed log        nanoGPT's train.py: `iter N: loss X, time Y ms` and `step N: train loss X, val loss Y`
    a TensorBoard parent a folder whose runs lie one level (or more) down: HF's `runs/`, SummaryWriter()'s default
    a W&B panel export   a chart's "Export CSV": `Step`, `<run> - <metric>` and its `__MIN` / `__MAX` columns

Facts a log does not hold are left out (None), never guessed: the walker then says which checks they make
untestable (analysis/walk.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from minitrain.core.errors import UserError

EVENTS_PREFIX = "events.out.tfevents"
NUMBER = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
ITER_LINE = re.compile(rf"^iter (\d+): loss {NUMBER}", re.IGNORECASE)
EVAL_LINE = re.compile(rf"^step (\d+): train loss {NUMBER}, val loss {NUMBER}", re.IGNORECASE)
# the summary dict the Trainer appends after training: its train_loss is the run's mean, not a step's loss
HF_SUMMARY_KEYS = ("train_runtime", "total_flos")


def _num(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def is_trainer_state(path: Path) -> bool:
    return path.name == "trainer_state.json"


def is_printed_log(path: Path, text: str) -> bool:
    """A nanoGPT-style printed log: some line is `iter N: loss X`."""
    return path.suffix.lower() in (".log", ".txt", "") and any(ITER_LINE.match(ln.strip()) for ln in text.splitlines())


PANEL_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+?)(?P<bound>__MIN|__MAX)?$")


def unpanel(records: list[dict]) -> list[dict]:
    """A W&B panel export's rows with its columns named by their metric (`<run> - train/loss` -> `train/loss`)
    and the min / max band columns dropped; a history that is no panel export comes back as it was. A panel
    holding several runs is refused: import one run's export."""
    if not records:
        return records
    cols = {c: PANEL_COLUMN.match(c) for c in records[0] if c is not None}
    if not any(m and m.group("bound") for m in cols.values()):
        return records
    runs = sorted({m.group("run") for m in cols.values() if m})
    if len(runs) > 1:
        raise UserError(f"this W&B panel export holds {len(runs)} runs ({', '.join(runs)}); export one run's panel")
    keep = {c: (m.group("metric") if m else c) for c, m in cols.items() if not (m and m.group("bound"))}
    return [{keep[c]: v for c, v in rec.items() if c in keep} for rec in records]


def read_trainer_state(path: Path, text: str) -> tuple[dict[str, dict[int, float | None]], dict]:
    """HF trainer_state.json: each `log_history` entry's numbers at its `step`; facts: logging_steps, batch size."""
    try:
        state = json.loads(text)
    except ValueError:
        raise UserError(f"{path} is not JSON; give the trainer_state.json the Trainer's save_state() wrote") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise UserError(f"{path} has no log_history list; give the trainer_state.json the Trainer's save_state() wrote")
    out: dict[str, dict[int, float | None]] = {}
    for entry in history:
        if not isinstance(entry, dict) or any(k in entry for k in HF_SUMMARY_KEYS) or _num(entry.get("step")) is None:
            continue
        step = int(entry["step"])
        for key, value in entry.items():
            if key not in ("step", "epoch") and not isinstance(value, (bool, dict, list)) and _num(value) is not None:
                out.setdefault(key, {})[step] = _num(value)
    facts = {}
    for key, field in (("log_every", "logging_steps"), ("batch_size", "train_batch_size")):
        if isinstance(state.get(field), int):
            facts.update({key: state[field], f"{key}_from": f"trainer_state.json {field}"})
    return out, facts


def read_printed_log(path: Path, text: str) -> dict[str, dict[int, float | None]]:
    """nanoGPT's printed log: each iteration's loss, and the evaluations' train and val loss."""
    loss: dict[int, float | None] = {}
    val: dict[int, float | None] = {}
    for line in text.splitlines():
        if m := ITER_LINE.match(line.strip()):
            loss[int(m.group(1))] = _num(m.group(2))
        elif m := EVAL_LINE.match(line.strip()):
            val[int(m.group(1))] = _num(m.group(3))
    return {"loss": loss, **({"val_loss": val} if val else {})}


def tensorboard_run(source: Path) -> Path:
    """The folder (or events file) that holds one run's events: SOURCE itself when it holds events files, else
    the one folder below it that does; several runs below it are refused with their names (pick one)."""
    if source.is_file() or any(p.name.startswith(EVENTS_PREFIX) for p in source.iterdir()):
        return source
    runs = sorted({p.parent for p in source.rglob(f"{EVENTS_PREFIX}*")})
    if len(runs) == 1:
        return runs[0]
    if not runs:
        raise UserError(f"{source} holds no TensorBoard events files ({EVENTS_PREFIX}*); give the folder the "
                        f"SummaryWriter wrote")
    names = ", ".join(str(r.relative_to(source)) for r in runs)
    raise UserError(f"{source} holds {len(runs)} TensorBoard runs ({names}); import one of them, e.g. "
                    f"{runs[-1]}")


def config_facts(source: Path) -> dict:
    """What the files beside a log say about its run: HF's config.json `vocab_size` and trainer_state.json's
    logging interval and batch size, looked for in the log's folder and the two above it (HF writes its
    TensorBoard runs to OUTPUT_DIR/runs/<date>_<host>/)."""
    here = source if source.is_dir() else source.parent
    facts: dict = {}
    for folder in (here, here.parent, here.parent.parent):
        cfg = folder / "config.json"
        if "vocab_size" not in facts and cfg.is_file():
            value = _read_json(cfg).get("vocab_size")
            if isinstance(value, int) and value > 1:
                facts.update(vocab_size=value, vocab_size_from=f"{cfg} vocab_size")
        state = folder / "trainer_state.json"
        if "log_every" not in facts and state.is_file():
            data = _read_json(state)
            if isinstance(data.get("logging_steps"), int):
                facts.update(log_every=data["logging_steps"], log_every_from=f"{state} logging_steps")
            if isinstance(data.get("train_batch_size"), int) and "batch_size" not in facts:
                facts.update(batch_size=data["train_batch_size"], batch_size_from=f"{state} train_batch_size")
    return facts


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
