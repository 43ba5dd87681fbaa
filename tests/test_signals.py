"""One list of statistics: what the telemetry writes is what the walker and the page read.

The telemetry's registries (core/telemetry.py) are the only hand-kept lists; the walker reads the keys a run's
rows carry (analysis/evidence.py) and the page draws what the panel registry names (analysis/panels.py)."""
from __future__ import annotations

from conftest import small_config

from minitrain import loop
from minitrain.analysis import panels
from minitrain.analysis.evidence import Evidence
from minitrain.core import telemetry


def two_rows() -> list[dict]:
    run = loop.build_run(small_config("steps=2", "telemetry=full"))
    rows: list[dict] = []
    loop.run_steps(run, 0, rows.append)
    return rows


def test_every_registered_statistic_is_written_and_read():
    rows = two_rows()
    written = {k for stats in rows[0]["params"].values() for k in stats}
    assert written == {key for key, _, _ in telemetry.PARAM_STATS}  # step 0 is a detail step: every statistic
    ev = Evidence(rows)
    assert set(ev.param_keys) == written
    assert set(ev.batch_keys) == {k for k in rows[0]["batch"] if k != "rows"}


def test_the_page_draws_only_statistics_the_telemetry_writes():
    rows = two_rows()
    written = {k for stats in rows[0]["params"].values() for k in stats}
    assert set(panels.tensor_stats()) <= written
    assert set(panels.batch_stats()) <= set(rows[0]["batch"])


def test_a_statistic_a_run_lacks_reads_as_not_measured():
    rows = [{k: v for k, v in r.items() if k != "params"} for r in two_rows()]
    ev = Evidence(rows)
    assert ev.param_keys == () and ev.update_ratio.tolist() != [] and all(x != x for x in ev.update_ratio)
