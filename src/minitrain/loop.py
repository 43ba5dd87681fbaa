"""The training loop. The whole step is `train_step` below: batch, forward, backward, clip, optimizer step,
schedule, log, with the four `maybe_inject` points (LR, batch, gradients, optimizer state) marked INJECT.

`train()` wraps it with what a run needs around the step: a fresh start, a resume from the last checkpoint,
or a fork from an existing run's checkpoint (an injection run shares steps 0..K-1 with its baseline).
"""
from __future__ import annotations

import functools
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from minitrain.core import distributed, numerics
from minitrain.run import files, reader, redact, sinks
from minitrain.run.nonfinite import non_finite_in
from minitrain.core.config import TrainConfig
from minitrain.core.data import RunData, prepare
from minitrain.core.injections import InjectContext, maybe_inject, validate_injection_config
from minitrain.core.model import GPT, PARAM_ALIASES, build_model
from minitrain.core.optimizer import EagerAdamW
from minitrain.core.remedy import (RemedyContext, apply_remedy, make_context, remedy_checkpoint, remedy_record,
                                remedy_restore)
from minitrain.core.telemetry import Telemetry
from minitrain.core.tokenizer import tokenizer_json
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
    batch = maybe_inject("batch", step, batch, run.inject)
    if run.swap and step in run.swap:  # COUNTERFACTUAL (lab/explain.py): another batch of the same data order
        batch = run.data.train_batch(step + cfg.swap_offset, cfg.batch_size, cfg.seed)
    run.last_batch = batch
    local = (distributed.local_rows(batch) if run.world > 1 else batch).to(run.device)
    evaluating = step % cfg.eval_every == 0 and run.main  # DDP: rank 0 alone measures and logs
    val_loss = evaluate(model, run.data.val_batches) if evaluating else None
    # 2. schedule, forward (loss measured before this step's update), backward
    lr = maybe_inject("lr", step, lr_at(step, cfg), run.inject)  # INJECT at the LR (lr_spike)
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
    for p in run.params.values():  # opt.zero_grad(set_to_none=True), without its per-call dynamo wrapper
        p.grad = None
    scale = run.backward_scale  # x world size: DDP averages gradients (1 alone: no multiply)
    (objective * scale if scale != 1 else objective).backward()
    # 3. INJECT at the gradients (A: scale; after backward, i.e. after DDP's all-reduce), then clip-and-step
    params = run.params
    grads = maybe_inject("grads", step, {n: p.grad for n, p in params.items()}, run.inject)
    for n, g in grads.items():
        params[n].grad = g
    grad_list = list(grads.values())
    norms = run.telemetry.after_backward(grad_list)  # per-tensor norms (telemetry's g) stacked, or None
    present = [g for g in grad_list if g is not None]
    grad_norm = clip_grad_norm(present, cfg.grad_clip or math.inf, norms)  # grad_clip 0: no clipping
    take_step = apply_remedy(step, grad_norm, run.remedy)  # REMEDY (remedy.py): no-op unless cfg.remedy set
    # 4. INJECT at the optimizer state (C: v_corrupt), then the optimizer step
    if run.inject:  # (the view of the moments is only built when an injection is configured)
        maybe_inject("optimizer_state", step, optimizer_moments(model, opt), run.inject)
    if take_step and cfg.update_clip:  # StableAdamW: each tensor's LR / max(1, RMS(g^2 / v_hat))
        clip_updates(opt, lr)
    run.telemetry.before_step(take_step)
    if take_step:  # False only when a remedy skips this batch
        opt.step()
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
    """What train_step calls in place of maybe_inject inside `hook_bypassed()`: every target untouched."""
    return target


@contextmanager
def hook_bypassed():
    """Train with the injection hook taken out: train_step's INJECT points call `no_hook` instead of
    maybe_inject. `minitrain check` compares a short run with and without the hook; with injection none
    their metrics bytes must be the same."""
    global maybe_inject
    hook, maybe_inject = maybe_inject, no_hook
    try:
        yield
    finally:
        maybe_inject = hook


# ---------------------------------------------------------------------------------------------------
# Building a run and driving the steps
# ---------------------------------------------------------------------------------------------------


def build_run(cfg: TrainConfig, out: Path | None = None) -> Run:
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
        )
        if cfg.injection == "bad_batch":  # fail now, not at step K, if the sentence cannot be used
            data.sentence_batch(cfg.injection_sentence, cfg.batch_size, cfg.context)
    return Run(cfg, data, model, opt, Telemetry(model, opt, cfg, data.rare_mask), ctx, out,
               remedy=make_context(cfg, model, opt), device=device,
               forward=distributed.wrap_model(model, device))


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
    import hashlib

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


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---------------------------------------------------------------------------------------------------
# A run on disk: fresh, resumed or forked
# ---------------------------------------------------------------------------------------------------


def environment(device: torch.device | None = None) -> dict:
    fixed = process_environment()
    return {
        "versions": dict(fixed["versions"]),
        "hardware": {**fixed["hardware"], "torch_threads": torch.get_num_threads(),
                     "device": str(device or "cpu"), "world_size": distributed.world_size(),
                     **({"gpu": torch.cuda.get_device_name(device)} if device and device.type == "cuda" else {})},
        "numerics": numerics.fingerprint(),  # what the bytes depend on besides the config (core/numerics.py)
        "git_sha": fixed["git_sha"],
    }


@functools.cache
def process_environment() -> dict:
    """What stays fixed for the process, read once and before any run lock is taken: the git sha and the
    platform (`uname -p`) come from subprocesses, and a subprocess shares the lock's descriptor until it
    execs (files.RunLock)."""
    import platform

    import safetensors
    import tokenizers

    from minitrain import __version__

    return {
        "versions": {"minitrain": __version__, "python": platform.python_version(), "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__},
        "hardware": {"platform": platform.platform(), "machine": platform.machine(),
                     "cpu_count": __import__("os").cpu_count()},
        "git_sha": _git_sha(),
    }


def _git_sha() -> str | None:
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def write_manifest(run: Run, status: str, extra: dict) -> None:
    from minitrain import SCHEMA_VERSION
    from minitrain.core.injections import injection_settings

    path = run.out / "manifest.json"
    old = reader.read_json(path, "manifest") if path.exists() else {}
    manifest = {
        **old,
        "schema_version": SCHEMA_VERSION,
        "name": run.out.name,
        "seed": run.cfg.seed,
        "config": run.cfg.to_dict(),
        "config_hash": run.cfg.hash(),
        "trunk_hash": run.cfg.trunk_hash(),
        "data_manifest": run.data.manifest,
        "data_manifest_hash": run.data.manifest["hash"],
        "ngram_baseline": run.data.ngram,
        "injection": {**injection_settings(run.cfg), **({"record": run.inject.record} if run.inject and run.inject.record else {})},
        "status": status,
        **extra,
    }
    if run.remedy:  # REMEDY (remedy.py): what the remedy did
        manifest["remedy"] = remedy_record(run.remedy)
    if run.cfg.blind:  # BLIND (run/redact.py): withhold the injection / break settings until the reveal
        manifest = redact.withhold_manifest(manifest, run.cfg)
    manifest.setdefault("started", now_iso())
    files.atomic_write_json(path, manifest)


def find_donor(cfg: TrainConfig, out: Path) -> tuple[Path, int] | None:
    """An existing run beside `out` whose config differs only in injection settings and that holds a
    checkpoint at or before K (its rows before K are then ours too). Prefer the latest such checkpoint."""
    if cfg.injection == "none":
        return None
    best: tuple[Path, int] | None = None
    for manifest_path in sorted(Path(out).parent.glob(f"*/{reader.MANIFEST}")):
        donor = manifest_path.parent
        if donor.resolve() == Path(out).resolve():
            continue
        m = reader.manifest_of(donor)  # {} when unreadable: no trunk hash, not a donor
        if m.get("trunk_hash") != cfg.trunk_hash():
            continue
        donor_k = m.get("config", {}).get("injection_step", 0) if m.get("config", {}).get("injection", "none") != "none" else None
        for step in reversed(files.list_checkpoints(donor)):
            # a donor's checkpoint is ours if it predates both our K and the donor's own injection
            if step <= cfg.injection_step and (donor_k is None or step <= donor_k):
                if best is None or step > best[1]:
                    best = (donor, step)
                break
    return best


def train(cfg: TrainConfig, out: Path, force: bool = False, fork: bool = True,
          donor: tuple[Path, int] | None = None, stop_at: int | None = None) -> dict:
    """Train a run into `out` from scratch, or forked from a sibling run's checkpoint when one fits
    (or from `donor` = (run folder, checkpoint step) when given: remediation forks from the faulty run).
    `stop_at`: end at that step with status 'stopped' (the schedule still spans cfg.steps; `minitrain explore`
    runs the lab's schedule only as far as it measures; `resume` would finish such a run)."""
    out = Path(out)
    run = build_run(cfg, out)  # validates everything before the folder is touched
    found = find_donor(cfg, out) if fork and not donor else None  # before the folder is touched: ranks agree
    donor = donor or found
    start, forked = 0, dict(NOT_FORKED)
    if donor:  # load and verify the donor's checkpoint and rows before the folder is touched
        donor_dir, step = donor
        weights, opt_t, meta, prefix = load_donor(cfg, donor_dir, step, same_trunk=found is not None)
        files.restore(run.model, run.opt, weights, opt_t, files.checkpoint_dir(donor_dir, step))
        run.telemetry.restore(meta.get("telemetry"))
        start, forked = step, fork_record(donor_dir, step, meta)
        forked.update(numerics_change(_manifest_of(donor_dir), f"the donor {Path(donor_dir).name}", []))
    process_environment()  # its subprocesses run before the lock is taken
    claimed: dict = {}
    distributed.on_main(lambda: claimed.update(lock=files.claim_run_dir(out, force)))  # DDP: rank 0 writes
    run.lock = claimed.get("lock")
    if not distributed.is_main():
        run.out = None
    try:
        if run.out:
            files.write_config_yaml(out / "config.yaml", redact.public_config(cfg))  # BLIND: withheld fields
            write_tokenizer(run)
            if donor:
                files.atomic_write_bytes(out / "metrics.jsonl", prefix)
            run.metrics = open_metrics(out / "metrics.jsonl")
            write_manifest(run, "running", {**environment(run.device), **forked, "started": now_iso()})
        return _drive(run, start, forked, stop_at)
    except OSError as e:
        raise _disk_error(e, out) from None
    finally:
        if run.lock:
            run.lock.release()


def write_tokenizer(run: Run) -> None:
    """RUN/tokenizer.json, atomically (a full disk leaves the old file or none, never half of one)."""
    files.atomic_write_bytes(run.out / reader.TOKENIZER, tokenizer_json(run.data.tokenizer))


NOT_FORKED = {"forked_from": None, "forked_from_checksums": None}


def fork_record(donor_dir: Path, step: int, meta: dict) -> dict:
    """The manifest's fields of a fork: `forked_from` (the donor run and checkpoint) and
    `forked_from_checksums`, what identifies that checkpoint's contents (its files' sha256, the sha256 of the
    rows before it, its trunk hash). A resume that forks again checks the donor still holds exactly this
    (check_donor_unchanged)."""
    return {"forked_from": {"run": Path(donor_dir).name, "checkpoint_step": step},
            "forked_from_checksums": {"sha256": meta.get("sha256"), "metrics_sha256": meta.get("metrics_sha256"),
                                      "trunk_hash": meta.get("trunk_hash")}}


def check_donor_unchanged(out: Path, recorded: dict, meta: dict, path: Path) -> None:
    """A fork killed before its first own checkpoint is resumed by forking again: its donor checkpoint
    must be the one it forked from, or the resumed rows would come from another run than its config says.
    Refused in one line when the donor was re-made or edited since (or records no checksums to compare)."""
    def identity(rec: dict) -> dict:  # a checkpoint manifest and the record share these keys
        sums = rec.get("sha256") or {}
        return {"model.safetensors": sums.get("model.safetensors"), "rows before it": rec.get("metrics_sha256"),
                "optimizer.safetensors": sums.get("optimizer.safetensors"), "trunk hash": rec.get("trunk_hash")}

    now, then = identity(meta), identity(recorded)
    remake = f"re-make it with 'minitrain train --out {out} --config {out / reader.CONFIG} --force'"
    if any(v is None for v in then.values()):
        raise files.UserError(f"cannot resume {out}: its manifest records no checksums of its donor checkpoint "
                              f"{path}, so the donor cannot be checked; {remake}")
    changed = [what for what in now if then[what] != now[what]]
    if changed:
        raise files.UserError(
            f"cannot resume {out}: its donor checkpoint {path} changed since this run forked from it "
            f"({', '.join(changed)} differ{'s' if len(changed) == 1 else ''}: the donor was re-made or edited), "
            f"so its rows would come from another run; {remake}")


def load_donor(cfg: TrainConfig, donor_dir: Path, step: int,
               same_trunk: bool = True) -> tuple[dict, dict, dict, bytes]:
    """A fork's donor checkpoint, verified: its files match their sha256, the donor's metrics hold steps
    0..step-1 unchanged, and (`same_trunk`: an automatic fork) it was made with our config but the injection.
    (`remediate` names its donor itself: its config differs by the remedy, inactive before the remedy step.)
    Returns weights, optimizer tensors, checkpoint manifest and the rows to copy; a mismatch is one line."""
    path = files.checkpoint_dir(donor_dir, step)
    weights, opt_t, meta = files.load_checkpoint(path)
    if same_trunk and meta.get("trunk_hash") != cfg.trunk_hash():
        raise files.UserError(f"checkpoint {path} was made with another config than this run's (trunk hash "
                                 f"{meta.get('trunk_hash')} != {cfg.trunk_hash()}); fork from another run or pass --no-fork")
    metrics = Path(donor_dir) / "metrics.jsonl"
    try:
        rows = files.verify_metrics_prefix(metrics, meta, path)
    except files.UserError as e:
        raise files.UserError(f"cannot fork from {donor_dir}: {e}; or pass --no-fork") from None
    return weights, opt_t, meta, rows


def _manifest_of(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    return reader.read_json(path, "manifest") if path.exists() else {}


def numerics_change(source: dict, what: str, mixed: list) -> dict:
    """A fork or resume continues steps another process computed: when that process's platform fingerprint
    (core/numerics.py) differs from this one's, say so in one line and record it in the manifest
    (`numerics_mixed`): the continued run's bytes cannot match a run made from scratch on either platform."""
    theirs, mine = source.get("numerics"), numerics.fingerprint()
    if numerics.same(theirs, mine):
        return {"numerics_mixed": mixed} if mixed else {}
    if distributed.is_main():
        print(f"minitrain: {what} ran on {numerics.key(theirs)}, this process on {numerics.key(mine)}: this run's "
              "bytes will match a run from scratch on neither (recorded as numerics_mixed in manifest.json)",
              file=sys.stderr)
    return {"numerics_mixed": [*mixed, {"source": what, "numerics": theirs}]}


def _disk_error(e: OSError, out: Path) -> files.UserError:
    """A write failed mid-run (a full disk, usually): one line, and the folder stays resumable."""
    if (Path(out) / "config.yaml").exists():
        return files.disk_error(e, fix=f"resume it with 'minitrain train --resume {out}' (the run folder is kept)")
    return files.disk_error(e)


def resume(out: Path, device: str | None = None, stop_at: int | None = None) -> dict:
    """Continue a stopped (or SIGKILLed) run from its last checkpoint; rows after it are dropped and redone,
    so the finished metrics file is byte-identical to an uninterrupted run, wherever it was killed (before
    its first checkpoint, between checkpoints, after its last one). `device` (cpu | cuda | auto) continues
    it elsewhere; checkpoints are CPU tensors, and under torchrun any number of processes works. `stop_at`: as
    in train (a retried `minitrain explore` run ends where it was meant to)."""
    out = Path(out)
    if not (out / "config.yaml").exists():
        raise files.UserError(f"{out} is not a run folder (no config.yaml); train it first with --out {out}"
                                 + (" --force" if files.is_minitrain_run(out) else ""))
    process_environment()  # its subprocesses run before the lock is taken
    claimed: dict = {}
    distributed.on_main(lambda: claimed.update(lock=files.lock_run(out)))  # refused while another process writes
    lock = claimed.get("lock")
    try:
        return _resume_locked(out, device, lock, stop_at)
    except OSError as e:
        raise _disk_error(e, out) from None
    finally:
        if lock:
            lock.release()


def _resume_locked(out: Path, device: str | None, lock, stop_at: int | None = None) -> dict:
    from minitrain.core.config import build_config

    manifest = reader.read_json(out / "manifest.json", "manifest") if (out / "manifest.json").exists() else {}
    if manifest.get("status") == "non_finite":
        nf = manifest.get("non_finite") or {}
        raise files.UserError(
            f"{out} stopped at step {nf.get('step', '?')} on a non-finite {nf.get('what', 'value')}; a resume would "
            "only repeat it, so it will not continue: change the config and start over with --force")
    if manifest.get("status") == "finished":
        raise files.UserError(f"{out} already ended (finished); nothing to resume")
    cfg = build_config(reader.read_config(out), [f"device={device}"] if device else [])
    if cfg.blind:  # BLIND: its config.yaml lacks the withheld fields, so it cannot be rebuilt from it
        raise files.UserError(f"{out} is a blind run and cannot be resumed; re-make it with --force")
    run = build_run(cfg, out)
    run.lock = lock
    if distributed.is_main():
        files.refuse_links(out)  # a resume truncates metrics.jsonl and prunes checkpoints/: never through a link
        files.clean_temporaries(out)  # a killed writer's temp checkpoint folder and temp files
    steps = files.list_checkpoints(out)
    metrics_path = out / "metrics.jsonl"
    start, metrics_bytes, path, meta = 0, 0, None, None
    if steps:
        path = files.checkpoint_dir(out, steps[-1])
        weights, opt_t, meta = files.load_checkpoint(path)
        if meta.get("config_hash") != cfg.hash():
            raise files.UserError(f"checkpoint {path} was made with another config; restore config.yaml "
                                     "or start over with --force")
        files.verify_metrics_prefix(metrics_path, meta, path)
    else:  # killed before its first own checkpoint: fork from the same donor again (else from step 0: same bytes)
        donor, same_trunk, forked = None, False, dict(NOT_FORKED)
        recorded = manifest.get("forked_from") or {}
        if recorded.get("run"):  # the same donor again, checked against the checksums recorded at the fork
            donor = recorded_donor(out, recorded)
        elif not manifest:  # killed before its manifest said whether it forked: the donor train() would pick
            donor, same_trunk = find_donor(cfg, out), True
        if donor and files.checkpoint_dir(*donor).exists():
            path = files.checkpoint_dir(*donor)
            weights, opt_t, meta, donor_rows = load_donor(cfg, donor[0], donor[1], same_trunk=same_trunk)
            if recorded.get("run"):
                check_donor_unchanged(out, manifest.get("forked_from_checksums") or {}, meta, path)
            forked = fork_record(donor[0], donor[1], meta)
    if meta is not None:
        files.restore(run.model, run.opt, weights, opt_t, path)
        run.telemetry.restore(meta.get("telemetry"))
        start, metrics_bytes = int(meta["step"]), int(meta["metrics_bytes"])
        if run.remedy and "remedy" in meta:
            remedy_restore(run.remedy, meta["remedy"])
    if cfg.injection != "none" and start > cfg.injection_step:
        _replay_injection_record(run, manifest)
    if not distributed.is_main():  # DDP: rank 0 alone writes (checkpoints hold no rank: any world size resumes)
        run.out = None
        return _drive(run, start, {}, stop_at)
    write_tokenizer(run)  # the file a kill (or a full disk) may have left out: the same bytes as at the start
    if steps:
        files.truncate_metrics(metrics_path, metrics_bytes)
    else:  # the donor's rows (verified), or none: whatever the killed run had copied is replaced
        files.atomic_write_bytes(metrics_path, donor_rows if meta is not None else b"")
    run.metrics = open_metrics(metrics_path)
    extra = {"distributed": None} if "distributed" in manifest else {}  # a DDP run resumed on one process
    if not steps:
        extra.update(forked)
    if not manifest:  # killed before its manifest was first written
        extra["started"] = now_iso()
    if manifest:  # the steps so far were computed by the process that wrote this manifest
        extra.update(numerics_change(manifest, "the steps before this resume", manifest.get("numerics_mixed") or []))
    write_manifest(run, "running", {"resumed_from_step": start, **environment(run.device), **extra})
    return _drive(run, start, {"resumed_from_step": start}, stop_at, last=files.last_row(metrics_path, metrics_bytes))


def recorded_donor(out: Path, recorded: dict) -> tuple[Path, int]:
    """The donor folder (a sibling of OUT) and checkpoint step a fork's manifest records; a value minitrain
    never writes (a path, a step that is no count) is refused in one line rather than read or followed."""
    name, step = recorded.get("run"), recorded.get("checkpoint_step")
    if not isinstance(name, str) or name in (".", "..") or Path(name).name != name or \
            not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise files.UserError(f"{out / 'manifest.json'} records a damaged fork origin (forked_from = "
                              f"{str(recorded)[:80]}); restore the manifest, or start the run over with --force")
    return out.parent / name, step


def _replay_injection_record(run: Run, manifest: dict) -> None:
    rec = manifest.get("injection", {}).get("record")
    if rec and run.inject is not None:
        run.inject.record.update(rec)


def _drive(run: Run, start: int, extra: dict, stop_at: int | None = None, last: dict | None = None) -> dict:
    """Run the steps, then write results.json, the final manifest and the dashboard. `last` is the row
    before `start` (a resume after the last checkpoint runs no step, yet its results name the last row)."""
    t0 = time.perf_counter()
    last = dict(last or {})
    recorded = bool(run.inject and run.inject.record)

    def on_row(row):
        nonlocal recorded
        last.update(row)
        if run.inject and run.inject.record and not recorded:  # the injection fired: record it at once
            if run.out:
                write_manifest(run, "running", {})
            recorded = True

    try:
        if run.out:  # mirrors of metrics.jsonl, rebuilt from the rows it holds already (run/sinks.py)
            run.sinks = sinks.open_sinks(run.cfg.log, run.out, redact.public_config(run.cfg))
        status = run_steps(run, start, on_row, stop_at)
    finally:
        if run.metrics:
            run.metrics.close()
        if run.sinks:
            run.sinks.close()
    seconds = time.perf_counter() - t0
    if distributed.world_size() > 1:  # every rank takes part; rank 0 records it
        extra = {**extra, "distributed": _check_ranks(run)}
    if run.out is None:  # DDP: ranks other than 0 write nothing
        return {"status": status}
    results = final_results(run, status, last)
    results["seconds_this_session"] = round(seconds, 3)
    files.atomic_write_json(run.out / "results.json", results)
    # before the manifest says it ended (a kill in between resumes from the last checkpoint); a 'stopped'
    # run (stop_at) may be resumed, so it keeps its last few
    files.prune_checkpoints(run.out, run.cfg, ended=status != "stopped")
    if run.non_finite:
        extra = {**extra, "non_finite": run.non_finite}
    write_manifest(run, status, {"ended": now_iso(), **extra})
    return results


def _check_ranks(run: Run) -> dict:
    """DDP: at the end of a session, did every rank fire the injection at the same steps, and do all ranks
    still hold bit-identical weights? (A collective: every rank calls it.)"""
    fired = distributed.gather(run.inject.fired if run.inject else [])
    if any(fired):
        run.inject.record["fired_steps_by_rank"] = fired
    return {"world_size": distributed.world_size(), "backend": torch.distributed.get_backend(),
            "replicas_agree": distributed.replicas_agree(run.model)}


def final_results(run: Run, status: str, last: dict) -> dict:
    ngram = run.data.ngram
    val = evaluate(run.model, run.data.val_batches) if status == "finished" else None
    res = {
        "status": status,
        "steps_done": (last.get("step", -1) + 1) if last else None,
        "final_train_loss": last.get("loss"),
        "final_val_loss": val if val is not None and math.isfinite(val) else None,
        "final_val_ppl": math.exp(val) if val is not None and math.isfinite(val) and val < 50 else None,
        "ngram_val_loss": ngram["val_loss"],
        "ngram_val_ppl": ngram["val_ppl"],
    }
    if res["final_val_loss"] is not None:
        res["val_loss_margin_vs_ngram"] = ngram["val_loss"] - res["final_val_loss"]
    if status == "non_finite":
        what = (run.non_finite or {}).get("what", "value")
        res["stopped_at_step"] = last.get("step")
        res["non_finite"] = run.non_finite
        res["note"] = f"a non-finite {what} stopped the run at this step; rows up to and including it are kept"
    return res
