"""What a learner's sentence says: the causes it names, the fixes it proposes, and whether it says them at all.

What can be said is the causes registry's (analysis/causes.py): each cause's concepts, a few parts each (what
moved, what happened to it, which way), every part a set of synonyms in English and Spanish. A concept is said
when all its parts are in one sentence close together (a loose concept, a subject and what happened to it,
does not count the little words between them); words are compared by their stems (Snowball's English and Spanish
stemmers), so a paraphrase, another tense or the other language is heard without its exact words. A concept
counts only where the learner affirms it: one with a negation just before it in the same clause ("not the
learning rate", "no es un lote malo", "rather than a bad batch", "the gradients were not scaled") is ruled out,
not named; one said the wrong way round ("v shrank" where v grew) goes to a teacher; one with a word close by
that makes it another thing is not said ("masking was wrong in the loss"). The adjective of an indefinite
("something odd", "algo raro") names nothing. A concept inside a longer one of the right cause is
that one's words, not another cause; a verb's object is the nearest one ("restore beta2 and pin it in the
checkpoint" restores beta2).

A diagnosis of a run whose fault is X earns:
    credit   it names X and no other cause, as a sentence
    review   it names X and also another cause (not as alternatives), or names X with a hedge ("maybe"), or names
             only a symptom of X that other causes share ("the data", "the gradient norm jumped"), or names X the
             wrong way round: a teacher reads it
    no       empty; a list of words rather than a sentence; another cause and not X; X "or" another cause, or X
             as a "maybe" beside another cause ("maybe a bad batch, maybe the LR");
             two answers offered by their form ("either ... or", "o ... o"), or X across an "or" from what another
             cause is about ("a bad batch or the learning rate"; in a hedged answer no "or" is needed); nothing that
             names a cause; a symptom of X beside a fault put on what another cause is about ("the learning rate
             was too low"); a `cause:` field that names another cause
A NaN (a state other causes end in) listed beside X is its symptom, not a second cause.
The optional `cause:` field counts as naming its cause, but the sentence must still say something: a field
alone beside a sentence that names nothing is "no failure mode".
A remediation earns:
    credit   it proposes a fix registered for X and nothing harmful for X (turning clipping off, raising the LR,
             keeping the fault in place...)
    review   a registered fix with a hedge, beside another cause's fix (rewinding to a checkpoint is a step of many
             fixes, not another fix) or beside a half measure; a workaround alone; no fix for a run that recovers
             by itself, saying that it recovers
    no       empty; a list of words; anything harmful; only fixes of other causes; no registered fix
Each verdict comes with its reason, in the words of the concepts it found (what the learner is shown).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import product

import snowballstemmer

from minitrain.analysis.causes import CAUSES, HARMFUL_ALWAYS, SUBJECTS, SYMPTOMS_ALWAYS, Concept
from minitrain.analysis.vocabulary import ABBREVIATIONS, INSPECT, JUDGED

CREDIT, NO, REVIEW = "credit", "no", "review"
CONCEPTS_THAT_ARE_STEPS = tuple(c for cause in CAUSES.values() for c in cause.fixes if c.step)

# a negation rules out what follows it in the same clause, up to this many words later
NEGATION_REACH = 6
NEGATORS = re.compile(r"(?<![\w'])(?:not|n't|no|never|nor|neither|ni|nunca|rather than|instead of|en vez de"
                      r"|en lugar de|excluding|except)(?![\w'])|n't\b")
# "... was ruled out", and what clears it ("the batch was fine", "las filas eran normales")
AFTER_NEGATORS = re.compile(r"^\W*(?:\w+\W+){0,3}?(?:(?:is|was) (?:not it|ruled out|excluded)|ruled out|excluded"
                            r"|descartad[oa]s?|(?:is|was|are|were|looks?|looked|seems?|seemed) (?:fine|ok|okay|normal"
                            r"|clean|harmless|innocent|not the (?:problem|cause|issue))|harmless|irrelevant|innocent"
                            r"|(?:worked|works|was working) (?:fine|well|correctly|as (?:it )?should)|intact|untouched"
                            r"|(?:was|were|is|are)(?:n't| not) touched"
                            r"|funcionaba(?:n)? bien|funciona(?:n)? bien|funcionó bien"
                            r"|(?:estaba|está|estaban|están|era|eran|es|son) (?:bien|normal|normales|limpi[oa]s?"
                            r"|inocentes?|inofensiv[oa]s?)|inofensiv[oa]s?)\b")
CLAUSE_BREAK = re.compile(r"[;:!?\n,()]|\.(?!\w)|(?<!\w)(?:but|however|although|though|whereas|while|yet|because|since"
                          r"|pero|sino|aunque|porque|ya que|mientras)(?!\w)")
# "could" and "podría" alone are ability ("could see the future"), not doubt
HEDGES = re.compile(r"(?<!\w)(?:maybe|perhaps|probably|possibly|might|may be|could be|could have|could also|not sure"
                    r"|unsure|not certain|i think|guess|guessing|suspect|presumably|my bet|quiz[aá]s?|tal vez|puede que|puede ser|podr[ií]a ser"
                    r"|podr[ií]a haber|podr[ií]a tratarse|a lo mejor|es posible que|posiblemente|probablemente"
                    r"|creo que|no estoy segur[oa]|supongo|sospecho|presumiblemente|unless|a menos que|salvo que)(?!\w)|\?")
ALTERNATIVES = re.compile(r"(?<!\w)(?:or|either|o|u)(?!\w)")
# two answers offered as alternatives by their form ("either A or B", "whether A or B", "o A o B", "ya sea A o B"),
# whatever A and B are: a hedge even where one of them names no cause the grader knows
CORRELATIVE = re.compile(r"(?<!\w)(?:either|whether)(?!\w).*?(?<!\w)or(?!\w)"
                         r"|(?:^|[.;:!?(]\s*)(?:o|u|ya sea|bien|sea)\s.*?(?<!\w)(?:o|u)(?!\w)")
# an indefinite word's adjective describes nothing in particular ("something odd", "algo raro"): it names nothing
INDEFINITE = frozenset("something anything algo nada".split())
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


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").lower().replace("’", "'").replace("`", "")).strip()


def negated(text: str, start: int, end: int) -> bool:
    """Whether the phrase at text[start:end] is ruled out: a negator in the NEGATION_REACH words before it, in its
    clause, or "... was ruled out" just after it."""
    before = text[:start]
    breaks = [m.end() for m in CLAUSE_BREAK.finditer(before)]
    clause = before[breaks[-1] if breaks else 0:]
    reach = " ".join(clause.split()[-NEGATION_REACH:])
    return bool(NEGATORS.search(reach)) or ruled_out_after(text, end)


def ruled_out_after(text: str, end: int) -> bool:
    after = text[end:]
    cut = CLAUSE_BREAK.search(after)
    return bool(AFTER_NEGATORS.search(after[:cut.start()] if cut else after))


# ---------------------------------------------------------------------------------------------------
# Words: tokens, their stems, and the parts of a concept found among them
# ---------------------------------------------------------------------------------------------------

ENGLISH, SPANISH = snowballstemmer.stemmer("english"), snowballstemmer.stemmer("spanish")
TOKEN = re.compile(r"\w+(?:[.']\w+)*")
SENTENCE_END = re.compile(r"[.;!?](?!\w)|\n")
# a later part of a concept is ruled out by a negation right before it ("the gradients were not scaled")
NEGATION_REACH_INSIDE = 2


def without_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


@lru_cache(maxsize=None)
def stems(word: str) -> tuple[str, str, str, str]:
    """A word's English stem (British spelling), Spanish stem, Spanish stem without accents, and that stem less a
    verb's last vowels (Snowball leaves short Spanish verbs whole: "inflar", "infló"): two words are one when a
    stem agrees ("multiplied" / "multiply", "multiplicó" / "multiplicar" / "multiplico"). A short form is
    its word ("ckpt" is "checkpoint")."""
    word = ABBREVIATIONS.get(word, word)
    word = word[:-2] if word.endswith("'s") else word
    spanish = re.sub(r"(?<=[aeiou])duj(?=[aeiou])", "duc", word)  # "-ducir" verbs: redujo is reducir's
    plain = SPANISH.stemWord(without_accents(spanish))
    root = re.sub(r"(?:[aeiou]+|[aei]r)$", "", plain)
    return (ENGLISH.stemWord(word.replace("iz", "is")), SPANISH.stemWord(spanish), plain,
            root if len(root) >= 3 else plain)


@lru_cache(maxsize=None)
def synonyms(part: str) -> tuple[tuple[tuple[str, object], ...], ...]:
    """A part's synonyms, each a phrase of word matchers: ("re", pattern) or ("stem", stems)."""
    out = []
    for synonym in part.split("|"):
        phrase = []
        for word in synonym.split():
            if word.startswith("~"):
                phrase.append(("re", re.compile(word[1:])))
            else:
                phrase += [("stem", stems(w)) for w in TOKEN.findall(word)]
        if phrase:
            out.append(tuple(phrase))
    return tuple(out)


# which stems to compare: English, Spanish, or both when a text has too few little words to tell
ENGLISH_WORDS = frozenset("the an of to and is was were in on for with by that it its so at".split())
SPANISH_WORDS = frozenset("el la los las de del que y en un una se por con para es fue su al lo".split())
STEMS_OF = {"en": (0,), "es": (1, 2, 3), "": (0, 1, 2, 3)}


def language(words: tuple[str, ...]) -> str:
    english, spanish = (sum(w in little for w in words) for little in (ENGLISH_WORDS, SPANISH_WORDS))
    return "en" if english > spanish else "es" if spanish > english else ""


def same_word(matcher: tuple[str, object], word: str, lang: str = "") -> bool:
    kind, what = matcher
    if kind == "re":
        return bool(what.fullmatch(word))
    mine = stems(word)
    return any(mine[k] == what[k] for k in STEMS_OF[lang])


@dataclass(frozen=True)
class Words:
    """A text as words, each with its character span, its sentence and its clause, and its language."""
    text: str
    lang: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    sentences: tuple[int, ...]
    clauses: tuple[int, ...]
    by_stem: dict[tuple[int, str], list[int]]  # where each stem is (a phrase is looked for where its first word is)
    vague: frozenset[int]  # words that describe nothing in particular ("odd" in "something odd")
    found: dict = field(default_factory=dict, compare=False)  # occurrences already looked for
    backwards: set = field(default_factory=set, compare=False)  # concepts said the wrong way round
    where: dict = field(default_factory=dict, compare=False)  # {label: [(first word, last word, parts)]} affirmed

    def starts(self, matcher: tuple[str, object]) -> list[int]:
        if matcher[0] != "stem":
            return list(range(len(self.words)))
        return sorted({i for k in STEMS_OF[self.lang] for i in self.by_stem.get((k, matcher[1][k]), ())})

    def occurrences(self, part: str, hidden: frozenset[int] = frozenset()) -> list[tuple[int, int]]:
        """(first, last) word of every place the part is said, skipping hidden words."""
        if (part, hidden) not in self.found:
            out = []
            for phrase in synonyms(part):
                for i in self.starts(phrase[0]):
                    at = range(i, i + len(phrase))
                    if at[-1] < len(self.words) and not hidden.intersection(at) and all(
                            same_word(m, self.words[j], self.lang) for m, j in zip(phrase, at)):
                        out.append((i, i + len(phrase) - 1))
            self.found[part, hidden] = out
        return self.found[part, hidden]

    def negated(self, found: list[tuple[int, int]]) -> bool:
        """Whether a concept found at these places is ruled out: a negator before its first word (in the clause,
        NEGATION_REACH words) or right before a later part, or "... was ruled out" after it. Its own words are no
        negator ("no warmup" says there was none)."""
        mine = {j for a, b in found for j in range(a, b + 1)}
        says_not = bool(NEGATORS.search(" ".join(self.words[j] for j in sorted(mine))))
        for k, (first, _) in enumerate(sorted(found)):
            if k and says_not:  # "do not turn clipping off", "no quitar nunca el recorte": one negation, stressed
                break
            reach = NEGATION_REACH if k == 0 else NEGATION_REACH_INSIDE
            before = [self.words[j] for j in range(max(0, first - reach), first)
                      if j not in mine and self.clauses[j] == self.clauses[first]]
            if NEGATORS.search(" ".join(before)):
                return True
        return ruled_out_after(self.text, self.spans[max(b for _, b in found)][1])


@lru_cache(maxsize=256)
def words_of(text: str) -> Words:
    matches = list(TOKEN.finditer(text))
    ends = [m.end() for m in SENTENCE_END.finditer(text)]
    breaks = [m.end() for m in CLAUSE_BREAK.finditer(text)]
    words = tuple(m.group() for m in matches)
    by_stem: dict[tuple[int, str], list[int]] = {}
    for i, word in enumerate(words):
        for k, stem in enumerate(stems(word)):
            by_stem.setdefault((k, stem), []).append(i)
    vague = frozenset(i + 1 for i, word in enumerate(words[:-1]) if word in INDEFINITE)
    return Words(text, language(words), words, tuple(m.span() for m in matches),
                 tuple(sum(e <= m.start() for e in ends) for m in matches),
                 tuple(sum(e <= m.start() for e in breaks) for m in matches), by_stem, vague)


def the_wrong_way(w: Words, concept: Concept, found: list[tuple[int, int]], hidden: frozenset[int]) -> bool:
    """Whether the first word saying which way the concept's subject moved, after it in its sentence, says the
    opposite way ("v was shrunk", "se dividió por 100")."""
    if not concept.opposite:
        return False
    first = min(found)[1]
    along = {a for a, _ in w.occurrences(concept.along, hidden) if a > first and w.sentences[a] == w.sentences[first]}
    opposite = {a for a, _ in w.occurrences(concept.opposite, hidden)
                if a > first and w.sentences[a] == w.sentences[first]}
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
            places.append(not negated(w.text, *m.span()))
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


def verb_elsewhere(low: str, labels: list[str], others: list[str]) -> bool:
    """Whether every place the fixes `labels` were found starts at a verb that another fix takes as its object
    sooner ("restore beta2 and pin it in the checkpoint" restores beta2, not the checkpoint): a verb's object is
    the nearest one."""
    w = words_of(low)
    mine = [p for label in labels for p in w.where.get(label, [])]
    theirs = [p for label in others for p in w.where.get(label, [])]
    return bool(mine) and all(any(o[0] == m[0] and o[1] < m[1] for o in theirs) for m in mine)


def offered_with_another(low: str, cause: str, right: list[str], hedge: bool = False) -> str:
    """What the right concept is offered beside as an alternative ("X or the learning rate"): a subject of
    another cause on the other side of an "or" in the same sentence, outside the right concept's words; in a
    hedged answer ("maybe X, though it could be the optimizer") no "or" is needed."""
    w = words_of(low)
    mine = [p for label in right for p in w.where.get(label, [])]
    ors = [i for i, word in enumerate(w.words) if ALTERNATIVES.fullmatch(word)]
    for subject, causes in SUBJECTS:
        if cause in causes or not affirmed(low, (subject,))[0]:
            continue
        for a, b, _ in w.where.get(subject.label, []):
            for first, last, _ in mine:
                if w.sentences[a] == w.sentences[first] and not first <= a <= last and (hedge or any(
                        min(last, b) < i < max(first, a) for i in ors)):
                    return subject.label
    return ""


def blames(low: str, cause: str) -> str:
    """What the text faults that another cause is about ("the learning rate was too low": the learning rate),
    even where that is no cause the registry knows."""
    for subject, causes in SUBJECTS:
        judged = Concept(subject.label, (subject.parts[0], JUDGED), reach=3, ordered=True, unless=subject.unless)
        if cause not in causes and affirmed(low, (judged,))[0]:
            return subject.label
    return ""


def first_said(low: str, labels: list[str]) -> int:
    """The first word where one of the concepts `labels` is affirmed; a `cause:` field (no place in the sentence)
    comes first."""
    w = words_of(low)
    return min((a for label in labels for a, _, _ in w.where.get(label, [])), default=-1)


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
        return Point(CREDIT, f"names {said({cause: right})} and no other cause")
    if right:
        if ALTERNATIVES.search(low) or hedged_before(low, right):  # the right cause offered as a maybe: two answers
            return Point(NO, f"hedges between {said({cause: right})} and {said(others)}: name one cause")
        if first_said(low, [label for labels in others.values() for label in labels]) < first_said(low, right):
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
    if signs:
        return Point(REVIEW, f"names only a symptom ({', '.join(signs)}) that several causes share: a teacher reads it")
    return Point(NO, "names no failure mode")


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
    if harm:
        return Point(NO, f"proposes {', '.join(harm)}, which makes {cause} worse")
    fixes = causes_named(low, "fixes")
    mine = fixes.pop(cause, None)
    if mine and verb_elsewhere(low, mine, [label for labels in fixes.values() for label in labels]):
        mine = None
    workaround, _ = affirmed(low, CAUSES[cause].workarounds)
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
    if workaround:
        return Point(REVIEW, f"proposes {', '.join(workaround)}, which eases {cause} without removing it: a teacher "
                             "reads it")
    if CAUSES[cause].recovers and not set(fixes) - {"healthy"} and RECOVERY.search(low):
        return Point(REVIEW, f"proposes no fix: {cause}'s run recovers by itself, a teacher reads it")
    if fixes:
        return Point(NO, f"proposes {said(fixes)}: a fix for another cause, not for {cause}")
    registered = "; ".join(dict.fromkeys(c.label for c in CAUSES[cause].fixes)) or "none registered"
    return Point(NO, f"proposes none of the fixes registered for {cause} ({registered})")
