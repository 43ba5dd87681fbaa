"""Which tensors "move": each per-tensor statistic's largest departure from its own recent median, ranked, over
the steps that matter (K..K+50 for an injection run, otherwise after warmup). The page shows the top movers of
each per-tensor panel by default."""
from __future__ import annotations


import numpy as np

from minitrain.analysis.evidence import nanmedian
from minitrain.core.fmt import page_number

MOVERS = 4  # tensors shown by default in each per-tensor panel
MOVER_LOOKBACK = 50  # a tensor "moves" when it leaves the median of its own previous 50 steps
MOVER_WINDOW = 50  # with an injection, movers are ranked over steps K..K+50
MOVER_MIN_SPAN = 20  # fewer steps than this left after the lookback: rank from the run's second step instead


def log_deviation(values: list, keep: np.ndarray, lookback: int = MOVER_LOOKBACK) -> np.ndarray:
    """log10(x_t / median(x_{t-lookback..t-1})) at the steps where `keep` is true (NaN elsewhere and where
    undefined: x <= 0, missing, no past): > 0 a rise, < 0 a fall."""
    x = np.array([v if v is not None and v > 0 else np.nan for v in values], dtype=float)
    lx = np.log10(x)
    out = np.full(len(lx), np.nan)
    idx = np.flatnonzero(keep)
    if not len(idx):
        return out
    past = np.concatenate([np.full(lookback, np.nan), lx[:-1]])
    windows = np.lib.stride_tricks.sliding_window_view(past, lookback)[idx]
    med = nanmedian(windows)  # a window's gaps ignored; all-NaN windows at the start NaN
    out[idx] = lx[idx] - med
    return out


def rank_window(steps: list[int], cfg: dict) -> tuple[int, int, str]:
    """Steps over which movers are ranked: K..K+50 for an injection run; otherwise from the end of warmup (or,
    when the warmup is unknown or short, from the first step that has MOVER_LOOKBACK steps of past: a tensor's
    first steps have almost no past to be compared with) to the last step."""
    first, last = (steps[0], steps[-1]) if steps else (0, 0)
    k = cfg.get("injection_step") if cfg.get("injection", "none") not in ("none", None) else None
    if k is not None and first <= k <= last:
        return k, k + MOVER_WINDOW, f"over steps {k}-{min(last, k + MOVER_WINDOW)} from K"
    lo = max(int(cfg.get("warmup_steps") or 0), first + MOVER_LOOKBACK)
    if last - lo < MOVER_MIN_SPAN:
        lo = min(last, first + 1)
    why = ", after warmup" if lo == cfg.get("warmup_steps") else ""
    return lo, last, f"over steps {lo}-{last}{why}"


def ranked(steps: list[int], per_stat: list[list], names: list[str], lo: int, hi: int) -> list[dict]:
    """Tensors ranked by how far they leave their own recent median within steps [lo, hi], either way: `factor`
    (>= 1) how many times, `rose` whether above it (else below it)."""
    s = np.array(steps)
    in_window = (s >= lo) & (s <= hi)
    ranked = []
    for i, values in enumerate(per_stat):
        signed = log_deviation(values, in_window)
        if np.all(np.isnan(signed)):
            continue
        j = int(np.nanargmax(np.abs(signed)))
        ranked.append({"index": i, "name": names[i], "factor": page_number(10 ** abs(float(signed[j])), 3),
                       "rose": bool(signed[j] >= 0), "step": int(s[j])})
    ranked.sort(key=lambda m: (-m["factor"], m["index"]))
    return ranked[:MOVERS]
