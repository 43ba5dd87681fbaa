"""An MLP-Mixer character model (token mixing across a fixed causal context, then a channel MLP) trained by a
plain loop that keeps a W&B-style run history and writes it as W&B's "download history" CSV does: `_step`,
`_runtime`, `_timestamp`, then the logged keys; a key not logged at a row is an empty cell.

cfg: steps, lr, warmup, schedule, optimizer (adam | adamw), betas, dim, depth, batch_size, block, log_every,
log (loss | loss+lr | loss+lr+grad_norm), clip (max norm, 0 = off), and a fault.
"""
import csv
import time

import torch
import torch.nn as nn

from data import Batches, char_tokens, lr_at, make_text, update


class MixerBlock(nn.Module):
    def __init__(self, block, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        # position t mixes only positions <= t: the weight is masked to its lower triangle
        self.token_mix = nn.Linear(block, block)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mix = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, h):
        mixed = nn.functional.linear(self.norm1(h).transpose(1, 2), self.token_mix.weight * self.mask,
                                     self.token_mix.bias)
        h = h + mixed.transpose(1, 2)
        return h + self.channel_mix(self.norm2(h))


class CharMixer(nn.Module):
    def __init__(self, vocab_size, block, dim, depth):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.blocks = nn.Sequential(*[MixerBlock(block, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))))


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    ids, vocab_size = char_tokens(make_text())
    block = cfg.get("block", 32)
    model = CharMixer(vocab_size, block, cfg.get("dim", 48), cfg.get("depth", 2))
    opt_class = torch.optim.AdamW if cfg.get("optimizer", "adamw") == "adamw" else torch.optim.Adam
    opt = opt_class(model.parameters(), lr=cfg["lr"], betas=tuple(cfg.get("betas", (0.9, 0.999))))
    batches = Batches(ids, vocab_size, cfg.get("batch_size", 16), block, cfg)
    logged = cfg.get("log", "loss+lr+grad_norm")
    history, t0 = [], time.time()
    for step in range(cfg["steps"]):
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batches.batch(step)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab_size), y.reshape(-1))
        norm = update(model, opt, loss, step, cfg)
        if step % cfg.get("log_every", 1) == 0:
            row = {"_step": step, "_runtime": round(time.time() - t0, 3), "_timestamp": round(time.time(), 3),
                   "train/loss": loss.item()}
            if "lr" in logged:
                row["train/lr"] = lr
            if "grad_norm" in logged:
                row["train/grad_norm"] = norm.item()
            history.append(row)
    columns = list(dict.fromkeys(k for row in history for k in row))
    with open(out / "wandb_history.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(history)
    return {"vocab_size": vocab_size, "params": sum(p.numel() for p in model.parameters())}
