"""Grading a learner's sealed diagnoses against the reference, on the stability tree itself.

The grading rule (also in docs/learner.md): a diagnosis is correct when
  1. its `node` is a node id of the stability check on the reference's documented path to the correct
     leaf where the walk stops or turns toward it: the leaf itself, the leaf's section (§4 for §4.A), or a
     question of the path answered "yes" (§4.1 for §4.A; §6.1 and §6.2 for §6.A). A question the walk
     passes with "no" (§1.1 on the way to §4.A) is a miss: the learner stopped too early. And
  2. its cause is the run's cause. The cause is read, first match wins, from: an explicit `cause:` field
     (a cause name or words that name one); the node, when the node is a leaf (its cause); the
     one-sentence diagnosis, by the keyword table CAUSE_WORDS (ambiguous or no match: no cause, a miss). And
  3. its diagnosis names at least one key concept of the correct leaf, and its remediation one of the leaf's
     remediation concepts (the leaf's `concepts` in the tree; "banana" names none and loses the point).
The sealed text is what is graded; a file changed after the seal is flagged, and what it would score now
is shown but not counted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.analysis.tree import ITEMS, SECTIONS, Leaf, Node
from minitrain.core.errors import UserError
from minitrain.lab import blind
from minitrain.lab.learner.labs import Lab, blind_folder, expected_runs, fault_of, lab_faults
from minitrain.lab.learner.parse import CAUSES, Diagnosis, cause_from_words, node_key, parse_diagnoses
from minitrain.lab.learner.references import Reference, accepted_nodes, in_tree, read_reference, section_of
from minitrain.lab.learner.seal import history_flags, read_seal, sha256_text, utc_now
from minitrain.lab.learner.workspace import existing_learner, lab_flag
from minitrain.run import files


@dataclass
class Verdict:
    fault: str
    run: str | None
    reference: Reference
    given: Diagnosis | None
    correct: bool
    why: str
    cause: str | None = None
    cause_source: str = ""


def title_of(nid: str) -> str:
    """A node's words as stability-check.md prints them: a question's question, a leaf's or section's title."""
    item = ITEMS.get(nid)
    if isinstance(item, Node):
        return item.question
    return item.title if item is not None else SECTIONS[nid].title


def concepts_named(concepts, text: str) -> list[str]:
    """The key concepts (concept, regex) that `text` names."""
    low = (text or "").lower()
    return [name for name, pattern in concepts if re.search(pattern, low)]


def judge(d: Diagnosis | None, ref: Reference) -> tuple[bool, str, str | None, str]:
    """(correct, explanation, cause read, where the cause was read from). The rule is in the module doc."""
    accepted = accepted_nodes(ref.path)
    turns = [n for n in accepted if n not in (ref.leaf, section_of(ref.leaf))]
    right = (f"the reference leaf is {ref.leaf} ({ref.cause}), where the walk turns at "
             f"{' → '.join(turns + [ref.leaf])}")
    if d is None:
        return False, f"no diagnosis for this run; {right}", None, ""
    if not d.node.strip():
        return False, f"no node given; {right}", None, ""
    nid = node_key(d.node)
    if nid is None:
        return False, f"'{d.node}' names no node id (write it as stability-check.md prints it, e.g. §1); {right}", None, ""
    if not in_tree(nid):
        return False, f"node {nid} does not exist in stability-check.md; {right}", None, ""
    if nid not in accepted:
        if nid in ref.path:
            return False, (f"stopped at {nid} ({title_of(nid)}), which this run's walk passes with 'no': "
                           f"keep walking; {right}"), None, ""
        return False, (f"stopped at {nid} ({title_of(nid) or 'untitled'}), which is not on the documented path; "
                       f"{right}"), None, ""
    stopped_at = ITEMS.get(nid)
    if d.cause.strip():
        cause, hits = cause_from_words(d.cause)
        source = "your cause field"
        if cause is None:
            return False, (f"the cause field '{d.cause}' names {'several causes: ' + ', '.join(hits) if hits else 'no known cause'} "
                           f"(use one of {', '.join(CAUSES)}); {right}"), None, source
    elif isinstance(stopped_at, Leaf):
        cause, source = stopped_at.cause, f"leaf {nid}"
    else:
        cause, hits = cause_from_words(d.diagnosis)
        source = "your diagnosis sentence"
        if cause is None:
            what = f"names several causes ({', '.join(hits)})" if hits else "names no cause this grader knows"
            return False, (f"{nid} is not a leaf and your diagnosis {what}; add a 'cause:' line. {right}"), None, source
    if cause != ref.cause:
        return False, f"cause {cause} (from {source}), but this run's cause is {ref.cause}; {right}", cause, source
    leaf = ITEMS.get(ref.leaf)
    if not isinstance(leaf, Leaf):
        raise UserError(f"the reference of {ref.fault} names {ref.leaf!r}, which is not a leaf of the stability tree; "
                        "restore solutions/ from the repository")
    for part, words, concepts in (("diagnosis", d.diagnosis, leaf.concepts.diagnosis),
                                  ("remediation", d.remediation, leaf.concepts.remediation)):
        if concepts and not concepts_named(concepts, words):
            return False, (f"node and cause are right ({nid}, {cause}), but your {part} names none of the key "
                           f"concepts of {ref.leaf}: {'; '.join(c for c, _ in concepts)}"), cause, source
    note = "" if nid == ref.leaf else f"; you stopped at {nid}, on the path above the leaf {ref.leaf}"
    return True, f"{nid}, cause {cause} (from {source}){note}", cause, source


def grade_text(text: str, lab: Lab, refs: dict[str, Reference], experiments: Path,
               mapping: dict | None) -> list[Verdict]:
    diags = parse_diagnoses(text)
    runs = expected_runs(lab, experiments, mapping)
    by_fault: dict[str, Diagnosis] = {}
    for d in diags:
        f = fault_of(lab, d.run, experiments, mapping)
        if f and f not in by_fault:
            by_fault[f] = d
    out = []
    for fault in lab_faults(lab):
        ref = refs.get(fault)
        if ref is None:
            raise UserError(f"{lab.reference} has no section for {fault}; restore it from the repository")
        d = by_fault.get(fault)
        ok, why, cause, source = judge(d, ref)
        out.append(Verdict(fault, d.run if d else runs.get(fault), ref, d, ok, why, cause, source))
    return out


@dataclass
class Grade:
    lab: Lab
    verdicts: list[Verdict]
    seal: dict
    edited: bool
    current: list[Verdict] | None  # what the current (edited) text would score
    reveals: list[dict] = field(default_factory=list)  # this lab's reveal history
    flags: list[str] = field(default_factory=list)  # re-sealed after a reveal, history deleted or edited

    @property
    def score(self) -> int:
        return sum(v.correct for v in self.verdicts)


def grade(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None) -> Grade:
    """Grade the sealed diagnoses (and what the current text would score when edited since); written to
    grade-LAB.json in the learner's folder."""
    d = existing_learner(name, learners)
    seal = read_seal(d, lab)
    if seal is None:
        raise UserError(f"{d / lab.file} is not sealed yet; run 'minitrain reveal {name}{lab_flag(lab)}' first "
                        "(it seals your diagnoses, then shows the solutions)")
    mapping = blind.open_mapping(blind_folder(lab, experiments)) if lab.key != "spike" else None
    _, refs = read_reference(lab, solutions)
    verdicts = grade_text(seal["text"], lab, refs, experiments, mapping)
    now = (d / lab.file).read_text() if (d / lab.file).exists() else ""
    edited = sha256_text(now) != seal["sha256"]
    current = grade_text(now, lab, refs, experiments, mapping) if edited else None
    reveals, flags = history_flags(d, lab, seal)
    result = Grade(lab, verdicts, seal, edited, current, reveals, flags)
    files.atomic_write_json(d / f"grade-{lab.key}.json", {
        "lab": lab.key, "score": result.score, "out_of": len(verdicts), "graded_at": utc_now(),
        "sealed_at": seal["sealed_at"], "revealed_at": seal.get("revealed_at"), "edited_after_seal": edited,
        "reveals": len(reveals), "flags": flags,
        "verdicts": [{"fault": v.fault, "run": v.run, "correct": v.correct, "why": v.why} for v in verdicts]})
    return result


def grade_report(name: str, g: Grade) -> str:
    lines = [f"{name}, {g.lab.title}: {g.score}/{len(g.verdicts)} correct "
             f"(graded on the text sealed at {g.seal['sealed_at']})"]
    for v in g.verdicts:
        mark = "correct" if v.correct else "MISS   "
        lines.append(f"  {mark} {v.run or '(no run)'} [{v.fault}]: {v.why}")
    first = g.reveals[0].get("revealed_at") if g.reveals else None
    lines.append(f"  reveals logged: {len(g.reveals)}" + (f" (first at {first})" if first else ""))
    lines += [f"  {flag}" for flag in g.flags]
    if g.edited:
        now = sum(v.correct for v in g.current or [])
        lines.append(f"  EDITED AFTER THE REVEAL: {g.lab.file} differs from its seal (sha256 {g.seal['sha256'][:16]}); "
                     f"the sealed text is graded; the current text would score {now}/{len(g.verdicts)} (not counted)")
    return "\n".join(lines)
