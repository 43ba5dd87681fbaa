"""A small generated text every trainer in the foreign suite learns from (no downloads).

Sentences from a toy grammar: enough structure that a tiny model's loss falls well below ln V within a few
hundred steps, enough variety that it does not fall to zero.
"""
import random

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the teacher", "her brother",
            "the farmer", "a child", "the captain", "our neighbour", "the baker"]
VERBS = ["sees", "likes", "finds", "carries", "follows", "paints", "visits", "remembers", "builds", "watches"]
OBJECTS = ["the river", "a red house", "the garden", "a long road", "the market", "an apple", "the boat",
           "a letter", "the hill", "a green field", "the bridge", "some bread"]
TAILS = ["in the morning", "after the rain", "every day", "at night", "with a smile", "near the town",
         "before dinner", "on sunday", "without a word", "again"]


def make_text(n_sentences=4000, seed=0):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_sentences):
        words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
        if rng.random() < 0.6:
            words.append(rng.choice(TAILS))
        lines.append(" ".join(words) + ".")
    return "\n".join(lines) + "\n"


def char_vocab(text):
    """Character vocabulary as nanoGPT's shakespeare_char prepare script builds it."""
    chars = sorted(set(text))
    return {c: i for i, c in enumerate(chars)}


def word_vocab(text):
    """Word-level vocabulary with the newline and full stop as their own tokens."""
    words = sorted(set(text.replace(".", " . ").replace("\n", " \n ").split(" ")) - {""})
    return {w: i for i, w in enumerate(words)}


def word_ids(text, vocab):
    return [vocab[w] for w in text.replace(".", " . ").replace("\n", " \n ").split(" ") if w]
