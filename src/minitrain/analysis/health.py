"""The run's health at a glance, for the dashboard's health line: each item has a label, a value, a mark
(ok | warn | bad | info) and a detail.

Every mark is the stability tree's own answer, under the walker's policy (walk.answer): the step-0 loss is
§1.1-§1.3, the first-step gradient norm the course's healthy range and §1.4/§1.5, the LR §2.1-§2.4, the
non-finite values §3.1, the verdict the walker's. Facts the tree has no opinion on (the clip rate, the
largest norm, the course's spike flags, the loss by verb class) are `info`, and their texts read the run's
own config. Nothing here is marked that the tree calls healthy. A remediated run's verdict against its baseline
(`minitrain remediate`) and the counterfactual replays (`minitrain explain`) are marked here too.
"""
from __future__ import annotations

import math

import numpy as np

from minitrain.analysis import panels
from minitrain.analysis.definitions import ROLLING_RULE, clipping_off
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.thresholds import GN1_HEALTHY
from minitrain.analysis.tree import ITEMS, Leaf, Node
from minitrain.analysis.walk import answer

STEP0_LOSS, FIRST_GRAD, LR = ("§1.1", "§1.2", "§1.3"), ("§1.4", "§1.5"), ("§2.1", "§2.2", "§2.3", "§2.4")
NONFINITE = "§3.1"


def _item(label: str, value: str, mark: str = "info", detail: str = "") -> dict:
    return {"label": label, "value": value, "verdict": mark, "detail": detail}


def _leaf_of(node: Node) -> Leaf:
    """The leaf a question's "yes" leads to (through follow-up questions' "yes")."""
    it = ITEMS[node.yes]
    while isinstance(it, Node):
        it = ITEMS[it.yes]
    return it


def tree_answer(ev: Evidence, ids: tuple[str, ...]) -> tuple[str | None, str]:
    """The first of these questions the run answers yes, with why in words; (None, "...: no") when none does."""
    for node_id in ids:
        node = ITEMS[node_id]
        f, _ = answer(node, ev)
        if f.matched:
            return node_id, f"{node_id} {node.question} yes: {f.shown} ({_leaf_of(node).title})"
    return None, f"the tree's {ids[0]}-{ids[-1]} answer no" if len(ids) > 1 else f"the tree's {ids[0]} answers no"


def partial_note(ev: Evidence | None, cfg: dict, results: dict) -> str:
    """"" for a run that ended (results.json); else what the verdict has read of it so far."""
    if results or ev is None or not len(ev.steps):
        return ""
    planned = cfg.get("steps")
    return (f"partial: steps {int(ev.steps[0])}-{int(ev.steps[-1])}" + (f" of {planned}" if planned else "")
            + ", the run has not finished")


def whole_rerun(item: dict) -> dict:
    """The walker's verdict item on a remediated run: the whole re-run keeps the original's rows up to the fix
    point, so its walk finds the original fault; the remedy is judged after the fix point (remedy_items)."""
    return {**item, "verdict": "info", "detail": "the walk over the whole re-run, which keeps the original's rows "
            "up to the fix point (the fault there is the original's); the remedy's verdict is judged after it"}


def _verdict(ev: Evidence | None, verdict: dict | None, sealed: bool, partial: str = "") -> dict:
    if sealed:
        return _item("stability check", "sealed", "info", "the tree's verdict is shown after your diagnosis (reveal); "
                     "every panel it reads is here. The handout's expected values were measured on the course's "
                     "model and data: on another model they may not hold, so read the panels against this run")
    if ev is None or verdict is None:
        return _item("stability check", "the walker cannot read this run", "warn", "minitrain diagnose RUN says why")
    at = f" at step {verdict['anomaly_step']}" if verdict.get("anomaly_step") is not None else ""
    untested = verdict.get("untestable") or []
    return _item("stability check", f"{verdict['leaf']} {verdict['title']}{at}" + (f" ({partial})" if partial else ""),
                 "info" if partial else "ok" if verdict["cause"] == "healthy" else "bad",
                 "the walker's verdict (stability-check.md, first matching leaf)"
                 + ("; it may change as the run goes on" if partial else "")
                 + (f"; not testable on this run (its log lacks what they read): {', '.join(untested)}"
                    if untested else ""))


def _start(ev: Evidence) -> list[dict]:
    """§1: the step-0 loss and the first step's gradient norm."""
    if ev.steps[0] != 0:
        return [_item("step-0 loss", "not in the data", "warn", "the metrics do not start at step 0")]
    l0, g0 = ev.loss[0], ev.grad_norm[0]
    matched, why = tree_answer(ev, STEP0_LOSS)
    value = f"{l0:.3f} vs ln {ev.vocab} = {ev.ln_v:.3f}" if math.isfinite(l0) else "non-finite"
    out = [_item("step-0 loss", value, "bad" if matched else "ok", why)]
    if math.isfinite(g0):
        lo, hi = GN1_HEALTHY
        matched, why = tree_answer(ev, FIRST_GRAD)
        mark = "bad" if matched else "ok" if lo <= g0 <= hi else "warn"
        detail = (why if matched else f"within the course's healthy [{lo:g}, {hi:g}]" if mark == "ok"
                  else f"outside the course's healthy [{lo:g}, {hi:g}]; {why}")
        out.append(_item("first-step grad norm", f"{g0:.4g}", mark, detail))
    return out


def _gradients(ev: Evidence, cfg: dict) -> list[dict]:
    """The clip rate and the largest norm, in the run's own config's words."""
    ok = np.isfinite(ev.grad_norm)
    if not ok.any():
        return []
    norms = ev.grad_norm[ok]
    clip = cfg.get("grad_clip")
    if "grad_clip" in cfg and clipping_off(clip):
        rate = _item("clip rate", f"clipping off (grad_clip={clip or 0:g})", "info",
                     "every step's full gradient reached the optimizer")
    else:
        n_clip = sum(1 for r, keep in zip(ev.rows, ok) if keep and r.get("clipped"))
        at = f" at {clip:g}" if clip else ""
        rate = _item("clip rate", f"{n_clip} of {len(norms)} steps ({100 * n_clip / len(norms):.1f}%){at}", "info",
                     f"median pre-clip norm {np.median(norms):.3g}" + (f" against grad_clip {clip:g}" if clip else "")
                     + "; the tree reads the norm before clipping (stability-check.md \u00a77)")
    i = int(np.flatnonzero(ok)[np.argmax(norms)])
    top = _item("max grad norm", f"{ev.grad_norm[i]:.4g} at step {ev.step_at(i)}", "info",
                f"{panels.cite('grad')}; the tree judges spikes against the trailing median (\u00a77)")
    return [rate, top]


def _nonfinite(ev: Evidence) -> dict:
    f, _ = answer(ITEMS[NONFINITE], ev)
    count = int(np.nansum(ev.nonfinite))
    return _item("non-finite values", f"{count}" + (f" (first at step {ev.step_at(f.index)})" if f.matched else ""),
                 "bad" if f.matched else "ok", f"{NONFINITE}: {f.shown}")


def perplexity_text(loss: float) -> str:
    """exp(loss), or "overflow" past what a float holds (a diverged run's loss of hundreds of nats)."""
    try:
        return f"{math.exp(loss):.4g}"
    except OverflowError:
        return "overflow"


def _validation(ev: Evidence, results: dict) -> list[dict]:
    ngram, val, where = ev.ngram_val_loss, results.get("final_val_loss"), "final"
    if val is None:
        idx = np.flatnonzero(np.isfinite(ev.val_loss))
        if len(idx):
            val, where = float(ev.val_loss[idx[-1]]), f"last (step {ev.step_at(int(idx[-1]))})"
    if val is not None and ngram is not None:
        margin = ngram - val
        return [_item(f"{where} val loss", f"{val:.3f} (ppl {perplexity_text(val)}) vs n-gram {ngram:.3f} "
                      f"(ppl {perplexity_text(ngram)})", "ok" if margin > 0 else "bad",
                      f"{margin:.3f} below the n-gram baseline" if margin > 0
                      else f"{-margin:.3f} above the n-gram baseline")]
    if ngram is not None:
        return [_item("val loss", f"none yet (n-gram {ngram:.3f})", "warn")]
    return []


def _lr(ev: Evidence, cfg: dict) -> list[dict]:
    lr = ev.lr[np.isfinite(ev.lr)]
    if len(lr) < 3:
        return []
    matched, why = tree_answer(ev, LR)
    # a blind run's config withholds warmup_steps (a break-it lab may have changed it): say so, not "?"
    warmup = f"warmup {cfg['warmup_steps']} steps" if cfg.get("warmup_steps") is not None \
        else f"warmup withheld (blind run: {panels.cite('lr')} draws the schedule)"
    return [_item("learning rate", f"{lr.min():.3g} .. {lr.max():.3g}, {warmup}",
                  "bad" if matched else "ok", why)]


def _spikes(spikes: list[int]) -> dict:
    shown = (f"{len(spikes)}: step{'s' if len(spikes) > 1 else ''} " + ", ".join(map(str, spikes[:6]))
             + (" ..." if len(spikes) > 6 else "")) if spikes else "none"
    return _item("course spike flags", shown, "info",
                 f"{ROLLING_RULE}: the course's raw flag, which also fires on clean runs; the stability check decides")


def _verb_classes(ev: Evidence) -> list[dict]:
    tail = ev.rows[-100:]
    reg = [r["loss_regular"] for r in tail if r.get("loss_regular") is not None]
    irr = [r["loss_irregular"] for r in tail if r.get("loss_irregular") is not None]
    if not (reg and irr):
        return []
    return [_item("regular vs irregular", f"{sum(reg) / len(reg):.3f} vs {sum(irr) / len(irr):.3f}", "info",
                  "mean training loss by verb class over the last 100 steps")]


def summary(ev: Evidence | None, cfg: dict, results: dict, verdict: dict | None, sealed: bool,
            spikes: list[int]) -> list[dict]:
    """The health line of one run: `ev` its evidence (None when the walker cannot read it), `cfg` and `results`
    its config and results, `verdict` the walker's, `sealed` whether the verdict is withheld, `spikes` the
    course's spike flags (definitions.rolling_zscore_spikes)."""
    out = [_verdict(ev, verdict, sealed, partial_note(ev, cfg, results))]
    if ev is None:
        return out
    def tree(items: list[dict]) -> list[dict]:  # their marks and details are the tree's answers (§1, §2, §3.1)
        return [{**it, "verdict": "info", "detail": "the tree's answer is shown after the reveal"}
                for it in items] if sealed else items

    out += tree(_start(ev)) + _gradients(ev, cfg) + tree([_nonfinite(ev)]) + _validation(ev, results) + tree(_lr(ev, cfg))
    return out + [_spikes(spikes)] + _verb_classes(ev)


def remedy_items(rep: dict | None) -> list[dict]:
    """A remediated run's verdict (remediation.json, written by `minitrain remediate`): its one conclusion
    (fixcheck.conclusion), or, in an older file, the verdict against the baseline and the re-walk after the fix:
    ok when better / fixed, bad when worse / not fixed."""
    v = (rep or {}).get("verdict")
    if not isinstance(v, dict) or "line" not in v:
        return []
    one = rep.get("conclusion")
    if isinstance(one, dict) and "line" in one:  # remediate's one verdict: the fault after the fix and the loss
        return [_item(f"remedy {rep.get('remedy')} vs {rep.get('baseline')}", str(one.get("outcome")),
                      str(one.get("mark", "info")), str(one["line"]))]
    mark = {"better": "ok", "no better": "info", "worse": "bad"}.get(v.get("verdict"), "info")
    items = [_item(f"remedy {rep.get('remedy')} vs {rep.get('baseline')}", str(v["line"]).split(":")[0], mark,
                   str(v["line"]))]
    fix = rep.get("fix")
    if isinstance(fix, dict) and "line" in fix:
        mark = {"fixed": "ok", "undecided": "warn"}.get(fix.get("outcome"), "bad")
        items.append(_item("re-walk after the fix", str(fix.get("outcome")), mark, str(fix["line"])))
    return items


def explain_items(diagnosis: dict | None, sealed: bool) -> list[dict]:
    """The counterfactual replays' conclusion beside the walker's verdict (`minitrain explain` writes it into
    diagnosis.json): ok when they agree with the walker, warn when they disagree, bad when the identical replay
    did not reproduce the run."""
    rep = (diagnosis or {}).get("counterfactuals")
    if sealed or not isinstance(rep, dict) or "conclusion" not in rep:
        return []
    mark = "bad" if not rep.get("reproduced") else {True: "ok", False: "warn"}.get(rep.get("agrees_with_walker"), "info")
    table = "; ".join(f"{row['description']}: " + ("-" if row["verdict"].get("still_there") is None else
                                                  "still there" if row["verdict"]["still_there"] else "gone")
                      + f" ({row['verdict'].get('by')})" for row in rep.get("table", []) if row.get("name") != "recorded")
    return [_item(f"replays at step {rep.get('step')} (minitrain explain)", str(rep["conclusion"]), mark,
                  " | ".join([*rep.get("lines", []), table]))]
