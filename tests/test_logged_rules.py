"""The rules that read what other trainers log (the loss, the LR, a gradient norm that may be capped), on small
synthetic logs shaped like the foreign suite's (docs/foreign-runs.md): each names its fault where its signal
shows it, and answers no or "not measured" where a richer signal decides or its own is absent."""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis.definitions import capped_norm, untrained_loss
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.tree import ITEMS
from minitrain.analysis.walk import answer, walk

V = 67
EVERY_STEP = {"first_step": 0, "log_every": 1}


def noise(n: int, seed: int = 0, size: float = 0.02) -> np.ndarray:
    return size * np.random.default_rng(seed).standard_normal(n)


def cosine_lr(n: int, peak: float, warmup: int = 30) -> np.ndarray:
    s = np.arange(n)
    decay = 0.5 * (1 + np.cos(math.pi * np.clip((s - warmup) / (n - warmup), 0, 1)))
    return np.where(s < warmup, peak * (s + 1) / warmup, peak * (0.1 + 0.9 * decay))


def healthy_loss(n: int, every: int = 1) -> np.ndarray:
    s = np.arange(n) * every
    return 0.6 * math.log(V) * np.exp(-s / 60) + 0.35 * math.log(V)


def rows(loss, lr=None, grad_norm=None, every: int = 1, first: int = 0) -> list[dict]:
    out = []
    for i, x in enumerate(loss):
        r = {"step": first + i * every, "loss": float(x)}
        if lr is not None:
            r["lr"] = float(lr[i])
        if grad_norm is not None:
            r["grad_norm"] = float(grad_norm[i])
        out.append(r)
    return out


def imported(loss, lr=None, grad_norm=None, every: int = 1, vocab: int | None = V) -> Evidence:
    facts = {"first_step": 0 if every == 1 else every, "log_every": every}
    return Evidence(rows(loss, lr, grad_norm, every, facts["first_step"]), vocab_size=vocab, imported=facts)


# --- §2.9: the LR's size from the loss and the LR ---


def test_a_loss_that_stalls_at_the_peak_lr_and_falls_only_as_it_decays_is_lr_too_high():
    n = 300
    lr = cosine_lr(n, 0.3)
    # learns a little in the warmup, then sits at 0.8 ln V until the LR has come down to half its peak
    share = lr / 0.3
    floor = 0.8 * math.log(V) - 2.0 * np.clip(0.5 - share, 0, None) ** 1.5
    loss = np.maximum(healthy_loss(n) + 0.3, floor) + noise(n)
    v = walk(imported(loss, lr))
    assert (v["leaf"], v["cause"]) == ("§2.I", "lr_too_high"), v["path"]
    assert "§2.E lr_too_high" in v["untestable"]  # the update-to-weight ratio's own leaf stays untested
    assert walk(imported(healthy_loss(n) + noise(n), lr))["cause"] == "healthy"


def test_a_loss_stalled_far_up_with_the_lr_held_at_its_peak_is_lr_too_high_and_a_falling_one_is_not():
    n = 300
    lr = np.full(n, 0.15)
    stalled = np.maximum(healthy_loss(n), 0.8 * math.log(V)) + noise(n, 1)
    assert walk(imported(stalled, lr))["cause"] == "lr_too_high"
    # the plain loop's constant Adam 3e-4: still falling over its second half
    assert walk(imported(healthy_loss(n) + noise(n, 1), np.full(n, 3e-4)))["cause"] == "healthy"


def test_a_loss_above_an_untrained_models_at_the_peak_lr_is_lr_too_high_without_v_or_a_step_0():
    n = 300
    lr = np.full(n, 0.1)
    loss = healthy_loss(n) + noise(n, 2)
    loss[5:60] = 40.0 * np.exp(-np.arange(55) / 20) + 5.0  # diverged, then recovered
    assert walk(imported(loss, lr))["cause"] == "lr_too_high"
    # a Lightning log: first row step 49, V unknown; 121 nats is above ln V of any vocabulary in use
    late = Evidence(rows(np.r_[121.0, 15.8, 5.2, 3.3, 2.6, 2.6, 2.3, 2.1], np.full(8, 0.1), every=50, first=49),
                    imported={"first_step": 49, "log_every": 50})
    assert walk(late)["cause"] == "lr_too_high"
    assert untrained_loss(None, 121.0, False)[0] == math.log(2 ** 20)
    # long after the LR reached its peak, a loss thrown above ln V at once is an event the log missed (an LR
    # spike between logged rows), not the LR's size
    spike = healthy_loss(n) + noise(n, 2)
    spike[200:230] += 30.0 * np.exp(-np.arange(30) / 10)
    f, _ = answer(ITEMS["§2.9"], imported(spike, np.full(n, 1e-3)))
    assert not f.matched


def test_the_loss_rules_answer_no_where_the_update_ratio_was_measured():
    n = 300
    lr = np.full(n, 0.15)
    stalled = np.maximum(healthy_loss(n), 0.8 * math.log(V)) + noise(n, 1)
    r = rows(stalled, lr)
    for x in r:
        x["params"] = {"w": {"ur": 1e-3}}
    f, absent = answer(ITEMS["§2.9"], Evidence(r, vocab_size=V))
    assert not f.matched and not absent and "§2.5 reads it" in f.shown


# --- one-step faults without a gradient norm ---


def test_a_bad_batch_in_a_log_of_the_loss_alone_is_named_from_the_loss():
    n = 300
    loss = healthy_loss(n) + noise(n, 3)
    loss[180] += 2.5  # one batch of random tokens: back at once
    v = walk(imported(loss, cosine_lr(n, 1e-3)))
    assert (v["cause"], v["anomaly_step"]) == ("bad_batch", 180)
    assert "no pre-clip grad norm logged" in next(p["measured"] for p in v["walk"] if p["node"] == "§4.2")


def test_a_scaled_gradient_without_a_norm_is_a_normal_loss_then_a_climb_at_a_steady_lr():
    n = 300
    loss = healthy_loss(n) + noise(n, 4, 0.01)
    loss[151:300] += 0.6 * (1 - np.exp(-np.arange(149) / 5)) * np.exp(-np.arange(149) / 200)
    v = walk(imported(loss, cosine_lr(n, 1e-3)))
    assert v["cause"] == "gradient_explosion" and 149 <= v["anomaly_step"] <= 153, (v["cause"], v["anomaly_step"])
    # a loss that had stalled (at a too-high LR) and climbs out of its plateau is not a scaled gradient
    flat = np.full(n, 0.8 * math.log(V)) + noise(n, 4, 0.01)
    flat[:20] = np.linspace(math.log(V), 0.8 * math.log(V), 20)
    flat[151:300] += 0.6 * (1 - np.exp(-np.arange(149) / 5))
    assert not answer(ITEMS["§7.6"], imported(flat, np.full(n, 0.15)))[0].matched
    # where a pre-clip norm was logged, §7.5 reads it and §7.6 does not guess
    f, _ = answer(ITEMS["§7.6"], imported(loss, cosine_lr(n, 1e-3), grad_norm=np.ones(n) + noise(n, 5)))
    assert not f.matched and "§7.5 reads it" in f.shown


def test_a_bad_batch_averaged_into_a_log_every_10_steps_is_one_row_above_its_agreeing_neighbours():
    n = 30
    loss = healthy_loss(n, every=10) + noise(n, 6, 0.004)
    loss[17] += 0.4  # one garbage batch in the ten the row averages
    v = walk(imported(loss, cosine_lr(n, 1e-3, warmup=3), every=10))
    assert (v["cause"], v["anomaly_step"]) == ("bad_batch", 180)
    # a noisy run (several bumps of a size) is not one bad batch
    noisy = healthy_loss(n, every=10) + noise(n, 7, 0.004)
    noisy[[7, 17]] += 0.4
    f, _ = answer(ITEMS["§4.5"], imported(noisy, cosine_lr(n, 1e-3, warmup=3), every=10))
    assert not f.matched


# --- a gradient norm logged after clipping ---


def test_a_norm_capped_at_max_norm_is_not_read_as_a_pre_clip_norm():
    n = 200
    pre = 1.5 + noise(n, 8, 0.3)
    pre[120] = 400.0  # a spike the capped log can never show
    capped = np.minimum(pre, 1.0)
    assert capped_norm(capped) == 1.0 and capped_norm(pre) is None
    ev = imported(healthy_loss(n) + noise(n, 9), cosine_lr(n, 1e-3), grad_norm=capped)
    assert not ev.has("grad_norm") and "capped at 1" in ev.note
    v = walk(ev)
    assert v["cause"] == "healthy"
    # the checks that read a pre-clip norm say it was not measured (§7.6 reads the loss instead)
    assert [p.get("not_measured") for p in v["walk"] if p["node"] in ("§7.5", "§7.3")] == [["grad_norm"]] * 2
    # minitrain's own runs log the pre-clip norm: a series of zeros (no gradient) is not a cap
    own = Evidence(rows(healthy_loss(n), cosine_lr(n, 1e-3), np.zeros(n)), vocab_size=V)
    assert own.grad_norm_cap is None


# --- the probe path (issue item 5) ---


def test_a_validation_that_never_climbed_does_not_clear_an_lr_too_high_whose_loss_stalled():
    """On the probe path the update-to-weight ratio is measured and a validation loss may be passed: a short
    run at a too-high LR stalls without memorising, so validation never climbs; that must not clear §2.E and
    let the walk go on to a one-step leaf (gradient_explosion)."""
    n = 1000
    lr = 0.15 * np.minimum(1.0, (np.arange(n) + 1) / 50)  # a warmup, then held at its peak
    stalled = np.maximum(healthy_loss(n), 0.8 * math.log(V)) + noise(n, 10)
    r = rows(stalled, lr)
    for i, x in enumerate(r):
        x["params"] = {"w": {"ur": 2e-2}}
        if i % 100 == 99:
            x["val_loss"] = 0.8 * math.log(V)
    v = walk(Evidence(r, vocab_size=V))
    assert (v["leaf"], v["cause"]) == ("§2.E", "lr_too_high"), v["path"]
    # large updates with a loss that trains well and a validation that never climbs: still ruled out
    fine = rows(healthy_loss(n) + noise(n, 10), lr)
    for i, x in enumerate(fine):
        x["params"] = {"w": {"ur": 2e-2}}
        if i % 100 == 99:
            x["val_loss"] = 0.36 * math.log(V)
    assert walk(Evidence(fine, vocab_size=V))["cause"] != "lr_too_high"


def _v_rows(corrupt_at: int, factor: float, n: int = 200, warmup: int = 60) -> list[dict]:
    """Two tensors whose Adam v follows its recurrence exactly (β2 0.95), one multiplied by `factor` at a step."""
    rng = np.random.default_rng(11)
    out, vm = [], {"a": 1e-4, "b": 1e-4}
    for s in range(n):
        g = {k: float(0.01 * (1 + 0.2 * rng.standard_normal())) for k in vm}
        for k in vm:
            vm[k] = 0.95 * vm[k] + 0.05 * g[k] ** 2 / 100
        if s == corrupt_at:
            vm["a"] *= factor
        gn = math.sqrt(sum(x * x for x in g.values()))
        out.append({"step": s, "loss": float(3.0 - s / n), "lr": 1e-3 * min(1.0, (s + 1) / warmup),
                    "grad_norm": gn, "grad_norm_clipped": gn,
                    "params": {k: {"g": g[k], "vm": vm[k]} for k in vm}})
    return out


def test_v_moving_a_few_percent_during_warmup_is_not_an_optimizer_state_corruption():
    during = answer(ITEMS["§6.1"], Evidence(_v_rows(30, 1.03), vocab_size=V))[0]
    assert not during.matched and "during the warmup" in during.shown
    after = answer(ITEMS["§6.1"], Evidence(_v_rows(120, 1.03), vocab_size=V))[0]
    assert after.matched  # the same factor after the warmup is one


def test_a_norm_up_for_good_after_a_loss_thrown_up_is_not_a_summed_loss():
    """§9.4 (walked before §2) reads a lasting rise of the norm with the loss's level unchanged as a loss summed
    over tokens; an LR spike that threw the loss far up leaves the norm up for good too, with the loss moved."""
    n = 400
    loss, gn = healthy_loss(n) + noise(n, 12), 1.0 + noise(n, 13, 0.1)
    summed = gn.copy()
    summed[200:] *= 50  # a summed loss: the norm x the token count, the loss as it was
    assert answer(ITEMS["§9.4"], imported(loss, np.full(n, 3e-4), grad_norm=summed))[0].matched
    damaged = loss.copy()
    damaged[203:] += 250 * np.exp(-np.arange(n - 203) / 25) + 2.0  # thrown up, recovering slowly, never back
    up = gn.copy()
    up[203:] *= 20 + 300 * np.exp(-np.arange(n - 203) / 10)
    assert not answer(ITEMS["§9.4"], imported(damaged, np.full(n, 3e-4), grad_norm=up))[0].matched


# --- what an event rule and §2.3 need of a coarse log ---


def test_a_bump_in_the_first_rows_or_one_the_loss_stays_up_after_is_no_bad_batch_in_a_coarse_log():
    n = 30
    loss = healthy_loss(n, every=10) + noise(n, 8, 0.004)
    early = loss.copy()
    early[1] += 1.6  # the second row, while the loss still falls from its untrained level: no level to read it by
    f, _ = answer(ITEMS["§4.5"], imported(early, cosine_lr(n, 1e-3, warmup=3), every=10))
    assert not f.matched
    # a scaled gradient averaged into row 17: the row before rises with it and the rows after stay up
    scaled = loss.copy()
    scaled[16:] += 0.75 * np.exp(-np.arange(n - 16) / 6.0)
    scaled[17] += 0.8
    f, _ = answer(ITEMS["§4.5"], imported(scaled, cosine_lr(n, 1e-3, warmup=3), every=10))
    assert not f.matched


def test_no_warmup_needs_the_first_steps_lr():
    n = 20
    lr = cosine_lr(n * 10, 3e-3, warmup=20)[9::10]  # HF logging_steps=10: the first row is step 10, half the peak
    loss = healthy_loss(n, every=10)
    late = Evidence(rows(loss, lr, every=10, first=10), vocab_size=V, imported={"first_step": 10, "log_every": 10})
    f, _ = answer(ITEMS["§2.3"], late)
    assert not f.matched and f.shown.startswith("not measured")
    assert walk(late)["cause"] != "no_warmup"
    # the same run logged from its first step shows the warmup it had
    first = Evidence(rows(loss, cosine_lr(n * 10, 3e-3, warmup=20)[::10], every=10, first=0), vocab_size=V,
                     imported={"first_step": 0, "log_every": 10})
    assert not answer(ITEMS["§2.3"], first)[0].matched


def test_a_stuck_loader_in_a_log_every_5_steps_is_a_fall_that_speeds_up_then_comes_back():
    n = 40
    loss = healthy_loss(n, every=5) + noise(n, 9, 0.01)
    stuck = loss.copy()
    stuck[28:36] -= 0.1 * np.arange(1, 9)  # one batch memorised for 40 steps: every row falls, fast
    stuck[36] = loss[27] + 0.3  # new batches: back above where the fall began
    v = walk(imported(stuck, cosine_lr(n * 5, 1e-3)[::5], every=5))
    assert v["cause"] == "stuck_loader" and 140 <= v["anomaly_step"] <= 150, (v["cause"], v["anomaly_step"])
    # a bump after a fall at the run's own pace (a bad batch in a steadily falling log) is no memorised batch
    bump = loss.copy()
    bump[36] += 1.0
    assert not answer(ITEMS["§4.4"], imported(bump, cosine_lr(n * 5, 1e-3)[::5], every=5))[0].matched
