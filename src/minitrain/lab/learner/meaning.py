"""What a learner's sentence says: the causes it names, the fixes it proposes, and whether it says them at all.

The words are the causes registry's (analysis/causes.py: each cause's names, signs, fixes and harmful fixes, in
English and Spanish). A phrase counts only where the learner affirms it: one with a negation just before it in
the same clause ("not the learning rate", "no es un lote malo", "rather than a bad batch") is ruled out, not named.

A diagnosis of a run whose fault is X earns:
    credit   it names X and no other cause, as a sentence
    review   it names X and also another cause (not as alternatives), or names X with a hedge ("maybe"), or names
             only a symptom of X that other causes share ("the data", "the gradient norm jumped"): a teacher reads it
    no       empty; a list of words rather than a sentence; another cause and not X; X "or" another cause;
             nothing that names a cause; a `cause:` field that names another cause
The optional `cause:` field counts as naming its cause, but the sentence must still say something: a field
alone beside a sentence that names nothing is "no failure mode".
A remediation earns:
    credit   it proposes a fix registered for X and nothing harmful for X (turning clipping off, raising the LR...)
    review   a registered fix with a hedge
    no       empty; a list of words; anything harmful; only fixes of other causes; no registered fix
Each verdict comes with its reason, in the words of the concepts it found (what the learner is shown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from minitrain.analysis.causes import CAUSES, HARMFUL_ALWAYS, Concept

CREDIT, NO, REVIEW = "credit", "no", "review"

# a negation rules out what follows it in the same clause, up to this many words later
NEGATION_REACH = 6
NEGATORS = re.compile(r"(?<![\w'])(?:not|n't|no|never|nor|neither|ni|nunca|rather than|instead of|en vez de"
                      r"|en lugar de|excluding|except)(?![\w'])|n't\b")
AFTER_NEGATORS = re.compile(r"^\W*(?:\w+\W+){0,3}?(?:(?:is|was) (?:not it|ruled out|excluded)|ruled out|excluded|descartad[oa]s?)\b")
CLAUSE_BREAK = re.compile(r"[.;:!?\n,()]|(?<!\w)(?:but|however|although|though|whereas|yet|because|since|pero|sino"
                          r"|aunque|porque|ya que|mientras)(?!\w)")
HEDGES = re.compile(r"(?<!\w)(?:maybe|perhaps|probably|possibly|might|may be|not sure|i think|i guess|quiz[aá]s?"
                    r"|tal vez|puede que|probablemente|creo que|no estoy segur[oa])(?!\w)|\?")
ALTERNATIVES = re.compile(r"(?<!\w)(?:or|either|o|u)(?!\w)")
# words a sentence has and a list of keywords does not
FUNCTION_WORDS = frozenset(
    "the a an was were is are be been of to by at in on its it that this so and has had have got with for from "
    "el la los las de del se es fue un una en que por con y al lo su".split())


@dataclass(frozen=True)
class Point:
    """One part of an answer judged: credit / no / review, and why (in the words the learner is shown)."""
    verdict: str
    why: str


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").lower().replace("’", "'").replace("`", "")).strip()


def negated(text: str, start: int, end: int) -> bool:
    """Whether the phrase at text[start:end] is ruled out: a negator in the NEGATION_REACH words before it, in its
    clause, or "... was ruled out" just after it."""
    before = text[:start]
    breaks = [m.end() for m in CLAUSE_BREAK.finditer(before)]
    clause = before[breaks[-1] if breaks else 0:]
    reach = " ".join(clause.split()[-NEGATION_REACH:])
    if NEGATORS.search(reach):
        return True
    after = text[end:]
    cut = CLAUSE_BREAK.search(after)
    return bool(AFTER_NEGATORS.search(after[:cut.start()] if cut else after))


def affirmed(text: str, concepts: tuple[Concept, ...]) -> tuple[list[str], list[str]]:
    """(concepts the text affirms, concepts it only names under a negation), by their names."""
    yes, ruled_out = [], []
    for label, pattern in concepts:
        spans = [m.span() for m in re.finditer(r"(?<![\w])(?:" + pattern + ")", text)]
        if any(not negated(text, a, b) for a, b in spans):
            yes.append(label)
        elif spans:
            ruled_out.append(label)
    return yes, ruled_out


def causes_named(text: str, part: str = "names") -> dict[str, list[str]]:
    """{cause: the concepts of `part` (names, signs or fixes) the text affirms}, causes with none left out."""
    low = normalise(text)
    out = {}
    for cause in CAUSES.values():
        found, _ = affirmed(low, getattr(cause, part))
        if found:
            out[cause.name] = found
    return out


def keyword_list(text: str) -> bool:
    """A list of keywords, not a sentence: two or more short items between commas (or ; / |) and not one of
    the little words a sentence is made with."""
    items = [x for x in re.split(r"[,;/|\n]", text) if x.strip()]
    words = re.findall(r"[\w'.-]+", normalise(text))
    return len(items) >= 2 and all(len(x.split()) <= 3 for x in items) and not FUNCTION_WORDS & set(words)


def said(named: dict[str, list[str]]) -> str:
    return "; ".join(f"{', '.join(labels)} ({cause})" for cause, labels in named.items())


def judge_diagnosis(text: str, cause: str, cause_field: str = "") -> Point:
    """Does this diagnosis name the failure mode `cause`, and nothing else? (the rule is in the module doc)"""
    if not normalise(text):
        return Point(NO, "no diagnosis written")
    if keyword_list(text):
        return Point(NO, "a list of words, not a sentence: say what happened to the run, and why")
    field = normalise(cause_field).replace("-", "_").replace(" ", "_")
    stated = field if field in CAUSES else next(iter(causes_named(cause_field)), None) if field else None
    if stated and stated != cause:
        return Point(NO, f"your cause field says {stated}, not the fault of this run")
    low = normalise(text)
    named = causes_named(low)
    if stated and not named:
        return Point(NO, f"your cause field says {stated}, but your sentence names no failure mode: say what "
                         "happened, in your words")
    if stated:
        named.setdefault(stated, []).insert(0, "your cause field")
    right, others = named.pop(cause, None), named
    if right and not others:
        if HEDGES.search(low):
            return Point(REVIEW, f"names {said({cause: right})}, with a hedge: a teacher reads it")
        return Point(CREDIT, f"names {said({cause: right})} and no other cause")
    if right:
        if ALTERNATIVES.search(low):
            return Point(NO, f"hedges between {said({cause: right})} and {said(others)}: name one cause")
        return Point(REVIEW, f"names {said({cause: right})}, and also {said(others)}: a teacher decides which "
                             "one you gave as the cause")
    if others:
        return Point(NO, f"names {said(others)}, not the fault of this run")
    signs = causes_named(low, "signs").get(cause)
    if signs:
        return Point(REVIEW, f"names only a symptom ({', '.join(signs)}) that several causes share: a teacher reads it")
    _, ruled_out = affirmed(low, CAUSES[cause].names)
    if ruled_out:
        return Point(NO, f"rules out {', '.join(ruled_out)}, which is what happened")
    return Point(NO, "names no failure mode")


def judge_remediation(text: str, cause: str) -> Point:
    """Is this remediation a fix registered for `cause`, with nothing harmful for it?"""
    if not normalise(text):
        return Point(NO, "no remediation written")
    if keyword_list(text):
        return Point(NO, "a list of words, not a sentence: say what you would do")
    low = normalise(text)
    harm, _ = affirmed(low, HARMFUL_ALWAYS + CAUSES[cause].harmful)
    if harm:
        return Point(NO, f"proposes {', '.join(harm)}, which makes {cause} worse")
    fixes = causes_named(low, "fixes")
    mine = fixes.pop(cause, None)
    if mine:
        if HEDGES.search(low):
            return Point(REVIEW, f"proposes {', '.join(mine)} (a fix registered for {cause}), with a hedge: a "
                                 "teacher reads it")
        return Point(CREDIT, f"proposes {', '.join(mine)}, a fix registered for {cause}")
    if fixes:
        return Point(NO, f"proposes {said(fixes)}: a fix for another cause, not for {cause}")
    registered = "; ".join(label for label, _ in CAUSES[cause].fixes) or "none registered"
    return Point(NO, f"proposes none of the fixes registered for {cause} ({registered})")
