"""The stability check: the decision tree a learner walks to name the cause of a spike, defined once, as data.

`TREE` below is the only definition. `stability-check.md` at the repository root is generated from it
(`minitrain stability-md`), and `minitrain diagnose RUN` walks it
automatically over the run's metrics:

    walk from §1 in order; at each question measure its metric; "yes" and "no" name the next node or a
    leaf; the first leaf reached is the verdict.

Each question names the metric, the dashboard panel, an explicit numeric threshold and a `check` function
over an `Evidence` object (the run's metrics as arrays, plus statistics derived from them). The walker
reads ONLY metrics.jsonl, plus the run's tokenizer.json (vocabulary size, for ln V) and the n-gram
baseline from results.json / manifest.json. It never reads the injection settings or record, the
metrics rows' `injected` field, or the folder's name: a diagnosis must come from what training did.

Thresholds are ratios to trailing robust statistics (a 50-step trailing median), so they do not depend
on the loss or norm scale of one run; each one's margin over clean runs is recorded in docs/diagnosis.md.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from minitrain.analysis.panels import cite
from minitrain.core.errors import UserError
from minitrain.run import files, reader
from minitrain.core.fmt import fmt

CAUSES = ("healthy", "gradient_explosion", "bad_batch", "optimizer_state_corruption", "bad_init", "no_warmup",
          "broken_mask", "non_finite", "lr_schedule", "unknown")

RULE = ("Walk the sections in order and stop at the first leaf you reach. Then apply the leaf's fix, "
        "re-run, and re-walk from §1: a run can carry more than one fault, and the tree names them one at a time.")

# Every numeric threshold of the tree, by name: the checks read them here, the markdown prints them.
T = {
    "loss0_high": 8.0,          # §1: step-0 loss above this: broken init or a non-zero LM-head bias
    "loss0_low": 4.0,           # §1: step-0 loss below this: the model is not untrained
    "loss0_band": 0.5,          # §1: step-0 loss within ln V +- this
    "gn1_high": 100.0,          # §1: step-1 gradient norm above this: bad init or a sum/mean mix-up
    "gn1_low": 0.001,           # §1: step-1 gradient norm below this: degenerate data or all-zero loss mask
    "gn1_healthy": (0.1, 10.0),  # the course's healthy step-1 gradient norm (the dashboard's health summary)
    "lr_flat": 1e-3,            # §2: (max LR - min LR) / max LR below this: the LR never changed
    "warmup_share": 0.5,        # §2: first-step LR at or above this share of the peak LR: no warmup ramp
    "mask_train": 0.5,          # §3: training loss (smoothed) below this share of the n-gram baseline ...
    "mask_val": 0.85,           # §3: ... while the best validation loss stays above this share of it ...
    "mask_rise": 1.15,          # §3: ... and the last validation loss is this many times the best
    "not_learning": 0.9,        # §3: final training loss above this share of the step-0 loss
    "dup_share": 0.5,           # §4: share of a batch's rows that repeat an earlier row
    "outlier_loss": 1.0,        # §4: loss this many nats above its trailing median ...
    "outlier_rare": 4.0,        # §4: ... with a rare-token share this many times its trailing median
    "logit0_high": 10.0,        # §5: largest |logit| at step 0 (an untrained model's logits are ~1)
    "v_factor": 1.02,           # §6: Adam's v moved by a factor outside [1/1.02, 1.02] that g^2 does not explain
    "v_noise_mult": 50.0,       # §6: ... and at least this many times the run's own rounding noise
    "gn_all_up": 2.0,           # §7: every tensor's g at least this many times its trailing median, beyond
                                #     the batch loss's own jump (clean runs: at most 1.2)
    "gn_all_down": 0.4,         # §7: every tensor's g at most this share of its trailing median (clean: >= 0.8)
    "gn_huge": 30.0,            # §7: a jump this large is never natural here, uniform or not
}
WINDOW = 50        # trailing window (steps) of the robust statistics
MIN_HISTORY = 5    # a step needs this many earlier steps before it can be called an outlier


# ---------------------------------------------------------------------------------------------------
# Evidence: the run's metrics as arrays, and the statistics the checks share
# ---------------------------------------------------------------------------------------------------


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def trailing_median(x: np.ndarray, window: int = WINDOW, min_history: int = MIN_HISTORY) -> np.ndarray:
    """Median of the `window` values before each step (NaN where fewer than `min_history` exist)."""
    out = np.full(len(x), np.nan)
    for t in range(min_history, len(x)):
        past = x[max(0, t - window):t]
        past = past[np.isfinite(past)]
        if len(past) >= min_history:
            out[t] = np.median(past)
    return out


def _trailing_median_fast(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """trailing_median over full windows with numpy (the loop only fills the first `window` steps)."""
    n = len(x)
    out = trailing_median(x[: min(n, window + 1)], window)
    if n > window + 1 and np.isfinite(x).all():
        from numpy.lib.stride_tricks import sliding_window_view

        full = np.median(sliding_window_view(x[:-1], window), axis=1)  # full[i] = median(x[i:i+window])
        out = np.concatenate([out, full[1:n - window]])  # step t uses x[t-window:t]
    elif n > window + 1:
        out = trailing_median(x, window)
    return out


PARAM_KEYS = ("g", "u", "ur", "vm", "vx", "vn", "r")
BATCH_KEYS = ("dup_rows", "rare_share", "top_token_share", "distinct_tokens")


@dataclass
class Evidence:
    """What the walker knows about a run: metrics series (NaN where a value was null) and a few facts."""

    rows: list[dict]
    vocab_size: int | None = None
    ngram_val_loss: float | None = None
    note: str | None = None  # e.g. the metrics end on a partial line

    def __post_init__(self):
        # one pass over the rows builds every series the checks read
        keys = ("loss", "lr", "grad_norm", "grad_norm_clipped", "val_loss", "logit_max", "nonfinite")
        cols = {k: [] for k in keys}
        bcols = {k: [] for k in BATCH_KEYS}
        brows = []
        names = next((list(r["params"]) for r in self.rows if isinstance(r.get("params"), dict) and r["params"]), [])
        cube = np.full((len(self.rows), len(names), len(PARAM_KEYS)), np.nan)
        for i, r in enumerate(self.rows):
            for k in keys:
                cols[k].append(_num(r.get(k)))
            b = r.get("batch") if isinstance(r.get("batch"), dict) else {}
            for k in BATCH_KEYS:
                bcols[k].append(_num(b.get(k)))
            brows.append(len(b.get("rows") or []))
            p = r.get("params")
            if names and isinstance(p, dict):
                for j, n in enumerate(names):
                    st = p.get(n)
                    if isinstance(st, dict):
                        cube[i, j] = [_num(st.get(k)) for k in PARAM_KEYS]
        self.steps = np.array([int(r["step"]) for r in self.rows])
        self.loss, self.lr, self.grad_norm = (np.array(cols[k]) for k in ("loss", "lr", "grad_norm"))
        self.grad_norm_clipped, self.val_loss = np.array(cols["grad_norm_clipped"]), np.array(cols["val_loss"])
        self.logit_max, self.nonfinite = np.array(cols["logit_max"]), np.array(cols["nonfinite"])
        self._batch = {k: np.array(v) for k, v in bcols.items()}
        self.batch_rows = np.array(brows, dtype=float)
        self.param_names = names
        self._cube = cube

    def batch(self, key: str) -> np.ndarray:
        return self._batch[key]

    def param(self, name: str, key: str) -> np.ndarray:
        return self._cube[:, self.param_names.index(name), PARAM_KEYS.index(key)]

    @cached_property
    def ln_v(self) -> float:
        return math.log(self.vocab_size or 512)

    def step_at(self, i: int | None) -> int | None:
        return None if i is None else int(self.steps[i])

    # --- shared statistics ---
    @cached_property
    def nonfinite_index(self) -> int | None:
        """Index of the first row with a non-finite loss, gradient norm or non-finite count > 0."""
        bad = ~np.isfinite(self.loss) | ~np.isfinite(self.grad_norm) | (self.nonfinite > 0)
        idx = np.flatnonzero(bad)
        return int(idx[0]) if len(idx) else None

    @cached_property
    def gn_log_ratio(self) -> np.ndarray:
        """log(pre-clip grad norm / its trailing median): scale-free spike size."""
        lg = np.log(np.where(self.grad_norm > 0, self.grad_norm, np.nan))
        return lg - _trailing_median_fast(lg)

    @cached_property
    def g_log_ratio(self) -> np.ndarray | None:
        """[steps, tensors] log(per-tensor g / its trailing median)."""
        if not self.param_names:
            return None
        cols = []
        for n in self.param_names:
            g = self.param(n, "g")
            lg = np.log(np.where(g > 0, g, np.nan))
            cols.append(lg - _trailing_median_fast(lg))
        return np.stack(cols, 1)

    @cached_property
    def g_all_up(self) -> np.ndarray:
        """log of the smallest per-tensor g ratio, less the loss's own rise: > 0 only when EVERY tensor's
        gradient grew, and by more than the batch's loss did (a surprising batch grows the gradient too)."""
        if self.g_log_ratio is None:
            return np.full(len(self.rows), np.nan)
        return np.nanmin(self.g_log_ratio, axis=1) - np.maximum(np.nan_to_num(self.loss_log_ratio, nan=0.0), 0)

    @cached_property
    def g_all_down(self) -> np.ndarray:
        """log of the largest per-tensor g ratio, less the loss's own fall: < 0 only when every tensor shrank."""
        if self.g_log_ratio is None:
            return np.full(len(self.rows), np.nan)
        return np.nanmax(self.g_log_ratio, axis=1) - np.minimum(np.nan_to_num(self.loss_log_ratio, nan=0.0), 0)

    @cached_property
    def v_factor(self) -> dict | None:
        """Adam's second-moment recurrence, checked from the metrics alone.

        vm (mean of exp_avg_sq) obeys vm_t = b2 * vm_{t-1} + (1 - b2) * mean(gc_t^2) exactly, where gc is
        the clipped gradient: mean(gc^2) = (g * clipped_norm / grad_norm)^2 / numel. Fitting
        vm_t / vm_{t-1} = a + c * gc_t^2 / vm_{t-1} per tensor (a = b2, c = (1 - b2) / numel; both unknown to
        the walker, so fitted, with outliers trimmed) gives the factor by which v changed beyond what the
        gradient explains: f_t = (vm_t - c * gc_t^2) / (a * vm_{t-1}). f = 1 to rounding in a healthy run;
        an optimizer-state corruption at step K shows as f_K != 1 on the tensor it touched.
        """
        if not self.param_names:
            return None
        clip = self.grad_norm_clipped / self.grad_norm
        best = None
        logs, by_tensor = [], {}
        for name in self.param_names:
            vm, g = self.param(name, "vm"), self.param(name, "g")
            if len(vm) < 10:
                return None
            prev, now = vm[:-1], vm[1:]
            gc2 = (g[1:] * clip[1:]) ** 2
            ok = np.isfinite(prev) & np.isfinite(now) & np.isfinite(gc2) & (prev > 0)
            if ok.sum() < 8:
                continue
            rho, xi = now[ok] / prev[ok], gc2[ok] / prev[ok]
            A = np.stack([np.ones_like(xi), xi], 1)
            keep = np.ones(len(rho), bool)
            for _ in range(4):  # least squares, then refit without the outliers (a corrupted step is one)
                coef = np.linalg.lstsq(A[keep], rho[keep], rcond=None)[0]
                res = np.abs(rho - A @ coef)
                keep = res <= max(5 * np.median(res), 1e-9)
            a, c = coef
            if not (0 < a < 1.0):
                continue
            f = np.full(len(vm), np.nan)
            f[1:][ok] = (rho - c * xi) / a
            logf = np.log(np.clip(f, 1e-12, None))
            by_tensor[name] = logf
            logs.append(np.abs(logf[np.isfinite(logf)]))
            i = int(np.nanargmax(np.abs(logf)))
            if best is None or abs(logf[i]) > abs(best["log_factor"]):
                best = {"tensor": name, "index": i, "factor": float(f[i]), "log_factor": float(logf[i]),
                        "beta2": float(a), "numel": float((1 - a) / c) if c > 0 else None, "f": f}
        if best is None:
            return None
        allabs = np.concatenate(logs)
        best["noise"] = float(np.quantile(allabs, 0.99))  # the run's own rounding noise on log f
        best["log_f_by_tensor"] = by_tensor
        return best

    @cached_property
    def loss_log_ratio(self) -> np.ndarray:
        ll = np.log(np.where(self.loss > 0, self.loss, np.nan))
        return ll - _trailing_median_fast(ll)


# ---------------------------------------------------------------------------------------------------
# The tree's parts
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One node's measurement: the value, how it reads against the threshold, whether it matched."""

    matched: bool
    value: float | None
    shown: str
    index: int | None = None  # row index of the step the finding points at
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Node:
    id: str
    question: str
    metric: str
    panel: str
    threshold: str
    check: Callable[[Evidence], Finding]
    yes: str
    no: str | None = None  # None: the next node in order


@dataclass(frozen=True)
class Concepts:
    """What a learner's diagnosis and remediation of a leaf must each name (at least one concept of each):
    (concept, regular expression over the lower-cased text, English and Spanish). The grader reads them."""
    diagnosis: tuple[tuple[str, str], ...] = ()
    remediation: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Leaf:
    id: str
    cause: str
    title: str
    diagnosis: str
    remediation: str
    concepts: Concepts = Concepts()  # the key concepts a learner's words must name (lab/learner.py grades them)


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str
    items: tuple  # Nodes and Leaves, in order




def _miss(why: str) -> Finding:
    return Finding(False, None, f"not measurable ({why})")


# --- §1 did the run start? ---


def check_loss0_high(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(not math.isfinite(x) or x > T["loss0_high"], x, f"step-0 loss {fmt(x)}", 0)


def check_loss0_low(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(x < T["loss0_low"], x, f"step-0 loss {fmt(x)}", 0)


def check_loss0_band(ev: Evidence) -> Finding:
    x = ev.loss[0]
    return Finding(abs(x - ev.ln_v) > T["loss0_band"], x,
                   f"step-0 loss {fmt(x)}, ln V = {ev.ln_v:.3f} (V = {ev.vocab_size or '512, assumed'})", 0)


def _gn1(ev: Evidence) -> tuple[float, int]:
    """The first step's gradient norm (the course's "step 1" counts from 1; our rows count from 0): the only
    gradient that reflects the initialisation alone, before any update."""
    return ev.grad_norm[0], 0


def check_gn1_high(ev: Evidence) -> Finding:
    x, i = _gn1(ev)
    return Finding(math.isfinite(x) and x > T["gn1_high"], x, f"first-step (step {ev.step_at(i)}) grad norm {fmt(x)}", i)


def check_gn1_low(ev: Evidence) -> Finding:
    x, i = _gn1(ev)
    return Finding(math.isfinite(x) and x < T["gn1_low"], x, f"first-step (step {ev.step_at(i)}) grad norm {fmt(x)}", i)


# --- §2 is the LR schedule applying? ---


def _lr_range(ev: Evidence) -> tuple[float, float]:
    lr = ev.lr[np.isfinite(ev.lr)]
    return (float(lr.min()), float(lr.max())) if len(lr) else (math.nan, math.nan)


def check_lr_constant(ev: Evidence) -> Finding:
    lo, hi = _lr_range(ev)
    if len(ev.rows) < 3 or not hi > 0:
        return Finding(False, None, f"LR range [{fmt(lo)}, {fmt(hi)}]")
    rel = (hi - lo) / hi
    return Finding(rel < T["lr_flat"], rel, f"LR {fmt(lo)}..{fmt(hi)}, relative range {fmt(rel, 3)}")


def check_lr_zero(ev: Evidence) -> Finding:
    lo, hi = _lr_range(ev)
    return Finding(hi == 0, hi, f"largest LR {fmt(hi)}")


def check_no_warmup(ev: Evidence) -> Finding:
    lo, hi = _lr_range(ev)
    if len(ev.rows) < 10 or not hi > 0:
        return _miss("fewer than 10 steps")
    share = ev.lr[0] / hi
    return Finding(share >= T["warmup_share"], share,
                   f"first-step LR {fmt(ev.lr[0])} = {share:.0%} of the peak {fmt(hi)}", 0)


# --- §3 loss health ---


def check_nonfinite(ev: Evidence) -> Finding:
    i = ev.nonfinite_index
    if i is None:
        return Finding(False, 0, "no non-finite loss, gradient norm or count")
    return Finding(True, 1, f"first non-finite value at step {ev.step_at(i)}", i)


def _val_points(ev: Evidence) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(np.isfinite(ev.val_loss))
    return idx, ev.val_loss[idx]


def _train_smooth(ev: Evidence) -> np.ndarray:
    """Training loss, median over the surrounding 21 steps (one batch's loss is noisy)."""
    from numpy.lib.stride_tricks import sliding_window_view

    if len(ev.loss) < 21:
        return ev.loss.copy()
    padded = np.pad(ev.loss, 10, mode="edge")
    return np.nanmedian(sliding_window_view(padded, 21), axis=1)


def check_mask(ev: Evidence) -> Finding:
    """A model that sees the future in training drives its training loss far below the n-gram baseline but
    never learns causal prediction: validation (always causal) bottoms out near the baseline, then climbs
    while training loss keeps falling. A healthy model, even one that memorises its split, first gets
    validation well below the baseline; a short healthy run has not climbed yet."""
    idx, val = _val_points(ev)
    if not ev.ngram_val_loss or len(idx) < 3:
        return _miss("no n-gram baseline or fewer than 3 validation points")
    base = ev.ngram_val_loss
    train = _train_smooth(ev)
    best_at = int(np.argmin(val))
    best_val, last_val = float(val[best_at]), float(val[-1])
    below = np.flatnonzero(train < T["mask_train"] * base)
    shown = (f"smoothed training loss down to {fmt(float(np.nanmin(train)))} = {np.nanmin(train) / base:.2f} x "
             f"baseline {fmt(base)}; best validation {fmt(best_val)} = {best_val / base:.2f} x baseline at step "
             f"{ev.step_at(int(idx[best_at]))}, last {fmt(last_val)} = {last_val / best_val:.2f} x best")
    matched = len(below) > 0 and best_val > T["mask_val"] * base and last_val > T["mask_rise"] * best_val
    return Finding(matched, best_val / base, shown, int(idx[best_at]),
                   {"train_min": float(np.nanmin(train)), "best_val": best_val, "last_val": last_val,
                    "ngram_val_loss": base})


def check_not_learning(ev: Evidence) -> Finding:
    if len(ev.rows) < 20:
        return _miss("fewer than 20 steps")
    tail = ev.loss[len(ev.loss) - max(10, len(ev.loss) // 10):]
    end = float(np.nanmedian(tail))
    share = end / ev.loss[0]
    return Finding(share > T["not_learning"], share, f"final training loss {fmt(end)} = {share:.0%} of step-0 loss")


# --- §4 batch anomalies ---


def check_dup_rows(ev: Evidence) -> Finding:
    dup, rows = ev.batch("dup_rows"), ev.batch_rows
    share = np.where(rows > 1, dup / np.maximum(rows, 1), np.nan)
    if not np.isfinite(share).any():
        return _miss("no batch composition in the metrics")
    i = int(np.nanargmax(share))
    return Finding(share[i] >= T["dup_share"], float(share[i]),
                   f"largest duplicated-row share {share[i]:.0%} ({int(dup[i])} of {int(rows[i])} rows) "
                   f"at step {ev.step_at(i)}", i)


def check_data_outlier(ev: Evidence) -> Finding:
    """A loss jump in nats, not as a ratio: late in training the loss is near 0 and ratios blow up."""
    rare = ev.batch("rare_share")
    rare_ratio = rare / _trailing_median_fast(rare)
    excess = ev.loss - np.exp(_trailing_median_fast(np.log(np.where(ev.loss > 0, ev.loss, np.nan))))
    if not np.isfinite(excess).any():
        return _miss("too few steps")
    hit = (excess >= T["outlier_loss"]) & (rare_ratio >= T["outlier_rare"])
    i = int(np.nanargmax(np.where(hit, excess, np.nan))) if hit.any() else int(np.nanargmax(excess))
    return Finding(bool(hit[i]), float(excess[i]),
                   f"{'loss jump' if hit[i] else 'largest loss jump'} +{excess[i]:.2f} nats over its trailing median "
                   f"at step {ev.step_at(i)}, rare-token share x{fmt(rare_ratio[i], 3)} its median", i)


# --- §5 initialisation ---


def check_logit0(ev: Evidence) -> Finding:
    x = ev.logit_max[0]
    if not math.isfinite(x) and ev.rows[0].get("logit_max") is None and "logit_max" not in ev.rows[0]:
        return _miss("no logit_max in the metrics")
    act = ev.rows[0].get("act")
    return Finding(not math.isfinite(x) or x > T["logit0_high"], x,
                   f"step-0 largest |logit| {fmt(x)}; step-0 activations {act}", 0)


def check_came_from_s1(ev: Evidence) -> Finding:
    loss0, (gn, i) = ev.loss[0], _gn1(ev)
    off = not math.isfinite(loss0) or abs(loss0 - ev.ln_v) > T["loss0_band"] or (math.isfinite(gn) and gn > T["gn1_high"])
    return Finding(off, loss0, f"step-0 loss {fmt(loss0)} (ln V {ev.ln_v:.3f}), first-step grad norm {fmt(gn)}", 0)


# --- §6 optimizer state / update dynamics ---


def v_threshold(vf: dict) -> float:
    """§6.1's bound on |log f|: the larger of the fixed factor and the run's own rounding noise times a margin."""
    return max(math.log(T["v_factor"]), T["v_noise_mult"] * vf["noise"])


def check_v_factor(ev: Evidence) -> Finding:
    vf = ev.v_factor
    if vf is None:
        return _miss("no per-parameter optimizer statistics (telemetry: basic?)")
    thr = v_threshold(vf)
    return Finding(abs(vf["log_factor"]) > thr, vf["factor"],
                   f"{vf['tensor']}: v changed by x{fmt(vf['factor'])} beyond g^2 at step {ev.step_at(vf['index'])} "
                   f"(allowed x{math.exp(-thr):.4g}..x{math.exp(thr):.4g}; rounding noise {vf['noise']:.1e})",
                   vf["index"], {"tensor": vf["tensor"]})


def check_v_up(ev: Evidence) -> Finding:
    vf = ev.v_factor
    return Finding(vf["factor"] > 1, vf["factor"], f"factor x{fmt(vf['factor'])} on {vf['tensor']}", vf["index"])


# --- §7 gradient-norm spikes, before / after clipping ---


def _describe_gn(ev: Evidence, i: int) -> str:
    parts = [f"pre-clip grad norm {fmt(ev.grad_norm[i])} = x{math.exp(ev.gn_log_ratio[i]):.3g} its trailing median "
             f"at step {ev.step_at(i)}"]
    if ev.g_log_ratio is not None:
        parts.append(f"per-tensor g x{math.exp(np.nanmin(ev.g_log_ratio[i])):.3g}..x{math.exp(np.nanmax(ev.g_log_ratio[i])):.3g}")
    parts.append(f"loss x{math.exp(ev.loss_log_ratio[i]):.2f} its median; clipped norm {fmt(ev.grad_norm_clipped[i])}")
    return "; ".join(parts)


def check_gn_all_up(ev: Evidence) -> Finding:
    """Every tensor's gradient jumped together, more than the loss explains: the gradient was scaled, not
    the data changed (a natural spike comes with a surprising batch and moves a few tensors)."""
    if ev.g_log_ratio is None:
        return _miss("no per-parameter gradient norms (telemetry: basic?)")
    x = ev.g_all_up
    if not np.isfinite(x).any():
        return _miss("too few steps")
    i = int(np.nanargmax(x))
    return Finding(x[i] >= math.log(T["gn_all_up"]), float(math.exp(x[i])),
                   f"every tensor's g x{math.exp(x[i]):.3g} or more (loss-adjusted) at step {ev.step_at(i)}; "
                   + _describe_gn(ev, i), i)


def check_gn_all_down(ev: Evidence) -> Finding:
    if ev.g_log_ratio is None:
        return _miss("no per-parameter gradient norms (telemetry: basic?)")
    x = ev.g_all_down
    if not np.isfinite(x).any():
        return _miss("too few steps")
    i = int(np.nanargmin(x))
    return Finding(x[i] <= math.log(T["gn_all_down"]), float(math.exp(x[i])),
                   f"every tensor's g x{math.exp(x[i]):.3g} or less (loss-adjusted) at step {ev.step_at(i)}; "
                   + _describe_gn(ev, i), i)


def check_gn_huge(ev: Evidence) -> Finding:
    r = ev.gn_log_ratio - np.maximum(np.nan_to_num(ev.loss_log_ratio, nan=0.0), 0)
    if not np.isfinite(r).any():
        return _miss("too few steps")
    j = int(np.nanargmax(r))
    return Finding(r[j] >= math.log(T["gn_huge"]), float(math.exp(r[j])),
                   f"largest jump beyond the loss's: x{math.exp(r[j]):.3g}; " + _describe_gn(ev, j), j)


# ---------------------------------------------------------------------------------------------------
# THE TREE (edit here; then `minitrain stability-md` regenerates stability-check.md)
# ---------------------------------------------------------------------------------------------------

# Dashboard panels, cited by the number and title the panel registry (analysis/panels.py) gives them.
P_LOSS = cite("loss")
P_LR = cite("lr")
P_GN = cite("grad")
P_ACT = cite("logits", "act")
P_UPD = cite("vm", "v-factor")
P_G = cite("g", "g-all")
P_BATCH = cite("batch-shares") + " (duplicated rows / batch size, rare-token share)"

TREE: tuple[Section, ...] = (
    Section("§1", "Did the run start?",
            "An untrained model predicts every token about equally: loss near ln V, moderate gradients.", (
        Node("§1.1", "Is the step-0 loss above 8.0 (or non-finite)?", "loss at step 0", P_LOSS,
             f"> {T['loss0_high']}", check_loss0_high, yes="§5.1"),
        Node("§1.2", "Is the step-0 loss below 4.0?", "loss at step 0", P_LOSS,
             f"< {T['loss0_low']}", check_loss0_low, yes="§1.A"),
        Node("§1.3", "Is the step-0 loss outside ln V ± 0.5?", "loss at step 0 against ln(vocabulary size)", P_LOSS,
             f"|loss - ln V| > {T['loss0_band']}", check_loss0_band, yes="§5.1"),
        Node("§1.4", "Is the step-1 gradient norm above 100?", "grad_norm (pre-clip) of the first step (row step 0)", P_GN,
             f"> {T['gn1_high']:g}", check_gn1_high, yes="§5.1"),
        Node("§1.5", "Is the step-1 gradient norm below 0.001?", "grad_norm (pre-clip) of the first step (row step 0)", P_GN,
             f"< {T['gn1_low']:g}", check_gn1_low, yes="§1.B"),
        Leaf("§1.A", "bad_init", "not an untrained model",
             "The model already predicts well at step 0: it did not start from its initialisation "
             "(a checkpoint loaded by mistake, or the wrong seed).",
             "Check the manifest's seed and forked_from, start from a fresh initialisation, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("already trained / not untrained", r"already (?:trained|predict)|not (?:un)?trained|pre-?trained|ya entrenad"),
                     ("a checkpoint or the wrong seed", r"checkpoint|seed|semilla|punto de control"),
                 ),
                 remediation=(
                     ("fresh initialisation", r"fresh|re-?init|initiali[sz]|inicializ"),
                     ("check the seed / manifest", r"seed|manifest|semilla"),
                 ),
             )),
        Leaf("§1.B", "broken_mask", "no gradient signal",
             "The first gradients are almost zero: the loss mask selects no target tokens or the batches are "
             "degenerate (all padding).",
             "Check that the loss mask marks the English target tokens and that batches hold real rows, then re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("the loss mask", r"mask|m[aá]scara"),
                     ("no target tokens / padding", r"padding|no target|degenerate|relleno|vac[ií]"),
                 ),
                 remediation=(
                     ("fix the loss mask", r"mask|m[aá]scara"),
                     ("real rows in the batch", r"real rows|data|batch|datos|lote"),
                 ),
             )),
    )),
    Section("§2", "Is the LR schedule applying?",
            "The LR panel must show a linear warmup from near 0, then a cosine decay.", (
        Node("§2.1", "Is the LR constant and non-zero over the whole run?", "lr", P_LR,
             f"(max - min) / max < {T['lr_flat']:g}", check_lr_constant, yes="§2.A"),
        Node("§2.2", "Is the LR zero at every step?", "lr", P_LR, "max LR == 0", check_lr_zero, yes="§2.B"),
        Node("§2.3", "Does the first step already run at (near) the peak LR?", "lr at step 0 / max lr", P_LR,
             f">= {T['warmup_share']:g}", check_no_warmup, yes="§2.C"),
        Leaf("§2.A", "lr_schedule", "the scheduler never stepped",
             "The learning rate never changes: the scheduler is not stepped (or the optimizer is rebuilt every "
             "step), so there is neither warmup nor decay.",
             "Build the optimizer and scheduler once, step the scheduler after every optimizer step, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("the scheduler never steps", r"schedul\w*|never (?:changes|steps)|constant|constante|programador"),
                 ),
                 remediation=(
                     ("step the scheduler", r"schedul\w*|step|programador"),
                     ("build the optimizer once", r"optimi[sz]er|optimizador"),
                 ),
             )),
        Leaf("§2.B", "lr_schedule", "the learning rate is zero",
             "The learning rate is zero at every step: warmup multiplies a base LR of 0, so nothing trains.",
             "Set a non-zero lr_max (the course default is 3e-4) and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("the learning rate is zero", r"(?:lr|learning rate|tasa)\W+(?:\w+\W+){0,3}(?:zero|0\b|cero)|zero (?:lr|learning rate)|base lr"),
                 ),
                 remediation=(
                     ("a non-zero lr", r"non-?zero|lr_max|3e-4|learning rate|tasa de aprendizaje"),
                 ),
             )),
        Leaf("§2.C", "no_warmup", "no warmup",
             "Training starts at the peak learning rate with no warmup ramp, so the first updates are as large "
             "as the schedule ever allows while Adam's moment estimates are still poor.",
             "Restore the linear warmup (warmup_steps=100) and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("no warmup", r"warm[- ]?up|calentamiento"),
                     ("peak learning rate from step 0", r"peak|max(?:imum)?|full (?:lr|learning rate)|m[aá]xim"),
                 ),
                 remediation=(
                     ("restore the warmup", r"warm[- ]?up|calentamiento|ramp"),
                 ),
             )),
    )),
    Section("§3", "Is the loss healthy?",
            "Non-finite values end a run; a training loss that falls while validation does not means the "
            "model sees something at training time that it cannot see at validation time.", (
        Node("§3.1", "Is any loss, gradient norm or non-finite count non-finite / non-zero?",
             "loss, grad_norm, nonfinite", P_LOSS, "non-finite values > 0", check_nonfinite, yes="§3.A"),
        Node("§3.2", "Does training loss fall below half the n-gram baseline while validation never gets 15% "
             "below it and then climbs?", "train loss (21-step median), val_loss (best, last), n-gram baseline "
             "(dashed line)", P_LOSS, f"train < {T['mask_train']:g} x baseline, best val > {T['mask_val']:g} x "
             f"baseline, last val > {T['mask_rise']:g} x best val", check_mask, yes="§3.B"),
        Node("§3.3", "Has the training loss failed to fall?", "median training loss of the last 10% of steps / "
             "step-0 loss", P_LOSS, f"> {T['not_learning']:g}", check_not_learning, yes="§3.C"),
        Leaf("§3.A", "non_finite", "non-finite values",
             "The loss or the gradients became NaN/Inf, so every later update is garbage.",
             "Resume from the last checkpoint before the first non-finite step with a lower LR or tighter "
             "clipping, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("NaN / Inf", r"\bnan\b|\binf\b|non[- ]finite|infinit|no finito"),
                 ),
                 remediation=(
                     ("resume from a checkpoint before it", r"checkpoint|resume|rewind|punto de control|reanudar"),
                     ("lower lr or tighter clipping", r"lower (?:the )?(?:lr|learning rate)|clip|recort|reduc"),
                 ),
             )),
        Leaf("§3.B", "broken_mask", "broken causal mask",
             "Training loss collapses far below the n-gram baseline while validation (always causal) stalls "
             "near it and then climbs: the attention mask lets positions see the tokens they must predict.",
             "Restore the causal (lower-triangular) attention mask in training (causal_mask=true) and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("the causal attention mask", r"causal|mask|m[aá]scara"),
                     ("sees future tokens", r"future|futur|leak|fuga"),
                 ),
                 remediation=(
                     ("restore the causal mask", r"causal|mask|m[aá]scara|triangular"),
                 ),
             )),
        Leaf("§3.C", "unknown", "not learning",
             "The training loss does not fall although the LR schedule applies: the model or data pipeline is "
             "broken in a way this tree does not name.",
             "Overfit a single batch to find the broken piece (data, loss, optimizer wiring), then re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("not learning", r"not (?:learning|falling|decreas)|no aprende|does not fall|flat|plana"),
                 ),
                 remediation=(
                     ("overfit one batch / debug the pipeline", r"overfit|single batch|one batch|pipeline|debug|sobreajust|un solo lote"),
                 ),
             )),
    )),
    Section("§4", "Is there a batch anomaly?",
            "A batch made of one repeated sentence (or of rare rows) has a high loss of its own and puts the "
            "whole gradient on the rare rows of the embedding and output head.", (
        Node("§4.1", "Does some batch repeat one row for at least half of its rows?",
             "batch.dup_rows / batch size", P_BATCH, f">= {T['dup_share']:g}", check_dup_rows, yes="§4.A"),
        Node("§4.2", "Does a loss jump coincide with a batch of unusually rare tokens?",
             "loss - trailing median (nats) and batch.rare_share / trailing median", P_LOSS + "; " + P_BATCH,
             f"loss >= +{T['outlier_loss']:g} nat and rare share >= {T['outlier_rare']:g}x", check_data_outlier,
             yes="§4.A"),
        Leaf("§4.A", "bad_batch", "bad batch / data outlier",
             "One batch is an outlier (repeated or rare sentences): its own loss is high and its gradient "
             "lands on rarely-updated embedding and output rows, whose small v makes the step large.",
             "Skip that batch (rewind to the checkpoint before it and drop it from the data order, as PaLM "
             "and Lightning do), deduplicate the data, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("the batch", r"batch|lote"),
                     ("duplicated rows or rare tokens", r"duplicat|repeat|copies|same (?:sentence|row)|rare|long[- ]tail|outlier|repetid|copias|raro|cola larga|misma frase"),
                 ),
                 remediation=(
                     ("skip or filter the batch", r"skip|filter|drop|remove|exclu|dedup|salt|filtr|quit|elimin|descart"),
                 ),
             )),
    )),
    Section("§5", "Is the initialisation sane?",
            "Reached from §1 when the run did not start like an untrained model, and walked in order otherwise.", (
        Node("§5.1", "Is the step-0 largest |logit| above 10?", "logit_max at step 0 (and act)", P_ACT,
             f"> {T['logit0_high']:g}", check_logit0, yes="§5.A"),
        Node("§5.2", "Did §1 send you here (step-0 loss off ln V, or step-1 grad norm > 100)?",
             "loss and grad_norm of the first step", P_LOSS,
             f"|loss - ln V| > {T['loss0_band']} or grad norm > {T['gn1_high']:g}", check_came_from_s1,
             yes="§5.B"),
        Leaf("§5.A", "bad_init", "weights initialised too large",
             "The untrained model already outputs huge logits and activations: the weights (or the LM-head "
             "bias) start far too large, so the loss starts far above ln V.",
             "Initialise weights with std 0.02 (init_scale=1) and the LM-head bias at zero, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("weights initialised too large", r"init\w*|too large|scale|inicializ|grande"),
                     ("huge logits / activations", r"logit|activation|activaci"),
                 ),
                 remediation=(
                     ("std 0.02 init / zero LM-head bias", r"0\.02|std|init_scale|bias|inicializ|init"),
                 ),
             )),
        Leaf("§5.B", "bad_init", "wrong starting loss",
             "The step-0 loss or gradient is off although the logits are small: the initialisation or the loss "
             "reduction (sum instead of mean) is wrong.",
             "Check the init and that the loss is a token mean over target tokens, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("initialisation or loss reduction", r"init\w*|reduction|sum|mean|inicializ|reducci|suma|media"),
                 ),
                 remediation=(
                     ("fix init / token-mean loss", r"init\w*|mean|reduction|inicializ|media"),
                 ),
             )),
    )),
    Section("§6", "Is the optimizer state consistent?",
            "Adam's second moment obeys v_t = β2·v_(t-1) + (1-β2)·g_t² exactly, so the per-tensor mean of v "
            "(vm) must follow from the logged gradients; the walker fits β2 and each tensor's size from the "
            "run itself and measures the factor f by which v moved beyond what g² explains.", (
        Node("§6.1", "Did some tensor's v jump or drop in one step beyond what its gradient explains?",
             "params[*].vm against params[*].g, grad_norm_clipped / grad_norm", P_UPD,
             f"f outside [1/{T['v_factor']:g}, {T['v_factor']:g}] and > {T['v_noise_mult']:g}x rounding noise",
             check_v_factor, yes="§6.2", no="§7.1"),
        Node("§6.2", "Did v go up (f > 1)?", "the factor f of §6.1", P_UPD, "f > 1", check_v_up,
             yes="§6.A", no="§6.B"),
        Leaf("§6.A", "optimizer_state_corruption", "second moment inflated: a stall",
             "One tensor's Adam v was multiplied up at one step, so its updates shrink by about sqrt(f) and "
             "recover as v decays at β2 per step: a stall of that tensor, not a spike.",
             "Reload the last checkpoint before the step (or reset that tensor's moments) and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("Adam's second moment v", r"second moment|\bv\b|exp_avg_sq|adam|optimi[sz]er state|segundo momento|estado del optimizador"),
                     ("inflated: updates shrink, a stall", r"inflat|multipl|x\s?\d|larger|stall|shrink|infla|aument|estanc"),
                 ),
                 remediation=(
                     ("reload a checkpoint / reset the moments", r"checkpoint|reload|rewind|reset|restore|punto de control|recarg|restaur|reinici"),
                 ),
             )),
        Leaf("§6.B", "optimizer_state_corruption", "second moment deflated: the spike mechanism",
             "One tensor's Adam v was shrunk at one step, so v under-estimates g² and that tensor's updates "
             "grow by about 1/sqrt(f) for the next steps: the known loss-spike mechanism.",
             "Reload the last checkpoint before the step (or reset that tensor's moments; StableAdamW-style "
             "update clipping guards against it) and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("Adam's second moment v", r"second moment|\bv\b|exp_avg_sq|adam|optimi[sz]er state|segundo momento|estado del optimizador"),
                     ("deflated: updates grow", r"deflat|shrunk|smaller|divid|spike|grow|reduc|pico|crec"),
                 ),
                 remediation=(
                     ("reload a checkpoint / reset the moments", r"checkpoint|reload|rewind|reset|restore|stableadamw|update clip|punto de control|recarg|restaur|reinici"),
                 ),
             )),
    )),
    Section("§7", "Is there a gradient-norm spike (before / after clipping)?",
            "Clipping at 1.0 engages on every step of a healthy run here (pre-clip norm 2-5), so 'clipped' "
            "means nothing alone and the clipped norm hides every spike: read the pre-clip norm. Natural "
            "spikes late in training reach several times the median but move a few tensors, not all.", (
        Node("§7.1", "Did every tensor's gradient norm jump at least 2x its own trailing median at one step, "
             "beyond the batch loss's own jump?",
             "min over tensors of params[*].g / its 50-step trailing median, divided by loss / its trailing "
             "median when that is > 1", P_GN + "; " + P_G, f">= {T['gn_all_up']:g}x", check_gn_all_up, yes="§7.A"),
        Node("§7.2", "Did every tensor's gradient norm fall to 0.4x its trailing median at one step, beyond the "
             "loss's own fall?", "max over tensors of params[*].g / its trailing median, divided by loss / its "
             "trailing median when that is < 1", P_GN + "; " + P_G, f"<= {T['gn_all_down']:g}x", check_gn_all_down,
             yes="§7.B"),
        Node("§7.3", "Is there any pre-clip jump of 30x its trailing median beyond what the loss explains?",
             "(grad_norm / trailing median) / (loss / its trailing median, if > 1)",
             P_GN, f">= {T['gn_huge']:g}x", check_gn_huge, yes="§7.C", no="§8.A"),
        Leaf("§7.A", "gradient_explosion", "transient gradient explosion",
             "Every gradient was multiplied by one common factor at one step; clipping cut the update back to "
             "its usual size, so the spike lives in the pre-clip norm only and the run continues unharmed.",
             "Keep gradient clipping on (or clip adaptively, as ZClip does) and find what scaled the gradients "
             "at that step (loss scaling, a reduction bug); no rewind is needed.",
             concepts=Concepts(
                 diagnosis=(
                     ("the gradient norm spiked", r"gradient|grad[- ]norm|gradiente"),
                     ("scaled at one step, clipped", r"scal|multipl|x\s?\d|clip|spike|explo|escal|recort|pico"),
                 ),
                 remediation=(
                     ("keep (adaptive) clipping", r"clip|zclip|recort"),
                     ("find what scaled the gradients", r"loss scal|reduction|scal|find|escal|reducci"),
                 ),
             )),
        Leaf("§7.B", "gradient_explosion", "transient gradient collapse",
             "Every gradient was multiplied by one common small factor at one step (the same fault as an "
             "explosion, downwards): clipping did not engage and that step's update was smaller.",
             "Find what scaled the gradients at that step (loss scaling, a reduction bug); no rewind is needed.",
             concepts=Concepts(
                 diagnosis=(
                     ("the gradient norm collapsed", r"gradient|grad[- ]norm|gradiente"),
                     ("scaled down at one step", r"scal|multipl|small|collapse|shr|escal|colaps|peque"),
                 ),
                 remediation=(
                     ("find what scaled the gradients", r"loss scal|reduction|scal|find|escal|reducci"),
                 ),
             )),
        Leaf("§7.C", "unknown", "unexplained gradient spike",
             "A gradient-norm spike far beyond natural variation that neither the batch, the optimizer state "
             "nor a uniform scaling explains.",
             "Rewind to the checkpoint before the spike, replay the same batches to tell a transient from a "
             "persistent fault, and re-run.",
             concepts=Concepts(
                 diagnosis=(
                     ("an unexplained gradient spike", r"gradient|spike|grad[- ]norm|gradiente|pico"),
                 ),
                 remediation=(
                     ("rewind and replay", r"rewind|checkpoint|replay|retroced|punto de control|repet"),
                 ),
             )),
    )),
    Section("§8", "Verdict", "Reached only when no question above matched.", (
        Leaf("§8.A", "healthy", "healthy",
             "Nothing in the run's metrics departs from healthy training beyond natural variation.",
             "No fix needed; keep the run as the reference for later comparisons.",
             concepts=Concepts(
                 diagnosis=(
                     ("healthy", r"healthy|no anomal|nothing wrong|sano|sin anomal|normal"),
                 ),
                 remediation=(
                     ("no fix needed", r"no (?:fix|change|action)|nothing|keep|reference|ninguna|nada|mantener"),
                 ),
             )),
    )),
)

ITEMS: dict[str, Node | Leaf] = {it.id: it for s in TREE for it in s.items}
SECTIONS: dict[str, Section] = {s.id: s for s in TREE}
ORDER: list[str] = [it.id for s in TREE for it in s.items]


def _next_node(node_id: str) -> str:
    """The node after `node_id` in reading order, skipping leaves."""
    i = ORDER.index(node_id)
    for nid in ORDER[i + 1:]:
        if isinstance(ITEMS[nid], Node):
            return nid
    return "§8.A"


def iter_nodes():
    """Every section, question and leaf as a plain dict, in reading order. `parent` is the section for a
    section's first-level questions and the question whose "yes" (or explicit "no") leads to an item within
    the same section otherwise (the learner workflow uses it to check that a cited node lies on the way to a leaf)."""
    for s in TREE:
        yield {"id": s.id, "kind": "section", "title": s.title, "parent": None}
        for it in s.items:
            parent = next((n.id for n in s.items if isinstance(n, Node) and it.id in (n.yes, n.no)), s.id)
            if isinstance(it, Node):
                yield {"id": it.id, "kind": "question", "title": it.question, "parent": parent,
                       "metric": it.metric, "panel": it.panel, "threshold": it.threshold,
                       "yes": it.yes, "no": it.no or _next_node(it.id)}
            else:
                yield {"id": it.id, "kind": "leaf", "title": it.title, "parent": parent, "cause": it.cause,
                       "diagnosis": it.diagnosis, "remediation": it.remediation,
                       "concepts": {"diagnosis": it.concepts.diagnosis, "remediation": it.concepts.remediation}}


def _validate_tree() -> None:
    for it in ITEMS.values():
        if isinstance(it, Leaf):
            assert it.cause in CAUSES, it
            assert it.concepts.diagnosis and it.concepts.remediation, f"{it.id} names no key concepts"
        else:
            for target in (it.yes, it.no):
                assert target is None or target in ITEMS, (it.id, target)


_validate_tree()


# ---------------------------------------------------------------------------------------------------
# Walking the tree
# ---------------------------------------------------------------------------------------------------


def walk(ev: Evidence) -> dict:
    """Walk from §1; return the verdict and the path of findings."""
    # ratios over zeros and all-NaN windows are expected in broken runs: they read as "no", not as warnings
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _walk(ev)


def _walk(ev: Evidence) -> dict:
    path = []
    current = "§1.1"
    seen = set()
    while isinstance(ITEMS[current], Node):
        node = ITEMS[current]
        assert current not in seen, f"loop in the tree at {current}"
        seen.add(current)
        try:
            f = node.check(ev)
        except (IndexError, ValueError, ZeroDivisionError) as e:  # a metric the run lacks: the question cannot match
            f = _miss(f"{type(e).__name__}")
        target = node.yes if f.matched else (node.no or _next_node(current))
        path.append({"node": node.id, "question": node.question, "metric": node.metric, "panel": node.panel,
                     "threshold": node.threshold, "measured": f.shown, "value": _jsonable(f.value),
                     "answer": "yes" if f.matched else "no", "step": ev.step_at(f.index), "next": target,
                     "_finding": f})
        current = target
    leaf = ITEMS[current]
    decisive = next((p for p in reversed(path) if p["answer"] == "yes"), None)
    anomaly = _anomaly_step(leaf, path, ev)
    evidence = leaf_evidence(leaf, path, ev, anomaly)
    for p in path:
        p.pop("_finding")
    return {"leaf": leaf.id, "cause": leaf.cause, "title": leaf.title, "anomaly_step": anomaly,
            "diagnosis": leaf.diagnosis, "remediation": leaf.remediation,
            "path": [p["node"] for p in path] + [leaf.id], "decided_by": decisive["node"] if decisive else None,
            "evidence": evidence, "walk": path, **({"note": ev.note} if ev.note else {})}


def _jsonable(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _anomaly_step(leaf: Leaf, path: list[dict], ev: Evidence) -> int | None:
    """The step the verdict points at: the matched finding's step, for causes that live at one step."""
    if leaf.cause in ("healthy",):
        return None
    for p in reversed(path):
        if p["answer"] == "yes" and p["step"] is not None:
            return p["step"]
    return None


def _window(ev: Evidence, i: int, before: int = 5, after: int = 5) -> slice:
    return slice(max(0, i - before), min(len(ev.rows), i + after + 1))


def _curve(ev: Evidence, arr: np.ndarray, sl: slice) -> dict:
    return {str(int(s)): _jsonable(v) for s, v in zip(ev.steps[sl], arr[sl])}


def leaf_evidence(leaf: Leaf, path: list[dict], ev: Evidence, step: int | None) -> dict:
    """The numbers a reader checks the verdict against, around the anomaly step."""
    out: dict = {"steps_in_run": len(ev.rows)}
    finding = next((p["_finding"] for p in reversed(path) if p["answer"] == "yes"), None)
    i = finding.index if finding is not None else None
    if leaf.cause == "healthy":
        r = ev.gn_log_ratio
        if np.isfinite(r).any():
            j = int(np.nanargmax(r))
            out["largest_grad_norm_jump"] = {"step": ev.step_at(j), "ratio": _jsonable(math.exp(r[j]))}
            if np.isfinite(ev.g_all_up).any():
                out["largest_all_tensor_jump"] = _jsonable(math.exp(np.nanmax(ev.g_all_up)))
        vf = ev.v_factor
        if vf:
            out["largest_v_factor"] = {"tensor": vf["tensor"], "step": ev.step_at(vf["index"]),
                                       "factor": vf["factor"], "rounding_noise": vf["noise"]}
        return out
    if i is None:
        return out
    sl = _window(ev, i)
    out["loss"] = _curve(ev, ev.loss, sl)
    out["grad_norm"] = _curve(ev, ev.grad_norm, sl)
    out["lr"] = _curve(ev, ev.lr, sl)
    if leaf.cause == "bad_batch":
        b = ev.rows[i].get("batch") or {}
        out["batch_at_step"] = {k: b.get(k) for k in ("dup_rows", "rare_share", "top_token_share", "distinct_tokens")}
        out["loss_ratio_to_trailing_median"] = _jsonable(math.exp(ev.loss_log_ratio[i]))
        out["grad_norm_ratio_to_trailing_median"] = _jsonable(math.exp(ev.gn_log_ratio[i]))
        if ev.g_log_ratio is not None:
            ratios = {n: _jsonable(math.exp(x)) for n, x in zip(ev.param_names, ev.g_log_ratio[i]) if np.isfinite(x)}
            out["g_ratio_by_tensor"] = dict(sorted(ratios.items(), key=lambda kv: -(kv[1] or 0))[:5])
    elif leaf.cause == "optimizer_state_corruption":
        vf = ev.v_factor
        name = vf["tensor"]
        out["tensor"] = name
        out["v_factor"] = vf["factor"]
        out["fitted_beta2"] = round(vf["beta2"], 5)
        out["vm"] = _curve(ev, ev.param(name, "vm"), _window(ev, i, 2, 5))
        for key in ("r", "ur"):
            x = ev.param(name, key)
            med = _trailing_median_fast(x)
            out[f"{key}_ratio_at_step"] = _jsonable(x[i] / med[i]) if np.isfinite(med[i]) and med[i] > 0 else None
        # how the excess decays: the v the tensor would have had, rebuilt from the logged gradients
        excess = _v_excess(ev, vf, i)
        out["v_over_uncorrupted"] = excess
        at_k = excess.get(str(int(ev.steps[i])))
        # Adam's step scales as 1/sqrt(v): how much larger (or smaller) this tensor's update was at the step
        out["update_scale_at_step"] = _jsonable(1 / math.sqrt(at_k)) if at_k else None
        others = [abs(lf[i]) for n, lf in vf["log_f_by_tensor"].items() if n != name and np.isfinite(lf[i])]
        out["other_tensors_largest_factor_at_step"] = _jsonable(math.exp(max(others))) if others else None
    elif leaf.cause == "gradient_explosion":
        out["grad_norm_ratio_to_trailing_median"] = _jsonable(math.exp(ev.gn_log_ratio[i]))
        out["grad_norm_clipped"] = _curve(ev, ev.grad_norm_clipped, sl)
        if ev.g_log_ratio is not None:
            xs = ev.g_log_ratio[i]
            out["g_ratio_min_median_max"] = [_jsonable(math.exp(np.nanmin(xs))), _jsonable(math.exp(np.nanmedian(xs))),
                                              _jsonable(math.exp(np.nanmax(xs)))]
    elif leaf.cause == "no_warmup":
        out["loss_max_first_100_steps"] = _jsonable(np.nanmax(ev.loss[:100]))
    elif leaf.cause == "broken_mask" and finding.extra:
        out.update({k: _jsonable(v) for k, v in finding.extra.items()})
        idx, val = _val_points(ev)
        train = _train_smooth(ev)
        out["val_loss"] = {str(int(ev.steps[j])): _jsonable(v) for j, v in zip(idx, val)}
        out["train_loss_smoothed"] = {str(int(ev.steps[j])): _jsonable(train[j]) for j in idx}
    elif leaf.cause == "bad_init":
        out["step0"] = {k: ev.rows[0].get(k) for k in ("loss", "grad_norm", "logit_max", "act")}
    return out


def _v_excess(ev: Evidence, vf: dict, i: int) -> dict:
    """vm / the vm the tensor would have had without the step-i change, at a few steps after it."""
    name, a = vf["tensor"], vf["beta2"]
    vm, g = ev.param(name, "vm"), ev.param(name, "g")
    clip = ev.grad_norm_clipped / ev.grad_norm
    c = (1 - a) / vf["numel"] if vf.get("numel") else None
    if c is None or i < 1:
        return {}
    clean = a * vm[i - 1] + c * (g[i] * clip[i]) ** 2
    out = {}
    for t in range(i, min(len(vm), i + 201)):
        if t > i:
            clean = a * clean + c * (g[t] * clip[t]) ** 2
        k = t - i
        if k in (0, 1, 5, 10, 20, 50, 100, 200):
            out[str(int(ev.steps[t]))] = _jsonable(vm[t] / clean) if clean > 0 else None
    return out


# ---------------------------------------------------------------------------------------------------
# Loading a run, comparing with a baseline
# ---------------------------------------------------------------------------------------------------

REQUIRED = ("step", "loss", "lr", "grad_norm")


def load_evidence(run: Path) -> Evidence:
    """The walker's inputs from a run folder: metrics.jsonl (required), tokenizer.json and the n-gram
    baseline (optional). Nothing else of the folder is read."""
    run = Path(run)
    if not run.is_dir():
        raise UserError(f"{run} is not a folder; give a run folder (e.g. experiments/18-baseline)")
    rows, note = reader.read_metrics(run / reader.METRICS)
    if not rows:
        raise UserError(f"{run / 'metrics.jsonl'} is empty; train the run first (minitrain train --out {run})")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or any(k not in r for k in REQUIRED):
            raise UserError(f"{run / 'metrics.jsonl'} row {i + 1} is not a minitrain metrics row "
                            f"(needs {', '.join(REQUIRED)}); re-create the run")
    steps = [r["step"] for r in rows]
    if not all(isinstance(s, int) for s in steps) or steps != sorted(set(steps)):
        raise UserError(f"{run / 'metrics.jsonl'} has missing, repeated or unordered steps; re-create the run")
    # the walker must not see which injection ran: drop the field before anything reads the rows
    rows = [{k: v for k, v in r.items() if k != "injected"} for r in rows]
    return Evidence(rows, vocab_size=_vocab_size(run), ngram_val_loss=_ngram(run), note=note)


def _vocab_size(run: Path) -> int | None:
    path = run / "tokenizer.json"
    if not path.exists():
        return None
    try:
        tok = json.loads(path.read_text())
        vocab = tok.get("model", {}).get("vocab", {})
        ids = set(vocab.values()) | {t.get("id") for t in tok.get("added_tokens", [])}
        return len(ids) or None
    except (OSError, ValueError, AttributeError):
        return None


def _ngram(run: Path) -> float | None:
    """The n-gram baseline's validation loss (results.json, else the manifest's ngram_baseline only)."""
    for value in (reader.results_of(run).get("ngram_val_loss"),
                  (reader.manifest_of(run).get("ngram_baseline") or {}).get("val_loss")):
        if isinstance(value, (int, float)):
            return float(value)
    return None


def compare(ev: Evidence, base: Evidence, step: int | None) -> dict:
    """Difference curves against a reference run: where the two first differ and by how much."""
    n = min(len(ev.rows), len(base.rows))
    if n == 0:
        return {}
    same = ev.steps[:n] == base.steps[:n]
    if not same.all():
        return {"note": "the runs' steps do not line up; no difference curves"}
    d_loss = ev.loss[:n] - base.loss[:n]
    r_gn = ev.grad_norm[:n] / base.grad_norm[:n]
    differs = np.flatnonzero(~np.isclose(ev.loss[:n], base.loss[:n], rtol=0, atol=0, equal_nan=True)
                             | ~np.isclose(ev.grad_norm[:n], base.grad_norm[:n], rtol=0, atol=0, equal_nan=True))
    first = int(ev.steps[differs[0]]) if len(differs) else None
    out = {"steps_compared": n, "first_differing_step": first}
    center = step if step is not None else first
    if center is not None:
        i = int(np.searchsorted(ev.steps[:n], center))
        sl = _window(ev, i, 5, 20)
        out["loss_minus_baseline"] = _curve(ev, d_loss, sl)
        out["grad_norm_over_baseline"] = _curve(ev, r_gn, sl)
        names = [nm for nm in ev.param_names if nm in base.param_names]
        if names and i < n:
            vr = {nm: _jsonable(ev.param(nm, "vm")[i] / base.param(nm, "vm")[i]) for nm in names}
            out["vm_over_baseline_at_step"] = dict(sorted(vr.items(), key=lambda kv: -abs(math.log(kv[1] or 1)))[:5])
    out["max_abs_loss_diff"] = _jsonable(np.nanmax(np.abs(d_loss))) if np.isfinite(d_loss).any() else None
    iv = np.flatnonzero(np.isfinite(ev.val_loss[:n]) & np.isfinite(base.val_loss[:n]))
    if len(iv):
        out["final_val_loss_diff"] = _jsonable(ev.val_loss[iv[-1]] - base.val_loss[iv[-1]])
    return out


def diagnose_run(run: Path, baseline: Path | None = None) -> dict:
    """Walk the tree over RUN's metrics (and compare with BASELINE's when given)."""
    ev = load_evidence(run)
    result = walk(ev)
    if baseline is not None:
        result["evidence"]["baseline"] = {"run": str(baseline), **compare(ev, load_evidence(baseline),
                                                                          result["anomaly_step"])}
    return result


DIAGNOSIS_NAME = reader.DIAGNOSIS


def write_diagnosis(run: Path, result: dict) -> Path:
    """RUN/diagnosis.json: the verdict the dashboard shows (leaf, cause, anomaly_step, ...), atomically."""
    path = Path(run) / DIAGNOSIS_NAME
    files.atomic_write_text(path, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return path


def format_report(result: dict, run_name: str) -> str:
    lines = [f"stability check of {run_name}: walk from §1, first leaf wins", ""]
    for p in result["walk"]:
        lines.append(f"{p['node']}  {p['question']}")
        lines.append(f"      {p['metric']} [{p['panel']}]")
        lines.append(f"      measured: {p['measured']}   threshold: {p['threshold']}   -> {p['answer']}, go to {p['next']}")
    lines += ["", f"{result['leaf']}  {result['title']}  (cause: {result['cause']}"
                  + (f", step {result['anomaly_step']})" if result["anomaly_step"] is not None else ")"),
              f"  diagnosis:   {result['diagnosis']}", f"  remediation: {result['remediation']}"]
    ev = result["evidence"]
    keys = [k for k in ev if k not in ("steps_in_run", "baseline")]
    if keys:
        lines.append("  evidence:")
        for k in keys:
            lines.append(f"    {k}: {_short(ev[k])}")
    if "baseline" in ev:
        lines.append(f"  against baseline {ev['baseline'].get('run')}:")
        for k, v in ev["baseline"].items():
            if k != "run":
                lines.append(f"    {k}: {_short(v)}")
    if result.get("note"):
        lines.append(f"  note: {result['note']}")
    lines.append("")
    lines.append("Apply the fix, re-run, and re-walk from §1.")
    return "\n".join(lines)


def _short(v) -> str:
    if isinstance(v, float):
        return fmt(v, 5)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)


# ---------------------------------------------------------------------------------------------------
# stability-check.md, generated from TREE
# ---------------------------------------------------------------------------------------------------

MD_NAME = "stability-check.md"


def render_markdown() -> str:
    out = ["# Stability check", "",
           "<!-- generated from src/minitrain/analysis/stability.py by `minitrain stability-md`; do not edit by hand -->", "",
           f"**{RULE}**", "",
           "Each question names the metric to read, the dashboard panel that shows it, and a numeric threshold. "
           "Answer it, follow *yes* or *no*, and stop at the first leaf (a diagnosis). `minitrain diagnose RUN` "
           "walks the same tree over a run's metrics and prints the path with every measured value.", "",
           "Ratios to a trailing median use the 50 steps before the step in question.", ""]
    for s in TREE:
        out += [f"## {s.id} {s.title}", "", s.intro, ""]
        for it in s.items:
            if isinstance(it, Node):
                no = it.no or _next_node(it.id)
                out += [f"- **{it.id}** {it.question}",
                        f"  - metric: {it.metric}; dashboard: {it.panel}",
                        f"  - threshold: {it.threshold}",
                        f"  - yes → {_ref(it.yes)}; no → {_ref(no)}"]
        leaves = [it for it in s.items if isinstance(it, Leaf)]
        if leaves:
            out.append("")
            for lf in leaves:
                out += [f"- **{lf.id} Leaf: {lf.title}** (cause `{lf.cause}`)",
                        f"  - diagnosis: {lf.diagnosis}",
                        f"  - remediation: {lf.remediation}"]
        out.append("")
    out += ["---", "", f"{RULE}", ""]
    return "\n".join(out)


def _ref(target: str) -> str:
    it = ITEMS[target]
    return f"**{target}** (leaf: {it.title})" if isinstance(it, Leaf) else f"**{target}**"


def write_markdown(root: Path, check: bool = False) -> tuple[Path, bool]:
    """Write (or, with check, only compare) ROOT/stability-check.md. Returns (path, up_to_date)."""
    path = Path(root) / MD_NAME
    text = render_markdown()
    current = path.read_text() if path.exists() else None
    if check:
        return path, current == text
    if current != text:
        files.atomic_write_text(path, text)
    return path, True
