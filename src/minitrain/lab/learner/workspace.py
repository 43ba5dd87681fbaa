"""A learner's folder: learners/NAME/phase-19/ with one diagnoses file per lab and notes/lessons.md."""
from __future__ import annotations

import re
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.lab.learner.labs import LABS, PHASE, Lab
from minitrain.run import files

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")

LESSONS_TEMPLATE = (
    "# Lessons: phase 19 (spike injection)\n\n"
    "The lab's stop condition: three new lines below, one per failure mode you diagnosed (what it looks like on\n"
    "the dashboard and how you told it apart). `minitrain check NAME` counts lines that are not in this template.\n\n"
)


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or ""):
        raise UserError(f"learner name {name!r} is not valid: use 1-40 letters, digits, '-' or '_', starting with a "
                        "letter or digit (no slashes, dots or spaces), e.g. ana or team-3")
    return name


def learner_dir(name: str, learners: Path) -> Path:
    return Path(learners) / check_name(name) / PHASE


def existing_learner(name: str, learners: Path) -> Path:
    d = learner_dir(name, learners)
    if not d.is_dir():
        raise UserError(f"no learner folder {d}; create it with 'minitrain learner init {name}' (or 'just learner {name}')")
    return d


def lab_flag(lab: Lab) -> str:
    """The command-line flag that names this lab (none for the spike lab, the default)."""
    return "" if lab.key == "spike" else f" --lab {lab.key}"


def diagnoses_template(name: str, lab: Lab) -> str:
    if lab.key == "spike":
        sections = [(f"Injection {letter}", run) for letter, run in zip("ABC", lab.runs)]
    else:
        sections = [(f"Run {run.split('/')[-1]}", run) for run in lab.runs]
    body = "".join(f"\n## {title}\n- run: {run}\n- node: \n- cause: \n- diagnosis: \n- remediation: \n"
                   for title, run in sections)
    return (
        f"# Diagnoses of {name}: {lab.title}\n\n"
        f"Fill in every section BEFORE `minitrain reveal {name}{lab_flag(lab)}`: "
        "the reveal first seals this file (sha256 + UTC time) and only then shows the solutions; "
        "`minitrain grade` scores the sealed text.\n"
        "For each run: open its dashboard, walk stability-check.md from §1 to the first leaf that matches, and write\n"
        "- run: the run folder under experiments/ (leave it as it is)\n"
        "- node: the id of the node where you stopped, as stability-check.md prints it: a leaf, e.g. §8.A\n"
        "- cause: optional; the cause as the leaf of stability-check.md names it (your diagnosis must say it in "
        "words too)\n"
        "- diagnosis: one sentence\n"
        "- remediation: one sentence\n"
        "Values may run over several lines; bullets, **bold** and Spanish field names "
        "(nodo, causa, diagnóstico, remediación) are fine.\n"
        f"{body}"
    )


def init_learner(name: str, learners: Path) -> Path:
    d = learner_dir(name, learners)
    if d.exists() or d.parent.exists():
        raise UserError(f"{d.parent} already exists; nothing was overwritten (choose another name, or delete "
                        "the folder yourself to start over)")
    for lab in LABS.values():
        files.atomic_write_text(d / lab.file, diagnoses_template(name, lab))
    files.atomic_write_text(d / "notes" / "lessons.md", LESSONS_TEMPLATE)
    return d
