"""Which runs' answers are still sealed, the one gate every command that could name them passes, and keeping
every page in step with it.

Which runs are sealed is run/sealing.py's rule (a learner lab's run, until its lab folder holds
REVEALED.json, which `minitrain reveal NAME [--lab blind|break-it]` writes); the views default to it too.
Sealed runs: their pages carry no verdict and none of the stability check's answers (they are written into the pages by the reveal), no
signature.json or lab-report.md is written, the index says "sealed", and every command that could name a
leaf, a cause, a path or a signature of them (diagnose, postmortem, signature, report, export's diagnosis
text) refuses unless --spoil, which is logged in the lab folder's SPOILED.json (grade and check show it).
Every other run (a baseline, a remediation, your own runs) is open.

`refresh` rewrites the index (and given pages): every command that writes a run calls it at its end.
"""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.core.provenance import utc_now
from minitrain.run import files, reader
from minitrain.run.sealing import REVEALED, SEALED, is_sealed, lab_folder, lab_of  # noqa: F401 - THE rule
from minitrain.views import dashboard, index

SPOILED = "SPOILED.json"  # a lab's folder: every answer shown with --spoil before the reveal


def gate(run: Path, command: str, spoil: bool) -> None:
    """The one rule for a command that could name a sealed run's leaf, cause, path or signature: refuse it, or
    with --spoil log it (SPOILED.json in the lab folder, read by grade and check) and let it go on."""
    run = Path(run)
    if not is_sealed(run):
        return
    if not spoil:
        raise UserError(f"{run} is a run of the {lab_of(run)} lab, which is not revealed yet: walk "
                        "stability-check.md on its dashboard first and reveal ('minitrain reveal NAME'), or pass "
                        f"--spoil to see what '{command}' says now (logged in {lab_folder(run) / SPOILED}; "
                        "grade and check show it)")
    log_spoil(run, command)


def log_spoil(run: Path, command: str) -> None:
    """Add one entry to the lab folder's SPOILED.json (rewritten whole, atomically)."""
    path = lab_folder(run) / SPOILED
    entries = spoils(lab_folder(run))
    entries.append({"run": Path(run).name, "command": command, "at": utc_now()})
    files.atomic_write_json(path, {"spoils": entries})


def spoils(folder: Path) -> list[dict]:
    """The answers shown with --spoil in a lab folder before its reveal (a damaged file reads as one entry)."""
    data, unreadable = reader.read_optional_json(Path(folder) / SPOILED)
    if unreadable:
        return [{"run": "?", "command": f"a damaged {SPOILED} ({unreadable})", "at": ""}]
    entries = (data or {}).get("spoils")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def revealed(folder: Path) -> dict | None:
    """FOLDER/REVEALED.json ({revealed_at, revealed_by, ...}), or None while the lab is sealed."""
    data, unreadable = reader.read_optional_json(Path(folder) / REVEALED)
    if unreadable:
        return {"revealed_at": "", "revealed_by": "?", "damaged": unreadable}
    return data if isinstance(data, dict) else None


def mark_revealed(folder: Path, by: str, extra: dict | None = None) -> None:
    """Publish FOLDER/REVEALED.json (once: the first reveal's time stays)."""
    path = Path(folder) / REVEALED
    if not path.exists():
        files.atomic_write_json(path, {"revealed_at": utc_now(), "revealed_by": by, **(extra or {})})


def experiments_of(run: Path) -> Path:
    """The experiments folder a run belongs to (a blind lab's runs sit one level below it)."""
    run = Path(run)
    return run.parent.parent if (run.parent / SEALED).exists() else run.parent


def spike_runs(experiments: Path) -> list[Path]:
    """The spike lab's injection run folders in EXPERIMENTS (19-injection-A, -B-k60, ...), sorted."""
    experiments = Path(experiments)
    if not experiments.is_dir():
        return []
    return sorted(p for p in experiments.iterdir() if lab_of(p) == "spike")


def refresh_beside(run: Path) -> Path | None:
    """The runs table of the folder a just-written run sits in, after the run is saved: a table that cannot be
    written there (a user's own index.html, a full disk) is a note, never the command's failure."""
    experiments = experiments_of(run)
    try:
        return refresh(experiments)
    except (OSError, UserError) as e:
        print(f"minitrain: note: {experiments / 'index.html'} not written: {str(e).splitlines()[0][:300]}",
              file=sys.stderr)
        return None


def refresh(experiments: Path, pages: list[Path] = ()) -> Path:
    """Rewrite the dashboards of `pages` and EXPERIMENTS/index.html (sealed as run/sealing.py says)."""
    for run in pages:
        if (Path(run) / reader.METRICS).exists():
            dashboard.write_dashboard(run)
    return index.write_index(experiments,
                             notice=lambda line: print(f"minitrain: {line}", file=sys.stderr, flush=True))
