"""bench/perf.py still runs against the current code (it imports the loop's internals, which move)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def test_perf_step_bench_runs_and_prints_every_ratio(capsys):
    import perf

    assert perf.main(["step", "--rounds", "1", "--steps-per-block", "4"]) == 0
    out = capsys.readouterr().out
    for line in ("bare step / reference step at the course shape", "default telemetry and metrics / bare step",
                 "default run (telemetry, metrics, validation"):
        assert line in out, out
