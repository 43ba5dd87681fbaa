"""Damaged input that reaches a reader: a YAML alias bomb in a config, a damaged sibling run, wrong types in a
metrics row, JSON nested 200k deep, a probe loop that raised. Each is refused in one line (exit 2) by the
commands about the damaged run, and never breaks a command about another run (docs/reliability.md).
tests/test_fuzz_readers.py generates such damage instead of picking it."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli

def edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


# --- 5. a YAML alias bomb -------------------------------------------------------------------------

# 9 ** 8 = 43 million integers behind 1 kB of YAML: each alias is the same list object, so it loads in
# milliseconds; formatting or walking it is what takes gigabytes.
BOMB = ("[&a [1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], "
        "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e], "
        "&g [*f,*f,*f,*f,*f,*f,*f,*f,*f], [*g,*g,*g,*g,*g,*g,*g,*g,*g]]")


@pytest.mark.parametrize("route", ["--config", "--set", "config.yaml"])
def test_a_yaml_alias_bomb_in_a_list_field_is_one_line(tmp_path, small_baseline, route):
    run = tmp_path / "run"
    if route == "--config":
        (tmp_path / "bomb.yaml").write_text(f"ckpt_keep_steps: {BOMB}\n")
        proc = run_cli("train", "--out", str(run), "--config", str(tmp_path / "bomb.yaml"))
    elif route == "--set":
        proc = run_cli("train", "--out", str(run), "--set", f"ckpt_keep_steps={BOMB}")
    else:  # a run folder received from someone else, resumed
        shutil.copytree(small_baseline, run, ignore=shutil.ignore_patterns("checkpoints"))
        edit_json(run / "manifest.json", status="running")
        (run / "config.yaml").write_text(f"ckpt_keep_steps: {BOMB}\n")
        proc = run_cli("train", "--resume", str(run))
    assert_one_line_error(proc, "ckpt_keep_steps' expects list[int]", "nested")
    assert route == "config.yaml" or not run.exists()


def test_config_values_are_bounded_before_they_are_formatted():
    from minitrain.core.config import MAX_VALUE_ITEMS, build_config
    from minitrain.core.errors import UserError

    with pytest.raises(UserError, match=f"more than {MAX_VALUE_ITEMS} items"):
        build_config({"ckpt_keep_steps": list(range(MAX_VALUE_ITEMS + 1))})
    with pytest.raises(UserError, match="a text of 100000 characters"):
        build_config({"injection_sentence": "x" * 100_000})
    with pytest.raises(UserError, match=r"got '9{20}.*\.\.\.; fix") as err:  # a long value is cut, not printed
        build_config({}, ["seed=" + "9" * 5000])
    assert len(str(err.value)) < 200
    with pytest.raises(UserError, match="is not a value YAML reads"):
        build_config({}, ["ckpt_keep_steps=" + "[" * 5000])
    assert build_config({}, ["ckpt_keep_steps=[300, 1000]"]).ckpt_keep_steps == [300, 1000]


def test_a_config_file_nested_deep_or_not_a_file_is_one_line(tmp_path):
    (tmp_path / "deep.yaml").write_text("ckpt_keep_steps: " + "[" * 200_000 + "]" * 200_000 + "\n")
    assert_one_line_error(run_cli("train", "--out", str(tmp_path / "run"), "--config", str(tmp_path / "deep.yaml")),
                          "deep.yaml")
    assert_one_line_error(run_cli("train", "--out", str(tmp_path / "run"), "--config", "/dev/zero"),
                          "not a regular file")
    assert not (tmp_path / "run").exists()


# --- 8. one damaged sibling run ------------------------------------------------------------------


def copy_lab(small_lab: Path, dst: Path) -> Path:
    """The small lab's runs under names that are not the lab's (base, inj-A, inj-B, inj-C): runs of no lab,
    whose answers no reveal seals, so that every command reads them."""
    for name in ("18-baseline", "19-injection-A", "19-injection-B", "19-injection-C"):
        new = "base" if name == "18-baseline" else "inj-" + name[-1]
        shutil.copytree(small_lab / name, dst / new, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    return dst


def test_a_damaged_sibling_breaks_no_other_run_and_its_own_commands_are_one_line(tmp_path, small_lab):
    exp = copy_lab(small_lab, tmp_path / "exp")
    bad = exp / "inj-B"
    edit_json(bad / "manifest.json", config="oops")
    # the other runs: a page with its baseline found beside the damaged run, and the index
    proc = run_cli("dashboard", str(exp / "inj-A"))
    assert proc.returncode == 0, proc.stderr
    assert "baseline overlay: base" in proc.stdout
    index = (exp / "index.html").read_text()
    row = next(line for line in index.splitlines() if 'data-run="inj-B"' in line)
    assert 'class="damaged"' in row and "manifest.json is damaged (&#x27;config&#x27; is a string, not an object)" in row
    assert sum("<tr" in line for line in index.splitlines()) >= 4  # every other run keeps its row
    proc = run_cli("index", str(exp))
    assert proc.returncode == 0, proc.stderr
    # the damaged run's own commands: one line naming the file
    for args in (["diagnose", str(bad), "--spoil"], ["dashboard", str(bad)], ["postmortem", str(bad)],
                 ["export", str(bad), "--tensorboard", str(tmp_path / "tb")]):
        assert_one_line_error(run_cli(*args), "manifest.json is damaged ('config' is a string, not an object)")
    assert not (bad / "postmortem.md").exists() and not (tmp_path / "tb").exists()


def test_a_damaged_baseline_is_no_baseline(tmp_path, small_lab):
    from minitrain.run import reader

    exp = copy_lab(small_lab, tmp_path / "exp")
    edit_json(exp / "base" / "results.json", final_val_loss="low")
    assert reader.find_baseline(exp / "inj-A") is None
    proc = run_cli("index", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert "results.json is damaged (&#x27;final_val_loss&#x27; is a string, not a number)" in (exp / "index.html").read_text()


# --- 9. wrong types in one metrics row ------------------------------------------------------------

READERS = ("diagnose", "dashboard", "postmortem", "export")


def reader_args(command: str, run: Path, tmp_path: Path) -> list[str]:
    extra = {"diagnose": ["--spoil"], "export": ["--tensorboard", str(tmp_path / "tb")]}.get(command, [])
    return [command, str(run), *extra]


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    return dst


def edit_row(run: Path, index: int, **fields) -> None:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[index] = json.dumps({**json.loads(lines[index]), **fields})
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("field, value, says", [("params", "zzz", "'params' is a string, not an object"),
                                                ("batch", 5, "'batch' is an integer, not an object"),
                                                ("grad_norm", [1, 2], "'grad_norm' is a list, not a number or null"),
                                                ("loss", "abc", "'loss' is a string, not a number or null")])
def test_a_wrong_type_in_one_row_is_one_line_from_every_reader(tmp_path, small_baseline, field, value, says):
    run = copy_run(small_baseline, tmp_path / "18-baseline")
    edit_row(run, 30, **{field: value})
    for command in READERS:
        assert_one_line_error(run_cli(*reader_args(command, run, tmp_path)), "metrics.jsonl line 31 (step 30)", says)
    assert run_cli("index", str(tmp_path)).returncode == 0
    assert "the walker cannot read this run" in (tmp_path / "index.html").read_text()


# --- 10. JSON nested 200k deep ---------------------------------------------------------------------

DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("where", ["tokenizer.json", "manifest.json", "a row"])
def test_json_nested_200k_deep_is_no_recursion_error(tmp_path, small_baseline, where):
    """Each reader refuses the run in one line; a damaged tokenizer stops the walker in one line (no reader
    assumes a vocabulary) while the page and the post-mortem are written without the walker's part."""
    run = copy_run(small_baseline, tmp_path / "18-baseline")
    if where == "a row":
        lines = (run / "metrics.jsonl").read_text().splitlines()
        lines[40] = '{"step": 40, "loss": ' + DEEP + "}"
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    else:
        (run / where).write_text(DEEP)
    for command in READERS:
        proc = run_cli(*reader_args(command, run, tmp_path))
        if proc.returncode == 0:  # the page and the post-mortem, written without the walker's part
            assert where == "tokenizer.json" and command in ("dashboard", "postmortem", "export"), proc.stdout
        else:
            assert_one_line_error(proc, "nested deeper than 64 levels")
    if where == "tokenizer.json":
        assert_one_line_error(run_cli("diagnose", str(run)), "tokenizer.json is damaged")
    proc = run_cli("index", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "18-baseline" in (tmp_path / "index.html").read_text()


def test_the_reader_bounds_nesting_and_reads_an_overflowing_number_as_null():
    from minitrain.run import reader

    assert reader.loads_json("[" * 64 + "]" * 64)
    for text in ("[" * 65 + "]" * 65, DEEP, '{"a": ' * 100 + "1" + "}" * 100):
        with pytest.raises(reader.DamagedJSON, match="nested deeper than 64 levels"):
            reader.loads_json(text)
    assert reader.loads_json('{"loss": 1e999, "x": -1e400, "n": ' + "9" * 5000 + ', "y": 1.5e-3, "z": 12}') == \
        {"loss": None, "x": None, "n": None, "y": 0.0015, "z": 12}


# --- 11. a probe loop that raised ---------------------------------------------------------------------


def probe_loop(out: Path, fail_at: int, error: BaseException):
    import torch

    from minitrain.probe import attach

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with attach(model, opt, out, telemetry="basic") as probe:
        for step in range(100):
            ids = torch.randint(0, 16, (4, 6), generator=torch.Generator().manual_seed(step))
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1, 1).flatten())
            loss.backward()
            probe.log(loss, ids)
            opt.step()
            opt.zero_grad()
            if step + 1 == fail_at:
                raise error


@pytest.mark.parametrize("error, status, line", [(ValueError("the data loader broke\nsecond line"), "failed",
                                                  "ValueError: the data loader broke (during step 30)"),
                                                 (KeyboardInterrupt(), "interrupted", "KeyboardInterrupt (during step 30)")])
def test_a_probe_loop_that_raised_is_not_recorded_finished(tmp_path, error, status, line):
    with pytest.raises(type(error)):
        probe_loop(tmp_path / "run", 30, error)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (manifest["status"], manifest["error"]) == (status, line)
    assert (results["status"], results["steps_done"], results["error"]) == (status, 30, line)
    proc = run_cli("index", str(tmp_path))
    assert proc.returncode == 0 and f">{status}<" in (tmp_path / "index.html").read_text()


def test_a_probe_left_open_at_an_unhandled_exception_is_recorded_failed(tmp_path):
    """The interpreter sets sys.last_value to an unhandled exception before it runs the atexit functions,
    where the probe closes a run its loop left open."""
    import torch

    from minitrain import probe as probe_module

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    p = probe_module.attach(model, opt, tmp_path / "run", telemetry="basic")
    had = getattr(sys, "last_value", None)
    sys.last_value = RuntimeError("CUDA out of memory")
    try:
        probe_module._close_at_exit(lambda: p)
    finally:
        sys.last_value = had
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert (manifest["status"], manifest["error"]) == ("failed", "RuntimeError: CUDA out of memory (during step 0)")
