"""Shared fixtures: small configs that train in a second or two, and a CLI runner."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from minitrain.core.config import build_config

ROOT = Path(__file__).resolve().parents[1]

# A small run: same model and data, few steps. K must be < steps.
SMALL = ["steps=120", "ckpt_every=20", "eval_every=20", "spectral_every=40", "warmup_steps=20", "progress=false",
         "ckpt_keep_last=0"]  # keep every checkpoint: tests fork at any K (retention: tests/test_faults.py)


def small_config(*overrides: str):
    return build_config({}, [*SMALL, *overrides])


def small_args(*overrides: str) -> list[str]:
    out = []
    for kv in [*SMALL, *overrides]:
        out += ["--set", kv]
    return out


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False) -> CliResult:
    """`minitrain ARGS` in this process (cli.main), with its own working folder, environment, stdout and stderr.
    Starting a fresh Python + torch per call cost ~3.5 s each; the command's behaviour is the same."""
    from minitrain import cli

    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.update(env or {})
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as e:  # argparse's --help and --version
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    proc = CliResult(code, out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"minitrain {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def run_cli_subprocess(*args: str, cwd: Path | None = None, env: dict | None = None):
    """`python -m minitrain ARGS` in a fresh process: for the few tests that prove the installed command."""
    return subprocess.run([sys.executable, "-m", "minitrain", *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)


def assert_one_line_error(proc, *needles: str):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


@pytest.fixture(scope="session")
def small_baseline(tmp_path_factory):
    """A finished small baseline run folder (18-baseline layout) inside an experiments folder."""
    from minitrain.lab.runs import train_run

    exp = tmp_path_factory.mktemp("experiments")
    out = exp / "18-baseline"
    train_run(small_config(), out)
    return out


def cli_commands() -> list[list[str]]:
    """Every command line that has its own --help: [] (the top level), each command, each sub-command."""
    from minitrain import cli

    out = [[]]
    for command in cli.COMMANDS:
        out.append([command.name])
        out += [[command.name, action.name] for action in command.actions]
    return out
