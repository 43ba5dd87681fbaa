"""Screenshots of the lab's four dashboards for the README (docs/img/), in headless Chromium, network blocked.

    python scripts/dashboard_screenshots.py [EXPERIMENTS] [OUT]     (defaults: experiments docs/img)

Each image is the page's first screen (1400 x 1150 CSS pixels: header, health line, runs, panels 1-3) once
every panel is drawn. Take them before the lab's reveal: the README shows the pages as a learner first sees
them, the injection pages sealed (no verdict, none of the stability check's answers).
"""
from __future__ import annotations

import sys
from pathlib import Path

RUNS = ("18-baseline", "19-injection-A", "19-injection-B", "19-injection-C")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    experiments = Path(argv[0] if argv else "experiments")
    out = Path(argv[1] if len(argv) > 1 else "docs/img")
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1150})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        for run in RUNS:
            page.goto((experiments / run / "dashboard.html").resolve().as_uri())
            page.wait_for_function("() => window.__dashboardReady === true", timeout=60_000)
            page.evaluate("() => window.__dashboard.drawAll()")
            page.screenshot(path=str(out / f"{run}.png"))
            print(f"wrote {out / f'{run}.png'}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
