"""`minitrain check`'s hook item (lab/learner/done.py): a short run with injection none writes the same metrics
bytes with and without maybe_inject, and a hook that is not a no-op is caught."""
import pytest

from minitrain import loop
from minitrain.core.config import build_config
from minitrain.lab import learner


def test_the_hook_is_a_noop_by_default():
    ok, why = learner.hook_is_noop()
    assert ok, why
    assert "4-step run with injection none writes the same metrics bytes" in why


@pytest.mark.parametrize("point", ["lr", "grads"])
def test_a_hook_that_perturbs_is_caught(monkeypatch, point):
    hook = loop.maybe_inject

    def perturbing(p, step, target, ctx):
        if p == point and step == 2:  # one point, one step, the smallest change the bytes can show
            return target * (1 + 1e-6) if p == "lr" else {n: g * (1 + 1e-6) for n, g in target.items()}
        return hook(p, step, target, ctx)

    monkeypatch.setattr(loop, "maybe_inject", perturbing)  # as a learner's edit of the hook would
    ok, why = learner.hook_is_noop()
    assert not ok and "different metrics with and without maybe_inject (from step 2 on)" in why, why
    assert loop.maybe_inject is perturbing  # the check changed no module's hook


def test_the_hook_is_the_runs_own_and_no_hook_takes_every_injection_point_out_of_the_step(monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "maybe_inject", lambda p, step, target, ctx: calls.append(p) or target)
    # an injection configured, so that the optimizer-state point is visited too
    cfg = build_config({}, [*learner.HOOK_RUN, "injection=scale", "injection_step=3"])
    without = loop.build_run(cfg, hook=loop.no_hook)
    loop.train_step(without, 0)
    assert calls == [] and without.maybe_inject is loop.no_hook
    run = loop.build_run(cfg)
    loop.train_step(run, 1)
    assert sorted(calls) == ["batch", "grads", "loss", "lr", "optimizer_state", "step"]


def test_after_a_miss_check_offers_a_way_to_finish():
    from minitrain.lab.learner import done
    from minitrain.lab.learner.labs import LABS

    spike = done.retry("ana", LABS["spike"])
    assert "'minitrain blind-runs spike'" in spike and "'minitrain check ana --lab blind'" in spike
    broke = done.retry("ana", LABS["break-it"])
    assert "'minitrain blind-runs break-it --experiments experiments-2'" in broke and "ana-2" in broke
