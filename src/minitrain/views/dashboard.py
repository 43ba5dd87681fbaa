"""dashboard.html: one self-contained page per run, opened by double-click with no network.

    write_dashboard(run)        RUN/dashboard.html (called at the end of every run, and by `minitrain dashboard`)
    write_index(experiments)    EXPERIMENTS/index.html: every run folder with a one-line summary

The page is a static HTML file: the CSS and the plotting script (assets/dashboard.css, assets/dashboard.js) are
inlined, and the run's data is embedded as one JSON block. Python does the reading and the judging (health
summary, course spike flags, the per-tensor "movers", the difference to a baseline run, and that of any further
runs given with `compare`, e.g. the original beside its remediation); the script only draws. Every string
reaches the page through that JSON block (with <, > and & escaped, so `</script>` in a run name stays text)
and is put on screen with textContent, never as HTML.

Extension hook: if the run folder holds `diagnosis.json` (keys leaf, cause, anomaly_step, diagnosis,
remediation, path), it is embedded as `diagnosis` and shown in its own section, with a marker at
anomaly_step on every panel. Nothing else needs to change to show a diagnosis.
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

from minitrain.run import files, reader
from minitrain.core.errors import UserError

PER_TENSOR_STATS = ("g", "ur", "vm")  # per-parameter telemetry the page plots (see docs/metrics.md)
MOVERS = 4  # tensors shown by default in each per-tensor panel
MOVER_LOOKBACK = 50  # a tensor "moves" when it leaves the median of its own previous 50 steps
MOVER_WINDOW = 50  # with an injection, movers are ranked over steps K..K+50
SPIKE_WINDOW, SPIKE_SIGMA = 100, 3.0  # the course's spike flag: loss > 3 sigma above its rolling 100-step mean
DIAGNOSIS_KEYS = ("leaf", "cause", "anomaly_step", "diagnosis", "remediation", "path")


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
    batch = {k: [] for k in ("rare_share", "top_token_share", "dup_rows", "distinct_tokens")}
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
    cols["clipped"] = clipped
    cols["nonfinite"] = nonfinite
    cols["act"] = [list(layer) for layer in zip(*act)] if n_layers else []
    cols["val"] = val
    cols["batch"] = batch
    return cols


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
    """Steps over which movers are ranked: K..K+50 for an injection run, else after warmup (when there is
    enough of it), else from step 1 (step 0 has no past; a zero-initialised bias has ur = u / 0 there)."""
    last = steps[-1] if steps else 0
    k = cfg.get("injection_step") if cfg.get("injection", "none") != "none" else None
    if k is not None and steps and steps[0] <= k <= last:
        return k, k + MOVER_WINDOW, f"over steps {k}-{min(last, k + MOVER_WINDOW)} from K"
    warm = int(cfg.get("warmup_steps") or 0)
    if last - warm >= 20:
        return warm, last, f"over steps {warm}-{last}, after warmup"
    return 1, last, f"over steps 1-{last}"


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


def spike_flags(steps: list[int], loss: list) -> list[int]:
    """The course's spike flag: loss more than 3 sigma above the mean of the previous 100 steps."""
    x = np.array([v if v is not None else np.nan for v in loss], dtype=float)
    flags = []
    for i in range(len(x)):
        past = x[max(0, i - SPIKE_WINDOW):i]
        past = past[np.isfinite(past)]
        if len(past) < SPIKE_WINDOW // 2 or not np.isfinite(x[i]):
            continue
        if x[i] > past.mean() + SPIKE_SIGMA * past.std():
            flags.append(int(steps[i]))
    return flags


def _markers(r: dict, steps: list[int], spikes: list[int]) -> list[dict]:
    cfg, manifest = _config(r), r["manifest"]
    out = []
    warm = int(cfg.get("warmup_steps") or 0)
    if warm > 0:
        out.append({"step": warm, "kind": "warmup", "label": f"warmup ends (step {warm})", "short": "warmup end"})
    inj = _injection(r)
    if inj != "none" and cfg.get("injection_step") is not None:
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
    if isinstance(d.get("anomaly_step"), int) and not isinstance(d.get("anomaly_step"), bool):
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


def health(r: dict, spikes: list[int]) -> list[dict]:
    """The run's health at a glance: each item has a label, a value, a verdict (ok | warn | bad | info)."""
    cfg, rows, res = _config(r), r["rows"], r["results"] or {}
    out = []

    def item(label, value, verdict="info", detail=""):
        out.append({"label": label, "value": value, "verdict": verdict, "detail": detail})

    vocab = int(cfg.get("vocab_size") or 512)
    ln_v = math.log(vocab)
    first = rows[0] if rows else {}
    if first.get("step") == 0 and first.get("loss") is not None:
        l0 = first["loss"]
        verdict = "ok" if abs(l0 - ln_v) <= 0.5 else "bad"
        why = ("within ln V +- 0.5" if verdict == "ok" else
               "above 8: broken init or non-zero LM-head bias" if l0 > 8 else
               "below 4: the model is not untrained (wrong checkpoint?)" if l0 < 4 else "outside ln V +- 0.5")
        item("step-0 loss", f"{l0:.3f} vs ln {vocab} = {ln_v:.3f}", verdict, why)
    elif rows:
        item("step-0 loss", "not in the data" if first.get("step") != 0 else "non-finite", "warn")
    if first.get("step") == 0 and first.get("grad_norm") is not None:
        g0 = first["grad_norm"]
        item("first-step grad norm", f"{g0:.4g}", "ok" if 0.1 <= g0 <= 10 else "bad",
             "within [0.1, 10]" if 0.1 <= g0 <= 10 else "outside [0.1, 10]: init or loss reduction problem")
    finite = [row for row in rows if row.get("grad_norm") is not None]
    if finite:
        n_clip = sum(1 for row in finite if row.get("clipped"))
        share = n_clip / len(finite)
        item("clip rate", f"{n_clip} of {len(finite)} steps ({100 * share:.1f}%) at {cfg.get('grad_clip', '?')}",
             "warn" if share > 0.5 else "ok",
             "clipping engages on most steps (a healthy run clips only occasionally)" if share > 0.5
             else "clipping engages occasionally")
        top = max(finite, key=lambda row: row["grad_norm"])
        item("max grad norm", f"{top['grad_norm']:.4g} at step {top['step']}",
             "ok" if top["grad_norm"] <= 10 else "warn", "within [0.1, 10]" if top["grad_norm"] <= 10 else "above 10")
    n_nonfinite = sum(int(row.get("nonfinite") or 0) for row in rows)
    bad_rows = [row["step"] for row in rows if row.get("loss") is None or row.get("grad_norm") is None]
    item("non-finite values", f"{n_nonfinite}" + (f" (first at step {bad_rows[0]})" if bad_rows else ""),
         "bad" if n_nonfinite or bad_rows else "ok", "loss or gradients became NaN/Inf" if bad_rows else "none")
    ngram = res.get("ngram_val_loss", (r["manifest"].get("ngram_baseline") or {}).get("val_loss"))
    val = res.get("final_val_loss")
    where = "final"
    if val is None:
        vals = [row for row in rows if row.get("val_loss") is not None]
        if vals:
            val, where = vals[-1]["val_loss"], f"last (step {vals[-1]['step']})"
    if val is not None and ngram is not None:
        margin = ngram - val
        item(f"{where} val loss", f"{val:.3f} (ppl {math.exp(min(val, 700)):.4g}) vs n-gram {ngram:.3f} "
             f"(ppl {math.exp(ngram):.4g})", "ok" if margin > 0 else "bad",
             f"{margin:.3f} below the n-gram baseline" if margin > 0 else f"{-margin:.3f} above the n-gram baseline")
    elif ngram is not None:
        item("val loss", f"none yet (n-gram {ngram:.3f})", "warn")
    lrs = [row["lr"] for row in rows if row.get("lr") is not None]
    if len(lrs) > 2:
        if max(lrs) == min(lrs):
            item("learning rate", f"constant {lrs[0]:.3g}", "bad" if lrs[0] == 0 else "warn",
                 "LR is zero: warmup multiplies a base LR of 0" if lrs[0] == 0 else "the schedule never stepped")
        else:
            item("learning rate", f"{min(lrs):.3g} .. {max(lrs):.3g}, warmup {cfg.get('warmup_steps', '?')} steps",
                 "ok", "warmup + cosine")
    item("spike flags", (f"{len(spikes)}: step{'s' if len(spikes) > 1 else ''} " + ", ".join(map(str, spikes[:6]))
                         + (" ..." if len(spikes) > 6 else "")) if spikes else "none",
         "warn" if spikes else "ok", "loss > 3 sigma above its rolling 100-step mean (the course's flag)")
    reg = [row["loss_regular"] for row in rows[-100:] if row.get("loss_regular") is not None]
    irr = [row["loss_irregular"] for row in rows[-100:] if row.get("loss_irregular") is not None]
    if reg and irr:
        item("regular vs irregular", f"{sum(reg) / len(reg):.3f} vs {sum(irr) / len(irr):.3f}", "info",
             "mean training loss by verb class over the last 100 steps")
    return out


def _difference(rows: list[dict], ref_rows: list[dict]) -> dict:
    """The exact difference rows minus ref_rows at every shared step (loss, pre-clip grad norm, validation)."""
    by_step = {row["step"]: row for row in ref_rows}
    diff: dict = {"steps": [], "loss": [], "grad_norm": [], "val_steps": [], "val_loss": []}
    first_diff = None
    for row in rows:
        other = by_step.get(row["step"])
        if other is None:
            continue
        diff["steps"].append(row["step"])
        for key in ("loss", "grad_norm"):
            a, c = row.get(key), other.get(key)
            d = a - c if a is not None and c is not None else None
            diff[key].append(_num(d, 5))
            if first_diff is None and (d is None or d != 0):
                first_diff = row["step"]
        if row.get("val_loss") is not None and other.get("val_loss") is not None:
            diff["val_steps"].append(row["step"])
            diff["val_loss"].append(_num(row["val_loss"] - other["val_loss"], 5))
    diff["first_difference"] = first_diff
    return diff


def _baseline_payload(b: dict, run_rows: list[dict]) -> dict:
    """The baseline's curves (for the overlay) and the exact difference injected minus baseline."""
    cols = _series(b["rows"])
    steps = [row["step"] for row in b["rows"]]
    return {"name": b["name"], "steps": steps, "loss": cols["loss"], "grad_norm": cols["grad_norm"],
            "grad_norm_clipped": cols["grad_norm_clipped"], "val": cols["val"], "act": cols["act"],
            "loss_regular": cols["loss_regular"], "loss_irregular": cols["loss_irregular"],
            "logit_max": cols["logit_max"], "trunk_hash": b["manifest"].get("trunk_hash"),
            "diff": _difference(run_rows, b["rows"])}


def _compare_payload(c: dict, baseline_rows: list[dict] | None) -> dict:
    """A further run drawn beside this one (loss, grad norm) and, with a baseline, its own difference to it."""
    cols = _series(c["rows"])
    return {"name": c["name"], "steps": [row["step"] for row in c["rows"]], "loss": cols["loss"],
            "grad_norm": cols["grad_norm"], "val": cols["val"],
            "diff": _difference(c["rows"], baseline_rows) if baseline_rows is not None else None}


def build_payload(run: Path, baseline: Path | None = None, compare: list[Path] = ()) -> dict:
    """Everything the page shows, as one JSON-able dict. `compare`: further runs drawn beside this one and the
    baseline (e.g. the original run beside its remediation), each with its own colour and difference line."""
    r = reader.load_run(run)
    rows, cfg = r["rows"], _config(r)
    steps = [row["step"] for row in rows]
    cols = _series(rows)
    spikes = spike_flags(steps, cols["loss"])
    per_tensor = _per_tensor(rows)
    movers, rank_note = {}, ""
    if per_tensor:
        lo, hi, rank_note = _rank_window(steps, cfg)
        for s in PER_TENSOR_STATS:
            movers[s] = _movers(steps, per_tensor["stats"][s], per_tensor["names"], lo, hi)
    payload = {
        "name": r["name"],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "status": (r["results"] or {}).get("status") or r["manifest"].get("status") or "unknown",
        "data_note": r["data_note"],
        "notes": r["notes"],
        "manifest": r["manifest"],
        "results": r["results"],
        "diagnosis": r["diagnosis"],
        "diagnosis_note": r["diagnosis_note"],
        "injection": {"name": _injection(r), "step": cfg.get("injection_step") if _injection(r) != "none" else None,
                      "words": _injection_words(r["manifest"].get("injection") or {}, cfg)},
        "config": {k: cfg.get(k) for k in ("grad_clip", "vocab_size", "warmup_steps", "steps", "batch_size",
                                           "eval_every", "spectral_every", "telemetry")},
        "ngram_val_loss": (r["results"] or {}).get("ngram_val_loss",
                                                   (r["manifest"].get("ngram_baseline") or {}).get("val_loss")),
        "steps": steps,
        "series": cols,
        "per_tensor": per_tensor,
        "movers": movers,
        "movers_all": ["sigma"],  # spectral norms are sampled and smooth: every matrix is shown
        "movers_rule": rank_note,
        "spikes": spikes,
        "markers": _markers(r, steps, spikes),
        "health": health(r, spikes),
        "baseline": None,
        "compare": [],
    }
    b = None
    if baseline is not None:
        b = reader.load_run(baseline)
        payload["baseline"] = _baseline_payload(b, rows)
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
        payload["compare"].append(_compare_payload(reader.load_run(path), b["rows"] if b else None))
    return payload


# ---------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------


def _asset(name: str) -> str:
    return resources.files("minitrain.views").joinpath("assets", name).read_text(encoding="utf-8")


def embed_json(obj) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' survives (they become \\u003c etc.),
    so no string can close the element or open a comment; non-ASCII and U+2028/9 are escaped too."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fill(template: str, parts: dict[str, str]) -> str:
    """Replace each {{NAME}} of the template in one pass, so text put in is never scanned again."""
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts[m.group(1)], template)


def render_html(payload: dict) -> str:
    css, js = _asset("dashboard.css"), _asset("dashboard.js")
    assert "</script" not in js.lower() and "</style" not in css.lower()
    return fill(_asset("dashboard.html"), {"TITLE": html.escape(f"{payload['name']} - minitrain dashboard"),
                                           "CSS": css, "JS": js, "DATA": embed_json(payload)})


def write_dashboard(run: Path, baseline: Path | None = None, out: Path | None = None,
                    auto_baseline: bool = True, compare: list[Path] = ()) -> Path:
    """Write RUN/dashboard.html (or `out`). With no baseline given, an injection run's sibling baseline (same
    trunk hash, no injection) is found and overlaid. `compare`: further runs drawn beside it (see
    build_payload). Returns the path written."""
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
    page = render_html(build_payload(run, baseline, compare))
    files.atomic_write_text(out, page)
    return out


# ---------------------------------------------------------------------------------------------------
# experiments/index.html
# ---------------------------------------------------------------------------------------------------


def run_summary(run: Path) -> dict:
    """One line about a run folder for the index: status, injection, final val loss vs n-gram, anomaly."""
    run = Path(run)
    manifest, _ = reader.read_optional_json(run / "manifest.json")
    results, _ = reader.read_optional_json(run / "results.json")
    diagnosis, _ = reader.read_optional_json(run / "diagnosis.json")
    manifest, results = manifest or {}, results or {}
    cfg = manifest.get("config") or {}
    inj = cfg.get("injection", "none")
    injection = "none" if inj == "none" else f"{inj} at K={cfg.get('injection_step')}"
    status = results.get("status") or manifest.get("status") or "unknown"
    val, ngram = results.get("final_val_loss"), results.get("ngram_val_loss")
    if val is not None and ngram is not None:
        loss = f"val {val:.3f} vs n-gram {ngram:.3f} ({'below' if val < ngram else 'ABOVE'} by {abs(ngram - val):.3f})"
    elif status == "non_finite":
        loss = f"non-finite at step {results.get('stopped_at_step')}"
    else:
        loss = "no final validation"
    anomaly = ""
    if diagnosis:
        anomaly = f"{diagnosis.get('leaf') or diagnosis.get('cause') or 'diagnosed'}"
        if diagnosis.get("anomaly_step") is not None:
            anomaly += f" at step {diagnosis.get('anomaly_step')}"
    elif status == "non_finite":
        anomaly = "non-finite loss or gradient"
    else:
        try:
            rows, note = reader.read_metrics(run / "metrics.jsonl")
        except UserError:
            rows, note = [], "metrics unreadable"
        if rows:
            flags = spike_flags([row["step"] for row in rows], [_num(row.get("loss")) for row in rows])
            if flags:
                anomaly = f"course spike flag (loss > 3 sigma) at step {flags[0]}" + (f" (+{len(flags) - 1} more)" if len(flags) > 1 else "")
        if note:
            anomaly = (anomaly + "; " if anomaly else "") + note
    return {"name": run.name, "status": status, "injection": injection, "steps": results.get("steps_done"),
            "loss": loss, "anomaly": anomaly or "none",
            "dashboard": (run / "dashboard.html").exists()}


def write_index(experiments: Path) -> Path:
    """EXPERIMENTS/index.html: a static table linking every run folder's dashboard, no script at all."""
    experiments = Path(experiments)
    if not experiments.is_dir():
        raise UserError(f"{experiments} is not a folder; give the folder that holds your run folders")
    runs = sorted(d for d in experiments.iterdir() if d.is_dir() and files.is_run_dir(d))
    e = html.escape
    lines = []
    for run in runs:
        s = run_summary(run)
        link = (f'<a href="{e(run.name)}/dashboard.html">{e(s["name"])}</a>' if s["dashboard"]
                else f'{e(s["name"])} <span class="hint">(no dashboard: minitrain dashboard {e(str(run))})</span>')
        lines.append(f'<tr class="{e(s["status"])}"><td>{link}</td><td>{e(s["status"])}</td>'
                     f'<td>{e(s["injection"])}</td><td>{e(str(s["steps"] if s["steps"] is not None else "?"))}</td>'
                     f'<td>{e(s["loss"])}</td><td>{e(s["anomaly"])}</td></tr>')
    body = "\n".join(lines) or '<tr><td colspan="6">no run folders here yet</td></tr>'
    page = fill(_asset("index.html"), {"TITLE": e(f"{experiments.resolve().name}: minitrain runs"),
                                       "GENERATED": e(time.strftime("%Y-%m-%d %H:%M:%S")), "ROWS": body})
    out = experiments / "index.html"
    files.atomic_write_text(out, page)
    return out
