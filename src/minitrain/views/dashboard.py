"""dashboard.html: one self-contained page per run, opened by double-click with no network.

    write_dashboard(run)        RUN/dashboard.html (written after every run, and by `minitrain dashboard`)

(EXPERIMENTS/index.html, the runs table, is views/index.py.)

The page is one static HTML file: uPlot (vendored unmodified in assets/vendor/, pinned and checked by
scripts/fetch_uplot.py), the CSS and the page script (assets/dashboard.css; PAGE_SCRIPTS, one closure) are
inlined, and the run's data is embedded as one JSON block. The panels, their numbers, titles, units and series
come from the panel registry (analysis/panels.py), which stability-check.md cites too. What is judged comes
from analysis as ONE assessment (readings.assess: the health line with its marks, the walker's verdict and every
question of the tree, the course's spike flags, the judged markers, whether the baseline shares the trunk, the
rules in words); and from analysis too, the per-tensor "movers" (movers.py) and the differences to a baseline
with whether they exceed float rounding (compare.py); this module lays them out beside the series; the script
only draws. Every string
reaches the page through that JSON block (with <, > and & escaped, so `</script>` in a
run name stays text) and is put on screen with textContent, never as HTML.

Sealed runs (run/sealing.py: a learner lab's run before its lab's reveal): the page carries
neither the walker's verdict nor the tree's answers nor diagnosis.json (the reveal writes the page again with
them), and the runs table says "sealed".
"""
from __future__ import annotations

import html
import json
import re
import time
from importlib import resources
from pathlib import Path

from minitrain.analysis import movers, panels, readings
from minitrain.analysis.compare import step_differences
from minitrain.core.config import INJECTION_FIELDS
from minitrain.core.errors import UserError
from minitrain.core.fmt import UR_WEIGHT_FLOOR, page_number
from minitrain.core.injections import REGISTRY
from minitrain.run import files, reader, sealing

PER_TENSOR_STATS = tuple(panels.tensor_stats())  # per-parameter telemetry the page plots (the panel registry)
SMOOTHING = 0.9  # the smoothing slider's starting value (EMA weight, debiased as TensorBoard does)
OVERLAY_SERIES = ("loss", "val_loss", "lr", "grad_norm", "act", "loss_regular", "loss_irregular", "logit_max",
                  "attn_logit_max", "attn_entropy_min", "logz_mean", "logz_max", "logit_mean")
UPLOT = ("vendor/uPlot.iife.min.js", "vendor/uPlot.min.css")
PAGE_SCRIPTS = ("helpers.js", "panels.js", "chart.js", "page.js")  # assets/, each using only those before it
PAGE_CONFIG = ("grad_clip", "vocab_size", "warmup_steps", "steps", "batch_size", "eval_every", "spectral_every",
               "telemetry")


# ---------------------------------------------------------------------------------------------------
# Reading a run folder
# ---------------------------------------------------------------------------------------------------


def _as_is(x):
    """A telemetry number as written (already 5 significant digits); None for anything else."""
    return x if type(x) is float or type(x) is int else None


def _config(r: dict) -> dict:
    return reader.config_of(r["manifest"])


def _injection(r: dict) -> str:
    return str(_config(r).get("injection", "none"))


# ---------------------------------------------------------------------------------------------------
# What the page shows: series, markers, judgements
# ---------------------------------------------------------------------------------------------------


def _series(rows: list[dict]) -> dict:
    """Column arrays of every per-step quantity the page plots (one pass over the rows)."""
    keys = ("loss", "lr", "grad_norm", "grad_norm_clipped", "loss_regular", "loss_irregular", "logit_max")
    cols: dict = {k: [] for k in keys}
    clipped, nonfinite, act, val = [], [], [], []
    batch = {k: [] for k in panels.batch_stats()}  # the batch-composition fields the panels draw
    n_layers = max((len(r.get("act") or []) for r in rows), default=0)
    for r in rows:
        for k in keys:
            cols[k].append(page_number(r.get(k)))
        clipped.append(1 if r.get("clipped") else 0)
        nonfinite.append(int(r.get("nonfinite") or 0))
        a = r.get("act") or []
        act.append([_as_is(a[i]) if i < len(a) else None for i in range(n_layers)])
        if r.get("val_loss") is not None:
            val.append([r["step"], page_number(r["val_loss"])])
        b = r.get("batch") or {}
        for k in batch:
            batch[k].append(_as_is(b.get(k)))
    for k in NATURAL_SERIES:  # natural_signals runs only (detail steps): absent from the page data otherwise
        if any(k in r for r in rows):
            cols[k] = _natural_column(rows, k)
    cols["clipped"] = clipped
    cols["nonfinite"] = nonfinite
    cols["act"] = [list(layer) for layer in zip(*act)] if n_layers else []
    cols["val_loss"] = val  # [step, value] pairs: measured every eval_every steps
    cols["batch"] = batch
    return cols


NATURAL_SERIES = ("attn_logit_max", "attn_entropy_min", "logz_mean", "logz_max", "logit_mean")


def _natural_column(rows: list[dict], key: str) -> list:
    """A natural-instability signal as the page draws it: a value per step (None off detail steps), or per layer
    a list of such columns."""
    vals = [r.get(key) for r in rows]
    if not any(isinstance(v, list) for v in vals):
        return [_as_is(v) for v in vals]
    n = max(len(v) for v in vals if isinstance(v, list))
    return [[_as_is(v[i]) if isinstance(v, list) and i < len(v) else None for v in vals] for i in range(n)]


def _weight_at_floor(d: dict) -> bool:
    """Whether a tensor's update-to-weight ratio was taken of a weight norm at telemetry's floor (a tensor
    initialised at zero, on its first step): |w| = u / ur. Such a ratio (~1e7) is not drawn."""
    u, ur = d.get("u"), d.get("ur")
    return isinstance(u, (int, float)) and isinstance(ur, (int, float)) and ur > 0 and u / ur <= 10 * UR_WEIGHT_FLOOR


def _per_tensor(rows: list[dict]) -> dict | None:
    """Per-parameter telemetry as {stat: [[value per step] per tensor]}, plus the sampled spectral norms."""
    names: list[str] = []
    for r in rows:
        for n in r.get("params") or {}:
            if n not in names:
                names.append(n)
    if not names:
        return None
    stats = {s: [[] for _ in names] for s in PER_TENSOR_STATS}
    for r in rows:
        p = r.get("params") or {}
        for i, n in enumerate(names):
            d = p.get(n) or {}
            for s in PER_TENSOR_STATS:
                stats[s][i].append(None if s == "ur" and _weight_at_floor(d) else _as_is(d.get(s)))
    sigma_rows = [r for r in rows if r.get("sigma")]
    sigma_names = list(sigma_rows[0]["sigma"]) if sigma_rows else []
    sigma = {"steps": [r["step"] for r in sigma_rows], "names": sigma_names,
             "values": [[_as_is(r["sigma"].get(n)) for r in sigma_rows] for n in sigma_names]}
    return {"names": names, "stats": stats, "sigma": sigma}


def _markers(r: dict, steps: list[int], judged: list[dict]) -> list[dict]:
    """The step markers: the config's facts (warmup end, K, where the data ends) and analysis's judged ones."""
    cfg, manifest = _config(r), r["manifest"]
    out = []
    warm = int(cfg.get("warmup_steps") or 0)
    if warm > 0:
        out.append({"step": warm, "kind": "warmup", "label": f"warmup ends (step {warm})", "short": "warmup end"})
    inj = _injection(r)
    if inj not in ("none", "withheld") and cfg.get("injection_step") is not None:
        k = int(cfg["injection_step"])
        what = _injection_words(manifest.get("injection") or {}, cfg)
        out.append({"step": k, "kind": "k", "label": f"K={k}: {what}", "short": f"K={k} {inj}"})
    if r["data_note"] and steps:
        out.append({"step": steps[-1], "kind": "end", "label": f"data ends (step {steps[-1]})", "short": "data ends"})
    return out + judged


def _injection_words(inj: dict, cfg: dict) -> str:
    """What was injected, in a few words (from the manifest's record when the injection fired)."""
    rec = inj.get("record") if isinstance(inj.get("record"), dict) else {}
    name = cfg.get("injection", inj.get("injection", "none"))
    if name == "scale":
        return f"scale: every gradient x{rec.get('multiplier', cfg.get('injection_scale'))}"
    if name == "bad_batch":
        copies = rec.get("copies", cfg.get("batch_size"))
        return f"bad_batch: {copies} copies of \"{rec.get('sentence', cfg.get('injection_sentence'))}\""
    if name == "v_corrupt":
        return (f"v_corrupt: Adam v of {rec.get('touched', cfg.get('injection_param'))} "
                f"x{rec.get('factor', cfg.get('injection_factor'))}")
    return str(name)


def _run_payload(r: dict, role: str, with_tensors: bool = False) -> dict:
    """One run as the page draws it: its steps and every per-step column; per-tensor telemetry for the
    page's own run only (the overlays of other runs draw the scalar panels)."""
    rows = r["rows"]
    series = _series(rows)
    if not with_tensors:  # an overlay: only what the overlaid panels draw
        series = {k: v for k, v in series.items() if k in OVERLAY_SERIES}
    out = {"name": r["name"], "role": role, "steps": [row["step"] for row in rows], "series": series}
    if with_tensors:
        out["per_tensor"] = _per_tensor(rows)
    return out


def applied_config(cfg: dict) -> dict:
    """The run's config as the page lists it: of the injection's knobs, only those its injection reads
    (core/injections.py's params; injection_span for one that lasts), the others did not apply."""
    inj = REGISTRY.get(str(cfg.get("injection", "none")))
    used = {"injection", *((["injection_step", *inj.params] + (["injection_span"] if inj.lasts == "span" else []))
                            if inj else [])}
    return {k: v for k, v in cfg.items() if k not in INJECTION_FIELDS or k in used}


def _page_config(cfg: dict, vocab_size: int) -> dict:
    """The run's settings the page's panels use, with the vocabulary the walker's ln V is taken of (analysis
    resolves it: the tokenizer's, else the config's, else the assumed default)."""
    return {**{k: cfg.get(k) for k in PAGE_CONFIG}, "vocab_size": vocab_size}


def build_payload(run: Path, baseline: Path | None = None, compare: list[Path] = (), sealed: bool | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict. `compare`: further runs drawn beside this one and the
    baseline (e.g. the original run beside its remediation), each with its own colour and difference line.
    `sealed`: the run's diagnosis is not to be shown before the learner asks (default: run/sealing.py's rule).
    The verdict and the tree's answers are then not in the payload at all."""
    r = reader.load_run(run)
    rows, cfg = r["rows"], _config(r)
    blind = bool(cfg.get("blind"))
    sealed = sealing.is_sealed(run) if sealed is None else sealed
    steps = [row["step"] for row in rows]
    me = _run_payload(r, "run", with_tensors=True)
    cols, per_tensor = me["series"], me["per_tensor"]
    top_movers, rank_note = {}, ""
    if per_tensor:
        lo, hi, rank_note = movers.rank_window(steps, cfg)
        for s in PER_TENSOR_STATS:
            top_movers[s] = movers.ranked(steps, per_tensor["stats"][s], per_tensor["names"], lo, hi)
    inj = _injection(r)
    b = reader.load_run(baseline) if baseline is not None else None
    judged = readings.assess(r, sealed, b)
    payload = {
        "name": r["name"],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "status": (r["results"] or {}).get("status") or r["manifest"].get("status") or "unknown",
        "data_note": r["data_note"],
        "notes": r["notes"] + judged.notes,
        "manifest": r["manifest"],
        "results": r["results"],
        "sealed": sealed,
        "blind": blind,
        "diagnosis": None if sealed else r["diagnosis"],
        "diagnosis_note": None if sealed else r["diagnosis_note"],
        "injection": {"name": "withheld" if blind else inj, "withheld": blind,
                      "step": cfg.get("injection_step") if inj != "none" and not blind else None,
                      "words": "withheld until the reveal (blind run)" if blind
                      else _injection_words(r["manifest"].get("injection") or {}, cfg)},
        "config": _page_config(cfg, judged.vocab_size),
        "config_applied": applied_config(r["manifest"].get("config") or {}),
        "ngram_val_loss": (r["results"] or {}).get("ngram_val_loss",
                                                   (r["manifest"].get("ngram_baseline") or {}).get("val_loss")),
        "panels": panels.as_json(),
        "thresholds": panels.reference_values(),
        "tensor_stats": list(PER_TENSOR_STATS),
        "runs": [me],
        "diffs": [],
        "movers": top_movers,
        "movers_rule": rank_note,
        "spikes": judged.spikes,
        "markers": _markers(r, steps, judged.markers),
        "health": judged.health,
        "checks": judged.checks,
        "rules": judged.rules,
        "smoothing": SMOOTHING,
    }
    if b is not None:
        payload["runs"].append(_run_payload(b, "baseline"))
        payload["diffs"].append({"name": r["name"], "baseline": b["name"], **step_differences(rows, b["rows"])})
    for path in compare:
        c = reader.load_run(path)
        payload["runs"].append(_run_payload(c, "compare"))
        if b is not None:
            payload["diffs"].append({"name": c["name"], "baseline": b["name"], **step_differences(c["rows"], b["rows"])})
    return payload


# ---------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------


def asset(name: str) -> str:
    return resources.files("minitrain.views").joinpath("assets", name).read_text(encoding="utf-8")


def embed_json(obj) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' survives (they become \\u003c etc.),
    so no string can close the element or open a comment; non-ASCII and U+2028/9 are escaped too."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fill(template: str, parts: dict[str, str]) -> str:
    """Replace each {{NAME}} of the template in one pass, so text put in is never scanned again."""
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts[m.group(1)], template)


def page_script(names: tuple[str, ...] = PAGE_SCRIPTS, uplot: bool = True) -> str:
    """uPlot (when the page draws charts), then the page's script modules (assets/, each using only those before
    it) in one closure, so that none of their names is a global. Every page's script is assembled here."""
    modules = "\n".join(asset(name) for name in names)
    js = (asset(UPLOT[0]) + "\n" if uplot else "") + f"(function () {{\n{modules}\n}})();"
    assert "</script" not in js.lower()
    return js


def render_html(payload: dict) -> str:
    css = asset(UPLOT[1]) + "\n" + asset("dashboard.css")
    js = page_script()
    assert "</script" not in js.lower() and "</style" not in css.lower()
    return fill(asset("dashboard.html"), {"TITLE": html.escape(f"{payload['name']} - minitrain dashboard"),
                                           "CSS": css, "JS": js, "DATA": embed_json(payload)})


def write_dashboard(run: Path, baseline: Path | None = None, out: Path | None = None,
                    auto_baseline: bool = True, compare: list[Path] = (), sealed: bool | None = None) -> Path:
    """Write RUN/dashboard.html (or `out`). With no baseline given, an injection run's sibling baseline (same
    trunk hash, no injection) is found and overlaid. `compare`: further runs drawn beside it (see
    build_payload). `sealed`: see build_payload. Returns the path written."""
    run = Path(run)
    if baseline is None and auto_baseline and not reader.config_of(reader.manifest_of(run)).get("blind"):
        baseline = reader.find_baseline(run)  # a blind page shows no other run's settings before the reveal
    if baseline is not None and Path(baseline).resolve() == run.resolve():
        raise UserError("--baseline is the run itself; give another run folder")
    compare = [Path(c) for c in compare]
    seen = {run.resolve()} | ({Path(baseline).resolve()} if baseline is not None else set())
    for c in compare:
        if c.resolve() in seen:
            raise UserError(f"--compare {c} is already on the page (the run, the baseline or another --compare); "
                            "give each run once")
        seen.add(c.resolve())
    out = Path(out) if out else run / "dashboard.html"
    if out.is_dir():
        raise UserError(f"{out} is a folder; give --out a file name such as {out / 'dashboard.html'}")
    with reader.metrics_once():  # the page's series and the walk read the same rows
        page = render_html(build_payload(run, baseline, compare, sealed))
    files.atomic_write_text(out, page)
    return out
