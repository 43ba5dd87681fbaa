"""How a number is written for a person (reports, the walker's path, the learner's reveal): one rule."""
from __future__ import annotations

import math


def fmt(x, digits: int = 4) -> str:
    """`digits` significant digits; "n/a" for a missing value, "non-finite" for NaN/inf, yes/no for a bool."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if math.isfinite(x) else "non-finite"
    return str(x)


def page_number(x, digits: int = 6):
    """A float rounded to `digits` significant digits for the page; None for missing or non-finite."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


# telemetry's update-to-weight ratio (ur) takes the weight norm clamped to this: a tensor initialised at zero has
# no meaningful ratio on its first step, and the page does not draw one taken at the floor
UR_WEIGHT_FLOOR = 1e-12
