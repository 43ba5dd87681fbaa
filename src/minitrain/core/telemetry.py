"""Per-step signals beyond the loss: what makes each injection visible from the metrics alone.

Every signal is computed from tensors the step already has, one `_foreach` pass over all parameter tensors
per statistic, and brought to the host in one transfer (`.tolist()` on one stacked vector). A new per-step
signal is one entry in `STEP_SIGNALS`; a new per-tensor statistic is one entry in `PARAM_STATS`.

The schedule (full telemetry). Every step measures the global signals and, per tensor, the two statistics
every lab signature is read from: `g` (a gradient scale moves every tensor's g at once; a bad batch a few)
and `vm` (an optimizer-state corruption moves one tensor's vm). The rest of the per-tensor statistics
(`DETAIL`: u, ur, vx, vn, r) are measured on *detail steps*:
  - every `DETAIL_EVERY` steps (the cadence: the healthy level of every statistic);
  - on any step whose cheap signals trip a trigger, and the `DETAIL_AFTER` steps that follow it:
      a non-finite loss or gradient;
      the pre-clip norm above `TRIGGER_GRAD_RATIO` x its running mean (EMA, decay `EMA_DECAY`), or below
      1 / TRIGGER_GRAD_RATIO of it;
      the loss above its running mean by more than `TRIGGER_LOSS_NATS`;
      a batch that repeats a row (`dup_rows` > 0: an epoch's permutation never does);
      Adam's second-moment recurrence broken on any tensor: AdamW updates v = b2 v + (1 - b2) gc^2, so
      mean(v_t) = b2 mean(v_{t-1}) + (1 - b2) |gc_t|^2 / numel holds on every healthy step (to float
      rounding, < 1e-5 here); anything that changes v outside the step (a corruption, a restore, a
      skipped update) breaks it by more than `TRIGGER_V_RESIDUAL`.
The trigger is decided after the step from values already on the host, so the anomalous step itself gets
its detail (the weight copy that `u` needs is taken before every step). The state of the schedule (running
means, the end of the current response) travels in checkpoints: resumed and forked runs write the same
bytes. tests/test_telemetry.py checks that every lab injection's step K is a detail step.

Row fields written by `Telemetry.row` (see docs/metrics.md for the full schema):
  act            mean |activation| of each block's output            (list, one per layer)
  logit_max      largest |logit| in the batch
  nonfinite      non-finite values in the loss and gradients
  batch          composition: rows, distinct tokens, top-token share, rare-token share, duplicated rows
  params         per parameter tensor (full telemetry only); every step:
                 g   gradient norm before clipping (after any injection)
                 vm  mean of Adam's exp_avg_sq (after the step)
                 and on detail steps only:
                 u   update norm |p_new - p_old|        ur  update-to-weight ratio u / |p_old|
                 vx  max of exp_avg_sq                   vn  norm of exp_avg_sq
                 r   RMS(g / (sqrt(v_hat) + eps)): StableAdamW's statistic (g clipped, v bias-corrected,
                     after the step; denominator as in Adam)
  sigma          largest singular value of each matrix, every `spectral_every` steps (full telemetry only)
"""
from __future__ import annotations

import functools
import math

import torch

from minitrain.core import distributed
from minitrain.core.tokenizer import PAD

SIG = 5  # significant digits kept for telemetry floats (loss, lr and norms keep full precision)


def rnd(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return float(f"{x:.{SIG}g}")


RARE_SHARE = 0.001  # a token is rare below this share of all training tokens


def rare_token_mask(train_ids: torch.Tensor, vocab_size: int,
                    share: float = RARE_SHARE) -> tuple[torch.Tensor, torch.Tensor]:
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
    ("logit_max", "max", lambda s: torch.stack(torch.aminmax(s.logits.detach())).abs().max().float().reshape(1), False),
    ("act", "mean", lambda s: torch.stack(s.model.last_activations).float() if s.model.last_activations
     else torch.zeros(0, device=s.logits.device), True),
)

# Per-parameter-tensor statistics (full telemetry): (key, measured on every step?, function of the
# telemetry's `_Moments` -> one value per tensor, a single `_foreach` pass). Adding one is one entry here.
PARAM_STATS = (
    ("g", True, lambda m: m.grad_norms),  # gradient norm before clipping (after any injection)
    ("u", False, lambda m: m.update),  # update norm |p_new - p_old|
    ("ur", False, lambda m: m.update / m.weight.clamp_min(1e-12)),  # update-to-weight ratio
    ("vm", True, lambda m: m.v_mean),  # mean of exp_avg_sq
    ("vx", False, lambda m: torch.stack(torch._foreach_max(m.v))),  # max of exp_avg_sq
    ("vn", False, lambda m: m.norms(m.v)),  # L2 norm of exp_avg_sq
    ("r", False, lambda m: m.rms_adam_ratio()),  # RMS(g / (sqrt(v_hat) + eps))
)
EVERY_STEP = tuple(key for key, every, _ in PARAM_STATS if every)
DETAIL = tuple(key for key, every, _ in PARAM_STATS if not every)

# The detail schedule (see the module docstring); every threshold of it lives here.
DETAIL_EVERY = 10
DETAIL_AFTER = 20
EMA_DECAY = 0.9
TRIGGER_GRAD_RATIO = 3.0  # a healthy default run has 4 steps past it (natural spikes late in training)
TRIGGER_LOSS_NATS = 0.5
TRIGGER_V_RESIDUAL = 1e-3


class Telemetry:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg, rare_mask: torch.Tensor):
        self.model, self.opt, self.cfg = model, optimizer, cfg
        self.full = cfg.telemetry == "full"
        self.names = [n for n, _ in model.named_parameters()]
        self.params = [p for _, p in model.named_parameters()]
        self.detached = [p.detach() for p in self.params]  # views: they follow the in-place updates
        self.rare_mask = rare_mask
        self.rare_list = rare_mask.tolist()
        self.prev = [torch.empty_like(p) for p in self.detached] if self.full else []  # weights before the step
        self.grad_norms: torch.Tensor | None = None
        self.beta2 = cfg.beta2
        self.sizes = [p.numel() for p in self.params]
        self.device = self.params[0].device
        self.numel = torch.tensor(self.sizes, dtype=torch.float32, device=self.device)
        # the detail schedule's state (module docstring); `state()` / `restore()` carry it through checkpoints
        self.ema_grad: float | None = None
        self.ema_loss: float | None = None
        self.detail_until = -1
        self.vm_prev: list[float] | None = None

    # --- called by the loop around the optimizer step ---
    def after_backward(self, grads: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """Per-tensor gradient norms before clipping (and after any gradient injection); returned so that
        the clip can reuse them (None with basic telemetry)."""
        if not self.full:
            return None
        norms = torch._foreach_norm(grads)
        self.grad_norms = torch.stack(norms)
        return list(norms)

    def before_step(self) -> None:
        if self.full:  # a copy of the weights (into buffers kept from step to step), to measure the update
            torch._foreach_copy_(self.prev, self.detached)

    def row(self, step: int, batch, logits: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor) -> dict:
        with torch.no_grad():
            view = StepView(self.model, logits, loss, grad_norm)
            parts = [distributed.all_reduce(fn(view), op) for _, op, fn, _ in STEP_SIGNALS]  # global over ranks
            states = [self.opt.state.get(p) for p in self.params] if self.full else []
            moments = _Moments(self, states) if self.full and all(states) else None
            every = self._stats(moments, EVERY_STEP) if self.full else loss.new_zeros(0)
            scalars = torch.stack([loss.detach().float(), grad_norm.detach().float()])
            vals = torch.cat([*parts, scalars, every.flatten()]).tolist()  # the step's ONE transfer to the host
            out: dict = {}
            at = 0
            for (key, _, _, as_list), part in zip(STEP_SIGNALS, parts):
                chunk = [rnd(x) for x in vals[at:at + len(part)]]
                out[key] = chunk if as_list else chunk[0]
                at += len(part)
            loss_f, norm_f = vals[at], vals[at + 1]
            composition = self.batch_composition(batch) if batch is not None else None
            if self.full:
                k = len(EVERY_STEP)
                cheap = [vals[at + 2 + i * k:at + 2 + (i + 1) * k] for i in range(len(self.names))]
                per_tensor = [dict(zip(EVERY_STEP, c)) for c in cheap]
                if self.detail_due(step, loss_f, norm_f, [c["g"] for c in per_tensor], [c["vm"] for c in per_tensor],
                                   composition["dup_rows"] if composition else 0):
                    detail = self._stats(moments, DETAIL).tolist()  # a second transfer, on detail steps only
                    for c, d in zip(per_tensor, detail):
                        c.update(zip(DETAIL, d))
                order = [key for key, _, _ in PARAM_STATS]
                out["params"] = {name: {key: rnd(c[key]) for key in order if key in c}
                                 for name, c in zip(self.names, per_tensor)}
                if self.cfg.spectral_every and step % self.cfg.spectral_every == 0:
                    out["sigma"] = self._spectral()
            out["nonfinite"] = int(not math.isfinite(loss_f)) + (
                0 if math.isfinite(norm_f) else sum(int((~torch.isfinite(p.grad)).sum()) for p in self.params))
            if composition is not None:  # None: the caller has no batch of token ids (the probe without ids)
                out["batch"] = composition
        return out

    def _stats(self, moments: "_Moments | None", keys: tuple[str, ...]) -> torch.Tensor:
        """[n_params, len(keys)]: those statistics of PARAM_STATS for every tensor (zeros before the
        optimizer has state, i.e. at a step-0 skipped update)."""
        if moments is None:
            return torch.zeros(len(self.params), len(keys), device=self.device)
        fns = dict((key, fn) for key, _, fn in PARAM_STATS)
        return torch.stack([fns[key](moments) for key in keys], dim=1)

    # --- the detail schedule ---
    def detail_due(self, step: int, loss: float, grad_norm: float, g: list[float], vm: list[float],
                   dup_rows: int = 0) -> bool:
        """Is `step` a detail step? Called once per step, in order, after the step: it also advances the
        schedule's state. The rules and thresholds: the module docstring."""
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        fired = not finite or dup_rows > 0
        if finite and self.ema_grad is not None:
            ratio = grad_norm / self.ema_grad if self.ema_grad > 0 else 1.0
            fired = (fired or not (1 / TRIGGER_GRAD_RATIO <= ratio <= TRIGGER_GRAD_RATIO)
                     or loss > self.ema_loss + TRIGGER_LOSS_NATS)
        if not fired and finite and self.vm_prev is not None:
            fired = self.v_recurrence_broken(grad_norm, g, vm)
        if finite:
            a = EMA_DECAY
            self.ema_grad = grad_norm if self.ema_grad is None else a * self.ema_grad + (1 - a) * grad_norm
            self.ema_loss = loss if self.ema_loss is None else a * self.ema_loss + (1 - a) * loss
        self.vm_prev = vm
        if fired:
            self.detail_until = step + DETAIL_AFTER
        return step % DETAIL_EVERY == 0 or step <= self.detail_until

    def v_recurrence_broken(self, grad_norm: float, g: list[float], vm: list[float]) -> bool:
        """Does any tensor's vm differ from b2 * vm_prev + (1 - b2) * |g clipped|^2 / numel by more than
        TRIGGER_V_RESIDUAL (relative)? Clipping scales every gradient by min(1, clip / (norm + 1e-6))."""
        coef = min(1.0, (self.cfg.grad_clip or math.inf) / (grad_norm + 1e-6))  # grad_clip 0: no clipping
        b2 = self.beta2
        for gi, v, v_prev, n in zip(g, vm, self.vm_prev, self.sizes):
            expected = b2 * v_prev + (1 - b2) * (gi * coef) ** 2 / n
            if not math.isfinite(v) or (expected > 0 and abs(v / expected - 1) > TRIGGER_V_RESIDUAL):
                return True
        return False

    def state(self) -> dict:
        """The schedule's state, for a checkpoint (JSON: floats round-trip exactly)."""
        return {"ema_grad": self.ema_grad, "ema_loss": self.ema_loss, "detail_until": self.detail_until,
                "vm_prev": self.vm_prev}

    def restore(self, state: dict | None) -> None:
        """Continue the schedule from a checkpoint's `state()` (absent in checkpoints made before it: fresh)."""
        state = state or {}
        self.ema_grad, self.ema_loss = state.get("ema_grad"), state.get("ema_loss")
        self.detail_until, self.vm_prev = state.get("detail_until", -1), state.get("vm_prev")

    def _spectral(self) -> dict:
        mats = [(n, p) for n, p in zip(self.names, self.params) if p.dim() == 2]
        finite = torch.stack([torch.isfinite(p).all() for _, p in mats]).tolist()  # the SVD fails on inf/nan
        vals = [torch.linalg.matrix_norm(p.detach().float(), ord=2) if ok else torch.tensor(math.nan)
                for (_, p), ok in zip(mats, finite)]
        return {n: rnd(v) for (n, _), v in zip(mats, torch.stack(vals).tolist())}

    def batch_composition(self, batch) -> dict:
        seqs = [tuple(t for t in row if t != PAD) for row in batch.x.tolist()]
        return composition(seqs, batch.rows, self.rare_list)


def composition(seqs: list[tuple[int, ...]], rows: list, rare: list[bool]) -> dict:
    """A batch's composition from its rows of token ids (padding removed); `rare[t]`: token t is rare."""
    tokens = [t for seq in seqs for t in seq]
    counts: dict[int, int] = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    n = max(1, len(tokens))
    n_rare = sum(c for t, c in counts.items() if rare[t])
    return {
        "rows": rows,
        "distinct_tokens": len(counts),
        "top_token_share": rnd(max(counts.values()) / n) if counts else 0.0,
        "rare_share": rnd(n_rare / n),
        "dup_rows": len(seqs) - len(set(seqs)),
    }


class _Moments:
    """The tensors PARAM_STATS read; what only detail statistics need is computed when first asked for."""

    def __init__(self, tel: Telemetry, states: list[dict]):
        self.tel = tel
        self.norms = lambda ts: torch.stack(torch._foreach_norm(ts))
        self.numel = tel.numel
        self.grad_norms = tel.grad_norms if tel.grad_norms is not None else torch.zeros_like(tel.numel)
        self.v = [st["exp_avg_sq"] for st in states]
        self.v_mean = torch.stack([v.sum() for v in self.v]) / self.numel  # (3.5x faster than an L1 _foreach_norm)
        self._step, self._beta2, self._eps = float(states[0]["step"]), tel.beta2, tel.cfg.eps

    @functools.cached_property
    def update(self) -> torch.Tensor:
        return self.norms(torch._foreach_sub(self.tel.detached, self.tel.prev))

    @functools.cached_property
    def weight(self) -> torch.Tensor:
        return self.norms(self.tel.prev)

    def rms_adam_ratio(self) -> torch.Tensor:
        """RMS(g / (sqrt(v_hat) + eps)) with Adam's own denominator; every tensor steps together, so the bias
        correction is one scalar."""
        denom = torch._foreach_div(torch._foreach_sqrt(self.v), (1.0 - self._beta2 ** self._step) ** 0.5)
        torch._foreach_add_(denom, self._eps)
        grads = [p.grad for p in self.tel.params]
        return self.norms(torch._foreach_div(grads, denom)) / self.numel.sqrt()
