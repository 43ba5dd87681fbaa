"""The §A13-style corpus: English verb-grammar sentences paired with Spanish, with a real long tail.

20 verbs (12 regular, 8 irregular) x 6 tense surfaces x 3 persons = 360 cells. Each cell yields a number of
sentences (subject, optional object, optional time adverb) proportional to how common its verb and tense
are, so irregular and perfect-tense rows are rare: the lab's "She has written the letter." lives in that
tail. Everything is a pure function of the corpus seed.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
import unicodedata
from dataclasses import asdict, dataclass

TENSES = ("infinitive", "present", "past", "perfect", "will", "going_to")
PERSONS = ("1sg", "2sg", "3sg")

# How common each verb class and tense surface is: the long tail comes from these two weights.
REGULARITY_WEIGHT = {"regular": 1.0, "irregular": 0.25}
TENSE_WEIGHT = {"present": 1.0, "past": 0.8, "will": 0.6, "going_to": 0.5, "infinitive": 0.5, "perfect": 0.1}
ROWS_PER_CELL = 24  # a regular verb in the present, per person, before sampling caps

# subject: (English, Spanish, person); Spanish drops the pronoun where the verb ending says it all
# (yo, tú, and "it"), which keeps sequences inside the 32-token context.
SUBJECTS = (
    ("I", "", "1sg"),
    ("You", "", "2sg"),
    ("He", "Él", "3sg"),
    ("She", "Ella", "3sg"),
    ("It", "", "3sg"),
)

# Time adverbs that agree with the tense surface (the perfect keeps none, so it stays bare and rare).
ADVERBS = {
    "infinitive": [("", ""), ("now", "ya")],
    "present": [("", ""), ("today", "hoy")],
    "past": [("", ""), ("yesterday", "ayer"), ("today", "hoy")],
    "perfect": [("", "")],
    "will": [("", ""), ("tomorrow", "mañana")],
    "going_to": [("", ""), ("soon", "pronto")],
}

# corpus_scale > 1 (the bigger presets): more subjects and time adverbs widen every cell, and each cell
# samples corpus_scale times as many rows. The perfect keeps no adverb, so it stays the rare tail.
# corpus_scale = 1 never reads these: the default corpus is unchanged.
EXTRA_SUBJECTS = (
    ("Tom", "Tom", "3sg"),
    ("Maria", "María", "3sg"),
    ("My brother", "Mi hermano", "3sg"),
    ("My sister", "Mi hermana", "3sg"),
    ("The teacher", "El profesor", "3sg"),
    ("The doctor", "La doctora", "3sg"),
    ("Our neighbour", "Nuestro vecino", "3sg"),
    ("The boy", "El niño", "3sg"),
)
EXTRA_ADVERBS = {
    "infinitive": [("today", "hoy"), ("again", "otra vez")],
    "present": [("every day", "todos los días"), ("on Mondays", "los lunes")],
    "past": [("last week", "la semana pasada"), ("last night", "anoche")],
    "perfect": [],
    "will": [("next week", "la próxima semana"), ("later", "más tarde")],
    "going_to": [("tonight", "esta noche"), ("next year", "el próximo año")],
}


@dataclass(frozen=True)
class Verb:
    lemma: str
    regularity: str
    en_pres3: str  # third person singular present
    en_past: str
    en_pp: str  # past participle
    es_inf: str
    es_pres: tuple[str, str, str]
    es_pret: tuple[str, str, str]
    es_part: str
    es_fut_stem: str
    objects: tuple[tuple[str, str], ...]  # (English, Spanish) complements


def _regular_en(lemma: str) -> tuple[str, str, str]:
    """Third person -s and past -ed by the English spelling rules."""
    if lemma.endswith(("s", "sh", "ch", "x", "o")):
        pres3 = lemma + "es"
    elif lemma.endswith("y") and lemma[-2] not in "aeiou":
        pres3 = lemma[:-1] + "ies"
    else:
        pres3 = lemma + "s"
    if lemma.endswith("e"):
        past = lemma + "d"
    elif lemma.endswith("y") and lemma[-2] not in "aeiou":
        past = lemma[:-1] + "ied"
    else:
        past = lemma + "ed"
    return pres3, past, past


def _ar(stem: str) -> dict:
    """A regular Spanish -ar verb from its stem."""
    return dict(
        es_inf=stem + "ar",
        es_pres=(stem + "o", stem + "as", stem + "a"),
        es_pret=(stem + "é", stem + "aste", stem + "ó"),
        es_part=stem + "ado",
        es_fut_stem=stem + "ar",
    )


def _regular(lemma: str, es: dict, objects) -> Verb:
    pres3, past, pp = _regular_en(lemma)
    return Verb(lemma, "regular", pres3, past, pp, objects=tuple(objects), **es)


VERBS: tuple[Verb, ...] = (
    _regular("work", _ar("trabaj"), [("at home", "en casa"), ("hard", "mucho")]),
    _regular("play", dict(es_inf="jugar", es_pres=("juego", "juegas", "juega"),
                          es_pret=("jugué", "jugaste", "jugó"), es_part="jugado", es_fut_stem="jugar"),
             [("football", "al fútbol"), ("chess", "al ajedrez")]),
    _regular("walk", _ar("camin"), [("to school", "a la escuela"), ("in the park", "en el parque")]),
    _regular("talk", _ar("habl"), [("with Ana", "con Ana"), ("a lot", "mucho")]),
    _regular("listen", _ar("escuch"), [("to music", "música"), ("to the radio", "la radio")]),
    _regular("watch", _ar("observ"), [("the game", "el partido"), ("the birds", "los pájaros")]),
    _regular("study", _ar("estudi"), [("English", "inglés"), ("math", "matemáticas"), ("history", "historia")]),
    _regular("finish", _ar("termin"), [("the project", "el proyecto"), ("the book", "el libro")]),
    _regular("start", dict(es_inf="empezar", es_pres=("empiezo", "empiezas", "empieza"),
                           es_pret=("empecé", "empezaste", "empezó"), es_part="empezado",
                           es_fut_stem="empezar"),
             [("the class", "la clase"), ("the game", "el juego")]),
    _regular("look", _ar("mir"), [("at the sky", "el cielo"), ("at the map", "el mapa")]),
    _regular("want", dict(es_inf="querer", es_pres=("quiero", "quieres", "quiere"),
                          es_pret=("quise", "quisiste", "quiso"), es_part="querido", es_fut_stem="querr"),
             [("a coffee", "un café"), ("a book", "un libro")]),
    _regular("like", _ar("disfrut"), [("the music", "la música"), ("the food", "la comida")]),
    Verb("be", "irregular", "is", "was", "been", "estar", ("estoy", "estás", "está"),
         ("estuve", "estuviste", "estuvo"), "estado", "estar",
         (("at home", "en casa"), ("here", "aquí"), ("in the park", "en el parque"))),
    Verb("have", "irregular", "has", "had", "had", "tener", ("tengo", "tienes", "tiene"),
         ("tuve", "tuviste", "tuvo"), "tenido", "tendr",
         (("a dog", "un perro"), ("a car", "un coche"), ("the keys", "las llaves"))),
    Verb("do", "irregular", "does", "did", "done", "hacer", ("hago", "haces", "hace"),
         ("hice", "hiciste", "hizo"), "hecho", "har",
         (("the homework", "la tarea"), ("it", "eso"))),
    Verb("go", "irregular", "goes", "went", "gone", "ir", ("voy", "vas", "va"),
         ("fui", "fuiste", "fue"), "ido", "ir",
         (("to school", "a la escuela"), ("home", "a casa"), ("to the park", "al parque"))),
    Verb("come", "irregular", "comes", "came", "come", "venir", ("vengo", "vienes", "viene"),
         ("vine", "viniste", "vino"), "venido", "vendr",
         (("home", "a casa"), ("here", "aquí"), ("to the party", "a la fiesta"))),
    Verb("see", "irregular", "sees", "saw", "seen", "ver", ("veo", "ves", "ve"),
         ("vi", "viste", "vio"), "visto", "ver",
         (("the movie", "la película"), ("the sea", "el mar"))),
    Verb("eat", "irregular", "eats", "ate", "eaten", "comer", ("como", "comes", "come"),
         ("comí", "comiste", "comió"), "comido", "comer",
         (("an apple", "una manzana"), ("the bread", "el pan"))),
    Verb("write", "irregular", "writes", "wrote", "written", "escribir", ("escribo", "escribes", "escribe"),
         ("escribí", "escribiste", "escribió"), "escrito", "escribir",
         (("the letter", "la carta"), ("a story", "una historia"), ("an email", "un correo"))),
)
VERB_BY_LEMMA = {v.lemma: v for v in VERBS}

_EN_BE = {"1sg": "am", "2sg": "are", "3sg": "is"}
_EN_HAVE = {"1sg": "have", "2sg": "have", "3sg": "has"}
_ES_NEED = ("necesito", "necesitas", "necesita")
_ES_HABER = ("he", "has", "ha")
_ES_IR = ("voy", "vas", "va")
_ES_FUT_END = ("é", "ás", "á")


def _en_verb_phrase(v: Verb, tense: str, person: str) -> str:
    third = person == "3sg"
    if tense == "infinitive":
        return ("needs" if third else "need") + " to " + v.lemma
    if tense == "present":
        if v.lemma == "be":
            return _EN_BE[person]
        return v.en_pres3 if third else v.lemma
    if tense == "past":
        if v.lemma == "be":
            return "were" if person == "2sg" else "was"
        return v.en_past
    if tense == "perfect":
        return _EN_HAVE[person] + " " + v.en_pp
    if tense == "will":
        return "will " + v.lemma
    return _EN_BE[person] + " going to " + v.lemma  # going_to


def _es_verb_phrase(v: Verb, tense: str, person: str) -> str:
    i = PERSONS.index(person)
    if tense == "infinitive":
        return _ES_NEED[i] + " " + v.es_inf
    if tense == "present":
        return v.es_pres[i]
    if tense == "past":
        return v.es_pret[i]
    if tense == "perfect":
        return _ES_HABER[i] + " " + v.es_part
    if tense == "will":
        return v.es_fut_stem + _ES_FUT_END[i]
    return _ES_IR[i] + " a " + v.es_inf  # going_to


def _sentence(*parts: str) -> str:
    text = " ".join(p for p in parts if p)
    return text[0].upper() + text[1:] + "."


def render(v: Verb, tense: str, subject: tuple[str, str, str], obj: tuple[str, str], adverb: tuple[str, str]):
    """One (English, Spanish) sentence pair."""
    en_subj, es_subj, person = subject
    english = _sentence(en_subj, _en_verb_phrase(v, tense, person), obj[0], adverb[0])
    spanish = _sentence(es_subj, _es_verb_phrase(v, tense, person), obj[1], adverb[1])
    return english, spanish


def fingerprint(text: str) -> str:
    """sha256 of the normalised text (NFC, lower case, single spaces): the deduplication key."""
    norm = " ".join(unicodedata.normalize("NFC", text).lower().split())
    return hashlib.sha256(norm.encode()).hexdigest()


@dataclass(frozen=True)
class Row:
    id: str
    text: str
    spanish: str
    verb_lemma: str
    tense: str
    person: str
    regularity: str
    label: str
    seed: int
    fingerprint: str

    def to_dict(self) -> dict:
        return asdict(self)


def cell_candidates(v: Verb, tense: str, person: str, scale: int = 1) -> list[tuple[str, str, str, str]]:
    """Every sentence the grammar allows for one (verb, tense, person) cell: (english, spanish, ...).
    scale > 1 widens the grammar with EXTRA_SUBJECTS and EXTRA_ADVERBS."""
    subjects = [s for s in SUBJECTS + (EXTRA_SUBJECTS if scale > 1 else ()) if s[2] == person]
    objects = (("", ""),) + v.objects
    adverbs = ADVERBS[tense] + (EXTRA_ADVERBS[tense] if scale > 1 else [])
    out = []
    for subj, obj, adv in itertools.product(subjects, objects, adverbs):
        out.append(render(v, tense, subj, obj, adv))
    return out


def generate(seed: int, scale: int = 1) -> list[Row]:
    """All rows, deterministic from `seed` (and `scale`, the corpus_scale knob), deduplicated by fingerprint,
    in a stable order."""
    rng = random.Random(seed)
    rows: list[Row] = []
    seen: set[str] = set()
    for v in VERBS:
        for tense in TENSES:
            for person in PERSONS:
                pool = cell_candidates(v, tense, person, scale)
                want = ROWS_PER_CELL * scale * REGULARITY_WEIGHT[v.regularity] * TENSE_WEIGHT[tense]
                n = max(1, min(len(pool), round(want)))
                for english, spanish in rng.sample(pool, n):
                    fp = fingerprint(english)
                    if fp in seen:
                        continue
                    seen.add(fp)
                    rows.append(Row(
                        id=f"{v.lemma}-{tense}-{person}-{fp[:8]}", text=english, spanish=spanish,
                        verb_lemma=v.lemma, tense=tense, person=person, regularity=v.regularity,
                        label="correct", seed=seed, fingerprint=fp,
                    ))
    return rows


def find_sentence(english: str) -> Row | None:
    """Look a sentence up in the whole grammar (not only the sampled rows), to pair it with its Spanish."""
    fp = fingerprint(english)
    for v in VERBS:
        for tense in TENSES:
            for person in PERSONS:
                for en, es in cell_candidates(v, tense, person):
                    if fingerprint(en) == fp:
                        return Row(id=f"injected-{fp[:8]}", text=en, spanish=es, verb_lemma=v.lemma,
                                   tense=tense, person=person, regularity=v.regularity, label="injected",
                                   seed=-1, fingerprint=fp)
    return None


def split(rows: list[Row], val_verbs: list[str], seed: int, val_fraction: float = 0.1):
    """Validation = every row of the held-out verbs, plus `val_fraction` of each (verb, tense) group of the
    other verbs (stratified), so validation measures both unseen verbs and unseen sentences."""
    unknown = [v for v in val_verbs if v not in VERB_BY_LEMMA]
    if unknown:
        from minitrain.core.errors import UserError

        raise UserError(f"val_verbs names unknown verbs {unknown}; choose from {sorted(VERB_BY_LEMMA)}")
    rng = random.Random(seed + 1)
    train, val = [], []
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.verb_lemma in val_verbs:
            val.append(r)
        else:
            groups.setdefault((r.verb_lemma, r.tense), []).append(r)
    for key in sorted(groups):
        g = groups[key]
        k = int(len(g) * val_fraction)
        held = set(rng.sample(range(len(g)), k))
        for i, r in enumerate(g):
            (val if i in held else train).append(r)
    return train, val


def format_sequence(spanish: str, english: str) -> tuple[str, str]:
    """The model's text: `<bos> es:<spanish> / en:<english> <eos>`, as (prompt, target) strings.
    The loss is taken on the target (English) part only."""
    return f"es:{spanish} / en:", english


def data_manifest(rows: list[Row], train: list[Row], val: list[Row], seed: int, val_verbs: list[str],
                  scale: int = 1) -> dict:
    def count(rs, key):
        out: dict[str, int] = {}
        for r in rs:
            out[getattr(r, key)] = out.get(getattr(r, key), 0) + 1
        return dict(sorted(out.items()))

    body = {
        "generator": "minitrain.corpus v1",
        "seed": seed,
        "val_verbs": list(val_verbs),
        "rows": len(rows),
        "train_rows": len(train),
        "val_rows": len(val),
        "train_fingerprints_sha256": hashlib.sha256("".join(r.fingerprint for r in train).encode()).hexdigest(),
        "val_fingerprints_sha256": hashlib.sha256("".join(r.fingerprint for r in val).encode()).hexdigest(),
        "train_by_tense": count(train, "tense"),
        "train_by_regularity": count(train, "regularity"),
        "train_by_verb": count(train, "verb_lemma"),
    }
    if scale != 1:  # absent at 1, so the default corpus keeps its data hash
        body["corpus_scale"] = scale
    body["hash"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return body
