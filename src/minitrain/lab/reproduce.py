"""`minitrain reproduce RUN --baseline BASE`: the lab's inverse. Which registered perturbation, at which step
and of which magnitude, turns BASE into RUN?

    anchor    the first step whose row differs between RUN and BASE (they share every row before it when RUN
              is BASE plus a fault); when they differ from step 0 (another seed or config), the walker's
              anomaly step on RUN, and no hypothesis can be exact
    stage 1   every registered injection (core/injections.py) at its default magnitude, at each step near the
              anchor (the anchor and the step before it, where a fault that leaves its own row unchanged,
              a stuck loader, starts; around the walker's step without a shared prefix), forked from BASE's
              checkpoint at or before that step and cut SHORT steps after the anchor
    stage 2   the TOP kinds of stage 1, each at its best step, over its whole magnitude grid (GRID), cut
              `window` steps after the anchor
    ranking   stage 2 by distance, then the other kinds' stage-1 results (over the short window)

The distance and the judgment exact / within rounding / approximate are analysis/replay_match.py's. Every
hypothesis is a replay under RUN/reproduce/ (lab/replays.py: locked, cached by config hash, on the one
runner); `budget` caps how many are trained in all.
"""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.analysis import replay_match as rm
from minitrain.analysis.compare import v_departure
from minitrain.analysis.walk import diagnose_run
from minitrain.core.config import TrainConfig
from minitrain.core.errors import UserError
from minitrain.core.injections import REGISTRY as INJECTIONS
from minitrain.lab import ray_backend, spoilers
from minitrain.lab.explain import retention_advice, run_config
from minitrain.lab.remediate import checkpoint_before
from minitrain.lab.replays import Replay, comparable_rows, cpu_seconds, replay_config, run_replays
from minitrain.run import files, reader

FOLDER = "reproduce"
SHORT = 10  # stage 1 compares the anchor and the SHORT - 1 steps after it
TOP = 2  # kinds taken to stage 2
WINDOW = 100  # stage 2 compares this many steps from the anchor (cut at the run's end)
BUDGET = 60  # replays trained at most


def _grid(field: str, values) -> list[dict]:
    return [{field: v} for v in values]


# The magnitude grid of each registered injection: roughly log-spaced, the config's default on it.
GRID: dict[str, list[dict]] = {
    "scale": _grid("injection_scale", (2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 70.0, 100.0, 200.0, 500.0)),
    "bad_batch": [{}],
    "v_corrupt": _grid("injection_factor", (0.01, 0.1, 3.0, 10.0, 30.0, 50.0, 100.0, 200.0, 300.0, 1000.0)),
    "lr_spike": [{"injection_mult": m, "injection_span": s} for m in (2.0, 5.0, 10.0, 20.0) for s in (1, 5, 20)],
    "corrupt_batch": [{"injection_mode": m, "injection_rows": r} for m in ("random", "shift", "mismatch")
                      for r in (0, 1, 4)],
    "stuck_loader": _grid("injection_span", (2, 5, 20, 50)),
    "target_leak": _grid("injection_span", (1, 5, 20, 50)),
    "adam_setting": [{"injection_beta2": b, "injection_eps": e} for b in (0.9, 0.99, 0.999) for e in (1e-8, 1e-6)],
}


def default_magnitude(kind: str) -> dict:
    """The kind's parameters at their config defaults (stage 1)."""
    d = TrainConfig()
    return {p: getattr(d, p) for p in INJECTIONS[kind].params if p not in ("injection_sentence", "injection_param")}


def anchor_of(run: Path, run_rows: dict, base_rows: dict, blind_run: bool) -> tuple[int, bool, list[int]]:
    """(anchor step, whether RUN shares BASE's rows before it, the candidate steps)."""
    a, b = comparable_rows(run_rows, blind_run), comparable_rows(base_rows, blind_run)
    d = rm.first_difference(a, b)
    if d is None:
        raise UserError(f"{run} and its baseline agree on every row they share: there is nothing to reproduce")
    if d > 0:
        return d, True, [d - 1, d]
    s = diagnose_run(run).get("anomaly_step")
    if s is None:
        raise UserError(f"{run} differs from the baseline from step 0 and the walker names no anomaly step: "
                        "give a baseline made with the run's config (same seed) and no fault")
    return s, False, [x for x in (s - 1, s, s + 1) if x >= 0]


def hypothesis(kind: str, step: int, magnitude: dict, tensor: str | None, base, start: tuple[Path, int], stop: int,
               stage: int) -> Replay | None:
    over = {"injection": kind, "injection_step": step, **magnitude}
    if kind == "v_corrupt" and tensor:
        over["injection_param"] = tensor
    try:
        cfg = replay_config(base.to_dict(), over)
    except UserError:  # e.g. a step past the run's end
        return None
    words = ", ".join(f"{k.removeprefix('injection_')}={v:g}" if isinstance(v, float) else
                      f"{k.removeprefix('injection_')}={v}" for k, v in over.items()
                      if k not in ("injection", "injection_step"))
    return Replay(f"{kind}-k{step}-{cfg.hash()[:8]}-to{stop}", f"{kind} at {step}" + (f" ({words})" if words else ""),
                  "hypothesis", over, start, stop, {"kind": kind, "step": step, "magnitude": magnitude,
                                                          "stage": stage})


def reproduce(run: Path, baseline: Path, window: int = WINDOW, budget: int = BUDGET, jobs: int | None = None,
              spoil: bool = False, kinds: list[str] | None = None, out=None, ray: str | None = None) -> dict:
    """Search the registered perturbations (all, or `kinds`) for the one that turns BASE into RUN. `ray`:
    train the hypotheses on the Ray cluster at this address (`local`: one started here; docs/scale.md)."""
    out = out or sys.stderr
    kinds = list(kinds or INJECTIONS)
    unknown = [k for k in kinds if k not in INJECTIONS]
    if unknown:
        raise UserError(f"unknown injection {unknown[0]!r} in --kinds; registered: {', '.join(INJECTIONS)}")
    cpu0 = cpu_seconds()
    run, baseline = Path(run), Path(baseline)
    for r in (run, baseline):
        if not (r / reader.MANIFEST).exists():
            raise UserError(f"{r} is not a run folder (no manifest.json); give e.g. experiments/19-injection-A "
                            "--baseline experiments/18-baseline")
    if run.resolve() == baseline.resolve():
        raise UserError("--baseline is the run itself; give the clean run it is compared with")
    if spoilers.is_sealed(run) and not spoil:
        raise UserError(f"{run} is a run of the {spoilers.lab_of(run)} lab, which is not revealed yet: diagnose it "
                        "yourself first and reveal ('minitrain reveal NAME'), or pass --spoil to see the answer now")
    if window < SHORT or budget < 1:
        raise UserError(f"--window must be at least {SHORT} steps and --budget at least 1")
    files.refuse_if_live(run)
    files.refuse_if_live(baseline)
    run_manifest = reader.read_json(run / reader.MANIFEST, "manifest")
    blind_run = bool(reader.config_of(run_manifest).get("blind"))
    base_cfg = run_config(baseline, reader.read_json(baseline / reader.MANIFEST, "manifest"))
    if base_cfg.injection != "none" or base_cfg.remedy != "none":
        raise UserError(f"{baseline} is not a clean run (injection {base_cfg.injection}, remedy {base_cfg.remedy}); "
                        "give the run without a fault")
    run_rows, base_rows = reader.rows_by_step(run), reader.rows_by_step(baseline)
    anchor, shared, steps = anchor_of(run, run_rows, base_rows, blind_run)
    last = min(max(run_rows), base_cfg.steps - 1)
    stop1, stop2 = min(anchor + SHORT, last + 1), min(anchor + window, last + 1)
    tensor = (v_departure(run_rows, base_rows, anchor) or (None, None))[0]
    notes = [] if shared else [f"{run.name} and {baseline.name} differ from step 0 (another seed or config): no "
                               f"hypothesis forked from {baseline.name} can be exact; searching around the walker's "
                               f"step {anchor}"]
    parent = run / FOLDER
    starts = {}
    for s in steps:
        starts[s] = checkpoint_before(baseline, s)
        if starts[s] is None:
            notes.append(f"hypotheses at step {s}: " + retention_advice(baseline, s, base_cfg))
    stage1 = [h for kind in kinds for s in steps if starts[s] is not None
              if (h := hypothesis(kind, s, default_magnitude(kind), tensor, base_cfg, starts[s], stop1, 1)) is not None]
    if not stage1:
        raise UserError(retention_advice(baseline, steps[0], base_cfg))
    backend = ray_backend.backend(ray, jobs)  # both stages' replays; a Ray cluster ends with the process on an error
    cost = [run_replays(stage1[:budget], parent, base_cfg.to_dict(), jobs, out, "reproduce stage 1", backend)]
    left = budget - len(stage1[:budget])
    if len(stage1) > budget:
        notes.append(f"the budget ({budget}) stopped stage 1 after {budget} of {len(stage1)} hypotheses")
    scored1 = [score(h, run_rows, range(min(steps), stop1), blind_run) for h in stage1[:budget]]
    scored1.sort(key=lambda r: r["distance"])
    best_kinds: list[dict] = []
    for r in scored1:
        if r["kind"] not in {b["kind"] for b in best_kinds}:
            best_kinds.append(r)
    stage2 = []
    for b in best_kinds[:TOP]:
        for mag in GRID.get(b["kind"], [default_magnitude(b["kind"])]):
            h = hypothesis(b["kind"], b["step"], mag, tensor, base_cfg, starts[b["step"]], stop2, 2)
            if h is not None:
                stage2.append(h)
    if len(stage2) > left:
        notes.append(f"the budget ({budget}) stopped stage 2 after {max(left, 0)} of {len(stage2)} hypotheses")
        stage2 = stage2[:max(left, 0)]
    if stage2:
        cost.append(run_replays(stage2, parent, base_cfg.to_dict(), jobs, out, "reproduce stage 2", backend))
    backend.close()
    scored2 = sorted((score(h, run_rows, range(min(steps), stop2), blind_run) for h in stage2),
                     key=lambda r: r["distance"])
    kinds2 = {r["kind"] for r in scored2}
    ranked = scored2 + [r for r in scored1 if r["kind"] not in kinds2]
    best = ranked[0]
    return {"run": run.name, "baseline": baseline.name, "anchor": anchor, "shared_prefix": shared,
            "candidate_steps": steps, "tensor": tensor, "distance": rm.DEFINITION,
            "windows": {"stage 1": [min(steps), stop1], "stage 2": [min(steps), stop2]},
            "ranked": ranked, "best": best, "notes": notes,
            "cost": {"trained": sum(c["trained"] for c in cost), "cached": sum(c["cached"] for c in cost),
                     "cpu_seconds_total": round(cpu_seconds() - cpu0, 2)}}


def score(h: Replay, run_rows: dict, steps: range, blind_run: bool) -> dict:
    """A hypothesis's distance from the run over `steps`, and whether its rows are the run's, byte for byte."""
    hyp = {s: r for s, r in reader.rows_by_step(h.folder).items() if s in steps}
    want = {s: r for s, r in run_rows.items() if s in steps}
    a, b = comparable_rows(hyp, blind_run), comparable_rows(want, blind_run)
    same = a.keys() == b.keys() and all(a[s] == b[s] for s in a)
    dist = rm.distance(want, hyp, steps)
    return {"name": h.name, "description": h.description, **h.extra, "distance": dist,
            "level": rm.level(same, dist), "window": [steps.start, steps.stop], "folder": str(h.folder),
            "cached": h.cached, "status": h.status}


def format_report(rep: dict, top: int = 10) -> str:
    lines = [f"reproduce {rep['run']} from {rep['baseline']}: first differing step {rep['anchor']}"
             + ("" if rep["shared_prefix"] else " (no shared prefix: the walker's step)")
             + f"; candidate steps {', '.join(map(str, rep['candidate_steps']))}",
             f"distance: {rep['distance']}", "",
             f"{'rank':<5} {'hypothesis':<52} {'window':<12} {'distance':>10}  reproduction"]
    for i, r in enumerate(rep["ranked"][:top], 1):
        w = f"{r['window'][0]}..{r['window'][1] - 1}"
        lines.append(f"{i:<5} {r['description']:<52} {w:<12} {r['distance']:>10.3g}  {r['level']}")
    if len(rep["ranked"]) > top:
        lines.append(f"      ... {len(rep['ranked']) - top} more (--json lists them all)")
    b = rep["best"]
    words = {"exact": "reproduces the run exactly: bit-identical metrics over the compared window",
             "within rounding": "reproduces the run within rounding", "approximate": "reproduces the run approximately"}
    lines += ["", f"best: {b['description']}: {words[b['level']]} (steps {b['window'][0]}..{b['window'][1] - 1}, "
                  f"distance {b['distance']:.3g})"]
    lines += [f"note: {n}" for n in rep["notes"]]
    c = rep["cost"]
    lines.append(f"cost: {c['trained']} hypotheses trained, {c['cached']} cached, {c['cpu_seconds_total']:.1f} CPU s in all")
    return "\n".join(lines)
