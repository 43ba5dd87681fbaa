"""dashboard.html: one self-contained page per run, opened by double-click with no network.

    write_dashboard(run)        RUN/dashboard.html (written after every run, and by `minitrain dashboard`)
    write_index(experiments)    EXPERIMENTS/index.html: one row per run folder found at any depth

The page is one static HTML file: uPlot (vendored unmodified in assets/vendor/, pinned and checked by
scripts/fetch_uplot.py), the CSS and the page script (assets/dashboard.css; PAGE_SCRIPTS, one closure) are
inlined, and the run's data is embedded as one JSON block. The panels, their numbers, titles, units and series
come from the panel registry (analysis/panels.py), which stability-check.md cites too. What is judged comes
from analysis (readings.page: the health line, the walker's verdict and every question of the tree, the
course's spike flags); this module lays it out beside the series, the per-tensor "movers" and the
differences to a baseline (and whether they exceed float rounding); the script only draws. Every string
reaches the page through that JSON block (with <, > and & escaped, so `</script>` in a
run name stays text) and is put on screen with textContent, never as HTML.

Sealed runs (a blind run before its lab's reveal, or a lab run the caller says is sealed): the page does
not show the walker's verdict, the tree's answers or diagnosis.json until the learner presses "reveal"
in the page, and the index says "sealed".
"""
from __future__ import annotations

import html
import json
import math
import re
import time
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

from minitrain.analysis import panels, readings
from minitrain.core.errors import UserError
from minitrain.run import files, reader

PER_TENSOR_STATS = tuple(panels.tensor_stats())  # per-parameter telemetry the page plots (the panel registry)
MOVERS = 4  # tensors shown by default in each per-tensor panel
MOVER_LOOKBACK = 50  # a tensor "moves" when it leaves the median of its own previous 50 steps
MOVER_WINDOW = 50  # with an injection, movers are ranked over steps K..K+50
MOVER_MIN_SPAN = 20  # fewer steps than this left after the lookback: rank from the run's second step instead
SMOOTHING = 0.9  # the smoothing slider's starting value (EMA weight, debiased as TensorBoard does)
OVERLAY_SERIES = ("loss", "val_loss", "lr", "grad_norm", "act", "loss_regular", "loss_irregular", "logit_max",
                  "attn_logit_max", "attn_entropy_min", "logz_mean", "logz_max", "logit_mean")
FLOAT_ROUNDING_REL = 32 * 2.0 ** -23  # |a - b| within 32 float32 ulps of |b|: identical up to float rounding
UPLOT = ("vendor/uPlot.iife.min.js", "vendor/uPlot.min.css")
PAGE_SCRIPTS = ("helpers.js", "panels.js", "chart.js", "page.js")  # assets/, each using only those before it
PAGE_CONFIG = ("grad_clip", "vocab_size", "warmup_steps", "steps", "batch_size", "eval_every", "spectral_every",
               "telemetry")


# ---------------------------------------------------------------------------------------------------
# Reading a run folder
# ---------------------------------------------------------------------------------------------------


def _num(x, digits: int = 6):
    """A float rounded to `digits` significant digits for the page; None for missing or non-finite."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _as_is(x):
    """A telemetry number as written (already 5 significant digits); None for anything else."""
    return x if type(x) is float or type(x) is int else None


def _config(r: dict) -> dict:
    return r["manifest"].get("config") or {}


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
            cols[k].append(_num(r.get(k)))
        clipped.append(1 if r.get("clipped") else 0)
        nonfinite.append(int(r.get("nonfinite") or 0))
        a = r.get("act") or []
        act.append([_as_is(a[i]) if i < len(a) else None for i in range(n_layers)])
        if r.get("val_loss") is not None:
            val.append([r["step"], _num(r["val_loss"])])
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
                stats[s][i].append(_as_is(d.get(s)))
    sigma_rows = [r for r in rows if r.get("sigma")]
    sigma_names = list(sigma_rows[0]["sigma"]) if sigma_rows else []
    sigma = {"steps": [r["step"] for r in sigma_rows], "names": sigma_names,
             "values": [[_as_is(r["sigma"].get(n)) for r in sigma_rows] for n in sigma_names]}
    return {"names": names, "stats": stats, "sigma": sigma}


def _log_deviation(values: list, keep: np.ndarray, lookback: int = MOVER_LOOKBACK) -> np.ndarray:
    """|log10(x_t / median(x_{t-lookback..t-1}))| at the steps where `keep` is true (NaN elsewhere and where
    undefined: x <= 0, missing, no past)."""
    x = np.array([v if v is not None and v > 0 else np.nan for v in values], dtype=float)
    lx = np.log10(x)
    out = np.full(len(lx), np.nan)
    idx = np.flatnonzero(keep)
    if not len(idx):
        return out
    past = np.concatenate([np.full(lookback, np.nan), lx[:-1]])
    windows = np.lib.stride_tricks.sliding_window_view(past, lookback)[idx]
    med = np.median(windows, axis=1)  # fast path; windows holding a gap are redone ignoring the gap
    redo = np.isnan(med)
    if redo.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows at the start
            med[redo] = np.nanmedian(windows[redo], axis=1)
    out[idx] = np.abs(lx[idx] - med)
    return out


def _rank_window(steps: list[int], cfg: dict) -> tuple[int, int, str]:
    """Steps over which movers are ranked: K..K+50 for an injection run; otherwise from the end of warmup (or,
    when the warmup is unknown or short, from the first step that has MOVER_LOOKBACK steps of past: a tensor's
    first steps have almost no past to be compared with) to the last step."""
    first, last = (steps[0], steps[-1]) if steps else (0, 0)
    k = cfg.get("injection_step") if cfg.get("injection", "none") not in ("none", None) else None
    if k is not None and first <= k <= last:
        return k, k + MOVER_WINDOW, f"over steps {k}-{min(last, k + MOVER_WINDOW)} from K"
    lo = max(int(cfg.get("warmup_steps") or 0), first + MOVER_LOOKBACK)
    if last - lo < MOVER_MIN_SPAN:
        lo = min(last, first + 1)
    why = ", after warmup" if lo == cfg.get("warmup_steps") else ""
    return lo, last, f"over steps {lo}-{last}{why}"


def _movers(steps: list[int], per_stat: list[list], names: list[str], lo: int, hi: int) -> list[dict]:
    """Tensors ranked by how far they leave their own recent median within steps [lo, hi]."""
    s = np.array(steps)
    in_window = (s >= lo) & (s <= hi)
    ranked = []
    for i, values in enumerate(per_stat):
        dev = _log_deviation(values, in_window)
        if np.all(np.isnan(dev)):
            continue
        j = int(np.nanargmax(dev))
        ranked.append({"index": i, "name": names[i], "factor": _num(10 ** float(dev[j]), 3), "step": int(s[j])})
    ranked.sort(key=lambda m: (-m["factor"], m["index"]))
    return ranked[:MOVERS]


def _markers(r: dict, steps: list[int], sealed: bool) -> list[dict]:
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
    for row in r["rows"]:
        if row.get("loss") is None or row.get("grad_norm") is None:
            out.append({"step": row["step"], "kind": "nonfinite", "label": f"non-finite at step {row['step']}",
                        "short": "non-finite"})
            break
    if r["data_note"] and steps:
        out.append({"step": steps[-1], "kind": "end", "label": f"data ends (step {steps[-1]})", "short": "data ends"})
    d = r["diagnosis"] or {}
    if not sealed and isinstance(d.get("anomaly_step"), int) and not isinstance(d.get("anomaly_step"), bool):
        leaf = d.get("leaf")
        out.append({"step": d["anomaly_step"], "kind": "diagnosis",
                    "label": f"diagnosis: anomaly at {d['anomaly_step']}" + (f" ({leaf})" if leaf else ""),
                    "short": "anomaly"})
    return out


def _injection_words(inj: dict, cfg: dict) -> str:
    """What was injected, in a few words (from the manifest's record when the injection fired)."""
    rec = inj.get("record") or {}
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


def _difference(rows: list[dict], ref_rows: list[dict]) -> dict:
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
            diff[key].append(_num(d, 5))
            if first_diff is None and (d is None or d != 0):
                first_diff = row["step"]
        if row.get("val_loss") is not None and other.get("val_loss") is not None:
            d = note("val_loss", row["val_loss"], other["val_loss"])
            diff["val_steps"].append(row["step"])
            diff["val_loss"].append(_num(d, 5))
    diff["first_difference"] = first_diff
    # per signal: does it differ at all, and is every difference below float32 rounding of the reference?
    diff["rounding"] = {k: {"within": not beyond[k] and worst[k][0] > 0, "max_abs": _num(worst[k][0], 3),
                            "bound": _num(worst[k][1], 3)} for k in worst}
    diff["rounding_rel"] = FLOAT_ROUNDING_REL
    return diff


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


def _page_config(cfg: dict, vocab_size: int) -> dict:
    """The run's settings the page's panels use, with the vocabulary the walker's ln V is taken of (analysis
    resolves it: the tokenizer's, else the config's, else the assumed default)."""
    return {**{k: cfg.get(k) for k in PAGE_CONFIG}, "vocab_size": vocab_size}


def _remedy_items(run: Path) -> list[dict]:
    """A remediated run's verdict against the baseline (remediation.json, written by `minitrain remediate`)."""
    rep, _ = reader.read_optional_json(run / "remediation.json")
    v = (rep or {}).get("verdict")
    if not isinstance(v, dict) or "line" not in v:
        return []
    mark = {"better": "ok", "no better": "warn", "worse": "bad"}.get(v.get("verdict"), "info")
    return [{"label": f"remedy {rep.get('remedy')} vs {rep.get('baseline')}", "value": str(v["line"]).split(":")[0],
             "verdict": mark, "detail": str(v["line"])}]


def build_payload(run: Path, baseline: Path | None = None, compare: list[Path] = (), sealed: bool | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict. `compare`: further runs drawn beside this one and the
    baseline (e.g. the original run beside its remediation), each with its own colour and difference line.
    `sealed`: the run's diagnosis is not to be shown before the learner asks (the lab layer knows which runs
    are; default: a blind run). The verdict and the tree's answers are then behind a "reveal" button."""
    r = reader.load_run(run)
    rows, cfg = r["rows"], _config(r)
    blind = bool(cfg.get("blind"))
    if sealed is None:
        sealed = blind
    steps = [row["step"] for row in rows]
    me = _run_payload(r, "run", with_tensors=True)
    cols, per_tensor = me["series"], me["per_tensor"]
    movers, rank_note = {}, ""
    if per_tensor:
        lo, hi, rank_note = _rank_window(steps, cfg)
        for s in PER_TENSOR_STATS:
            movers[s] = _movers(steps, per_tensor["stats"][s], per_tensor["names"], lo, hi)
    inj = _injection(r)
    judged = readings.page(Path(run), sealed)
    payload = {
        "name": r["name"],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "status": (r["results"] or {}).get("status") or r["manifest"].get("status") or "unknown",
        "data_note": r["data_note"],
        "notes": r["notes"],
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
        "config": _page_config(cfg, judged["vocab_size"]),
        "ngram_val_loss": (r["results"] or {}).get("ngram_val_loss",
                                                   (r["manifest"].get("ngram_baseline") or {}).get("val_loss")),
        "panels": panels.as_json(),
        "thresholds": panels.reference_values(),
        "tensor_stats": list(PER_TENSOR_STATS),
        "runs": [me],
        "diffs": [],
        "movers": movers,
        "movers_rule": rank_note,
        "spikes": judged["spikes"],
        "markers": _markers(r, steps, sealed),
        "health": judged["health"] + _remedy_items(Path(run)),
        "checks": judged["checks"],
        "smoothing": SMOOTHING,
    }
    b = None
    if baseline is not None:
        b = reader.load_run(baseline)
        payload["runs"].append(_run_payload(b, "baseline"))
        payload["diffs"].append({"name": r["name"], "baseline": b["name"], **_difference(rows, b["rows"])})
        if b["manifest"].get("trunk_hash") != r["manifest"].get("trunk_hash"):
            from minitrain.core.config import INJECTION_FIELDS, NON_NUMERIC_FIELDS

            rc, bc = r["manifest"].get("config", {}), b["manifest"].get("config", {})
            differ = sorted(k for k in set(rc) | set(bc)
                            if rc.get(k) != bc.get(k) and k not in INJECTION_FIELDS + NON_NUMERIC_FIELDS)
            if differ and all(k.startswith("remedy") for k in differ):  # a remediated run: expected
                payload["notes"].append(f"this run applies a remedy the baseline does not "
                                        f"({', '.join(f'{k}={rc.get(k)}' for k in differ)})")
            else:
                payload["notes"].append(f"baseline {b['name']} has another config beyond the injection "
                                        f"({', '.join(differ) or 'trunk hash'}): differences are not the "
                                        "injection's alone")
    for path in compare:
        c = reader.load_run(path)
        payload["runs"].append(_run_payload(c, "compare"))
        if b is not None:
            payload["diffs"].append({"name": c["name"], "baseline": b["name"], **_difference(c["rows"], b["rows"])})
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


def page_script() -> str:
    """uPlot, then the page script's modules in one closure, so that none of their names is a global."""
    modules = "\n".join(asset(name) for name in PAGE_SCRIPTS)
    return f"{asset(UPLOT[0])}\n(function () {{\n{modules}\n}})();"


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
    page = render_html(build_payload(run, baseline, compare, sealed))
    files.atomic_write_text(out, page)
    return out


# ---------------------------------------------------------------------------------------------------
# experiments/index.html
# ---------------------------------------------------------------------------------------------------


SWEEP_MARK = "cells.json"  # a regime-map sweep (minitrain explore): it has its own page, one index row


def find_runs(experiments: Path) -> list[Path]:
    """Every run folder under `experiments`, at any depth (blind labs, break-it, remediations), sorted by path;
    a regime-map sweep's folder stands for its runs. A run folder's own subfolders are not searched."""
    out: list[Path] = []
    for d in sorted(p for p in Path(experiments).rglob("*") if p.is_dir()):
        if any(parent in out for parent in d.parents):
            continue
        if files.is_run_dir(d) or (d / SWEEP_MARK).exists():
            out.append(d)
    return out


def run_summary(run: Path, sealed: bool | None = None) -> dict:
    """One line about a run folder for the index: status, injection, final val loss vs n-gram, and the
    stability check's verdict (or "sealed" while the run's diagnosis is sealed)."""
    run = Path(run)
    manifest, _ = reader.read_optional_json(run / "manifest.json")
    results, _ = reader.read_optional_json(run / "results.json")
    manifest, results = manifest or {}, results or {}
    cfg = manifest.get("config") or {}
    blind = bool(cfg.get("blind"))
    if sealed is None:
        sealed = blind
    inj = cfg.get("injection", "none")
    injection = ("withheld (blind run)" if blind else "none" if inj == "none"
                 else f"{inj} at K={cfg.get('injection_step')}")
    status = results.get("status") or manifest.get("status") or "unknown"
    val, ngram = results.get("final_val_loss"), results.get("ngram_val_loss")
    if val is not None and ngram is not None:
        loss = f"val {val:.3f} vs n-gram {ngram:.3f} ({'below' if val < ngram else 'ABOVE'} by {abs(ngram - val):.3f})"
    elif status == "non_finite":
        loss = f"non-finite at step {results.get('stopped_at_step')}"
    else:
        loss = "no final validation"
    if sealed:
        check = "sealed (shown after your diagnosis)"
    else:
        v = (readings.read(run) or {}).get("verdict")
        check = ("the walker cannot read this run" if v is None else f"{v['leaf']} {v['title']}" + (
            f" at step {v['anomaly_step']}" if v.get("anomaly_step") is not None else ""))
    return {"name": run.name, "status": status, "injection": injection, "steps": results.get("steps_done"),
            "loss": loss, "check": check, "sealed": sealed, "dashboard": (run / "dashboard.html").exists()}


def write_index(experiments: Path, sealed: set[Path] | None = None) -> Path:
    """EXPERIMENTS/index.html: one row per run folder found at any depth, linking its dashboard; no script.
    `sealed`: run folders whose diagnosis is sealed (the lab layer knows; default: unrevealed blind runs)."""
    experiments = Path(experiments)
    if not experiments.is_dir():
        raise UserError(f"{experiments} is not a folder; give the folder that holds your run folders")
    sealed_set = {Path(p).resolve() for p in sealed} if sealed is not None else None
    e = html.escape
    lines = []
    for run in find_runs(experiments):
        rel = run.relative_to(experiments).as_posix()
        if (run / SWEEP_MARK).exists():
            n = sum(1 for _ in (run / "runs").rglob(reader.METRICS))
            lines.append(f'<tr><td><a href="{e(rel)}/index.html">{e(rel)}</a></td><td>regime map</td>'
                         f'<td colspan="4">{n} runs of the minitrain explore sweep (their dashboards are linked '
                         'from the map)</td></tr>')
            continue
        s = run_summary(run, None if sealed_set is None else run.resolve() in sealed_set)
        link = (f'<a href="{e(rel)}/dashboard.html">{e(rel)}</a>' if s["dashboard"]
                else f'{e(rel)} <span class="hint">(no dashboard: minitrain dashboard {e(str(run))})</span>')
        cls = ' class="sealed"' if s["sealed"] else ""
        lines.append(f'<tr class="{e(s["status"])}"><td>{link}</td><td>{e(s["status"])}</td>'
                     f'<td>{e(s["injection"])}</td><td>{e(str(s["steps"] if s["steps"] is not None else "?"))}</td>'
                     f'<td>{e(s["loss"])}</td><td{cls}>{e(s["check"])}</td></tr>')
    body = "\n".join(lines) or '<tr><td colspan="6">no run folders here yet</td></tr>'
    page = fill(asset("index.html"), {"TITLE": e(f"{experiments.resolve().name}: minitrain runs"),
                                       "GENERATED": e(time.strftime("%Y-%m-%d %H:%M:%S")), "ROWS": body})
    out = experiments / "index.html"
    files.atomic_write_text(out, page)
    return out
