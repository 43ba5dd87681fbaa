"""Per-step signals beyond the loss: what makes each injection visible from the metrics alone.

Every signal is computed from tensors the step already has, batched with `_foreach` ops over all parameter
tensors, and brought to the host in one transfer per step (`.tolist()` on one stacked vector), so it costs
little next to the step (docs/benchmarks.md). A new per-step signal is one entry in `STEP_SIGNALS`; a new
per-tensor statistic is one entry in `PARAM_STATS`.

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

from minitrain.core import distributed
from minitrain.core.tokenizer import PAD

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


class StepView:
    """What a step signal may read: the step's tensors, named."""

    def __init__(self, model, logits, loss, grad_norm):
        self.model, self.logits, self.loss, self.grad_norm = model, logits, loss, grad_norm


# Per-step signals: (row key, how DDP ranks combine it, function of the StepView -> 1-d tensor, written as a
# list?). Adding a signal is one entry here (and a line in docs/metrics.md); `row` stacks them all into the
# step's single host transfer. Ranks hold equal-shaped shares, so a mean of rank means is the global mean.
STEP_SIGNALS = (
    ("logit_max", "max", lambda s: s.logits.detach().abs().max().float().reshape(1), False),
    ("act", "mean", lambda s: torch.stack(s.model.last_activations).float() if s.model.last_activations
     else torch.zeros(0, device=s.logits.device), True),
)

# Per-parameter-tensor statistics (full telemetry): (key, function of the telemetry's `_Moments`) -> one
# value per tensor, each a single `_foreach` pass over all tensors. Adding one is one entry here.
PARAM_STATS = (
    ("g", lambda m: m.grad_norms),  # gradient norm before clipping (after any injection)
    ("u", lambda m: m.update),  # update norm |p_new - p_old|
    ("ur", lambda m: m.update / m.weight.clamp_min(1e-12)),  # update-to-weight ratio
    ("vm", lambda m: m.norms(m.sqrt_v).square() / m.numel),  # mean of exp_avg_sq: sum(v) = |sqrt(v)|^2
    ("vx", lambda m: torch.stack(torch._foreach_max(m.v))),  # max of exp_avg_sq
    ("vn", lambda m: m.norms(m.v)),  # L2 norm of exp_avg_sq
    ("r", lambda m: m.norms(torch._foreach_div(m.grads, m.adam_denominator())) / m.numel.sqrt()),  # RMS(g^2/v_hat)
)


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
            view = StepView(self.model, logits, loss, grad_norm)
            parts = [distributed.all_reduce(fn(view), op) for _, op, fn, _ in STEP_SIGNALS]  # global over ranks
            finite = torch.stack([torch.isfinite(loss), torch.isfinite(grad_norm)]).float()
            per_param = self._per_param().flatten() if self.full else finite[:0]
            vals = torch.cat([*parts, finite, per_param]).tolist()  # everything reaches the host in ONE transfer
            out: dict = {}
            at = 0
            for (key, _, _, as_list), part in zip(STEP_SIGNALS, parts):
                chunk = [rnd(x) for x in vals[at:at + len(part)]]
                out[key] = chunk if as_list else chunk[0]
                at += len(part)
            loss_finite, norm_finite = vals[at], vals[at + 1]
            if self.full:
                stats, keys = vals[at + 2:], [key for key, _ in PARAM_STATS]
                k = len(keys)
                out["params"] = {name: dict(zip(keys, (rnd(x) for x in stats[i * k:(i + 1) * k])))
                                 for i, name in enumerate(self.names)}
                if self.cfg.spectral_every and step % self.cfg.spectral_every == 0:
                    out["sigma"] = self._spectral()
            out["nonfinite"] = int(not loss_finite) + (
                0 if norm_finite else sum(int((~torch.isfinite(p.grad)).sum()) for p in self.params))
            out["batch"] = self.batch_composition(batch)
        return out

    def _per_param(self) -> torch.Tensor:
        """[n_params, len(PARAM_STATS)]: every statistic of PARAM_STATS for every tensor (zeros before the
        optimizer has state, i.e. at a step-0 skipped update)."""
        n = len(self.params)
        states = [self.opt.state.get(p) for p in self.params]
        if not all(states):
            return torch.zeros(n, len(PARAM_STATS), device=self.device)
        moments = _Moments(self, states)
        return torch.stack([fn(moments) for _, fn in PARAM_STATS], dim=1)

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


class _Moments:
    """The tensors PARAM_STATS read, each computed once per step (lazily where only one stat needs it)."""

    def __init__(self, tel: Telemetry, states: list[dict]):
        self.norms = lambda ts: torch.stack(torch._foreach_norm(ts))
        self.numel = tel.numel
        self.grads = [p.grad for p in tel.params]
        self.grad_norms = tel.grad_norms if tel.grad_norms is not None else torch.zeros_like(tel.numel)
        self.update = self.norms(torch._foreach_sub(tel.detached, tel.prev))
        self.weight = self.norms(tel.prev)
        self.v = [st["exp_avg_sq"] for st in states]
        self.sqrt_v = torch._foreach_sqrt(self.v)
        self._step, self._beta2, self._eps = float(states[0]["step"]), tel.beta2, tel.cfg.eps

    def adam_denominator(self) -> list[torch.Tensor]:
        """Adam's own sqrt(v_hat) + eps; every tensor steps together, so the bias correction is one scalar."""
        denom = torch._foreach_div(self.sqrt_v, (1.0 - self._beta2 ** self._step) ** 0.5)
        torch._foreach_add_(denom, self._eps)
        return denom
