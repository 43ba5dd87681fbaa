"""The learner's side of the lab: a folder of diagnoses written blind, sealed, revealed, graded and checked.

    minitrain learner init NAME   learners/NAME/phase-19/ with spike-diagnoses.md (+ blind-diagnoses.md,
                                  break-it-diagnoses.md for the shuffled labs) and notes/lessons.md
    minitrain reveal NAME         seal the diagnoses (sha256 + UTC time), then show the reference solutions
                                  completed with numbers measured on the learner's own runs
    minitrain grade NAME          correct diagnoses / 3, each miss explained, edits after the seal flagged
    minitrain check NAME          the lab's Definition of Done and stop condition, one line each

Three labs share the procedure (`--lab`):

    spike     the lab itself: experiments/19-injection-{A,B,C}  reference solutions/04-spike-injection-ref.md
    blind     the same injections shuffled: experiments/19-blind/01..03        (same reference)
    break-it  the companion lab shuffled: experiments/19-break-it/01..03   reference solutions/02-break-it-ref.md

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

import datetime
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.analysis.causes import CAUSES as CAUSES_REGISTRY
from minitrain.analysis.compare import measure
from minitrain.lab import spoilers
from minitrain.run import files, reader
from minitrain.run.reader import LAB_LETTERS
from minitrain.core.errors import UserError
from minitrain.core.fmt import fmt

PHASE = "phase-19"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
REPO_ROOT = Path(__file__).resolve().parents[3]  # src/minitrain/lab/learner.py -> the checkout (editable install)


@dataclass(frozen=True)
class Lab:
    key: str
    title: str
    file: str  # the learner's diagnoses file in learners/NAME/phase-19/
    reference: str  # the solutions file, relative to the repository
    runs: tuple[str, ...]  # default run ids, relative to the experiments folder


LABS = {
    "spike": Lab("spike", "lab 04, spike injection", "spike-diagnoses.md", "solutions/04-spike-injection-ref.md",
                 ("19-injection-A", "19-injection-B", "19-injection-C")),
    "blind": Lab("blind", "lab 04, spike injection, blind (shuffled and sealed)", "blind-diagnoses.md",
                 "solutions/04-spike-injection-ref.md", ("19-blind/01", "19-blind/02", "19-blind/03")),
    "break-it": Lab("break-it", "lab 02, break it (shuffled and sealed)", "break-it-diagnoses.md",
                    "solutions/02-break-it-ref.md", ("19-break-it/01", "19-break-it/02", "19-break-it/03")),
}

# Patterns (regular expressions, lower case, English and Spanish) that name each cause in a learner's text.
# A text names a cause when one of its patterns matches at a word start; it must name exactly one cause
# (gradient words alongside another cause are taken as mechanism, not cause), or the cause stays unknown.
CAUSE_WORDS = {c.name: c.words for c in CAUSES_REGISTRY.values() if c.words}  # analysis/causes.py
CAUSES = tuple(CAUSE_WORDS) + ("unknown",)


# ---------------------------------------------------------------------------------------------------
# The stability tree (read from stability.py, never copied)
# ---------------------------------------------------------------------------------------------------


@dataclass
class TreeNode:
    id: str
    kind: str  # section | question | leaf
    title: str
    parent: str | None
    yes: str | None = None  # questions: where "yes" and "no" lead
    no: str | None = None
    cause: str | None = None  # leaves only
    diagnosis: str = ""
    remediation: str = ""
    concepts: dict = field(default_factory=dict)  # leaves: {"diagnosis": ((concept, regex), ...), "remediation": ...}


def node_key(text: str) -> str | None:
    """The canonical id of the first node reference in `text`: '§4.A', '4.a', '§ 6.2.' -> '§4.A', '§6.2'."""
    m = (re.search(r"§\s*(\d+(?:\.[0-9A-Za-z]+)*)", text or "")
         or re.search(r"(?<![\w.])(\d+(?:\.[0-9A-Za-z]+)*)(?!\w)", text or ""))
    return f"§{m.group(1).upper()}" if m else None


def stability_tree() -> dict[str, TreeNode]:
    """Every node of the stability check by id, read from stability.py's tree data (never copied)."""
    from minitrain.analysis import stability

    return {n["id"]: TreeNode(n["id"], n["kind"], n.get("title", ""), n.get("parent"), n.get("yes"), n.get("no"),
                              n.get("cause"), n.get("diagnosis", ""), n.get("remediation", ""),
                              n.get("concepts") or {})
            for n in stability.iter_nodes()}


def section_of(nid: str) -> str:
    return nid.split(".")[0]


def accepted_nodes(tree: dict[str, TreeNode], path: list[str]) -> list[str]:
    """Where a learner may stop and still be right: the leaf, its section, and every node of the documented
    path at which the walk turns toward the leaf (its answer is "yes"). A node the walk passes with "no" is
    one the learner should have walked past."""
    if not path:
        return []
    leaf = path[-1]
    turns = [a for a, b in zip(path, path[1:]) if a in tree and tree[a].yes == b]
    return [*turns, section_of(leaf), leaf]


# ---------------------------------------------------------------------------------------------------
# Names, folders, templates
# ---------------------------------------------------------------------------------------------------


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


def diagnoses_template(name: str, lab: Lab) -> str:
    causes = ", ".join(CAUSES)
    if lab.key == "spike":
        sections = [(f"Injection {letter}", run) for letter, run in zip("ABC", lab.runs)]
    else:
        sections = [(f"Run {run.split('/')[-1]}", run) for run in lab.runs]
    body = "".join(f"\n## {title}\n- run: {run}\n- node: \n- cause: \n- diagnosis: \n- remediation: \n"
                   for title, run in sections)
    return (
        f"# Diagnoses of {name}: {lab.title}\n\n"
        f"Fill in every section BEFORE `minitrain reveal {name}{'' if lab.key == 'spike' else ' --lab ' + lab.key}`: "
        "the reveal first seals this file (sha256 + UTC time) and only then shows the solutions; "
        "`minitrain grade` scores the sealed text.\n"
        "For each run: open its dashboard, walk stability-check.md from §1 to the first leaf that matches, and write\n"
        "- run: the run folder under experiments/ (leave it as it is)\n"
        "- node: the id of the node where you stopped, as stability-check.md prints it (e.g. §4.2)\n"
        f"- cause: optional; one of {causes} (if empty: the leaf's cause, else read from your diagnosis)\n"
        "- diagnosis: one sentence\n"
        "- remediation: one sentence\n"
        "Values may run over several lines; bullets, **bold** and Spanish field names "
        "(nodo, causa, diagnóstico, remediación) are fine.\n"
        f"{body}"
    )


LESSONS_TEMPLATE = (
    "# Lessons: phase 19 (spike injection)\n\n"
    "The lab's stop condition: three new lines below, one per failure mode you diagnosed (what it looks like on\n"
    "the dashboard and how you told it apart). `minitrain check NAME` counts lines that are not in this template.\n\n"
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


# ---------------------------------------------------------------------------------------------------
# Reading the learner's diagnoses (tolerant of formatting)
# ---------------------------------------------------------------------------------------------------

FIELD_ALIASES = {
    "run": "run", "run id": "run", "id": "run", "injection": "run", "inyección": "run", "inyeccion": "run",
    "node": "node", "nodo": "node", "leaf": "node", "hoja": "node", "stopped at": "node",
    "cause": "cause", "causa": "cause",
    "diagnosis": "diagnosis", "diagnóstico": "diagnosis", "diagnostico": "diagnosis",
    "remediation": "remediation", "remedy": "remediation", "fix": "remediation", "remediación": "remediation",
    "remediacion": "remediation",
}
_FIELD_LINE = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\*\*|__)?\s*(" + "|".join(sorted(map(re.escape, FIELD_ALIASES), key=len, reverse=True))
    + r")\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?\s*(.*)$", re.IGNORECASE)
_HEADING = re.compile(r"^\s*#{2,6}\s+(.*?)\s*#*\s*$")


@dataclass
class Diagnosis:
    title: str
    run: str = ""
    node: str = ""
    cause: str = ""
    diagnosis: str = ""
    remediation: str = ""

    def filled(self) -> bool:
        return bool(self.node.strip() and self.diagnosis.strip() and self.remediation.strip())


def parse_diagnoses(text: str) -> list[Diagnosis]:
    """Sections (## headings) with their fields; a value continues on following plain lines."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out: list[Diagnosis] = []
    current: Diagnosis | None = None
    last: str | None = None
    for line in text.splitlines():
        h = _HEADING.match(line)
        if h:
            current, last = Diagnosis(title=h.group(1).strip()), None
            out.append(current)
            continue
        if current is None:
            continue
        m = _FIELD_LINE.match(line)
        if m:
            last = FIELD_ALIASES[m.group(1).lower()]
            setattr(current, last, _clean(m.group(2)))
        elif last and line.strip() and not line.lstrip().startswith(("-", "*", "+")):
            setattr(current, last, (getattr(current, last) + " " + _clean(line)).strip())
        elif not line.strip():
            last = None
    for d in out:
        if not d.run:
            d.run = _run_from_title(d.title)
        d.run = d.run.strip().strip("`").rstrip("/")
        if d.run.startswith("experiments/"):
            d.run = d.run[len("experiments/"):]
    return [d for d in out if d.run or d.node or d.diagnosis]


def _clean(value: str) -> str:
    return re.sub(r"(\*\*|__)", "", value).strip().strip("`").strip()


def _run_from_title(title: str) -> str:
    m = re.search(r"(?:injection|inyecci[oó]n)\s+([ABC])\b", title, re.I)
    if m:
        return f"19-injection-{m.group(1).upper()}"
    m = re.search(r"\b(0[1-3])\b", title)
    return m.group(1) if m else ""


def cause_from_words(text: str) -> tuple[str | None, list[str]]:
    """The one cause a text names (or None) and every cause it matched. A cause written by its name
    (bad_batch, no_warmup, ...) wins; otherwise the words of CAUSE_WORDS are looked up."""
    low = (text or "").strip().lower()
    if low.replace("-", "_").replace(" ", "_") in CAUSES:
        return low.replace("-", "_").replace(" ", "_"), [low]
    hits = [c for c in CAUSES if "_" in c and re.search(rf"(?<![a-z_]){c}(?![a-z_])", low.replace("-", "_"))]
    if not hits:
        hits = [c for c, words in CAUSE_WORDS.items()
                if any(re.search(r"(?<![a-z])" + w, low) for w in words)]
        # gradient words in a bad-batch or optimizer-state sentence explain the mechanism, not the cause
        if len(hits) > 1 and "gradient_explosion" in hits:
            hits.remove("gradient_explosion")
    return (hits[0] if len(hits) == 1 else None), hits


# ---------------------------------------------------------------------------------------------------
# The reference solutions (solutions/*.md): one section per fault, fields as in a diagnoses file
# ---------------------------------------------------------------------------------------------------


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
                fields[m.group(1)] = _clean(m.group(2))
        if "fault" not in fields:
            continue
        path_ids = [node_key(p) for p in re.split(r"→|->|,", fields.get("path", "")) if node_key(p)]
        refs[fields["fault"]] = Reference(fields["fault"], node_key(fields.get("leaf", "")) or "",
                                          fields.get("cause", ""), path_ids, fields.get("diagnosis", ""),
                                          fields.get("remediation", ""), title)
    return text, refs


def check_reference(refs: dict[str, Reference], tree: dict[str, TreeNode]) -> list[str]:
    """Every way the reference disagrees with the tree (empty when in sync): unknown node ids, a leaf that is
    not a leaf or has another cause, a documented path that the tree's yes/no links do not allow."""
    problems = []
    for r in refs.values():
        for nid in dict.fromkeys(r.path + [r.leaf]):
            if nid not in tree:
                problems.append(f"{r.fault}: node {nid} does not exist in the stability tree")
        if r.leaf in tree:
            if tree[r.leaf].kind != "leaf":
                problems.append(f"{r.fault}: {r.leaf} is not a leaf")
            elif tree[r.leaf].cause != r.cause:
                problems.append(f"{r.fault}: leaf {r.leaf} has cause {tree[r.leaf].cause}, the reference says {r.cause}")
        first = next((n.id for n in tree.values() if n.kind == "question"), None)
        if not r.path or r.path[0] != first or r.path[-1] != r.leaf:
            problems.append(f"{r.fault}: the documented path must start at {first} and end at the leaf {r.leaf}")
        for a, b in zip(r.path, r.path[1:]):
            if a in tree and b in tree and b not in (tree[a].yes, tree[a].no):
                problems.append(f"{r.fault}: the path goes from {a} to {b}, which is neither its yes nor its no")
    return problems


# ---------------------------------------------------------------------------------------------------
# Which run carries which fault
# ---------------------------------------------------------------------------------------------------


def lab_faults(lab: Lab) -> tuple[str, ...]:
    from minitrain.lab import blind

    return tuple(blind.LABS["break-it" if lab.key == "break-it" else "spike"]["faults"])


def blind_folder(lab: Lab, experiments: Path) -> Path:
    return Path(experiments) / lab.runs[0].split("/")[0]


def fault_of(lab: Lab, run_id: str, experiments: Path, mapping: dict | None = None) -> str | None:
    """The fault a run carries: its manifest (spike lab), its name (19-injection-A/B/C) or the sealed mapping."""
    if lab.key == "spike":
        inj = reader.injection_of(reader.manifest_of(Path(experiments) / run_id))
        if inj and inj != "none":
            return inj
        m = re.match(r"^19-injection-([ABC])(?:$|-)", run_id)
        return {v: k for k, v in LAB_LETTERS.items()}[m.group(1)] if m else None
    short = run_id.split("/")[-1]
    return (mapping or {}).get(short, {}).get("fault")


def spike_run_id(fault: str, experiments: Path) -> str:
    """The lab's run folder of an injection: 19-injection-A, or the one 19-injection-A-* if only that exists."""
    name = f"19-injection-{LAB_LETTERS[fault]}"
    if (Path(experiments) / name).is_dir():
        return name
    others = sorted(p.name for p in Path(experiments).glob(f"{name}-*")
                    if (p / "manifest.json").exists() and not p.name.endswith("-remediated"))
    return others[0] if len(others) == 1 else name


def expected_runs(lab: Lab, experiments: Path, mapping: dict | None = None) -> dict[str, str]:
    """{fault: run id} for the lab's three runs."""
    if lab.key == "spike":
        return {f: spike_run_id(f, experiments) for f in lab_faults(lab)}
    out = {}
    for run in lab.runs:
        fault = fault_of(lab, run, experiments, mapping)
        if fault:
            out[fault] = run
    return out


MEASURE_LINES = {
    # fault -> the measurements that tell it, as (label, key, baseline key)
    "scale": (("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
              ("ratio to the baseline at K", "grad_norm_ratio_at_K", None),
              ("loss at K", "loss_at_K", "baseline_loss_at_K"),
              ("largest Adam v jump at K (run / baseline)", "v_jump_ratio_at_K", None),
              ("mean loss difference over K+1..K+50", "mean_loss_diff_after_K", None),
              ("first step whose loss differs from the baseline", "first_step_differing", None)),
    "bad_batch": (("loss at K", "loss_at_K", "baseline_loss_at_K"),
                  ("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
                  ("duplicated rows in the batch at K", "dup_rows_at_K", "baseline_dup_rows_at_K"),
                  ("rare-token share at K", "rare_share_at_K", "baseline_rare_share_at_K"),
                  ("largest loss difference after K (step)", "max_loss_diff_after_K", "max_loss_diff_step"),
                  ("recovery steps (loss within 0.02 nats of the baseline from then on)", "recovery_steps", None)),
    "v_corrupt": (("Adam v jump at K (run / baseline)", "v_jump_ratio_at_K", None),
                  ("tensor with the v jump", "v_jump_param", None),
                  ("steps until its v is within 10% of the baseline", "v_steps_to_within_10pct", None),
                  ("loss at K", "loss_at_K", "baseline_loss_at_K"),
                  ("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
                  ("mean loss difference over K+1..K+50", "mean_loss_diff_after_K", None),
                  ("largest loss difference after K (step)", "max_loss_diff_after_K", "max_loss_diff_step")),
    "bad_init": (("step-0 loss", "step0_loss", "baseline_step0_loss"),
                 ("layer-0 activation vs baseline at step 0", "act0_ratio_step0", None),
                 ("first non-finite step", "non_finite_step", None),
                 ("largest loss in the first 100 steps", "max_loss_first_100", None)),
    "no_warmup": (("lr at step 0", "lr_first", None),
                  ("largest loss in the first 100 steps", "max_loss_first_100", None),
                  ("step-0 loss", "step0_loss", "baseline_step0_loss"),
                  ("final validation loss (difference to the baseline)", "final_val_loss", "final_val_loss_diff")),
    "broken_mask": (("final validation minus training loss", "final_val_minus_train", "baseline_final_val_minus_train"),
                    ("final validation loss (difference to the baseline)", "final_val_loss", "final_val_loss_diff"),
                    ("step-0 loss", "step0_loss", "baseline_step0_loss")),
}


def measured_lines(fault: str, m: dict) -> list[str]:
    out = []
    for label, key, other in MEASURE_LINES.get(fault, ()):
        value = fmt(m.get(key))
        if other:
            sep = "step" if other == "max_loss_diff_step" else ("difference" if other.endswith("_diff") else "baseline")
            value += f" ({sep} {fmt(m.get(other))})"
        out.append(f"  - {label}: {value}")
    return out


# ---------------------------------------------------------------------------------------------------
# Seal, reveal
# ---------------------------------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def seal_path(d: Path, lab: Lab) -> Path:
    return Path(d) / lab.file.replace(".md", ".seal.json")


SEAL_KEYS = ("lab", "file", "sha256", "sealed_at", "text")


def read_seal(d: Path, lab: Lab) -> dict | None:
    path = seal_path(d, lab)
    if not path.exists():
        return None
    seal = reader.read_json(path, "seal file")
    if not isinstance(seal, dict):
        raise UserError(f"{path} is damaged (not a JSON object); the seal cannot be trusted, ask your instructor")
    missing = [k for k in SEAL_KEYS if not isinstance(seal.get(k), str)]
    if missing:
        raise UserError(f"{path} is damaged (missing {', '.join(missing)}); the seal cannot be trusted, "
                        "ask your instructor")
    if seal["sha256"] != sha256_text(seal["text"]):
        raise UserError(f"{path} is damaged (its text does not match its hash); the seal cannot be trusted, "
                        "ask your instructor")
    return seal


# ---------------------------------------------------------------------------------------------------
# Reveal history: a log each reveal appends to, which survives deleting the seal
# ---------------------------------------------------------------------------------------------------
#
# learners/NAME/phase-19/reveal-history.jsonl, one line per reveal: the lab, when, and the seal it showed the
# solutions against. Each line carries the sha256 of the line before it, so an edited or removed line in the
# middle breaks the chain. Grade and check report the history and flag a seal made after a reveal (delete
# the seal, edit the diagnoses, reveal again). The honest limit (docs/reliability.md): these are local files;
# a learner who deletes or rewrites the whole history (and reveal-LAB.md, which each reveal writes) leaves no
# trace minitrain can see. Only a copy kept elsewhere (an instructor's) can stop that.

HISTORY_NAME = "reveal-history.jsonl"


def history_path(d: Path) -> Path:
    return Path(d) / HISTORY_NAME


def read_history(d: Path) -> tuple[list[dict], str | None]:
    """Every reveal logged in the learner's folder, and a note when the chain of lines is broken."""
    path = history_path(d)
    if not path.exists():
        return [], None
    entries, prev, note = [], None, None
    for i, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = reader.loads_json(line)
        except (ValueError, UnicodeDecodeError):
            return entries, f"{path} line {i} is damaged"
        if not isinstance(entry, dict):
            return entries, f"{path} line {i} is damaged"
        if entry.get("prev") != prev and note is None:
            note = f"{path} was edited (line {i} does not follow the line before it)"
        prev = hashlib.sha256(line).hexdigest()
        entries.append(entry)
    return entries, note


def log_reveal(d: Path, lab: Lab, seal: dict, new_seal: bool) -> None:
    """Append this reveal to the history (appended and flushed to disk, never rewritten)."""
    path = history_path(d)
    old = path.read_bytes() if path.exists() else b""
    lines = [line for line in old.splitlines() if line.strip()]
    prev = hashlib.sha256(lines[-1]).hexdigest() if lines else None
    entry = {"lab": lab.key, "revealed_at": utc_now(), "seal_sha256": seal["sha256"], "sealed_at": seal["sealed_at"],
             "new_seal": new_seal, "prev": prev}
    with open(path, "ab") as f:
        if old and not old.endswith(b"\n"):
            f.write(b"\n")
        f.write((json.dumps(entry, sort_keys=True, allow_nan=False) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def history_flags(d: Path, lab: Lab, seal: dict | None) -> tuple[list[dict], list[str]]:
    """This lab's reveals, and what is wrong with them: a seal made after an earlier reveal, a seal that says
    it was revealed with no reveal logged (the history deleted), an edited history."""
    entries, note = read_history(d)
    mine = [e for e in entries if e.get("lab") == lab.key]
    flags = [note] if note else []
    if seal is None:
        return mine, flags
    earlier = [e for e in mine if e.get("seal_sha256") != seal["sha256"] or str(e.get("revealed_at", "")) < seal["sealed_at"]]
    if earlier:
        first = earlier[0]
        flags.append(f"RE-SEALED AFTER A REVEAL: the solutions were shown at {first.get('revealed_at')} against the seal "
                     f"{str(first.get('seal_sha256'))[:16]}; the current seal ({seal['sha256'][:16]}) was made at "
                     f"{seal['sealed_at']}, after it")
    if not mine and (seal.get("revealed_at") or (Path(d) / f"reveal-{lab.key}.md").exists()):
        flags.append(f"the reveal history {history_path(d).name} has no reveal of this lab, yet the solutions were "
                     "shown (the history was deleted)")
    return mine, flags


def walk(run: Path) -> dict | None:
    """The stability walker's verdict on a run ({leaf, cause, anomaly_step, ...}), or None if it cannot run."""
    try:
        from minitrain.analysis import stability
    except ImportError:
        return None
    try:
        return stability.diagnose_run(Path(run))
    except (UserError, ValueError, KeyError, IndexError):  # an informational line: never fail the reveal over it
        return None


def reveal(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None,
           force: bool = False) -> tuple[str, Path]:
    """Seal the diagnoses (first time only), then the reference completed with the learner's numbers.
    Returns (text to show, file it was also written to)."""
    from minitrain.lab import blind

    d = existing_learner(name, learners)
    dfile = d / lab.file
    if not dfile.exists():
        raise UserError(f"{dfile} is missing; restore it from a fresh 'minitrain learner init' of another name")
    read_reference(lab, solutions)  # fail before sealing if the solutions are missing ...
    if lab.key != "spike":
        blind.read_public(blind_folder(lab, experiments))  # ... or the shuffled lab was never made
    seal = read_seal(d, lab)
    text = dfile.read_text()
    if seal is None:
        filled = [x for x in parse_diagnoses(text) if x.filled()]
        if len(filled) < 3 and not force:
            raise UserError(f"{dfile} has {len(filled)} of 3 diagnoses filled in (node, diagnosis and remediation); "
                            "fill them in first, or pass --force to reveal anyway (the empty ones score 0)")
        seal = {"lab": lab.key, "file": lab.file, "sha256": sha256_text(text), "sealed_at": utc_now(), "text": text}
        files.atomic_write_json(seal_path(d, lab), seal)
        new_seal = True
        head = f"sealed {dfile} (sha256 {seal['sha256'][:16]}, {seal['sealed_at']}) before showing the solutions"
    else:
        new_seal = False
        head = f"{dfile} was sealed at {seal['sealed_at']} (sha256 {seal['sha256'][:16]})"
        if sha256_text(text) != seal["sha256"]:
            head += "; it has been EDITED since: the sealed text is what is graded"
    mapping = None
    if lab.key != "spike":
        mapping = blind.reveal_mapping(blind_folder(lab, experiments), by=name)
    else:
        spoilers.mark_revealed(experiments, by=name)
    # the lab's pages and the index now show the walker's answers (they were sealed until here)
    spoilers.refresh(experiments, [Path(experiments) / r for r in expected_runs(lab, experiments, mapping).values()])
    if not seal.get("revealed_at"):
        seal["revealed_at"] = utc_now()
        files.atomic_write_json(seal_path(d, lab), seal)
    log_reveal(d, lab, seal, new_seal)  # before anything is shown
    _, flags = history_flags(d, lab, seal)
    ref_text, refs = read_reference(lab, solutions)
    out = [head, *flags, ""]
    problems = _tree_problems(refs)
    if problems:
        out += ["WARNING: the reference solutions disagree with the stability tree: " + "; ".join(problems), ""]
    out.append(complete_reference(ref_text, refs, lab, experiments, mapping))
    shown = "\n".join(out).rstrip() + "\n"
    path = d / f"reveal-{lab.key}.md"
    files.atomic_write_text(path, shown)
    return shown, path


def _tree_problems(refs: dict[str, Reference]) -> list[str]:
    try:
        tree = stability_tree()
    except ImportError:
        return ["stability.py is missing"]
    return check_reference(refs, tree)


def complete_reference(ref_text: str, refs: dict[str, Reference], lab: Lab, experiments: Path,
                       mapping: dict | None) -> str:
    """The reference text with, under each fault's section, the numbers measured on the learner's run."""
    runs = expected_runs(lab, experiments, mapping)
    text = ref_text
    for fault in lab_faults(lab):
        run_id = runs.get(fault)
        block = measured_block(fault, run_id, lab, experiments, mapping)
        marker = f"<!-- measured:{fault} -->"
        text = text.replace(marker, block) if marker in text else text + "\n" + block + "\n"
    return text


def measured_block(fault: str, run_id: str | None, lab: Lab, experiments: Path, mapping: dict | None) -> str:
    if run_id is None:
        return f"**Measured on your run**: no run of the lab carries {fault}."
    run = Path(experiments) / run_id
    where = f"`{run_id}`" + (f" (sealed mapping: {run_id.split('/')[-1]} carried {fault})" if mapping else "")
    if not (run / "metrics.jsonl").exists():
        return f"**Measured on your run {where}**: not found; train it ('just lab', 'just phase-19-blind' or " \
               "'just break-it-shuffled') and reveal again to see your numbers."
    baseline = reader.find_baseline(run, experiments)
    k = _fault_step(run, fault, mapping)
    m = measure(run, baseline, k)
    lines = [f"**Measured on your run {where}** against `{m['baseline'] or 'no baseline found'}`"
             + (f", K = {k}" if k is not None else "") + ":"]
    lines += measured_lines(fault, m)
    verdict = walk(run)
    if verdict:
        lines.append(f"  - the stability walker on this run: {verdict.get('leaf')} ({verdict.get('cause')}), "
                     f"anomaly at step {verdict.get('anomaly_step')}")
    return "\n".join(lines)


def _fault_step(run: Path, fault: str, mapping: dict | None) -> int | None:
    if fault in ("bad_init", "no_warmup", "broken_mask"):
        return None
    if mapping:
        return (mapping.get(run.name, {}).get("overrides") or {}).get("injection_step")
    return reader.config_of(reader.manifest_of(run)).get("injection_step")


# ---------------------------------------------------------------------------------------------------
# Grade
# ---------------------------------------------------------------------------------------------------


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


def judge(d: Diagnosis | None, ref: Reference, tree: dict[str, TreeNode]) -> tuple[bool, str, str | None, str]:
    """(correct, explanation, cause read, where the cause was read from). The rule is in the module doc."""
    turns = [n for n in accepted_nodes(tree, ref.path) if n not in (ref.leaf, section_of(ref.leaf))]
    right = (f"the reference leaf is {ref.leaf} ({ref.cause}), where the walk turns at "
             f"{' → '.join(turns + [ref.leaf])}")
    if d is None:
        return False, f"no diagnosis for this run; {right}", None, ""
    if not d.node.strip():
        return False, f"no node given; {right}", None, ""
    nid = node_key(d.node)
    if nid is None:
        return False, f"'{d.node}' names no node id (write it as stability-check.md prints it, e.g. §1); {right}", None, ""
    if nid not in tree:
        return False, f"node {nid} does not exist in stability-check.md; {right}", None, ""
    if nid not in accepted_nodes(tree, ref.path):
        if nid in ref.path:
            return False, (f"stopped at {nid} ({tree[nid].title}), which this run's walk passes with 'no': "
                           f"keep walking; {right}"), None, ""
        return False, (f"stopped at {nid} ({tree[nid].title or 'untitled'}), which is not on the documented path; "
                       f"{right}"), None, ""
    if d.cause.strip():
        cause, hits = cause_from_words(d.cause)
        source = "your cause field"
        if cause is None:
            return False, (f"the cause field '{d.cause}' names {'several causes: ' + ', '.join(hits) if hits else 'no known cause'} "
                           f"(use one of {', '.join(CAUSES)}); {right}"), None, source
    elif tree[nid].kind == "leaf":
        cause, source = tree[nid].cause, f"leaf {nid}"
    else:
        cause, hits = cause_from_words(d.diagnosis)
        source = "your diagnosis sentence"
        if cause is None:
            what = f"names several causes ({', '.join(hits)})" if hits else "names no cause this grader knows"
            return False, (f"{nid} is not a leaf and your diagnosis {what}; add a 'cause:' line. {right}"), None, source
    if cause != ref.cause:
        return False, f"cause {cause} (from {source}), but this run's cause is {ref.cause}; {right}", cause, source
    for part, words in (("diagnosis", d.diagnosis), ("remediation", d.remediation)):
        concepts = (tree[ref.leaf].concepts or {}).get(part) or ()
        if concepts and not concepts_named(concepts, words):
            return False, (f"node and cause are right ({nid}, {cause}), but your {part} names none of the key "
                           f"concepts of {ref.leaf}: {'; '.join(c for c, _ in concepts)}"), cause, source
    note = "" if nid == ref.leaf else f"; you stopped at {nid}, on the path above the leaf {ref.leaf}"
    return True, f"{nid}, cause {cause} (from {source}){note}", cause, source


def concepts_named(concepts, text: str) -> list[str]:
    """The key concepts (concept, regex) that `text` names."""
    low = (text or "").lower()
    return [name for name, pattern in concepts if re.search(pattern, low)]


def grade_text(text: str, lab: Lab, refs: dict[str, Reference], tree: dict[str, TreeNode], experiments: Path,
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
        ok, why, cause, source = judge(d, ref, tree)
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
    from minitrain.lab import blind

    d = existing_learner(name, learners)
    seal = read_seal(d, lab)
    if seal is None:
        flag = "" if lab.key == "spike" else f" --lab {lab.key}"
        raise UserError(f"{d / lab.file} is not sealed yet; run 'minitrain reveal {name}{flag}' first "
                        "(it seals your diagnoses, then shows the solutions)")
    mapping = blind.open_mapping(blind_folder(lab, experiments)) if lab.key != "spike" else None
    _, refs = read_reference(lab, solutions)
    tree = stability_tree()
    verdicts = grade_text(seal["text"], lab, refs, tree, experiments, mapping)
    now = (d / lab.file).read_text() if (d / lab.file).exists() else ""
    edited = sha256_text(now) != seal["sha256"]
    current = grade_text(now, lab, refs, tree, experiments, mapping) if edited else None
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


# ---------------------------------------------------------------------------------------------------
# Check: the lab's Definition of Done and stop condition
# ---------------------------------------------------------------------------------------------------


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


def hook_is_noop() -> tuple[bool, str]:
    """The Definition of Done's "a clean maybe_inject hook, a no-op by default": the default config injects
    nothing, and maybe_inject hands back its target untouched at every point (tests/test_injections.py proves
    the stronger claim: a run is byte-identical with the hook replaced by the identity)."""
    from minitrain.core import injections
    from minitrain.core.config import build_config

    cfg = build_config({}, [])
    if cfg.injection != "none":
        return False, f"the default config injects '{cfg.injection}'"
    none_ctx = injections.InjectContext(cfg=cfg, step=0)
    for point in injections.POINTS:
        target = object()
        if any(injections.maybe_inject(point, 0, target, ctx) is not target for ctx in (None, none_ctx)):
            return False, f"maybe_inject changes its target at '{point}' with no injection configured"
    return True, f"maybe_inject at {', '.join(injections.POINTS)} returns its target untouched with injection none"


def check(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None) -> list[tuple[bool, str]]:
    from minitrain.lab import blind

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
    found = []
    for run_id in runs.values():
        if reader.manifest_of(Path(experiments) / run_id).get("status") in ("finished", "non_finite"):
            found.append(run_id)
    items.append((len(found) == 3, f"three runs with manifests in {experiments}/: "
                  + ", ".join(f"{r} {'ok' if r in found else 'MISSING or unfinished'}" for r in runs.values())))
    seal = read_seal(d, lab)
    text = (d / lab.file).read_text() if (d / lab.file).exists() else ""
    filled = [x for x in parse_diagnoses(seal["text"] if seal else text) if x.filled()]
    items.append((len(filled) >= 3, f"{lab.file} filled in: {len(filled)} of 3 sections have node, diagnosis and remediation"))
    if seal is None:
        flag = "" if lab.key == "spike" else f" --lab {lab.key}"
        items.append((False, f"{lab.file} sealed before the reveal: not sealed yet (run 'minitrain reveal {name}{flag}')"))
    else:
        before = seal["sealed_at"] <= (seal.get("revealed_at") or seal["sealed_at"])
        unchanged = sha256_text(text) == seal["sha256"]
        reveals, flags = history_flags(d, lab, seal)
        items.append((before and unchanged and not flags, f"{lab.file} sealed before the reveal: sealed {seal['sealed_at']}, "
                      f"revealed {seal.get('revealed_at') or 'not yet'} ({len(reveals)} reveal(s) logged)"
                      + ("" if unchanged else "; EDITED after the seal") + "".join(f"; {f}" for f in flags)))
    if seal is not None:
        g = grade(name, lab, learners, experiments, solutions)
        misses = [v.run or v.fault for v in g.verdicts if not v.correct]
        items.append((g.score == 3, f"the three diagnoses match the faults: {g.score}/3"
                      + (f" (missed: {', '.join(misses)}; see 'minitrain grade {name}')" if misses else "")))
    else:
        items.append((False, "the three diagnoses match the faults: not graded before the reveal"))
    if lab.key == "spike":
        lessons = d / "notes" / "lessons.md"
        new = new_lesson_lines(lessons.read_text()) if lessons.exists() else []
        covered = sorted({c for line in new for c in cause_from_words(line)[1]} & {"gradient_explosion", "bad_batch",
                                                                                   "optimizer_state_corruption"})
        items.append((len(new) >= 3, f"stop condition: notes/lessons.md has {len(new)} new line(s) (3 needed)"
                      + (f"; they name: {', '.join(covered)}" if covered else "")))
    return items
