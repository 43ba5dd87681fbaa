"""A run against its baseline, measured with the definitions of definitions.py (recovery, v back, v jumped,
non-finite) that the lab report (signature.py), the learner's reveal, the post-mortem and `remediate` all use;
and the step-by-step difference the page draws, with whether it exceeds float rounding.

Both step counts start at K (n = 0 is step K itself): recovery_steps is the first n from which the loss
difference stays recovered, v_back_steps the first n at which the tensor's v is back within V_BACK.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from minitrain.analysis import definitions, movers
from minitrain.analysis.definitions import first_non_finite_step, recovery_steps, v_back
from minitrain.core.config import INJECTION_FIELDS, NON_NUMERIC_FIELDS
from minitrain.core.fmt import page_number
from minitrain.run import reader


def loss_difference(rows: dict[int, dict], base: dict[int, dict]) -> list[float | None]:
    """Per step (0 .. the shorter run's last step): run loss minus baseline loss; None where either is missing."""
    n = min(max(rows, default=-1), max(base, default=-1)) + 1
    out = []
    for s in range(n):
        a, b = (rows.get(s) or {}).get("loss"), (base.get(s) or {}).get("loss")
        out.append(a - b if a is not None and b is not None else None)
    return out


def _v_ratio(rows: dict[int, dict], base: dict[int, dict], step: int, name: str) -> float | None:
    """A tensor's mean Adam v (vm) over the baseline's at one step; None where either is missing or zero."""
    a = ((rows.get(step) or {}).get("params") or {}).get(name) or {}
    b = ((base.get(step) or {}).get("params") or {}).get(name) or {}
    return a["vm"] / b["vm"] if a.get("vm") and b.get("vm") else None


def v_departure(rows: dict[int, dict], base: dict[int, dict], k: int) -> tuple[str, float] | None:
    """The tensor whose Adam v is farthest from the baseline's at step K, and its ratio run / baseline there.
    Farthest in |log ratio|: a x0.01 corruption departs as far as a x100 one, and the tensor is read from the
    run, not from the injection's settings, so the same rule serves runs whose cause is unknown. None without
    per-tensor v in both runs at K."""
    names = ((rows.get(k) or {}).get("params") or {})
    ratios = {n: r for n in names if (r := _v_ratio(rows, base, k, n))}
    if not ratios:
        return None
    top = max(ratios, key=lambda n: abs(math.log(ratios[n])))
    return top, ratios[top]


def v_back_steps(rows: dict[int, dict], base: dict[int, dict], k: int, name: str) -> int | None:
    """The first n >= 0 at which the tensor's v at step K + n is within V_BACK of the baseline's (0 when it
    never left that band); None: not within the run. Steps where either v is missing are skipped."""
    for s in sorted(t for t in rows if t >= k):
        r = _v_ratio(rows, base, s, name)
        if r is not None and v_back(r):
            return s - k
    return None


def v_jumped(m: dict) -> bool:
    """Whether measure()'s tensor of largest v departure at K jumped (definitions.v_jumped)."""
    return definitions.v_jumped(m.get("v_jump_ratio_at_K"))



AFTER_WINDOW = 50  # "after K" means steps K+1 .. K+50


def measure(run: Path, baseline: Path | None, k: int | None) -> dict:
    """Facts about a run at and after step K, each against the baseline at the same step when there is one."""
    rows = reader.rows_by_step(run)
    base = reader.rows_by_step(baseline) if baseline is not None else {}
    out: dict = {"run": Path(run).name, "baseline": Path(baseline).name if baseline else None, "K": k,
                 "steps": len(rows)}
    if rows:
        first = rows[min(rows)]
        out["step0_loss"] = first.get("loss")
        out["lr_first"] = first.get("lr")
        out["non_finite_step"] = first_non_finite_step([rows[s] for s in sorted(rows)])
        early = [r["loss"] for s, r in rows.items() if s < 100 and r.get("loss") is not None]
        out["max_loss_first_100"] = max(early) if early else None
        if base and min(base) in base:
            out["baseline_step0_loss"] = base[min(base)].get("loss")
            a0, b0 = rows[min(rows)].get("act") or [], base[min(base)].get("act") or []
            if a0 and b0 and b0[0]:
                out["act0_ratio_step0"] = (a0[0] or 0) / b0[0]
    if k is not None and k in rows:
        r, b = rows[k], base.get(k, {})
        out["loss_at_K"], out["baseline_loss_at_K"] = r.get("loss"), b.get("loss")
        out["grad_norm_at_K"], out["baseline_grad_norm_at_K"] = r.get("grad_norm"), b.get("grad_norm")
        if r.get("grad_norm") and b.get("grad_norm"):
            out["grad_norm_ratio_at_K"] = r["grad_norm"] / b["grad_norm"]
        batch = r.get("batch") or {}
        out["dup_rows_at_K"], out["rare_share_at_K"] = batch.get("dup_rows"), batch.get("rare_share")
        bb = b.get("batch") or {}
        out["baseline_dup_rows_at_K"], out["baseline_rare_share_at_K"] = bb.get("dup_rows"), bb.get("rare_share")
        moved = v_departure(rows, base, k)
        if moved is not None:
            top, out["v_jump_ratio_at_K"] = moved
            out["v_jump_param"] = top
            out["v_steps_to_within_10pct"] = v_back_steps(rows, base, k, top)
        diffs = [(s, rows[s]["loss"] - base[s]["loss"]) for s in range(k + 1, k + 1 + AFTER_WINDOW)
                 if s in rows and s in base and rows[s].get("loss") is not None and base[s].get("loss") is not None]
        if diffs:
            out["mean_loss_diff_after_K"] = sum(d for _, d in diffs) / len(diffs)
            s_max, d_max = max(diffs, key=lambda t: abs(t[1]))
            out["max_loss_diff_after_K"], out["max_loss_diff_step"] = d_max, s_max
        out["recovery_steps"] = recovery_steps(loss_difference(rows, base), k) if base else None
        first = next((s for s in sorted(rows) if s in base and rows[s].get("loss") != base[s].get("loss")), None)
        out["first_step_differing"] = first
    res_run, res_base = reader.results_of(run), reader.results_of(baseline) if baseline else {}
    if res_run.get("final_val_loss") is not None:
        out["final_val_loss"] = res_run["final_val_loss"]
        if res_base.get("final_val_loss") is not None:
            out["final_val_loss_diff"] = res_run["final_val_loss"] - res_base["final_val_loss"]
    if res_run.get("final_train_loss") is not None and res_run.get("final_val_loss") is not None:
        out["final_val_minus_train"] = res_run["final_val_loss"] - res_run["final_train_loss"]
        if res_base.get("final_val_loss") is not None and res_base.get("final_train_loss") is not None:
            out["baseline_final_val_minus_train"] = res_base["final_val_loss"] - res_base["final_train_loss"]
    return out


def _median(values: list) -> float | None:
    kept = [x for x in values if isinstance(x, (int, float)) and math.isfinite(x)]
    return statistics.median(kept) if kept else None


def own_median_baseline(rows: dict[int, dict], k: int, lookback: int = movers.MOVER_LOOKBACK) -> dict[int, dict]:
    """A run's own stand-in for a baseline from step K on, with the page's movers' window (`lookback` steps): at
    each step >= K, the loss's median over the `lookback` steps before that step (training goes on falling, a
    spike is one point of it), and each tensor's mean Adam v's median over the `lookback` steps before K (a
    corrupted v stays for hundreds of steps: its own trailing median would take it in). For a run that has no
    baseline (a blind run)."""
    names = ((rows.get(k) or {}).get("params") or {})
    before = [rows[s] for s in range(k - lookback, k) if s in rows]
    params = {n: {"vm": v} for n in names
              if (v := _median([((r.get("params") or {}).get(n) or {}).get("vm") for r in before])) and v > 0}
    out = {}
    for s, r in rows.items():
        out[s] = r if s < k else {"params": params,
                                  "loss": _median([rows[t].get("loss") for t in range(s - lookback, s) if t in rows])}
    return out


def measure_own(run: Path, k: int) -> dict:
    """What measure() compares with a baseline, for a run without one: its v jump at K, the tensor and the steps
    until that v is back, and its loss's recovery, each against its own median before K (own_median_baseline)."""
    rows = reader.rows_by_step(run)
    if k not in rows:
        return {}
    own = own_median_baseline(rows, k)
    out: dict = {"against": f"its own median (the loss's over the {movers.MOVER_LOOKBACK} steps before each step, "
                            f"Adam v's over steps {k - movers.MOVER_LOOKBACK}-{k - 1})"}
    moved = v_departure(rows, own, k)
    if moved is not None:
        out["v_jump_param"], out["v_jump_ratio_at_K"] = moved
        out["v_steps_to_within_10pct"] = v_back_steps(rows, own, k, moved[0])
    out["recovery_steps"] = recovery_steps(loss_difference(rows, own), k)
    return out


REMEDY_MEASURES = (  # in order: the first both runs have decides the verdict; the next is reported beside it
    ("final_val_loss_diff", "final validation loss"),
    ("mean_loss_diff_after_K", "mean training loss over K+1..K+50"),
)
# The comparison's own noise, per measure (nats): the largest change of |run - baseline| that the same comparison
# shows between clean forks of clean seeds (bench/remediation_noise.py, docs/remediation.md "Noise band"),
# rounded up. Any change at K moves a forked run's distance to its baseline by about this much, fault or not.
REMEDY_NOISE = {"final_val_loss_diff": 0.0026, "mean_loss_diff_after_K": 0.0034}


def remedy_verdict(before: dict, after: dict) -> dict:
    """Did the remedy bring the run closer to its baseline? `before`, `after`: measure() of the original and
    the remediated run against the same baseline. On the first measure both have, compares the distances
    |run - baseline|: "better" / "worse" when the remediated one is closer / further by more than that
    measure's REMEDY_NOISE (what clean runs show), else "no better" (within noise).
    Returns {verdict, measure, before, after, by, noise, line}; the line also gives the next measure."""
    measured = [(key, label, before.get(key), after.get(key)) for key, label in REMEDY_MEASURES
                if before.get(key) is not None and after.get(key) is not None]
    if not measured:
        return {"verdict": "unmeasured", "measure": None, "before": None, "after": None, "by": None, "noise": None,
                "line": "unmeasured: no baseline to compare with (give --baseline)"}
    key, label, b, a = measured[0]
    by, noise = abs(a) - abs(b), REMEDY_NOISE[key]
    verdict = "no better" if abs(by) <= noise else "better" if by < 0 else "worse"
    where = "within" if verdict == "no better" else "beyond"
    line = (f"{verdict} on {label}: {abs(by):.2g} nats {'closer to' if by < 0 else 'further from'} the baseline, "
            f"{where} the noise of clean runs ({noise:.2g} nats) (|run - baseline| {abs(b):.2g} -> {abs(a):.2g} nats)")
    for okey, other, ob, oa in measured[1:]:
        line += (f"; {other}: |run - baseline| {abs(ob):.2g} -> {abs(oa):.2g} nats "
                 f"(noise {REMEDY_NOISE[okey]:.2g})")
    return {"verdict": verdict, "measure": label, "before": b, "after": a, "by": by, "noise": noise, "line": line}


FLOAT_ROUNDING_ULPS = 32
FLOAT_ROUNDING_REL = FLOAT_ROUNDING_ULPS * 2.0 ** -23  # |a - b| within 32 float32 ulps of |b|: identical up to rounding
ROUNDING_RULE = f"{FLOAT_ROUNDING_ULPS} float32 ulps of the value"


def baseline_notes(manifest: dict, base_manifest: dict, base_name: str) -> list[str]:
    """What the difference to a baseline does not isolate: nothing when both runs share their trunk
    (reader.same_trunk); a note naming the settings that differ beyond the injection otherwise (a remediated
    run's remedy_* settings are expected, and said so)."""
    if reader.same_trunk(manifest, base_manifest):
        return []
    rc, bc = reader.config_of(manifest), reader.config_of(base_manifest)
    differ = sorted(k for k in set(rc) | set(bc)
                    if rc.get(k) != bc.get(k) and k not in INJECTION_FIELDS + NON_NUMERIC_FIELDS)
    if differ and all(k.startswith("remedy") for k in differ):
        return [f"this run applies a remedy the baseline does not ({', '.join(f'{k}={rc.get(k)}' for k in differ)})"]
    return [f"baseline {base_name} has another config beyond the injection ({', '.join(differ) or 'trunk hash'}): "
            "differences are not the injection's alone"]


def step_differences(rows: list[dict], ref_rows: list[dict]) -> dict:
    """The exact difference rows minus ref_rows at every shared step (loss, pre-clip grad norm, validation), and
    whether every difference is below what float32 rounding of the reference's values explains."""
    by_step = {row["step"]: row for row in ref_rows}
    diff: dict = {"steps": [], "loss": [], "grad_norm": [], "val_steps": [], "val_loss": []}
    first_diff = None
    worst = {"loss": (0.0, 0.0), "grad_norm": (0.0, 0.0), "val_loss": (0.0, 0.0)}  # (|diff|, its bound)

    beyond = {k: False for k in worst}

    def note(key, a, c):
        d = a - c
        bound = FLOAT_ROUNDING_REL * abs(c)
        if abs(d) > worst[key][0]:
            worst[key] = (abs(d), bound)
        beyond[key] = beyond[key] or abs(d) > bound
        return d

    for row in rows:
        other = by_step.get(row["step"])
        if other is None:
            continue
        diff["steps"].append(row["step"])
        for key in ("loss", "grad_norm"):
            a, c = row.get(key), other.get(key)
            d = note(key, a, c) if a is not None and c is not None else None
            beyond[key] = beyond[key] or d is None
            diff[key].append(page_number(d, 5))
            if first_diff is None and (d is None or d != 0):
                first_diff = row["step"]
        if row.get("val_loss") is not None and other.get("val_loss") is not None:
            d = note("val_loss", row["val_loss"], other["val_loss"])
            diff["val_steps"].append(row["step"])
            diff["val_loss"].append(page_number(d, 5))
    diff["first_difference"] = first_diff
    # per signal: does it differ at all, and is every difference below float32 rounding of the reference?
    diff["rounding"] = {k: {"within": not beyond[k] and worst[k][0] > 0, "max_abs": page_number(worst[k][0], 3),
                            "bound": page_number(worst[k][1], 3)} for k in worst}
    diff["rounding_rel"] = FLOAT_ROUNDING_REL
    return diff
