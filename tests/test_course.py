"""core/course.py (the lab's run names, built and parsed once) and run/sealing.py (THE sealed rule, which the
lab's gate and the views' defaults share)."""
from __future__ import annotations

import pytest

from minitrain.core.course import LAB_K, LAB_LETTERS, LAB_SEED, lab_run_name, parse_lab_run_name
from minitrain.run import sealing
from minitrain.views import index


@pytest.mark.parametrize("injection", ["none", *LAB_LETTERS])
@pytest.mark.parametrize("seed, step", [(LAB_SEED, LAB_K), (7, LAB_K), (LAB_SEED, 60), (7, 60)])
def test_a_lab_run_name_parses_back_to_what_built_it(injection, seed, step):
    name = lab_run_name(injection, seed, step)
    assert parse_lab_run_name(name) == (injection, seed, LAB_K if injection == "none" else step)


def test_the_lab_names_and_no_others():
    assert [lab_run_name(i, LAB_SEED, LAB_K) for i in ("none", *LAB_LETTERS)] == \
        ["18-baseline", "19-injection-A", "19-injection-B", "19-injection-C"]
    assert lab_run_name("bad_batch", 7, 60) == "19-injection-B-k60-seed7"
    for other in ("19-injection-D", "19-injection-A-remediated", "18-baseline-k60", "19-injection-", "19-blind"):
        assert parse_lab_run_name(other) is None, other


def test_the_views_default_to_the_one_sealed_rule(tmp_path):
    """An unrevealed 19-injection-A is sealed, a blind lab's run until its own reveal; a baseline never is.
    The runs table (and the page, and serve) take the same rule when no one passes `sealed`."""
    spike, blind, baseline = tmp_path / "19-injection-A", tmp_path / "19-blind" / "01", tmp_path / "18-baseline"
    for run in (spike, blind, baseline):
        run.mkdir(parents=True)
    (blind.parent / sealing.SEALED).write_text('{"lab": "spike"}')
    assert [sealing.is_sealed(r) for r in (spike, blind, baseline)] == [True, True, False]
    assert [index.run_row(r, tmp_path)["sealed"] for r in (spike, blind, baseline)] == [True, True, False]
    (tmp_path / sealing.REVEALED).write_text("{}")  # the spike lab revealed: its runs open, the blind lab's not
    assert [index.run_row(r, tmp_path)["sealed"] for r in (spike, blind)] == [False, True]
    (blind.parent / sealing.REVEALED).write_text("{}")
    assert not index.run_row(blind, tmp_path)["sealed"]
