"""The reference solutions (solutions/*.md), read against the stability tree itself (analysis/tree.py).

One section per fault, with fields as in a diagnoses file: fault, leaf, cause, path (the documented walk from
§1.1 to the leaf), diagnosis, remediation. `check_reference` says where a reference and the tree disagree;
`accepted_nodes` says where on a documented path a learner may stop and still be right.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from minitrain.analysis.tree import ITEMS, ORDER, SECTIONS, Leaf, Node, next_node
from minitrain.core.errors import UserError
from minitrain.lab.learner.labs import REPO_ROOT, Lab
from minitrain.lab.learner.parse import clean_value, node_key


@dataclass
class Reference:
    fault: str  # injection name (scale, bad_batch, v_corrupt) or break name (bad_init, no_warmup, broken_mask)
    leaf: str
    cause: str
    path: list[str]
    diagnosis: str
    remediation: str
    title: str


def solutions_dir(explicit: Path | None = None) -> Path:
    for cand in ([Path(explicit)] if explicit else []) + [Path.cwd() / "solutions", REPO_ROOT / "solutions"]:
        if cand.is_dir():
            return cand
    raise UserError("no solutions/ folder found; run from the repository or pass --solutions DIR")


def read_reference(lab: Lab, solutions: Path | None = None) -> tuple[str, dict[str, Reference]]:
    """The reference file's text and its sections by fault."""
    path = solutions_dir(solutions) / Path(lab.reference).name
    if not path.exists():
        raise UserError(f"reference solutions {path} are missing; restore them from the repository")
    text = path.read_text()
    refs: dict[str, Reference] = {}
    for section in re.split(r"(?m)^##\s+", text)[1:]:
        title = section.splitlines()[0].strip()
        fields = {}
        for line in section.splitlines()[1:]:
            m = re.match(r"^\s*-\s*(fault|leaf|cause|path|diagnosis|remediation)\s*:\s*(.*)$", line)
            if m:
                fields[m.group(1)] = clean_value(m.group(2))
        if "fault" not in fields:
            continue
        path_ids = [node_key(p) for p in re.split(r"→|->|,", fields.get("path", "")) if node_key(p)]
        refs[fields["fault"]] = Reference(fields["fault"], node_key(fields.get("leaf", "")) or "",
                                          fields.get("cause", ""), path_ids, fields.get("diagnosis", ""),
                                          fields.get("remediation", ""), title)
    return text, refs


# ---------------------------------------------------------------------------------------------------
# The tree seen from a documented path
# ---------------------------------------------------------------------------------------------------


def in_tree(nid: str) -> bool:
    """A section, question or leaf of the stability tree."""
    return nid in ITEMS or nid in SECTIONS


def answers(nid: str) -> tuple[str, str] | None:
    """Where a question's "yes" and "no" lead (the tree's rule: no explicit "no" is the next question);
    None for a section or a leaf."""
    node = ITEMS.get(nid)
    if not isinstance(node, Node):
        return None
    return node.yes, node.no or next_node(nid)


def section_of(nid: str) -> str:
    return nid.split(".")[0]


def accepted_nodes(path: list[str]) -> list[str]:
    """Where a learner may stop and still be right: the leaf, its section, and every node of the documented
    path at which the walk turns toward the leaf (its answer is "yes"). A node the walk passes with "no" is
    one the learner should have walked past."""
    if not path:
        return []
    leaf = path[-1]
    turns = [a for a, b in zip(path, path[1:]) if isinstance(ITEMS.get(a), Node) and ITEMS[a].yes == b]
    return [*turns, section_of(leaf), leaf]


def check_reference(refs: dict[str, Reference]) -> list[str]:
    """Every way the reference disagrees with the tree (empty when in sync): unknown node ids, a leaf that is
    not a leaf or has another cause, a documented path that the tree's yes/no links do not allow."""
    first = next(nid for nid in ORDER if isinstance(ITEMS[nid], Node))
    problems = []
    for r in refs.values():
        for nid in dict.fromkeys(r.path + [r.leaf]):
            if not in_tree(nid):
                problems.append(f"{r.fault}: node {nid} does not exist in the stability tree")
        leaf = ITEMS.get(r.leaf)
        if in_tree(r.leaf):
            if not isinstance(leaf, Leaf):
                problems.append(f"{r.fault}: {r.leaf} is not a leaf")
            elif leaf.cause != r.cause:
                problems.append(f"{r.fault}: leaf {r.leaf} has cause {leaf.cause}, the reference says {r.cause}")
        if not r.path or r.path[0] != first or r.path[-1] != r.leaf:
            problems.append(f"{r.fault}: the documented path must start at {first} and end at the leaf {r.leaf}")
        for a, b in zip(r.path, r.path[1:]):
            if in_tree(a) and in_tree(b) and b not in (answers(a) or ()):
                problems.append(f"{r.fault}: the path goes from {a} to {b}, which is neither its yes nor its no")
    return problems
