"""The runs table: EXPERIMENTS/index.html, and the same table `minitrain serve` shows live.

    find_runs(experiments)            every run folder at any depth (a regime-map sweep stands for its runs)
    run_row(run, experiments, sealed) one run as a table row: seed, K, injection, lr, clip, status, steps, the
                                      final validation loss and the walker's verdict ("sealed" before a lab's
                                      reveal), or one line saying why the folder cannot be read
    write_index(experiments, sealed)  index.html: the rows, sortable by any column, a filter box, a tick per
                                      run and "compare ticked runs"; each finished run's verdict and series
                                      are kept beside it (ROW_CACHE) and reused while its files are unchanged

The page works from disk with no server: the rows are HTML (readable without script), and the page script
(assets/index.js) sorts, filters and draws the ticked runs' loss, validation loss, learning rate and
gradient norm on shared step axes (the rows' compact series are embedded for that). Served by `minitrain
serve`, the same script polls the server for live step counts and opens the ticked runs in one full
dashboard instead. The verdict is the walker's (analysis/readings.py); this module lays it out.
"""
from __future__ import annotations

import html
import math
import os
import time
from pathlib import Path

from minitrain.analysis import readings
from minitrain.core import numerics
from minitrain.core.errors import UserError
from minitrain.run import files, jsonfile, reader, sealing
from minitrain.views.dashboard import UPLOT, asset, embed_json, fill, page_script

SWEEP_MARK = "cells.json"  # a regime-map sweep (minitrain explore): it has its own page, one index row
COMPARE_SERIES = ("loss", "val_loss", "lr", "grad_norm")  # what the static page's comparison draws
COMPARE_POINTS = 600  # at most this many points per series in the static page (every k-th step, extremes kept)
INDEX_SCRIPTS = ("helpers.js", "chart.js", "index.js")  # assets/: the comparison draws with the shared chart code
# beside index.html: each finished run's verdict and compact series, by the size and time of its files and of
# the judging code, so that a `train` rewriting the table walks its own run, not every run beside it again
ROW_CACHE = ".index-rows.json"
# in the head of every runs table minitrain writes; an index.html without it (nor the older pages' footer line)
# is someone else's page, which a command that writes a run beside it must keep
GENERATOR = b'<meta name="generator" content="minitrain runs table">'
OLD_FOOTER = b"written by minitrain index"
COLUMNS = (("run", "run folder (its dashboard)"), ("status", "finished, running, non_finite, ..."),
           ("steps", "steps written so far"), ("seed", "seed"), ("K", "injection step"),
           ("injection", "the injected fault"), ("lr", "peak learning rate (lr_max)"),
           ("clip", "gradient clipping threshold (0 = off)"), ("val", "final validation loss"),
           ("verdict", "the walker's verdict (sealed until the lab's reveal)"))
# shown only where the table's runs were computed on different platforms (their bytes cannot be compared)
NUMERICS_COLUMN = ("numerics", "the platform the run computed on: torch, CPU kernel set, BLAS and its reproducibility "
                               "mode, oneDNN, threads (runs on different ones match in value, not in bytes)")


def columns_for(rows: list[dict]) -> tuple:
    """COLUMNS, with the numerics column before the verdict where the runs' platforms differ."""
    if len({r.get("numerics") for r in rows if r.get("kind") == "run" and r.get("numerics")}) < 2:
        return COLUMNS
    return (*COLUMNS[:-1], NUMERICS_COLUMN, COLUMNS[-1])


def find_runs(experiments: Path) -> list[Path]:
    """Every run folder under `experiments`, at any depth (blind labs, break-it, remediations), sorted by path;
    a regime-map sweep's folder stands for its runs. A run folder's own subfolders are not searched, and a
    symbolic link to a folder is not listed (the served /view refuses what leads out; a link with a neutral
    name would show a sealed run's verdict)."""
    out: list[Path] = []
    # a walk that never enters a run or a sweep: linear in the folders outside runs (checkpoints are not
    # listed), and a link to a folder is not followed
    for top, dirs, _files in os.walk(experiments):
        keep = []
        for name in dirs:
            d = Path(top) / name
            if d.is_symlink():  # a link is no run of this folder: it may lead out, or rename a sealed run
                continue
            if files.is_run_dir(d) or (d / SWEEP_MARK).exists():
                out.append(d)
            else:
                keep.append(name)
        dirs[:] = keep
    return sorted(out)


def _num(x, digits: int = 4):
    return float(f"{x:.{digits}g}") if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def verdict_text(run: Path, sealed: bool, live: bool) -> str:
    if sealed:
        return "sealed"
    if live:
        return "training..."
    v = (readings.read(run) or {}).get("verdict")
    if v is None:
        return "the walker cannot read this run"
    untested = v.get("untestable") or []
    return (f"{v['leaf']} {v['title']}" + (f" at step {v['anomaly_step']}" if v.get("anomaly_step") is not None else "")
            + (f" ({len(untested)} leaves not testable: {', '.join(untested)})" if untested else ""))


def printable(name: str) -> bool:
    """Is a path's name text (a name that is no UTF-8 comes back from the file system with surrogates)?"""
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def run_row(run: Path, experiments: Path, sealed: bool | None = None, verdict=verdict_text) -> dict:
    """One run folder as a table row. A folder that cannot be read (deleted, corrupt, half-written) gives a
    row with `error`: one line. The reader's strict readers say what is damaged (a file that is no JSON, a
    field of the wrong type); anything else raised here is a bug, and is not shown as data. `sealed`: None:
    run/sealing.py's rule decides.
    `verdict(run, sealed, live)`: the verdict column (the server passes a cached one)."""
    run = Path(run)
    rel = run.relative_to(experiments).as_posix()
    if not printable(rel):  # a name the page, the JSON and a URL cannot carry: one row that says so
        return {"run": rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "kind": "run",
                "status": "unreadable", "error": "its folder name is not valid UTF-8; rename the folder to see it here",
                "verdict": "", "sealed": True, "link": ""}
    if (run / SWEEP_MARK).exists():
        n = sum(1 for _ in (run / "runs").rglob(reader.METRICS))
        return {"run": rel, "kind": "sweep", "status": "regime map", "note": f"{n} runs of the minitrain explore sweep",
                "link": f"{rel}/index.html"}
    sealed = sealing.is_sealed(run) if sealed is None else sealed
    try:
        manifest, why = reader.read_run_json(run, reader.MANIFEST)  # None and a line when damaged
        results, why2 = reader.read_run_json(run, reader.RESULTS)
        manifest, results = manifest or {}, results or {}
        cfg = reader.config_of(manifest)
        blind = bool(cfg.get("blind"))
        live = reader.live_pid(run) is not None
        last = reader.last_step(run)
        inj = cfg.get("injection", "none")
        status = "running" if live else (results.get("status") or manifest.get("status") or "unknown")
        row = {"run": rel, "kind": "run", "status": status, "live": live,
               "steps": results.get("steps_done") if not live and results.get("steps_done") is not None
               else (last + 1 if last is not None else 0),
               "seed": cfg.get("seed", manifest.get("seed")),
               "K": cfg.get("injection_step") if inj not in ("none", None) and not blind else None,
               "injection": "withheld" if blind else ("imported" if manifest.get("imported") else str(inj)),
               "lr": cfg.get("lr_max"), "clip": cfg.get("grad_clip"),
               "val": _num(results.get("final_val_loss")),
               "numerics": numerics.key(manifest.get("numerics")) + (" (mixed)" if manifest.get("numerics_mixed") else ""),
               "verdict": verdict(run, sealed, live), "sealed": sealed,
               "dashboard": (run / "dashboard.html").exists(), "link": f"{rel}/dashboard.html"}
        if why or why2:  # a damaged run is one row that says so, never the table's failure
            row["error"], row["status"] = why or why2, "damaged"
        return row
    except (UserError, OSError) as e:  # deleted or replaced while we read it: one line (a damaged file is `why`)
        return {"run": rel, "kind": "run", "status": "unreadable", "error": str(e).splitlines()[0][:200],
                "verdict": "sealed" if sealed else "", "sealed": sealed,
                "link": f"{rel}/dashboard.html"}


def compact_series(run: Path) -> dict | None:
    """The loss, validation loss, learning rate and gradient norm of a run, thinned to COMPARE_POINTS points
    per series (each kept point is the extreme of its stride, so a spike survives), for the static page."""
    try:
        rows, _ = reader.read_metrics(Path(run) / reader.METRICS)
    except (UserError, OSError):
        return None
    stride = max(1, math.ceil(len(rows) / COMPARE_POINTS))
    out: dict = {k: [] for k in COMPARE_SERIES}
    out["steps"] = []
    for i in range(0, len(rows), stride):
        chunk = rows[i:i + stride]
        worst = max(chunk, key=lambda r: abs(r.get("loss") or 0.0))  # the chunk's largest loss (a spike) is kept
        out["steps"].append(worst["step"])
        for k in ("loss", "lr", "grad_norm"):
            out[k].append(_num(worst.get(k), 6))
        val = [r for r in chunk if r.get("val_loss") is not None]
        out["val_loss"].append(_num(val[-1]["val_loss"], 6) if val else None)
    return out


def page_rows_html(rows: list[dict], columns: tuple = COLUMNS) -> str:
    """The rows as HTML (readable with no script); every value escaped."""
    e = html.escape
    lines = []
    for r in rows:
        if r["kind"] == "sweep":
            lines.append(f'<tr class="sweep" data-run="{e(r["run"])}"><td></td><td><a href="{e(r["link"])}">{e(r["run"])}</a></td>'
                         f'<td>regime map</td><td colspan="{len(columns) - 2}">{e(r["note"])} (their dashboards are linked from the map)</td></tr>')
            continue
        cells = []
        for key, _ in columns[1:]:
            v = r.get(key)
            cls = ' class="sealed"' if key == "verdict" and r.get("sealed") else ""
            cells.append(f'<td data-col="{key}"{cls}>{e("" if v is None else str(v))}</td>')
        link = (f'<a href="{e(r["link"])}">{e(r["run"])}</a>' if r.get("dashboard")
                else f'{e(r["run"])} <span class="hint">(no dashboard yet)</span>')
        err = f'<div class="rowerr">{e(r["error"])}</div>' if r.get("error") else ""
        lines.append(f'<tr class="{e(r["status"])}" data-run="{e(r["run"])}"><td><input type="checkbox" class="tick" '
                     f'aria-label="compare {e(r["run"])}"></td><td data-col="run">{link}{err}</td>{"".join(cells)}</tr>')
    return "\n".join(lines) or f'<tr><td colspan="{len(columns) + 1}">no run folders here yet</td></tr>'


def render_index(title: str, rows: list[dict], series: dict | None, served: bool) -> str:
    """The runs table page. `series`: {run: compact series} for the static comparison (None when served:
    the server opens a full comparison dashboard)."""
    e = html.escape
    columns = columns_for(rows)
    head = "".join(f'<th data-col="{k}" title="{e(t)}">{e(k)}</th>' for k, t in columns)
    data = {"served": served, "columns": [k for k, _ in columns], "rows": rows, "series": series or {}}
    js = page_script(INDEX_SCRIPTS)
    csp = "connect-src 'self'; " if served else ""
    return fill(asset("index.html"), {"TITLE": e(title), "GENERATED": e(time.strftime("%Y-%m-%d %H:%M:%S")),
                                       "HEAD": head, "ROWS": page_rows_html(rows, columns), "DATA": embed_json(data),
                                       "CSS": asset(UPLOT[1]), "JS": js, "CONNECT": csp,
                                       "HOW": "served live by minitrain serve" if served else "written by minitrain index"})


def _code_stamp() -> list[int]:
    """The judging code's files (analysis/): a verdict cached under other code is judged again."""
    from minitrain import analysis

    stats = [p.stat() for p in sorted(Path(analysis.__file__).parent.rglob("*.py"))]
    return [len(stats), max((st.st_mtime_ns for st in stats), default=0), sum(st.st_size for st in stats)]


def run_stamp(run: Path) -> list:
    """Size and time of the files a run's row and verdict are made of (None for one that is absent: a killed
    run's results): equal stamps, the same row. The row cache and `minitrain serve` both key on it."""
    out = []
    for name in (reader.METRICS, reader.MANIFEST, reader.RESULTS):
        try:
            st = (Path(run) / name).stat()
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


class RowCache:
    """ROW_CACHE read once and written once per table: {run: {"stamp", "verdict", "series"}}. Damaged or
    absent, it is empty (it only saves time). A live or sealed run's verdict is never taken from it."""

    def __init__(self, experiments: Path):
        self.experiments = Path(experiments)
        self.path = self.experiments / ROW_CACHE
        try:
            old = jsonfile.read_json(self.path, "row cache") if self.path.is_file() else {}
        except UserError:
            old = {}
        self.code = _code_stamp()
        runs = old.get("runs") if isinstance(old, dict) and old.get("code") == self.code else None
        self.old = runs if isinstance(runs, dict) else {}  # another code's, or damaged: nothing reused
        self.new: dict = {}

    def entry(self, run: Path) -> dict:
        """The run's cached entry while its stamp is unchanged, else a fresh one (kept for the next table)."""
        rel = Path(run).relative_to(self.experiments).as_posix()
        if rel not in self.new:
            stamp, entry = run_stamp(run), self.old.get(rel)
            self.new[rel] = entry if isinstance(entry, dict) and entry.get("stamp") == stamp else {"stamp": stamp}
        return self.new[rel]

    def verdict(self, run: Path, sealed: bool, live: bool) -> str:
        entry = self.entry(run)
        if sealed or live:
            entry.pop("verdict", None)  # the cache beside the table never holds a sealed run's answer
            return verdict_text(run, sealed, live)
        if "verdict" not in entry:
            entry["verdict"] = verdict_text(run, sealed, live)
        return entry["verdict"]

    def series(self, run: Path) -> dict | None:
        entry = self.entry(run)
        if "series" not in entry:
            entry["series"] = compact_series(run)
        return entry["series"]

    def save(self) -> None:
        try:
            files.atomic_write_json(self.path, {"code": self.code, "runs": self.new})
        except OSError:
            pass  # a cache that cannot be written costs time, never the table


def refuse_foreign_index(out: Path) -> None:
    """A UserError when `out` is a file minitrain's runs table did not write (a user's own site page): it is
    kept, and no row cache is left beside it."""
    if not out.exists() and not out.is_symlink():
        return
    try:
        ours = out.is_file() and not out.is_symlink() and (GENERATOR in (data := out.read_bytes()) or OLD_FOOTER in data)
    except OSError:
        ours = False
    if not ours:
        raise UserError(f"{out} is not a runs table minitrain wrote, so it is kept; write the table of these runs "
                        "elsewhere with 'minitrain index' on a folder of runs only")


NOTICE_RUNS = 20  # more runs than this to read for the table: say so first (it takes a while)


def write_index(experiments: Path, sealed: set[Path] | None = None, notice=None) -> Path:
    """EXPERIMENTS/index.html: the runs table. `sealed`: run folders whose diagnosis is sealed (default:
    run/sealing.py's rule). `notice(line)`: told once when many runs must be read (not in the cache)."""
    experiments = Path(experiments)
    if not experiments.is_dir():
        raise UserError(f"{experiments} is not a folder; give the folder that holds your run folders")
    out = experiments / "index.html"
    refuse_foreign_index(out)
    sealed_set = None if sealed is None else {Path(p).resolve() for p in sealed}
    rows, series = [], {}
    cache = RowCache(experiments)
    runs = find_runs(experiments)
    todo = sum(1 for run in runs if "series" not in cache.entry(run))  # changed since the last table, or new
    if notice and todo > NOTICE_RUNS:
        notice(f"runs table {experiments / 'index.html'}: reading {todo} runs under {experiments} once (their rows "
               f"are then kept in {experiments / ROW_CACHE}); to skip this, keep runs in an experiments folder of their own")
    with reader.metrics_once():  # each run's verdict and its series, one after the other: its rows read once
        for run in runs:
            rows.append(run_row(run, experiments, None if sealed_set is None else run.resolve() in sealed_set,
                                cache.verdict))
            if rows[-1]["kind"] == "run" and rows[-1]["status"] != "unreadable":
                series[rows[-1]["run"]] = compact_series(run) if rows[-1].get("live") else cache.series(run)
    page = render_index(f"{experiments.resolve().name}: minitrain runs", rows, series, served=False)
    files.atomic_write_text(out, page)
    cache.save()
    return out
