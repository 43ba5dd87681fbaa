"""The text every trainer of this suite learns from (shop orders from a small grammar, no downloads), and the
schedule, batches and update step its trainers share, where the faults are injected.

Regular enough that a tiny model gets well below ln V in a few hundred steps, varied enough that it does not
reach zero. Token ids for a character vocabulary (GRU, Mixer) or a word vocabulary (the HF models).
"""
import math
import random

import torch

NAMES = ["anna", "ben", "carla", "dev", "emil", "fatima", "gus", "hana", "ivo", "jun", "kofi", "lena"]
COUNTS = ["one", "two", "three", "four", "five", "six", "a dozen"]
ITEMS = ["apples", "pears", "eggs", "loaves", "lemons", "onions", "candles", "nails", "stamps", "plums"]
PLACES = ["to the shop", "to the farm", "to the office", "home", "to the school", "to the harbour"]
WHEN = ["today", "on monday", "by friday", "tomorrow", "next week"]


def make_text(n_orders=5000, seed=3):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_orders):
        line = f"{rng.choice(NAMES)} orders {rng.choice(COUNTS)} {rng.choice(ITEMS)}"
        if rng.random() < 0.7:
            line += f" {rng.choice(PLACES)}"
        if rng.random() < 0.5:
            line += f" {rng.choice(WHEN)}"
        lines.append(line + " ;")
    return "\n".join(lines) + "\n"


def char_tokens(text):
    """(ids, vocabulary size) with one id per character, in sorted order."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), len(chars)


def word_tokens(text):
    """(ids, vocabulary size) with one id per word, the newline a word of its own."""
    words = text.replace("\n", " \n ").split(" ")
    words = [w for w in words if w]
    vocab = {w: i for i, w in enumerate(sorted(set(words)))}
    return torch.tensor([vocab[w] for w in words], dtype=torch.long), len(vocab)


class Batches:
    """Random (x, y) windows drawn with a fixed seed, one draw per step, so a fault can replace step K's batch
    (a bad batch) or hand back the same one again (a stuck loader) as broken loaders do."""

    def __init__(self, ids, vocab_size, batch_size, block, cfg, seed=0):
        self.ids, self.vocab_size, self.batch_size, self.block, self.cfg = ids, vocab_size, batch_size, block, cfg
        self.gen = torch.Generator().manual_seed(seed)
        self.held = None

    def draw(self):
        starts = torch.randint(len(self.ids) - self.block - 1, (self.batch_size,), generator=self.gen)
        x = torch.stack([self.ids[s:s + self.block] for s in starts])
        y = torch.stack([self.ids[s + 1:s + self.block + 1] for s in starts])
        return x, y

    def batch(self, step):
        x, y = self.draw()
        fault, at = self.cfg.get("fault"), self.cfg.get("fault_at", -1)
        if fault == "stuck_loader" and at <= step < at + self.cfg["fault_len"]:
            if self.held is None:
                self.held = (x, y)
            return self.held
        if fault == "bad_batch" and step == at:
            if self.cfg.get("bad_kind", "garbage") == "garbage":
                x = torch.randint(self.vocab_size, x.shape, generator=self.gen)
                y = torch.randint(self.vocab_size, y.shape, generator=self.gen)
            else:
                x = torch.full_like(x, int(x[0, 0]))
                y = torch.full_like(y, int(x[0, 0]))
        return x, y


def lr_at(step, cfg):
    """The LR of step `step` (0-based): linear warmup, then constant, cosine or linear decay to 10%, times an
    LR spike's wrong multiplier while it lasts."""
    peak, warmup, steps = cfg["lr"], cfg.get("warmup", 0), cfg["steps"]
    if step < warmup:
        lr = peak * (step + 1) / warmup
    else:
        frac = (step - warmup) / max(1, steps - warmup)
        shape = cfg.get("schedule", "constant")
        if shape == "cosine":
            lr = peak * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        elif shape == "linear":
            lr = peak * (1 - 0.9 * frac)
        else:
            lr = peak
    at = cfg.get("fault_at", -1)
    if cfg.get("fault") == "lr_spike" and at <= step < at + cfg["fault_len"]:
        lr *= cfg["spike"]
    return lr


def scale_grads(model, step, cfg):
    """A loss scale that is never unscaled: step K's gradients multiplied by it before the optimizer sees them."""
    if cfg.get("fault") == "gradient_explosion" and step == cfg.get("fault_at"):
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(cfg.get("scale", 65536.0))


def update(model, opt, loss, step, cfg):
    """One optimizer update; returns the gradient norm before clipping, as users log it."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    scale_grads(model, step, cfg)
    if cfg.get("clip", 0) > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
    else:
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    opt.step()
    return norm
