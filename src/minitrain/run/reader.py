"""THE reader of a run folder: every module that looks at a finished or live run reads it through here.

    read_json / read_metrics   one file, strict (a clear UserError when missing or corrupt; JSON: run/jsonfile.py)
    metrics_once               a scope in which each metrics file is parsed once (a page and the table beside it)
    read_config / tokenizer_of a run's config.yaml and tokenizer.json
    live_pid / live_note       is a process writing the run right now (its lock is held)?
    load_run                   manifest, results, diagnosis and metrics rows of a folder
    column / param_column      metrics rows as per-step arrays
    find_baseline              the clean run an injection (or blind) run is compared with

It imports neither torch nor numpy, so the walker, the dashboard and `--help` stay fast.

What counts as a run folder's file: what a minitrain writer puts in RUN/ (the files above, remediation.json,
the sweep's cost file, the lock). run/files/, the writer, re-reads its own checkpoints and the metrics
prefix they were written after (to resume or fork); every other module reads a run through here
(tests/test_architecture.py holds the rule). Files a lab or a learner keeps beside runs (a sealed mapping,
REVEALED.json, learners/NAME/...) belong to the module that writes them, which parses them with
read_json / loads_json so that a damaged file reads the same way everywhere.

Steps in metrics.jsonl strictly increase. Every minitrain writer keeps that: resume truncates the file to
its checkpoint's byte offset (checked by sha256) before it appends, a fork copies its donor's rows up to
the checkpoint, the probe numbers steps itself. So a repeated or earlier step means the file was
concatenated, edited or damaged, and read_metrics refuses it (one line naming the line) rather than
choosing one of the rows.

What a reader trusts is checked here, once, so that no command meets a value of the wrong shape:
  - nesting: no JSON value nests deeper than MAX_NESTING (a 200k-deep `[[[...` is a one-line error, not a
    RecursionError); a number literal beyond float range reads as null, as minitrain writes a non-finite value;
  - a metrics row's fields have the types docs/metrics.md gives them (row_problem); a row that breaks them is
    refused with the line and the field named, the same way as a corrupt line in the middle of the file: the
    file was edited or damaged, and a reader does not guess which of its values to keep;
  - manifest.json and results.json hold objects whose known fields have their types (MANIFEST_FIELDS,
    RESULTS_FIELDS). `check_run` refuses a run whose file is there but damaged; a lookup about another
    run (manifest_of, results_of: the index, a baseline search) treats it as absent, so one damaged run never
    breaks a command about the others.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from minitrain.core.config import FIELD_TYPES, NON_NUMERIC_FIELDS, load_yaml
from minitrain.core.errors import UserError
from minitrain.run.jsonfile import (MAX_NESTING, DamagedJSON, loads_json, read_bytes,  # noqa: F401 - re-exported
                                    read_json, read_optional_json)
from minitrain.run.redact import SECRET_FIELDS, WITHHELD

MANIFEST, RESULTS, METRICS, DIAGNOSIS = "manifest.json", "results.json", "metrics.jsonl", "diagnosis.json"
CONFIG, TOKENIZER = "config.yaml", "tokenizer.json"

# --- the types a reader relies on ------------------------------------------------------------------

_NUMBER = (int, float)  # and never bool (a JSON true is no number)

# the manifest's and results' fields that some reader looks into; None is always allowed (not recorded)
MANIFEST_FIELDS = {"config": dict, "injection": dict, "forked_from": dict, "ngram_baseline": dict,
                   "non_finite": dict, "remedy": dict, "probe": dict, "distributed": dict, "status": str,
                   "config_hash": str, "trunk_hash": str, "started": str, "ended": str, "error": str}
# stopped_at_step: a non-finite stop in folders written before run/record.py (now first_nonfinite_step)
RESULTS_FIELDS = {"status": str, "steps_done": int, "stopped_at_step": int, "first_nonfinite_step": int,
                  "final_train_loss": _NUMBER, "final_val_loss": _NUMBER, "final_val_ppl": _NUMBER,
                  "ngram_val_loss": _NUMBER, "ngram_val_ppl": _NUMBER, "val_loss_margin_vs_ngram": _NUMBER,
                  "non_finite": dict, "error": str}
DIAGNOSIS_FIELDS = {"leaf": str, "title": str, "cause": str, "diagnosis": str, "remediation": str,
                    "anomaly_step": int, "path": list}


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "an integer", float: "a float", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


# a config field's declared type (core/config.py) as the Python types its JSON value may have (a number for
# an integer field too: a probe run records its loop's own settings, e.g. a Trainer's warmup as a float)
_CONFIG_TYPES = {"int": _NUMBER, "float": _NUMBER, "str": str, "bool": bool, "list[int]": list, "list[str]": list}
_TYPE_WORDS = {dict: "an object", str: "a string", int: "an integer", _NUMBER: "a number", bool: "true/false",
               list: "a list"}


def shape_problem(obj: dict, fields: dict) -> str | None:
    """The first known field of OBJ whose value has the wrong type, said in words; None when all fit. A
    manifest's config is checked too: each of minitrain's config fields it holds has its declared type (a
    probe run's config may hold other keys of any type)."""
    for key, types in fields.items():
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) != (types is bool) or not isinstance(value, types)):
            return f"'{key}' is {_kind(value)}, not {_TYPE_WORDS[types]}"
    cfg = obj.get("config") if fields is MANIFEST_FIELDS else None
    if isinstance(cfg, dict):
        checked = {k: _CONFIG_TYPES[FIELD_TYPES[k]] for k in cfg if k in FIELD_TYPES}
        problem = shape_problem(cfg, checked)
        return f"config {problem}" if problem else None
    return None


def read_run_json(run: Path, name: str) -> tuple[dict | None, str | None]:
    """RUN/NAME (manifest.json, results.json or diagnosis.json) as its object, or None and one line saying why it cannot be
    used (unreadable, not an object, a known field of the wrong type); (None, None) when absent."""
    obj, why = read_optional_json(Path(run) / name)
    if obj is not None:
        problem = shape_problem(obj, {MANIFEST: MANIFEST_FIELDS, RESULTS: RESULTS_FIELDS, DIAGNOSIS: DIAGNOSIS_FIELDS}[name])
        if problem:
            return None, f"{name} is damaged ({problem})"
    return obj, why


def check_run(run: Path) -> None:
    """Refuse, in one line, a run whose manifest.json or results.json is there but damaged (a command about
    this run; a lookup about another run reads it as absent instead)."""
    for name in (MANIFEST, RESULTS):
        _, why = read_run_json(run, name)
        if why:
            raise UserError(f"{Path(run)}: {why}; the file was edited or damaged: restore it or re-create the run")


def manifest_of(run: Path) -> dict:
    """A run's manifest, or {} when it is missing, unreadable or damaged (for code that only looks
    something up)."""
    return read_run_json(run, MANIFEST)[0] or {}


def results_of(run: Path | None) -> dict:
    """A run's results.json, or {} when the run has not ended (or the file is unreadable or damaged)."""
    return {} if run is None else read_run_json(run, RESULTS)[0] or {}


def config_of(manifest: dict) -> dict:
    cfg = manifest.get("config")
    return cfg if isinstance(cfg, dict) else {}


def injection_of(manifest: dict) -> str | None:
    """The run's injection, "none", or None when it is withheld (a blind run before the reveal)."""
    cfg = config_of(manifest)
    return str(cfg["injection"]) if "injection" in cfg else None


# A metrics row's fields and their types (docs/metrics.md); a row may leave any of them out (the probe leaves
# out what it cannot measure), and None is a non-finite or unmeasured value.
_NUM_OR_NONE = {int, float, type(None)}
ROW_NUMBERS = ("loss", "lr", "grad_norm", "grad_norm_clipped", "loss_regular", "loss_irregular", "val_loss",
               "logit_max", "nonfinite")
MAX_STEP = 2**53  # every step stays exact as a float (the page's script, TensorBoard's wall time)
BATCH_NUMBERS = ("distinct_tokens", "top_token_share", "rare_share", "dup_rows")


def row_problem(row: dict) -> str | None:
    """The first field of a metrics row whose type is not the schema's, said in words; None when all fit.
    (Exact types, not isinstance: a JSON true is no number; this runs on every row of every read.)"""
    for key in ROW_NUMBERS:
        if type(row.get(key)) not in _NUM_OR_NONE:
            return f"'{key}' is {_kind(row[key])}, not a number or null"
    if type(row.get("clipped")) not in (bool, type(None)):
        return f"'clipped' is {_kind(row['clipped'])}, not true/false"
    if type(row.get("injected")) not in (str, type(None)):
        return f"'injected' is {_kind(row['injected'])}, not a string or null"
    act = row.get("act")
    if act is not None and (type(act) is not list or not {type(x) for x in act} <= _NUM_OR_NONE):
        return "'act' is not a list of numbers"
    for key in ("params", "sigma"):
        value = row.get(key)
        if value is None:
            continue
        if type(value) is not dict:
            return f"'{key}' is {_kind(value)}, not an object"
        inner = value.values()
        if key == "params":
            if not all(type(stats) is dict for stats in inner):
                return "'params' holds a tensor whose statistics are not an object"
            inner = [x for stats in inner for x in stats.values()]
        if not {type(x) for x in inner} <= _NUM_OR_NONE:
            return f"'{key}' holds a value that is not a number or null"
    batch = row.get("batch")
    if batch is not None:
        if type(batch) is not dict:
            return f"'batch' is {_kind(batch)}, not an object"
        if not {type(batch.get(k)) for k in BATCH_NUMBERS} <= _NUM_OR_NONE:
            return "'batch' holds a composition value that is not a number or null"
        rows = batch.get("rows")
        if rows is not None and (type(rows) is not list or not {type(x) for x in rows} <= {int, type(None)}):
            return "'batch.rows' is not a list of row indices"
    return None


# Inside `metrics_once()`, a metrics file is parsed once while it stays the same file with the same size and
# times: a finished run's page, its walk and the runs table beside it read the same rows three times
# otherwise. The rows' dicts are shared, so code inside the scope only reads them. The scope keeps the last
# SHARED_FILES files read (a page reads its run and its baseline; a table of eighty runs reads one at a
# time and must not hold them all). Outside it nothing is kept.
SHARED_FILES = 2
_SHARED: list | None = None  # [(file key, rows, note)], the most recent last


@contextlib.contextmanager
def metrics_once():
    global _SHARED
    outer = _SHARED
    _SHARED = [] if outer is None else outer
    try:
        yield
    finally:
        _SHARED = outer


def read_metrics(path: Path) -> tuple[list[dict], str | None]:
    """Rows of a metrics file and a note if it ends early (a partial last line, as a killed run leaves).
    Each row is a JSON object with an integer "step", steps strictly increase and every field has the
    schema's type (the module docstring says why); anything else is a UserError naming the line."""
    if _SHARED is None:
        return parse_metrics(path)
    try:
        st = os.stat(path)
        key = (str(Path(path).resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:  # parse_metrics says what is wrong with it
        return parse_metrics(path)
    for i, (k, rows, note) in enumerate(_SHARED):
        if k == key:
            _SHARED.append(_SHARED.pop(i))
            return list(rows), note
    rows, note = parse_metrics(path)
    _SHARED.append((key, rows, note))
    del _SHARED[:-SHARED_FILES]
    return list(rows), note


def parse_metrics(path: Path) -> tuple[list[dict], str | None]:
    """read_metrics, always from the file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} is missing; the run has not started or the folder is not a run")
    rows, note = [], None
    try:
        data = read_bytes(path)
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or e}); restore or re-create the run") from None
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = loads_json(line)
        except DamagedJSON as e:
            raise UserError(f"{path} line {i + 1} is damaged ({e.msg}); re-create the run") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i == len(lines) - 1 or all(not rest.strip() for rest in lines[i + 1:]):
                note = f"metrics end at step {rows[-1]['step'] if rows else 'none'}: the last line is incomplete"
                break
            raise UserError(f"{path} line {i + 1} is corrupt; the file was edited or damaged, re-create the run") from None
        step = row.get("step") if isinstance(row, dict) else None
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            raise UserError(f"{path} line {i + 1} is not a minitrain metrics row (a JSON object with an integer "
                            f"step from 0 to {MAX_STEP}); re-create the run")
        if rows and step <= rows[-1]["step"]:
            raise UserError(f"{path} line {i + 1} has step {step} after step {rows[-1]['step']} (repeated or "
                            "unordered steps): the file was edited or joined from two files; re-create the run")
        problem = row_problem(row)
        if problem:
            raise UserError(f"{path} line {i + 1} (step {step}): {problem}; the file was edited or damaged, "
                            "re-create the run")
        rows.append(row)
    return rows, note


def rows_by_step(run: Path) -> dict[int, dict]:
    """metrics.jsonl as {step: row}."""
    rows, _ = read_metrics(Path(run) / METRICS)
    return {r["step"]: r for r in rows}


def file_bytes(path: Path) -> bytes:
    """A file a run folder holds, as bytes (a page or image `minitrain serve` hands to the browser)."""
    return read_bytes(path)


def read_config(run: Path) -> dict:
    """A run's config.yaml as a dict (the fields `build_config` takes); a UserError when missing or corrupt."""
    return load_yaml(Path(run) / CONFIG)


def tokenizer_of(run: Path) -> tuple[dict | None, str | None]:
    """A run's tokenizer.json as its JSON object (None when absent), and None. A damaged file (truncated by a
    full disk, not a tokenizers file) is a UserError: a reader that went on would assume a vocabulary size."""
    path = Path(run) / TOKENIZER
    try:
        tok = loads_json(read_bytes(path))
        why = None if isinstance(tok, dict) and isinstance(tok.get("model"), dict) else "not a tokenizers file"
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        why = f"not JSON: {(e.msg if isinstance(e, json.JSONDecodeError) else str(e).splitlines()[0])[:80]}"
    if why:
        raise UserError(f"{path} is damaged ({why}); its vocabulary size cannot be read: restore the file, or "
                        "re-make the run with --force (a resume rewrites it)")
    return tok, None


# --- is the run live? -----------------------------------------------------------------------------

# The writer of a run holds an exclusive flock on RUN/.lock (run/files/lock.py takes it); the file names its pid.
LOCK_NAME = ".lock"
LOCK_HEADER = "minitrain run lock"


def holder_pid(lock_path: Path) -> str:
    """The pid the lock file names (the last process that took it), or "unknown"."""
    try:
        for line in read_bytes(lock_path).decode(errors="replace").splitlines():
            if line.startswith("pid "):
                return line[4:].strip()
    except OSError:
        pass
    return "unknown"


def live_pid(run: Path) -> str | None:
    """The pid of the process writing RUN now, or None when no process holds its lock (a lock dies with its
    process, SIGKILL included, so this never reports a stale one)."""
    path = Path(run) / LOCK_NAME
    try:  # a link is no lock of ours (files.lock_run refuses it); a FIFO is never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return holder_pid(path)
    finally:
        os.close(fd)


def live_note(run: Path) -> str | None:
    """One line for a reader (dashboard, diagnose) of a run another process is writing now, else None."""
    pid = live_pid(run)
    if pid is None:
        return None
    return (f"note: {run} is live (process {pid} is training it): this shows the steps written so far; "
            "run it again when the run has ended")


# --- a whole folder --------------------------------------------------------------------------------


def load_run(run: Path) -> dict:
    """Manifest, results, diagnosis and metrics rows (one per step, in step order) of a run folder."""
    run = Path(run)
    if not run.is_dir():
        raise UserError(f"{run} is not a folder; give a run folder such as experiments/18-baseline")
    if not (run / METRICS).exists():
        raise UserError(f"{run} holds no metrics.jsonl; is it a minitrain run folder?")
    check_run(run)
    notes = []
    manifest, _ = read_run_json(run, MANIFEST)
    if manifest is None:
        notes.append("manifest.json is missing: config, seed and injection are unknown")
    results, _ = read_run_json(run, RESULTS)
    diagnosis, diagnosis_note = read_run_json(run, DIAGNOSIS)  # what `diagnose --write` saved: a note if damaged
    rows, data_note = read_metrics(run / METRICS)
    return {"dir": run, "name": run.resolve().name, "manifest": manifest or {}, "results": results,
            "diagnosis": diagnosis, "diagnosis_note": diagnosis_note, "rows": rows, "data_note": data_note,
            "notes": notes}


def column(rows: list[dict], key: str) -> list:
    """One per-step quantity as a list (None where a row lacks it)."""
    return [r.get(key) for r in rows]


def param_column(rows: list[dict], name: str, stat: str) -> list:
    """One per-tensor statistic of one parameter as a per-step list (None where not measured)."""
    return [((r.get("params") or {}).get(name) or {}).get(stat) for r in rows]


# --- the baseline of a run -------------------------------------------------------------------------


def _comparable_config(manifest: dict) -> dict:
    drop = set(SECRET_FIELDS) | set(NON_NUMERIC_FIELDS)
    return {k: v for k, v in config_of(manifest).items() if k not in drop}


def same_trunk(a: dict, b: dict) -> bool:
    """Do two runs (by manifest) agree on everything but their fault? By trunk hash when both show it; by
    the shown config when one withholds it (a blind run)."""
    ha, hb = a.get("trunk_hash"), b.get("trunk_hash")
    if ha and hb and WITHHELD not in (ha, hb):
        return ha == hb
    return bool(config_of(a)) and _comparable_config(a) == _comparable_config(b)


def find_baseline(run: Path, experiments: Path | None = None) -> Path | None:
    """The clean run to compare RUN with: the run it was forked from when that one is clean; else a clean run
    with the same trunk beside it, or one or two folders up (a blind lab's runs sit one level below the lab's
    baseline); the one with the most metrics wins. A run that no reader takes (`readable`) is skipped. None for
    a clean run itself or when nothing fits."""
    run = Path(run).resolve()
    manifest = manifest_of(run)
    if not manifest or injection_of(manifest) == "none" and not config_of(manifest).get("blind"):
        return None
    forked = (manifest.get("forked_from") or {}).get("run")
    forked = forked if isinstance(forked, str) and forked else None
    candidates = [run.parent / forked] if forked else []
    for folder in dict.fromkeys([run.parent, run.parent.parent, *([Path(experiments).resolve()] if experiments else [])]):
        candidates += sorted(p.parent for p in folder.glob(f"*/{MANIFEST}"))
    ranked = []  # (not its donor, -metrics size, order found): its donor first, then the longest
    for order, cand in enumerate(dict.fromkeys(candidates)):
        if cand == run or not (cand / METRICS).exists():
            continue
        other = manifest_of(cand)
        if injection_of(other) != "none" or config_of(other).get("blind") or not same_trunk(manifest, other):
            continue
        ranked.append((not (forked and cand == run.parent / forked), -(cand / METRICS).stat().st_size, order, cand))
    return next((cand for *_, cand in sorted(ranked) if readable(cand)), None)


def readable(run: Path) -> bool:
    """Does every reader take RUN (manifest, results and metrics whole)? A run that is not is nobody's
    baseline: one damaged run never breaks a command about another."""
    try:
        check_run(run)
        read_metrics(Path(run) / METRICS)
    except UserError:
        return False
    return True


# --- a live run's progress -------------------------------------------------------------------------


def last_step(run: Path) -> int | None:
    """The step of the last complete row of RUN/metrics.jsonl, reading only the file's tail (cheap enough
    to ask several times a second while the run writes it)."""
    try:
        if not (Path(run) / METRICS).is_file():
            return None
        with open(Path(run) / METRICS, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines[:-1]):  # the text after the last newline is a row still being written
        if line.startswith(b'{"step":'):  # every row starts with its step (files.MetricsWriter)
            digits = line[8:].split(b",", 1)[0].strip()
            if digits.isdigit():
                return int(digits)
    return None
