"""Deterministic perturbations at step K: the lab's `maybe_inject` knob.

The loop calls `maybe_inject(point, step, target, ctx)` at three points of every step:

    "batch"            before the forward pass        target: the Batch
    "grads"            after backward, before clip     target: {name: grad tensor}
    "optimizer_state"  before the optimizer step       target: {"m": {name: exp_avg}, "v": {name: exp_avg_sq}}

With `injection: none` (the default) every call returns its target untouched. An injection is one
function registered with `@injection(name, point, params)`: it receives the target and a context, returns
the (possibly replaced) target, and writes what it touched into `ctx.record` for the manifest.
Adding a fourth injection is one more decorated function here.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from minitrain.core.errors import UserError

POINTS = ("batch", "grads", "optimizer_state")


@dataclass(frozen=True)
class Injection:
    name: str
    point: str
    params: tuple[str, ...]  # config fields this injection reads (recorded in the manifest)
    apply: Callable[[Any, "InjectContext"], Any]
    summary: str


REGISTRY: dict[str, Injection] = {}


def injection(name: str, point: str, params: tuple[str, ...] = ()):
    assert point in POINTS, point

    def register(fn):
        REGISTRY[name] = Injection(name, point, params, fn, (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return register


@dataclass
class InjectContext:
    """What an injection may need besides its target. `record` collects what it touched."""

    cfg: Any
    step: int
    make_rows_batch: Callable[[str, int], tuple[Any, dict]] | None = None  # (sentence, copies) -> Batch
    param_shapes: dict[str, list[int]] = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    fired: list[int] = field(default_factory=list)  # steps it fired at in this process (DDP checks every rank)


# ---------------------------------------------------------------------------------------------------
# The three lab injections
# ---------------------------------------------------------------------------------------------------


@injection("scale", point="grads", params=("injection_scale",))
def scale_gradients(grads: dict[str, torch.Tensor], ctx: InjectContext):
    """A: multiply every gradient by injection_scale before clip-and-step, at step K only."""
    s = ctx.cfg.injection_scale
    ctx.record.update(touched="every gradient", tensors=len(grads), multiplier=s)
    return {name: g * s for name, g in grads.items()}


@injection("bad_batch", point="batch", params=("injection_sentence",))
def bad_batch(batch, ctx: InjectContext):
    """B: replace the batch with batch_size copies of injection_sentence, at step K only."""
    copies = batch.x.shape[0]
    new_batch, info = ctx.make_rows_batch(ctx.cfg.injection_sentence, copies)
    ctx.record.update(touched="the whole batch", copies=copies, **info)
    return new_batch


@injection("v_corrupt", point="optimizer_state", params=("injection_param", "injection_factor"))
def corrupt_second_moment(state: dict, ctx: InjectContext):
    """C: multiply Adam's second moment v of injection_param by injection_factor; it persists."""
    name, factor = ctx.cfg.injection_param, ctx.cfg.injection_factor
    v = state["v"].get(name)
    if v is None:  # step 0: AdamW has no state yet, so v is zero and scaling it changes nothing
        ctx.record.update(touched=name, shape=ctx.param_shapes.get(name), factor=factor,
                          effect="none: optimizer state is empty before the first step")
        return state
    before = float(v.mean())
    v.mul_(factor)
    ctx.record.update(touched=name, shape=list(v.shape), factor=factor,
                      v_mean_before=before, v_mean_after=float(v.mean()))
    return state


# ---------------------------------------------------------------------------------------------------


def maybe_inject(point: str, step: int, target: Any, ctx: InjectContext | None) -> Any:
    """The hook: a no-op unless the configured injection lives at this point and step == K."""
    if ctx is None or ctx.cfg.injection == "none" or step != ctx.cfg.injection_step:
        return target
    inj = REGISTRY[ctx.cfg.injection]
    if inj.point != point:
        return target
    ctx.step = step
    ctx.fired.append(step)
    ctx.record.update(injection=inj.name, point=point, step=step)
    return inj.apply(target, ctx)


def injection_settings(cfg) -> dict:
    """The injection exactly as configured (type, step and each of its parameters)."""
    if cfg.injection == "none":
        return {"injection": "none"}
    inj = REGISTRY[cfg.injection]
    out = {"injection": inj.name, "point": inj.point, "step": cfg.injection_step}
    out.update({p: getattr(cfg, p) for p in inj.params})
    return out


def validate_injection_config(cfg, param_names: list[str] | None = None) -> None:
    if cfg.injection != "none" and cfg.injection not in REGISTRY:
        valid = ", ".join(["none", *REGISTRY])
        raise UserError(f"unknown injection '{cfg.injection}'; valid injections: {valid}")
    if cfg.injection == "none":
        return
    if not 0 <= cfg.injection_step < cfg.steps:
        raise UserError(
            f"injection_step must be within [0, {cfg.steps - 1}] (steps={cfg.steps}), got {cfg.injection_step}"
        )
    if cfg.injection == "scale" and not (math.isfinite(cfg.injection_scale) and cfg.injection_scale != 0):
        raise UserError(f"injection_scale must be a finite non-zero number, got {cfg.injection_scale}")
    if cfg.injection == "v_corrupt":
        if not cfg.injection_factor > 0:
            raise UserError(f"injection_factor must be positive, got {cfg.injection_factor}")
        if param_names is not None and cfg.injection_param not in param_names:
            close = difflib.get_close_matches(cfg.injection_param, param_names, n=3, cutoff=0.4)
            hint = f"close matches: {', '.join(close)}" if close else f"valid: {', '.join(param_names)}"
            raise UserError(f"unknown parameter '{cfg.injection_param}' for injection_param; {hint}")
    if cfg.injection == "bad_batch" and not cfg.injection_sentence.strip():
        raise UserError("injection_sentence is empty; give an English sentence, e.g. 'She has written the letter.'")
