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


def test_foreign_suite_cases_and_split_are_what_docs_foreign_runs_says():
    """40 runs from three trainers, 10 healthy; a third of each trainer's runs to dev, fixed by the seed."""
    import foreign_suite

    cases = foreign_suite.CASES
    assert len(cases) == 40 and sum(c.healthy for c in cases) == 10
    assert {c.trainer for c in cases} == {"nanogpt", "hf", "csv"}
    assert len({c.name for c in cases}) == len(cases)
    parts = foreign_suite.split()
    assert parts == foreign_suite.split() and sum(p == "dev" for p in parts.values()) == 13
    for trainer in ("nanogpt", "hf", "csv"):
        assert any(parts[c.name] == "dev" for c in cases if c.trainer == trainer)


def test_blind2_suite_holds_42_runs_of_its_own_three_trainers(monkeypatch, capsys):
    """bench/foreign2: 9 healthy and 33 faulty runs, each fault's trace recorded, every cause one the key knows;
    --part blind2 hashes each trainer's own source and refuses a --cases name it does not hold."""
    import foreign_suite
    from foreign2.cases import CASES, NO_TRACE

    assert len(CASES) == 42 and sum(c.healthy for c in CASES) == 9 and len({c.name for c in CASES}) == 42
    assert {c.trainer for c in CASES} == {"gptchar", "hfllama", "litcsv"}
    known = {"lr_too_high", "lr_spike", "no_warmup", "gradient_explosion", "bad_batch", "stuck_loader",
             "attention_logit_growth", "output_logit_divergence"}
    assert all(set(c.accept) <= known for c in CASES)
    assert NO_TRACE <= {c.name for c in CASES if not c.healthy} and len(NO_TRACE) == 8
    assert all(c.traced is (None if c.healthy else c.name not in NO_TRACE) for c in CASES)
    assert len({foreign_suite.run_key(c) for c in CASES}) == 42
    monkeypatch.setattr(sys, "argv", ["foreign_suite.py", "--part", "blind2", "--cases", "no-such-run"])
    assert foreign_suite.main() == 2
    assert "no-such-run" in capsys.readouterr().err


def test_blind3_suite_holds_42_runs_of_its_own_three_trainers(monkeypatch, capsys):
    """bench/foreign3: 9 healthy and 33 faulty runs (7 leaving no trace), every cause one the key knows, a fault
    step and length for each fault; --part blind3 refuses a --cases name it does not hold."""
    import foreign_suite
    from foreign3.cases import CASES

    assert len(CASES) == 42 and sum(c.healthy for c in CASES) == 9 and len({c.name for c in CASES}) == 42
    assert {c.trainer for c in CASES} == {"gru", "opt", "mixer"}
    known = {"lr_too_high", "lr_spike", "no_warmup", "gradient_explosion", "bad_batch", "stuck_loader",
             "attention_logit_growth", "output_logit_divergence"}
    faults = [c for c in CASES if not c.healthy]
    assert all(set(c.accept) <= known and c.fault_step is not None and c.fault_len >= 1 for c in faults)
    assert sum(not c.traceable for c in faults) == 7
    assert len({foreign_suite.run_key(c) for c in CASES}) == 42
    monkeypatch.setattr(sys, "argv", ["foreign_suite.py", "--part", "blind3", "--cases", "no-such-run"])
    assert foreign_suite.main() == 2
    assert "no-such-run" in capsys.readouterr().err


def test_foreign_suite_scores_each_answer_in_its_category():
    """Only a wrong name and a false alarm fail; an untestable list turns a silent miss into 'untestable'."""
    from foreign.cases import Case
    from foreign_suite import FAILING, category

    fault = Case("f", "csv", {}, "csv", accept=("bad_batch",), fault_step=100, log_every=10)
    healthy = Case("h", "csv", {}, "csv")
    seen = {
        "right": category(fault, {"cause": "bad_batch", "anomaly_step": 110, "untestable": []}),
        "step off": category(fault, {"cause": "bad_batch", "anomaly_step": 300, "untestable": []}),
        "wrong": category(fault, {"cause": "stuck_loader", "anomaly_step": 100, "untestable": []}),
        "untestable": category(fault, {"cause": "healthy", "anomaly_step": None, "untestable": ["x"]}),
        "healthy on fault": category(fault, {"cause": "healthy", "anomaly_step": None, "untestable": []}),
        "unknown": category(fault, {"cause": "unknown", "anomaly_step": None, "untestable": []}),
        "false alarm": category(healthy, {"cause": "bad_init", "anomaly_step": 0, "untestable": []}),
        "healthy": category(healthy, {"cause": "healthy", "anomaly_step": None, "untestable": ["x"]}),
        "import refused": category(healthy, {"refused": "csv: no loss"}),
    }
    assert all(k == v for k, v in seen.items()), seen
    assert FAILING == {"wrong", "false alarm"}
