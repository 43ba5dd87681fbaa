"""A Lightning-style loop on words, written without Lightning (not installed here) but logging as its users'
runs do: an LSTM language model in a LightningModule-shaped class, and either Lightning's CSVLogger
`metrics.csv` (columns sorted, `step` 0-based, a row every `log_every_n_steps` batches, so the first row is
step N-1; `lr-Adam` as LearningRateMonitor names it; `grad_2.0_norm_total` as grad_norm() names it) or a
plain loop's `log.csv` (`step,loss[,lr][,grad_norm]` with the loss averaged over the interval, the running-loss
pattern of most tutorials).

Knows nothing of minitrain. Faults are written the way they turn up: an epoch file with a corrupt record, a
DataLoader that re-serves one cached batch, a scheduler resumed with the wrong warm-restart factor, a
manual loss scale never unscaled on one step.
"""
import csv
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from text import reports, words


class LitLSTM(nn.Module):
    def __init__(self, vocab_size, emb, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def training_step(self, batch):
        x, y = batch
        h, _ = self.lstm(self.emb(x))
        logits = self.out(h)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    def configure_optimizers(self, cfg):
        betas = tuple(cfg.get("betas", (0.9, 0.999)))
        if cfg.get("optimizer", "adam") == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=cfg["lr"], betas=betas, weight_decay=0.01)
        return torch.optim.Adam(self.parameters(), lr=cfg["lr"], betas=betas)


def lr_factor(step, cfg):
    """The schedule: constant, linear warmup then constant, or linear warmup then cosine to zero."""
    warmup, total = cfg.get("warmup", 0), cfg["steps"]
    if step < warmup:
        f = (step + 1) / warmup
    elif cfg.get("schedule") == "cosine":
        f = 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    else:
        f = 1.0
    fault = cfg.get("fault", {})
    if fault.get("kind") == "lr_spike" and fault["at"] <= step < fault["at"] + fault["length"]:
        f *= fault["mult"]  # the warm restart's factor read from the wrong config field for a few steps
    return f


class CSVWriter:
    """Lightning's CSVLogger layout (metrics.csv) or a plain loop's log.csv."""

    def __init__(self, out, style, columns):
        self.style = style
        path = out / ("metrics.csv" if style == "lightning" else "log.csv")
        self.file = open(path, "w", newline="")
        names = {"loss": "train_loss", "lr": "lr-Adam", "grad_norm": "grad_2.0_norm_total"} if style == "lightning" \
            else {"loss": "loss", "lr": "lr", "grad_norm": "grad_norm"}
        self.names = {k: names[k] for k in columns}
        header = sorted(["epoch", "step", *self.names.values()]) if style == "lightning" \
            else ["step", *self.names.values()]
        self.writer = csv.DictWriter(self.file, fieldnames=header)
        self.writer.writeheader()

    def log(self, step, epoch, values):
        row = {"step": step, **{self.names[k]: f"{v:.6g}" for k, v in values.items() if k in self.names}}
        if self.style == "lightning":
            row["epoch"] = epoch
        self.writer.writerow(row)

    def close(self):
        self.file.close()


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    torch.set_num_threads(1)
    vocab, ids = words(reports())
    data = torch.tensor(ids)
    V, T, B, N = len(vocab), cfg["block_size"], cfg["batch_size"], cfg["log_every"]
    model = LitLSTM(V, cfg["emb"], cfg["hidden"], cfg.get("layers", 1))
    opt = model.configure_optimizers(cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    gen = torch.Generator().manual_seed(cfg.get("seed", 0) + 7)
    fault = cfg.get("fault", {})
    kind, at = fault.get("kind"), fault.get("at", -1)
    logger = CSVWriter(out, cfg["style"], cfg["columns"])
    steps_per_epoch = (len(data) // T) // B
    running, cached = 0.0, None
    for step in range(cfg["steps"]):
        if kind == "stuck_loader" and at < step < at + fault["length"]:
            x, y = cached
        else:
            ix = torch.randint(len(data) - T - 1, (B,), generator=gen)
            x = torch.stack([data[i:i + T] for i in ix])
            y = torch.stack([data[i + 1:i + T + 1] for i in ix])
            if kind == "bad_batch" and step == at:
                if fault.get("garbage"):
                    x, y = torch.randint(V, (B, T), generator=gen), torch.randint(V, (B, T), generator=gen)
                else:
                    x = torch.full((B, T), fault.get("token", 0))
                    y = x.clone()
            cached = (x, y)
        loss = model.training_step((x, y))
        opt.zero_grad()
        scale = fault["scale"] if kind == "gradient_explosion" and step == at else 1.0
        (loss * scale).backward()
        clip = cfg["clip"] if cfg.get("clip", 0) > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        running += loss.item()
        if cfg["style"] == "lightning" and (step + 1) % N == 0:
            logger.log(step, step // steps_per_epoch, {"loss": loss.item(), "lr": lr, "grad_norm": norm})
        elif cfg["style"] == "plain" and step % N == 0:
            logger.log(step, None, {"loss": running / (1 if step == 0 else N), "lr": lr, "grad_norm": norm})
            running = 0.0
    logger.close()
    return {"vocab_size": V, "steps": cfg["steps"]}
