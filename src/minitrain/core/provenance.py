"""Where and when a file was made: the code's commit and the time, in the one format every record uses."""
from __future__ import annotations

import datetime
import subprocess
import time
from pathlib import Path


def now_iso() -> str:
    """A run's `started` and `ended` (manifest.json): local time with its UTC offset, as a person reads it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def utc_now() -> str:
    """Now, in UTC, to the microsecond: 2026-01-31T12:00:00.000000Z."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def git_sha(short: bool = False) -> str | None:
    """The code's commit ("-dirty" with uncommitted changes to tracked files), or None outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", *(["--short"] if short else []), "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0 or not sha.stdout.strip():
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
