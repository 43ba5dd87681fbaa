"""Every number the stability check judges by lives once, in analysis/thresholds.py."""
import re

import pytest
from pathlib import Path

from minitrain.analysis import thresholds
from minitrain.analysis.thresholds import GN1_HEALTHY, THRESHOLDS, T

SRC = Path(__file__).resolve().parents[1] / "src" / "minitrain"


def test_course_facts_are_the_courses():
    assert GN1_HEALTHY == (0.1, 10.0)  # healthy step-1 gradient norm range
    assert (T["gn1_high"], T["gn1_low"]) == (100.0, 0.001)  # the leaf conditions
    assert (T["loss0_band"], T["loss0_high"], T["loss0_low"]) == (0.5, 8.0, 4.0)
    assert {n for n, t in THRESHOLDS.items() if t.source == "course"} >= {"gn1_high", "gn1_low", "gn1_healthy_low",
                                                                         "gn1_healthy_high"}


def test_every_threshold_has_a_source_and_a_meaning_and_is_read_somewhere():
    analysis = "".join(p.read_text() for p in (SRC / "analysis").rglob("*.py") if p.name != "thresholds.py")
    for name, t in THRESHOLDS.items():
        assert t.source in ("course", "tuned", "exact") and t.meaning, name
        if not name.startswith("gn1_healthy"):  # the healthy range is read as GN1_HEALTHY (the health summary)
            assert f'T["{name}"]' in analysis or f"T['{name}']" in analysis, f"threshold {name} is never read"


def test_no_check_restates_a_threshold_as_a_literal():
    """The checks and the tree read T; a bare 0.001 / 100.0 / 2.5e-3 there would be a second definition."""
    for path in [*(SRC / "analysis" / "checks").glob("*.py"), *(SRC / "analysis" / m for m in ("tree.py", "walk.py"))]:
        text, mod = path.read_text(), path.name
        for name in ("gn1_low", "ur_high", "v_fit_noise", "lr_jump", "v_spread"):
            value = repr(THRESHOLDS[name].value)
            assert not re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", text), (mod, name, value)
    assert thresholds.WINDOW == 50 and thresholds.MIN_HISTORY == 5


def test_a_jump_reads_the_same_in_the_runs_own_noise_whatever_that_noise_is():
    """The robust z of the walker's jump rules: the same spike on a series 10x noisier (a batch of 2 against a
    batch of 16, roughly) reads the same number of σ, so a threshold in σ is not a number of nats fitted at
    one batch size."""
    import numpy as np

    from minitrain.analysis.evidence import in_noise_units, trailing_median_fast, trailing_spread

    noise = np.random.default_rng(0).standard_normal(400)
    zs = []
    for sd in (0.05, 0.5):
        x = 2.0 + sd * noise
        x[300] += 12 * sd
        residual = x - trailing_median_fast(x)
        z = in_noise_units(residual, trailing_spread(residual))
        assert np.nanmax(np.abs(z[:300])) < 5  # natural steps stay within a few σ
        zs.append(z[300])
    assert zs[0] == pytest.approx(zs[1], rel=1e-9) and 8 < zs[0] < 16
    # the step's own value never enters its spread: a spike does not hide itself
    residual = np.zeros(60)
    residual[::2] = 1.0
    residual[55] = 50.0
    assert trailing_spread(residual)[55] == trailing_spread(residual)[54]


def test_confidence_levels_are_ordered_and_above_the_threshold():
    assert 1 < thresholds.CONFIDENCE_MODERATE < thresholds.CONFIDENCE_STRONG


def test_the_trailing_median_is_the_median_of_the_finite_values_before_each_step():
    """trailing_median and trailing_median_fast (both vectorised) equal their definition, written as a loop, to
    the bit: short and long series, ties, NaN and infinities, other windows and history lengths."""
    import numpy as np

    from minitrain.analysis.evidence import MIN_HISTORY, WINDOW, trailing_median, trailing_median_fast

    def definition(x, window=WINDOW, min_history=MIN_HISTORY):
        out = np.full(len(x), np.nan)
        for t in range(len(x)):
            past = x[max(0, t - window):t]
            past = past[np.isfinite(past)]
            if len(past) >= min_history:
                out[t] = np.median(past)
        return out

    rng = np.random.default_rng(0)
    for case in range(400):
        x = rng.standard_normal(int(rng.integers(0, 300))) * 10.0 ** int(rng.integers(-3, 4))
        if case % 4 == 1:
            x = np.round(x, 1)  # ties
        if case % 4 >= 2:
            gaps = rng.random(len(x)) < 0.3
            x[gaps] = rng.choice([np.nan, np.inf, -np.inf], int(gaps.sum()))
        assert np.array_equal(trailing_median_fast(x), definition(x), equal_nan=True), case
        window, min_history = int(rng.choice([3, 20, 50])), int(rng.choice([1, 5]))
        assert np.array_equal(trailing_median(x, window, min_history), definition(x, window, min_history),
                              equal_nan=True), case


def test_nanmedian_is_numpys_to_the_bit():
    """evidence.nanmedian: np.nanmedian's values along the last axis, gaps, infinities, ties, -0.0, huge
    values and all-NaN rows included (the page's numbers do not move)."""
    import warnings

    import numpy as np

    from minitrain.analysis.evidence import nanmedian

    rng = np.random.default_rng(0)
    for trial in range(400):
        x = rng.standard_normal((int(rng.integers(1, 30)), int(rng.integers(1, 70)))) * 10.0 ** rng.uniform(-30, 30)
        for value, share in ((np.nan, rng.uniform()), (np.inf, 0.05), (-np.inf, 0.05), (-0.0, 0.2), (1.7e308, 0.2)):
            if value is np.nan or trial % 3 == 0:
                x[rng.random(x.shape) < share] = value
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.nanmedian(x, axis=-1)
        got = nanmedian(x)
        assert np.array_equal(got, want, equal_nan=True)
        finite = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))
