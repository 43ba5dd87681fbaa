"""Signals of the silent training bugs: a step that runs, and a loss that still falls, but a step
that does not do what the loop says. Measured every step from tensors the step already has, with a few
`_foreach` passes; their values ride in the telemetry's one device-to-host transfer.

    carried   the gradient the optimizer gets against the one backward produced this step: with a linear
              digest (each tensor's element sum, s), a gradient that was not zeroed is the fresh one plus what
              the previous step left in .grad, s_applied = s_fresh + s_left, to float rounding; a healthy step
              has s_applied = s_fresh, a scaled one c * s_fresh. The statistic: sum |s_applied - s_fresh -
              s_left| / sum |s_left| over tensors, 1 when zeroed, ~0 when carried. In minitrain's loop a step whose
              optimizer gets the very tensors backward produced is answered without a digest.
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
    """The loop hands it the gradient tensors themselves (`produced`, `after_step(..., keep=True)`): a step whose
    optimizer gets the very tensors backward produced cannot carry anything and costs no digest at all. The
    probe hands it digests from its hooks (`add_produced`) and digests what is left in .grad at once (a loop may
    zero it in place)."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = [p.detach() for p in params]
        self.fresh: torch.Tensor | None = None  # digest of the gradients backward produced this step (probe)
        self.fresh_grads: list[torch.Tensor] | None = None  # those gradients themselves (loop), until after_backward
        self.left: torch.Tensor | None = None  # digest of what the previous step left in .grad
        self.left_grads: list[torch.Tensor] | None = None  # ... or those tensors themselves (loop)
        self.carry: torch.Tensor | None = None  # [residual, left] of this step
        self.kept: list[torch.Tensor] = []  # the weights before the step
        self.moved: torch.Tensor | None = None  # per tensor |w_after - w_before|
        self.lr = 0.0
        self.world = distributed.world_size()
        self.no_carry = torch.full((2,), math.nan, device=self.params[0].device)  # (made once: every step uses it)

    def produced(self, grads: list[torch.Tensor]) -> None:
        """The gradients backward produced this step (the loop: before any gradient injection)."""
        self.fresh_grads = grads

    def add_produced(self, i: int, grad: torch.Tensor) -> None:
        """One tensor's gradient as backward produces it (a probe's hook; micro-batches add up)."""
        if self.fresh is None:
            self.fresh = torch.zeros(len(self.params), device=grad.device)
        self.fresh[i] += grad.detach().sum().float()

    def after_backward(self, grads: list[torch.Tensor]) -> None:
        """`grads`: what the optimizer will be given (before clipping)."""
        fresh_grads, self.fresh_grads = self.fresh_grads, None
        fresh, self.fresh = self.fresh, None
        left, left_grads = self.left, self.left_grads
        self.left = self.left_grads = self.carry = None
        if fresh_grads is not None and len(fresh_grads) == len(grads) and all(
                a is b for a, b in zip(fresh_grads, grads)):
            return  # the optimizer gets backward's own tensors: nothing carried (and nothing to digest)
        if left is None and left_grads is not None:
            left = sums(left_grads)
        if left is None or any(g is None for g in grads):
            return
        if fresh is None:
            if fresh_grads is None or any(g is None for g in fresh_grads):
                return
            fresh = sums(fresh_grads)
        self.carry = torch.stack([(sums(grads) - fresh - left).abs().sum(), left.abs().sum()])

    def before_step(self) -> None:
        if not self.kept:
            self.kept = [torch.empty_like(p) for p in self.params]
        torch._foreach_copy_(self.kept, self.params)

    def after_step(self, grads: list[torch.Tensor], lr: float, keep: bool = False) -> None:
        """After the optimizer step: how far each tensor moved, and what stays in .grad for the next step
        (`keep`: the tensors themselves, when nothing will change them in place before the next backward)."""
        self.lr = lr
        if self.kept:  # in place: the copy is taken again before the next step
            torch._foreach_sub_(self.kept, self.params)
            self.moved = torch.stack(torch._foreach_norm(self.kept)).float()
        if any(g is None for g in grads):
            return
        if keep:
            self.left_grads = list(grads)
        else:
            self.left = sums(grads)

    def values(self) -> torch.Tensor:
        """This step's numbers for the one transfer: [residual, left (2), moved (n), spread (n under DDP)]."""
        carry = self.carry if self.carry is not None else self.no_carry
        moved = self.moved if self.moved is not None else torch.ones(len(self.params), device=carry.device)
        out = [carry, moved]
        if self.world > 1 and self.moved is not None:
            norms = torch.stack(torch._foreach_norm(self.params)).float()
            hi = distributed.all_reduce(norms, "max")
            lo = -distributed.all_reduce(-norms, "max")
            out.append(hi - lo)
        self.carry = self.moved = None
        return torch.cat(out)

    def fields(self, host: list[float], names: list[str]) -> dict:
        """The row fields of the signals that fired at this step, from `values()` on the host."""
        n = len(names)
        residual, left = host[:2]
        out = {}
        if math.isfinite(residual) and left > 0 and residual <= CARRY_RESIDUAL * left:
            out["grads_carried"] = float(f"{residual / left:.3g}")
        moved = host[2:2 + n]
        if self.lr > 0 and min(moved) == 0:
            out["unchanged"] = [name for name, d in zip(names, moved) if d == 0]
        if len(host) > 2 + n:
            differ = [name for name, s in zip(names, host[2 + n:2 + 2 * n]) if s > 0]
            if differ:
                out["ranks_differ"] = differ
        return out
