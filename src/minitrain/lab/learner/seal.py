"""The seal and the reveal history: what makes "written blind" checkable.

The seal (learners/NAME/phase-19/LAB-diagnoses.seal.json) keeps the diagnoses text, its sha256 and the UTC time
it was made, before any solution is shown; grading reads the sealed text, and an edit after the seal shows as a
different hash.

The reveal history (reveal-history.jsonl) gets one line per reveal: the lab, when, and the seal it showed the
solutions against. Each line carries the sha256 of the line before it, so an edited or removed line in the
middle breaks the chain. Grade and check report the history and flag a seal made after a reveal (delete the
seal, edit the diagnoses, reveal again). The honest limit (docs/reliability.md): these are local files; a
learner who deletes or rewrites the whole history (and reveal-LAB.md, which each reveal writes) still leaves the
lab folder's REVEALED.json and SPOILED.json, which grade and check read too (lab_traces); deleting those as
well leaves no trace minitrain can see. Only a copy kept elsewhere (an instructor's) can stop that.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.core.provenance import utc_now
from minitrain.lab import spoilers
from minitrain.lab.learner.labs import Lab
from minitrain.run import files, reader

SEAL_KEYS = ("lab", "file", "sha256", "sealed_at", "text")
HISTORY_NAME = "reveal-history.jsonl"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def seal_path(d: Path, lab: Lab) -> Path:
    return Path(d) / lab.file.replace(".md", ".seal.json")


def write_seal(d: Path, lab: Lab, text: str) -> dict:
    """Seal this text of the lab's diagnoses now."""
    seal = {"lab": lab.key, "file": lab.file, "sha256": sha256_text(text), "sealed_at": utc_now(), "text": text}
    files.atomic_write_json(seal_path(d, lab), seal)
    return seal


def mark_revealed(d: Path, lab: Lab, seal: dict) -> None:
    """Record in the seal when the solutions were first shown."""
    if not seal.get("revealed_at"):
        seal["revealed_at"] = utc_now()
        files.atomic_write_json(seal_path(d, lab), seal)


def read_seal(d: Path, lab: Lab) -> dict | None:
    """The lab's seal, checked against its own hash; None when the diagnoses are not sealed yet."""
    path = seal_path(d, lab)
    if not path.exists():
        return None
    seal = reader.read_json(path, "seal file")
    if not isinstance(seal, dict):
        raise UserError(f"{path} is damaged (not a JSON object); the seal cannot be trusted, ask your instructor")
    missing = [k for k in SEAL_KEYS if not isinstance(seal.get(k), str)]
    if missing:
        raise UserError(f"{path} is damaged (missing {', '.join(missing)}); the seal cannot be trusted, "
                        "ask your instructor")
    if seal["sha256"] != sha256_text(seal["text"]):
        raise UserError(f"{path} is damaged (its text does not match its hash); the seal cannot be trusted, "
                        "ask your instructor")
    return seal


# ---------------------------------------------------------------------------------------------------
# The reveal history: a log each reveal appends to, which survives deleting the seal
# ---------------------------------------------------------------------------------------------------


def history_path(d: Path) -> Path:
    return Path(d) / HISTORY_NAME


def read_history(d: Path) -> tuple[list[dict], str | None]:
    """Every reveal logged in the learner's folder, and a note when the chain of lines is broken."""
    path = history_path(d)
    if not path.exists():
        return [], None
    entries, prev, note = [], None, None
    for i, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = reader.loads_json(line)
        except (ValueError, UnicodeDecodeError):
            return entries, f"{path} line {i} is damaged"
        if not isinstance(entry, dict):
            return entries, f"{path} line {i} is damaged"
        if entry.get("prev") != prev and note is None:
            note = f"{path} was edited (line {i} does not follow the line before it)"
        prev = hashlib.sha256(line).hexdigest()
        entries.append(entry)
    return entries, note


def log_reveal(d: Path, lab: Lab, seal: dict, new_seal: bool) -> None:
    """Add this reveal to the history: the file is rewritten whole and atomically (run/files/atomic.py), so an
    interrupt leaves either the old history or the new one, never half a line. The reveal calls it before
    it unseals anything."""
    path = history_path(d)
    old = path.read_bytes() if path.exists() else b""
    lines = [line for line in old.splitlines() if line.strip()]
    prev = hashlib.sha256(lines[-1]).hexdigest() if lines else None
    entry = {"lab": lab.key, "revealed_at": utc_now(), "seal_sha256": seal["sha256"], "sealed_at": seal["sealed_at"],
             "new_seal": new_seal, "prev": prev}
    line = (json.dumps(entry, sort_keys=True, allow_nan=False) + "\n").encode()
    files.atomic_write_bytes(path, old + (b"\n" if old and not old.endswith(b"\n") else b"") + line)


def lab_traces(lab: Lab, experiments: Path, name: str, seal: dict, mine: list[dict]) -> list[str]:
    """What the lab folder itself says happened before this seal: its reveal (REVEALED.json, whoever made it)
    and every answer shown with --spoil (SPOILED.json). A learner who deletes their own seal and history
    leaves these behind."""
    folder = Path(experiments) if lab.key == "spike" else Path(experiments) / lab.runs[0].split("/")[0]
    flags = []
    opened = spoilers.revealed(folder)
    if opened is not None:
        at, by = str(opened.get("revealed_at", "")), opened.get("revealed_by", "?")
        if opened.get("damaged"):
            flags.append(f"{folder / spoilers.REVEALED} is damaged ({opened['damaged']}): when the lab was revealed "
                         "cannot be checked")
        elif at < seal["sealed_at"]:
            flags.append(f"REVEALED BEFORE THE SEAL: {folder / spoilers.REVEALED} says the lab was revealed at {at} "
                         f"by {by}; this seal was made at {seal['sealed_at']}")
        elif by == name and not mine:
            flags.append(f"{folder / spoilers.REVEALED} says {by} revealed the lab at {at}, but the reveal history "
                         "has no reveal of it (the history was deleted)")
    for s in spoilers.spoils(folder):
        if str(s.get("at", "")) < seal["sealed_at"]:
            flags.append(f"SPOILED BEFORE THE SEAL: '{s.get('command')}' showed the answer for {s.get('run')} with "
                         f"--spoil at {s.get('at')} ({folder / spoilers.SPOILED})")
    return flags


def history_flags(d: Path, lab: Lab, seal: dict | None, experiments: Path | None = None) -> tuple[list[dict], list[str]]:
    """This lab's reveals, and what is wrong with them: a seal made after an earlier reveal, a seal that says
    it was revealed with no reveal logged (the history deleted), an edited history; with `experiments`, also
    what the lab folder recorded (lab_traces)."""
    entries, note = read_history(d)
    mine = [e for e in entries if e.get("lab") == lab.key]
    flags = [note] if note else []
    if seal is None:
        return mine, flags
    earlier = [e for e in mine if e.get("seal_sha256") != seal["sha256"] or str(e.get("revealed_at", "")) < seal["sealed_at"]]
    if earlier:
        first = earlier[0]
        flags.append(f"RE-SEALED AFTER A REVEAL: the solutions were shown at {first.get('revealed_at')} against the seal "
                     f"{str(first.get('seal_sha256'))[:16]}; the current seal ({seal['sha256'][:16]}) was made at "
                     f"{seal['sealed_at']}, after it")
    if not mine and (seal.get("revealed_at") or (Path(d) / f"reveal-{lab.key}.md").exists()):
        flags.append(f"the reveal history {history_path(d).name} has no reveal of this lab, yet the solutions were "
                     "shown (the history was deleted)")
    if experiments is not None:
        flags += lab_traces(lab, experiments, Path(d).parent.name, seal, mine)
    return mine, flags
