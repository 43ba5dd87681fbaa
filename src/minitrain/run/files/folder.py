"""A run folder as a whole: creating (or, with --force, emptying) it under its lock, deleting it, telling
minitrain's files from anyone else's, and cleaning what a killed writer left."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.run.files.atomic import TMP_SUFFIX, disk_error
from minitrain.run.files.checkpoints import CHECKPOINTS, CKPT_PREFIX
from minitrain.run.files.lock import RunLock, lock_run, refuse_if_live
from minitrain.run.reader import (CONFIG, DIAGNOSIS, LOCK_HEADER, LOCK_NAME, MANIFEST, METRICS, RESULTS,
                                  TOKENIZER)


def refuse_links(run: Path) -> None:
    """A resumed run's metrics file and checkpoints folder are not links: a resume truncates and appends to
    the one and prunes the other, which through a link would change files outside the run folder. (A new or
    --force run removes a link without following it: clear_run_dir.)"""
    for name in (METRICS, CHECKPOINTS):
        if (Path(run) / name).is_symlink():
            raise UserError(f"{Path(run) / name} is a symbolic link, and a run writes only inside its folder; "
                            "replace the link by the file it points to, or re-make the run with --force")


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "manifest.json").exists() or (Path(path) / "metrics.jsonl").exists()


def is_minitrain_run(path: Path) -> bool:
    """Does `path` hold a minitrain run (what --force may replace)? Its manifest says so (a JSON object with minitrain's schema_version
    and config), or minitrain's lock file does (a run killed before it wrote its manifest)."""
    path = Path(path)
    try:
        m = json.loads((path / "manifest.json").read_bytes(), parse_constant=lambda _c: None)
        if isinstance(m, dict) and "schema_version" in m and isinstance(m.get("config"), dict):
            return True
    except (OSError, ValueError):
        pass
    try:
        return (path / LOCK_NAME).read_text(errors="replace").startswith(LOCK_HEADER)
    except OSError:
        return False


def _refuse_unsafe_force(out: Path) -> None:
    """--force never replaces the current folder, one of its parents, or a folder holding a git repository."""
    here, target = Path.cwd().resolve(), out.resolve()
    if target == here or target in here.parents:
        raise UserError(f"--force refuses to replace {out}: it is the current folder or one of its parents; "
                        "choose a run folder below it")
    for root, dirs, files in os.walk(target):
        if ".git" in dirs or ".git" in files:
            raise UserError(f"--force refuses to replace {out}: {Path(root) / '.git'} is a git repository; "
                            "choose another --out")


# What minitrain writes into a run folder (the writer of each: the trainer, the page, signature, diagnose,
# remediate, explore's cost file, the lock, the TensorBoard and MLflow sinks' folders (run/sinks.py), explain's
# replays (lab/explain.py)), and under checkpoints/ only step-NNNNNN folders. --force and a new
# blind draw delete these and nothing else: a file a learner put there (notes, an edited postmortem.md, which
# `minitrain postmortem` hands over as theirs) is named and the command refused (docs/reliability.md).
RUN_FILES = frozenset({MANIFEST, CONFIG, TOKENIZER, METRICS, RESULTS, DIAGNOSIS, CHECKPOINTS, LOCK_NAME,
                       "dashboard.html", "signature.json", "remediation.json", "explore-cost.json",
                       "tensorboard", "mlruns", "explain"})


def _is_temporary(name: str) -> bool:
    """An atomic write's temp file (.NAME.*.tmp) or a checkpoint's temp folder (.step-*), as a kill leaves them."""
    return name.startswith(".") and (name.endswith(TMP_SUFFIX) or name.startswith(f".{CKPT_PREFIX}"))


def _is_checkpoint_name(name: str) -> bool:
    return name.startswith(CKPT_PREFIX) and name[len(CKPT_PREFIX):].isdigit()


def foreign_files(run: Path) -> list[str]:
    """The entries of a run folder minitrain did not write (relative paths, sorted): everything but
    RUN_FILES, temp files, and step folders under checkpoints/."""
    run, found = Path(run), []
    if not run.is_dir():
        return found
    for child in run.iterdir():
        if child.name not in RUN_FILES and not _is_temporary(child.name):
            found.append(child.name)
    ckpts = run / CHECKPOINTS
    if ckpts.is_dir() and not ckpts.is_symlink():
        for child in ckpts.iterdir():
            if not (_is_checkpoint_name(child.name) and child.is_dir() and not child.is_symlink()) \
                    and not _is_temporary(child.name):
                found.append(f"{CHECKPOINTS}/{child.name}")
    return sorted(found)


def refuse_foreign_files(run: Path, what: str = "--force") -> None:
    """`what` (--force, a new draw) replaces only what minitrain wrote: refused, naming them, while the
    folder holds anything else."""
    found = foreign_files(run)
    if found:
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        raise UserError(f"{run} holds files minitrain did not write: {shown}; {what} replaces only a run's own "
                        f"files, so move them out of {run}, then run again")


def clear_run_dir(out: Path) -> None:
    """Delete what minitrain wrote in a run folder whose lock we hold (RUN_FILES, temp files), except the
    lock file itself. A link is removed, never followed."""
    for child in Path(out).iterdir():
        if child.name == LOCK_NAME or (child.name not in RUN_FILES and not _is_temporary(child.name)):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def claim_run_dir(out: Path, force: bool, resumable: bool = True) -> RunLock:
    """Create (or, with --force, empty) the folder of a new run and take its lock. Refused: a folder that holds
    files but no minitrain run (even with --force), a run without --force, a live run, an unsafe --force.
    `resumable`: the command has a --resume to suggest (import has not)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; choose another --out")
    try:
        holds = out.exists() and any(p.name != LOCK_NAME for p in out.iterdir())  # a lock alone: killed at once
    except OSError as e:
        raise disk_error(e, out) from None
    if holds:
        if not is_minitrain_run(out):
            raise UserError(f"{out} already holds files that are not a minitrain run; "
                            + ("--force only replaces a run folder; " if force else "")
                            + "choose another --out")
        refuse_if_live(out)
        if not force:
            raise UserError(f"{out} already holds a run; pass --force to replace it, "
                            + ("--resume to continue it, " if resumable else "") + "or choose another --out")
        _refuse_unsafe_force(out)
        refuse_foreign_files(out)
        lock = lock_run(out)
        try:
            clear_run_dir(out)
        except OSError as e:
            lock.release()
            raise disk_error(e, out) from None
        return lock
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise disk_error(e, out) from None
    return lock_run(out)


def remove_run_dir(out: Path) -> None:
    """Delete a whole run folder (a new blind draw replaces its runs): refused while the run is live."""
    out = Path(out)
    if not out.exists():
        return
    if not is_minitrain_run(out):
        raise UserError(f"{out} holds files that are not a minitrain run; move them away and run again")
    refuse_foreign_files(out, "a new draw")
    with lock_run(out):
        clear_run_dir(out)
    shutil.rmtree(out)


def clean_temporaries(run: Path) -> list[str]:
    """Remove what a killed writer leaves: checkpoint temp folders (checkpoints/.step-*) and atomic-write temp
    files (.NAME.*.tmp). Called with the run's lock held, so no live writer owns them."""
    run, gone = Path(run), []
    for d in (run, run / "checkpoints"):
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.name.startswith(f".{CKPT_PREFIX}") and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                gone.append(p.name)
            elif p.name.startswith(".") and p.name.endswith(TMP_SUFFIX) and p.is_file():
                p.unlink(missing_ok=True)
                gone.append(p.name)
    return gone

