"""The regime map's page (experiments/explore/index.html): one heat map per lab prediction, drawn by an inline
script from the map's data embedded in the page. Self-contained: no network, no other file needed (each cell
links to its runs' dashboard.html beside it). The verdicts come from minitrain.lab.explore, which takes them
from analysis/signature.py; this module only draws."""
from __future__ import annotations

import html
from importlib import resources
from pathlib import Path

from minitrain.run import files
from minitrain.views.dashboard import embed_json, fill


def render(data: dict) -> str:
    template = resources.files("minitrain.views").joinpath("assets", "explore.html").read_text(encoding="utf-8")
    title = f"Where the lab's predictions hold: regime map ({data['grid']} grid)"
    return fill(template, {"TITLE": html.escape(title), "DATA": embed_json(data)})


def write(out_dir: Path, data: dict) -> Path:
    """OUT_DIR/index.html from the map's data (see lab/explore.py: collect)."""
    out = Path(out_dir) / "index.html"
    files.atomic_write_text(out, render(data))
    return out
