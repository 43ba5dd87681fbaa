"""The text every foreign2 trainer learns from: short weather reports from a toy grammar (no downloads).

Structured enough that a tiny model's loss falls well below ln V in a few hundred steps, varied enough that
it does not reach zero.
"""
import random

PLACES = ["north coast", "the valley", "east hills", "the harbour", "west plain", "the islands", "south ridge",
          "the lakes", "city centre", "the moors"]
SKIES = ["clear skies", "light rain", "heavy cloud", "thick fog", "scattered showers", "bright sun", "strong wind",
         "sleet", "thunder", "mist"]
TIMES = ["this morning", "by noon", "in the evening", "overnight", "later today", "from dawn"]
TEMPS = ["cold", "mild", "warm", "cool", "freezing", "hot"]


def reports(n=3000, seed=1):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        line = f"{rng.choice(PLACES)}: {rng.choice(SKIES)} {rng.choice(TIMES)}, {rng.choice(TEMPS)}"
        if rng.random() < 0.5:
            line += f", then {rng.choice(SKIES)}"
        lines.append(line + ".")
    return "\n".join(lines) + "\n"


def chars(text):
    """A character vocabulary and the text's ids in it."""
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    return vocab, [index[c] for c in text]


def words(text):
    """A word vocabulary (punctuation and newlines as their own words) and the text's ids in it."""
    toks = text.replace(",", " , ").replace(".", " . ").replace(":", " : ").replace("\n", " \n ").split(" ")
    toks = [t for t in toks if t]
    vocab = sorted(set(toks))
    index = {w: i for i, w in enumerate(vocab)}
    return vocab, [index[w] for w in toks]


def byte_ids(text):
    """Raw UTF-8 bytes: a 256-entry vocabulary as a byte-level model has."""
    return list(text.encode())
