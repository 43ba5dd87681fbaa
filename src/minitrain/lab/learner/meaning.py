"""What a learner's sentence says: the causes it names, the fixes it proposes, and whether it says them at all.

What can be said is the causes registry's (analysis/causes.py): each cause's concepts, a few parts each (what
moved, what happened to it, which way), every part a set of synonyms in English and Spanish. A concept is said
when all its parts are in one sentence close together (a loose concept, a subject and what happened to it,
does not count the little words between them); words are compared by their stems (Snowball's English and Spanish
stemmers), so a paraphrase, another tense or the other language is heard without its exact words. A concept
counts only where the learner affirms it: one with a negation just before it in the same clause ("not the
learning rate", "no es un lote malo", "rather than a bad batch", "the gradients were not scaled") is ruled out,
not named, and so is one that something after it clears ("the batch was fine"); one said the wrong way round
("v shrank" where v grew: its direction part replaced by the opposite) goes to a teacher; one with a word close by
that makes it another thing is not said ("masking was wrong in the loss"); a predicate after a clause with its
own subject is that subject's ("v ..., so its updates were too big"). The adjective of an indefinite
("something odd", "algo raro") names nothing. A concept inside a longer one of the right cause is
that one's words, not another cause; a verb's object is the nearest one ("restore beta2 and pin it in the
checkpoint" restores beta2). A config knob is the concept it sets, and the value a remediation sets it to is read
against the lab's (causes.KNOBS: "lr_max to 6e-4" raises the learning rate). A long unknown word one slip off a
word the concepts know is that word misspelt (words.spelt).

A diagnosis of a run whose fault is X earns:
    credit   it names X and no other cause, as a sentence
    review   it names X and also another cause (not as alternatives; X first, or after a "because"), or a fault
             on what another cause is about that does not follow from X ("and the warmup was too short"), or names X
             with a hedge ("maybe"), or names only a symptom of X that other causes share ("the data", "the
             gradient norm jumped", what a training curve did, a NaN), or names X the wrong way round: a teacher
             reads it
    no       empty; a list of words rather than a sentence; another cause and not X; X "or" another cause, or X
             as a "maybe" beside another cause ("maybe a bad batch, maybe the LR");
             two answers offered by their form ("either ... or", "o ... o"), or X across an "or" from what another
             cause is about ("a bad batch or the learning rate"; in a hedged answer no "or" is needed); nothing that
             names a cause; another cause given first and X after it as what followed; a symptom of X beside a
             fault put on what another cause is about ("the learning rate was too low", "... because of the
             learning rate"); a `cause:` field that names another cause
A NaN (a state other causes end in) listed beside X is its symptom, not a second cause.
The optional `cause:` field counts as naming its cause, but the sentence must still say something: a field
alone beside a sentence that names nothing is "no failure mode".
A remediation earns:
    credit   it proposes a fix registered for X and nothing harmful for X (turning clipping off, raising the LR,
             keeping the fault in place...)
    review   a registered fix with a hedge, beside another cause's fix (rewinding to a checkpoint is a step of many
             fixes, not another fix; another cause's fix as the object of "check" is a place to look) or beside a
             half measure; a workaround alone; no fix (waiting) for a run that recovers by itself, saying so
    no       empty; a list of words; anything harmful (a knob set the harmful way too), even beside a registered fix;
             only fixes of other causes; no registered fix
Each verdict comes with its reason, in the words of the concepts it found (what the learner is shown).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import product

from minitrain.analysis.causes import CAUSES, HARMFUL_ALWAYS, KNOBS, NOT_A_CAUSE, SUBJECTS, SYMPTOMS_ALWAYS, Concept
from minitrain.analysis.vocabulary import INSPECT, JUDGED
from minitrain.core.config import TrainConfig
from minitrain.lab.learner.words import SENTENCE_END, Words, negated, normalise, words_of

CREDIT, NO, REVIEW = "credit", "no", "review"
CONCEPTS_THAT_ARE_STEPS = tuple(c for cause in CAUSES.values() for c in cause.fixes if c.step)

# "could" and "podría" alone are ability ("could see the future"), not doubt; "what I think happened:" heads an answer
HEDGES = re.compile(r"(?<!\w)(?:maybe|perhaps|probably|possibly|might|may be|could be|could have|could also|not sure"
                    r"|unsure|not certain|(?<!what )i think|guess|guessing|suspect|suppose|presumably|my bet|quiz[aá]s?|tal vez"
                    r"|puede que|puede ser|podr[ií]a ser|it seems|seems like|seems that|apparently|parece que|parece ser"
                    r"|aparentemente"
                    r"|podr[ií]a haber|podr[ií]a tratarse|a lo mejor|es posible que|posiblemente|probablemente"
                    r"|creo que|no estoy segur[oa]|supongo|sospecho|presumiblemente|unless|a menos que|salvo que)"
                    r"(?!\w)|\?")
BECAUSE_WORDS = ("because|since|due to|caused by|as a result of|porque|debido a|debido al|por culpa de|por culpa del"
                 "|causado por|causada por|ya que")
BECAUSE = re.compile(r"(?<!\w)(?:" + BECAUSE_WORDS + r")(?!\w)")
CONSEQUENCE = re.compile(r"(?<!\w)(?:so|thus|therefore|hence|which|meaning|entonces|así que|por lo que|lo que"
                         r"|por eso|de modo que)(?!\w)")
EFFECTIVE = frozenset("effective efectivo efectiva real actual".split())
CONTRAST = re.compile(r"(?<!\w)(?:but|however|actually|in fact|pero|sino|en realidad|realmente)(?!\w)")
ALTERNATIVES = re.compile(r"(?<!\w)(?:or|either|o|u)(?!\w)")
# two answers offered as alternatives by their form ("either A or B", "whether A or B", "o A o B", "ya sea A o B"),
# whatever A and B are: a hedge even where one of them names no cause the grader knows
CORRELATIVE = re.compile(r"(?<!\w)(?:either|whether)(?!\w).*?(?<!\w)or(?!\w)"
                         r"|(?:^|[.;:!?(]\s*)(?:o|u|ya sea|bien|sea)\s.*?(?<!\w)(?:o|u)(?!\w)")
# "no fix" is an answer where it says why: the run recovers by itself ("no fix needed" alone says nothing)
RECOVERY = re.compile(r"recover|recupera|decay|decae|by itself|on its own|por s[ií] sol|heals|se cura|goes away")
SETTING = re.compile(r"\w\s*=\s*[\w.]")
JUDGEMENTS = frozenset(JUDGED.split("|")) - {"off"}
FACTOR = re.compile(r"[x×]\d+(?:\.\d+)?|\d+(?:\.\d+)?[x×]")
# a clause that starts with one of these has a subject of its own ("so its updates ...", "y su loss ...")
SUBJECT_STARTS = frozenset("its their his her it they we the this that these su sus el la los las".split())
THEN = frozenset("so and then thus hence y así entonces luego".split())
# words a sentence has and a list of keywords does not
FUNCTION_WORDS = frozenset(
    "the a an was were is are be been of to by at in on its it that this so and has had have got with for from "
    "el la los las de del se es fue un una en que por con y al lo su sus para".split())


@dataclass(frozen=True)
class Point:
    """One part of an answer judged: credit / no / review, and why (in the words the learner is shown)."""
    verdict: str
    why: str


def hedged(low: str) -> bool:
    """Whether the answer is said with a hedge; a "?" in parentheses is a side question, not doubt ("(loss
    scaling?)")."""
    return bool(HEDGES.search(re.sub(r"\?(?=[^()]*\))", "", low)))


def hedged_before(low: str, labels: list[str]) -> bool:
    """Whether the concepts `labels` are said under a hedge: one before them in their sentence ("maybe a bad
    batch, maybe ..."), not one after ("v was corrupted, maybe because of a bad batch" asserts v)."""
    w = words_of(low)
    first = min(a for label in labels for a, _, _ in w.where.get(label, [(len(w.words), 0, 0)]))
    if first >= len(w.words):
        return hedged(low)
    start = max([0] + [m.end() for m in SENTENCE_END.finditer(low[:w.spans[first][0]])])
    return hedged(low[start:w.spans[first][0]])


def the_wrong_way(w: Words, concept: Concept, found: list[tuple[int, int]], hidden: frozenset[int]) -> bool:
    """Whether the first word saying which way the concept's subject moved, after it in its sentence, says the
    opposite way ("v was shrunk", "se dividió por 100")."""
    if not concept.opposite:
        return False
    first = min(found)[1]
    along = {a for a, _ in w.occurrences(concept.along, hidden) if a > first and w.sentences[a] == w.sentences[first]}
    opposite = {a for a, _ in w.occurrences(concept.opposite, hidden)
                if a > first and w.sentences[a] == w.sentences[first]}
    along -= opposite  # "50x smaller": a factor that the next word turns the other way
    return bool(opposite) and min(opposite) < min(along, default=len(w.words))


def near_other(w: Words, concept: Concept, found: list[tuple[int, int]]) -> bool:
    """Whether a word that makes the concept another thing stands close to it in its clause ("the masking was
    wrong in the loss" is the loss's mask)."""
    if not concept.not_near:
        return False
    return any(w.clauses[o] == w.clauses[a] and between(w, min(o, b), max(o, a), LOOSE) <= NEAR
               for o, _ in w.occurrences(concept.not_near) for a, b in found)


def said_where(w: Words, concept: Concept) -> tuple[bool, bool]:
    """(the text affirms the concept somewhere, it says it only under a negation). A concept said the wrong way
    round is neither (it goes to `w.backwards`)."""
    places = []
    if concept.pattern:
        for m in re.finditer(r"(?<![\w])(?:" + concept.pattern + ")", w.text):
            # "causal_mask: false is fine" keeps the setting: what follows a value confirms it, clears nothing
            places.append(not negated(w.text, *m.span(), after=not re.search(r"[=:]", m.group())))
    if concept.parts:
        hidden = w.vague | (frozenset(j for a, b in w.occurrences(concept.unless) for j in range(a, b + 1))
                            if concept.unless else frozenset())
        each = [w.occurrences(part, hidden) for part in concept.parts]
        shared = set.intersection(*({w.sentences[a] for a, _ in places_of} for places_of in each))
        for sentence in sorted(shared):  # the parts of one concept are said in one sentence
            in_it = [[o for o in places_of if w.sentences[o[0]] == sentence] for places_of in each]
            for found in product(*in_it):
                if close_together(w, list(found), concept) and not near_other(w, concept, list(found)):
                    if the_wrong_way(w, concept, list(found), hidden):
                        w.backwards.add(concept.label)
                        continue
                    places.append(not w.negated(list(found)))
                    if places[-1]:
                        w.where.setdefault(concept.label, []).append(
                            (min(a for a, _ in found), max(b for _, b in found), len(found)))
                        return True, False
    if concept.along in concept.parts and said_where(w, the_other_way(concept))[0]:
        w.backwards.add(concept.label)
    return any(places), bool(places) and not any(places)


def the_other_way(concept: Concept) -> Concept:
    """The concept with its direction turned round ("v was shrunk" for "v was inflated")."""
    return replace(concept, label=concept.label + " (the other way)", along="", opposite="",
                   parts=tuple(concept.opposite if part == concept.along else part for part in concept.parts))


def close_together(w: Words, found: list[tuple[int, int]], concept: Concept) -> bool:
    """All parts in one sentence, apart from each other, at most `reach` words between one and the next."""
    if concept.ordered and any(a[1] >= b[0] for a, b in zip(found, found[1:])):
        return False
    ordered = sorted(found)
    if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:])):
        return False
    if len({w.sentences[a] for a, _ in ordered} | {w.sentences[b] for _, b in ordered}) > 1:
        return False
    if any(another_subject(w, a[1], b[0]) for a, b in zip(ordered, ordered[1:])):
        return False
    return all(between(w, a[1], b[0], concept.reach) <= concept.reach for a, b in zip(ordered, ordered[1:]))


def another_subject(w: Words, a: int, b: int) -> bool:
    """Whether a new clause with a subject of its own ("so its updates were too big") stands between word a and
    word b: what follows is said of that subject."""
    breaks = [j for j in range(a + 1, b) if w.clauses[j] != w.clauses[j - 1]]
    return any(w.words[j] in SUBJECT_STARTS or (w.words[j] in THEN and w.words[j + 1] in SUBJECT_STARTS)
               for j in breaks if j + 1 < b)


# a concept this loose is a subject and what happened to it: the little words between them do not count
LOOSE = 5
# a word that makes a concept another thing counts this close to it (content words between)
NEAR = 2


def between(w: Words, a: int, b: int, reach: int) -> int:
    """How many words stand between word a and word b. A tight reach is a phrase (a verb and its object, "drop the
    batch"): every word counts. A loose one skips the little words, so "the denominator of Adam for the bias
    inflated" keeps its subject and verb close in both languages."""
    return sum(reach < LOOSE or w.words[j] not in FUNCTION_WORDS for j in range(a + 1, b))


def affirmed(text: str, concepts: tuple[Concept, ...]) -> tuple[list[str], list[str]]:
    """(concepts the text affirms, concepts it only names under a negation), by their labels."""
    w = words_of(text)
    yes, ruled_out = [], []
    for concept in concepts:
        said_it, only_negated = said_where(w, concept)
        if said_it and concept.label not in yes:
            yes.append(concept.label)
        elif only_negated and concept.label not in ruled_out:
            ruled_out.append(concept.label)
    return yes, [label for label in ruled_out if label not in yes]


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
    the little words a sentence is made with. A setting ("init_scale=1") says what to set, and an item that judges
    or measures its noun ("init mal", "pesos x100") says what happened to it: neither is a keyword."""
    items = [x for x in re.split(r"[,;/|\n]", text) if x.strip()]
    words = re.findall(r"[\w'.-]+", normalise(text))
    return (len(items) >= 2 and all(len(x.split()) <= 3 for x in items) and not FUNCTION_WORDS & set(words)
            and not SETTING.search(text) and not any(statement(x) for x in items))


def statement(item: str) -> bool:
    """A short item that says something of its noun: a judgement ("init mal") or a factor ("pesos x100")."""
    words = normalise(item).split()
    return len(words) >= 2 and any(w in JUDGEMENTS or FACTOR.fullmatch(w) for w in words)


def backwards(text: str, cause: str) -> list[str]:
    """The concepts of `cause` the text says the wrong way round ("v shrank")."""
    w = words_of(normalise(text))
    return [c.label for c in CAUSES[cause].names if c.label in w.backwards]


def inside(low: str, labels: list[str], outer: list[str]) -> bool:
    """Whether every place the concepts `labels` were found lies within a concept of `outer` made of more parts
    ("the LR jumped straight to its peak at step 0" is no warmup, not an LR spike)."""
    w = words_of(low)
    mine = [p for label in labels for p in w.where.get(label, [])]
    theirs = [p for label in outer for p in w.where.get(label, [])]
    return bool(mine) and all(any(o[0] <= m[0] and m[1] <= o[1] and o[2] > m[2] for o in theirs) for m in mine)


def same_verb(low: str, label: str, others: list[str]) -> bool:
    """Whether every place the concept `label` was found starts at the verb of one of `others`' places."""
    w = words_of(low)
    starts = {p[0] for other in others for p in w.where.get(other, [])}
    places = w.where.get(label, [])
    return bool(places) and all(p[0] in starts for p in places)


def said_apart(low: str, labels: list[str], others: list[str]) -> bool:
    """Whether one of the concepts `labels` is said in words of its own, not starting at the verb of one of
    `others` (a workaround beside another cause's fix is that other fix; a setting alone says no verb)."""
    w = words_of(low)
    starts = {p[0] for other in others for p in w.where.get(other, [])}
    return any(p[0] not in starts for label in labels for p in w.where.get(label, []))


def verb_elsewhere(low: str, labels: list[str], others: list[str]) -> bool:
    """Whether every place the fixes `labels` were found starts at a verb that another fix takes as its object
    sooner ("restore beta2 and pin it in the checkpoint" restores beta2, not the checkpoint): a verb's object is
    the nearest one."""
    w = words_of(low)
    mine = [p for label in labels for p in w.where.get(label, [])]
    theirs = [p for label in others for p in w.where.get(label, [])]
    return bool(mine) and all(any(o[0] == m[0] and o[1] < m[1] for o in theirs) for m in mine)


NUMBER_WORDS = frozenset("one two three four five ten a few un una uno dos tres cuatro cinco diez".split())


def a_range(words: tuple[str, ...], i: int) -> bool:
    """Whether the "or" at word i joins two numbers ("one or two gradients", "2 o 3 pasos"): a range, not two
    answers."""
    return 0 < i < len(words) - 1 and all(x in NUMBER_WORDS or x.replace(".", "").isdigit()
                                          for x in (words[i - 1], words[i + 1]))


def offered_with_another(low: str, cause: str, right: list[str], hedge: bool = False) -> str:
    """What the right concept is offered beside as an alternative ("X or the learning rate"): a subject of
    another cause on the other side of an "or" in the same sentence, outside the right concept's words; in a
    hedged answer ("maybe X, though it could be the optimizer") no "or" is needed."""
    w = words_of(low)
    mine = [p for label in right for p in w.where.get(label, [])]
    ors = [i for i, word in enumerate(w.words) if ALTERNATIVES.fullmatch(word) and not a_range(w.words, i)]
    for subject, causes in SUBJECTS:
        if cause in causes or not affirmed(low, (subject,))[0]:
            continue
        for a, b, _ in w.where.get(subject.label, []):
            for first, last, _ in mine:
                if w.sentences[a] == w.sentences[first] and not first <= a <= last and (hedge or any(
                        min(last, b) < i < max(first, a) for i in ors)):
                    return subject.label
    return ""


def blames(low: str, cause: str, reasons: bool = True) -> str:
    """What the text faults that another cause is about ("the learning rate was too low": the learning rate; with
    `reasons`, "the loss spiked because of the learning rate"), even where that is no cause the registry knows."""
    for subject, causes in SUBJECTS:
        judged = Concept(subject.label, (subject.parts[0], JUDGED), reach=3, ordered=True, unless=subject.unless)
        reason = Concept(subject.label, (BECAUSE_WORDS, subject.parts[0]), reach=3, ordered=True, unless=subject.unless)
        if cause not in causes and affirmed(low, (judged, reason) if reasons else (judged,))[0]:
            return subject.label
    return ""


def follows_from(low: str, right: list[str], subject: str) -> bool:
    """Whether what the text faults about `subject` follows from the right concepts, after a "so" or as their
    effect ("v was inflated, so its effective learning rate was too small")."""
    w = words_of(low)
    first = min(a for label in right for a, _, _ in w.where.get(label, [(len(w.words), 0, 0)]))
    at = [a for a, _, _ in w.where.get(subject, [])]
    return bool(at) and all(first < a and (CONSEQUENCE.search(low[w.spans[first][0]:w.spans[a][0]])
                                           or w.words[a - 1] in EFFECTIVE) for a in at)


def first_said(low: str, labels: list[str]) -> int:
    """The first word where one of the concepts `labels` is affirmed; a `cause:` field (no place in the sentence)
    comes first."""
    w = words_of(low)
    return min((a for label in labels for a, _, _ in w.where.get(label, [])), default=-1)


def given_first(low: str, others: list[str], right: list[str]) -> bool:
    """Whether the answer gives another cause first, the right one after it as what followed: not when a
    "because" between them makes the later one the reason ("the gradients exploded because the init was too
    large"), nor when a "but" sets the later one against it ("looks like an explosion, but it is ...")."""
    first, then = first_said(low, others), first_said(low, right)
    if not first < then:
        return False
    w = words_of(low)
    between_them = low[w.spans[first][1]:w.spans[then][0]] if first >= 0 else ""
    return not (BECAUSE.search(between_them) and w.sentences[first] == w.sentences[then]) and not CONTRAST.search(
        between_them)


def explained_by(low: str, right: list[str], others: list[str]) -> bool:
    """Whether the right concept is said to happen because of another cause, in its sentence ("the gradients went
    up fifty times because the learning rate spiked"): that other cause is the answer."""
    w = words_of(low)
    return any(w.sentences[last] == w.sentences[a] and last < a and len(w.words[last:a]) <= REASON_REACH
               and BECAUSE.search(low[w.spans[last][1]:w.spans[a][0]])
               for label in right for _, last, _ in w.where.get(label, [])
               for other in others for a, _, _ in w.where.get(other, []))


REASON_REACH = 4  # words from the end of the right concept to the other cause, "because" among them


def about(low: str, cause: str) -> bool:
    """Whether the text says something of what `cause` is about (the data, Adam's second moment...)."""
    return any(cause in causes and affirmed(low, (subject,))[0] for subject, causes in SUBJECTS)


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
    if right or others or causes_named(low, "signs").get(cause):
        if CORRELATIVE.search(low):
            return Point(NO, "offers two answers as alternatives (either ... or): name one cause")
    if right:  # words of one cause inside a longer concept of another are that concept's
        others = {c: labels for c, labels in others.items() if not inside(low, labels, right)}
        if others and inside(low, right, [label for labels in others.values() for label in labels]):
            right = None
    symptoms = {c: labels for c, labels in others.items() if CAUSES[c].follows}
    if right and symptoms:  # a NaN listed beside the cause is what the cause led to
        others = {c: labels for c, labels in others.items() if c not in symptoms}
    if right and not others:
        other = offered_with_another(low, cause, right, hedge=hedged(low))
        if other:
            return Point(NO, f"offers {said({cause: right})} or {other} as alternatives: name one cause")
        if hedged(low):
            return Point(REVIEW, f"names {said({cause: right})}, with a hedge: a teacher reads it")
        blamed = blames(low, cause, reasons=False)
        if blamed and not follows_from(low, right, blamed):  # a second fault, on what another cause is about ("... and the warmup was too short")
            return Point(REVIEW, f"names {said({cause: right})}, and also faults {blamed}: a teacher decides which "
                                 "one you gave as the cause")
        return Point(CREDIT, f"names {said({cause: right})} and no other cause")
    if right:
        if ALTERNATIVES.search(low) or hedged_before(low, right):  # the right cause offered as a maybe: two answers
            return Point(NO, f"hedges between {said({cause: right})} and {said(others)}: name one cause")
        other_labels = [label for labels in others.values() for label in labels]
        if given_first(low, other_labels, right) or explained_by(low, right, other_labels):
            return Point(NO, f"gives {said(others)} as the cause, and {said({cause: right})} after it as what "
                             "followed")
        return Point(REVIEW, f"names {said({cause: right})}, and also {said(others)}: a teacher decides which "
                             "one you gave as the cause")
    wrong_way = backwards(low, cause)
    if wrong_way:
        also = f", and {said(others)}" if others else ""
        return Point(REVIEW, f"names {', '.join(wrong_way)} the wrong way round{also}: a teacher reads it")
    if others and all(CAUSES[c].follows for c in others):  # a NaN alone: where several causes end
        return Point(REVIEW, f"names only a symptom ({said(others)}) that several causes end in: a teacher reads it")
    if others:
        return Point(NO, f"names {said(others)}, not the fault of this run")
    _, ruled_out = affirmed(low, CAUSES[cause].names)
    if ruled_out:
        return Point(NO, f"rules out {', '.join(ruled_out)}, which is what happened")
    signs = causes_named(low, "signs").get(cause) or affirmed(low, SYMPTOMS_ALWAYS)[0]
    other = offered_with_another(low, cause, signs or [], hedge=False)
    if other:
        return Point(NO, f"offers {', '.join(signs)} or {other} as alternatives: name one cause")
    blamed = blames(low, cause)
    if signs and blamed:
        return Point(NO, f"puts the fault on {blamed}, not on what happened to this run")
    misnamed = affirmed(low, NOT_A_CAUSE)[0]
    if signs and misnamed:
        return Point(NO, f"names {', '.join(misnamed)}, which is not what broke this run")
    if signs:
        return Point(REVIEW, f"names only a symptom ({', '.join(signs)}) that several causes share: a teacher reads it")
    return Point(NO, "names no failure mode")


NUMBER = r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w-]|\.\d)"  # a full stop after it ends the sentence
# "lr_max to 6e-4", "grad_clip=100", "lr 3e-4 -> 6e-4", "subir lr_max a 1e-3": the value a knob is set to
SET_TO = (r"\s*(?:(?:back )?(?:to|=|:|->|→|a|hasta|at|of|en|from|de)\s*)?" + NUMBER
          + r"(?:\s*(?:(?:up|down) )?(?:to|->|→|a|hasta)\s*" + NUMBER + ")?")
LAB = TrainConfig()  # the lab's own values: a change's direction is read against them


# a number said of something else than the knob before it ("from step 500", "8 rows", "x50")
NOT_A_VALUE = re.compile(r"(?:step|steps|paso|pasos|panel|row|rows|fila|filas|batch|lote|layer|capa|§|checkpoint"
                         r"|ckpt|before|after|antes|después|iteration|iteración)\s*$"
                         r"|^\s*(?:steps?|pasos?|rows?|filas?|x|×|times|veces|%)")


def knobs_moved(low: str, cause: str) -> list[str]:
    """The harmful changes a remediation makes by setting a config knob to a value, read against the lab's value
    ("lr_max to 6e-4" raises the learning rate from 3e-4; "grad_clip=100" loosens clipping at 1.0). The value is
    the one just after the knob, or else the first in its sentence after it that no other knob comes before and
    that counts no steps or rows ("let the learning rate breathe a little more: say 5e-4")."""
    out = []
    knobs = [k for k in KNOBS if k.only in ("", cause)]
    any_knob = "|".join(k.words for k in KNOBS)
    for knob in knobs:
        for m in re.finditer(r"(?<![\w-])(?:" + knob.words + r")(?![\w-])", low):
            now = re.match(SET_TO, low[m.end():])
            value = (now.group(2) or now.group(1)) if now else later_value(low, m.end(), any_knob)
            if value is None:
                continue
            known = float(getattr(LAB, knob.field))
            harm = knob.zero if float(value) == 0 else knob.up if float(value) > known * 1.001 else ""
            if harm == knob.up and lowered(low, m.start()):  # "lower init_scale to 10": down, but not to the lab's
                harm = f"lowering {knob.field} to {value}, still above the lab's {getattr(LAB, knob.field)}"
            if harm and not negated(low, *m.span()) and harm not in out:
                out.append(harm)
    return out


def lowered(low: str, start: int) -> bool:
    """Whether a verb that lowers stands just before the knob at `start`, in its clause ("lower init_scale")."""
    before = low[:start].split()[-2:]
    return any(LOWERING.fullmatch(word) for word in before)


LOWERING = re.compile(r"lower|reduce|decrease|cut|drop|bajar|baja|reducir|reduce|disminuir|disminuye")


def later_value(low: str, start: int, any_knob: str) -> str | None:
    """The first value after `start` in its clause (a colon goes on: "more: say 5e-4"), before any other knob, that
    is no step, row or factor."""
    end = re.compile(r"[.;!?,()](?!\d)|\n|(?<!\w)(?:and|y|then|luego|but|pero)(?!\w)").search(low, start)
    rest = low[start:end.start() if end else len(low)]
    other = re.search(r"(?<![\w-])(?:" + any_knob + r")(?![\w-])", rest)
    rest = rest[:other.start()] if other else rest
    for m in re.finditer(r"(?<![\w.])" + NUMBER, rest):
        if not (NOT_A_VALUE.search(rest[:m.start()]) or NOT_A_VALUE.search(rest[m.end():])):
            return m.group(1)
    return None


# a verb of looking takes what follows it this close as its object
LOOKED_AT = 3


def inspected(low: str, labels: list[str]) -> bool:
    """Whether every place the fixes `labels` were found is the object of a verb of looking, just before it ("check
    the loss scaling and the sum-vs-mean reduction"): things to look at, not fixes proposed."""
    w = words_of(low)
    places = [p for label in labels for p in w.where.get(label, [])]
    looks = [b for _, b in w.occurrences(INSPECT)]
    return bool(places) and all(any(0 < a - i <= LOOKED_AT and w.clauses[i] == w.clauses[a] for i in looks)
                                for a, _, _ in places)


def judge_remediation(text: str, cause: str) -> Point:
    """Is this remediation a fix registered for `cause`, with nothing harmful for it?"""
    if not normalise(text):
        return Point(NO, "no remediation written")
    if keyword_list(text):
        return Point(NO, "a list of words, not a sentence: say what you would do")
    low = normalise(text)
    harm, _ = affirmed(low, HARMFUL_ALWAYS + CAUSES[cause].harmful)
    moved = knobs_moved(low, cause)
    short_of = [h for h in moved if h.startswith("lowering ")]
    harm += [h for h in moved if h not in harm and h not in short_of]
    if harm:
        return Point(NO, f"proposes {', '.join(harm)}, which makes {cause} worse")
    fixes = causes_named(low, "fixes")
    mine = fixes.pop(cause, None)
    if mine and verb_elsewhere(low, mine, [label for labels in fixes.values() for label in labels]):
        mine = None
    workaround, _ = affirmed(low, CAUSES[cause].workarounds)
    workaround += short_of  # the right way, not far enough: a half measure
    if mine:  # "fix the mask (lower-triangular)": the fix says which mask the vaguer words meant
        workaround = [label for label in workaround if not same_verb(low, label, mine)]
    steps = {c.label for c in CONCEPTS_THAT_ARE_STEPS}
    fixes = {c: labels for c, labels in fixes.items() if set(labels) - steps - set(mine or ()) and not
             inspected(low, labels)}
    if mine:
        if hedged(low):
            return Point(REVIEW, f"proposes {', '.join(mine)} (a fix registered for {cause}), with a hedge: a "
                                 "teacher reads it")
        if fixes or workaround:  # another cause's fix beside it (the answer of a hedge), or a half measure
            return Point(REVIEW, f"proposes {', '.join(mine)} (a fix registered for {cause}), and also "
                                 f"{said(fixes) or ', '.join(workaround)}: a teacher reads it")
        return Point(CREDIT, f"proposes {', '.join(mine)}, a fix registered for {cause}")
    if workaround and not said_apart(low, [label for labels in fixes.values() for label in labels], workaround):
        return Point(REVIEW, f"proposes {', '.join(workaround)}, which eases {cause} without removing it: a teacher "
                             "reads it")
    if CAUSES[cause].recovers and not set(fixes) - {"healthy"} and RECOVERY.search(low):
        if not about(low, cause):  # "it recovered by itself" says no why
            return Point(NO, "proposes no fix, and says nothing of why the run would recover: say what you would do")
        return Point(REVIEW, f"proposes no fix: {cause}'s run recovers by itself, a teacher reads it")
    if fixes:
        return Point(NO, f"proposes {said(fixes)}: a fix for another cause, not for {cause}")
    rewound, _ = affirmed(low, CONCEPTS_THAT_ARE_STEPS)
    if rewound:  # a step many fixes share, alone: the run goes back to before the fault, which may come again
        return Point(REVIEW, f"proposes only {rewound[0]}, a step of a fix without the fix for {cause}: a teacher "
                             "reads it")
    registered = "; ".join(dict.fromkeys(c.label for c in CAUSES[cause].fixes)) or "none registered"
    return Point(NO, f"proposes none of the fixes registered for {cause} ({registered})")
