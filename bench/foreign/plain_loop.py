"""A plain PyTorch loop as people write it from the tutorials: a byte-level model on nn.TransformerEncoder, Adam,
a CSV of the numbers they look at. Two logging styles: one row per step (`step,loss,lr[,grad_norm]`), or
Lightning's CSVLogger `metrics.csv` (`epoch,step,train_loss` every N steps, the LR monitor on rows of its own).

Knows nothing of minitrain.
"""
import csv
import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import make_text


class ByteLM(nn.Module):
    def __init__(self, d_model=64, n_layers=2, n_heads=4, block_size=64):
        super().__init__()
        self.embed = nn.Embedding(256, d_model)
        self.pos = nn.Parameter(torch.zeros(1, block_size, d_model))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 256)

    def forward(self, x):
        T = x.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        return self.head(self.encoder(self.embed(x) + self.pos[:, :T], mask=mask, is_causal=True))


class LightningStyleCSV:
    """Rows as Lightning's CSVLogger writes them: the union of keys as columns, empty cells elsewhere."""

    def __init__(self, path):
        self.path, self.rows = path, []

    def log_metrics(self, metrics, step):
        self.rows.append({**metrics, "step": step})

    def save(self):
        keys = sorted({k for row in self.rows for k in row})
        with open(self.path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(self.rows)


def train(out_dir, cfg):
    out_dir = Path(out_dir)
    torch.manual_seed(cfg.get("seed", 0))
    torch.set_num_threads(1)
    data = torch.tensor(list(make_text(seed=cfg.get("data_seed", 0)).encode()), dtype=torch.long)
    block_size, batch_size, steps = cfg.get("block_size", 64), cfg.get("batch_size", 16), cfg.get("steps", 400)
    lr = cfg.get("lr", 3e-4)
    model = ByteLM(block_size=block_size)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = None
    if cfg.get("schedule") == "warmup_cosine":
        warm = cfg.get("warmup", 40)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (steps - warm))))
    fault = cfg.get("fault", {})
    kind, k = fault.get("kind"), fault.get("step", -1)
    gen = torch.Generator().manual_seed(cfg.get("seed", 0))
    clip = cfg.get("clip", 0.0)
    style, every = cfg.get("style", "plain"), cfg.get("log_every", 1)
    columns = ["step", "loss", "lr"] + (["grad_norm"] if cfg.get("log_grad_norm") else [])
    lightning = LightningStyleCSV(out_dir / "metrics.csv")
    f = open(out_dir / "log.csv", "w", newline="")
    w = csv.writer(f)
    if style == "plain":
        w.writerow(columns)
    stuck = None
    for step in range(steps):
        ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
        if kind == "bad_batch" and step == k:
            if fault.get("garbage"):  # a binary file that slipped into the text folder
                x = torch.randint(256, x.shape, generator=gen)
                y = torch.randint(256, y.shape, generator=gen)
            else:
                x = torch.full_like(x, ord(" "))
                y = x.clone()
        if kind == "stuck_loader" and k <= step < k + fault["length"]:
            stuck = stuck if stuck is not None else (x, y)
            x, y = stuck
        if kind == "lr_spike":
            for g in opt.param_groups:  # a manual "kick" to escape a plateau, with a typo in the factor
                g["lr"] = lr * fault["factor"] if k <= step < k + fault.get("length", 3) else (
                    sched.get_last_lr()[0] if sched else lr)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        (loss * (fault["factor"] if kind == "grad_scale" and step == k else 1.0)).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()
        cur_lr = opt.param_groups[0]["lr"]
        opt.step()
        if sched:
            sched.step()
        if style == "plain" and step % every == 0:
            row = [step, f"{loss.item():.5f}", cur_lr] + ([f"{norm:.5f}"] if cfg.get("log_grad_norm") else [])
            w.writerow(row)
        if style == "lightning" and (step + 1) % every == 0:
            lightning.log_metrics({"lr-Adam": cur_lr}, step)
            lightning.log_metrics({"train_loss": loss.item(), "epoch": 0}, step)
    f.close()
    if style == "lightning":
        lightning.save()
        (out_dir / "log.csv").unlink()
    else:
        (out_dir / "metrics.csv").unlink(missing_ok=True)
    return {"vocab_size": 256}
