"""The regime map's judgments (`minitrain explore`): pure functions on run folders and their signatures.

The sweep itself (the grid, its runs) is lab/explore.py; the page and the doc that draw the map are
views/explore.py. Here: where the clip grid sits on a healthy run's own gradient norm (calibrate), how often a
run clipped (clip_rate), every prediction judged in a cell with the lab report's definitions
(analysis/signature.py: PREDICTIONS, judge), and where on the grid each prediction holds, in words (region).
"""
from __future__ import annotations

from pathlib import Path

from minitrain.analysis import signature
from minitrain.analysis.definitions import clip_limit
from minitrain.core import course
from minitrain.core.config import TrainConfig
from minitrain.core.errors import UserError
from minitrain.run import reader

CLIPS = ("course", "median", "p99", "off")  # in threshold order
AXES = {  # axis -> what it means (page and doc); the order breaks ties for the default heat-map axes
    "clip": "clip threshold, relative to the healthy run's pre-clip norm",
    "factor": "injection magnitude (A: gradient multiplier; C: multiplier of v)",
    "target": "the tensor whose Adam v is corrupted (C)",
    "vs_a": "the injection A (gradient multiplier) that B is compared with",
    "lr": "peak learning rate (lr_min scaled with it)",
    "batch": "batch size",
}


def fmt_lr(lr: float) -> str:
    m, e = f"{lr:.0e}".split("e")
    return f"{m}e{int(e)}"


def calibrate(off_run: Path, cfg: TrainConfig, stop: int) -> dict:
    """Quantiles of the unclipped healthy run's pre-clip norm over steps [warmup, stop)."""
    import numpy as np

    rows = reader.rows_by_step(off_run)
    norms = np.array([r["grad_norm"] for s, r in rows.items() if cfg.warmup_steps <= s < stop and r.get("grad_norm")])
    if len(norms) == 0:
        raise UserError(f"{off_run} has no finite gradient norm in steps [{cfg.warmup_steps}, {stop}); "
                        "the clip grid cannot be placed on it")
    q = {name: float(f"{np.percentile(norms, p):.4g}") for name, p in
         (("min", 0), ("median", 50), ("p90", 90), ("p99", 99), ("max", 100))}
    return {**q, "steps": [cfg.warmup_steps, stop]}


def clip_rate(run: Path, lo: int, hi: int) -> float | None:
    """Share of steps in [lo, hi) on which clipping engaged (pre-clip norm above the threshold)."""
    flags = [bool(r.get("clipped")) for s, r in reader.rows_by_step(run).items() if lo <= s < hi]
    return sum(flags) / len(flags) if flags else None


def prediction_ids(injection: str) -> list[str]:
    """A1..A4, B1..B3, C1..C3: the lab's letter of the injection, then the prediction's place in its list."""
    return [f"{course.LAB_LETTERS[injection]}{i + 1}" for i in range(len(signature.PREDICTIONS[injection]))]


def axis_value(axis: str, x) -> str:
    if axis == "lr":
        return fmt_lr(x)
    if axis in ("factor", "vs_a"):
        return f"x{x:g}"
    return str(x)


def axis_sort(axis: str, value: str):
    if axis == "clip":
        return CLIPS.index(value)
    if axis in ("factor", "vs_a"):
        return float(value[1:])
    if axis in ("lr", "batch"):
        return float(value)
    return value


def cell_points(sig: dict, a_sigs: list[tuple[float, dict]], links: dict, coords: dict) -> list[tuple[str, dict]]:
    """Every prediction of one cell judged: (prediction id, point on the map). A prediction that compares
    with A (B1, B2) gets one point per A of the trunk (a_sigs: A's factor and signature); `links` (the
    runs' pages, the trunk's healthy clip rate) go into each point as they are."""
    injection = sig["injection"]
    out = []
    for n, (pid, p) in enumerate(zip(prediction_ids(injection), signature.PREDICTIONS[injection])):
        for factor, a in (a_sigs if p.needs_a else [(None, None)]):
            verdict = signature.judge(sig, a)[n]
            c = {**coords, **({"vs_a": axis_value("vs_a", factor)} if a is not None else {})}
            out.append((pid, {"coords": c, "holds": verdict["holds"], "measured": verdict["measured"], **links,
                              "update_gain_at_k": update_gain(sig),
                              "signature": {k: sig.get(k) for k in SIGNATURE_KEYS}}))
    return out


def held_and_failed(sig: dict, a: dict | None) -> tuple[list[str], list[str]]:
    """The ids of the cell's predictions that hold and of those that fail (against one A, if any)."""
    verdicts = list(zip(prediction_ids(sig["injection"]), signature.judge(sig, a)))
    return [i for i, p in verdicts if p["holds"]], [i for i, p in verdicts if p["holds"] is False]


def predictions_map(points: list[tuple[str, dict]], lab_coords: dict, lab_factors: dict) -> tuple[list[dict], dict]:
    """The map's predictions (each with its points, axes, the two most telling axes, how many cells it holds
    in and where) and every axis with its values. lab_coords: the lab's own setting of every axis (the page's
    default slice); lab_factors: the lab's injection factor per injection."""
    preds = {}
    for inj, plist in signature.PREDICTIONS.items():
        for pid, p in zip(prediction_ids(inj), plist):
            preds[pid] = {"id": pid, "injection": inj, "letter": course.LAB_LETTERS[inj], "text": p.text, "points": []}
    for pid, point in points:
        preds[pid]["points"].append(point)
    axes: dict[str, set] = {}
    for p in preds.values():
        p["lab_coords"] = {**lab_coords, "factor": axis_value("factor", lab_factors[p["injection"]])}
        names = [a for a in AXES if any(a in pt["coords"] for pt in p["points"])]
        p["axes"] = names
        p["default_axes"] = most_telling_axes(p["points"], names)
        p["holds_in"] = sum(1 for pt in p["points"] if pt["holds"])
        p["region"] = region(p["points"], names)
        for a in names:
            axes.setdefault(a, set()).update(pt["coords"][a] for pt in p["points"])
    return list(preds.values()), {a: {"label": AXES[a], "values": sorted(vals, key=lambda x: axis_sort(a, x))}
                                  for a, vals in axes.items()}


def update_gain(sig: dict) -> float | None:
    """How much larger a gradient the optimizer received at K than the baseline's: post-clip norm at K over
    the baseline's post-clip norm (its pre-clip norm, clipped at the same threshold). 1.0 means clipping
    handed Adam the baseline's own norm."""
    base = sig.get("baseline_grad_norm_at_k")
    if not base or sig.get("grad_norm_clipped_at_k") is None:
        return None
    return sig["grad_norm_clipped_at_k"] / min(base, clip_limit(sig["grad_clip"]))


SIGNATURE_KEYS = ("excess_at_k_window", "max_excess", "max_excess_step", "grad_norm_ratio_vs_baseline_at_k",
                  "grad_norm_clipped_at_k", "recovery_steps", "v_ratio_at_k", "v_decay_steps", "final_loss_difference")


def most_telling_axes(points: list[dict], axes: list[str]) -> list[str]:
    """The two axes along which the verdict changes most often (pairs of cells that differ in that axis alone
    and disagree; then their share of such pairs; then the order of AXES). The page's default heat-map axes."""
    def flips(a: str) -> tuple[int, float]:
        groups: dict = {}
        for p in points:
            groups.setdefault(tuple((k, v) for k, v in sorted(p["coords"].items()) if k != a), []).append(p["holds"])
        pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups.values())
        disagree = sum(g.count(True) * g.count(False) for g in groups.values())
        return disagree, disagree / pairs if pairs else 0.0

    order = list(AXES)
    varied = [a for a in axes if len({p["coords"][a] for p in points}) > 1]
    return sorted(varied, key=lambda a: (*(-x for x in flips(a)), order.index(a)))[:2]


def region(points: list[dict], axes: list[str]) -> str:
    """Where a prediction holds, in words: 'nowhere on the grid', 'everywhere on the grid', a union of boxes
    ('clip off, lr 3e-3; clip off, factor x500'), or 'everywhere except' such a union when that is shorter.
    A box fixes some axes to some values and holds (or fails) in every cell of the grid inside it."""
    if not points:
        return "not measured"
    held = sum(1 for p in points if p["holds"])
    if held == 0:
        return "nowhere on the grid"
    if held == len(points):
        return "everywhere on the grid"
    varied = [a for a in axes if len({p["coords"][a] for p in points}) > 1]
    where, where_not = cover(points, varied, True), cover(points, varied, False)
    return "; ".join(where) if len(where) <= len(where_not) else "everywhere except " + "; ".join(where_not)


def cover(points: list[dict], varied: list[str], verdict: bool) -> list[str]:
    """Boxes covering every cell with this verdict and no other: greedily the box covering the most cells not
    yet covered (each axis free or fixed to one value), then boxes that differ in one axis only are merged."""
    values = {a: sorted({p["coords"][a] for p in points}, key=lambda x: axis_sort(a, x)) for a in varied}
    boxes: list[dict] = [{}]
    for a in varied:
        boxes = [{**b, **({a: v} if v is not None else {})} for b in boxes for v in (None, *values[a])]
    good = []
    for box in boxes:
        cells = {i for i, p in enumerate(points) if all(p["coords"][a] == v for a, v in box.items())}
        if cells and all(points[i]["holds"] == verdict for i in cells):
            good.append((box, cells))
    todo, chosen = {i for i, p in enumerate(points) if p["holds"] == verdict}, []
    while todo:
        box, cells = max(good, key=lambda bc: (len(bc[1] & todo), -len(bc[0])))
        chosen.append({a: [v] for a, v in box.items()})
        todo -= cells
    merged = True
    while merged:  # {clip: [course]} + {clip: [p99]} -> {clip: [course, p99]}
        merged = False
        for i, x in enumerate(chosen):
            for y in chosen[i + 1:]:
                diff = [a for a in x if x[a] != y.get(a)]
                if x.keys() == y.keys() and len(diff) == 1:
                    x[diff[0]] = sorted(set(x[diff[0]]) | set(y[diff[0]]), key=lambda v: axis_sort(diff[0], v))
                    chosen.remove(y)
                    merged = True
                    break
            if merged:
                break
    return [", ".join(f"{a} {'/'.join(box[a])}" for a in varied if a in box) for box in chosen]

