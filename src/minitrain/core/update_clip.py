"""Update clipping in the StableAdamW sense (Wortsman et al. 2023b), on torch's own AdamW.

Before each optimizer step, per parameter tensor t:

    v_hat_t = (beta2 * v + (1 - beta2) * g^2) / (1 - beta2^(step + 1))    the second moment this step will use
    RMS_t   = sqrt(mean(g^2 / max(v_hat_t, eps^2)))                       g: the (clipped) gradient
    lr_t    = lr / max(1, RMS_t)

RMS_t well above 1 means Adam's second moment under-estimates the squared gradient: the update would be larger
than Adam's design allows, the known loss-spike mechanism. With `update_clip` on, `make_param_groups` gives
every tensor its own param group, so that AdamW (fused, unchanged) applies lr_t to that tensor alone, decay
included (StableAdamW scales both). Telemetry reads each tensor's group after the step, so the update it
rebuilds on detail steps uses lr_t (core/telemetry.py `hyper`).
"""
from __future__ import annotations

import torch


def make_param_groups(named_params, weight_decay: float, per_tensor: bool) -> list[dict]:
    """AdamW's groups: decay on matrices and embeddings only; one group per tensor when `per_tensor`."""
    decay = [p for _, p in named_params if p.dim() >= 2]
    no_decay = [p for _, p in named_params if p.dim() < 2]
    if not per_tensor:
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [{"params": [p], "weight_decay": weight_decay if p.dim() >= 2 else 0.0} for _, p in named_params]


def update_rms(opt: torch.optim.Optimizer) -> list[float]:
    """RMS_t of every param group's single tensor, for the step about to be taken (one host transfer)."""
    values = []
    for group in opt.param_groups:
        (p,) = group["params"]
        _, b2 = group["betas"]
        st = opt.state.get(p) or {}
        g2 = p.grad.float().square()
        if st:
            t = float(st["step"]) + 1.0
            v = st["exp_avg_sq"].mul(b2).add_(g2, alpha=1.0 - b2)
        else:  # the first step: v starts at 0
            t, v = 1.0, g2.mul(1.0 - b2)
        v_hat = v.div_(1.0 - b2 ** t).clamp_min_(group["eps"] ** 2)
        values.append(g2.div_(v_hat).mean().sqrt())
    return torch.stack(values).tolist()


def clip_updates(opt: torch.optim.Optimizer, lr: float) -> list[float]:
    """Set each group's lr to lr / max(1, RMS_t); returns the RMS values."""
    rms = update_rms(opt)
    for group, r in zip(opt.param_groups, rms):
        group["lr"] = lr / max(1.0, r)
    return rms
