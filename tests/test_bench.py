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


def test_ensemble_bench_members_follow_their_sequential_runs(capsys):
    """bench/ensemble.py's numerics check, 2 members for 3 steps: each member's losses and weights in the vmap'd
    ensemble stay within float rounding of its own sequential run, and the check's table is printed."""
    import ensemble

    assert ensemble.main(["--no-timing", "--check-members", "2", "--check-steps", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "| 3 |" in out, out
    import re

    rows = [line.split("|")[2:6] for line in out.splitlines() if re.match(r"\| [13] \|", line)]
    assert len(rows) == 2, out
    for loss_abs, loss_rel, param_abs, param_rel in rows:
        assert float(loss_rel) < 1e-5 and float(param_rel) < 1e-5, out  # float32 rounding, not a different run
