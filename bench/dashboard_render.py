"""Page size and render-to-ready time of run dashboards in headless Chromium (network blocked).

    python bench/dashboard_render.py experiments/18-baseline experiments/19-injection-A ... [--repeat 5]

For each page: its size, the median over --repeat loads of the time from navigation start to
`window.__dashboardReady === true` (the first screen drawn), read from the page's own clock
(performance.now(), at the first animation frame after it is set), and the time until every panel is drawn
(a page that draws panels lazily is made to draw the rest; for one that draws all before it is ready, the same). A blank page's load is measured in the same browser as the reference, and each
time is also given as a ratio to it, so figures from a noisy shared machine can be compared.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def load_ms(browser, path: Path) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
    page.goto(path.resolve().as_uri(), wait_until="commit")
    page.wait_for_function("() => window.__dashboardReady === true", timeout=120_000)
    ms = page.evaluate("performance.now()")
    # a page that draws panels as they come near the screen: the time to draw all the others too
    rest = page.evaluate("""() => new Promise(done => {
        if (!window.__dashboard || !window.__dashboard.drawAll) return done(0);
        const t0 = performance.now(); window.__dashboard.drawAll();
        requestAnimationFrame(() => done(performance.now() - t0)); })""")
    page.close()
    return ms, ms + rest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders (their dashboard.html) or html files")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    pages = [Path(r) / "dashboard.html" if Path(r).is_dir() else Path(r) for r in args.runs]
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        blank = Path(tmp) / "blank.html"
        blank.write_text("<!DOCTYPE html><script>window.__dashboardReady = true</script>")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        load_ms(browser, blank)  # warm the browser
        ref = statistics.median(load_ms(browser, blank)[0] for _ in range(args.repeat))
        print(f"| page | size | render-to-ready (median of {args.repeat}) | / blank page ({ref:.0f} ms) "
              "| every panel drawn |")
        print("|---|---:|---:|---:|---:|")
        times: dict[Path, list] = {page: [] for page in pages}
        for _ in range(args.repeat):  # round-robin, so a noisy moment of the machine hits every page alike
            for page in pages:
                times[page].append(load_ms(browser, page))
        for page in pages:
            ms, full = statistics.median(t[0] for t in times[page]), statistics.median(t[1] for t in times[page])
            print(f"| {page.parent.parent.name}/{page.parent.name} | {page.stat().st_size / 1024:.0f} KiB | {ms:.0f} ms | {ms / ref:.1f}x "
                  f"| {full:.0f} ms |")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
