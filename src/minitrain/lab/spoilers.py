"""Which runs' answers are still sealed, and keeping every page in step with it.

A run belongs to a learner lab when it is one of the lab's diagnosis exercises: the spike lab's injection
runs (`19-injection-A/B/C`, also with a -kK / -seedS suffix, in the experiments folder) or a run of a
shuffled blind lab (`19-blind/01`, `19-break-it/02`, ...). A lab is revealed when its folder holds
REVEALED.json: the experiments folder for the spike lab, the lab's own folder for a blind lab; `minitrain
reveal NAME [--lab blind|break-it]` writes it. Until then the lab's runs are sealed: the dashboard keeps the
walker's verdict, the tree's answers and diagnosis.json behind a "reveal" button, the index says "sealed",
and `minitrain diagnose` asks for --spoil. Every other run (a baseline, a remediation, your own runs) is open.

`refresh` rewrites the index (and given pages): every command that writes a run calls it at its end.
"""
from __future__ import annotations

import datetime
import re
from pathlib import Path

from minitrain.run import files, reader
from minitrain.views import dashboard, index

SEALED = "SEALED.json"  # a blind lab's folder: the published hash of its sealed mapping
REVEALED = "REVEALED.json"  # a lab's folder, once revealed
BLIND_RUN_IDS = ("01", "02", "03")  # a blind lab's run folders
SPIKE_RUN = re.compile(r"^19-injection-[ABC](?:-k\d+)?(?:-seed\d+)?$")


def lab_folder(run: Path) -> Path:
    """The folder whose REVEALED.json opens a run's answers: a blind lab's folder, else the run's parent."""
    return Path(run).parent


def lab_of(run: Path) -> str | None:
    """The learner lab a run folder belongs to (spike | blind | break-it), or None."""
    run = Path(run)
    if run.name in BLIND_RUN_IDS and (run.parent / SEALED).exists():
        public = reader.read_optional_json(run.parent / SEALED)[0] or {}
        return "blind" if public.get("lab") == "spike" else "break-it"
    return "spike" if SPIKE_RUN.match(run.name) else None


def is_sealed(run: Path) -> bool:
    return lab_of(run) is not None and not (lab_folder(run) / REVEALED).exists()


def mark_revealed(folder: Path, by: str, extra: dict | None = None) -> None:
    """Publish FOLDER/REVEALED.json (once: the first reveal's time stays)."""
    path = Path(folder) / REVEALED
    if not path.exists():
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        files.atomic_write_json(path, {"revealed_at": now, "revealed_by": by, **(extra or {})})


def experiments_of(run: Path) -> Path:
    """The experiments folder a run belongs to (a blind lab's runs sit one level below it)."""
    run = Path(run)
    return run.parent.parent if (run.parent / SEALED).exists() else run.parent


def refresh(experiments: Path, pages: list[Path] = ()) -> Path:
    """Rewrite the dashboards of `pages` (with their sealed state) and EXPERIMENTS/index.html."""
    for run in pages:
        if (Path(run) / reader.METRICS).exists():
            dashboard.write_dashboard(run, sealed=is_sealed(run))
    runs = index.find_runs(experiments) if Path(experiments).is_dir() else []
    return index.write_index(experiments, sealed={run for run in runs if is_sealed(run)})
