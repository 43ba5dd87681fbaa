"""A nanoGPT-style loop on characters, as its users write it: a small GPT, AdamW with nanoGPT's get_lr (linear
warmup, cosine decay, or a constant), a SummaryWriter and nanoGPT's printed `iter N: loss X, time Y ms` line.

Knows nothing of minitrain. What it logs is chosen by `log`: loss, loss+lr or loss+lr+grad_norm, every
`log_interval` iterations (the loss of that iteration's batch, as nanoGPT prints it). The SummaryWriter writes
`tb/` when `tb_dir` is set, else its default `runs/<date>_<host>/`. Faults are written the way they turn up:
a resume that restarts the schedule with a wrong multiplier, a loss scale left on one backward, a corrupt
shard in get_batch, a get_batch that keeps returning its cached batch.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

from text import chars, reports


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_embd, n_head):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.tok.weight = self.head.weight  # weight tying, as nanoGPT does
        mask = torch.triu(torch.ones(block_size, block_size, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def get_lr(it, cfg):
    """nanoGPT's schedule: linear warmup, then cosine to min_lr, or the constant learning_rate."""
    lr = cfg["learning_rate"]
    if it < cfg["warmup_iters"]:
        return lr * (it + 1) / (cfg["warmup_iters"] + 1)
    if cfg["schedule"] == "cosine":
        ratio = (it - cfg["warmup_iters"]) / max(1, cfg["max_iters"] - cfg["warmup_iters"])
        lr = cfg["min_lr"] + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - cfg["min_lr"])
    fault = cfg.get("fault", {})
    if fault.get("kind") == "lr_spike" and fault["at"] <= it < fault["at"] + fault["length"]:
        lr *= fault["mult"]  # the resumed run restarted its schedule with the wrong multiplier for a few iters
    return lr


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    torch.set_num_threads(1)
    vocab, ids = chars(reports())
    data = torch.tensor(ids)
    V, T, B = len(vocab), cfg["block_size"], cfg["batch_size"]
    model = GPT(V, T, cfg["n_layer"], cfg["n_embd"], cfg["n_head"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], betas=tuple(cfg["betas"]),
                            weight_decay=cfg["weight_decay"])
    writer = SummaryWriter(str(out / "tb")) if cfg.get("tb_dir") else SummaryWriter()
    fault = cfg.get("fault", {})
    kind, at = fault.get("kind"), fault.get("at", -1)
    gen = torch.Generator().manual_seed(cfg.get("seed", 0) + 1)
    cached = None

    def get_batch(it):
        nonlocal cached
        if kind == "stuck_loader" and at < it < at + fault["length"]:
            return cached  # the prefetch thread died; the loop keeps training on the last batch it handed over
        ix = torch.randint(len(data) - T - 1, (B,), generator=gen)
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + T + 1] for i in ix])
        if kind == "bad_batch" and it == at:
            if fault.get("garbage"):
                x = torch.randint(V, (B, T), generator=gen)  # a corrupt shard: random bytes read as characters
                y = torch.randint(V, (B, T), generator=gen)
            else:
                x = torch.full((B, T), fault.get("token", 0))  # a padded-out shard: one token repeated
                y = x.clone()
        cached = (x, y)
        return x, y

    log = open(out / "train.log", "w")
    t0 = time.time()
    for it in range(cfg["max_iters"]):
        lr = get_lr(it, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(it)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        scale = fault["scale"] if kind == "gradient_explosion" and it == at else 1.0
        (loss * scale).backward()  # at the fault iter a GradScaler's scale was applied and never unscaled
        clip = cfg["grad_clip"] if cfg["grad_clip"] > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        opt.step()
        if it % cfg["log_interval"] == 0:
            dt = (time.time() - t0) * 1000
            t0 = time.time()
            print(f"iter {it}: loss {loss.item():.4f}, time {dt:.2f}ms", file=log)
            writer.add_scalar("train/loss", loss.item(), it)
            if "lr" in cfg["log"]:
                writer.add_scalar("train/lr", lr, it)
            if "grad_norm" in cfg["log"]:
                writer.add_scalar("train/grad_norm", norm, it)
    writer.close()
    log.close()
    return {"vocab_size": V, "steps": cfg["max_iters"]}
