"""torch's AdamW as an eager run calls it, without the wrappers that only speak to torch.compile.

torch.optim.Optimizer wraps `add_param_group`, `zero_grad`, `state_dict` and `load_state_dict` in
`torch._disable_dynamo`, and Adam's `step` in a wrapper that marks graph breaks; each imports `torch._dynamo`
on its first call. That import is about 1.4 CPU seconds of every process (a third of a default run's time
outside its steps) to tell a compiler that minitrain never runs to leave the optimizer alone. `EagerAdamW`
calls the same methods underneath (the functions the wrappers hold as `__wrapped__`), so the same kernels
run in the same order on the same tensors: the bytes of every run are unchanged (tests/test_reference.py,
tests/test_optimizer.py).
"""
from __future__ import annotations

import torch
from torch.optim import Adam, Optimizer


def unwrapped(method):
    """The function a torch wrapper holds (functools.wraps records it), or the method itself."""
    return getattr(method, "__wrapped__", method)


ADAM_STEP = unwrapped(Adam.step)  # Adam's step without its graph-break wrapper


class EagerAdamW(torch.optim.AdamW):
    """torch.optim.AdamW (a subclass: isinstance checks, state_dict layout and kernels are torch's own)
    without the torch.compile wrappers; not for use under torch.compile."""

    add_param_group = unwrapped(Optimizer.add_param_group)
    zero_grad = unwrapped(Optimizer.zero_grad)
    state_dict = unwrapped(Optimizer.state_dict)
    load_state_dict = unwrapped(Optimizer.load_state_dict)

    def step(self, closure=None):
        # what the wrapper does around it in eager mode: gradients off (differentiable=False), restored after
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return ADAM_STEP(self, closure)
