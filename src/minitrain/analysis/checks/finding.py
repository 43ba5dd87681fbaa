"""What a check returns: a Finding (matched, the value in words, the step) and, for a matched rule, its
Crossing (how far the threshold was crossed, in the rule's own units)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Crossing:
    """How far a matched rule was crossed, in the rule's own units: `measured` against `threshold` (both in
    `units`; a robust-z rule measures in units of the run's own noise). `ratio` >= 1 means crossed; the walker's
    confidence reads it. `units` "exact" marks an identity (a NaN, an LR of 0): no degree to it."""

    measured: float
    threshold: float
    units: str

    @property
    def ratio(self) -> float | None:
        if self.units == "exact" or not (math.isfinite(self.measured) and self.threshold > 0):
            return None
        return self.measured / self.threshold


EXACT = Crossing(math.nan, math.nan, "exact")
X_THRESHOLD = "x the threshold's own unit (no noise measure applies)"
SIGMA = "σ of the run's own trailing noise (robust z)"


@dataclass(frozen=True)
class Finding:
    """One node's measurement: the value, how it reads against the threshold, whether it matched."""

    matched: bool
    value: float | None
    shown: str
    index: int | None = None  # row index of the step the finding points at
    extra: dict = field(default_factory=dict)
    near: float | None = None  # how close an unmatched finding came to its threshold (1 = at it; None = n/a)
    crossing: Crossing | None = None  # the reading in the rule's units against its threshold (None: no degree)


def miss(why: str) -> Finding:
    return Finding(False, None, f"not measurable ({why})")


def near_ratio(value: float, threshold: float, log: bool = True) -> float | None:
    """Closeness of a value to a threshold it must exceed: value / threshold (in log space for ratios)."""
    if value is None or not math.isfinite(value) or threshold <= 0 or value <= 0:
        return None
    if log:
        return max(0.0, math.log(value)) / math.log(threshold) if threshold > 1 else None
    return value / threshold
