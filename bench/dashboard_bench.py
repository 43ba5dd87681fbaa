"""Benchmark of dashboard.html for a 2000-step run: write time, file size, and render time in headless Chromium
(time from navigation until the page's script sets window.__dashboardReady and every panel is drawn).

    python bench/dashboard_bench.py [RUN] [--baseline RUN] [--repeats 5]

Without RUN, a default 2000-step baseline is trained into a temporary folder first (~30-40 s). Prints a
markdown table for docs/benchmarks.md (section "## Dashboard"). Times are medians of the repeats: the
machine is shared, so single timings are noisy.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from minitrain import trainer
from minitrain.run import reader
from minitrain.views import dashboard
from minitrain.core.config import build_config

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def render_times(page: Path, repeats: int) -> list[float] | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(repeats):
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            t0 = time.perf_counter()
            tab.goto(page.resolve().as_uri())
            tab.wait_for_function("window.__dashboardReady === true", timeout=60_000)
            tab.evaluate("() => window.__dashboard && window.__dashboard.drawAll()")  # panels below the fold too
            times.append(time.perf_counter() - t0)
            tab.close()
        browser.close()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="run folder (default: train a 2000-step baseline into a temp folder)")
    ap.add_argument("--baseline", help="also overlay this run (as for an injection run)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else None
        if run is None:
            run = Path(tmp) / "18-baseline"
            print(f"training a 2000-step baseline into {run} ...", file=sys.stderr)
            trainer.train(build_config({}, ["progress=false"]), run)
        baseline = Path(args.baseline) if args.baseline else None
        out = Path(tmp) / "dashboard.html"
        writes, cpu = [], []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            dashboard.write_dashboard(run, baseline=baseline, out=out, auto_baseline=False)
            writes.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        renders = render_times(out, args.repeats)
        metrics_mb = (run / "metrics.jsonl").stat().st_size / 1e6
        steps = len(reader.read_metrics(run / reader.METRICS)[0])
        print(f"| run | steps | metrics.jsonl | dashboard.html | write, wall (CPU) | render to ready |")
        print("|---|---|---|---|---|---|")
        render = f"{statistics.median(renders):.2f} s" if renders else "n/a (no chromium)"
        print(f"| {run.name}{' + baseline ' + baseline.name if baseline else ''} | {steps} | {metrics_mb:.2f} MB | "
              f"{out.stat().st_size / 1e6:.2f} MB | {statistics.median(writes):.2f} s ({statistics.median(cpu):.2f} s) | "
              f"{render} |")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\nmedians of {args.repeats}; machine: {platform.machine()}, {os.cpu_count()} cores, load {load:.1f}, "
              f"Python {platform.python_version()}, "
              f"writes {[round(w, 2) for w in writes]}, renders {[round(r, 2) for r in renders or []]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
