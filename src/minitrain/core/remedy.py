"""Remedies: the fixes the stability check's leaves prescribe, as one registered hook in the training step.

The loop calls `apply_remedy(step, grad_norm, ctx)` once per step, after clip-and-before-step (and before
the optimizer-state injection point), and takes the optimizer step only if it returns True:

    skip_batch       at remedy_step: no update at all (weights and Adam moments untouched), the
                     offending batch is dropped; its loss and pre-clip norm are still logged
    restore_moments  keeps Adam's moments (m, v) as they are at every checkpoint boundary (the state a
                     checkpoint written there holds); at remedy_step it puts back the last such copy
                     taken before remedy_step, i.e. it reloads the pre-spike checkpoint's moments
    zclip            ZClip's detector: z-score of the pre-clip gradient norm against an EMA of its mean
                     and variance (alpha 0.97, z > 2.5); on a spike the (already clipped) gradient is
                     scaled by threshold / norm. Plain ZClip would clip the norm to the threshold, which
                     changes nothing here: the threshold (~mean + 2.5 std of norms of 2-5) is above the
                     fixed clip of 1.0, which engages on every step. Down-weighting is what can still act.

With `remedy: none` (the default) `ctx` is None and the hook returns True at once. A remedy is one
function registered with `@remedy(name, params, cause)`; it writes what it did into `ctx.actions`, which
the manifest records. `minitrain.lab.remediate` drives a whole remediation run (`minitrain remediate`).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from minitrain.core.errors import UserError

if TYPE_CHECKING:  # torch is imported where it is used: validating a config must not pay for it
    import torch

MAX_ACTIONS_RECORDED = 50  # zclip may act often; the manifest keeps the first 50 and a count


@dataclass(frozen=True)
class Remedy:
    name: str
    params: tuple[str, ...]  # config fields it reads (recorded in the manifest)
    cause: str  # the stability-check cause it answers
    apply: Callable[[int, float, "RemedyContext"], bool]
    summary: str


REGISTRY: dict[str, Remedy] = {}


def remedy(name: str, params: tuple[str, ...], cause: str):
    def register(fn):
        REGISTRY[name] = Remedy(name, params, cause, fn, (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return register


@dataclass
class RemedyContext:
    cfg: Any
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    state: dict = field(default_factory=dict)  # the remedy's own memory (snapshots, EMA)
    actions: list = field(default_factory=list)
    action_count: int = 0

    def note(self, step: int, action: str, **numbers) -> None:
        self.action_count += 1
        if len(self.actions) < MAX_ACTIONS_RECORDED:
            self.actions.append({"step": step, "action": action, **numbers})

    def moments(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        out = {}
        for name, p in self.model.named_parameters():
            st = self.opt.state.get(p)
            if st:
                out[name] = (st["exp_avg"], st["exp_avg_sq"])
        return out


# ---------------------------------------------------------------------------------------------------
# The remedies
# ---------------------------------------------------------------------------------------------------


@remedy("skip_batch", params=("remedy_step",), cause="bad_batch")
def skip_batch(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Skip the offending batch: no update at remedy_step (weights and Adam moments untouched)."""
    if step != ctx.cfg.remedy_step:
        return True
    ctx.note(step, "skipped this step's update", grad_norm=grad_norm)
    return False


@remedy("restore_moments", params=("remedy_step", "remedy_param", "ckpt_every"), cause="optimizer_state_corruption")
def restore_moments(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Restore Adam's moments (of remedy_param, or of every tensor) from the last checkpoint boundary before
    remedy_step, at remedy_step."""
    cfg = ctx.cfg
    if step % cfg.ckpt_every == 0 and step < cfg.remedy_step:  # what a checkpoint at this step holds
        ctx.state["snapshot"] = (step, {n: (m.clone(), v.clone()) for n, (m, v) in ctx.moments().items()
                                        if not cfg.remedy_param or n == cfg.remedy_param})
    if step == cfg.remedy_step:
        if "snapshot" not in ctx.state:
            ctx.note(step, "nothing restored: no checkpoint boundary seen before remedy_step")
            return True
        source, saved = ctx.state["snapshot"]
        live = ctx.moments()
        for name, (m, v) in saved.items():
            live[name][0].copy_(m)
            live[name][1].copy_(v)
        ctx.note(step, "restored Adam's m and v", from_checkpoint_step=source, tensors=len(saved),
                 **({"param": cfg.remedy_param} if cfg.remedy_param else {}))
    return True


@remedy("zclip", params=("remedy_zclip_z", "remedy_zclip_alpha", "remedy_zclip_warmup"), cause="gradient_explosion")
def zclip(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Adaptive clipping: down-weight a step whose pre-clip norm is a z-score outlier against its EMA."""
    cfg, st = ctx.cfg, ctx.state
    if not math.isfinite(grad_norm):
        return True  # non-finite steps are the loop's business (it stops the run)
    n = st.get("n", 0)
    if n < cfg.remedy_zclip_warmup:  # plain running mean and variance to start the EMA
        mean = st.get("mean", 0.0)
        new_mean = mean + (grad_norm - mean) / (n + 1)
        st["m2"] = st.get("m2", 0.0) + (grad_norm - mean) * (grad_norm - new_mean)
        st["mean"], st["var"], st["n"] = new_mean, st["m2"] / (n + 1), n + 1
        return True
    mean, std = st["mean"], math.sqrt(max(st["var"], 0.0))
    z = (grad_norm - mean) / max(std, 1e-12)
    seen = grad_norm
    if z > cfg.remedy_zclip_z:
        threshold = mean + cfg.remedy_zclip_z * std
        factor = threshold / grad_norm
        import torch

        with torch.no_grad():
            for p in ctx.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(factor)
        ctx.note(step, "down-weighted the clipped gradient", z=round(z, 3), factor=round(factor, 5),
                 grad_norm=grad_norm, threshold=round(threshold, 4))
        seen = threshold  # ZClip feeds the clipped value to its statistics, so one spike does not inflate them
    a = cfg.remedy_zclip_alpha
    st["mean"] = a * mean + (1 - a) * seen
    st["var"] = a * st["var"] + (1 - a) * (seen - st["mean"]) ** 2
    st["n"] = n + 1
    return True


# ---------------------------------------------------------------------------------------------------


def apply_remedy(step: int, grad_norm: torch.Tensor, ctx: RemedyContext | None) -> bool:
    """The hook: a no-op (True: take the optimizer step) unless a remedy is configured."""
    if ctx is None:
        return True
    return REGISTRY[ctx.cfg.remedy].apply(step, float(grad_norm), ctx)


def remedy_checkpoint(ctx: RemedyContext) -> dict:
    """The JSON part of a remedy's memory, for a checkpoint. Tensor snapshots (restore_moments) are not
    saved: a resume starts at a checkpoint boundary, where that remedy takes its snapshot again."""
    scalars = {k: v for k, v in ctx.state.items() if isinstance(v, (int, float))}
    return {"state": scalars, "actions": list(ctx.actions), "action_count": ctx.action_count}


def remedy_restore(ctx: RemedyContext, saved: dict) -> None:
    ctx.state.update(saved.get("state", {}))
    ctx.actions[:] = saved.get("actions", [])
    ctx.action_count = saved.get("action_count", 0)


def make_context(cfg, model, opt) -> RemedyContext | None:
    return None if cfg.remedy == "none" else RemedyContext(cfg, model, opt)


def remedy_record(ctx: RemedyContext | None) -> dict | None:
    """The remedy as configured plus what it did, for the manifest."""
    if ctx is None:
        return None
    r = REGISTRY[ctx.cfg.remedy]
    return {"remedy": r.name, "cause": r.cause, **{p: getattr(ctx.cfg, p) for p in r.params},
            "actions": list(ctx.actions), "action_count": ctx.action_count}


def validate_remedy_config(cfg) -> None:
    if cfg.remedy == "none":
        return
    if cfg.remedy not in REGISTRY:
        close = difflib.get_close_matches(cfg.remedy, REGISTRY, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown remedy '{cfg.remedy}'{hint}; valid remedies: none, {', '.join(REGISTRY)}")
    if "remedy_step" in REGISTRY[cfg.remedy].params and not 0 <= cfg.remedy_step < cfg.steps:
        raise UserError(f"remedy {cfg.remedy} needs remedy_step within [0, {cfg.steps - 1}], got {cfg.remedy_step}; "
                        "e.g. --set remedy_step=500")
    if cfg.remedy_param and cfg.remedy_param not in _param_names(cfg):
        close = difflib.get_close_matches(cfg.remedy_param, _param_names(cfg), n=3, cutoff=0.4)
        raise UserError(f"unknown parameter '{cfg.remedy_param}' for remedy_param"
                        + (f"; close matches: {', '.join(close)}" if close else "; see docs/metrics.md for the names"))
    if not (cfg.remedy_zclip_z > 0 and 0 < cfg.remedy_zclip_alpha < 1 and cfg.remedy_zclip_warmup >= 2):
        raise UserError("zclip needs remedy_zclip_z > 0, 0 < remedy_zclip_alpha < 1 and remedy_zclip_warmup >= 2")


def _param_names(cfg) -> list[str]:
    from minitrain.core.model import param_names

    return param_names(cfg)
