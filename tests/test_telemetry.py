import json

import pytest
import torch

from conftest import small_config
from minitrain import loop
from minitrain.core import telemetry


def rows_of(cfg, steps):
    run = loop.build_run(cfg)
    out = []
    loop.run_steps(run, 0, on_row=out.append, stop_at=steps)
    return out


def test_full_and_basic_rows():
    full = rows_of(small_config(), 45)
    basic = rows_of(small_config("telemetry=basic"), 5)
    assert set(full[1]["params"]["lm_head.bias"]) == {"g", "u", "ur", "vm", "vx", "vn", "r"}
    assert "params" not in basic[1] and "sigma" not in basic[0]
    assert "sigma" in full[40] and "sigma" not in full[41]  # spectral_every=40
    assert len(full[3]["act"]) == 2 and full[3]["logit_max"] > 0
    b = full[3]["batch"]
    assert len(b["rows"]) == 8 and b["dup_rows"] == 0 and 0 < b["top_token_share"] < 1
    # the loss and the step's numbers are the same whatever the telemetry
    assert [r["loss"] for r in full[:5]] == [r["loss"] for r in basic]


def test_per_tensor_stats_match_a_direct_computation():
    cfg = small_config()
    run = loop.build_run(cfg)
    loop.run_steps(run, 0, stop_at=10)
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    row = loop.train_step(run, 10)
    for name, p in run.model.named_parameters():
        st = run.opt.state[p]
        v = st["exp_avg_sq"]
        stats = row["params"][name]
        assert stats["vm"] == pytest.approx(float(v.mean()), rel=1e-4)
        assert stats["vx"] == pytest.approx(float(v.max()), rel=1e-4)
        assert stats["u"] == pytest.approx(float((p.detach() - before[name]).norm()), rel=1e-4)
        v_hat = v / (1 - cfg.beta2 ** float(st["step"]))
        r = float((p.grad / (v_hat.sqrt() + cfg.eps)).square().mean().sqrt())
        assert stats["r"] == pytest.approx(r, rel=1e-4)


def test_a_new_step_signal_is_one_entry(monkeypatch):
    extra = ("loss_x2", "max", lambda s: (2 * s.loss.detach()).reshape(1), False)
    monkeypatch.setattr(telemetry, "STEP_SIGNALS", telemetry.STEP_SIGNALS + (extra,))
    rows = rows_of(small_config("telemetry=basic"), 2)
    assert rows[1]["loss_x2"] == pytest.approx(2 * rows[1]["loss"], rel=1e-4)


def test_bad_batch_stands_out_in_the_batch_composition():
    rows = rows_of(small_config("injection=bad_batch", "injection_step=30"), 32)
    at_k, usual = rows[30]["batch"], [r["batch"] for r in rows[:30]]
    assert at_k["dup_rows"] == 7 and max(b["dup_rows"] for b in usual) == 0
    assert at_k["rows"] == [-1] * 8
    assert at_k["distinct_tokens"] < min(b["distinct_tokens"] for b in usual)
    usual_rare = sorted(b["rare_share"] for b in usual)
    assert at_k["rare_share"] > 2 * usual_rare[len(usual_rare) // 2]  # well above the median batch


def test_rare_token_mask():
    ids = torch.tensor([[1, 5, 5, 5, 0], [1, 5, 7, 0, 0]])
    counts, rare = telemetry.rare_token_mask(ids, 10, share=0.2)
    assert counts[5] == 4 and counts[0] == 0  # padding is not counted
    assert rare[7] and not rare[5]
