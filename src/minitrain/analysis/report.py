"""What the stability check writes: the walker's verdict as text (`minitrain diagnose`) and as
RUN/diagnosis.json (the dashboard shows it), and stability-check.md, generated from the tree.
"""
from __future__ import annotations

from pathlib import Path

from minitrain.analysis.thresholds import WINDOW
from minitrain.analysis.tree import ITEMS, RULE, TREE, Leaf, Node, next_node
from minitrain.core.fmt import fmt
from minitrain.run import files, reader

DIAGNOSIS_NAME = reader.DIAGNOSIS


def write_diagnosis(run: Path, result: dict) -> Path:
    """RUN/diagnosis.json: the verdict the dashboard shows (leaf, cause, anomaly_step, ...), atomically."""
    path = Path(run) / DIAGNOSIS_NAME
    files.atomic_write_text(path, files.strict_json(result, indent=2, ensure_ascii=False) + "\n")
    return path


def format_report(result: dict, run_name: str) -> str:
    lines = [f"stability check of {run_name}: walk from §1, first leaf wins", ""]
    for p in result["walk"]:
        lines.append(f"{p['node']}  {p['question']}")
        lines.append(f"      {p['metric']} [{p['panel']}]")
        answer = "not measured" if p.get("not_measured") else p["answer"]
        lines.append(f"      measured: {p['measured']}   threshold: {p['threshold']}   -> {answer}, go to {p['next']}")
        if "ruled_out" in p:
            r = p["ruled_out"]
            lines.append(f"      {r['leaf']} ruled out: {'; '.join(r['by'])} -> go to {r['next']}")
    lines += ["", f"{result['leaf']}  {result['title']}  (cause: {result['cause']}"
                  + (f", step {result['anomaly_step']})" if result["anomaly_step"] is not None else ")"),
              f"  diagnosis:   {result['diagnosis']}", f"  remediation: {result['remediation']}"]
    if result.get("case"):
        lines.insert(-2, f"  (texts for a run with {result['case']})")
    if result.get("confidence"):
        lines.append(f"  confidence:  {result['confidence']['text']}")
    for c in result.get("closest", []):
        lines.append(f"  closest: {c['leaf']} {c['title']} (cause {c['cause']}"
                     + (f", step {c['step']}" if c.get("step") is not None else "") + f"); ruled out: {c['ruled_out_by']}")
    ev = result["evidence"]
    keys = [k for k in ev if k not in ("steps_in_run", "baseline")]
    if keys:
        lines.append("  evidence:")
        for k in keys:
            lines.append(f"    {k}: {_short(ev[k])}")
    if "baseline" in ev:
        lines.append(f"  against baseline {ev['baseline'].get('run')}:")
        for k, v in ev["baseline"].items():
            if k != "run":
                lines.append(f"    {k}: {_short(v)}")
    if result.get("note"):
        lines.append(f"  note: {result['note']}")
    if result.get("not_measured"):
        lines.append("  not measured on this run (the verdict cannot rest on them): "
                     + ", ".join(result["not_measured"]))
    if result.get("untestable"):
        lines.append("  not testable on this run (their signal was not logged): " + ", ".join(result["untestable"]))
        for t in result.get("to_test", []):
            lines.append(f"    to test {', '.join(t['leaves'])}: {t['how']}")
    lines.append("")
    lines.append("Apply the fix, re-run, and re-walk from §1.")
    return "\n".join(lines)


def _short(v) -> str:
    if isinstance(v, float):
        return fmt(v, 5)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)


# ---------------------------------------------------------------------------------------------------
# stability-check.md, generated from TREE
# ---------------------------------------------------------------------------------------------------

MD_NAME = "stability-check.md"


def render_markdown() -> str:
    out = ["# Stability check", "",
           "<!-- generated from src/minitrain/analysis/tree.py by `minitrain stability-md`; do not edit by hand -->", "",
           f"**{RULE}**", "",
           "Each question names the metric to read, the dashboard panel that shows it, and a numeric threshold. "
           "Answer it, follow *yes* or *no*, and stop at the first leaf (a diagnosis). `minitrain diagnose RUN` "
           "walks the same tree over a run's metrics and prints the path with every measured value.", "",
           f"Ratios to a trailing median use the {WINDOW} steps before the step in question. A leaf may list "
           "evidence that rules it out: when that evidence holds, do not stop there; go on as if the question had "
           "answered *no*. If you reach the verdict having ruled a leaf out, the answer is *unknown* (§8.B), "
           "not *healthy*.", ""]
    for s in TREE:
        out += [f"## {s.id} {s.title}", "", s.intro, ""]
        for it in s.items:
            if isinstance(it, Node):
                no = it.no or next_node(it.id)
                out += [f"- **{it.id}** {it.question}",
                        f"  - metric: {it.metric}; dashboard: {it.panel}",
                        f"  - threshold: {it.threshold}",
                        f"  - yes → {_ref(it.yes)}; no → {_ref(no)}"]
        leaves = [it for it in s.items if isinstance(it, Leaf)]
        if leaves:
            out.append("")
            for lf in leaves:
                out.append(f"- **{lf.id} Leaf: {lf.title}** (cause `{lf.cause}`)")
                if lf.cases:
                    for case, (diagnosis, remediation) in lf.cases.items():
                        out += [f"  - {case}: diagnosis: {diagnosis}", f"  - {case}: remediation: {remediation}"]
                else:
                    out += [f"  - diagnosis: {lf.diagnosis}", f"  - remediation: {lf.remediation}"]
                for why, _ in lf.rule_out:
                    out.append(f"  - ruled out when {why}"
                               + (f" (then go on at **{lf.resume}**)" if lf.resume else ""))
        out.append("")
    out += ["---", "", f"{RULE}", ""]
    return "\n".join(out)


def _ref(target: str) -> str:
    it = ITEMS[target]
    return f"**{target}** (leaf: {it.title})" if isinstance(it, Leaf) else f"**{target}**"


def write_markdown(root: Path, check: bool = False) -> tuple[Path, bool]:
    """Write (or, with check, only compare) ROOT/stability-check.md. Returns (path, up_to_date)."""
    path = Path(root) / MD_NAME
    text = render_markdown()
    current = path.read_text() if path.exists() else None
    if check:
        return path, current == text
    if current != text:
        files.atomic_write_text(path, text)
    return path, True
