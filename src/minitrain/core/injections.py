"""Deterministic perturbations at step K: the lab's `maybe_inject` knob.

The loop calls `maybe_inject(point, step, target, ctx)` at six points of every step:

    "lr"               when the schedule sets the LR   target: the LR (float) the optimizer runs with and the row logs
    "batch"            before the forward pass        target: the Batch
    "loss"             before backward                 target: the objective backward differentiates (a token mean)
    "grads"            after backward, before clip     target: {name: grad tensor}
    "optimizer_state"  before the optimizer step       target: {"m": {name: exp_avg}, "v": {name: exp_avg_sq}}
    "step"             the optimizer step itself       target: the function that takes the step (no argument)

With `injection: none` (the default) every call returns its target untouched. An injection is one
function registered with `@injection(name, point, params, lasts)`: it receives the target and a context,
returns the (possibly replaced) target, and writes what it touched into `ctx.record` for the manifest.
`lasts` says when it is active: "step" (step K only, the lab's three), "span" (injection_span steps from K,
0 = to the end of the run) or "rest" (every step from K on). Every injection is a pure function of the
config and the step, so a run resumed or forked inside its active window gives the same bytes.

Beyond the lab's three (scale, bad_batch, v_corrupt), five realistic faults (docs/diagnosis.md measures
their signatures): lr_spike (a schedule bug), corrupt_batch (distinct corrupted rows), stuck_loader,
target_leak (inputs hold their own targets), adam_setting (AdamW's beta2 / eps changed from K on).
Five silent bugs (nothing spikes, the loss still falls, only worse; docs/silent-bugs.md): no_zero_grad,
frozen_params, step_noop, loss_sum, and rank_desync under torchrun.
Adding one is one more decorated function here (and its config fields in core/config.py).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from minitrain.core.errors import UserError

if TYPE_CHECKING:  # torch is imported where it is used: validating a config must not pay for it
    import torch

POINTS = ("lr", "batch", "loss", "grads", "optimizer_state", "step")
LASTS = ("step", "span", "rest")


@dataclass(frozen=True)
class Injection:
    name: str
    point: str
    params: tuple[str, ...]  # config fields this injection reads (recorded in the manifest)
    apply: Callable[[Any, "InjectContext"], Any]
    summary: str
    lasts: str = "step"  # step: K only | span: injection_span steps from K (0: to the end) | rest: K to the end

    def active(self, cfg, step: int) -> bool:
        k = cfg.injection_step
        if self.lasts == "step":
            return step == k
        if self.lasts == "rest" or cfg.injection_span == 0:
            return step >= k
        return k <= step < k + cfg.injection_span


REGISTRY: dict[str, Injection] = {}


def injection(name: str, point: str, params: tuple[str, ...] = (), lasts: str = "step"):
    assert point in POINTS and lasts in LASTS, (point, lasts)

    def register(fn):
        REGISTRY[name] = Injection(name, point, params, fn, (fn.__doc__ or "").strip().splitlines()[0], lasts)
        return fn

    return register


@dataclass
class InjectContext:
    """What an injection may need besides its target. `record` collects what it touched."""

    cfg: Any
    step: int
    make_rows_batch: Callable[[str, int], tuple[Any, dict]] | None = None  # (sentence, copies) -> Batch
    train_batch: Callable[[int], Any] | None = None  # step -> the batch the data order serves at that step
    optimizer: Any = None  # the torch optimizer (adam_setting changes its param groups)
    param_shapes: dict[str, list[int]] = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    fired: list[int] = field(default_factory=list)  # steps it fired at in this process (DDP checks every rank)
    target_tokens: Any = None  # the global batch's target-token count the loss divides by (loss_sum)
    params: dict = field(default_factory=dict)  # {name: parameter} (frozen_params, step_noop)
    carried: dict | None = None  # no_zero_grad: the gradients the next step adds to its own
    ddp_switch: Any = None  # rank_desync: distributed.keep_local_gradients' switch (None on one process)


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
# Realistic training faults beyond the lab's three
# ---------------------------------------------------------------------------------------------------


@injection("lr_spike", point="lr", params=("injection_mult", "injection_span"), lasts="span")
def lr_spike(lr: float, ctx: InjectContext):
    """LR schedule bug: the LR x injection_mult for injection_span steps from K (K=0, span 0: the whole run).
    The row logs the LR the optimizer ran with, so the LR panel shows it."""
    if ctx.step == ctx.cfg.injection_step:
        span = ctx.cfg.injection_span or ctx.cfg.steps - ctx.cfg.injection_step
        ctx.record.update(touched="the learning rate", multiplier=ctx.cfg.injection_mult, steps=span)
    return lr * ctx.cfg.injection_mult


CORRUPT_MODES = ("random", "shift", "mismatch")


def _fault_generator(cfg) -> torch.Generator:
    """A generator of its own (never the global RNG, which the run's other draws use), from seed and K."""
    import torch

    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7_919 * cfg.injection_step + 12_345)


@injection("corrupt_batch", point="batch", params=("injection_mode", "injection_rows"))
def corrupt_batch(batch, ctx: InjectContext):
    """Corrupted batch at K: injection_rows rows (0 = all) of injection_mode random | shift | mismatch.
    random: random token ids between <bos> and <eos>; shift: rows cut half a row late from the batch's token
    stream (they straddle two sentences); mismatch: each row gets another row's targets. Rows stay distinct."""
    import torch

    from minitrain.core.tokenizer import PAD, Batch

    n = batch.x.shape[0]
    k = min(ctx.cfg.injection_rows or n, n)
    g = _fault_generator(ctx.cfg)
    which = torch.randperm(n, generator=g)[:k].sort().values
    x, y, mask = batch.x.clone(), batch.y.clone(), batch.loss_mask.clone()
    lengths = [int((batch.x[i] != PAD).sum()) + 1 for i in range(n)]  # tokens of row i (inputs + last target)
    rows = [torch.cat([batch.x[i, :lengths[i] - 1], batch.y[i, lengths[i] - 2:lengths[i] - 1]]) for i in range(n)]
    mode = ctx.cfg.injection_mode
    if mode == "random":  # every token between <bos> and <eos> replaced by a random non-special id
        for i in which.tolist():
            seq = rows[i].clone()
            seq[1:-1] = torch.randint(3, ctx.cfg.vocab_size, (len(seq) - 2,), generator=g)
            x[i, :len(seq) - 1], y[i, :len(seq) - 1] = seq[:-1], seq[1:]
    elif mode == "shift":  # the batch's token stream cut half a row late: rows straddle two sentences
        stream = torch.cat(rows * 2)
        starts = [sum(lengths[:i]) for i in range(n)]
        for i in which.tolist():
            seq = stream[starts[i] + lengths[i] // 2:starts[i] + lengths[i] // 2 + lengths[i]]
            x[i, :lengths[i] - 1], y[i, :lengths[i] - 1] = seq[:-1], seq[1:]
    else:  # mismatch: each chosen row takes the next chosen row's targets (and their loss mask)
        if k == 1:  # one row: take a row outside the choice
            other = torch.tensor([(int(which[0]) + 1) % n])
        else:
            other = which.roll(1)
        y[which], mask[which] = batch.y[other], batch.loss_mask[other]
    ctx.record.update(touched=f"{k} of {n} rows", mode=mode, rows=which.tolist())
    return Batch(x=x, y=y, loss_mask=mask, key_pad=x == PAD, irregular=batch.irregular, rows=batch.rows)


@injection("stuck_loader", point="batch", params=("injection_span",), lasts="span")
def stuck_loader(batch, ctx: InjectContext):
    """Stuck data loader: step K's batch is served again for injection_span steps (0 = to the end)."""
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="the whole batch", batch_of_step=ctx.step,
                          steps=ctx.cfg.injection_span or ctx.cfg.steps - ctx.step)
        return batch
    return ctx.train_batch(ctx.cfg.injection_step)


@injection("target_leak", point="batch", params=("injection_span",), lasts="span")
def target_leak(batch, ctx: InjectContext):
    """Target leak: inputs = targets (the one-token shift forgotten) for injection_span steps from K.
    Every position sees the token it must predict (span 0 = to the end of the run)."""
    from minitrain.core.tokenizer import PAD, Batch

    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="the inputs of every row", steps=ctx.cfg.injection_span or ctx.cfg.steps - ctx.step)
    x = batch.y.clone()
    return Batch(x=x, y=batch.y, loss_mask=batch.loss_mask, key_pad=x == PAD, irregular=batch.irregular,
                 rows=batch.rows)


@injection("adam_setting", point="optimizer_state", params=("injection_beta2", "injection_eps"), lasts="rest")
def adam_setting(state: dict, ctx: InjectContext):
    """Optimizer setting changed from K on: AdamW runs with beta2=injection_beta2, eps=injection_eps."""
    for group in ctx.optimizer.param_groups:
        group["betas"] = (group["betas"][0], ctx.cfg.injection_beta2)
        group["eps"] = ctx.cfg.injection_eps
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="every parameter group", beta2=ctx.cfg.injection_beta2, eps=ctx.cfg.injection_eps)
    return state


# ---------------------------------------------------------------------------------------------------
# Silent bugs: nothing spikes, the run trains on, worse
# ---------------------------------------------------------------------------------------------------


def param_group(spec: str, names) -> list[str]:
    """The tensors `spec` names: one parameter name, or `@part` for every parameter whose name holds `.part.`
    or starts with `part.` (`@attn`, `@mlp`, `@blocks.1`, `@tok_emb`)."""
    if not spec.startswith("@"):
        return [spec] if spec in names else []
    part = spec[1:]
    return [n for n in names if f".{part}." in f".{n}"]


@injection("no_zero_grad", point="grads", lasts="rest")
def no_zero_grad(grads: dict, ctx: InjectContext):
    """Missing optimizer.zero_grad() after step K: from K+1 each step's gradient adds the previous step's.
    The previous gradient is the one left in .grad after its step (clipped in place), so gradients accumulate."""
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="every gradient", first_accumulating_step=ctx.step + 1)
    elif ctx.carried is not None:
        grads = {n: g + ctx.carried[n] if g is not None and n in ctx.carried else g for n, g in grads.items()}
    # references, not copies: the loop clips these tensors in place, as a real loop leaves them in .grad
    ctx.carried = {n: g for n, g in grads.items() if g is not None}
    return grads


@injection("frozen_params", point="step", params=("injection_param",), lasts="rest")
def frozen_params(step_fn: Callable, ctx: InjectContext):
    """Frozen parameters from K: injection_param (a name or a group such as @attn) is left out of the step.
    As requires_grad=False left on: no update, no weight decay, no optimizer state for it."""
    names = param_group(ctx.cfg.injection_param, ctx.params)
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched=names)

    def step_without():
        grads = {n: ctx.params[n].grad for n in names}
        for n in names:  # a parameter without a gradient is skipped by torch's optimizers
            ctx.params[n].grad = None
        step_fn()
        for n, g in grads.items():
            ctx.params[n].grad = g
    return step_without


@injection("step_noop", point="step", lasts="rest")
def step_noop(step_fn: Callable, ctx: InjectContext):
    """optimizer.step() changes no weight from K (a wrapper that steps a copy): the optimizer's state moves."""
    import torch

    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="every parameter", tensors=len(ctx.params))

    def step_on_copy():
        weights = list(ctx.params.values())
        kept = [w.detach().clone() for w in weights]
        step_fn()
        with torch.no_grad():
            torch._foreach_copy_(weights, kept)
    return step_on_copy


@injection("loss_sum", point="loss", lasts="rest")
def loss_sum(objective, ctx: InjectContext):
    """The loss summed over the batch's target tokens instead of averaged, from K.
    The gradient scales with the token count; the row's loss stays the token mean (a loop that logs its mean apart)."""
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched="the loss's reduction", reduction="sum")
    return objective * ctx.target_tokens


@injection("rank_desync", point="loss", lasts="rest")
def rank_desync(objective, ctx: InjectContext):
    """Under torchrun, from K the last rank's gradients are not all-reduced, so the ranks' weights drift apart.
    Its replica steps on its own rows' gradient, as a model wrapped in DDP on some paths only. One process: none."""
    from minitrain.core import distributed

    world = distributed.world_size()
    if ctx.step == ctx.cfg.injection_step:
        ctx.record.update(touched=f"rank {world - 1}'s gradients" if world > 1 else "nothing (one process)")
    if ctx.ddp_switch is not None:
        ctx.ddp_switch.local = distributed.rank() == world - 1
    return objective


# ---------------------------------------------------------------------------------------------------


def maybe_inject(point: str, step: int, target: Any, ctx: InjectContext | None) -> Any:
    """The hook: a no-op unless the configured injection lives at this point and is active at this step
    (step == K for the lab's three; K.. for the faults that last)."""
    if ctx is None or ctx.cfg.injection == "none":
        return target
    inj = REGISTRY[ctx.cfg.injection]
    if inj.point != point or not inj.active(ctx.cfg, step):
        return target
    ctx.step = step
    if step == ctx.cfg.injection_step:
        ctx.fired.append(step)
        ctx.record.update(injection=inj.name, point=point, step=step)
    return inj.apply(target, ctx)


def injection_settings(cfg) -> dict:
    """The injection exactly as configured (type, step and each of its parameters)."""
    if cfg.injection == "none":
        return {"injection": "none"}
    inj = REGISTRY[cfg.injection]
    out = {"injection": inj.name, "point": inj.point, "step": cfg.injection_step, "lasts": inj.lasts}
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
    if cfg.injection == "frozen_params" and param_names is not None and not param_group(cfg.injection_param,
                                                                                        param_names):
        groups = sorted({"@" + part for n in param_names for part in n.split(".")[:-1] if not part.isdigit()})
        raise UserError(f"injection_param '{cfg.injection_param}' names no parameter; give a name or a group "
                        f"({', '.join(groups)})")
    if cfg.injection in ("lr_spike", "stuck_loader", "target_leak") and cfg.injection_span < 0:
        raise UserError(f"injection_span must be >= 0 steps (0 = to the end of the run), got {cfg.injection_span}")
    if cfg.injection == "lr_spike" and not (math.isfinite(cfg.injection_mult) and cfg.injection_mult > 0):
        raise UserError(f"injection_mult must be a positive LR multiplier, got {cfg.injection_mult}")
    if cfg.injection == "corrupt_batch":
        if cfg.injection_mode not in CORRUPT_MODES:
            raise UserError(f"injection_mode must be one of {', '.join(CORRUPT_MODES)}, got {cfg.injection_mode!r}")
        if cfg.injection_rows < 0:
            raise UserError(f"injection_rows must be >= 0 (0 = every row of the batch), got {cfg.injection_rows}")
    if cfg.injection == "adam_setting":
        if not 0 <= cfg.injection_beta2 < 1:
            raise UserError(f"injection_beta2 must be in [0, 1), got {cfg.injection_beta2}")
        if not cfg.injection_eps > 0:
            raise UserError(f"injection_eps must be positive, got {cfg.injection_eps}")
    if cfg.injection == "bad_batch" and not cfg.injection_sentence.strip():
        raise UserError("injection_sentence is empty; give an English sentence, e.g. 'She has written the letter.'")


def describe() -> list[str]:
    """One line per injection (name, where, how long, what it reads), for `minitrain config`."""
    return [f"{i.name:13s} at '{i.point}', {'step K only' if i.lasts == 'step' else 'from K on' if i.lasts == 'rest' else 'injection_span steps from K'}; "
            f"reads {', '.join(('injection_step',) + i.params)}: {i.summary}" for i in REGISTRY.values()]
