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
    """bench/ensemble.py's numerics check, 2 members for 3 steps at a high LR without warmup: each member in the
    vmap'd ensemble follows its own sequential run to float rounding. Adam moves a weight by about lr a step;
    rounding differs most where a gradient is near zero (g / (sqrt(v) + eps)), about 1e-3 of an update here,
    while clipping coupled across members or decay on the norm gains differ by about 1e-1 of one update."""
    import ensemble
    from minitrain.core.config import build_config
    from minitrain.core.data import prepare

    cfg = build_config({}, ["progress=false", "warmup_steps=0", "lr_max=3e-3"])
    rows = ensemble.check_numerics(cfg, ensemble.Batches(prepare(cfg), cfg, 2, 3), 2, [1, 3])
    assert [r["steps"] for r in rows] == [1, 3]
    for r in rows:
        assert r["loss_rel"] < 1e-5 and r["param_abs"] < 0.01 * cfg.lr_max, rows
    ensemble.print_numerics(rows, 2, "autograd")
    assert "| 3 |" in capsys.readouterr().out
