"""Signals of the silent training bugs: a step that runs, and a loss that still falls, but a step
that does not do what the loop says. Measured every step from tensors the step already has, with a few
`_foreach` passes; their values ride in the telemetry's one device-to-host transfer.

    carried   the gradient the optimizer gets against the one backward produced this step: with a linear
              digest (each tensor's element sum, s), a gradient that was not zeroed is the fresh one plus what
              the previous step left in .grad, s_applied = s_fresh + s_left, to float rounding; a healthy step
              has s_applied = s_fresh, a scaled one c * s_fresh. The statistic: sum |s_applied - s_fresh -
              s_left| / sum |s_left| over tensors, 1 when zeroed, ~0 when carried.
    changed   per tensor, did the step change its weights at all: |w_after - w_before| > 0 (the weights are
              copied before the step; compared only at steps that ran with LR > 0).
    spread    under torchrun, per tensor, the largest minus the smallest weight norm over ranks after the step
              (two all-reduces of one number per tensor): zero while DDP keeps the replicas equal.

A row carries a field only at a step where its signal fires (docs/metrics.md: `grads_carried`, `unchanged`,
`ranks_differ`), so a healthy run's rows are exactly what they were without these signals.
"""
from __future__ import annotations

import math

import torch

from minitrain.core import distributed

# a step's gradient carries the previous one when the digest's residual is below this share of what was left
CARRY_RESIDUAL = 1e-3


def sums(ts: list[torch.Tensor]) -> torch.Tensor:
    """Each tensor's element sum, stacked (the linear digest)."""
    return torch.stack([t.detach().sum() for t in ts]).float()


class SilentSignals:
    def __init__(self, params: list[torch.Tensor]):
        self.params = [p.detach() for p in params]
        self.fresh: torch.Tensor | None = None  # digest of the gradients backward produced this step
        self.applied: torch.Tensor | None = None  # ... of those the optimizer is given
        self.left: torch.Tensor | None = None  # ... of those the previous step left in .grad
        self.left_next: torch.Tensor | None = None  # ... of those this step leaves
        self.kept: list[torch.Tensor] = []  # the weights before the step
        self.moved: torch.Tensor | None = None  # per tensor |w_after - w_before|
        self.lr = 0.0
        self.world = distributed.world_size()

    def produced(self, grads: list[torch.Tensor]) -> None:
        """The gradients backward produced this step (the loop: before any gradient injection)."""
        self.fresh = None if any(g is None for g in grads) else sums(grads)

    def add_produced(self, i: int, grad: torch.Tensor) -> None:
        """One tensor's gradient as backward produces it (a probe's hook; micro-batches add up)."""
        if self.fresh is None:
            self.fresh = torch.zeros(len(self.params), device=grad.device)
        self.fresh[i] += grad.detach().sum().float()

    def after_backward(self, grads: list[torch.Tensor]) -> None:
        self.applied = None if any(g is None for g in grads) else sums(grads)

    def before_step(self) -> None:
        if not self.kept:
            self.kept = [torch.empty_like(p) for p in self.params]
        torch._foreach_copy_(self.kept, self.params)

    def after_step(self, grads: list[torch.Tensor], lr: float) -> None:
        """After the optimizer step: how far each tensor moved, and the digest of what stays in .grad."""
        self.lr = lr
        self.moved = torch.stack(torch._foreach_norm(torch._foreach_sub(self.params, self.kept))).float()
        self.left_next = None if any(g is None for g in grads) else sums(grads)

    def values(self) -> torch.Tensor:
        """This step's numbers for the one transfer: [residual, left (2), moved (n), spread (n under DDP)]."""
        n = len(self.params)
        device = self.params[0].device
        if self.fresh is not None and self.applied is not None and self.left is not None:
            carry = torch.stack([(self.applied - self.fresh - self.left).abs().sum(), self.left.abs().sum()])
        else:
            carry = torch.full((2,), math.nan, device=device)
        moved = self.moved if self.moved is not None else torch.ones(n, device=device)
        out = [carry, moved]
        if self.world > 1 and self.moved is not None:
            norms = torch.stack(torch._foreach_norm(self.params)).float()
            hi = distributed.all_reduce(norms, "max")
            lo = -distributed.all_reduce(-norms, "max")
            out.append(hi - lo)
        self.left = self.left_next
        self.fresh = self.applied = self.moved = self.left_next = None
        return torch.cat(out)

    def fields(self, host: list[float], names: list[str]) -> dict:
        """The row fields of the signals that fired at this step, from `values()` on the host."""
        n = len(names)
        residual, left = host[:2]
        out = {}
        if math.isfinite(residual) and left > 0 and residual <= CARRY_RESIDUAL * left:
            out["grads_carried"] = float(f"{residual / left:.3g}")
        if self.lr > 0:
            unchanged = [name for name, d in zip(names, host[2:2 + n]) if d == 0]
            if unchanged:
                out["unchanged"] = unchanged
        if len(host) > 2 + n:
            differ = [name for name, s in zip(names, host[2 + n:2 + 2 * n]) if s > 0]
            if differ:
                out["ranks_differ"] = differ
        return out
