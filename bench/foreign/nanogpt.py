"""A nanoGPT-style trainer as its users write it: a small GPT in plain PyTorch, AdamW, cosine schedule with
warmup, gradient clipping, TensorBoard scalars and the printed `iter N: loss X, time Y ms` log.

Knows nothing of minitrain. Faults are written into the loop the way they turn up in real code: a schedule with
a bad restart, a loss-scale bug on one step, a corrupted shard, a loader that keeps yielding one batch.
"""
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

from corpus import char_vocab, make_text


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as in nanoGPT
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def train(out_dir, cfg):
    out_dir = Path(out_dir)
    torch.manual_seed(cfg.get("seed", 1337))
    torch.set_num_threads(1)
    text = make_text(seed=cfg.get("data_seed", 0))
    stoi = char_vocab(text)
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    block_size, batch_size = cfg.get("block_size", 64), cfg.get("batch_size", 16)
    max_iters = cfg.get("max_iters", 300)
    learning_rate, min_lr = cfg.get("learning_rate", 1e-3), cfg.get("min_lr", 1e-4)
    warmup_iters, grad_clip = cfg.get("warmup_iters", 30), cfg.get("grad_clip", 1.0)
    fault = cfg.get("fault", {})
    gen = torch.Generator().manual_seed(cfg.get("seed", 1337))

    def get_batch(split):
        d = train_data if split == "train" else val_data
        ix = torch.randint(len(d) - block_size - 1, (batch_size,), generator=gen)
        x = torch.stack([d[i:i + block_size] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
        return x, y

    def get_lr(it):
        if it < warmup_iters:
            lr = learning_rate * (it + 1) / (warmup_iters + 1)
        else:
            ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
            lr = min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)
        if fault.get("kind") == "lr_spike" and fault["step"] <= it < fault["step"] + fault.get("length", 3):
            lr *= fault["factor"]  # a warm restart written with the wrong multiplier
        return lr

    model = GPT(len(stoi), block_size, cfg.get("n_layer", 2), cfg.get("n_head", 4), cfg.get("n_embd", 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95),
                                  weight_decay=cfg.get("weight_decay", 0.1))

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in ("train", "val"):
            out[split] = sum(model(*get_batch(split)).item() for _ in range(5)) / 5
        model.train()
        return out

    # SummaryWriter() with no argument writes runs/<date>_<host>; many forks pass their own folder
    writer = SummaryWriter() if cfg.get("tb_default_dir") else SummaryWriter(log_dir=str(out_dir / "tb"))
    log = open(out_dir / "train.log", "w")
    eval_interval, log_interval = cfg.get("eval_interval", 100), cfg.get("log_interval", 1)
    stuck = None
    t0 = time.time()
    for it in range(max_iters):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % eval_interval == 0 or it == max_iters - 1:
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", file=log)
            writer.add_scalar("val/loss", losses["val"], it)
        X, Y = get_batch("train")
        kind, k = fault.get("kind"), fault.get("step", -1)
        if kind == "bad_batch" and it == k:
            X = torch.full_like(X, fault.get("token", 0))  # a shard of padding: one token over and over
            Y = X.clone()
            if fault.get("garbage"):
                X = torch.randint(len(stoi), X.shape, generator=gen)
                Y = torch.randint(len(stoi), Y.shape, generator=gen)
        if kind == "stuck_loader" and k <= it < k + fault["length"]:
            stuck = stuck if stuck is not None else (X, Y)  # the iterator re-yields its first batch
            X, Y = stuck
        loss = model(X, Y)
        scale = fault["factor"] if kind == "grad_scale" and it == k else 1.0  # loss scale applied, never unscaled
        (loss * scale).backward()
        norm = None
        if grad_clip > 0.0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        lossf = loss.item()
        if it % log_interval == 0:
            print(f"iter {it}: loss {lossf:.4f}, time {dt * 1000:.2f}ms", file=log)
            writer.add_scalar("train/loss", lossf, it)
            writer.add_scalar("lr", lr, it)
            if cfg.get("log_grad_norm") and norm is not None:
                writer.add_scalar("grad_norm", norm, it)
    writer.close()
    log.close()
    return {"vocab_size": len(stoi)}
