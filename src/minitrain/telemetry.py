"""Per-step signals beyond the loss: what makes each injection visible from the metrics alone.

Every signal is computed from tensors the step already has, batched with `_foreach` ops over all parameter
tensors, and brought to the host in one transfer per step (`.tolist()` on one stacked vector), so it costs
little next to the step (docs/benchmarks.md).

Row fields written by `Telemetry.row` (see docs/metrics.md for the full schema):
  act            mean |activation| of each block's output            (list, one per layer)
  logit_max      largest |logit| in the batch
  nonfinite      non-finite values in the loss and gradients
  batch          composition: rows, distinct tokens, top-token share, rare-token share, duplicated rows
  params         per parameter tensor (full telemetry only):
                 g   gradient norm before clipping (after any injection)
                 u   update norm |p_new - p_old|        ur  update-to-weight ratio u / |p_old|
                 vm  mean of Adam's exp_avg_sq           vx  max of exp_avg_sq     vn  norm of exp_avg_sq
                 r   RMS(g^2 / v_hat): StableAdamW's statistic (g clipped, v bias-corrected, after the step;
                     denominator sqrt(v_hat) + eps, as in Adam)
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
        self.detached = [p.detach() for p in self.params]  # views: they follow the in-place updates
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
        if self.full:  # a copy of the weights, to measure this step's update
            self.prev = torch._foreach_mul(self.detached, 1.0)

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
        """[n_params, 7] tensor: g, u, ur, vm, vx, vn, r (see module doc). Every statistic is one `_foreach`
        call over all tensors (one pass over the 130k numbers each): sums come out of L2 norms of square
        roots, so no per-tensor Python loop runs."""
        n = len(self.params)
        norms = lambda ts: torch.stack(torch._foreach_norm(ts))  # noqa: E731
        u = norms(torch._foreach_sub(self.detached, self.prev))
        w = norms(self.prev)
        states = [self.opt.state.get(p) for p in self.params]
        if all(states):
            v = [st["exp_avg_sq"] for st in states]
            sqrt_v = torch._foreach_sqrt(v)
            vm = norms(sqrt_v).square() / self.numel  # sum(v) = |sqrt(v)|^2
            vx = torch.stack(torch._foreach_max(v))
            vn = norms(v)
            # every tensor steps together, so Adam's bias correction is one scalar; the denominator is
            # Adam's own, sqrt(v_hat) + eps, and RMS(g^2 / v_hat) = |g / sqrt(v_hat)| / sqrt(numel)
            denom = torch._foreach_div(sqrt_v, (1.0 - self.beta2 ** float(states[0]["step"])) ** 0.5)
            torch._foreach_add_(denom, self.cfg.eps)
            r = norms(torch._foreach_div([p.grad for p in self.params], denom)) / self.numel.sqrt()
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
