"""What the stability tree reads on one run, laid out for the page: every question of the tree with this
run's measured value and threshold, the walker's verdict, and the per-step signals that only the tree
computes (§6.1's factor f, §7.1/§7.2's per-tensor gradient ratios), so each of them can be read off a
panel. The judging is the tree's (tree.py, checks/); this module only evaluates it everywhere instead of along one path,
under the walker's own policy (walk.answer). `assess` hands the page ONE Assessment of everything judged on
it: those answers, the health line with its marks (health.py), the course's spike flags
(definitions.rolling_zscore_spikes), the judged markers, the baseline's comparability and the rules in words.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minitrain.analysis import compare, evidence, health, movers, stability, walk
from minitrain.analysis.definitions import (CLIP_OFF, RECOVERY_RULE, ROLLING_RULE, clipping_off,
                                            first_non_finite_step, rolling_zscore_spikes)
from minitrain.analysis.thresholds import WINDOW
from minitrain.core.errors import UserError
from minitrain.run import reader


def _num(x: float, digits: int = 5) -> float | None:
    return float(f"{x:.{digits}g}") if x is not None and math.isfinite(x) else None


def _ratio_series(log_values: np.ndarray) -> list[float | None]:
    return [_num(math.exp(x)) if np.isfinite(x) else None for x in log_values]


def questions(ev: stability.Evidence) -> list[dict]:
    """Every question of the tree, in reading order, evaluated on this run (not only those on the walk)."""
    out = []
    for section in stability.TREE:
        for it in section.items:
            if not isinstance(it, stability.Node):
                continue
            f, absent = walk.answer(it, ev)  # the walker's own policy: "not measured", or the check's finding
            out.append({"id": it.id, "question": it.question, "metric": it.metric, "panel": it.panel,
                        "threshold": it.threshold, "measured": f.shown, "answer": "yes" if f.matched else "no",
                        "step": ev.step_at(f.index), **({"not_measured": absent} if absent else {})})
    return out


def signals(ev: stability.Evidence) -> dict:
    """Per-step signals of §6.1 (f, the factor by which Adam's v moved beyond g², farthest from 1 over the
    tensors) and §7.1/§7.2 (smallest and largest per-tensor log g / trailing median, the loss's own jump taken
    out, each in σ of that tensor's own noise), with their thresholds; empty without per-tensor telemetry."""
    out: dict = {"steps": [int(s) for s in ev.steps]}
    vf = ev.v_factor
    if vf:
        logs = np.stack(list(vf["log_f_by_tensor"].values()), 1)
        far = np.nanargmax(np.nan_to_num(np.abs(logs), nan=-1.0), axis=1)
        out["v_factor"] = _ratio_series(logs[np.arange(len(logs)), far])
        out["v_factor_band"] = [_num(math.exp(-stability.v_threshold(vf))), _num(math.exp(stability.v_threshold(vf)))]
        out["v_factor_noise"] = [_num(math.exp(-vf["noise"])), _num(math.exp(vf["noise"]))]
        out["v_factor_beta2"] = _num(vf["beta2"], 6)
    if ev.g_log_ratio is not None:
        out["g_all_up"] = [_num(float(x), 4) for x in ev.g_all_up_z]
        out["g_all_down"] = [_num(float(x), 4) for x in ev.g_all_down_z]
        out["g_all_thresholds"] = [-stability.T["gn_all_down_z"], stability.T["gn_all_up_z"]]
    return out


def _evidence(run: Path) -> stability.Evidence | None:
    try:
        return stability.load_evidence(Path(run))
    except UserError:
        return None


def _read(ev: stability.Evidence) -> dict:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        verdict = stability.walk(ev)
        return {"verdict": {**{k: verdict[k] for k in ("leaf", "title", "cause", "anomaly_step")},
                            "untestable": verdict.get("untestable", [])},
                "questions": questions(ev), "signals": signals(ev)}


# Inside `once()`, a run is read and walked once: a finished run's page and the runs table beside it read the
# same files one after the other (twice the walk of 2000 rows otherwise). Outside it nothing is kept.
_ONCE: dict[Path, tuple] | None = None


@contextlib.contextmanager
def once():
    global _ONCE
    outer = _ONCE
    _ONCE = {} if outer is None else outer
    try:
        yield
    finally:
        _ONCE = outer


def _evidence_and_checks(run: Path) -> tuple[stability.Evidence | None, dict | None]:
    key = Path(run).resolve()
    if _ONCE is not None and key in _ONCE:
        return _ONCE[key]
    ev = _evidence(run)
    got = (ev, None if ev is None else _read(ev))
    if _ONCE is not None:
        _ONCE[key] = got
    return got


def read(run: Path) -> dict | None:
    """The walker's verdict, every question and the tree's signals for one run; None when the walker cannot
    read it (no metrics, unordered steps: `minitrain diagnose RUN` says why)."""
    return _evidence_and_checks(run)[1]


@dataclass
class Assessment:
    """Everything judged that a run's page shows, handed to the views to lay out (they decide nothing):
    checks      the walker's verdict, every question of the tree and the tree's signals (read()); when sealed,
                the signals alone (measurements, no answer); None when the walker cannot read the run
    health      the health line (health.py): label, value, mark (`verdict`: ok | warn | bad | info), detail
    spikes      the course's spike flags (definitions.rolling_zscore_spikes), as steps
    markers     the judged step markers: the first non-finite step (run/nonfinite.py), the diagnosis's anomaly
    notes       what the difference to the baseline does not isolate (compare.baseline_notes)
    rules       the rules and reference values the page states in words or draws (clip threshold, rounding
                bound, windows), so that no view restates a number
    vocab_size  the V of the page's ln V line (the walker's: the run's tokenizer, else its config, else
                evidence.ASSUMED_VOCAB)"""
    checks: dict | None
    health: list[dict]
    spikes: list[int]
    markers: list[dict]
    notes: list[str]
    rules: dict
    vocab_size: int


def _markers(r: dict, sealed: bool) -> list[dict]:
    out = []
    bad = first_non_finite_step(r["rows"])
    if bad is not None:
        out.append({"step": bad, "kind": "nonfinite", "label": f"non-finite at step {bad}", "short": "non-finite"})
    d = r["diagnosis"] or {}
    if not sealed and isinstance(d.get("anomaly_step"), int) and not isinstance(d.get("anomaly_step"), bool):
        leaf = d.get("leaf")
        out.append({"step": d["anomaly_step"], "kind": "diagnosis",
                    "label": f"diagnosis: anomaly at {d['anomaly_step']}" + (f" ({leaf})" if leaf else ""),
                    "short": "anomaly"})
    return out


def _rules(cfg: dict) -> dict:
    clip = cfg.get("grad_clip") if "grad_clip" in cfg else CLIP_OFF
    return {"clip_threshold": None if clipping_off(clip) else clip,
            "spike": ROLLING_RULE, "recovery": RECOVERY_RULE, "rounding": compare.ROUNDING_RULE,
            "movers_lookback": movers.MOVER_LOOKBACK, "robust_window": WINDOW}


def assess(r: dict, sealed: bool, base: dict | None = None) -> Assessment:
    """The assessment of one run loaded by reader.load_run (`base`: its baseline, loaded the same way, or None).
    `sealed`: the verdict, the tree's answers and the diagnosis's marker are not in it at all (the tree's
    per-step signals are: they are measurements)."""
    run = Path(r["dir"])
    ev, checks = _evidence_and_checks(run)
    verdict = checks["verdict"] if checks else None
    if sealed:  # the verdict and the tree's answers name the cause: not in the page at all before the reveal;
        # the tree's per-step measurements (panels 15 and 16, which the check asks the learner to read) stay
        checks = None if checks is None else {"signals": checks["signals"]}
        verdict = None
    spikes = [] if ev is None else rolling_zscore_spikes(ev.steps.tolist(), ev.loss.tolist())
    cfg, results = reader.config_of(r["manifest"]), r["results"] or {}
    partial = health.partial_note(ev, cfg, results)
    if checks and "verdict" in checks and partial:  # a copy: once() keeps the walk as read, not the page's words
        checks = {**checks, "verdict": {**checks["verdict"], "partial": partial}}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        line = health.summary(ev, cfg, results, verdict, sealed, spikes)
    remediation, _ = reader.read_optional_json(run / "remediation.json")
    if health.remedy_items(remediation):  # a remediated run: its whole walk is not the remedy's verdict
        line[0] = health.whole_rerun(line[0])
    line += health.remedy_items(remediation) + health.explain_items(r["diagnosis"], sealed)
    notes = [] if base is None else compare.baseline_notes(r["manifest"], base["manifest"], base["name"])
    return Assessment(checks=checks, health=line, spikes=spikes, markers=_markers(r, sealed), notes=notes,
                      rules=_rules(cfg), vocab_size=ev.vocab if ev is not None else evidence.ASSUMED_VOCAB)
