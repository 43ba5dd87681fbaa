import statistics

from minitrain.core import corpus
from minitrain.core.config import TrainConfig
from minitrain.core.data import prepare, token_report


def test_grammar_covers_every_cell_and_is_deterministic():
    rows = corpus.generate(42)
    assert rows == corpus.generate(42)
    assert rows != corpus.generate(43)
    cells = {(r.verb_lemma, r.tense, r.person) for r in rows}
    assert len(corpus.VERBS) == 20 and sum(v.regularity == "regular" for v in corpus.VERBS) == 12
    assert len(cells) == 20 * 6 * 3 == 360
    assert len({r.fingerprint for r in rows}) == len(rows)  # deduplicated
    assert set(rows[0].to_dict()) == {"id", "text", "spanish", "verb_lemma", "tense", "person", "regularity",
                                      "label", "seed", "fingerprint"}
    assert all(r.text.endswith(".") and r.spanish.endswith(".") for r in rows)


def test_known_forms():
    find = corpus.find_sentence
    assert find("She has written the letter.").spanish == "Ella ha escrito la carta."
    assert find("He studies English.").spanish == "Él estudia inglés."
    assert find("I went home yesterday.").spanish == "Fui a casa ayer."
    assert find("You are going to eat an apple.").spanish == "Vas a comer una manzana."
    assert find("Colourless green ideas sleep.") is None


def test_split_holds_out_whole_verbs_and_is_stratified():
    cfg = TrainConfig()
    data = prepare(cfg)
    train_verbs = {r.verb_lemma for r in data.train_rows}
    assert not train_verbs & set(cfg.val_verbs)
    assert {r.verb_lemma for r in data.val_rows} & set(cfg.val_verbs)
    # every (verb, tense) group of a training verb keeps rows in training
    groups = {(r.verb_lemma, r.tense) for r in data.train_rows}
    assert len(groups) == 16 * 6
    assert data.manifest["hash"] == prepare(cfg).manifest["hash"]


def test_long_tail_perfect_and_irregular_rows_are_rare():
    data = prepare(TrainConfig())
    by_tense = data.manifest["train_by_tense"]
    assert by_tense["perfect"] < 0.3 * by_tense["present"]
    by_verb = data.manifest["train_by_verb"]
    regular = [n for v, n in by_verb.items() if corpus.VERB_BY_LEMMA[v].regularity == "regular"]
    irregular = [n for v, n in by_verb.items() if corpus.VERB_BY_LEMMA[v].regularity == "irregular"]
    # an irregular verb has well under two thirds of the rows of a regular one
    assert statistics.mean(irregular) < 0.6 * statistics.mean(regular)


def test_lab_sentence_is_in_the_rare_tail():
    """The lab's rare sentence: its English tokens are rarer than those of almost every training row."""
    data = prepare(TrainConfig())
    counts = data.token_counts

    def mean_count(english: str) -> float:
        return statistics.mean(int(counts[i]) for i in data.tokenizer.encode(english).ids)

    lab = mean_count("She has written the letter.")
    per_row = sorted(mean_count(r.text) for r in data.train_rows)
    rank = sum(m < lab for m in per_row) / len(per_row)
    assert rank < 0.05, f"the lab sentence is rarer than only {1 - rank:.0%} of training rows"
    report = token_report(data, "She has written the letter.")
    assert [t for t, _ in report][0] == "She" and all(n >= 0 for _, n in report)
