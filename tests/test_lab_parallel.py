"""lab/parallel.py: the lab's runs made in parallel are the same bytes as made one after another."""
import io
import shutil

import pytest

from conftest import SMALL, SMALL_K
from minitrain.core import course
from minitrain.core.config import build_config
from minitrain.lab import parallel, runner
from minitrain.lab.runs import lab_run
from minitrain.run import reader


def test_parallel_lab_gives_the_bytes_of_runs_made_one_after_another(small_lab, tmp_path, monkeypatch):
    """Each run forked from this process (what `minitrain lab` does on Linux), or one as a new interpreter: the
    bytes of the same runs made one after another in this session (conftest.small_lab: the baseline, then each
    injection forked from it at K)."""
    from test_reference import metrics_sha

    out = io.StringIO()
    lines = parallel.run_lab(tmp_path / "par", seed=42, k=SMALL_K, jobs=2, sets=SMALL, out=out)
    names = ["18-baseline", *(f"19-injection-{x}-k{SMALL_K}" for x in "ABC")]
    sequential = {name: metrics_sha(small_lab / name.removesuffix(f"-k{SMALL_K}")) for name in names}
    assert [line.split(":")[0] for line in lines] == names
    progress = out.getvalue().splitlines()  # not a terminal: one line as each run starts, one as it ends
    assert len(progress) == 8 and all(sum(line.startswith(n) for line in progress) == 2 for n in names)
    assert any(line.startswith("18-baseline") and "120/120 steps" in line and "done" in line for line in progress)
    assert {name: metrics_sha(tmp_path / "par" / name) for name in names} == sequential
    for name in names[1:]:  # a lab run's signature is written by the reveal (it gives the answers away)
        assert not (tmp_path / "par" / name / "signature.json").exists()
        assert f'"checkpoint_step": {SMALL_K}' in (tmp_path / "par" / name / "manifest.json").read_text()  # forked
    again = parallel.run_lab(tmp_path / "par", seed=42, k=SMALL_K, jobs=2, sets=SMALL, out=io.StringIO())
    assert all("up to date" in line for line in again)
    # Where forking is not safe (macOS, Windows) a run is a new interpreter: the tail left to train (C, forked
    # from the baseline's checkpoint at K) gets the same bytes too. One new interpreter, not four: what it runs
    # is the same parallel.train_lab_run the forked runs run.
    for name in names[:3]:
        shutil.copytree(tmp_path / "par" / name, tmp_path / "sub" / name)
    monkeypatch.setattr(runner, "can_fork", lambda: False)
    lines = parallel.run_lab(tmp_path / "sub", seed=42, k=SMALL_K, jobs=2, sets=SMALL, out=io.StringIO())
    assert ["up to date" in line for line in lines] == [True, True, True, False]
    assert {name: metrics_sha(tmp_path / "sub" / name) for name in names} == sequential


def test_last_step_reads_the_last_complete_row(tmp_path):
    assert reader.last_step(tmp_path) is None
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step":0,"loss":1.0}\n{"step":1,"loss":0.9}\n{"step":2,"lo')
    assert reader.last_step(tmp_path) == 1


def test_fork_checkpoint_is_the_last_at_or_before_k():
    assert parallel.fork_checkpoint(500, 100) == 500 and parallel.fork_checkpoint(50, 20) == 40


def test_a_diverging_lab_keeps_its_rows_and_exits_3(tmp_path):
    from conftest import run_cli, small_args
    from minitrain.core.errors import EXIT_NON_FINITE

    res = run_cli("lab", "--experiments", str(tmp_path), "--injection-step", "50", "--jobs", "2",
                  *small_args("lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0"))
    assert res.returncode == EXIT_NON_FINITE, res.stderr
    assert "non-finite, rows kept" in res.stderr and "failed" not in res.stderr
    for name in ("18-baseline", "19-injection-A-k50", "19-injection-B-k50", "19-injection-C-k50"):
        assert f"{name}: stopped at step" in res.stdout  # each run's own summary line


def test_an_interrupted_lab_run_continues_where_it_stopped(small_baseline, tmp_path):
    """`minitrain lab` (or lab-run) again after Ctrl-C or a kill: an unfinished run of the same config is
    resumed from its last checkpoint, to the same bytes as an uninterrupted run; another config is refused."""
    from minitrain import trainer
    from minitrain.run import reader
    from test_reference import metrics_sha

    cfg = build_config({}, [*SMALL, "seed=42", "injection=none", "injection_step=50"])
    out = tmp_path / "cut" / course.lab_run_name("none", 42, 50)
    trainer.train(cfg, out, stop_at=70)  # as a run killed after its checkpoint at 60 leaves it, more or less
    folder, line = lab_run(cfg, tmp_path / "cut")
    assert folder == out and "finished" in line
    assert metrics_sha(out) == metrics_sha(small_baseline)  # an uninterrupted run's bytes (the same config)
    assert (out / "dashboard.html").exists()
    other = build_config({}, [*SMALL, "seed=42", "injection=none", "injection_step=50", "lr_max=0.001"])
    trainer.train(other, tmp_path / "other" / out.name, stop_at=30)
    with pytest.raises(Exception, match="already holds a run"):
        lab_run(other.replace(lr_max=0.002), tmp_path / "other")
