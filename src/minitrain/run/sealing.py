"""THE sealed rule: which runs' answers (verdict, the stability check's answers, signature) are not shown yet.

A run belongs to a learner lab when it is one of the lab's diagnosis exercises: the spike lab's injection runs
(19-injection-A/B/C, with a -kK / -seedS suffix too: core/course.py parses the names) in the experiments folder,
or a run of a shuffled blind lab (19-blind/01, 19-break-it/02, ...: a folder holding SEALED.json). Such a run is
sealed until its lab folder holds REVEALED.json (the experiments folder for the spike lab, the lab's own
folder for a blind lab). Every other run is open. The lab (lab/spoilers.py) gates commands with this rule and
the views default to it.
"""
from __future__ import annotations

from pathlib import Path

from minitrain.core.course import parse_lab_run_name
from minitrain.run.jsonfile import read_optional_json

SEALED = "SEALED.json"  # a blind lab's folder: the published hash of its sealed mapping
REVEALED = "REVEALED.json"  # a lab's folder, once revealed
BLIND_RUN_IDS = ("01", "02", "03")  # a blind lab's run folders


def lab_folder(run: Path) -> Path:
    """The folder whose REVEALED.json opens a run's answers: a blind lab's folder, else the run's parent."""
    return Path(run).parent


def lab_of(run: Path) -> str | None:
    """The learner lab a run folder belongs to (spike | blind | break-it), or None."""
    run = Path(run)
    if run.name in BLIND_RUN_IDS and (run.parent / SEALED).exists():
        public = read_optional_json(run.parent / SEALED)[0] or {}
        return "blind" if public.get("lab") == "spike" else "break-it"
    parsed = parse_lab_run_name(run.name)
    return "spike" if parsed and parsed[0] != "none" else None


def is_sealed(run: Path) -> bool:
    return lab_of(run) is not None and not (lab_folder(run) / REVEALED).exists()
