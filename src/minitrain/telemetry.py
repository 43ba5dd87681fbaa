"""Per-step signals beyond the loss: what makes each injection visible from the metrics alone.

Every signal is one entry in `SIGNALS`-style code below, computed from tensors the step already has, with
one host transfer per step (`.tolist()` on a stacked vector), so it costs little next to the step.

Row fields written by `Telemetry.row` (see docs/metrics.md for the full schema):
  act            mean |activation| of each block's output            (list, one per layer)
  logit_max      largest |logit| in the batch
  nonfinite      non-finite values in the loss and gradients
  batch          composition: rows, distinct tokens, top-token share, rare-token share, duplicated rows
  params         per parameter tensor (full telemetry only):
                 g   gradient norm before clipping (after any injection)
                 u   update norm |p_new - p_old|        ur  update-to-weight ratio u / |p_old|
                 vm  mean of Adam's exp_avg_sq           vx  max of exp_avg_sq     vn  norm of exp_avg_sq
                 r   RMS(g^2 / v_hat): StableAdamW's statistic (g clipped, v bias-corrected, after the step)
  sigma          largest singular value of each matrix, every `spectral_every` steps (full telemetry only)
"""
from __future__ import annotations

import math

import torch

from minitrain import distributed
from minitrain.tokenizer import PAD

SIG = 5  # significant digits kept for telemetry floats (loss, lr and norms keep full precision)


def rnd(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return float(f"{x:.{SIG}g}")


def rare_token_mask(train_ids: torch.Tensor, vocab_size: int, share: float = 0.001) -> tuple[torch.Tensor, torch.Tensor]:
    """Token counts over the training split and a mask of the rare ones: tokens that make up less than
    `share` of all training tokens (0.1%: at most a handful of rows in a ~2k-row split)."""
    ids = train_ids[train_ids != PAD]
    counts = torch.bincount(ids, minlength=vocab_size)
    rare = counts < share * ids.numel()
    return counts, rare


class Telemetry:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg, rare_mask: torch.Tensor):
        self.model, self.opt, self.cfg = model, optimizer, cfg
        self.full = cfg.telemetry == "full"
        self.names = [n for n, _ in model.named_parameters()]
        self.params = [p for _, p in model.named_parameters()]
        self.rare_mask = rare_mask
        self.rare_list = rare_mask.tolist()
        self.prev: list[torch.Tensor] = []
        self.grad_norms: torch.Tensor | None = None
        self.beta2 = cfg.beta2
        self.sizes = [p.numel() for p in self.params]
        self.device = self.params[0].device
        self.numel = torch.tensor(self.sizes, dtype=torch.float32, device=self.device)

    # --- called by the loop around the optimizer step ---
    def after_backward(self, grads: list[torch.Tensor]) -> None:
        """Per-tensor gradient norms before clipping (and after any gradient injection)."""
        if self.full:
            self.grad_norms = torch.stack(torch._foreach_norm(grads))

    def before_step(self) -> None:
        if self.full:  # one flat copy of the weights, to measure this step's update
            self.prev = torch.cat([p.detach().reshape(-1) for p in self.params])

    def row(self, step: int, batch, logits: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor) -> dict:
        with torch.no_grad():
            # global over DDP ranks (identity on one process): the largest |logit|, and each block's mean
            # |activation| (ranks hold equal-shaped shares, so the mean of their means is the global mean)
            logit_max = distributed.all_reduce(logits.detach().abs().max().float().reshape(1), "max")
            acts = self.model.last_activations
            acts = distributed.all_reduce(torch.stack(acts).float(), "mean") if acts else logit_max[:0]
            finite = torch.stack([torch.isfinite(loss), torch.isfinite(grad_norm)]).float()
            head = torch.cat([logit_max, acts, finite])  # everything goes to the host in ONE .tolist()
            n_head = len(head)
            vals = torch.cat([head, self._per_param().flatten()]).tolist() if self.full else head.tolist()
            out: dict = {"logit_max": rnd(vals[0]), "act": [rnd(a) for a in vals[1 : n_head - 2]]}
            if self.full:
                stats = vals[n_head:]
                k = 7
                out["params"] = {
                    name: dict(zip(("g", "u", "ur", "vm", "vx", "vn", "r"), (rnd(x) for x in stats[i * k:(i + 1) * k])))
                    for i, name in enumerate(self.names)
                }
                if self.cfg.spectral_every and step % self.cfg.spectral_every == 0:
                    out["sigma"] = self._spectral()
            loss_finite, norm_finite = vals[n_head - 2], vals[n_head - 1]
            out["nonfinite"] = int(not loss_finite) + (
                0 if norm_finite else sum(int((~torch.isfinite(p.grad)).sum()) for p in self.params))
            out["batch"] = self.batch_composition(batch)
        return out

    def _per_param(self) -> torch.Tensor:
        """[n_params, 7] tensor: g, u, ur, vm, vx, vn, r (see module doc). Elementwise work runs once on
        flat copies; only the per-tensor reductions loop (a few microseconds each)."""
        n = len(self.params)
        sizes = self.sizes
        now = torch.cat([p.detach().reshape(-1) for p in self.params])
        u = torch.stack(torch._foreach_norm(list((now - self.prev).split(sizes))))
        w = torch.stack(torch._foreach_norm(list(self.prev.split(sizes))))
        states = [self.opt.state.get(p) for p in self.params]
        if all(states):
            v = torch.cat([st["exp_avg_sq"].reshape(-1) for st in states])
            g = torch.cat([p.grad.reshape(-1) for p in self.params])
            # every tensor steps together, so Adam's bias correction is one scalar
            corr = 1.0 - self.beta2 ** float(states[0]["step"])
            ratio = g.square_().div_(v / corr + self.cfg.eps ** 2)
            both = torch.stack([v, ratio])
            sums, vx = [], []
            for chunk in both.split(sizes, dim=1):
                sums.append(chunk.sum(1))
                vx.append(chunk[0].max())
            sums = torch.stack(sums) / self.numel[:, None]
            vm, r = sums[:, 0], sums[:, 1].sqrt()
            vx = torch.stack(vx)
            vn = torch.stack(torch._foreach_norm(list(v.split(sizes))))
        else:
            vm = vx = vn = r = torch.zeros(n, device=self.device)
        gn = self.grad_norms if self.grad_norms is not None else torch.zeros(n, device=self.device)
        return torch.stack([gn, u, u / w.clamp_min(1e-12), vm, vx, vn, r], dim=1)

    def _spectral(self) -> dict:
        mats = [(n, p) for n, p in zip(self.names, self.params) if p.dim() == 2]
        vals = torch.stack([torch.linalg.matrix_norm(p.detach().float(), ord=2) for _, p in mats]).tolist()
        return {n: rnd(v) for (n, _), v in zip(mats, vals)}

    def batch_composition(self, batch) -> dict:
        seqs = [tuple(t for t in row if t != PAD) for row in batch.x.tolist()]
        tokens = [t for seq in seqs for t in seq]
        counts: dict[int, int] = {}
        for t in tokens:
            counts[t] = counts.get(t, 0) + 1
        n = max(1, len(tokens))
        rare = sum(c for t, c in counts.items() if self.rare_list[t])
        return {
            "rows": batch.rows,
            "distinct_tokens": len(counts),
            "top_token_share": rnd(max(counts.values()) / n) if counts else 0.0,
            "rare_share": rnd(rare / n),
            "dup_rows": len(seqs) - len(set(seqs)),
        }
