"""The re-walk after a fix ("apply the fix, re-run, re-walk"), judged on the steps after the fix point.

A remediated run keeps the original's rows up to the fix point: the fault happened there and was logged
before the remedy acted on it, so walking the whole remediated run finds the same fault at the same step
again, whatever the remedy did. The re-walk therefore walks the run as it would be had the fault never
been logged: the rows up to the fix point are the baseline's (the clean trunk the lab's runs are forked from,
identical to the run's own rows before the fault), the rows after it the remediated run's. The question it
answers is one: does the original fault (its leaf's cause) show after the fix point?
"""
from __future__ import annotations

from pathlib import Path

from minitrain.analysis.evidence import Evidence, load_evidence
from minitrain.analysis.walk import walk


def shares_trunk(ev: Evidence, base: Evidence, until: int) -> bool:
    """Whether the run's rows before step `until` are the baseline's, byte for byte (a fork of it)."""
    mine = [r for r in ev.rows if r["step"] < until]
    return bool(mine) and mine == [r for r in base.rows if r["step"] < until]


def walk_after_fix(run: Path, baseline: Path | None, fix_step: int, fault_step: int | None) -> dict:
    """The walker's verdict on `run` (a remediated run) over the steps after `fix_step`: its rows up to the fix
    point replaced by the baseline's when it shares the baseline's trunk before the fault (`fault_step`);
    otherwise (no baseline, a run re-made from step 0) the whole run. Adds `judged_from` (the first step
    judged as the run's own, 0 for the whole run)."""
    ev = load_evidence(run)
    base = load_evidence(baseline) if baseline is not None else None
    if base is None or fault_step is None or fix_step <= 0 or not shares_trunk(ev, base, fault_step):
        return {**walk(ev), "judged_from": 0}
    clean = {r["step"]: r for r in base.rows if r["step"] <= fix_step}
    rows = [clean.get(r["step"], r) if r["step"] <= fix_step else r for r in ev.rows]
    return {**walk(Evidence(rows, vocab_size=ev.vocab_size, ngram_val_loss=ev.ngram_val_loss, note=ev.note)),
            "judged_from": fix_step + 1}


def fix_outcome(walk_before: dict, walk_after: dict) -> dict:
    """Fixed or not, from the original walk and walk_after_fix's: "not fixed" when the walk after the fix point
    stops at the original's cause again; "undecided" when it stops at another leaf before the original fault's
    step (the walk ends at the first leaf, so it never reached the fault); else "fixed", with another leaf it
    stops at named beside (what the remedy's own action, or the joint of the two runs' rows, looks like to the
    walker: read it on the page). Returns {outcome, line}."""
    cause, leaf, fault = walk_before.get("cause"), walk_before.get("leaf"), walk_before.get("anomaly_step")
    after, step = walk_after.get("leaf"), walk_after.get("anomaly_step")
    at = f" at step {step}" if step is not None else ""
    since = walk_after.get("judged_from") or 0
    scope = f"after the fix point (steps {since}..)" if since else "over the whole re-run"
    if walk_after.get("cause") == cause:
        return {"outcome": "not fixed", "line": f"not fixed: the walk {scope} finds {after} ({cause}){at} again"}
    if walk_after.get("cause") != "healthy" and None not in (step, fault) and step < fault:
        return {"outcome": "undecided", "line": f"undecided: the walk {scope} stops at {after} "
                f"({walk_after.get('cause')}){at}, before the original fault's step {fault}, so it cannot say "
                f"whether {leaf} ({cause}) is gone: look at the page"}
    line = f"fixed: the walk {scope} no longer finds {leaf} ({cause})"
    if walk_after.get("cause") != "healthy":
        line += f"; it stops at {after} ({walk_after.get('cause')}){at} instead: look at it on the page"
    return {"outcome": "fixed", "line": line}


def conclusion(fix: dict, walk_after: dict, against: dict) -> dict:
    """`remediate`'s one verdict, from fix_outcome's (does the fault show after the fix point?), the walk after
    the fix point and compare.remedy_verdict's (the loss against the baseline, beyond its noise or not).
    A fault that is gone while the walk stops at another leaf is not called plainly fixed: that leaf is the
    remedy's own trace (e.g. Adam's v missing a skipped update). Returns {outcome, mark (ok | warn | bad), line}."""
    loss = f"on the loss: {against.get('line')}"
    if fix.get("outcome") != "fixed":
        return {"outcome": fix.get("outcome"), "mark": "bad" if fix.get("outcome") == "not fixed" else "warn",
                "line": f"{fix.get('line')}; {loss}"}
    if against.get("verdict") == "worse":
        return {"outcome": "worse", "mark": "bad", "line": f"the fault is gone after the fix point, but the run is "
                f"further from the baseline: {loss}"}
    if walk_after.get("cause") not in ("healthy", None):
        at = f" at step {walk_after['anomaly_step']}" if walk_after.get("anomaly_step") is not None else ""
        return {"outcome": "fault gone, a side effect", "mark": "warn",
                "line": f"{fix.get('line').split(';')[0].replace('fixed: ', '')}, but it now stops at "
                        f"{walk_after.get('leaf')} ({walk_after.get('cause')}){at}: the remedy's own trace, read it on "
                        f"the page; {loss}"}
    return {"outcome": "fixed", "mark": "ok", "line": f"{fix.get('line')}; {loss}"}
