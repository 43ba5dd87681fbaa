"""`minitrain reproduce`: the distance, and the search on the small lab (conftest.small_lab, K = 60) over a
short window with a reduced grid."""
from __future__ import annotations

import json
import shutil

from conftest import SMALL_K, assert_one_line_error, run_cli
from minitrain.analysis import replay_match as rm
from minitrain.lab import reproduce


def test_the_distance_is_zero_on_the_same_rows_and_grows_with_the_ratio():
    row = {"loss": 2.0, "grad_norm": 3.0, "grad_norm_clipped": 1.0, "lr": 1e-4, "params": {"w": {"g": 1.0, "vm": 0.0}}}
    rows = {5: row}
    assert rm.distance(rows, {5: dict(row)}, range(5, 6)) == 0.0
    twice = {5: {**row, "grad_norm": 6.0}}
    assert abs(rm.distance(rows, twice, range(5, 6)) - 0.6931471805599453 / 6) < 1e-12  # ln 2 over 6 values
    assert rm.distance(rows, {}, range(5, 6)) == rm.MISSING
    assert rm.level(True, 0.0) == "exact" and rm.level(False, 1e-8) == "within rounding"
    assert rm.level(False, 1e-3) == "approximate"


def test_reproduce_finds_scale_at_k_bit_identical(small_lab, tmp_path, monkeypatch):
    monkeypatch.setitem(reproduce.GRID, "scale", [{"injection_scale": v} for v in (20.0, 50.0, 100.0)])
    exp = shutil.copytree(small_lab, tmp_path / "experiments")
    proc = run_cli("reproduce", str(exp / "19-injection-A"), "--baseline", str(exp / "18-baseline"), "--spoil",
                   "--kinds", "scale,bad_batch", "--window", "10", "--jobs", "1", "--json", check=True)
    rep = json.loads(proc.stdout)
    assert rep["anchor"] == SMALL_K and rep["shared_prefix"] is True
    best = rep["ranked"][0]
    assert (best["kind"], best["step"], best["magnitude"]) == ("scale", SMALL_K, {"injection_scale": 50.0})
    assert best["level"] == "exact" and best["distance"] == 0.0
    assert all(r["distance"] > 0 for r in rep["ranked"][1:])
    assert {r["kind"] for r in rep["ranked"]} == {"scale", "bad_batch"}


def test_reproduce_refuses_bad_input(small_lab):
    a, base = small_lab / "19-injection-A", small_lab / "18-baseline"
    assert_one_line_error(run_cli("reproduce", str(a), "--baseline", str(base)), "--spoil")
    assert_one_line_error(run_cli("reproduce", str(a), "--baseline", str(small_lab / "19-injection-B"), "--spoil"),
                          "not a clean run")
    assert_one_line_error(run_cli("reproduce", str(a), "--baseline", str(base), "--spoil", "--kinds", "nope"),
                          "unknown injection")
