"""Walking the stability tree over a run's evidence: the verdict, the path of findings, and the evidence
around the anomaly step.

The walk starts at §1.1 and follows each question's yes / no to the first leaf. A leaf with rule-outs is
named only when none holds; when one does, the walk goes on (as if the question had answered no) and
remembers the leaf and what ruled it out. A walk that ends at "healthy" after ruling a leaf out answers
`unknown` (§8.B) instead; every `unknown` verdict names the two closest leaves: the ruled-out ones first,
then the leaves of the questions that came nearest to their thresholds, each with the evidence that ruled
it out.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from minitrain.analysis.checks import Finding, train_smooth, val_points
from minitrain.analysis.evidence import Evidence, load_evidence, trailing_median_fast
from minitrain.analysis.thresholds import CONFIDENCE_MODERATE, CONFIDENCE_STRONG, T
from minitrain.analysis.tree import ITEMS, Leaf, Node, next_node
from minitrain.core.fmt import fmt

# ---------------------------------------------------------------------------------------------------
# Walking the tree
# ---------------------------------------------------------------------------------------------------


def walk(ev: Evidence) -> dict:
    """Walk from §1; return the verdict and the path of findings."""
    # ratios over zeros and all-NaN windows are expected in broken runs: they read as "no", not as warnings
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _walk(ev)


def _walk(ev: Evidence) -> dict:
    path: list[dict] = []
    ruled: list[dict] = []  # leaves reached but contradicted by other evidence
    current = "§1.1"
    seen = set()
    while True:
        while isinstance(ITEMS[current], Node):
            if current in seen and ruled:  # resumed after a rule-out: questions already answered are not re-asked
                current = next_node(current)
                continue
            node = ITEMS[current]
            assert current not in seen, f"loop in the tree at {current}"
            seen.add(current)
            f, absent = answer(node, ev)
            target = node.yes if f.matched else (node.no or next_node(current))
            path.append({"node": node.id, "question": node.question, "metric": node.metric, "panel": node.panel,
                         "threshold": node.threshold, "measured": f.shown, "value": _jsonable(f.value),
                         "answer": "yes" if f.matched else "no", "step": ev.step_at(f.index), "next": target,
                         **({"not_measured": absent} if absent else {}), "_finding": f})
            current = target
        leaf = ITEMS[current]
        led = path[-1] if path else None
        checked = _rule_outs(leaf, ev, led["_finding"]) if led is not None else []
        hits = [f"{why} ({f.shown})" for why, f in checked if f.matched]
        if not hits:
            break
        ruled.append({"leaf": leaf.id, "title": leaf.title, "cause": leaf.cause, "step": led["step"],
                      "ruled_out_by": hits})
        asked = ITEMS[led["node"]]
        current = leaf.resume or asked.no or next_node(asked.id)
        led["ruled_out"] = {"leaf": leaf.id, "by": hits, "next": current}
    if leaf.cause == "healthy" and ruled:  # something was abnormal, but no leaf fits it: say so
        leaf = ITEMS["§8.B"]
    decisive = next((p for p in reversed(path) if p["answer"] == "yes" and "ruled_out" not in p), None)
    anomaly = ruled[0]["step"] if leaf.id == "§8.B" and ruled else _anomaly_step(leaf, path, ev)
    evidence = leaf_evidence(leaf, path, ev, anomaly)
    diagnosis, remediation = leaf.texts(ev)
    out = {"leaf": leaf.id, "cause": leaf.cause, "title": leaf.title, "anomaly_step": anomaly,
           "diagnosis": diagnosis, "remediation": remediation}
    if leaf.cases:
        out["case"] = leaf.case_of(ev)
    if leaf.cause == "unknown":
        out["closest"] = _closest(path, ruled)
    out["confidence"] = confidence(leaf, path, checked if leaf.rule_out else [])
    untested = untestable(path)
    if untested:
        out["untestable"] = [f"{u['leaf']} {u['cause']}" for u in untested]
        out["to_test"] = to_test(untested)
        if leaf.cause == "healthy":  # healthy only in what could be tested: said in the text, the page and table
            out["diagnosis"] += (f" Not testable on this run ({len(untested)} leaves, its log lacks what they read): "
                                 + ", ".join(out["untestable"]) + "; 'healthy' says nothing about them.")
    for p in path:
        p.pop("_finding")
    return {**out, "path": [p["node"] for p in path] + [leaf.id],
            "decided_by": decisive["node"] if decisive else None,
            "evidence": evidence, "walk": path, **({"note": ev.note} if ev.note else {}),
            "not_measured": [p["node"] for p in path if p.get("not_measured")]}


# what to log (or pass, or attach) to make a question testable, by what it needs
HOW_TO_TEST = {
    "vocab": "pass --vocab-size V to minitrain import (or keep HF's config.json beside the log)",
    "step0": "log from the first step, every step (HF logging_steps=1, Lightning log_every_n_steps=1)",
    "rows": f"log more often: a log every N steps needs {T['coarse_min_rows']:g}+ rows to read a pattern over its "
            "rows",
    "first_lr": "log the LR from the first step (HF logging_first_step=True): a first row after a warmup shorter "
                "than the interval already shows the peak",
    "every_step": "log the loss and gradient norm of every step (HF logging_steps=1, Lightning "
                  "log_every_n_steps=1): a mean over an interval or a sampled step hides a one-step fault",
    "schedule": "not in any log: the schedule you meant (a constant LR is read as meant); judge the LR curve yourself",
    "batch_size": "pass --batch-size B to minitrain import",
    "lr": "log the learning rate every step (HF and Lightning's LearningRateMonitor do)",
    "grad_norm": "log the pre-clip gradient norm every step (clip_grad_norm_ returns it; with clipping off "
                 "clip_grad_norm_(params, float('inf')))",
    "val_loss": "log a validation loss",
    "ngram": "an n-gram baseline (minitrain's own runs record one)",
    "long_run": "a longer run: the update-to-weight ratio is read over 1000+ steps (early in any run the weights are "
                "small and the ratio is high whatever the LR)",
    "batch": "attach minitrain's probe (minitrain.probe.attach or MinitrainCallback): it records batch composition",
}
PROBE_ADVICE = ("attach minitrain's probe (minitrain.probe.attach, or MinitrainCallback for the HF Trainer): it "
                "records per-tensor statistics, the update-to-weight ratio and, with natural_signals=True, the "
                "attention and output logits")


def untestable(path: list[dict]) -> list[dict]:
    """The leaves this walk could not test: a leaf whose every question on the path was one the run could not
    answer (a signal or a fact of the logging it needs is absent); a leaf another question tested is not in it."""
    tested = {_first_leaf(ITEMS[p["node"]].yes).id for p in path if not p.get("not_measured")}
    out: list[dict] = []
    for p in path:
        if not p.get("not_measured"):
            continue
        leaf = _first_leaf(ITEMS[p["node"]].yes)
        if leaf.cause in ("healthy", "unknown") or leaf.id in tested:
            continue
        known = next((u for u in out if u["leaf"] == leaf.id), None)
        if known is None:
            out.append({"leaf": leaf.id, "cause": leaf.cause, "nodes": [p["node"]], "needs": list(p["not_measured"])})
        else:
            known["nodes"].append(p["node"])
            known["needs"] += [n for n in p["not_measured"] if n not in known["needs"]]
    return out


def to_test(untested: list[dict]) -> list[dict]:
    """What to log, pass or attach to test the untestable leaves: one entry per remedy, with what it supplies."""
    by_how: dict[str, dict] = {}
    for u in untested:
        for need in u["needs"]:
            entry = by_how.setdefault(HOW_TO_TEST.get(need, PROBE_ADVICE), {"needs": [], "leaves": []})
            entry["needs"] += [need] if need not in entry["needs"] else []
            name = f"{u['leaf']} {u['cause']}"
            entry["leaves"] += [name] if name not in entry["leaves"] else []
    return [{"needs": e["needs"], "leaves": e["leaves"], "how": how} for how, e in by_how.items()]


def answer(node: Node, ev: Evidence) -> tuple[Finding, list[str]]:
    """A question's finding on this run, and the signals it reads that the run lacks: the one policy the walker
    and the page (readings.py) share. A run that never measured a signal the node declares in `needs` gets
    "not measured", answered no; a check that raises is a bug in the check and the exception propagates
    (a wrong "no" would send the walk to a wrong leaf without a word)."""
    absent = [s for s in node.needs if not ev.has(s)]
    if absent:
        return Finding(False, None, f"not measured (this run has no {', '.join(absent)})"), absent
    return node.check(ev), []


def rule_readings(ev: Evidence) -> dict[str, list[float | None]]:
    """Every question's reading on this run as [measured, threshold] in its rule's own units (the crossing's; a
    question without one: [its value, None]): what the evaluation's margins are made of. A question that did
    not match reads its nearest approach over the run (the largest jump, the farthest factor)."""
    out = {}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for nid, it in ITEMS.items():
            if isinstance(it, Node):
                f, _ = answer(it, ev)
                c = f.crossing
                out[nid] = ([_jsonable(c.measured), _jsonable(c.threshold)] if c is not None and c.units != "exact"
                            else [_jsonable(f.value), None])
    return out


def _rule_outs(leaf: Leaf, ev: Evidence, led: Finding) -> list[tuple[str, Finding]]:
    """Every rule-out of `leaf` checked on this run: (what it means, its finding; matched = it contradicts)."""
    return [(why, check(ev, led)) for why, check in leaf.rule_out]


def confidence(leaf: Leaf, path: list[dict], checked: list[tuple[str, Finding]]) -> dict:
    """How strongly the run supports the verdict: the deciding rule's reading against its threshold, in the
    rule's own units (σ of the run's own noise for the robust-z rules), and the rule-outs checked that did not
    contradict the leaf. Level: exact (an identity: a NaN, an LR of 0), strong (read at >= 2x the threshold),
    moderate, or weak (< 1.25x: a crossing this small is weak evidence and is reported as such). A verdict that
    names nothing (healthy) gives the rule that came nearest instead."""
    held = [{"rule_out": why, "contradicts": f.matched, "measured": f.shown} for why, f in checked]
    if leaf.cause == "healthy":
        near = max((p for p in path if p["_finding"].near is not None), key=lambda p: p["_finding"].near, default=None)
        return {"level": "n/a", "nearest_rule": near["node"] if near else None,
                "nearest_share_of_threshold": _jsonable(near["_finding"].near) if near else None,
                "text": (f"no rule crossed; nearest: {near['node']} at {near['_finding'].near:.0%} of its threshold"
                         if near else "no rule crossed")}
    deciding = next((p for p in reversed(path) if p["answer"] == "yes" and "ruled_out" not in p
                     and p["_finding"].crossing is not None), None)
    if deciding is None:
        return {"level": "n/a", "rule": None, "rule_outs": held, "text": "no single rule decided"}
    c = deciding["_finding"].crossing
    ratio = c.ratio
    if c.units == "exact":
        lvl = "exact"
    elif ratio is None:
        lvl = "n/a"
    else:
        lvl = "strong" if ratio >= CONFIDENCE_STRONG else "moderate" if ratio >= CONFIDENCE_MODERATE else "weak"
    text = (f"{lvl}: {deciding['node']} is an identity (no degree)" if lvl == "exact" else
            f"{lvl}: {deciding['node']} read {fmt(c.measured, 3)} against {fmt(c.threshold, 3)} ({c.units}), "
            f"{fmt(ratio, 3)}x its threshold" + (" - weak evidence" if lvl == "weak" else ""))
    if held:
        text += "; rule-outs that did not contradict it: " + "; ".join(
            f"{h['rule_out']} ({h['measured']})" for h in held if not h["contradicts"])
    return {"level": lvl, "rule": deciding["node"], "measured": _jsonable(c.measured),
            "threshold": _jsonable(c.threshold), "units": c.units, "crossing": _jsonable(ratio),
            "rule_outs": held, "text": text}


def _first_leaf(target: str) -> Leaf:
    """The leaf a question's "yes" leads to (through follow-up questions' "yes")."""
    it = ITEMS[target]
    while isinstance(it, Node):
        it = ITEMS[it.yes]
    return it


def _closest(path: list[dict], ruled: list[dict]) -> list[dict]:
    """The two leaves nearest to fitting: leaves reached and ruled out first, then the leaves of the questions
    that came closest to their thresholds; each with the evidence that ruled it out."""
    out = [{"leaf": r["leaf"], "title": r["title"], "cause": r["cause"], "step": r["step"],
            "ruled_out_by": "; ".join(r["ruled_out_by"])} for r in ruled]
    near = sorted((p for p in path if p["answer"] == "no" and p["_finding"].near is not None),
                  key=lambda p: -p["_finding"].near)
    for p in near:
        leaf = _first_leaf(ITEMS[p["node"]].yes)
        if leaf.cause in ("healthy", "unknown") or any(o["leaf"] == leaf.id for o in out):
            continue
        out.append({"leaf": leaf.id, "title": leaf.title, "cause": leaf.cause, "step": p["step"],
                    "ruled_out_by": f"{p['node']} answered no: {p['measured']} (threshold {p['threshold']}; "
                                    f"{p['_finding'].near:.0%} of the way)"})
    return out[:2]


def _jsonable(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _anomaly_step(leaf: Leaf, path: list[dict], ev: Evidence) -> int | None:
    """The step the verdict points at: the matched finding's step, for causes that live at one step."""
    if leaf.cause in ("healthy", "lr_too_high"):  # a property of the whole run, not of one step
        return None
    for p in reversed(path):
        if p["answer"] == "yes" and p["step"] is not None:
            return p["step"]
    return None


def _window(ev: Evidence, i: int, before: int = 5, after: int = 5) -> slice:
    return slice(max(0, i - before), min(len(ev.rows), i + after + 1))


def _curve(ev: Evidence, arr: np.ndarray, sl: slice) -> dict:
    return {str(int(s)): _jsonable(v) for s, v in zip(ev.steps[sl], arr[sl])}


def leaf_evidence(leaf: Leaf, path: list[dict], ev: Evidence, step: int | None) -> dict:
    """The numbers a reader checks the verdict against, around the anomaly step."""
    out: dict = {"steps_in_run": len(ev.rows)}
    finding = next((p["_finding"] for p in reversed(path) if p["answer"] == "yes" and "ruled_out" not in p), None)
    if leaf.id == "§8.B" and any("ruled_out" in p for p in path):  # the first anomaly that was ruled out
        finding = next(p["_finding"] for p in path if "ruled_out" in p)
    i = finding.index if finding is not None else None
    if leaf.cause == "lr_too_high":
        key = "update_to_weight_ratio" if leaf.id == "§2.E" else "loss_against_the_lr"  # §2.I reads the loss
        out[key] = {k: v if isinstance(v, str) else _jsonable(v) for k, v in finding.extra.items()}
        idx, val = val_points(ev)
        out["val_loss"] = {str(int(ev.steps[j])): _jsonable(v) for j, v in zip(idx, val)}
        out["train_loss_smoothed_min"] = _jsonable(float(np.nanmin(train_smooth(ev))))
        return out
    if leaf.cause == "healthy":
        r = ev.gn_log_ratio
        if np.isfinite(r).any():
            j = int(np.nanargmax(r))
            out["largest_grad_norm_jump"] = {"step": ev.step_at(j), "ratio": _jsonable(math.exp(r[j]))}
            if np.isfinite(ev.g_all_up).any():
                out["largest_all_tensor_jump"] = _jsonable(math.exp(np.nanmax(ev.g_all_up)))
        vf = ev.v_factor
        if vf:
            out["largest_v_factor"] = {"tensor": vf["tensor"], "step": ev.step_at(vf["index"]),
                                       "factor": vf["factor"], "rounding_noise": vf["noise"]}
        return out
    if i is None:
        return out
    sl = _window(ev, i)
    out["loss"] = _curve(ev, ev.loss, sl)
    out["grad_norm"] = _curve(ev, ev.grad_norm, sl)
    out["lr"] = _curve(ev, ev.lr, sl)
    if leaf.cause == "bad_batch":
        b = ev.rows[i].get("batch") or {}
        out["batch_at_step"] = {k: b.get(k) for k in ev.batch_keys}
        out["loss_ratio_to_trailing_median"] = _jsonable(math.exp(ev.loss_log_ratio[i]))
        out["loss_excess_nats"] = _jsonable(ev.loss_excess[i])
        if i + 1 < len(ev.rows):
            out["next_step_loss_excess_nats"] = _jsonable(ev.loss_excess[i + 1])
        out["grad_norm_ratio_to_trailing_median"] = _jsonable(math.exp(ev.gn_log_ratio[i]))
        if ev.g_log_ratio is not None:
            ratios = {n: _jsonable(math.exp(x)) for n, x in zip(ev.param_names, ev.g_log_ratio[i]) if np.isfinite(x)}
            out["g_ratio_by_tensor"] = dict(sorted(ratios.items(), key=lambda kv: -(kv[1] or 0))[:5])
    elif leaf.cause == "optimizer_state_corruption":
        vf = ev.v_factor
        name = vf["tensor"]
        out["tensor"] = name
        out["v_factor"] = vf["factor"]
        out["fitted_beta2"] = round(vf["beta2"], 5)
        out["vm"] = _curve(ev, ev.param(name, "vm"), _window(ev, i, 2, 5))
        for key in ("r", "ur"):
            x = ev.param(name, key)
            med = trailing_median_fast(x)
            out[f"{key}_ratio_at_step"] = _jsonable(x[i] / med[i]) if np.isfinite(med[i]) and med[i] > 0 else None
        # how the excess decays: the v the tensor would have had, rebuilt from the logged gradients
        excess = _v_excess(ev, vf, i)
        out["v_over_uncorrupted"] = excess
        at_k = excess.get(str(int(ev.steps[i])))
        # Adam's step scales as 1/sqrt(v): how much larger (or smaller) this tensor's update was at the step
        out["update_scale_at_step"] = _jsonable(1 / math.sqrt(at_k)) if at_k else None
        others = [abs(lf[i]) for n, lf in vf["log_f_by_tensor"].items() if n != name and np.isfinite(lf[i])]
        out["other_tensors_largest_factor_at_step"] = _jsonable(math.exp(max(others))) if others else None
    elif leaf.cause == "gradient_explosion":
        out["grad_norm_ratio_to_trailing_median"] = _jsonable(math.exp(ev.gn_log_ratio[i]))
        out["grad_norm_clipped"] = _curve(ev, ev.grad_norm_clipped, sl)
        if ev.g_log_ratio is not None:
            xs = ev.g_log_ratio[i]
            out["g_ratio_min_median_max"] = [_jsonable(math.exp(np.nanmin(xs))), _jsonable(math.exp(np.nanmedian(xs))),
                                              _jsonable(math.exp(np.nanmax(xs)))]
    elif leaf.cause == "no_warmup":
        out["loss_max_first_100_steps"] = _jsonable(np.nanmax(ev.loss[:100]))
    elif leaf.cause == "lr_spike":
        out["lr"] = _curve(ev, ev.lr, _window(ev, i, 3, 3))
        out.update({k: _jsonable(v) if isinstance(v, float) else v for k, v in finding.extra.items()})
        out["update_ratio"] = _curve(ev, ev.update_ratio, _window(ev, i, 3, 3))
    elif leaf.cause == "stuck_loader":
        out.update(finding.extra)
        out["loss"] = _curve(ev, ev.loss, _window(ev, i, 2, min(int(finding.extra["repeats"]) + 2, 60)))
    elif leaf.cause == "target_leak" or (leaf.cause == "broken_mask" and finding.extra):
        out.update({k: _jsonable(v) for k, v in finding.extra.items()})
        idx, val = val_points(ev)
        train = train_smooth(ev)
        out["val_loss"] = {str(int(ev.steps[j])): _jsonable(v) for j, v in zip(idx, val)}
        out["train_loss_smoothed"] = {str(int(ev.steps[j])): _jsonable(train[j]) for j in idx}
    elif leaf.cause == "bad_init":
        out["step0"] = {k: ev.rows[0].get(k) for k in ("loss", "grad_norm", "logit_max", "act")}
    return out


def _v_excess(ev: Evidence, vf: dict, i: int) -> dict:
    """vm / the vm the tensor would have had without the step-i change, at a few steps after it."""
    name, a = vf["tensor"], vf["beta2"]
    vm, g = ev.param(name, "vm"), ev.param(name, "g")
    clip = ev.grad_norm_clipped / ev.grad_norm
    c = (1 - a) / vf["numel"] if vf.get("numel") else None
    if c is None or i < 1:
        return {}
    clean = a * vm[i - 1] + c * (g[i] * clip[i]) ** 2
    out = {}
    for t in range(i, min(len(vm), i + 201)):
        if t > i:
            clean = a * clean + c * (g[t] * clip[t]) ** 2
        k = t - i
        if k in (0, 1, 5, 10, 20, 50, 100, 200):
            out[str(int(ev.steps[t]))] = _jsonable(vm[t] / clean) if clean > 0 else None
    return out




def compare(ev: Evidence, base: Evidence, step: int | None) -> dict:
    """Difference curves against a reference run: where the two first differ and by how much."""
    n = min(len(ev.rows), len(base.rows))
    if n == 0:
        return {}
    same = ev.steps[:n] == base.steps[:n]
    if not same.all():
        return {"note": "the runs' steps do not line up; no difference curves"}
    d_loss = ev.loss[:n] - base.loss[:n]
    r_gn = ev.grad_norm[:n] / base.grad_norm[:n]
    differs = np.flatnonzero(~np.isclose(ev.loss[:n], base.loss[:n], rtol=0, atol=0, equal_nan=True)
                             | ~np.isclose(ev.grad_norm[:n], base.grad_norm[:n], rtol=0, atol=0, equal_nan=True))
    first = int(ev.steps[differs[0]]) if len(differs) else None
    out = {"steps_compared": n, "first_differing_step": first}
    center = step if step is not None else first
    if center is not None:
        i = int(np.searchsorted(ev.steps[:n], center))
        sl = _window(ev, i, 5, 20)
        out["loss_minus_baseline"] = _curve(ev, d_loss, sl)
        out["grad_norm_over_baseline"] = _curve(ev, r_gn, sl)
        names = [nm for nm in ev.param_names if nm in base.param_names]
        if names and i < n:
            vr = {nm: _jsonable(ev.param(nm, "vm")[i] / base.param(nm, "vm")[i]) for nm in names}
            out["vm_over_baseline_at_step"] = dict(sorted(vr.items(), key=lambda kv: -abs(math.log(kv[1] or 1)))[:5])
    out["max_abs_loss_diff"] = _jsonable(np.nanmax(np.abs(d_loss))) if np.isfinite(d_loss).any() else None
    iv = np.flatnonzero(np.isfinite(ev.val_loss[:n]) & np.isfinite(base.val_loss[:n]))
    if len(iv):
        out["final_val_loss_diff"] = _jsonable(ev.val_loss[iv[-1]] - base.val_loss[iv[-1]])
    return out


def diagnose_run(run: Path, baseline: Path | None = None) -> dict:
    """Walk the tree over RUN's metrics (and compare with BASELINE's when given)."""
    ev = load_evidence(run)
    result = walk(ev)
    if baseline is not None:
        result["evidence"]["baseline"] = {"run": str(baseline), **compare(ev, load_evidence(baseline),
                                                                          result["anomaly_step"])}
    return result

