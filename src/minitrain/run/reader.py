"""THE reader of a run folder: every module that looks at a finished or live run reads it through here.

    read_json / read_metrics   one file, strict (a clear UserError when missing or corrupt)
    read_config / tokenizer_of a run's config.yaml and tokenizer.json
    live_pid / live_note       is a process writing the run right now (its lock is held)?
    load_run                   manifest, results, diagnosis and metrics rows of a folder
    column / param_column      metrics rows as per-step arrays
    find_baseline              the clean run an injection (or blind) run is compared with
    lab_run_name               the lab's folder names (18-baseline, 19-injection-A, ...)

It imports neither torch nor numpy, so the walker, the dashboard and `--help` stay fast.

What counts as a run folder's file: what a minitrain writer puts in RUN/ (the files above, remediation.json,
the sweep's cost file, the lock). run/files.py, the writer, re-reads its own checkpoints and the metrics
prefix they were written after (to resume or fork); every other module reads a run through here
(tests/test_architecture.py holds the rule). Files a lab or a learner keeps beside runs (a sealed mapping,
REVEALED.json, learners/NAME/...) belong to the module that writes them, which parses them with
read_json / loads_json so that a damaged file reads the same way everywhere.

Steps in metrics.jsonl strictly increase. Every minitrain writer keeps that: resume truncates the file to
its checkpoint's byte offset (checked by sha256) before it appends, a fork copies its donor's rows up to
the checkpoint, the probe numbers steps itself. So a repeated or earlier step means the file was
concatenated, edited or damaged, and read_metrics refuses it (one line naming the line) rather than
choosing one of the rows.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from minitrain.core.config import NON_NUMERIC_FIELDS, load_yaml
from minitrain.core.errors import UserError
from minitrain.core.lab_defaults import LAB_K, LAB_SEED
from minitrain.run.redact import SECRET_FIELDS, WITHHELD

MANIFEST, RESULTS, METRICS, DIAGNOSIS = "manifest.json", "results.json", "metrics.jsonl", "diagnosis.json"
CONFIG, TOKENIZER = "config.yaml", "tokenizer.json"

# The lab's run folders (experiments/18-baseline, experiments/19-injection-A, ...)
LAB_LETTERS = {"scale": "A", "bad_batch": "B", "v_corrupt": "C"}
BASELINE_NAME = "18-baseline"


def lab_run_name(injection: str, seed: int, step: int) -> str:
    """experiments/ folder of a lab run: 18-baseline, 19-injection-A.. (suffixes only off the lab defaults)."""
    if injection == "none":
        name = BASELINE_NAME
    else:
        name = f"19-injection-{LAB_LETTERS.get(injection, injection)}"
        if step != LAB_K:
            name += f"-k{step}"
    if seed != LAB_SEED:
        name += f"-seed{seed}"
    return name


# --- single files ----------------------------------------------------------------------------------


_DECODER = json.JSONDecoder(parse_constant=lambda _c: None)


def loads_json(text: str | bytes) -> Any:
    """Parse JSON; a NaN / Infinity token (not JSON: files written before minitrain wrote strict JSON)
    reads as None, as minitrain writes a non-finite value now."""
    return _DECODER.decode(text.decode() if isinstance(text, bytes) else text)


def read_json(path: Path, what: str) -> Any:
    try:
        return loads_json(Path(path).read_bytes())
    except FileNotFoundError:
        raise UserError(f"{what} {path} is missing; is this a minitrain run folder?") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a folder, not a file; give the run folder that holds it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {path} is corrupt ({e.msg if hasattr(e, 'msg') else e}); restore or re-create it") from None


def read_optional_json(path: Path) -> tuple[dict | None, str | None]:
    """A JSON object if the file exists, else None; a note instead of an error if it is unreadable."""
    path = Path(path)
    if not path.exists():
        return None, None
    try:
        obj = loads_json(path.read_bytes())
    except (OSError, ValueError) as e:
        return None, f"{path.name} is unreadable ({str(e).splitlines()[0][:80]})"
    if not isinstance(obj, dict):
        return None, f"{path.name} does not hold a JSON object"
    return obj, None


def manifest_of(run: Path) -> dict:
    """A run's manifest, or {} when it is missing or unreadable (for code that only looks something up)."""
    return read_optional_json(Path(run) / MANIFEST)[0] or {}


def results_of(run: Path | None) -> dict:
    """A run's results.json, or {} when the run has not ended (or the file is unreadable)."""
    return {} if run is None else read_optional_json(Path(run) / RESULTS)[0] or {}


def config_of(manifest: dict) -> dict:
    return manifest.get("config") or {}


def injection_of(manifest: dict) -> str | None:
    """The run's injection, "none", or None when it is withheld (a blind run before the reveal)."""
    cfg = config_of(manifest)
    return str(cfg["injection"]) if "injection" in cfg else None


def read_metrics(path: Path) -> tuple[list[dict], str | None]:
    """Rows of a metrics file and a note if it ends early (a partial last line, as a killed run leaves).
    Each row is a JSON object with an integer "step", and steps strictly increase (the module docstring
    says why); anything else is a UserError naming the line."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} is missing; the run has not started or the folder is not a run")
    rows, note = [], None
    data = path.read_bytes()
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = loads_json(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i == len(lines) - 1 or all(not rest.strip() for rest in lines[i + 1:]):
                note = f"metrics end at step {rows[-1]['step'] if rows else 'none'}: the last line is incomplete"
                break
            raise UserError(f"{path} line {i + 1} is corrupt; the file was edited or damaged, re-create the run") from None
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            raise UserError(f"{path} line {i + 1} is not a minitrain metrics row (a JSON object with an integer "
                            "step); re-create the run")
        if rows and step <= rows[-1]["step"]:
            raise UserError(f"{path} line {i + 1} has step {step} after step {rows[-1]['step']} (repeated or "
                            "unordered steps): the file was edited or joined from two files; re-create the run")
        rows.append(row)
    return rows, note


def rows_by_step(run: Path) -> dict[int, dict]:
    """metrics.jsonl as {step: row}."""
    rows, _ = read_metrics(Path(run) / METRICS)
    return {r["step"]: r for r in rows}


def file_bytes(path: Path) -> bytes:
    """A file a run folder holds, as bytes (a page or image `minitrain serve` hands to the browser)."""
    return Path(path).read_bytes()


def read_config(run: Path) -> dict:
    """A run's config.yaml as a dict (the fields `build_config` takes); a UserError when missing or corrupt."""
    return load_yaml(Path(run) / CONFIG)


def tokenizer_of(run: Path) -> tuple[dict | None, str | None]:
    """A run's tokenizer.json as its JSON object (None when absent), and None. A damaged file (truncated by a
    full disk, not a tokenizers file) is a UserError: a reader that went on would assume a vocabulary size."""
    path = Path(run) / TOKENIZER
    try:
        tok = loads_json(path.read_bytes())
        why = None if isinstance(tok, dict) and isinstance(tok.get("model"), dict) else "not a tokenizers file"
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        why = f"not JSON: {str(e).splitlines()[0][:80]}"
    if why:
        raise UserError(f"{path} is damaged ({why}); its vocabulary size cannot be read: restore the file, or "
                        "re-make the run with --force (a resume rewrites it)")
    return tok, None


# --- is the run live? -----------------------------------------------------------------------------

# The writer of a run holds an exclusive flock on RUN/.lock (run/files.py takes it); the file names its pid.
LOCK_NAME = ".lock"
LOCK_HEADER = "minitrain run lock"


def holder_pid(lock_path: Path) -> str:
    """The pid the lock file names (the last process that took it), or "unknown"."""
    try:
        for line in Path(lock_path).read_text(errors="replace").splitlines():
            if line.startswith("pid "):
                return line[4:].strip()
    except OSError:
        pass
    return "unknown"


def live_pid(run: Path) -> str | None:
    """The pid of the process writing RUN now, or None when no process holds its lock (a lock dies with its
    process, SIGKILL included, so this never reports a stale one)."""
    path = Path(run) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a link is no lock of ours (files.lock_run refuses it)
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
    notes = []
    manifest, why = read_optional_json(run / MANIFEST)
    if why or manifest is None:
        notes.append(why or "manifest.json is missing: config, seed and injection are unknown")
    results, why = read_optional_json(run / RESULTS)
    if why:
        notes.append(why)
    diagnosis, diagnosis_note = read_optional_json(run / DIAGNOSIS)
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
    baseline); the one with the most metrics wins. None for a clean run itself or when nothing fits."""
    run = Path(run).resolve()
    manifest = manifest_of(run)
    if not manifest or injection_of(manifest) == "none" and not config_of(manifest).get("blind"):
        return None
    forked = (manifest.get("forked_from") or {}).get("run")
    candidates = [run.parent / forked] if forked else []
    for folder in dict.fromkeys([run.parent, run.parent.parent, *([Path(experiments).resolve()] if experiments else [])]):
        candidates += sorted(p.parent for p in folder.glob(f"*/{MANIFEST}"))
    best, best_size = None, -1
    for cand in dict.fromkeys(candidates):
        if cand == run or not (cand / METRICS).exists():
            continue
        other = manifest_of(cand)
        if injection_of(other) != "none" or config_of(other).get("blind") or not same_trunk(manifest, other):
            continue
        if forked and cand == run.parent / forked:
            return cand
        size = (cand / METRICS).stat().st_size
        if size > best_size:
            best, best_size = cand, size
    return best


# --- a live run's progress -------------------------------------------------------------------------


def last_step(run: Path) -> int | None:
    """The step of the last complete row of RUN/metrics.jsonl, reading only the file's tail (cheap enough
    to ask several times a second while the run writes it)."""
    try:
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
