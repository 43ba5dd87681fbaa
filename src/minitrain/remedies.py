"""Remedies: the fixes the stability check's leaves prescribe, as one registered hook in the training step.

The loop calls `apply_remedy(step, grad_norm, ctx)` once per step, after clip-and-before-step (and before
the optimizer-state injection point), and takes the optimizer step only if it returns True:

    skip_batch       at remedy_step: no update at all (weights and Adam moments untouched), the
                     offending batch is dropped; its loss and pre-clip norm are still logged
    restore_moments  keeps Adam's moments (m, v) as they are at every checkpoint boundary (the state a
                     checkpoint written there holds); at remedy_step it puts back the last such copy
                     taken before remedy_step, i.e. it reloads the pre-spike checkpoint's moments
    zclip            ZClip's detector: z-score of the pre-clip gradient norm against an EMA of its mean
                     and variance (alpha 0.97, z > 2.5); on a spike the (already clipped) gradient is
                     scaled by threshold / norm. Plain ZClip would clip the norm to the threshold, which
                     changes nothing here: the threshold (~mean + 2.5 std of norms of 2-5) is above the
                     fixed clip of 1.0, which engages on every step. Down-weighting is what can still act.

With `remedy: none` (the default) `ctx` is None and the hook returns True at once. A remedy is one
function registered with `@remedy(name, params, cause)`; it writes what it did into `ctx.actions`, which
the manifest records. `remediate()` at the bottom drives a whole remediation run (`minitrain remediate`).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from minitrain.errors import UserError

MAX_ACTIONS_RECORDED = 50  # zclip may act often; the manifest keeps the first 50 and a count


@dataclass(frozen=True)
class Remedy:
    name: str
    params: tuple[str, ...]  # config fields it reads (recorded in the manifest)
    cause: str  # the stability-check cause it answers
    apply: Callable[[int, float, "RemedyContext"], bool]
    summary: str


REGISTRY: dict[str, Remedy] = {}


def remedy(name: str, params: tuple[str, ...], cause: str):
    def register(fn):
        REGISTRY[name] = Remedy(name, params, cause, fn, (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return register


@dataclass
class RemedyContext:
    cfg: Any
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    state: dict = field(default_factory=dict)  # the remedy's own memory (snapshots, EMA)
    actions: list = field(default_factory=list)
    action_count: int = 0

    def note(self, step: int, action: str, **numbers) -> None:
        self.action_count += 1
        if len(self.actions) < MAX_ACTIONS_RECORDED:
            self.actions.append({"step": step, "action": action, **numbers})

    def moments(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        out = {}
        for name, p in self.model.named_parameters():
            st = self.opt.state.get(p)
            if st:
                out[name] = (st["exp_avg"], st["exp_avg_sq"])
        return out


# ---------------------------------------------------------------------------------------------------
# The remedies
# ---------------------------------------------------------------------------------------------------


@remedy("skip_batch", params=("remedy_step",), cause="bad_batch")
def skip_batch(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Skip the offending batch: no update at remedy_step (weights and Adam moments untouched)."""
    if step != ctx.cfg.remedy_step:
        return True
    ctx.note(step, "skipped this step's update", grad_norm=grad_norm)
    return False


@remedy("restore_moments", params=("remedy_step", "remedy_param", "ckpt_every"), cause="optimizer_state_corruption")
def restore_moments(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Restore Adam's moments (of remedy_param, or of every tensor) from the last checkpoint boundary before
    remedy_step, at remedy_step."""
    cfg = ctx.cfg
    if step % cfg.ckpt_every == 0 and step < cfg.remedy_step:  # what a checkpoint at this step holds
        ctx.state["snapshot"] = (step, {n: (m.clone(), v.clone()) for n, (m, v) in ctx.moments().items()
                                        if not cfg.remedy_param or n == cfg.remedy_param})
    if step == cfg.remedy_step:
        if "snapshot" not in ctx.state:
            ctx.note(step, "nothing restored: no checkpoint boundary seen before remedy_step")
            return True
        source, saved = ctx.state["snapshot"]
        live = ctx.moments()
        for name, (m, v) in saved.items():
            live[name][0].copy_(m)
            live[name][1].copy_(v)
        ctx.note(step, "restored Adam's m and v", from_checkpoint_step=source, tensors=len(saved),
                 **({"param": cfg.remedy_param} if cfg.remedy_param else {}))
    return True


@remedy("zclip", params=("remedy_zclip_z", "remedy_zclip_alpha", "remedy_zclip_warmup"), cause="gradient_explosion")
def zclip(step: int, grad_norm: float, ctx: RemedyContext) -> bool:
    """Adaptive clipping: down-weight a step whose pre-clip norm is a z-score outlier against its EMA."""
    cfg, st = ctx.cfg, ctx.state
    if not math.isfinite(grad_norm):
        return True  # non-finite steps are the loop's business (it stops the run)
    n = st.get("n", 0)
    if n < cfg.remedy_zclip_warmup:  # plain running mean and variance to start the EMA
        mean = st.get("mean", 0.0)
        new_mean = mean + (grad_norm - mean) / (n + 1)
        st["m2"] = st.get("m2", 0.0) + (grad_norm - mean) * (grad_norm - new_mean)
        st["mean"], st["var"], st["n"] = new_mean, st["m2"] / (n + 1), n + 1
        return True
    mean, std = st["mean"], math.sqrt(max(st["var"], 0.0))
    z = (grad_norm - mean) / max(std, 1e-12)
    seen = grad_norm
    if z > cfg.remedy_zclip_z:
        threshold = mean + cfg.remedy_zclip_z * std
        factor = threshold / grad_norm
        with torch.no_grad():
            for p in ctx.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(factor)
        ctx.note(step, "down-weighted the clipped gradient", z=round(z, 3), factor=round(factor, 5),
                 grad_norm=grad_norm, threshold=round(threshold, 4))
        seen = threshold  # ZClip feeds the clipped value to its statistics, so one spike does not inflate them
    a = cfg.remedy_zclip_alpha
    st["mean"] = a * mean + (1 - a) * seen
    st["var"] = a * st["var"] + (1 - a) * (seen - st["mean"]) ** 2
    st["n"] = n + 1
    return True


# ---------------------------------------------------------------------------------------------------


def apply_remedy(step: int, grad_norm: torch.Tensor, ctx: RemedyContext | None) -> bool:
    """The hook: a no-op (True: take the optimizer step) unless a remedy is configured."""
    if ctx is None:
        return True
    return REGISTRY[ctx.cfg.remedy].apply(step, float(grad_norm), ctx)


def remedy_checkpoint(ctx: RemedyContext) -> dict:
    """The JSON part of a remedy's memory, for a checkpoint. Tensor snapshots (restore_moments) are not
    saved: a resume starts at a checkpoint boundary, where that remedy takes its snapshot again."""
    scalars = {k: v for k, v in ctx.state.items() if isinstance(v, (int, float))}
    return {"state": scalars, "actions": list(ctx.actions), "action_count": ctx.action_count}


def remedy_restore(ctx: RemedyContext, saved: dict) -> None:
    ctx.state.update(saved.get("state", {}))
    ctx.actions[:] = saved.get("actions", [])
    ctx.action_count = saved.get("action_count", 0)


def make_context(cfg, model, opt) -> RemedyContext | None:
    return None if cfg.remedy == "none" else RemedyContext(cfg, model, opt)


def remedy_record(ctx: RemedyContext | None) -> dict | None:
    """The remedy as configured plus what it did, for the manifest."""
    if ctx is None:
        return None
    r = REGISTRY[ctx.cfg.remedy]
    return {"remedy": r.name, "cause": r.cause, **{p: getattr(ctx.cfg, p) for p in r.params},
            "actions": list(ctx.actions), "action_count": ctx.action_count}


def validate_remedy_config(cfg) -> None:
    if cfg.remedy == "none":
        return
    if cfg.remedy not in REGISTRY:
        close = difflib.get_close_matches(cfg.remedy, REGISTRY, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown remedy '{cfg.remedy}'{hint}; valid remedies: none, {', '.join(REGISTRY)}")
    if "remedy_step" in REGISTRY[cfg.remedy].params and not 0 <= cfg.remedy_step < cfg.steps:
        raise UserError(f"remedy {cfg.remedy} needs remedy_step within [0, {cfg.steps - 1}], got {cfg.remedy_step}; "
                        "e.g. --set remedy_step=500")
    if cfg.remedy_param and cfg.remedy_param not in _param_names(cfg):
        close = difflib.get_close_matches(cfg.remedy_param, _param_names(cfg), n=3, cutoff=0.4)
        raise UserError(f"unknown parameter '{cfg.remedy_param}' for remedy_param"
                        + (f"; close matches: {', '.join(close)}" if close else "; see docs/metrics.md for the names"))
    if not (cfg.remedy_zclip_z > 0 and 0 < cfg.remedy_zclip_alpha < 1 and cfg.remedy_zclip_warmup >= 2):
        raise UserError("zclip needs remedy_zclip_z > 0, 0 < remedy_zclip_alpha < 1 and remedy_zclip_warmup >= 2")


def _param_names(cfg) -> list[str]:
    from minitrain.model import build_model

    return [n for n, _ in build_model(cfg, torch.Generator().manual_seed(0)).named_parameters()]


# ---------------------------------------------------------------------------------------------------
# A whole remediation: `minitrain remediate RUN`
# ---------------------------------------------------------------------------------------------------

# The registered remedy of each cause the walker can name; config fixes re-run from step 0.
CAUSE_REMEDY = {"gradient_explosion": "zclip", "bad_batch": "skip_batch", "optimizer_state_corruption": "restore_moments"}
CONFIG_FIXES = {"bad_init": "init_scale=1", "no_warmup": "warmup_steps=100", "broken_mask": "causal_mask=true"}


def checkpoint_before(run: Path, limit: int) -> tuple[Path, int] | None:
    """The latest checkpoint at or before step `limit` holding this run's state: in the run itself, or in the
    run it was forked from (whose steps before the fork are this run's too)."""
    import json

    from minitrain import runfiles

    best = None
    run, seen = Path(run), set()
    while run is not None and run.resolve() not in seen:
        seen.add(run.resolve())
        steps = [s for s in runfiles.list_checkpoints(run) if s <= limit]
        if steps and (best is None or steps[-1] > best[1]):
            best = (run, steps[-1])
        try:
            forked = json.loads((run / "manifest.json").read_text()).get("forked_from") or {}
        except (OSError, ValueError):
            forked = {}
        if not forked.get("run"):
            break
        limit = min(limit, int(forked.get("checkpoint_step", limit)))
        run = run.parent / forked["run"]
    return best


def remediate(run: Path, remedy_name: str | None = None, baseline: Path | None = None,
              force: bool = False) -> dict:
    """Walk RUN, re-run it from the last checkpoint before the anomaly with the leaf's remedy into
    RUN-remediated, walk that, measure both against the baseline and write RUN-remediated/dashboard.html
    (remediated vs original vs baseline)."""
    import json

    from minitrain import blind, dashboard, loop, runfiles
    from minitrain.config import build_config
    from minitrain.learner import baseline_for, measure, walk

    run = Path(run)
    if not (run / "manifest.json").exists():
        raise UserError(f"{run} is not a run folder (no manifest.json); give e.g. experiments/19-injection-B")
    if run.name.endswith("-remediated"):
        raise UserError(f"{run} is already a remediation; remediate the original run")
    manifest = runfiles.read_json(run / "manifest.json", "manifest")
    config = manifest.get("config") or {}
    cfg = blind.true_config(run) if config.get("blind") else build_config(config, [])
    verdict = walk(run)
    if not verdict:
        raise UserError(f"the stability walker could not read {run}; see 'minitrain diagnose {run}'")
    cause, anomaly = verdict.get("cause"), verdict.get("anomaly_step")
    name = remedy_name or CAUSE_REMEDY.get(cause) or CONFIG_FIXES.get(cause)
    if name is None:
        raise UserError(f"the walker stops at {verdict.get('leaf')} ({cause}), which has no registered remedy; "
                        f"apply its remediation by hand, or pick one with --remedy ({', '.join(REGISTRY)})")
    donor, overrides = None, ["progress=false", "blind=false"]
    if name in REGISTRY:
        if anomaly is None:
            raise UserError(f"the walker names no anomaly step for {run}, so {name} has no step to act at")
        remedy_step = anomaly + 1 if name == "restore_moments" else anomaly
        if remedy_step >= cfg.steps:
            raise UserError(f"the anomaly is at the run's last step ({anomaly}); there is nothing after it to remedy")
        start_limit = anomaly - cfg.remedy_zclip_warmup if name == "zclip" else anomaly
        donor = checkpoint_before(run, max(0, start_limit))
        overrides += [f"remedy={name}", f"remedy_step={remedy_step}"]
        tensor = (verdict.get("evidence") or {}).get("tensor")
        if name == "restore_moments" and tensor:  # the walker names the tensor whose v moved: restore only it
            overrides.append(f"remedy_param={tensor}")
    elif "=" in name:
        overrides.append(name)  # a config fix: the whole run again from step 0
    else:
        raise UserError(f"unknown remedy '{name}'; valid: {', '.join([*REGISTRY, *CONFIG_FIXES.values()])}")
    new_cfg = build_config(cfg.to_dict(), overrides)
    out = run.parent / f"{run.name}-remediated"
    res = loop.train(new_cfg, out, force=force, fork=False, donor=donor)
    after = walk(out) or {}
    baseline = Path(baseline) if baseline else baseline_for(run, run.parent)
    k = anomaly
    before_m, after_m = measure(run, baseline, k), measure(out, baseline, k)
    # one page, remediated vs original vs baseline: both runs' differences to the baseline side by side
    pages = [dashboard.write_dashboard(out, baseline=baseline, compare=[run])]
    summary = _summary(name, before_m, after_m, verdict, after)
    report = {"run": run.name, "remediated": out.name, "baseline": baseline.name if baseline else None,
              "walker_before": verdict, "walker_after": after, "remedy": name,
              "from_checkpoint": {"run": donor[0].name, "step": donor[1]} if donor else None,
              "status": res.get("status"), "measured_before": before_m, "measured_after": after_m,
              "actions": (json.loads((out / "manifest.json").read_text()).get("remedy") or {}).get("actions"),
              "action_count": (json.loads((out / "manifest.json").read_text()).get("remedy") or {}).get("action_count"),
              "dashboards": [str(p) for p in pages], "summary": summary}
    runfiles.atomic_write_json(out / "remediation.json", report)
    return report


def _summary(name: str, before: dict, after: dict, walk_before: dict, walk_after: dict) -> str:
    from minitrain.learner import _fmt

    parts = [f"remedy {name}"]
    for label, key in (("mean loss diff K+1..K+50", "mean_loss_diff_after_K"),
                       ("max loss diff after K", "max_loss_diff_after_K"),
                       ("recovery steps", "recovery_steps"), ("final val loss diff", "final_val_loss_diff")):
        if key in before or key in after:
            parts.append(f"{label} {_fmt(before.get(key))} -> {_fmt(after.get(key))}")
    parts.append(f"walker {walk_before.get('leaf')} ({walk_before.get('cause')}) -> "
                 f"{walk_after.get('leaf')} ({walk_after.get('cause')})")
    return "; ".join(parts)
