"""Reading a learner's words: the diagnoses file (tolerant of formatting), node ids, and the cause a text names."""
from __future__ import annotations

import re
from dataclasses import dataclass

from minitrain.analysis.causes import CAUSES as CAUSES_REGISTRY
from minitrain.lab.learner.meaning import causes_named

# Patterns (regular expressions, lower case, English and Spanish) that name each cause, from the causes registry
CAUSE_WORDS = {c.name: c.words for c in CAUSES_REGISTRY.values() if c.words}
CAUSES = tuple(CAUSE_WORDS) + ("unknown",)


def node_key(text: str) -> str | None:
    """The canonical id of the first node reference in `text`: '§4.A', '4.a', '§ 6.2.' -> '§4.A', '§6.2'."""
    m = (re.search(r"§\s*(\d+(?:\.[0-9A-Za-z]+)*)", text or "")
         or re.search(r"(?<![\w.])(\d+(?:\.[0-9A-Za-z]+)*)(?!\w)", text or ""))
    return f"§{m.group(1).upper()}" if m else None


def cause_from_words(text: str) -> tuple[str | None, list[str]]:
    """The one cause a text names (or None) and every cause it names. A cause written by its name (bad_batch,
    no_warmup, ...) wins; otherwise the causes registry's words are read, negations understood (meaning.py);
    a gradient spike beside another cause is that cause's mechanism, not a second cause."""
    low = (text or "").strip().lower()
    if low.replace("-", "_").replace(" ", "_") in CAUSES:
        return low.replace("-", "_").replace(" ", "_"), [low]
    hits = list(causes_named(low))
    if len(hits) > 1 and "gradient_explosion" in hits:
        hits.remove("gradient_explosion")
    return (hits[0] if len(hits) == 1 else None), hits


# ---------------------------------------------------------------------------------------------------
# The diagnoses file: ## sections with "- field: value" lines
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
            setattr(current, last, clean_value(m.group(2)))
        elif last and line.strip() and not line.lstrip().startswith(("-", "*", "+")):
            setattr(current, last, (getattr(current, last) + " " + clean_value(line)).strip())
        elif not line.strip():
            last = None
    for d in out:
        if not d.run:
            d.run = _run_from_title(d.title)
        d.run = d.run.strip().strip("`").rstrip("/")
        if d.run.startswith("experiments/"):
            d.run = d.run[len("experiments/"):]
    return [d for d in out if d.run or d.node or d.diagnosis]


def clean_value(value: str) -> str:
    """A field's value without markdown emphasis or code quotes."""
    return re.sub(r"(\*\*|__)", "", value).strip().strip("`").strip()


def _run_from_title(title: str) -> str:
    m = re.search(r"(?:injection|inyecci[oó]n)\s+([ABC])\b", title, re.I)
    if m:
        return f"19-injection-{m.group(1).upper()}"
    m = re.search(r"\b(0[1-3])\b", title)
    return m.group(1) if m else ""
