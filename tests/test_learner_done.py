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

    monkeypatch.setattr(loop, "maybe_inject", perturbing)
    ok, why = learner.hook_is_noop()
    assert not ok and "different metrics with and without maybe_inject (from step 2 on)" in why, why
    assert loop.maybe_inject is perturbing  # the bypass puts the hook back


def test_the_bypass_takes_every_injection_point_out_of_the_step(monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "maybe_inject", lambda p, step, target, ctx: calls.append(p) or target)
    # an injection configured, so that the optimizer-state point is visited too
    run = loop.build_run(build_config({}, [*learner.HOOK_RUN, "injection=scale", "injection_step=3"]))
    with loop.hook_bypassed():
        loop.train_step(run, 0)
    assert calls == []
    loop.train_step(run, 1)
    assert sorted(calls) == ["batch", "grads", "lr", "optimizer_state"]


def test_the_bypass_restores_the_hook_after_an_error():
    hook = loop.maybe_inject
    with pytest.raises(RuntimeError), loop.hook_bypassed():
        assert loop.maybe_inject is loop.no_hook
        raise RuntimeError
    assert loop.maybe_inject is hook
