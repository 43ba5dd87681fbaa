"""Evidence: a run's metrics as arrays, and the statistics the stability checks share.

The walker reads ONLY metrics.jsonl, plus the run's tokenizer.json (vocabulary size, for ln V) and the n-gram
baseline from results.json / manifest.json. It never reads the injection settings or record, the metrics
rows' `injected` field (dropped on load), or the folder's name: a diagnosis must come from what training did.

Statistics are ratios to trailing robust statistics (a 50-step trailing median), so they do not depend on the
loss or norm scale of one run.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from minitrain.analysis.definitions import capped_norm, untrained_loss
from minitrain.analysis.thresholds import MIN_HISTORY, WINDOW, T
from minitrain.core.config import TrainConfig
from minitrain.core.errors import UserError
from minitrain.core.fmt import fmt
from minitrain.run import reader
from minitrain.run.nonfinite import is_non_finite


# ln V of a run minitrain recorded without a vocabulary size (no tokenizer.json, no config): the course's default
# vocabulary. An imported run never assumes it: the checks that need V are not testable there ("vocab").
ASSUMED_VOCAB = TrainConfig.vocab_size
# facts of how a run was logged that checks need (Node.needs), known for minitrain's own runs (Evidence.knows):
# the vocabulary size, the batch size, the intended LR schedule, one row per optimizer step (a loss not averaged
# over an interval), a first row that is the untrained model's, and a run long enough to judge the LR's size
LOGGING_FACTS = ("vocab", "batch_size", "schedule", "every_step", "rows", "step0", "first_lr", "long_run")


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def nanmedian(x: np.ndarray) -> np.ndarray:
    """np.nanmedian(x, axis=-1) with the same bits for rows shorter than 600 (where numpy takes a masked-array
    path, ~10x slower on a run's [steps, 50] windows): each row sorted (NaN sorts last), the mean of its middle
    two finite values (the middle one twice when their count is odd); NaN where a row has no finite value."""
    s = np.sort(x, axis=-1)
    n = np.count_nonzero(~np.isnan(s), axis=-1)
    lo = np.take_along_axis(s, (np.maximum(n - 1, 0) // 2)[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(s, np.minimum(n // 2, max(s.shape[-1] - 1, 0))[..., None], axis=-1)[..., 0]
    with np.errstate(all="ignore"):  # -inf + inf is NaN, as in numpy's
        # also for one middle value, as numpy's masked path (x itself unless x + x overflows); + 0.0: a -0.0
        # median comes out as numpy's, 0.0
        med = (lo + hi) / 2 + 0.0
    return np.where(n > 0, med, np.nan)


def trailing_median(x: np.ndarray, window: int = WINDOW, min_history: int = MIN_HISTORY) -> np.ndarray:
    """Median of the finite values among the `window` before each step (NaN where fewer than `min_history`)."""
    return trailing_nanmedian(np.where(np.isfinite(x), x, np.nan), window, min_history)


def trailing_median_fast(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """trailing_median, the same values faster on a series without gaps: np.median over its full windows
    (np.nanmedian's NaN handling costs more there); its first `window` steps and a series with gaps go through
    trailing_median."""
    n = len(x)
    out = trailing_median(x[: min(n, window + 1)], window)
    if n > window + 1 and np.isfinite(x).all():
        from numpy.lib.stride_tricks import sliding_window_view

        full = np.median(sliding_window_view(x[:-1], window), axis=1)  # full[i] = median(x[i:i+window])
        out = np.concatenate([out, full[1:n - window]])  # step t uses x[t-window:t]
    elif n > window + 1:
        out = trailing_median(x, window)
    return out


MAD_TO_SIGMA = 1.4826  # a normal variable's standard deviation over its median absolute deviation


def trailing_nanmedian(x: np.ndarray, window: int = WINDOW, min_history: int = MIN_HISTORY) -> np.ndarray:
    """Median of the finite values among the `window` before each step, along the first axis (NaN where fewer
    than `min_history` are finite): trailing_median for series with gaps and for [steps, k] arrays at once."""
    from numpy.lib.stride_tricks import sliding_window_view

    if len(x) == 0:
        return np.full(x.shape, np.nan)
    pad = np.full((window, *x.shape[1:]), np.nan)
    past = sliding_window_view(np.concatenate([pad, x])[:-1], window, axis=0)  # past[t] = x[t-window:t]
    count = np.isfinite(past).sum(axis=-1)
    return np.where(count >= min_history, nanmedian(past), np.nan)  # an all-NaN window is NaN, as documented


def trailing_spread(residual: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The run's own step-to-step noise of a series at each step: 1.4826 / sqrt(2) x the median |change from one
    step to the next| over the `window` steps before it (a robust standard deviation read from differences, so a
    falling loss's trend does not count as noise). A step's own value never enters its spread, and one outlier
    among the 50 barely moves it."""
    change = np.abs(np.diff(residual, axis=0, prepend=np.full((1, *residual.shape[1:]), np.nan)))
    return MAD_TO_SIGMA / math.sqrt(2) * trailing_nanmedian(change, window)


def in_noise_units(x: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """x / spread (NaN where the spread is 0 or unknown): a robust z-score when x is the residual itself. A
    threshold in these units widens by itself where the run is noisier (a smaller batch, early training): it is
    not a number of nats fitted at one batch size."""
    with np.errstate(all="ignore"):
        return np.where(spread > 0, x / spread, np.nan)


def row_keys(rows: list[dict], field: str, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The statistics a run's rows carry under `field` (per tensor: {name: {stat: value}}; batch: {stat: value}),
    in order of first appearance. The metrics describe themselves, so a statistic added to the telemetry
    (core/telemetry.py's registry) reaches the walker with no list to keep here."""
    seen: dict[str, None] = {}
    for r in rows:
        d = r.get(field)
        if not isinstance(d, dict):
            continue
        for v in (d.values() if field == "params" else [d]):
            if isinstance(v, dict):
                seen.update((k, None) for k in v if k not in skip)
    return tuple(seen)


@dataclass
class Evidence:
    """What the walker knows about a run: metrics series (NaN where a value was null) and a few facts."""

    rows: list[dict]
    vocab_size: int | None = None
    ngram_val_loss: float | None = None
    note: str | None = None  # e.g. the metrics end on a partial line
    # a run made elsewhere (`minitrain import`): what is known of it (vocab_size, batch_size, log_every,
    # first_step, each with where it came from); None for a run minitrain recorded itself
    imported: dict | None = None

    def __post_init__(self):
        # one pass over the rows builds every series the checks read
        keys = ("loss", "lr", "grad_norm", "grad_norm_clipped", "val_loss", "logit_max", "nonfinite")
        cols = {k: [] for k in keys}
        self.param_keys = row_keys(self.rows, "params")
        self.batch_keys = row_keys(self.rows, "batch", skip=("rows",))
        bcols = {k: [] for k in self.batch_keys}
        brows, prints = [], []
        names = next((list(r["params"]) for r in self.rows if isinstance(r.get("params"), dict) and r["params"]), [])
        cube = np.full((len(self.rows), len(names), len(self.param_keys)), np.nan)
        for i, r in enumerate(self.rows):
            for k in keys:
                cols[k].append(_num(r.get(k)))
            b = r.get("batch") if isinstance(r.get("batch"), dict) else {}
            for k in self.batch_keys:
                bcols[k].append(_num(b.get(k)))
            brows.append(len(b.get("rows") or []))
            # what identifies a batch: its row ids (None in a blind run) and its token statistics
            prints.append((tuple(b.get("rows") or ()), *(b.get(k) for k in self.batch_keys)) if b else None)
            p = r.get("params")
            if names and isinstance(p, dict):
                for j, n in enumerate(names):
                    st = p.get(n)
                    if isinstance(st, dict):
                        cube[i, j] = [_num(st.get(k)) for k in self.param_keys]
        self.steps = np.array([int(r["step"]) for r in self.rows])
        self.loss, self.lr, self.grad_norm = (np.array(cols[k]) for k in ("loss", "lr", "grad_norm"))
        self.grad_norm_clipped, self.val_loss = np.array(cols["grad_norm_clipped"]), np.array(cols["val_loss"])
        self.logit_max, self.nonfinite = np.array(cols["logit_max"]), np.array(cols["nonfinite"])
        self._batch = {k: np.array(v) for k, v in bcols.items()}
        self.batch_rows = np.array(brows, dtype=float)
        self.batch_prints = prints
        self.param_names = names
        self._cube = cube
        # another trainer's loop may log the clip's return capped at max_norm: not a pre-clip norm (definitions.py)
        self.grad_norm_cap = capped_norm(self.grad_norm) if self.imported is not None else None
        if self.grad_norm_cap is not None:
            self.note = "; ".join(filter(None, [self.note, f"grad_norm is capped at {fmt(self.grad_norm_cap)} on many "
                                                "rows: logged after clipping, so the checks that read a pre-clip "
                                                "norm are not testable"]))

    def batch(self, key: str) -> np.ndarray:
        """A batch-composition series (all NaN when the run does not carry it)."""
        return self._batch[key] if key in self._batch else np.full(len(self.rows), np.nan)

    def has(self, signal: str) -> bool:
        """Whether the run measured `signal` at all: "params.X" / "batch.X" (a statistic its rows carry), a
        row key such as "logit_max" or "val_loss" (non-null somewhere), or "ngram" (the n-gram baseline). A run
        recorded by the probe on a foreign model leaves out what it could not see (docs/probe.md)."""
        if signal == "ngram":
            return self.ngram_val_loss is not None
        if signal in LOGGING_FACTS:
            return self.knows(signal)
        if signal == "grad_norm" and self.grad_norm_cap is not None:
            return False
        field, _, stat = signal.partition(".")
        if field in ("params", "batch") and stat:
            return stat in (self.param_keys if field == "params" else self.batch_keys)
        return any(r.get(field) is not None for r in self.rows)

    def knows(self, fact: str) -> bool:
        """A fact of how the run was logged that a check needs (LOGGING_FACTS). A run minitrain recorded
        knows them all; an imported one only what its log, its config files or a flag said."""
        if fact == "long_run":  # the LR's size is judged over a run (T['ur_run_steps']), whoever recorded it
            return len(self.rows) >= T["ur_run_steps"]
        if self.imported is None:
            return True
        if fact == "vocab":
            return self.vocab_size is not None
        if fact == "batch_size":
            return bool(self.imported.get("batch_size"))
        if fact == "schedule":  # the schedule the user meant is nowhere in another trainer's log
            return False
        if fact == "first_lr":  # the LR the first step ran at (step 0, or HF's first optimizer step 1)
            return self.imported.get("first_step", 0) <= 1
        every = self.imported.get("log_every", 1) == 1
        if fact == "rows":  # enough rows to read a pattern over rows: every step, or coarse_min_rows of them
            return every or len(self.rows) >= T["coarse_min_rows"]
        if fact == "every_step":
            return every
        # step0: the first row is the untrained model's own batch (step 0, or HF's first optimizer step 1)
        return every and self.imported.get("first_step", 0) <= 1

    def param(self, name: str, key: str) -> np.ndarray:
        """A per-tensor series (all NaN when the run does not carry that statistic)."""
        if key not in self.param_keys:
            return np.full(len(self.rows), np.nan)
        return self._cube[:, self.param_names.index(name), self.param_keys.index(key)]

    @cached_property
    def vocab(self) -> int:
        """The vocabulary size ln V is taken of: the run's, else ASSUMED_VOCAB."""
        return self.vocab_size or ASSUMED_VOCAB

    @cached_property
    def ln_v(self) -> float:
        return math.log(self.vocab)

    @cached_property
    def untrained(self) -> tuple[float, str]:
        """An untrained model's loss on this run and where it came from (definitions.untrained_loss)."""
        first = float(self.loss[0]) if len(self.loss) else math.nan
        return untrained_loss(self.vocab_size, first, self.knows("step0"))

    def step_at(self, i: int | None) -> int | None:
        return None if i is None else int(self.steps[i])

    # --- shared statistics ---
    @cached_property
    def nonfinite_index(self) -> int | None:
        """Index of the first row holding a non-finite value (the loop's own rule, run/nonfinite.py: loss,
        gradient norm, logits, activations, a per-tensor statistic) or a non-finite count > 0."""
        return next((i for i, r in enumerate(self.rows) if is_non_finite(r)), None)

    @cached_property
    def gn_log_ratio(self) -> np.ndarray:
        """log(pre-clip grad norm / its trailing median): scale-free spike size."""
        lg = np.log(np.where(self.grad_norm > 0, self.grad_norm, np.nan))
        return lg - trailing_median_fast(lg)

    @cached_property
    def g_log_ratio(self) -> np.ndarray | None:
        """[steps, tensors] log(per-tensor g / its trailing median)."""
        if not self.param_names:
            return None
        cols = []
        for n in self.param_names:
            g = self.param(n, "g")
            lg = np.log(np.where(g > 0, g, np.nan))
            cols.append(lg - trailing_median_fast(lg))
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
    def row_loss_unit(self) -> float:
        """ln V / the run's batch size (median rows per step): how much one row of chance-level loss (ln V per
        token) adds to a batch's mean loss. 0 when the metrics carry no batch composition."""
        rows = self.batch_rows[self.batch_rows > 0]
        if not len(rows) and self.imported is not None:
            if self.imported.get("batch_size") and self.vocab_size:
                return self.ln_v / float(self.imported["batch_size"])
            # batch size or V unknown: the run's own loss scale stands in (a share of its median loss)
            return T["outlier_loss_share"] * float(np.nanmedian(self.loss)) if np.isfinite(self.loss).any() else 0.0
        return self.ln_v / float(np.median(rows)) if len(rows) else 0.0

    # --- the same jumps in units of the run's own noise (robust z-scores over the trailing window) ---
    @cached_property
    def loss_z(self) -> np.ndarray:
        """The loss's excess over its trailing median in units of its own trailing spread."""
        return in_noise_units(self.loss_excess, trailing_spread(self.loss_excess))

    @cached_property
    def gn_z(self) -> np.ndarray:
        """The pre-clip grad norm's log ratio to its trailing median, in units of its own trailing spread."""
        return in_noise_units(self.gn_log_ratio, trailing_spread(self.gn_log_ratio))

    @cached_property
    def gn_beyond_loss_z(self) -> np.ndarray:
        """gn_z less the loss's own rise (its log ratio, when > 0): a jump of the norm the batch does not explain."""
        rise = np.maximum(np.nan_to_num(self.loss_log_ratio, nan=0.0), 0)
        return in_noise_units(self.gn_log_ratio - rise, trailing_spread(self.gn_log_ratio))

    @cached_property
    def _g_spread(self) -> np.ndarray | None:
        return None if self.g_log_ratio is None else trailing_spread(self.g_log_ratio)

    @cached_property
    def g_all_up_z(self) -> np.ndarray:
        """The smallest over tensors of (log g ratio less the loss's own rise) / that tensor's own spread: large
        only when EVERY tensor's gradient jumped, each by many times its natural step-to-step variation."""
        if self.g_log_ratio is None:
            return np.full(len(self.rows), np.nan)
        rise = np.maximum(np.nan_to_num(self.loss_log_ratio, nan=0.0), 0)[:, None]
        return _nan_reduce(np.nanmin, in_noise_units(self.g_log_ratio - rise, self._g_spread))

    @cached_property
    def g_all_down_z(self) -> np.ndarray:
        """The largest over tensors of (log g ratio less the loss's own fall) / that tensor's spread: very
        negative only when every tensor's gradient fell."""
        if self.g_log_ratio is None:
            return np.full(len(self.rows), np.nan)
        fall = np.minimum(np.nan_to_num(self.loss_log_ratio, nan=0.0), 0)[:, None]
        return _nan_reduce(np.nanmax, in_noise_units(self.g_log_ratio - fall, self._g_spread))

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

    def _recurrence_rows(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per tensor, over steps 1..: (index, v_t / v_(t-1), gc_t^2 / v_(t-1)) where all are finite."""
        clip = self.grad_norm_clipped / self.grad_norm
        out = []
        for name in self.param_names:
            vm, g = self.param(name, "vm"), self.param(name, "g")
            prev, now, gc2 = vm[:-1], vm[1:], (g[1:] * clip[1:]) ** 2
            ok = np.isfinite(prev) & np.isfinite(now) & np.isfinite(gc2) & (prev > 0)
            idx = np.flatnonzero(ok) + 1
            out.append((idx, now[ok] / prev[ok], gc2[ok] / prev[ok]))
        return out

    def regime_split(self) -> tuple[int, float, float] | None:
        """The step k that best splits the run into two v recurrences (least squares on each side, summed over
        tensors), with the β2 fitted before and after it. Coarse grid of 20 steps, then refined to one step."""
        rows = self._recurrence_rows()
        n = len(self.rows)
        if not rows or n < 40:
            return None

        def cost(k: int) -> tuple[float, float, float]:
            total, before, after = 0.0, [], []
            for idx, rho, xi in rows:
                for side, keep in ((before, idx < k), (after, idx >= k)):
                    if keep.sum() < 8:
                        continue
                    A = np.stack([np.ones(int(keep.sum())), xi[keep]], 1)
                    coef, res, *_ = np.linalg.lstsq(A, rho[keep], rcond=None)
                    total += float(res[0]) if len(res) else 0.0
                    side.append(float(coef[0]))
            return total, float(np.median(before)) if before else math.nan, float(np.median(after)) if after else math.nan

        coarse = min(range(20, n - 19, 20), key=lambda k: cost(k)[0])
        best = min(range(max(10, coarse - 20), min(n - 9, coarse + 21)), key=lambda k: cost(k)[0])
        _, b1, b2 = cost(best)
        return best, b1, b2

    @cached_property
    def loss_log_ratio(self) -> np.ndarray:
        ll = np.log(np.where(self.loss > 0, self.loss, np.nan))
        return ll - trailing_median_fast(ll)

    @cached_property
    def loss_excess(self) -> np.ndarray:
        """Loss minus its trailing median, in nats (late in training the loss is near 0 and ratios blow up)."""
        return self.loss - np.exp(trailing_median_fast(np.log(np.where(self.loss > 0, self.loss, np.nan))))

    @cached_property
    def update_ratio(self) -> np.ndarray:
        """Per step, the median over tensors of the update-to-weight ratio ur = |p_new - p_old| / |p_old|."""
        if not self.param_names:
            return np.full(len(self.rows), np.nan)
        if "ur" not in self.param_keys:
            return np.full(len(self.rows), np.nan)
        ur = self._cube[:, :, self.param_keys.index("ur")]
        ok = np.isfinite(ur).any(axis=1)
        out = np.full(len(self.rows), np.nan)
        out[ok] = nanmedian(ur[ok])
        return out

    @cached_property
    def lr_step_ratio(self) -> np.ndarray:
        """lr[t] / lr[t-1] (NaN at step 0 or where either is zero / missing)."""
        out = np.full(len(self.lr), np.nan)
        if len(self.lr) > 1:
            prev, now = self.lr[:-1], self.lr[1:]
            with np.errstate(all="ignore"):
                out[1:] = np.where((prev > 0) & (now > 0), now / prev, np.nan)
        return out

    @cached_property
    def clipping(self) -> bool:
        """Was gradient clipping on? (Some step's clipped norm is below its pre-clip norm.) A run whose norm never
        reached the clip value reads as off: both mean that no update was cut back."""
        ok = np.isfinite(self.grad_norm) & np.isfinite(self.grad_norm_clipped)
        return bool((self.grad_norm_clipped[ok] < self.grad_norm[ok] * (1 - 1e-6)).any())

    @cached_property
    def repeat_run(self) -> np.ndarray:
        """For each step, how many consecutive steps up to it served the same batch as the step before
        (same row ids, where logged, and the same token statistics)."""
        out = np.zeros(len(self.rows), dtype=int)
        for i in range(1, len(self.rows)):
            a, b = self.batch_prints[i], self.batch_prints[i - 1]
            if a is not None and a == b:
                out[i] = out[i - 1] + 1
        return out



def _nan_reduce(f, x: np.ndarray) -> np.ndarray:
    """f over axis 1, NaN for an all-NaN row (without numpy's warning)."""
    out = np.full(x.shape[0], np.nan)
    ok = np.isfinite(x).any(axis=1)
    out[ok] = f(x[ok], axis=1)
    return out


REQUIRED = ("step", "loss")  # lr and grad_norm too in every run minitrain records; an imported log may lack them


def load_evidence(run: Path) -> Evidence:
    """The walker's inputs from a run folder: metrics.jsonl (required), tokenizer.json and the n-gram
    baseline (optional). Nothing else of the folder is read."""
    run = Path(run)
    if not run.is_dir():
        raise UserError(f"{run} is not a folder; give a run folder (e.g. experiments/18-baseline)")
    reader.check_run(run)  # a damaged manifest or results file: one line, as every command on the run says
    rows, note = reader.read_metrics(run / reader.METRICS)
    if not rows:
        raise UserError(f"{run / 'metrics.jsonl'} is empty; train the run first (minitrain train --out {run})")
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or any(k not in r for k in REQUIRED):
            raise UserError(f"{run / 'metrics.jsonl'} row {i + 1} is not a minitrain metrics row "
                            f"(needs {', '.join(REQUIRED)}); re-create the run")
    # the walker must not see which injection ran: drop the field before anything reads the rows
    rows = [{k: v for k, v in r.items() if k != "injected"} for r in rows]
    imported = reader.manifest_of(run).get("imported")
    facts = (imported.get("facts") or {}) if isinstance(imported, dict) else None
    return Evidence(rows, vocab_size=_vocab_size(run), ngram_val_loss=_ngram(run), note=note, imported=facts)


def _vocab_size(run: Path) -> int | None:
    tok, unreadable = reader.tokenizer_of(run)
    if unreadable:
        return None
    if tok is None:  # a probe run without a tokenizer records the model's output width instead
        value = reader.config_of(reader.manifest_of(run)).get("vocab_size")
        return value if isinstance(value, int) and value > 0 else None
    try:
        vocab = tok.get("model", {}).get("vocab", {})
        ids = set(vocab.values()) | {t.get("id") for t in tok.get("added_tokens", [])}
        return len(ids) or None
    except (AttributeError, TypeError):  # JSON, but not a tokenizers file
        return None


def _ngram(run: Path) -> float | None:
    """The n-gram baseline's validation loss (results.json, else the manifest's ngram_baseline only)."""
    for value in (reader.results_of(run).get("ngram_val_loss"),
                  (reader.manifest_of(run).get("ngram_baseline") or {}).get("val_loss")):
        if isinstance(value, (int, float)):
            return float(value)
    return None

