"""A batched ensemble of the course model (stacked parameters, torch.func.vmap) against the same runs stepped one
after another, as `minitrain explore` steps them today: does batching M same-shape runs into one step pay at
this shape (130k parameters, a step of ~6 ms: how much of it is per-operation overhead that batching saves)?

    python bench/ensemble.py [--members 1,2,4,8,16] [--rounds 9] [--steps 10] [--check-steps 50,250]
                             [--check-members 4] [--no-timing] [--no-check]

The arms, each a way of taking one training step of M runs (member i: the course model and config, seed
`seed + i`, its own batches `data.train_batch(step, batch_size, seed + i)`, the run's warmup + cosine LR):

  sequential   M ordinary models, each with loop.make_optimizer's AdamW (fused, decay on matrices only), each
               step as the loop's bare step: forward at the loss's targets, masked_loss, backward,
               loop.clip_grad_norm, opt.step; the M models one after another.
  ensemble-autograd   the M models' parameters stacked into one tensor per name
               (torch.func.stack_module_state), the forward of all M at once: torch.func.functional_call of
               the real GPT under torch.func.vmap over members (in_dims=0 for parameters and batches; the RoPE
               table shared), each member's batch right-padded to the widest member's width and its target list
               padded with weight-0 entries (a causal model's real positions never see the pad, and the loss
               skips the padded targets). The loss is each member's token mean, summed over members; ONE
               autograd backward through the vmapped forward gives each member's gradient in its slice (nothing
               couples members, so the gradient of the sum is each member's own; the stacked tensors stay
               ordinary leaves whose .grad AdamW reads). Clipping per member, by that member's own global norm
               over its slices; ONE fused torch.optim.AdamW over the stacked tensors (elementwise: per member
               the same update as its own AdamW; decay on what is a matrix in one member).
  ensemble-func-grad   the same with the gradients from vmap(torch.func.grad_and_value(member loss))
               (`--backward func-grad` in the numerics check).
  ensemble-math-attention   the ensemble with SDPA's math backend: torch 2.13 has no vmap batching rule for
               the CPU flash attention kernel, so vmap runs it once per member; the math backend's matmuls and
               softmax it batches (different bits from the runs: what a batching rule could buy).
  one-model    not an ensemble: ONE model with batch M x B, the same number of rows through one set of
               weights: the ceiling of any batching at this shape (no per-member weights, one AdamW of 130k).

The timing: rounds, each of `--steps` steps of every arm at every M, the arms of one M interleaved step by step
(their order rotated every step); CPU time (one torch thread) and wall time per step summed over the round;
per round the ratio arm / sequential, then the median over rounds. The load average is printed with every
round.

The numerics check (`--check-members` members from the same initial weights, `--check-steps` steps): after each
listed step, the largest difference between each member's loss in the ensemble and its sequential model's
loss over the steps so far (absolute and relative), and of the parameters (largest absolute difference, and
largest relative to the tensor's largest |value|). It also trains member 0 alone (an ensemble of one) and says
whether its bits depend on its ensemble mates.

Prints markdown tables; docs/benchmarks.md ("A batched ensemble (vmap), measured") records a run of it.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import platform
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from minitrain import loop
from minitrain.core.config import build_config
from minitrain.core.data import prepare
from minitrain.core.provenance import git_sha
from minitrain.core.model import build_model
from minitrain.core.tokenizer import PAD

# torch 2.13 has no batching rule for the CPU flash attention kernel: vmap runs it once per member (a loop in
# C++, reported below as what the ensemble cannot batch), and warns about it on every call.
warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")


def load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------------
# The two ways of stepping M runs
# ---------------------------------------------------------------------------------------------------


class Batches:
    """Each member's training batches, built before any clock starts: RunData keeps the batch blocks of a few
    (seed, block) keys only, so M seeds drawn in turn would rebuild a block of 250 batches at every call."""

    def __init__(self, data, cfg, seeds: int, steps: int, batch_size: int | None = None):
        self.per_member = [[data.train_batch(s, batch_size or cfg.batch_size, cfg.seed + i) for s in range(steps)]
                           for i in range(seeds)]

    def get(self, member: int, step: int):
        return self.per_member[member][step]


class Sequential:
    """M ordinary runs stepped one after another: the loop's bare step (bench/perf.py's), M times."""

    def __init__(self, cfg, data: Batches, models):
        self.cfg, self.data, self.models = cfg, data, models
        self.opts = [loop.make_optimizer(m, cfg) for m in models]
        self.params = [list(m.parameters()) for m in models]

    def step(self, step: int) -> list[float] | None:
        cfg, losses = self.cfg, []
        for i, (model, opt, params) in enumerate(zip(self.models, self.opts, self.params)):
            batch = self.data.get(i, step)
            for group in opt.param_groups:
                group["lr"] = loop.lr_at(step, cfg)
            loss, _ = loop.masked_loss(model(batch.x, batch.key_pad, causal=cfg.causal_mask,
                                             at=batch.target_index()), batch)
            for p in params:
                p.grad = None
            loss.backward()
            loop.clip_grad_norm([p.grad for p in params], cfg.grad_clip)
            opt.step()
            losses.append(loss.detach())
        return losses


def stacked_batch(batches):
    """M batches as one: inputs and padding right-padded to the widest member's width T ([M, B, T]), each
    member's targets as flat indices into its padded [B*T] ([M, N], N the largest member's count, padded with
    index 0), their tokens ([M, N]), weights (1 real, 0 padding) and each member's target count ([M])."""
    T = max(b.x.shape[1] for b in batches)
    x = torch.stack([F.pad(b.x, (0, T - b.x.shape[1]), value=PAD) for b in batches])
    y = torch.stack([F.pad(b.y, (0, T - b.y.shape[1]), value=PAD) for b in batches])
    key_pad = torch.stack([F.pad(b.key_pad, (0, T - b.x.shape[1]), value=True) for b in batches])
    mask = torch.stack([F.pad(b.loss_mask, (0, T - b.x.shape[1])) for b in batches])
    at = [m.flatten().nonzero().squeeze(1) for m in mask]
    N = max(len(a) for a in at)
    index = torch.stack([F.pad(a, (0, N - len(a))) for a in at])
    weight = torch.stack([F.pad(torch.ones(len(a)), (0, N - len(a))) for a in at])
    targets = torch.gather(y.flatten(1), 1, index)
    return x, key_pad, index, targets, weight, mask.sum((1, 2))


class Ensemble:
    """M runs as one: stacked parameters, a vmapped forward, per-member clipping, one AdamW."""

    def __init__(self, cfg, data: Batches, models, backward: str = "autograd", attention: str = "flash"):
        self.cfg, self.data, self.M, self.backward = cfg, data, len(models), backward
        # "math": SDPA's math backend, whose matmuls and softmax vmap batches (the flash kernel it cannot)
        self.math_attention = attention == "math"
        params, _ = stack_module_state(models)  # copies: [M, *shape] leaves that require grad
        self.params = params
        self.base = copy.deepcopy(models[0]).to("meta")  # the module whose forward functional_call runs
        self.base.record_activations = False
        self.rope = {"rope": models[0].rope}  # the same table for every member: not batched
        member_dims = {n: p.dim() for n, p in models[0].named_parameters()}
        decay = [p for n, p in params.items() if member_dims[n] >= 2]  # a matrix in one member, as make_optimizer
        no_decay = [p for n, p in params.items() if member_dims[n] < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=cfg.lr_max, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True)

    def member_logits(self, params, x, key_pad, index):
        return functional_call(self.base, (params, self.rope), (x, key_pad),
                               {"causal": self.cfg.causal_mask, "at": index})

    def member_loss(self, params, x, key_pad, index, targets, weight, count):
        per_target = F.cross_entropy(self.member_logits(params, x, key_pad, index), targets, reduction="none")
        return (per_target * weight).sum() / count

    def step(self, step: int) -> torch.Tensor:
        cfg = self.cfg
        batches = [self.data.get(i, step) for i in range(self.M)]
        x, key_pad, index, targets, weight, count = stacked_batch(batches)
        for group in self.opt.param_groups:
            group["lr"] = loop.lr_at(step, cfg)
        for p in self.params.values():
            p.grad = None
        with sdpa_kernel(SDPBackend.MATH) if self.math_attention else contextlib.nullcontext():
            losses = self.forward_backward(x, key_pad, index, targets, weight, count)
        clip_per_member(list(self.params.values()), cfg.grad_clip or math.inf)
        self.opt.step()
        return losses.detach()

    def forward_backward(self, x, key_pad, index, targets, weight, count) -> torch.Tensor:
        """Each member's loss [M]; each member's gradient in its slice of the stacked parameters' .grad."""
        if self.backward == "autograd":
            logits = vmap(self.member_logits, in_dims=(0, 0, 0, 0))(self.params, x, key_pad, index)  # [M, N, V]
            per_target = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
            losses = (per_target.view(self.M, -1) * weight).sum(1) / count  # [M]: each member's token mean
            losses.sum().backward()  # members are independent: each slice gets its own member's gradient
        else:
            detached = {n: p.detach() for n, p in self.params.items()}
            grads, losses = vmap(grad_and_value(self.member_loss))(detached, x, key_pad, index, targets, weight,
                                                                   count)
            for n, p in self.params.items():
                p.grad = grads[n]
        return losses


def clip_per_member(params, max_norm: float) -> torch.Tensor:
    """Each member's gradients clipped by that member's own global L2 norm (loop.clip_grad_norm's formula,
    member by member): the norm of every tensor's slice, then over tensors, then one coefficient per member."""
    grads = [p.grad for p in params]
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])  # [tensors, M]
    total = torch.linalg.vector_norm(norms, dim=0)  # [M]
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, [coef.view(-1, *[1] * (g.dim() - 1)) for g in grads])
    return total


@contextlib.contextmanager
def one_thread():
    """One torch thread, as minitrain's runs train (cfg.threads), the previous count restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def members(cfg, M: int, first: int = 0):
    """M course models, seeds cfg.seed + first .. + first + M - 1, initialised as loop.build_run does."""
    out = [build_model(cfg, torch.Generator().manual_seed(cfg.seed + first + i)) for i in range(M)]
    for m in out:
        m.record_activations = False  # the bare step's setting (bench/perf.py); telemetry is not measured here
    return out


# ---------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------


WARMUP = 3  # untimed steps of every arm first (AdamW's state, the first calls' allocations)


ARMS = {
    "sequential": "M ordinary runs, one after another (the loop's bare step, M times)",
    "ensemble-autograd": "stacked, vmapped forward, one autograd backward (the choice)",
    "ensemble-func-grad": "stacked, vmap(torch.func.grad_and_value) of each member's loss",
    "ensemble-math-attention": "ensemble-autograd with SDPA's math backend, which vmap batches (other bits)",
    "one-model": "NOT an ensemble: one model, batch M x B (the same rows through ONE set of weights): the "
                 "ceiling of any batching at this shape",
}


def make_arm(arm: str, cfg, data, M: int, steps: int):
    if arm == "one-model":
        return Sequential(cfg, Batches(data, cfg, 1, steps, batch_size=M * cfg.batch_size), members(cfg, 1))
    batches = Batches(data, cfg, M, steps)
    if arm == "sequential":
        return Sequential(cfg, batches, members(cfg, M))
    return Ensemble(cfg, batches, members(cfg, M), backward="func-grad" if arm == "ensemble-func-grad" else "autograd",
                    attention="math" if arm == "ensemble-math-attention" else "flash")


@one_thread()
def bench_timing(cfg, data, Ms: list[int], rounds: int, steps: int, arms: list[str]) -> None:
    total = WARMUP + rounds * steps
    print(f"building {len(arms)} arms at M = {Ms}, load average {load()}", file=sys.stderr, flush=True)
    loops = {(M, arm): make_arm(arm, cfg, data, M, total) for M in Ms for arm in arms}
    print(f"warm-up ({WARMUP} steps of each arm), load average {load()}", file=sys.stderr, flush=True)
    for key, arm in loops.items():
        for step in range(WARMUP):
            arm.step(step)
    cpu = {k: [] for k in loops}  # ms per step of all M members, per round
    wall = {k: [] for k in loops}
    for r in range(rounds):
        for M in Ms:
            # the arms of one M interleaved step by step, the order rotated every step (the shared machine's
            # speed drifts within a block of steps); each arm's time summed over the round's steps
            c_sum, w_sum = dict.fromkeys(arms, 0.0), dict.fromkeys(arms, 0.0)
            for step in range(WARMUP + r * steps, WARMUP + (r + 1) * steps):
                k = step % len(arms)
                for arm in arms[k:] + arms[:k]:
                    c0, w0 = time.process_time(), time.perf_counter()
                    loops[(M, arm)].step(step)
                    c_sum[arm] += time.process_time() - c0
                    w_sum[arm] += time.perf_counter() - w0
            for arm in arms:
                cpu[(M, arm)].append(c_sum[arm] / steps * 1000)
                wall[(M, arm)].append(w_sum[arm] / steps * 1000)
        print(f"round {r + 1}/{rounds} done, load average {load()}", file=sys.stderr, flush=True)

    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(a, b))

    print(f"\n## Timing: {rounds} rounds of {steps} steps, arms interleaved step by step; 1 torch thread, "
          f"torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
          f"commit {git_sha(short=True) or 'unknown'}, "
          f"load average at the end {load()}\n")
    print("| M | arm | CPU ms per step of all M | per member | vs sequential (CPU) | vs sequential (wall) "
          "| per-round CPU ratios |")
    print("|---|---|---|---|---|---|---|")
    for M in Ms:
        seq = (M, "sequential")
        for arm in arms:
            key = (M, arm)
            c = statistics.median(cpu[key])
            spread = ", ".join(f"{x / y:.2f}" for x, y in zip(cpu[key], cpu[seq]))
            print(f"| {M} | {arm} | {c:.2f} | {c / M:.2f} | {ratio(cpu[key], cpu[seq]):.3f}x "
                  f"| {ratio(wall[key], wall[seq]):.3f}x | {spread if arm != 'sequential' else ''} |")
    print()
    for arm in arms:
        print(f"- {arm}: {ARMS[arm]}")


# ---------------------------------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------------------------------


def param_diff(ens: Ensemble, seq: Sequential) -> tuple[float, float]:
    """Largest |ensemble - sequential| over every member's every parameter, and the largest such difference
    relative to its tensor's largest |value| in the sequential model."""
    worst_abs = worst_rel = 0.0
    for i, model in enumerate(seq.models):
        for n, p in model.named_parameters():
            d = float((ens.params[n][i].detach() - p.detach()).abs().max())
            worst_abs = max(worst_abs, d)
            worst_rel = max(worst_rel, d / max(float(p.detach().abs().max()), 1e-30))
    return worst_abs, worst_rel


@one_thread()
def check_numerics(cfg, data: Batches, M: int, checkpoints: list[int], backward: str = "autograd") -> list[dict]:
    """Train an ensemble of M and the M sequential models from the same initial weights; at each checkpoint
    the largest loss and parameter differences so far. Also member 0 as an ensemble of one, against member 0
    of the ensemble of M: the first step after which member 0's loss or weights differ in any bit (does a
    member's result depend on its mates?), None while they are equal."""
    seq = Sequential(cfg, data, members(cfg, M))
    ens = Ensemble(cfg, data, members(cfg, M), backward=backward)
    alone = Ensemble(cfg, data, members(cfg, 1), backward=backward)
    loss_abs = loss_rel = 0.0
    mates_differ = None
    out = []
    for step in range(max(checkpoints)):
        ls = torch.stack(seq.step(step))
        le = ens.step(step)
        la = alone.step(step)
        loss_abs = max(loss_abs, float((le - ls).abs().max()))
        loss_rel = max(loss_rel, float(((le - ls).abs() / ls.abs()).max()))
        if mates_differ is None and not (bool(la[0] == le[0]) and all(
                torch.equal(alone.params[n][0], ens.params[n][0]) for n in ens.params)):
            mates_differ = step + 1
        if step + 1 in checkpoints:
            p_abs, p_rel = param_diff(ens, seq)
            out.append({"steps": step + 1, "loss_abs": loss_abs, "loss_rel": loss_rel, "param_abs": p_abs,
                        "param_rel": p_rel, "final_loss": float(ls.mean()), "mates_differ": mates_differ})
            print(f"numerics: {step + 1} steps checked, load average {load()}", file=sys.stderr, flush=True)
    return out


def print_numerics(rows: list[dict], M: int, backward: str) -> None:
    print(f"\n## Numerics: ensemble of {M} ({backward} backward) against {M} sequential runs, the same initial "
          "weights and batches\n")
    print("| steps | max abs loss diff | max rel loss diff | max abs param diff | max param diff / tensor's max "
          "| mean loss at the last step | member 0 alone vs among mates: bits differ after step |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['steps']} | {r['loss_abs']:.2e} | {r['loss_rel']:.2e} | {r['param_abs']:.2e} "
              f"| {r['param_rel']:.2e} | {r['final_loss']:.4f} | {r['mates_differ'] or 'never (bit-equal)'} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--members", default="1,2,4,8,16", help="ensemble sizes M to time (default 1,2,4,8,16)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    ap.add_argument("--steps", type=int, default=10, help="steps of each arm per round (default 10)")
    ap.add_argument("--arms", default=",".join(ARMS),
                    help="arms to time, 'sequential' first (default all: "
                         + "; ".join(f"{k}: {v}" for k, v in ARMS.items()) + ")")
    ap.add_argument("--check-members", type=int, default=4, help="members in the numerics check (default 4)")
    ap.add_argument("--check-steps", default="50,250", help="steps after which to report differences (default 50,250)")
    ap.add_argument("--backward", choices=("autograd", "func-grad"), default="autograd",
                    help="the ensemble's backward in the numerics check (default autograd)")
    ap.add_argument("--no-timing", action="store_true", help="skip the timing")
    ap.add_argument("--no-check", action="store_true", help="skip the numerics check")
    args = ap.parse_args(argv)
    try:
        Ms = [int(m) for m in args.members.split(",")]
        checkpoints = sorted(int(s) for s in args.check_steps.split(","))
    except ValueError:
        print("--members and --check-steps take comma-separated integers, e.g. --members 1,2,4", file=sys.stderr)
        return 2
    arms = args.arms.split(",")
    if arms[0] != "sequential" or not set(arms) <= set(ARMS):
        print(f"--arms: 'sequential' first, then any of {', '.join(list(ARMS)[1:])}", file=sys.stderr)
        return 2
    if min(Ms + checkpoints + [args.check_members, args.rounds, args.steps]) < 1:
        print("--members, --check-steps, --check-members, --rounds and --steps must be at least 1", file=sys.stderr)
        return 2
    cfg = build_config({}, ["progress=false"])
    print(f"preparing the course data, load average {load()}", file=sys.stderr, flush=True)
    data = prepare(cfg)
    if not args.no_check:
        batches = Batches(data, cfg, args.check_members, max(checkpoints))
        rows = check_numerics(cfg, batches, args.check_members, checkpoints, args.backward)
        print_numerics(rows, args.check_members, args.backward)
    if not args.no_timing:
        bench_timing(cfg, data, Ms, args.rounds, args.steps, arms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
