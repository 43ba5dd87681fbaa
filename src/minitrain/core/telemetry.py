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
  natural_signals (config option, off by default), on detail steps only:
  attn_logit_max    largest pre-softmax attention logit q.k/sqrt(d_head) of each layer    (list, one per layer)
  attn_entropy_min  smallest over heads of the mean attention entropy (nats) of each layer (list, one per layer)
  logz_mean, logz_max  log Z = logsumexp of the output logits, mean and max over target positions
  logit_mean        mean output logit over target positions and the vocabulary
"""
from __future__ import annotations

import collections
import functools
import itertools
import math
from array import array

import torch

from minitrain.core import distributed
from minitrain.core.fmt import UR_WEIGHT_FLOOR
from minitrain.core.silent import SilentSignals
from minitrain.core.tokenizer import PAD

SIG = 5  # significant digits kept for telemetry floats (loss, lr and norms keep full precision)
_RND_FMT = f"%.{SIG}g"
_RND_FMTS: dict[int, str] = {}  # the format of n values, by n


def rnd(x: float) -> float | None:
    return float(_RND_FMT % x) if math.isfinite(x) else None


def rnd_all(xs: list[float]) -> list[float | None]:
    """`rnd` of every value, formatted in one call (a row holds ~40 of them: a third of the per-value cost)."""
    if math.isfinite(sum(xs)):  # every value finite (a sum that overflows only takes the per-value path)
        fmt = _RND_FMTS.get(len(xs)) or _RND_FMTS.setdefault(len(xs), " ".join([_RND_FMT] * len(xs)))
        return list(map(float, (fmt % tuple(xs)).split()))
    return [rnd(x) for x in xs]


RARE_SHARE = 0.001  # a token is rare below this share of all training tokens


def rare_token_mask(train_ids: torch.Tensor, vocab_size: int,
                    share: float = RARE_SHARE) -> tuple[torch.Tensor, torch.Tensor]:
    """Token counts over the training split and a mask of the rare ones: tokens that make up less than
    `share` of all training tokens (0.1%: at most a handful of rows in a ~2k-row split)."""
    ids = train_ids[train_ids != PAD]
    counts = torch.bincount(ids, minlength=vocab_size)
    rare = counts < share * ids.numel()
    return counts, rare


def _largest_abs(lo: float, hi: float) -> list[float]:
    return [math.nan if math.isnan(lo) or math.isnan(hi) else max(hi, -lo)]  # torch.maximum's NaN rule


StepView = collections.namedtuple("StepView", "model logits loss grad_norm logit_range")  # what a signal reads


# Per-step signals: (row key, how DDP ranks combine each value (max, min or mean), function of the StepView ->
# 0-d tensors, function of their host values -> the values written (None: as they are), written as a list?).
# Adding a signal is one entry here (and a line in docs/metrics.md). `measure` stacks all signals' tensors in
# one stack (a step pays for each kind of tensor operation telemetry adds: docs/benchmarks.md). Ranks hold
# equal-shaped shares, so a mean of rank means is the global mean.
STEP_SIGNALS = (  # logit_max: max(hi, -lo) of one aminmax pass (after_forward's, or taken here), on the host
    ("logit_max", ("min", "max"), lambda s: list(s.logit_range or torch.aminmax(s.logits.detach())),
     lambda xs: _largest_abs(*xs), False),
    ("act", "mean", lambda s: s.model.last_activations, None, True),
)

# Per-parameter-tensor statistics (full telemetry): (key, measured on every step?, function of the
# telemetry's `_Moments` -> one value per tensor, a single `_foreach` pass). Adding one is one entry here.
PARAM_STATS = (
    ("g", True, lambda m: m.grad_norms),  # gradient norm before clipping (after any injection)
    ("u", False, lambda m: m.update),  # update norm |p_new - p_old|
    ("ur", False, lambda m: m.update / m.weight.clamp_min(UR_WEIGHT_FLOOR)),  # update-to-weight ratio
    ("vm", True, lambda m: m.v_sums),  # mean of exp_avg_sq (its division by numel: FINISHED_ON_HOST)
    ("vx", False, lambda m: torch.stack(torch._foreach_max(m.v))),  # max of exp_avg_sq
    ("vn", False, lambda m: m.norms(m.v)),  # L2 norm of exp_avg_sq
    ("r", False, lambda m: m.rms_adam_ratio()),  # RMS(g / (sqrt(v_hat) + eps))
)
PARAM_ORDER = tuple(key for key, _, _ in PARAM_STATS)
STAT_FNS = {key: fn for key, _, fn in PARAM_STATS}
EVERY_STEP = tuple(key for key, every, _ in PARAM_STATS if every)
DETAIL = tuple(key for key, every, _ in PARAM_STATS if not every)
# Statistics whose last operation the host does (the same bits, one kind of tensor operation less per step)
FINISHED_ON_HOST = {"vm": lambda tel, sums: float32_quotients(sums, tel.numel_host)}


def float32_quotients(xs: list[float], ys: list[float]) -> list[float]:
    """x / y as a float32 division gives it, for float32 values x and y (host floats): the float64 quotient
    rounded to float32 is the correctly rounded float32 quotient (53 >= 2 * 24 + 2 bits)."""
    return array("f", [x / y for x, y in zip(xs, ys)]).tolist()


# The detail schedule (see the module docstring); every threshold of it lives here.
DETAIL_EVERY = 10
DETAIL_AFTER = 20
EMA_DECAY = 0.9
TRIGGER_GRAD_RATIO = 3.0  # a healthy default run has 4 steps past it (natural spikes late in training)
TRIGGER_LOSS_NATS = 0.5
TRIGGER_V_RESIDUAL = 1e-3
REBUILD_MIN_KEEP = 0.5  # AdamW's update is rebuilt only while its decay factor 1 - lr * wd stays above this


def _signals_over_ranks(head: torch.Tensor, parts: list[list[torch.Tensor]]) -> torch.Tensor:
    """`measure`'s [loss, grad_norm, *signals], each signal value combined over DDP ranks (loss, norm: global)."""
    ops = [op for (_, how, _, _, _), part in zip(STEP_SIGNALS, parts)
           for op in ([how] * len(part) if isinstance(how, str) else how)]
    return torch.cat([head[:2], *(-distributed.all_reduce(-x, "max") if op == "min" else distributed.all_reduce(x, op)
                                  for op, x in zip(ops, head[2:].split(1)))])


def _float32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.float()  # (a .float() that changes nothing still costs a call)


class Telemetry:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg, rare_mask: torch.Tensor):
        self.model, self.opt, self.cfg = model, optimizer, cfg
        self.full = cfg.telemetry == "full"
        self.names = [n for n, _ in model.named_parameters()]
        self.params = [p for _, p in model.named_parameters()]
        self.detached = [p.detach() for p in self.params]  # views: they follow the in-place updates
        self.rare_mask = rare_mask
        self.rare_list = rare_mask.tolist()
        # `u` (the update |p_new - p_old|): with AdamW it is rebuilt on detail steps from the step's own moments
        # (to float rounding: tests/test_telemetry.py), so no step pays for a copy of the weights; with any
        # other optimizer (the probe's), or an LR so large that AdamW's decay factor 1 - lr * wd is below
        # REBUILD_MIN_KEEP (dividing by it would amplify rounding), the weights are copied before the step
        self.rebuild = self.full and _plain_adamw(optimizer)
        # the natural-instability signals (Wortsman et al. 2023) ride on the detail steps: attention logits from
        # each block's q and k of the step's forward (kept by reference, no copy), log Z from the step's logits
        self.natural = self.full and getattr(cfg, "natural_signals", False) and hasattr(model, "record_attention")
        if self.natural:
            model.record_attention(True)
        self.prev: list[torch.Tensor] = []  # the copy, allocated when first needed
        self.copied = False  # was the copy taken before this step
        self.stepped = True  # did the optimizer step (a remedy may skip it)
        self.grad_norms = self.logit_range = None  # set by after_backward and after_forward
        self.beta2 = cfg.beta2
        self.sizes = [p.numel() for p in self.params]
        self.device = self.params[0].device
        self.numel = torch.tensor(self.sizes, dtype=torch.float32, device=self.device)
        self.numel_host = self.numel.tolist()  # the same float32 values
        # the detail schedule's state (module docstring); `state()` / `restore()` carry it through checkpoints
        self.ema_grad: float | None = None
        self.ema_loss: float | None = None
        self.detail_until = -1
        self.vm_prev: list[float] | None = None
        self.silent = SilentSignals(self.params)  # the silent bugs' signals (core/silent.py), every step

    # --- called by the loop around the optimizer step ---
    def after_forward(self, logits: torch.Tensor) -> None:  # logit_max's aminmax while the logits are in cache
        self.logit_range = torch.aminmax(logits.detach())

    def after_backward(self, grads: list[torch.Tensor]) -> torch.Tensor | None:
        """Per-tensor gradient norms before clipping (and after any gradient injection), stacked; returned so
        that the clip can reuse them (None with basic telemetry)."""
        if self.full:
            self.grad_norms = torch.stack(torch._foreach_norm(grads))
        self.silent.after_backward(grads)
        return self.grad_norms if self.full else None

    def before_step(self, taking: bool = True) -> None:
        """Called just before the optimizer step (`taking`: False when a remedy skips it)."""
        self.stepped = taking
        self.silent.before_step()
        self.copied = self.full and (not self.rebuild or any(
            1.0 - float(g["lr"]) * float(g.get("weight_decay", 0.0)) < REBUILD_MIN_KEEP
            for g in self.opt.param_groups))
        if self.copied:  # a copy of the weights (into buffers kept from step to step), to measure the update
            if not self.prev:
                self.prev = [torch.empty_like(p) for p in self.detached]
            torch._foreach_copy_(self.prev, self.detached)

    def after_step(self, lr: float, keep: bool = False) -> None:
        """Called just after the optimizer step with the LR it ran with (0: no step was taken); `keep`: the
        caller leaves the gradients as they are until its next backward (core/silent.py)."""
        self.silent.after_step([p.grad for p in self.params], lr, keep)

    def hyper(self, states: list[dict]) -> dict[str, list[float]]:
        """Per tensor, what Adam's step used: its denominator's bias correction sqrt(1 - b2^t) and eps, and
        for AdamW's update the step size lr / (1 - b1^t) and the decoupled decay's factor 1 - lr * wd (read
        from each tensor's param group after the step: an injected LR or beta2 included)."""
        out: dict[str, list[float]] = {"bc2": [], "eps": [], "step_size": [], "keep": []}
        group_of = {id(p): g for g in self.opt.param_groups for p in g["params"]}  # a tensor with state has one
        steps = torch.stack([torch.as_tensor(st["step"], dtype=torch.float32) for st in states]).tolist()  # 1 sync
        for p, t in zip(self.params, steps):
            g = group_of[id(p)]
            b1, b2 = g["betas"]
            lr = float(g["lr"])
            out["bc2"].append((1.0 - b2 ** t) ** 0.5)
            out["eps"].append(float(g["eps"]))
            out["step_size"].append(lr / (1.0 - b1 ** t))
            out["keep"].append(1.0 - lr * float(g.get("weight_decay", 0.0)))
        return out

    def row(self, step: int, batch, logits: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor) -> dict:
        return self.measure(step, batch, logits, loss, grad_norm)[0]

    def measure(self, step: int, batch, logits: torch.Tensor, loss: torch.Tensor, grad_norm: torch.Tensor,
                extra: torch.Tensor | None = None) -> tuple[dict, list[float]]:
        """The step's telemetry fields, and [loss, grad_norm, *extra] on the host: the caller's own numbers
        (`extra`, a 1-d tensor) ride along in the step's ONE device-to-host transfer. Every tensor read here
        is detached or holds no graph (no grad-mode switch needed)."""
        view, self.logit_range = StepView(self.model, logits, loss, grad_norm, self.logit_range), None
        parts = [fn(view) for _, _, fn, _, _ in STEP_SIGNALS]
        head = _float32(torch.stack([loss.detach(), grad_norm.detach(), *(t for part in parts for t in part)]))
        if distributed.world_size() > 1:
            head = _signals_over_ranks(head, parts)
        states = [self.opt.state.get(p) for p in self.params] if self.full else []
        moments = _Moments(self, states) if self.full and all(states) else None  # None: no optimizer state yet
        every = self._stats(moments, EVERY_STEP) if self.full else []
        # the step's ONE transfer: loss, norm, signals, the caller's numbers, the every-step statistics key by key
        silent = self.silent.values()
        vals = torch.cat([head, *([] if extra is None else [_float32(extra)]), *every, silent]).tolist()
        silent_host, vals = vals[len(vals) - len(silent):], vals[:len(vals) - len(silent)]
        n_head, n_host = head.shape[0], 2 + (0 if extra is None else extra.shape[0])
        loss_f, norm_f, *_ = host = vals[:2] + vals[n_head:n_head - 2 + n_host]
        ends = list(itertools.accumulate((len(part) for part in parts), initial=2))  # each signal's values
        signals = [(on_host or list)(vals[a:b]) for (_, _, _, on_host, _), a, b in zip(STEP_SIGNALS, ends, ends[1:])]
        composition = self.batch_composition(batch) if batch is not None else None
        columns, order = [], ()  # per statistic written, its values for all tensors
        if self.full:
            n, at = len(self.params), n_head - 2 + n_host
            columns = [vals[at + j * n:at + (j + 1) * n] for j in range(len(EVERY_STEP))]  # host floats
            columns = [FINISHED_ON_HOST[k](self, c) if k in FINISHED_ON_HOST else c for k, c in zip(EVERY_STEP, columns)]
            keys = EVERY_STEP
            g, vm = columns[EVERY_STEP.index("g")], columns[EVERY_STEP.index("vm")]
            if self.detail_due(step, loss_f, norm_f, g, vm, composition["dup_rows"] if composition else 0):
                with torch.no_grad():  # (a probe's gradients may hold a graph)
                    detail = torch.cat(self._stats(moments, DETAIL)).tolist()  # a second transfer, detail steps only
                columns += [detail[j * n:(j + 1) * n] for j in range(len(DETAIL))]
                keys = EVERY_STEP + DETAIL
            order = [key for key in PARAM_ORDER if key in keys]  # the file's order: PARAM_STATS'
            columns = [columns[keys.index(key)] for key in order]
        # every telemetry float rounded in one call: the signals' values, then the statistics'
        rounded = rnd_all([*(x for xs in signals for x in xs), *(x for column in columns for x in column)])
        out, at = {}, 0
        for (key, _, _, _, as_list), xs in zip(STEP_SIGNALS, signals):
            out[key] = rounded[at:at + len(xs)] if as_list else rounded[at]
            at += len(xs)
        if self.full:
            n = len(self.params)
            by_key = [rounded[at + j * n:at + (j + 1) * n] for j in range(len(order))]
            out["params"] = {name: dict(zip(order, stats)) for name, stats in zip(self.names, zip(*by_key))}
            if self.cfg.spectral_every and step % self.cfg.spectral_every == 0:
                out["sigma"] = self._spectral()
            if self.natural and len(order) > len(EVERY_STEP):  # a detail step
                out.update(self.natural_row(logits))
        out["nonfinite"] = int(not math.isfinite(loss_f)) + (
            0 if math.isfinite(norm_f) else sum(int((~torch.isfinite(p.grad)).sum()) for p in self.params))
        if composition is not None:  # None: the caller has no batch of token ids (the probe without ids)
            out["batch"] = composition
        out.update(self.silent.fields(silent_host, self.names))  # only the signals that fired
        return out, host

    def natural_row(self, logits: torch.Tensor) -> dict:
        """The natural-instability signals of this step's forward (module docstring), global over ranks."""
        z = logits.detach().float().flatten(0, -2)  # [targets, V]
        lz = torch.logsumexp(z, dim=-1)
        blocks = [attention_stats(b.attn.last_qk, self.model.last_mask, self.model.last_key_pad)
                  for b in self.model.blocks]
        n_layer = len(blocks)
        maxes = distributed.all_reduce(torch.stack([*(m for m, _, _ in blocks), lz.max()]), "max")
        sums = distributed.all_reduce(torch.cat([*(e for _, e, _ in blocks), blocks[0][2].reshape(1),
                                                 torch.stack([lz.sum(), z.mean(-1).sum(),
                                                              torch.tensor(float(len(lz)), device=z.device)])]), "sum")
        host_max, host_sum = maxes.tolist(), sums.tolist()
        n_head = len(blocks[0][1])
        queries, (lz_sum, mean_sum, targets) = host_sum[n_layer * n_head], host_sum[-3:]
        entropy = [min(host_sum[i * n_head:(i + 1) * n_head]) / queries for i in range(n_layer)]
        return {"attn_logit_max": rnd_all(host_max[:n_layer]), "attn_entropy_min": rnd_all(entropy),
                "logz_mean": rnd(lz_sum / targets), "logz_max": rnd(host_max[-1]), "logit_mean": rnd(mean_sum / targets)}

    def _stats(self, moments: "_Moments | None", keys: tuple[str, ...]) -> list[torch.Tensor]:
        """Those statistics of PARAM_STATS, each one value per tensor (zeros before the optimizer has
        state, i.e. at a step-0 skipped update)."""
        if moments is None:
            return [torch.zeros(len(self.params), device=self.device) for _ in keys]
        return [STAT_FNS[key](moments) for key in keys]

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
        return {n: rnd(v) for n, v in largest_singular_values(
            [(n, p) for n, p in zip(self.names, self.params) if p.dim() == 2]).items()}

    def batch_composition(self, batch) -> dict:
        stats = getattr(batch, "token_stats", None)  # counted for a whole block of batches at once (data.py)
        if stats is not None:
            return composition_of(batch.rows, *stats)
        seqs = [tuple(t for t in row if t != PAD) for row in batch.x.tolist()]
        return composition(seqs, batch.rows, self.rare_list)


def composition(seqs: list[tuple[int, ...]], rows: list, rare: list[bool]) -> dict:
    """A batch's composition from its rows of token ids (padding removed); `rare[t]`: token t is rare."""
    tokens = [t for seq in seqs for t in seq]
    counts: dict[int, int] = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    n_rare = sum(c for t, c in counts.items() if rare[t])
    return composition_of(rows, len(tokens), len(counts), max(counts.values(), default=0), n_rare,
                          len(seqs) - len(set(seqs)))


def composition_of(rows: list, n_tokens: int, distinct: int, top_count: int, n_rare: int, dup_rows: int) -> dict:
    """The composition fields from a batch's counts (one definition for `composition` and `block_token_stats`)."""
    n = max(1, n_tokens)
    return {
        "rows": rows,
        "distinct_tokens": distinct,
        "top_token_share": rnd(top_count / n) if distinct else 0.0,
        "rare_share": rnd(n_rare / n),
        "dup_rows": dup_rows,
    }


def block_token_stats(x: torch.Tensor, widths: list[int], rare_mask: torch.Tensor) -> list[tuple[int, ...]]:
    """`composition_of`'s counts (tokens, distinct tokens, top token's count, rare tokens, duplicated rows) for
    each batch of a block x [S, B, L] of right-padded rows, batch s cut to its first widths[s] positions:
    the same numbers `composition` counts row by row, in a few tensor operations for the whole block."""
    S, B, L = x.shape
    inside = torch.arange(L) < torch.tensor(widths).unsqueeze(1)  # [S, L]
    x = torch.where(inside[:, None, :], x, PAD)
    real = x != PAD
    counts = torch.zeros(S, len(rare_mask), dtype=torch.long).scatter_add_(1, x.reshape(S, -1),
                                                                          real.reshape(S, -1).long())
    same = (x[:, :, None, :] == x[:, None, :, :]).all(-1)  # [S, B, B]: rows i and j hold the same tokens
    dup = same.tril(-1).any(-1).sum(1)  # rows equal to an earlier row of their batch
    columns = (real.sum((1, 2)), (counts > 0).sum(1), counts.max(1).values, counts[:, rare_mask].sum(1), dup)
    return list(zip(*(c.tolist() for c in columns)))


def attention_stats(qk: torch.Tensor, mask: torch.Tensor | None,
                    key_pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer's attention from its q and k ([B, T, 2 heads, d_head], queries then keys, as the forward used
    them): the largest pre-softmax logit q.k/sqrt(d_head) over real query positions and the keys each may see,
    each head's attention entropy (nats) summed over real query positions [heads], and how many there are.
    `mask`: [B, 1, T, T] True = may attend, or None for the causal mask."""
    B, T, h2, d = qk.shape
    q, k = qk.float().transpose(1, 2).split(h2 // 2, dim=1)  # [B, heads, T, d_head]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # [B, heads, T, T]
    allowed = torch.ones(T, T, dtype=torch.bool, device=qk.device).tril() if mask is None else mask
    scores = scores.masked_fill(~allowed, -math.inf)
    real = ~key_pad  # [B, T]: a query at a padding position is no token's
    top = scores.masked_fill(~real[:, None, :, None], -math.inf).amax()
    entropy = torch.special.entr(torch.softmax(scores, dim=-1)).sum(-1)  # [B, heads, T]
    per_head = (entropy * real[:, None, :]).sum((0, 2))
    return top, per_head, real.sum().float()


def largest_singular_values(mats: list[tuple[str, torch.Tensor]]) -> dict[str, float]:
    """Each matrix's largest singular value: the square root of the largest eigenvalue of its smaller Gram
    matrix W W^T (or W^T W), in float64, with all Gram matrices of one size in one batched `eigvalsh`. Half
    the cost of `matrix_norm(ord=2)`'s SVD per matrix; the same value to float32 rounding (tests). A matrix
    holding inf or nan gets nan (an eigensolver fails on them)."""
    with torch.no_grad():
        finite = torch.stack([torch.isfinite(p).all() for _, p in mats]).tolist()
        by_size: dict[int, list[int]] = {}
        for i, (_, p) in enumerate(mats):
            if finite[i]:
                by_size.setdefault(min(p.shape), []).append(i)
        out = [math.nan] * len(mats)
        for idx in by_size.values():
            grams = []
            for i in idx:
                w = mats[i][1].detach().double()
                grams.append(w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w)
            top = torch.linalg.eigvalsh(torch.stack(grams))[:, -1].clamp_min(0).sqrt().float().tolist()
            for i, v in zip(idx, top):
                out[i] = v
    return {n: v for (n, _), v in zip(mats, out)}


def _plain_adamw(opt) -> bool:
    """AdamW as torch defines it (no amsgrad, no maximize, float LRs): its step can be rebuilt exactly."""
    return isinstance(opt, torch.optim.AdamW) and all(
        not g.get("amsgrad") and not g.get("maximize") and not torch.is_tensor(g.get("lr")) for g in opt.param_groups)


class _Moments:
    """The tensors PARAM_STATS read; what only detail statistics need is computed when first asked for."""

    def __init__(self, tel: Telemetry, states: list[dict]):
        self.tel, self.states = tel, states
        self.numel, self.norms = tel.numel, lambda ts: torch.stack(torch._foreach_norm(ts))
        self.grad_norms = tel.grad_norms if tel.grad_norms is not None else torch.zeros_like(tel.numel)
        self.v = [st["exp_avg_sq"] for st in states]
        self.v_sums = torch.stack([v.sum() for v in self.v])  # (3.5x faster than an L1 _foreach_norm)

    @functools.cached_property
    def hyper(self) -> dict[str, list[float]]:
        return self.tel.hyper(self.states)

    @functools.cached_property
    def denom(self) -> list[torch.Tensor]:
        """Adam's denominator sqrt(v_hat) + eps, per tensor, as the step computed it."""
        d = torch._foreach_sqrt(self.v)
        torch._foreach_div_(d, self.hyper["bc2"])
        torch._foreach_add_(d, self.hyper["eps"])
        return d

    @functools.cached_property
    def before(self) -> list[torch.Tensor]:
        """The weights before the step: copied (`Telemetry.prev`), or rebuilt from AdamW's step,
        p_new = (1 - lr wd) p_old - lr / (1 - b1^t) * m / (sqrt(v_hat) + eps), with this step's m and v."""
        tel = self.tel
        if tel.copied:
            return tel.prev
        if not tel.stepped:
            return tel.detached
        old = torch._foreach_div([st["exp_avg"] for st in self.states], self.denom)
        torch._foreach_mul_(old, self.hyper["step_size"])
        torch._foreach_add_(old, tel.detached)
        torch._foreach_div_(old, self.hyper["keep"])
        return old

    @functools.cached_property
    def update(self) -> torch.Tensor:
        return self.norms(torch._foreach_sub(self.before, self.tel.detached))

    @functools.cached_property
    def weight(self) -> torch.Tensor:
        return self.norms(self.before)

    def rms_adam_ratio(self) -> torch.Tensor:
        """RMS(g / (sqrt(v_hat) + eps)) with Adam's own denominator (each tensor's group's beta2 and eps)."""
        grads = [p.grad for p in self.tel.params]
        return self.norms(torch._foreach_div(grads, self.denom)) / self.numel.sqrt()
