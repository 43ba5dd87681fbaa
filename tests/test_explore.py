"""minitrain explore: the sweep (lab/explore.py), its judgments (analysis/regimes.py), its page and doc
(views/explore.py).

One tiny grid is swept once for the module: K=40, 30 steps after it, three clip thresholds (course, p99 of the
unclipped healthy run, off) and the three lab injections (A at x5 and x50): 3 baselines and 12 cells on two
worker processes.
Its verdicts are checked against analysis/signature.py recomputed from the run folders (one definition), its
cache against a second sweep, and its page in headless Chromium with the network blocked.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_line_error, run_cli, screenshot
from minitrain.analysis import regimes, signature
from minitrain.core.config import PRESETS, build_config
from minitrain.lab import explore
from minitrain.views import explore as explore_page
from minitrain.run import reader

TINY_K, TINY_TAIL = 40, 30
TINY = ["warmup_steps=10", "eval_every=20", "spectral_every=0", "val_max_rows=64"]
TINY_GRID = (explore.Slice((3e-4,), (8,), ("course", "p99", "off"),
                           (explore.scale(5), explore.scale(50), explore.BAD_BATCH,
                            explore.v_corrupt("tok_emb.weight", 1000))),)


def sweep(out: Path, monkeypatch, lines: list[str]) -> dict:
    monkeypatch.setattr(explore, "K", TINY_K)
    monkeypatch.setattr(explore, "TAIL", TINY_TAIL)
    monkeypatch.setitem(explore.GRIDS, "tiny", TINY_GRID)
    return explore.run_explore(out, "tiny", jobs=2, overrides=TINY, log=lines.append)


@pytest.fixture(scope="module")
def tiny_map(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("explore") / "explore"
    lines: list[str] = []
    try:
        data = sweep(out, mp, lines)
    finally:
        mp.undo()
    return out, data, lines


def test_every_cell_is_judged_by_the_lab_reports_definitions(tiny_map):
    out, data, lines = tiny_map
    assert [p["id"] for p in data["predictions"]] == ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "C1", "C2", "C3"]
    assert [p["text"] for p in data["predictions"]] == [p.text for ps in signature.PREDICTIONS.values() for p in ps]
    assert data["cells"] == 12 and data["trained"] == 15 and data["reused"] == 0
    assert sum(1 for line in lines if "/12 " in line) == 12  # one progress line per cell
    for trunk in (out / "runs").iterdir():  # each trunk's runs table, written once at the end, lists all its runs
        table = (trunk / "index.html").read_text()
        assert all(f'"{run.name}/dashboard.html"' in table for run in trunk.iterdir() if run.is_dir()), trunk.name
    for pred in data["predictions"]:
        # A: 3 thresholds x 2 factors; B1, B2: each B against each A of its trunk; C: one per threshold
        assert len(pred["points"]) == {"A": 6, "B": 6 if pred["id"] != "B3" else 3, "C": 3}[pred["letter"]], pred["id"]
        n = int(pred["id"][1:]) - 1
        for pt in pred["points"]:
            run = out / Path(pt["run"]).parent
            base = out / Path(pt["baseline"]).parent
            assert (run / "dashboard.html").is_file() and (base / "dashboard.html").is_file()
            sig = signature.lab_signature(run, base)
            a = None
            if pred["injection"] == "bad_batch" and "vs_a" in pt["coords"]:
                a = signature.lab_signature(run.parent / f"scale-{pt['coords']['vs_a']}", base)
            again = signature.judge(sig, a)[n]
            assert (pt["holds"], pt["measured"]) == (again["holds"], again["measured"]), (pred["id"], pt["coords"])
            results = reader.results_of(run)
            assert results["status"] == "stopped" and results["steps_done"] == TINY_K + TINY_TAIL


def test_clip_grid_sits_on_the_healthy_runs_own_norm(tiny_map):
    out, data, _ = tiny_map
    trunks = {t["clip"]: t for t in data["trunks"]}
    off = out / Path(trunks["off"]["baseline"]).parent
    norms = [r["grad_norm"] for s, r in reader.rows_by_step(off).items() if 10 <= s < TINY_K + TINY_TAIL]
    p99 = float(f"{np.percentile(norms, 99):.4g}")
    assert trunks["p99"]["clip_value"] == p99 == trunks["off"]["calibration"]["p99"]
    assert reader.manifest_of(out / Path(trunks["p99"]["baseline"]).parent)["config"]["grad_clip"] == p99
    assert trunks["course"]["clip_value"] == 1.0 and trunks["off"]["clip_value"] is None
    assert trunks["off"]["clipped_after_k"] == 0.0
    assert trunks["course"]["clipped_after_k"] == 1.0  # this model's healthy norm is above 1.0 on every step
    assert 0 < trunks["p99"]["clipped_before_k"] < 0.2
    a3 = {pt["coords"]["clip"]: pt["holds"] for pt in data["predictions"][2]["points"] if pt["coords"]["factor"] == "x50"}
    assert a3 == {"course": True, "p99": True, "off": False}  # a x50 gradient always crosses a finite threshold
    a2 = [pt["holds"] for pt in data["predictions"][1]["points"]]
    assert a2 == [True] * 6  # the pre-clip norm is the injected multiple of the baseline's, whatever the clip


def test_a_second_sweep_trains_nothing_and_agrees(tiny_map, monkeypatch):
    out, data, _ = tiny_map
    lines: list[str] = []
    again = sweep(out, monkeypatch, lines)
    assert again["trained"] == 0 and again["reused"] == 15
    assert all("cached" in line for line in lines if line.startswith("["))
    strip = lambda d: [[(pt["coords"], pt["holds"], pt["measured"]) for pt in p["points"]] for p in d["predictions"]]
    assert strip(again) == strip(data)
    saved = json.loads((out / "cells.json").read_text())
    assert saved["trained"] == 0 and strip(saved) == strip(data)
    assert [h["trained"] for h in saved["history"]][-2:] == [15, 0]  # the cold sweep's cost is kept
    assert saved["cold_cpu_seconds"] == data["cold_cpu_seconds"]  # the same run costs, summed in hundredths


def test_doc_states_a_region_for_every_prediction(tiny_map):
    out, data, _ = tiny_map
    doc = (out / "regimes.md").read_text()
    for p in data["predictions"]:
        assert f"### {p['id']} " in doc and f"Holds in {p['holds_in']} of {len(p['points'])} cells: {p['region']}." in doc
        assert explore_page.MECHANISMS[p["id"]] in doc
    assert data["cold_cpu_seconds"] > 0 and len(data["history"]) >= 1
    gains = {pt["coords"]["clip"]: pt["update_gain_at_k"] for pt in data["predictions"][0]["points"]
             if pt["coords"]["factor"] == "x50"}
    assert gains["course"] == pytest.approx(1.0) and gains["off"] == pytest.approx(50.0)  # what Adam received
    assert 1.0 < gains["p99"] < 50.0


def test_region_in_words():
    def pts(spec):
        return [{"coords": {"clip": c, "factor": f}, "holds": h} for c, f, h in spec]

    axes = ["clip", "factor"]
    assert regimes.region(pts([("off", "x5", False), ("course", "x5", False)]), axes) == "nowhere on the grid"
    assert regimes.region(pts([("off", "x5", True)]), axes) == "everywhere on the grid"
    grid = [(c, f, c == "off" and f != "x5") for c in ("course", "p99", "off") for f in ("x5", "x50", "x500")]
    assert regimes.region(pts(grid), axes) == "clip off, factor x50/x500"
    diag = [(c, f, (c, f) in {("course", "x5"), ("off", "x500")}) for c in ("course", "off") for f in ("x5", "x500")]
    assert regimes.region(pts(diag), axes) == "clip course, factor x5; clip off, factor x500"
    most = [(c, f, (c, f) != ("p99", "x50")) for c in ("course", "p99", "off") for f in ("x5", "x50", "x500")]
    assert regimes.region(pts(most), axes) == "everywhere except clip p99, factor x50"


def test_bad_input_is_one_line(tmp_path):
    assert_one_line_error(run_cli("explore", str(tmp_path), "--set", "grad_clip=2"), "grid sets this field")
    assert_one_line_error(run_cli("explore", str(tmp_path), "--set", "lr_maxx=2"), "lr_maxx")
    assert_one_line_error(run_cli("explore", str(tmp_path), "--jobs", "0"), "--jobs")
    assert not (tmp_path / "explore").exists()


def test_grids_hold_the_lab_injections():
    quick = {v for t in explore.trunks_of("quick") for v in t.variants}
    assert {v.injection for v in quick} == {"scale", "bad_batch", "v_corrupt"}
    default = explore.trunks_of("default")
    assert quick <= {v for t in default for v in t.variants}  # a default sweep reuses every quick cell
    assert sum(len(t.variants) for t in default) == 70 and sum(len(t.variants) for t in explore.trunks_of("quick")) == 16
    assert {t.clip for t in default} == set(explore.CLIPS)


def test_pretraining_like_preset_only_moves_the_clip_threshold():
    assert set(PRESETS["pretraining-like"]) == {"grad_clip"}
    cfg = build_config({}, ["preset=pretraining-like"])
    assert cfg.grad_clip == PRESETS["pretraining-like"]["grad_clip"] > 1.0
    assert cfg.replace(grad_clip=1.0, preset="course").hash() == build_config({}, []).hash()


# ---------------------------------------------------------------------------------------------------
# The page in a real browser, offline
# ---------------------------------------------------------------------------------------------------


def test_page_renders_offline_with_a_map_per_prediction(tiny_map, browser):
    out, data, _ = tiny_map
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    network, errors = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
               else (network.append(route.request.url), route.abort()))  # the network is blocked
    page.goto((out / "index.html").resolve().as_uri())
    page.wait_for_function("() => window.__exploreReady === true", timeout=30_000)
    assert page.locator("section.map").count() == 10
    assert "Holds in" in page.locator("#map-A1 .region").inner_text()
    cells = page.locator("#map-A3 td[data-holds]")
    assert cells.count() == 6  # clip x factor: 3 thresholds, 2 factors
    hrefs = page.locator("#map-A3 td a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert len(hrefs) == 6
    for href in hrefs:
        assert (out / href).is_file(), href
    x = page.locator("#map-A3 select[data-axis='x']").input_value()
    other = "factor" if x == "clip" else "clip"
    page.select_option("#map-A3 select[data-axis='x']", other)  # axes are selectable; the two swap
    assert page.locator("#map-A3 select[data-axis='y']").input_value() == x
    header = page.locator("#map-A3 tr").first.inner_text()
    assert ("x50" in header) == (other == "factor") and cells.count() == 6
    assert page.locator("#trunks tr").count() == 1 + 3
    screenshot(page, "explore.png")
    assert network == [] and errors == [], (network, errors)
    page.close()
