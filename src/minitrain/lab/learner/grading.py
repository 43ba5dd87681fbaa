"""Grading a learner's sealed diagnoses against the reference, on the stability tree itself.

The grading rule (also in docs/learner.md). A run's answer is graded in three parts, each with its reason:
  1. node: a node id of the stability check on the reference's documented path to the correct leaf where the
     walk stops or turns toward it: the leaf itself, the leaf's section (§4 for §4.A), or a question of the
     path answered "yes" (§4.1 for §4.A; §6.1 and §6.2 for §6.A). A question the walk passes with "no" (§1.1
     on the way to §4.A) is a miss: the learner stopped too early.
  2. diagnosis: the sentence (with the optional `cause:` field) names the run's failure mode, in English or
     Spanish, and no other cause (lab/learner/meaning.py reads it with the causes registry's concepts, their
     words compared by stem).
  3. remediation: the sentence proposes a fix registered for that cause and nothing harmful for it.
The answer is correct when all three credit, a miss when one is refused, and "review" when none is refused
but the diagnosis or remediation is ambiguous: the score counts it apart and names what a teacher must read.
The sealed text is what is graded; a file changed after the seal is flagged, and what it would score now is
shown but not counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minitrain.analysis.tree import ITEMS, SECTIONS, Node
from minitrain.core.errors import UserError
from minitrain.core.provenance import utc_now
from minitrain.lab import blind
from minitrain.lab.learner.labs import Lab, blind_folder, expected_runs, fault_of, lab_faults
from minitrain.lab.learner.meaning import CREDIT, NO, REVIEW, Point, judge_diagnosis, judge_remediation
from minitrain.lab.learner.parse import Diagnosis, node_key, parse_diagnoses
from minitrain.lab.learner.references import Reference, accepted_nodes, in_tree, read_reference, section_of
from minitrain.lab.learner.seal import history_flags, read_seal, sha256_text
from minitrain.lab.learner.workspace import existing_learner, lab_flag
from minitrain.run import files

CORRECT, MISS = "correct", "miss"


@dataclass
class Verdict:
    fault: str
    run: str | None
    reference: Reference
    given: Diagnosis | None
    status: str  # correct | miss | review
    why: str

    @property
    def correct(self) -> bool:
        return self.status == CORRECT


def title_of(nid: str) -> str:
    """A node's words as stability-check.md prints them: a question's question, a leaf's or section's title."""
    item = ITEMS.get(nid)
    if isinstance(item, Node):
        return item.question
    return item.title if item is not None else SECTIONS[nid].title


def judge_node(d: Diagnosis | None, ref: Reference) -> Point:
    """Is the node where the learner stopped on the way to the reference leaf?"""
    accepted = accepted_nodes(ref.path)
    turns = [n for n in accepted if n not in (ref.leaf, section_of(ref.leaf))]
    right = f"the walk turns at {' → '.join(turns + [ref.leaf])}"
    if d is None:
        return Point(NO, f"no answer for this run; {right}")
    if not d.node.strip():
        return Point(NO, f"no node given; {right}")
    nid = node_key(d.node)
    if nid is None:
        return Point(NO, f"'{d.node}' names no node id (write it as stability-check.md prints it, e.g. §4.A); {right}")
    if not in_tree(nid):
        return Point(NO, f"{nid} does not exist in stability-check.md; {right}")
    if nid not in accepted:
        if nid in ref.path:
            return Point(NO, f"stopped at {nid} ({title_of(nid)}), which this run's walk passes with 'no': keep "
                             f"walking; {right}")
        return Point(NO, f"stopped at {nid} ({title_of(nid) or 'untitled'}), which is not on this run's path; {right}")
    return Point(CREDIT, f"{nid}" + ("" if nid == ref.leaf else f", on the path above the leaf {ref.leaf}"))


def judge(d: Diagnosis | None, ref: Reference) -> tuple[str, str]:
    """(correct | miss | review, the reason for each part). The rule is in the module doc."""
    node = judge_node(d, ref)
    if d is None:
        return MISS, f"node: {node.why}"
    parts = {"node": node, "diagnosis": judge_diagnosis(d.diagnosis, ref.cause, d.cause),
             "remediation": judge_remediation(d.remediation, ref.cause)}
    verdicts = [p.verdict for p in parts.values()]
    status = MISS if NO in verdicts else REVIEW if REVIEW in verdicts else CORRECT
    mark = {CREDIT: "ok", NO: "refused", REVIEW: "review"}
    return status, "; ".join(f"{name} {mark[p.verdict]}: {p.why}" for name, p in parts.items())


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
        status, why = judge(d, ref)
        out.append(Verdict(fault, d.run if d else runs.get(fault), ref, d, status, why))
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

    @property
    def to_review(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == REVIEW]


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
    reveals, flags = history_flags(d, lab, seal, experiments)
    result = Grade(lab, verdicts, seal, edited, current, reveals, flags)
    files.atomic_write_json(d / f"grade-{lab.key}.json", {
        "lab": lab.key, "score": result.score, "out_of": len(verdicts), "graded_at": utc_now(),
        "sealed_at": seal["sealed_at"], "revealed_at": seal.get("revealed_at"), "edited_after_seal": edited,
        "to_review": len(result.to_review), "reveals": len(reveals), "flags": flags,
        "verdicts": [{"fault": v.fault, "run": v.run, "status": v.status, "why": v.why} for v in verdicts]})
    return result


def grade_report(name: str, g: Grade) -> str:
    review = f", {len(g.to_review)} for a teacher's review" if g.to_review else ""
    lines = [f"{name}, {g.lab.title}: {g.score}/{len(g.verdicts)} correct{review} "
             f"(graded on the text sealed at {g.seal['sealed_at']})"]
    for v in g.verdicts:
        mark = {CORRECT: "correct", MISS: "MISS   ", REVIEW: "REVIEW "}[v.status]
        lines.append(f"  {mark} {v.run or '(no run)'} [{v.fault}, {v.reference.leaf} {v.reference.cause}]: {v.why}")
    if g.to_review:
        lines.append(f"  {len(g.to_review)} answer(s) are ambiguous: show this report and your sealed diagnoses "
                     "to your teacher, who decides; they count neither as correct nor as a miss here")
    first = g.reveals[0].get("revealed_at") if g.reveals else None
    lines.append(f"  reveals logged: {len(g.reveals)}" + (f" (first at {first})" if first else ""))
    lines += [f"  {flag}" for flag in g.flags]
    if g.edited:
        now = sum(v.correct for v in g.current or [])
        lines.append(f"  EDITED AFTER THE REVEAL: {g.lab.file} differs from its seal (sha256 {g.seal['sha256'][:16]}); "
                     f"the sealed text is graded; the current text would score {now}/{len(g.verdicts)} (not counted)")
    return "\n".join(lines)
