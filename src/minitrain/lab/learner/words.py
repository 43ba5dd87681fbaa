"""A learner's text as words: tokens with their sentence and clause, their stems in English and Spanish, where a
concept's part is said among them, and which phrases a negation rules out. meaning.py reads the causes' concepts
with it.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

import snowballstemmer

from minitrain.analysis import causes
from minitrain.analysis.vocabulary import ABBREVIATIONS

# a negation rules out what follows it in the same clause, up to this many words later
NEGATION_REACH = 6
NEGATORS = re.compile(r"(?<![\w'])(?:not|n't|no|never|nor|neither|ni|nunca|rather than|instead of|en vez de"
                      r"|en lugar de|sin que|excluding|except|unlike|as opposed to|a diferencia de|al contrario que"
                      # a verb of ruling out before what it rules out ("ruled out the bad batch", "descarto el warmup")
                      r"|ruled out|rule out|ruling out|dismissed|descarto|descartamos|descarté|descartando|descartar"
                      r"|excluyo)(?![\w'])"
                      r"|n't\b")
# "... was ruled out", and what clears it ("the batch was fine", "las filas eran normales"), said of it: not of
# another subject after an "and" ("the gradients were multiplied and clipping was fine")
AFTER_NEGATORS = re.compile(r"^\W*(?:(?!(?:and|y|e|or|o)\b)\w+\W+){0,3}?(?:(?:is|was) (?:not it|ruled out|excluded)"
                            r"|ruled out|excluded"
                            r"|descartad[oa]s?|(?:is|was|are|were|looks?|looked|seems?|seemed) "
                            r"(?:(?:completely|perfectly|totally|entirely) )?(?:fine|ok|okay|normal|ordinary|usual"
                            r"|clean|harmless|innocent|not the (?:problem|cause|issue))|harmless|irrelevant|innocent"
                            r"|(?:worked|works|was working) (?:fine|well|correctly|as (?:it )?should)|intact|untouched"
                            r"|(?:was|were|is|are)(?:n't| not) touched"
                            r"|funcionaba(?:n)? bien|funciona(?:n)? bien|funcionó bien"
                            r"|(?:estaba|está|estaban|están|era|eran|es|son) (?:bien|normal|normales|limpi[oa]s?"
                            r"|inocentes?|inofensiv[oa]s?)|inofensiv[oa]s?)\b")
CLAUSE_BREAK = re.compile(r"[;:!?\n,()]|->|=>|→|⇒|\.(?!\w)|(?<!\w)(?:but|however|although|though|whereas|while|yet"
                          r"|because|since|pero|sino|aunque|porque|ya que|mientras)(?!\w)")
# an indefinite word's adjective describes nothing in particular ("something odd", "algo raro"): it names nothing
INDEFINITE = frozenset("something anything nothing algo nada".split())
# a word after one that takes a determiner is a verb with its object ("something multiplied every gradient")
DETERMINER = frozenset("the a an every each all its their his her this that these those el la los las un una todos"
                       " todas cada su sus".split())


# a word of the verb's object: a conjunction ends it ("scale and clipping off" turns clipping off, scales nothing off)
OBJECT_WORD = r"(?!(?:and|or|but|y|o|pero|then)\b)[\w'.-]+"
# a phrasal verb's particle said after its object ("turn the warmup back on", "leave batch 500 out") is put back
# beside its verb; "keep" and "leave" only with "out" ("leave the mask off" keeps it off)
SPLIT_PARTICLE = re.compile(r"\b(turn|switch|throw|take|kick|cut|bring|shut|toss|filter|crank|bump|dial|ramp|jack"
                            r"|pump|scale|nudge|push)((?: " + OBJECT_WORD + r"){1,3}?)( back)? (on|off|out|up|down)\b")
SPLIT_OUT = re.compile(r"\b(leave|keep)((?: " + OBJECT_WORD + r"){1,3}?) out\b")


def normalise(text: str) -> str:
    low = re.sub(r"\s+", " ", (text or "").lower().replace("’", "'").replace("`", "")).strip()
    return SPLIT_OUT.sub(r"\1 out\2", SPLIT_PARTICLE.sub(r"\1 \4\2\3", low))


def negated(text: str, start: int, end: int, after: bool = True) -> bool:
    """Whether the phrase at text[start:end] is ruled out: a negator in the NEGATION_REACH words before it, in its
    clause, or (with `after`) "... was ruled out" just after it."""
    before = text[:start]
    breaks = [m.end() for m in CLAUSE_BREAK.finditer(before)]
    clause = before[breaks[-1] if breaks else 0:]
    reach = " ".join(clause.split()[-NEGATION_REACH:])
    return bool(NEGATORS.search(reach)) or (after and ruled_out_after(text, end))


def ruled_out_after(text: str, end: int) -> bool:
    after = text[end:]
    cut = CLAUSE_BREAK.search(after)
    return bool(AFTER_NEGATORS.search(after[:cut.start()] if cut else after))


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
    spanish = re.sub(r"(?<=[aeiou])zc(?=[aeo])", "c", spanish)  # "-ecer" verbs: restablezca is restablecer's
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


# a word this long, one slip off a word the concepts know and like no word they know, is that word misspelt
TYPO_LENGTH = 6


def slips(word: str) -> set[str]:
    """What a word becomes by one slip of the keyboard: a letter dropped, or two letters next to each other
    swapped, the first letter kept. A letter changed is no slip here: "louder" is not "loader", "matches" not
    "batches"."""
    return ({word[:i] + word[i + 1:] for i in range(1, len(word))}
            | {word[:i] + word[i + 1] + word[i] + word[i + 2:] for i in range(len(word) - 1)})


@lru_cache(maxsize=1)
def known() -> tuple[frozenset[str], dict[str, set[str]]]:
    """(the stems of every word the concepts are made of, {a slip: the long words it comes from})."""
    concepts = [c for cause in causes.CAUSES.values() for group in (cause.names, cause.signs, cause.fixes,
                                                                    cause.harmful, cause.workarounds) for c in group]
    concepts += [*causes.HARMFUL_ALWAYS, *causes.SYMPTOMS_ALWAYS, *causes.NOT_A_CAUSE,
                 *(subject for subject, _ in causes.SUBJECTS)]
    words = {w for c in concepts for part in (*c.parts, c.unless, c.not_near) for synonym in part.split("|")
             if not synonym.startswith("~") for w in TOKEN.findall(synonym)}
    stems_known = frozenset(x for w in words for x in stems(w))
    forms: dict[str, set[str]] = {}
    for w in words:
        if len(w) >= TYPO_LENGTH and w.isalpha():
            for form in slips(w):
                forms.setdefault(form, set()).add(w)
    return stems_known, forms


@lru_cache(maxsize=None)
def spelt(word: str) -> str:
    """The word the concepts know that a long unknown word misspells ("momnet" is "moment", "multipled" is
    "multiplied"); the word itself when it is known, short, or one slip off none or several."""
    stems_known, forms = known()
    if len(word) < TYPO_LENGTH or not word.isalpha() or stems_known.intersection(stems(word)):
        return word
    near = set(forms.get(word, ()))
    return near.pop() if len({stems(w)[0] for w in near}) == 1 else word


@lru_cache(maxsize=256)
def words_of(text: str) -> Words:
    matches = list(TOKEN.finditer(text))
    ends = [m.end() for m in SENTENCE_END.finditer(text)]
    breaks = [m.end() for m in CLAUSE_BREAK.finditer(text)]
    words = tuple(spelt(m.group()) for m in matches)
    by_stem: dict[tuple[int, str], list[int]] = {}
    for i, word in enumerate(words):
        for k, stem in enumerate(stems(word)):
            by_stem.setdefault((k, stem), []).append(i)
    vague = frozenset(i + 1 for i, word in enumerate(words[:-1]) if word in INDEFINITE
                      and not (i + 2 < len(words) and words[i + 2] in DETERMINER))
    return Words(text, language(words), words, tuple(m.span() for m in matches),
                 tuple(sum(e <= m.start() for e in ends) for m in matches),
                 tuple(sum(e <= m.start() for e in breaks) for m in matches), by_stem, vague)
