"""The field's spike rules on synthetic series whose answer is known by construction."""
from __future__ import annotations

import numpy as np
import pytest

from minitrain.analysis import definitions, detectors


def noisy(n=600, level=2.0, seed=0):
    """Bounded noise (uniform, +-5%): no value is more than 1.8 standard deviations off, so any flag on it
    is the rule's fault, not chance."""
    rng = np.random.default_rng(seed)
    return level * (1 + rng.uniform(-0.05, 0.05, n))


def test_every_detector_is_registered_with_its_rule():
    names = [d.name for d in detectors.DETECTORS]
    assert names == ["megatron", "llmc_loss", "llmc_grad", "lightning", "foundry", "zclip", "course"]
    assert all(d.series in ("loss", "grad_norm", "loss_or_nan") and d.rule for d in detectors.DETECTORS)


def test_quiet_series_raise_no_alarm():
    x = noisy()
    flags = detectors.run_detectors(x, x)
    assert {k: v for k, v in flags.items() if v} == {}


@pytest.mark.parametrize("name, series", [("llmc_loss", "loss"), ("llmc_grad", "grad_norm"),
                                          ("zclip", "grad_norm"), ("course", "loss")])
def test_zscore_rules_flag_a_single_spike(name, series):
    x = noisy()
    y = x.copy()
    y[400] *= 3  # 3x on a 5% noise floor: far beyond 3 sigma
    args = (y, x) if series == "loss" else (x, y)
    assert detectors.run_detectors(*args)[name] == [400]


def test_ratio_rules_need_their_factor():
    x = noisy()
    y = x.copy()
    y[300] *= 2.5
    flags = detectors.run_detectors(y, x)
    assert flags["lightning"] == [] and flags["megatron"] == []  # below 3x and 10x
    y[300] = x[300] * 3.5
    assert detectors.run_detectors(y, x)["lightning"] == [300]
    y[300] = x[300] * 30
    assert detectors.run_detectors(y, x)["megatron"] == [300]


def test_megatron_waits_for_100_samples_and_flags_nan():
    x, g = noisy(), noisy()
    x[5] *= 50  # before 100 samples (13 steps of batch 8): not judged
    x[200] = np.nan
    g[300] = np.inf  # a non-finite gradient stops Megatron too
    assert detectors.run_detectors(x, g)["megatron"] == [200, 300]


def test_zclip_flags_a_nan_even_during_warmup():
    g = noisy()
    g[8] = np.nan
    assert detectors.run_detectors(noisy(), g)["zclip"] == [8]


def test_foundry_needs_more_than_four_steps_in_a_row():
    x = noisy()
    x[300:304] *= 3  # 4 steps: not enough
    assert detectors.run_detectors(x, x)["foundry"] == []
    x[400:406] *= 3  # 6 steps: flags the 5th and 6th
    assert detectors.run_detectors(x, x)["foundry"] == [404, 405]


def test_windowed_rules_wait_for_a_full_window():
    x = noisy(200)
    x[50] *= 10
    flags = detectors.run_detectors(x, x)
    assert flags["llmc_loss"] == [] and flags["course"] == []  # 128 / 100 steps of history not there yet
    assert flags["lightning"] == [50]


def test_zclip_is_not_blinded_by_its_own_spike():
    g = noisy()
    g[300] *= 20
    g[320] *= 3
    assert detectors.run_detectors(noisy(), g)["zclip"] == [300, 320]


def test_the_spike_flag_waits_for_a_full_window_and_names_steps():
    """The package's one spike flag (the course's rule): a bump with 70 steps of history is not judged, one with
    a full 100 is; it answers in steps, so a run whose rows start later is read the same."""
    x = noisy(300)
    x[70] *= 3
    x[200] *= 3
    steps = list(range(1000, 1300))
    assert definitions.rolling_zscore_spikes(steps, list(x)) == [1200]
    gap = [None if i == 150 else v for i, v in enumerate(x)]
    assert definitions.rolling_zscore_spikes(steps, gap) == []  # a missing loss at 150: no full window again before 251
