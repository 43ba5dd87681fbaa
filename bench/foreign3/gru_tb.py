"""A character GRU language model trained by a plain loop that logs to TensorBoard with the scalar names a
Lightning user's dashboards already use (`train_loss`, `lr-Adam`, `grad_2.0_norm_total`).

cfg: steps, lr, warmup, schedule, optimizer (adam | adamw), betas, hidden, layers, batch_size, block,
log_every, log (which scalars: loss | loss+lr | loss+lr+grad_norm), clip (max norm, 0 = off),
writer ("tb" = SummaryWriter("tb"), "default" = SummaryWriter() into runs/<date>_<host>), and a fault.
"""
import torch
import torch.nn as nn
from torch.utils.tensorboard import SummaryWriter

from data import Batches, char_tokens, lr_at, make_text, update


class CharGRU(nn.Module):
    def __init__(self, vocab_size, hidden, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.rnn = nn.GRU(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, x):
        h, _ = self.rnn(self.embed(x))
        return self.head(h)


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    ids, vocab_size = char_tokens(make_text())
    model = CharGRU(vocab_size, cfg.get("hidden", 64), cfg.get("layers", 1))
    opt_class = torch.optim.AdamW if cfg.get("optimizer") == "adamw" else torch.optim.Adam
    opt = opt_class(model.parameters(), lr=cfg["lr"], betas=tuple(cfg.get("betas", (0.9, 0.999))))
    opt_name = "lr-AdamW" if opt_class is torch.optim.AdamW else "lr-Adam"
    batches = Batches(ids, vocab_size, cfg.get("batch_size", 16), cfg.get("block", 32), cfg)
    writer = SummaryWriter() if cfg.get("writer") == "default" else SummaryWriter("tb")
    logged = cfg.get("log", "loss+lr+grad_norm")
    for step in range(cfg["steps"]):
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batches.batch(step)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab_size), y.reshape(-1))
        norm = update(model, opt, loss, step, cfg)
        if step % cfg.get("log_every", 1) == 0:
            writer.add_scalar("train_loss", loss.item(), step)
            if "lr" in logged:
                writer.add_scalar(opt_name, lr, step)
            if "grad_norm" in logged:
                writer.add_scalar("grad_2.0_norm_total", norm.item(), step)
    writer.close()
    return {"vocab_size": vocab_size, "params": sum(p.numel() for p in model.parameters())}
