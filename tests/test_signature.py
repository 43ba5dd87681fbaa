import json

import pytest

from conftest import small_config
from minitrain import trainer
from minitrain.analysis import signature
from minitrain.core.errors import UserError


def test_recovery_uses_a_windowed_difference():
    k = 10
    diff = [0.0] * k + [1.0] + [0.0] * 50
    assert signature.recovery_steps(diff, k) == 1  # a one-step spike
    plateau = [0.0] * k + [0.05] * 30 + [0.0] * 60
    r = signature.recovery_steps(plateau, k)
    assert 20 <= r <= 30  # the excess lasts 30 steps; the window ends when less than TOL of it remains
    noise = [0.0] * k + [(-1) ** i * 0.03 for i in range(80)]  # chaotic drift: large per step, zero on average
    assert signature.recovery_steps(noise, k) == 0
    assert signature.recovery_steps([0.0] * k + [0.5] * 20, k) is None  # never recovers within the run


def test_signature_of_a_small_bad_batch_run(small_baseline):
    run = small_baseline.parent / "19-injection-B-sig"
    trainer.train(small_config("injection=bad_batch", "injection_step=60"), run)
    sig = signature.write(run)
    assert sig["baseline"] == "18-baseline" and sig["injection_step"] == 60
    assert sig["loss_at_k"] > sig["baseline_loss_at_k"]
    assert sig["grad_norm_ratio_vs_baseline_at_k"] > 1
    assert json.loads((run / "signature.json").read_text())["predictions"]
    with pytest.raises(UserError, match="no injection"):
        signature.write(small_baseline, small_baseline)
