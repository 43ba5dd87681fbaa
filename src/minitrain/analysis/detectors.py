"""The field's loss / gradient-norm spike rules, re-implemented as baselines over a run's metrics.

Each detector reads the same per-step series the walker reads (training loss, pre-clip gradient norm) and
returns the steps it flags. None of them names a cause; `minitrain diagnose` does. The parameter choices
follow each system's rule as summarised in ../shared/anchor-notes.md; where the rule leaves a choice open,
it is fixed here and written next to it:

  megatron       loss > 10 x the largest loss seen so far, once 100 samples (13 steps of batch 8) are seen;
                 a NaN/Inf loss or gradient norm always flags (Megatron-LM's rerun state machine)
  llmc_loss      z-score of the loss against the previous 128 steps (mean, std) > 3  (llm.c outlier detector;
                 the z threshold is a run flag there; 3 is this project's choice); needs a full window
  llmc_grad      the same rule on the pre-clip gradient norm
  lightning      loss >= 3 x the running mean of the previous 10 losses, or a NaN loss (Lightning SpikeDetection)
  foundry        loss >= 2 x the mean of the previous 100 losses for more than 4 steps in a row; flags the
                 5th such step (llm-foundry KillLossSpike)
  zclip          z-score of the pre-clip norm against its EMA mean and EMA variance (alpha 0.97) > 2.5, after 25
                 warm-up steps; a flagged value enters the EMA clipped to mean + 2.5 std, as ZClip does; a
                 non-finite norm flags at any step
  course         loss > mean + 3 std of the previous 100 losses (the course's spike flag: definitions.py's
                 rolling_zscore_spike, one of the package's three named spike definitions); needs a full window

OLMo 2's "spike score" is a whole-run metric (share of values >= 7 sigma off a 1000-step mean), not a per-step
alarm, so it is not a detector here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from minitrain.analysis.definitions import ROLLING_RULE, rolling_zscore_spike, trailing_mean_std


@dataclass(frozen=True)
class Detector:
    name: str
    system: str
    rule: str
    series: str  # the series the rule reads: "loss" or "grad_norm"
    flags: Callable[[np.ndarray], np.ndarray]  # series -> boolean array, one per step


def megatron(loss: np.ndarray, factor: float = 10.0, after_steps: int = 13) -> np.ndarray:
    """`loss` here is the loss with NaN wherever the loss or the gradient norm is non-finite (see run_detectors)."""
    out = ~np.isfinite(loss)
    running_max = -np.inf
    for t, x in enumerate(loss):
        if t >= after_steps and np.isfinite(x) and x > factor * running_max:
            out[t] = True
        if np.isfinite(x):
            running_max = max(running_max, x)
    return out


def zscore(x: np.ndarray, window: int = 128, z: float = 3.0) -> np.ndarray:
    mean, std = trailing_mean_std(x, window, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.isfinite(x) & (std > 0) & ((x - mean) / std > z)


def lightning(loss: np.ndarray, window: int = 10, factor: float = 3.0) -> np.ndarray:
    mean, _ = trailing_mean_std(loss, window, window)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(loss) | (loss >= factor * mean)


def foundry(loss: np.ndarray, window: int = 100, factor: float = 2.0, patience: int = 4) -> np.ndarray:
    mean, _ = trailing_mean_std(loss, window, window)
    with np.errstate(invalid="ignore"):
        high = loss >= factor * mean
    out = np.zeros(len(loss), bool)
    run = 0
    for t, h in enumerate(high):
        run = run + 1 if h else 0
        out[t] = run > patience
    return out


def zclip(gn: np.ndarray, alpha: float = 0.97, z: float = 2.5, warmup: int = 25) -> np.ndarray:
    out = ~np.isfinite(gn)
    seen = [float(x) for x in gn[:warmup] if np.isfinite(x)]
    if len(seen) < 2:
        return out
    mean, var = float(np.mean(seen)), float(np.var(seen))
    for t in range(warmup, len(gn)):
        x = gn[t]
        if not np.isfinite(x):
            out[t] = True
            continue
        std = math.sqrt(var)
        if std > 0 and (x - mean) / std > z:
            out[t] = True
            x = mean + z * std  # the spike enters the statistics clipped, so one spike does not blind it
        mean = alpha * mean + (1 - alpha) * x
        var = alpha * var + (1 - alpha) * (x - mean) ** 2
    return out




DETECTORS: tuple[Detector, ...] = (
    Detector("megatron", "Megatron-LM rerun state machine", "loss > 10x max seen (after 100 samples); NaN/Inf",
             "loss_or_nan", megatron),
    Detector("llmc_loss", "llm.c outlier detector (loss)", "loss z-score > 3 over the previous 128 steps",
             "loss", zscore),
    Detector("llmc_grad", "llm.c outlier detector (grad norm)", "grad-norm z-score > 3 over the previous 128 steps",
             "grad_norm", zscore),
    Detector("lightning", "Lightning SpikeDetection", "loss >= 3x mean of the previous 10; NaN", "loss", lightning),
    Detector("foundry", "llm-foundry KillLossSpike", "loss >= 2x mean of the previous 100, > 4 steps in a row",
             "loss", foundry),
    Detector("zclip", "ZClip", "grad-norm z-score vs EMA (alpha 0.97) > 2.5", "grad_norm", zclip),
    Detector("course", "the course's spike flag (definitions.rolling_zscore_spike)", ROLLING_RULE, "loss",
             rolling_zscore_spike),
)


def run_detectors(loss: np.ndarray, grad_norm: np.ndarray) -> dict[str, list[int]]:
    """{detector name: flagged row indices} over one run's series."""
    loss, grad_norm = np.asarray(loss, float), np.asarray(grad_norm, float)
    series = {"loss": loss, "grad_norm": grad_norm,
              "loss_or_nan": np.where(np.isfinite(grad_norm), loss, np.nan)}  # Megatron also stops on NaN grads
    return {d.name: np.flatnonzero(d.flags(series[d.series])).tolist() for d in DETECTORS}
