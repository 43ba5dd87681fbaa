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
    assert list(full[10]["params"]["lm_head.bias"]) == ["g", "u", "ur", "vm", "vx", "vn", "r"]  # a detail step
    quiet = [r for r in full if "u" not in r["params"]["lm_head.bias"]]
    assert quiet and all(list(r["params"]["lm_head.bias"]) == ["g", "vm"] for r in quiet)
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
    row = loop.train_step(run, 10)  # a detail step (cadence)
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
    extra = ("loss_x2", "max", lambda s: [2 * s.loss.detach()], None, False)
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


def schedule_rows(*overrides, steps=60):
    return rows_of(small_config(*overrides), steps)


@pytest.mark.parametrize("sets", [
    ("injection=scale", "injection_step=37", "injection_scale=50"),
    ("injection=scale", "injection_step=43", "injection_scale=5"),
    ("injection=scale", "injection_step=44", "injection_scale=0.1"),
    ("injection=bad_batch", "injection_step=41"),
    ("injection=v_corrupt", "injection_step=33", "injection_factor=100"),
    ("injection=v_corrupt", "injection_step=47", "injection_factor=0.01", "injection_param=tok_emb.weight"),
    ("injection=v_corrupt", "injection_step=51", "injection_factor=1.01", "injection_param=blocks.0.ln1.weight"),
])
def test_every_lab_injection_step_is_a_detail_step(sets):
    """The spike step is measured in full: K is off the cadence in every case, so the trigger must fire."""
    k = int(next(s for s in sets if s.startswith("injection_step=")).split("=")[1])
    assert k % telemetry.DETAIL_EVERY != 0
    rows = schedule_rows(*sets, steps=k + 3)
    assert set(rows[k]["params"]["lm_head.bias"]) == {key for key, _, _ in telemetry.PARAM_STATS}
    assert all(set(r["params"]["lm_head.bias"]) == {key for key, _, _ in telemetry.PARAM_STATS} for r in rows[k:k + 3])


def test_a_healthy_run_is_mostly_cheap_steps_and_the_cadence_always_measures():
    rows = schedule_rows(steps=120)
    detail = [r["step"] for r in rows if "u" in r["params"]["lm_head.bias"]]
    assert all(s in detail for s in range(0, 120, telemetry.DETAIL_EVERY))
    assert len(detail) < 0.5 * len(rows), detail


def test_v_recurrence_holds_to_rounding_on_healthy_steps():
    run = loop.build_run(small_config())
    rows = []
    loop.run_steps(run, 0, on_row=rows.append, stop_at=40)
    tel = run.telemetry
    b2, clip = tel.beta2, tel.cfg.grad_clip
    worst = 0.0
    for prev, row in zip(rows, rows[1:]):
        coef = min(1.0, clip / (row["grad_norm"] + 1e-6))
        for name, n in zip(tel.names, tel.sizes):
            vp, v, g = prev["params"][name]["vm"], row["params"][name]["vm"], row["params"][name]["g"]
            expected = b2 * vp + (1 - b2) * (g * coef) ** 2 / n
            worst = max(worst, abs(v / expected - 1))
    # rows hold 5 significant digits: the residual seen from them is rounding, far below the trigger
    assert worst < telemetry.TRIGGER_V_RESIDUAL / 5, worst


def test_block_composition_counts_equal_the_row_by_row_count():
    """The training batches' compositions are counted for a block of batches at once (data.batch_block);
    they must be exactly what `composition` counts row by row, duplicated rows included."""
    from minitrain.core.data import prepare

    cfg = small_config()
    data = prepare(cfg)
    rare = data.rare_mask.tolist()
    for step in (0, 249, 250, 777):
        batch = data.train_batch(step, cfg.batch_size, cfg.seed)
        assert batch.token_stats is not None
        seqs = [tuple(t for t in row if t != telemetry.PAD) for row in batch.x.tolist()]
        assert telemetry.composition_of(batch.rows, *batch.token_stats) == telemetry.composition(seqs, batch.rows, rare)
    # a block with duplicated rows, a row equal to another only within the cut, and an empty batch
    pad = telemetry.PAD
    x = torch.tensor([[[5, 6, 7, pad], [5, 6, 7, pad], [5, 6, 9, pad], [5, 6, 7, pad]],
                      [[5, 6, 7, 8], [5, 6, 7, pad], [3, 3, 3, 3], [4, pad, pad, pad]],
                      [[pad] * 4] * 4])
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[3, 9]] = True
    widths = [4, 3, 4]
    for s, stats in enumerate(telemetry.block_token_stats(x, widths, mask)):
        seqs = [tuple(t for t in row[:widths[s]] if t != pad) for row in x[s].tolist()]
        assert telemetry.composition_of([], *stats) == telemetry.composition(seqs, [], mask.tolist())
    assert [s[-1] for s in telemetry.block_token_stats(x, widths, mask)] == [2, 1, 3]


def test_largest_singular_values_equal_the_spectral_norm():
    g = torch.Generator().manual_seed(0)
    mats = [(f"m{i}", torch.randn(shape, generator=g) * scale)
            for i, (shape, scale) in enumerate([((512, 64), 0.02), ((64, 256), 1.0), ((64, 64), 30.0), ((3, 7), 1e-3),
                                                ((192, 64), 0.5)])]
    bad = torch.ones(4, 4)
    bad[1, 2] = float("inf")
    got = telemetry.largest_singular_values(mats + [("bad", bad)])
    for name, w in mats:
        ref = float(torch.linalg.matrix_norm(w, ord=2))
        assert abs(got[name] - ref) <= 2e-6 * ref, (name, got[name], ref)
    assert got["bad"] != got["bad"]  # nan


def test_the_update_rebuilt_from_adamws_moments_equals_the_measured_one():
    """With AdamW no weights are copied before the step: `u` and `ur` are rebuilt from the step's own
    moments. They equal |p_new - p_old| / |p_old| measured on copies, to float rounding, on an ordinary
    step, under an injected LR and beta2, and at a skipped update (u = 0)."""
    import math

    cfg = small_config()
    run = loop.build_run(cfg)
    assert run.telemetry.rebuild and run.telemetry.prev == []  # no copy of the weights is ever allocated
    for s in range(12):
        loop.train_step(run, s)
    tel = run.telemetry
    for case in ("plain", "lr and beta2 changed", "skipped", "lr * wd near 1: copied"):
        if case == "lr and beta2 changed":
            for g in run.opt.param_groups:
                g["betas"] = (0.9, 0.5)
        if case == "lr * wd near 1: copied":
            run.cfg = run.cfg.replace(lr_max=9.0, lr_min=9.0, warmup_steps=0)  # lr * wd = 0.9
        old = [p.detach().clone() for p in tel.params]
        if case == "skipped":
            tel.before_step(False)
        else:
            loop.train_step(run, 12)  # its before_step: a copy only when lr * wd is near 1
        m = telemetry._Moments(tel, [run.opt.state[p] for p in tel.params])
        measured = torch.stack([(p.detach() - o).norm() for p, o in zip(tel.params, old)])
        weights = torch.stack([o.norm() for o in old])
        assert tel.copied == (case == "lr * wd near 1: copied"), case
        assert torch.allclose(m.update, measured, rtol=1e-5, atol=1e-12), case
        assert torch.allclose(m.weight, weights, rtol=1e-6), case
        if case == "skipped":
            assert float(m.update.abs().max()) == 0.0
        else:
            assert not math.isclose(float(m.update.sum()), 0.0)
