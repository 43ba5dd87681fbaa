"""The text a reader trusts: every file path named in the docs, the justfile and every command's --help exists,
and the docs state the present (history lives in git, not in "(issue 12)")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT, cli_commands, run_cli

SRC = ROOT / "src" / "minitrain"
DOCS = [ROOT / "README.md", ROOT / "justfile", ROOT / "stability-check.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "solutions").glob("*.md"))]

# A file path as the docs write it: `src/minitrain/analysis/tree.py`, `tests/test_loop.py`, `docs/regimes.md`,
# `analysis/tree.py` (inside src/minitrain), `minitrain/cli.py` (inside src), or a bare `tree.py`.
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|js|css))\b")
ISSUE = re.compile(r"\bissues? #?\d+|\(issue\b", re.IGNORECASE)


def named_paths(text: str) -> list[str]:
    return PATH.findall(text)


def missing(ref: str) -> bool:
    """True when REF names a file of this repository that does not exist. A path under a folder the repository
    does not hold (experiments/, learners/, RUN/) names a run's output, not a file here: never missing.
    A bare .py name must exist somewhere in the code; a bare .md name is usually a run's output."""
    first = ref.split("/")[0]
    if "/" not in ref:
        return ref.endswith(".py") and not any(
            True for folder in ("src", "tests", "bench", "scripts") for _ in (ROOT / folder).rglob(ref))
    outputs = {"experiments", "learners", "build"}  # made by running things (.gitignore)
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} - outputs
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith("_")}
    base = ROOT if first in top else ROOT / "src" if first == "minitrain" else SRC if first in packages else None
    return base is not None and not (base / ref).exists()


def help_texts() -> dict[str, str]:
    """Every command's --help, unwrapped (a wide terminal), so that no path is cut at a line end."""
    out = {}
    for cmd in cli_commands():
        proc = run_cli(*cmd, "--help", env={"COLUMNS": "10000"})
        assert proc.returncode == 0, cmd
        out[" ".join(["minitrain", *cmd, "--help"])] = proc.stdout
    return out


def test_the_path_rule_finds_what_it_must():
    text = ("see src/minitrain/stability.py, analysis/tree.py, `runfiles.py`, tests/test_loop.py, "
            "experiments/19-blind/.sealed/mapping.json and RUN/postmortem.md")
    refs = named_paths(text)
    assert refs == ["src/minitrain/stability.py", "analysis/tree.py", "runfiles.py", "tests/test_loop.py",
                    "RUN/postmortem.md"]
    assert [r for r in refs if missing(r)] == ["src/minitrain/stability.py", "runfiles.py"]


def test_every_path_named_in_the_docs_and_the_help_exists():
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in DOCS}
    texts.update(help_texts())
    broken = [f"{where}: {ref}" for where, text in texts.items() for ref in named_paths(text) if missing(ref)]
    assert not broken, "paths that do not exist:\n" + "\n".join(broken)
    assert sum(len(named_paths(t)) for t in texts.values()) > 100  # the rule still finds the docs' paths


def narration(files) -> list[str]:
    return [f"{f.relative_to(ROOT)}:{i}: {line.strip()}" for f in files
            for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if ISSUE.search(line)]


def test_the_narration_rule_finds_issue_numbers():
    hits = [s for s in ["## Beyond the lab (issue 12)", "issue 14's changes", "issues 2-7 landed", "Issue #3",
                        "the issue's cases", "a known issue", "tissue 4"] if ISSUE.search(s)]
    assert hits == ["## Beyond the lab (issue 12)", "issue 14's changes", "issues 2-7 landed", "Issue #3"]


def test_the_docs_tell_no_history():
    hits = narration(DOCS)
    assert not hits, "history narration (it lives in git; state the present fact):\n" + "\n".join(hits)


def test_the_code_tells_no_history():
    files = [p for p in sorted((ROOT / "src").rglob("*")) if p.suffix in (".py", ".js", ".css", ".html")
             and "vendor" not in p.parts]
    assert len(files) > 40
    hits = narration(files)
    assert not hits, "history narration (it lives in git; state the present fact):\n" + "\n".join(hits)


def lab_answers() -> set[str]:
    """What answers the labs: the reference files' leaves, and their causes other than an injection's own name
    (the spike lab names its injections by design: B is "bad_batch")."""
    refs = "\n".join(p.read_text() for p in (ROOT / "solutions").glob("*.md"))
    leaves = set(re.findall(r"^- leaf: (§\d+\.[A-Z])", refs, re.M))
    causes = set(re.findall(r"^- cause: (\w+)", refs, re.M)) - {"bad_batch"}
    assert len(leaves) == 6 and len(causes) == 5
    return leaves | causes


def test_no_doc_the_workflow_points_to_before_the_reveal_names_an_answer():
    readme = (ROOT / "README.md").read_text()
    before = readme[:readme.index("## Commands")]  # the lab, what is measured, the workflow, blind mode
    pointed = sorted(set(re.findall(r"docs/[\w-]+\.md", before)))
    assert "docs/learner.md" in pointed
    for name in pointed:
        text = (ROOT / name).read_text()
        mentions = [line for line in before.splitlines() if name in line]
        if "after your diagnoses" in text[:400] or all("after your diagnoses" in line for line in mentions):
            continue  # marked, at its top or wherever the README points to it: read after the reveal
        named = sorted(a for a in lab_answers() if re.search(rf"(?<![\w.]){re.escape(a)}(?![\w.])", text))
        assert named == [], (name, named)
