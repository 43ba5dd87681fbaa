"""Pages shown to the learner: their paths printed, and opened in a browser only where one can open (a
desktop session; never under tests or CI, where nothing could be seen)."""
from __future__ import annotations

import os
import sys
import webbrowser
from pathlib import Path

QUIET = ("CI", "PYTEST_CURRENT_TEST", "MINITRAIN_NO_BROWSER")  # set: nothing is opened


def can_open_browser(env=None, platform: str | None = None) -> bool:
    """Whether a browser window could be seen here: not under tests or CI (QUIET), and on Linux only with a
    display (X11 or Wayland); macOS and Windows have a desktop."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if any(env.get(k) for k in QUIET):
        return False
    if platform.startswith("linux"):
        return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))
    return platform in ("darwin", "win32")


def show_pages(pages: list[Path], open_them: bool | None = None) -> list[str]:
    """The lines that name each existing page (its path and file:// address); each is also opened in a browser
    when `open_them` (default: can_open_browser()). Returns the lines for the caller to print."""
    found = [Path(p).resolve() for p in pages if Path(p).exists()]
    if not found:
        return []
    opening = can_open_browser() if open_them is None else open_them
    lines = ["pages made visible" + (" (opening them in your browser):" if opening else " (open them in a browser):")]
    for page in found:
        lines.append(f"  {page}  {page.as_uri()}")
        if opening:
            webbrowser.open_new_tab(page.as_uri())
    return lines


def revealed_pages(experiments: Path, runs: tuple[str, ...]) -> list[Path]:
    """A lab's pages that its reveal rewrites: each run's dashboard.html and the index."""
    return [Path(experiments) / run / "dashboard.html" for run in runs] + [Path(experiments) / "index.html"]
