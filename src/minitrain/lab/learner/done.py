"""`minitrain check`: the lab's Definition of Done and stop condition, one (ok, line) item each."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.lab import blind, spoilers
from minitrain.lab.learner.grading import grade
from minitrain.lab.learner.labs import Lab, blind_folder, expected_runs
from minitrain.lab.learner.meaning import causes_named
from minitrain.lab.learner.parse import parse_diagnoses
from minitrain.lab.learner.seal import history_flags, read_seal, sha256_text
from minitrain.lab.learner.workspace import LESSONS_TEMPLATE, existing_learner, lab_flag
from minitrain.run import files, reader

# The short run that checks the hook: the course model and corpus, a handful of steps that still cover a
# validation pass and a spectral-norm measurement (about 0.3 s once the corpus is prepared).
HOOK_RUN = ("steps=4", "warmup_steps=2", "eval_every=2", "spectral_every=2", "progress=false")
SPIKE_CAUSES = {"gradient_explosion", "bad_batch", "optimizer_state_corruption"}



def retry(name: str, lab: Lab) -> str:
    """After a miss: how to finish. The seal is final (a second one is flagged), so the retry is a lab not seen
    yet: the blind lab after the spike lab (the same faults, shuffled), else a fresh shuffled lab elsewhere."""
    if lab.key == "spike":
        return (f"to finish, diagnose the blind lab (the same three faults, shuffled and sealed): 'minitrain "
                f"blind-runs spike', fill blind-diagnoses.md, 'minitrain reveal {name} --lab blind', then "
                f"'minitrain check {name} --lab blind'")
    kind = "break-it" if lab.key == "break-it" else "spike"
    return (f"this seal is final; to finish, a fresh shuffled lab under a new name: 'minitrain learner init "
            f"{name}-2', 'minitrain blind-runs {kind} --experiments experiments-2', then reveal, grade and check "
            f"{name}-2{lab_flag(lab)} with --experiments experiments-2")

def metrics_bytes(cfg, hook=None) -> bytes:
    """The bytes a run of `cfg` writes to metrics.jsonl, trained in memory (no run folder); `hook`: what the
    step calls at its INJECT points (default: the loop's maybe_inject)."""
    from minitrain import loop  # torch: only for the check that trains, not for every learner command

    run = loop.build_run(cfg, hook=hook)
    rows: list[dict] = []
    loop.run_steps(run, 0, rows.append)
    return b"".join(files.dumps_row(row).encode() for row in rows)


def hook_is_noop() -> tuple[bool, str]:
    """The Definition of Done's "a clean maybe_inject hook, a no-op by default", checked by running it: the
    default config injects nothing, and a short run of it (HOOK_RUN) writes the same metrics bytes with the
    hook as with the hook taken out of the step (a run built with `loop.no_hook`)."""
    cfg = build_config({}, list(HOOK_RUN))
    if cfg.injection != "none":
        return False, f"the default config injects '{cfg.injection}'"
    from minitrain import loop

    with_hook = metrics_bytes(cfg)
    without = metrics_bytes(cfg, hook=loop.no_hook)
    run = f"a {cfg.steps}-step run with injection none"
    if with_hook != without:
        rows = zip(with_hook.splitlines(), without.splitlines())
        step = next((i for i, (a, b) in enumerate(rows) if a != b), min(len(with_hook), len(without)))
        return False, f"{run} writes different metrics with and without maybe_inject (from step {step} on)"
    digest = hashlib.sha256(with_hook).hexdigest()[:16]
    return True, (f"{run} writes the same metrics bytes with and without maybe_inject "
                  f"({len(with_hook)} bytes, sha256 {digest})")


def new_lesson_lines(text: str) -> list[str]:
    """Lines of lessons.md that are not in the template: not blank, not headings, at least four words."""
    template = set(LESSONS_TEMPLATE.splitlines())
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or line in template or s.startswith("#") or len(re.findall(r"\w+", s)) < 4:
            continue
        out.append(s)
    return out


def check(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None) -> list[tuple[bool, str]]:
    d = existing_learner(name, learners)
    items: list[tuple[bool, str]] = []
    if lab.key != "break-it":
        ok, why = hook_is_noop()
        items.append((ok, f"src/minitrain/loop.py has a clean maybe_inject hook, a no-op by default: {why}"))
    mapping = None
    if lab.key != "spike":
        try:
            blind.read_public(blind_folder(lab, experiments))
            opened = (blind_folder(lab, experiments) / spoilers.REVEALED).exists()
            mapping = blind.open_mapping(blind_folder(lab, experiments)) if opened else None
        except UserError as e:
            items.append((False, str(e)))
    runs = expected_runs(lab, experiments, mapping) if lab.key == "spike" else {r: r for r in lab.runs}
    found = [run_id for run_id in runs.values()
             if reader.manifest_of(Path(experiments) / run_id).get("status") in ("finished", "non_finite")]
    items.append((len(found) == 3, f"three runs with manifests in {experiments}/: "
                  + ", ".join(f"{r} {'ok' if r in found else 'MISSING or unfinished'}" for r in runs.values())))
    seal = read_seal(d, lab)
    text = (d / lab.file).read_text() if (d / lab.file).exists() else ""
    filled = [x for x in parse_diagnoses(seal["text"] if seal else text) if x.filled()]
    items.append((len(filled) >= 3, f"{lab.file} filled in: {len(filled)} of 3 sections have node, diagnosis and remediation"))
    if seal is None:
        items.append((False, f"{lab.file} sealed before the reveal: not sealed yet (run 'minitrain reveal {name}{lab_flag(lab)}')"))
        items.append((False, "the three diagnoses match the faults: not graded before the reveal"))
    else:
        before = seal["sealed_at"] <= (seal.get("revealed_at") or seal["sealed_at"])
        unchanged = sha256_text(text) == seal["sha256"]
        reveals, flags = history_flags(d, lab, seal, experiments)
        items.append((before and unchanged and not flags, f"{lab.file} sealed before the reveal: sealed {seal['sealed_at']}, "
                      f"revealed {seal.get('revealed_at') or 'not yet'} ({len(reveals)} reveal(s) logged)"
                      + ("" if unchanged else "; EDITED after the seal") + "".join(f"; {f}" for f in flags)))
        g = grade(name, lab, learners, experiments, solutions)
        misses = [v.run or v.fault for v in g.verdicts if v.status == "miss"]
        review = [v.run or v.fault for v in g.to_review]
        items.append((g.score == 3, f"the three diagnoses match the faults: {g.score}/3"
                      + (f" (missed: {', '.join(misses)}; see 'minitrain grade {name}{lab_flag(lab)}'); "
                         + retry(name, lab) if misses else "")
                      + (f"; {len(review)} for a teacher's review ({', '.join(review)}): show 'minitrain grade "
                         f"{name}{lab_flag(lab)}' and your sealed diagnoses to your teacher, who decides"
                         if review else "")))
    if lab.key == "spike":
        lessons = d / "notes" / "lessons.md"
        new = new_lesson_lines(lessons.read_text()) if lessons.exists() else []
        covered = sorted({c for line in new for c in causes_named(line)} & SPIKE_CAUSES)
        items.append((len(new) >= 3, f"stop condition: notes/lessons.md has {len(new)} new line(s) (3 needed)"
                      + (f"; they name: {', '.join(covered)}" if covered else "")))
    return items
