"""The training loop. The whole step is `train_step` below: batch, forward, backward, clip, optimizer step,
schedule, log, with the six `maybe_inject` points (LR, batch, loss, gradients, optimizer state, the step itself)
marked INJECT.
`maybe_inject` is the lab's hook (core/injections.py): a no-op unless an injection is configured. A run
holds the hook it calls (`build_run(cfg, hook=...)`): `minitrain check` builds one with `no_hook` to show
the hook changes no byte.

`run_steps` drives the steps, writing rows and checkpoints. trainer.py wraps it with the run folder's life:
a fresh start, a resume from the last checkpoint, or a fork from an existing run's checkpoint.
"""
from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from minitrain.core import distributed, numerics
from minitrain.run import files, redact, sinks
from minitrain.run.nonfinite import non_finite_in
from minitrain.core.config import TrainConfig
from minitrain.core.data import RunData, prepare
from minitrain.core.injections import InjectContext, maybe_inject, validate_injection_config
from minitrain.core.model import GPT, PARAM_ALIASES, build_model
from minitrain.core.optimizer import EagerAdamW
from minitrain.core.remedy import RemedyContext, apply_remedy, make_context, remedy_checkpoint
from minitrain.core.telemetry import Telemetry
from minitrain.core.update_clip import clip_updates, make_param_groups


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup over `warmup_steps`, then cosine from lr_max down to lr_min at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr_max * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - 1 - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr_min + 0.5 * (cfg.lr_max - cfg.lr_min) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only (not on biases or norm gains). The fused
    kernel: one pass per tensor instead of a dozen, deterministic, and resumed runs stay byte-identical
    (tests/test_loop.py); the numbers differ from the foreach kernel's in the last bits. With `update_clip`
    every tensor has its own group, so that each can take its own LR (core/update_clip.py). torch's AdamW
    without its torch.compile wrappers (core/optimizer.py: a process skips importing torch._dynamo)."""
    groups = make_param_groups(list(model.named_parameters()), cfg.weight_decay, per_tensor=cfg.update_clip)
    return EagerAdamW(groups, lr=cfg.lr_max, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True)


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float,
                   norms: torch.Tensor | list[torch.Tensor] | None = None) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` on these gradients (one device), reusing the per-tensor norms telemetry
    has already taken (stacked, or a list): the same operations, so the same total norm and clipped gradients
    bit for bit (tests/test_loop.py), without a second pass over the gradients or torch's per-call regrouping
    by device."""
    if norms is None:
        norms = torch._foreach_norm(grads)
    total = torch.linalg.vector_norm(norms if torch.is_tensor(norms) else torch.stack(norms))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def masked_loss(logits: torch.Tensor, batch,
                target_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-mean cross-entropy over target tokens only; also the per-target losses [N] (detached, in
    `batch.target_index()` order). `logits` are the model's at the batch's targets (`at=batch.target_index()`:
    [N, V]) or at every position ([B, T, V]). `target_tokens` (default: the batch's own) divides the sum:
    under DDP, the global batch's count."""
    at = batch.target_index()
    if logits.dim() == 3:
        logits = logits.flatten(0, 1).index_select(0, at)
    per_target = F.cross_entropy(logits.float(), batch.y.flatten().index_select(0, at), reduction="none")
    count = batch.loss_mask.sum() if target_tokens is None else target_tokens
    return per_target.sum() / count, per_target.detach()


def z_loss_term(logits: torch.Tensor, coef: float, target_tokens: torch.Tensor) -> torch.Tensor:
    """The auxiliary z-loss (PaLM): coef * (log Z)^2 summed over the target positions' logits [N, V], divided by
    the target-token count (so a token mean, as the loss); it pulls log Z = logsumexp(logits) towards 0."""
    return coef * torch.logsumexp(logits.float(), dim=-1).square().sum() / target_tokens


@torch.no_grad()
def evaluate(model: GPT, batches) -> float:
    """Validation loss (token mean over the whole fixed validation subset), always with the causal mask,
    as at generation: the broken-mask break corrupts training, not the measurement."""
    model.eval()
    record, model.record_activations = model.record_activations, False
    total, tokens = torch.zeros(()), torch.zeros(())
    device = next(model.parameters()).device
    for batch in batches:
        batch = batch.to(device)  # the same batch on CPU
        _, per_target = masked_loss(model(batch.x, batch.key_pad, causal=True, at=batch.target_index(),
                                          prune_last=True), batch)
        total += per_target.sum().cpu()
        tokens += len(per_target)
    model.record_activations = record
    model.train()
    return float(total / tokens)


@dataclass
class Run:
    """Live state of one run: what the step needs, nothing more."""

    cfg: TrainConfig
    data: RunData
    model: GPT
    opt: torch.optim.AdamW
    telemetry: Telemetry
    inject: InjectContext | None
    out: Path | None = None
    metrics: files.MetricsWriter | None = None
    last_batch: object = field(default=None, repr=False)
    remedy: RemedyContext | None = None  # REMEDY (remedy.py): None unless cfg.remedy is set
    device: torch.device = torch.device("cpu")
    forward: torch.nn.Module | None = None  # what the training forward calls: DDP(model) under torchrun, else model
    non_finite: dict | None = None  # {"step", "what"} once a non-finite value stopped the run
    lock: files.RunLock | None = None  # the run folder's lock, held while this process writes it
    sinks: sinks.Sinks | None = None  # where rows go besides metrics.jsonl (cfg.log; run/sinks.py)
    maybe_inject: Callable = maybe_inject  # the injection hook train_step calls at its six INJECT points

    def __post_init__(self):
        self.params = dict(self.model.named_parameters())  # by stable name (see model.py)
        self.swap = frozenset(self.cfg.swap_steps)  # steps whose batch a counterfactual replay replaces
        # the process group is joined before the run is built and kept to its end: read once, not every step
        self.world, self.main = distributed.world_size(), distributed.is_main()
        self.backward_scale = distributed.backward_scale()


def train_step(run: Run, step: int) -> dict:
    """One step of training. Returns its metrics row (also written to metrics.jsonl by the caller).
    Under torchrun every rank runs it on its share of the same global batch (see distributed.py)."""
    cfg, model, opt = run.cfg, run.model, run.opt
    # 1. the global batch, then INJECT at the batch (B: bad_batch), then this rank's rows of it, on the device
    batch = run.data.train_batch(step, cfg.batch_size, cfg.seed)
    batch = run.maybe_inject("batch", step, batch, run.inject)
    if run.swap and step in run.swap:  # COUNTERFACTUAL (lab/explain.py): another batch of the same data order
        batch = run.data.train_batch(step + cfg.swap_offset, cfg.batch_size, cfg.seed)
    run.last_batch = batch
    local = (distributed.local_rows(batch) if run.world > 1 else batch).to(run.device)
    evaluating = step % cfg.eval_every == 0 and run.main  # DDP: rank 0 alone measures and logs
    val_loss = evaluate(model, run.data.val_batches) if evaluating else None
    # 2. schedule, forward (loss measured before this step's update), backward
    lr = run.maybe_inject("lr", step, lr_at(step, cfg), run.inject)  # INJECT at the LR (lr_spike)
    for group in opt.param_groups:
        group["lr"] = lr
    with distributed.autocast(cfg, run.device):
        # logits at the loss's targets only, [targets, V]: the Spanish prompt and the padding are not read
        logits = run.forward(local.x, local.key_pad, causal=cfg.causal_mask, at=local.target_index())
    run.telemetry.after_forward(logits)  # (logit_max while the logits are in cache)
    # this rank's share of the GLOBAL token mean: every rank holds the global batch, so its target-token
    # count needs no all-reduce
    target_tokens = batch.loss_mask.sum().to(run.device)
    loss, per_target = masked_loss(logits, local, target_tokens)
    # z_loss: the objective adds it; the logged loss stays the cross-entropy alone (comparable across runs)
    objective = loss + z_loss_term(logits, cfg.z_loss, target_tokens) if cfg.z_loss else loss
    if run.inject:  # INJECT at the loss (loss_sum)
        run.inject.target_tokens = target_tokens
        objective = run.maybe_inject("loss", step, objective, run.inject)
    for p in run.params.values():  # opt.zero_grad(set_to_none=True), without its per-call dynamo wrapper
        p.grad = None
    scale = run.backward_scale  # x world size: DDP averages gradients (1 alone: no multiply)
    (objective * scale if scale != 1 else objective).backward()
    # 3. INJECT at the gradients (A: scale; after backward, i.e. after DDP's all-reduce), then clip-and-step
    params = run.params
    run.telemetry.silent.produced([p.grad for p in params.values()])  # what backward produced (core/silent.py)
    grads = run.maybe_inject("grads", step, {n: p.grad for n, p in params.items()}, run.inject)
    for n, g in grads.items():
        params[n].grad = g
    grad_list = list(grads.values())
    norms = run.telemetry.after_backward(grad_list)  # per-tensor norms (telemetry's g) stacked, or None
    present = [g for g in grad_list if g is not None]
    grad_norm = clip_grad_norm(present, cfg.grad_clip or math.inf, norms)  # grad_clip 0: no clipping
    take_step = apply_remedy(step, grad_norm, run.remedy)  # REMEDY (remedy.py): no-op unless cfg.remedy set
    # 4. INJECT at the optimizer state (C: v_corrupt), then the optimizer step
    if run.inject:  # (the view of the moments is only built when an injection is configured)
        run.maybe_inject("optimizer_state", step, optimizer_moments(model, opt), run.inject)
    if take_step and cfg.update_clip:  # StableAdamW: each tensor's LR / max(1, RMS(g^2 / v_hat))
        clip_updates(opt, lr)
    run.telemetry.before_step(take_step)
    if take_step:  # False only when a remedy skips this batch
        # INJECT at the step itself (frozen_params, step_noop)
        (run.maybe_inject("step", step, opt.step, run.inject) if run.inject else opt.step)()
    run.telemetry.after_step(lr if take_step else 0.0, keep=True)  # (the next step sets .grad to None first)
    # 5. log (global numbers: summed over ranks)
    return metrics_row(run, step, lr, loss, per_target, local, logits, grad_norm, val_loss)


def metrics_row(run: Run, step, lr, loss, per_target, batch, logits, grad_norm, val_loss) -> dict:
    cfg = run.cfg
    # regular and irregular rows' loss sums in one product, summed over ranks with the loss share (as they
    # are on one process); their target counts are the global batch's, known on the host
    split = batch.target_kinds() @ per_target
    if run.world > 1:
        sums = distributed.all_reduce(torch.cat([loss.detach().reshape(1), split]), "sum")
        loss, split = sums[0], sums[1:]
    reg_n, irr_n = run.last_batch.kind_counts()
    # the telemetry's fields, and the loss, norm and sums on the host: one transfer for the whole row
    measured, host = run.telemetry.measure(step, run.last_batch, logits, loss, grad_norm, extra=split)
    loss_f, gn, reg_loss, irr_loss = host
    clipped_norm = min(gn, cfg.grad_clip) if math.isfinite(gn) and cfg.grad_clip > 0 else gn
    fired = run.inject is not None and step == cfg.injection_step and cfg.injection != "none"
    row = {
        "step": step,
        "loss": finite_or_none(loss_f),
        "lr": lr,
        "grad_norm": finite_or_none(gn),
        "grad_norm_clipped": finite_or_none(clipped_norm),
        "clipped": bool(math.isfinite(gn) and 0 < cfg.grad_clip < gn),
        "loss_regular": finite_or_none(reg_loss / reg_n) if reg_n else None,
        "loss_irregular": finite_or_none(irr_loss / irr_n) if irr_n else None,
        "val_loss": finite_or_none(val_loss) if val_loss is not None else None,
        "injected": cfg.injection if fired else None,
    }
    row.update(measured)  # composition: of the global batch
    return redact.withhold_row(row) if cfg.blind else row  # BLIND (run/redact.py): no injection fields


def finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def optimizer_moments(model: GPT, opt: torch.optim.Optimizer) -> dict:
    """Views of Adam's moments by parameter name (the optimizer_state injection point's target)."""
    m, v = {}, {}
    for name, p in model.named_parameters():
        st = opt.state.get(p)
        if st:
            m[name], v[name] = st["exp_avg"], st["exp_avg_sq"]
    return {"m": m, "v": v}


def no_hook(point: str, step: int, target, ctx):
    """A hook that leaves every target untouched: `minitrain check` trains with it and with maybe_inject, and
    with injection none their metrics bytes must be the same."""
    return target


# ---------------------------------------------------------------------------------------------------
# Building a run and driving its steps
# ---------------------------------------------------------------------------------------------------


def build_run(cfg: TrainConfig, out: Path | None = None, hook: Callable | None = None) -> Run:
    """A run's live state for `cfg`, checked before anything is written; `hook`: what train_step calls at its
    INJECT points (default: maybe_inject)."""
    numerics.apply(cfg.numerics, cfg.threads)  # before torch's first kernel of the run
    torch.manual_seed(cfg.seed)
    device = distributed.resolve_device(cfg)
    distributed.setup(device)  # joins torchrun's process group when WORLD_SIZE > 1; else nothing
    distributed.check_batch_size(cfg.batch_size)
    data = prepare(cfg)
    # initialised on the CPU with a CPU generator, then moved: the same weights on every device
    model = build_model(cfg, torch.Generator().manual_seed(cfg.seed)).to(device)
    if cfg.injection_param in PARAM_ALIASES:  # lm_head.weight is tok_emb.weight (tied)
        cfg = cfg.replace(injection_param=PARAM_ALIASES[cfg.injection_param])
    validate_injection_config(cfg, [n for n, _ in model.named_parameters()])
    sinks.check_installed(sinks.parse_log(cfg.log))  # a missing tensorboard / mlflow fails before any write
    opt = make_optimizer(model, cfg)
    ctx = None
    if cfg.injection != "none":
        ctx = InjectContext(
            cfg=cfg, step=cfg.injection_step,
            make_rows_batch=lambda s, k: data.sentence_batch(s, k, cfg.context),
            train_batch=lambda k: data.train_batch(k, cfg.batch_size, cfg.seed), optimizer=opt,
            param_shapes={n: list(p.shape) for n, p in model.named_parameters()},
            params=dict(model.named_parameters()),
        )
        if cfg.injection == "bad_batch":  # fail now, not at step K, if the sentence cannot be used
            data.sentence_batch(cfg.injection_sentence, cfg.batch_size, cfg.context)
    forward = distributed.wrap_model(model, device)
    if ctx and cfg.injection == "rank_desync" and forward is not model:
        ctx.ddp_switch = distributed.keep_local_gradients(forward)
    return Run(cfg, data, model, opt, Telemetry(model, opt, cfg, data.rare_mask), ctx, out,
               remedy=make_context(cfg, model, opt), device=device, forward=forward,
               maybe_inject=hook or maybe_inject)


def checkpoint_meta(run: Run, step: int) -> dict:
    meta = {
        "config_hash": run.cfg.hash(),
        "trunk_hash": run.cfg.trunk_hash(),
        "metrics_bytes": run.metrics.tell() if run.metrics else 0,
        "metrics_sha256": run.metrics.digest() if run.metrics else None,
        "scheduler": {"kind": "warmup+cosine", "next_step": step, "lr_next": lr_at(min(step, run.cfg.steps - 1), run.cfg)},
        "data_iterator": {"kind": "epoch permutations of (seed, epoch)", "next_step": step,
                          "position": step * run.cfg.batch_size, "train_rows": len(run.data.train)},
        "rng": {"torch_cpu_state_sha256": _rng_digest()},
        "injection_fired": bool(run.inject and run.inject.record),
        "telemetry": run.telemetry.state(),  # the detail schedule's running means: a resume continues them
    }
    if run.remedy:  # REMEDY: its scalar memory (ZClip's EMA) and what it did, so a resume continues it exactly
        meta["remedy"] = remedy_checkpoint(run.remedy)
    return redact.withhold_checkpoint_meta(meta) if run.cfg.blind else meta  # BLIND (run/redact.py)


def _rng_digest() -> str:
    return hashlib.sha256(bytes(torch.get_rng_state().tolist())).hexdigest()[:16]


def run_steps(run: Run, start: int, on_row=None, stop_at: int | None = None) -> str:
    """Drive steps [start, stop_at or cfg.steps). Writes rows and checkpoints when `run.out` is set.
    Returns the status: 'finished', 'stopped' (stop_at reached) or 'non_finite' (run.non_finite says where)."""
    cfg = run.cfg
    end = cfg.steps if stop_at is None else stop_at
    bar = _progress(cfg, start, end, run.out)
    try:
        for step in range(start, end):
            row = train_step(run, step)
            if run.metrics:
                run.metrics.write(row)
                if row.get("val_loss") is not None:  # a live view shows each validation point at once
                    run.metrics.flush()
            if run.sinks:
                run.sinks.write(row)
            if on_row:
                on_row(row)
            if bar:
                bar.update(1)
                if row["loss"] is not None and step % 20 == 0:
                    bar.set_postfix(loss=f"{row['loss']:.3f}", refresh=False)
            done = step + 1
            at_checkpoint = run.out and (done % cfg.ckpt_every == 0 or done == cfg.steps)
            what = non_finite_in(row) or (non_finite_weights(run.model) if at_checkpoint else None)
            if what:  # stop here: this step's row is kept, no checkpoint of a broken state is written
                run.non_finite = {"step": step, "what": what}
                return "non_finite"
            if at_checkpoint:
                files.save_checkpoint(run.out, done, run.model, run.opt, checkpoint_meta(run, done))
                files.prune_checkpoints(run.out, cfg)
        return "finished" if end == cfg.steps else "stopped"
    finally:
        if bar:
            bar.close()


# A run's rows reach metrics.jsonl in blocks at least this far apart (and before every checkpoint, at every
# validation and at the end: files.MetricsWriter); a live view (`minitrain serve`) lags by at most this much
METRICS_FLUSH_SECONDS = 0.5


def open_metrics(path: Path) -> files.MetricsWriter:
    return files.MetricsWriter(path, flush_every=METRICS_FLUSH_SECONDS)


def non_finite_weights(model: GPT) -> str | None:
    """The first weight tensor holding a non-finite value (checked before each checkpoint is written)."""
    with torch.no_grad():
        names = [n for n, _ in model.named_parameters()]
        finite = torch.stack([torch.isfinite(p).all() for p in model.parameters()]).tolist()
    bad = [n for n, ok in zip(names, finite) if not ok]
    return f"weights of {bad[0]}" if bad else None


def _progress(cfg: TrainConfig, start: int, end: int, out: Path | None):
    if not cfg.progress or not sys.stderr.isatty() or end <= start or not distributed.is_main():
        return None
    from tqdm import tqdm

    return tqdm(total=end - start, initial=0, desc=out.name if out else "train", unit="step",
                file=sys.stderr, leave=False, dynamic_ncols=True)
