"""Shared fixtures: small configs that train in a second or two, and a CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minitrain.config import build_config

ROOT = Path(__file__).resolve().parents[1]

# A small run: same model and data, few steps. K must be < steps.
SMALL = ["steps=120", "ckpt_every=20", "eval_every=20", "spectral_every=40", "warmup_steps=20", "progress=false"]


def small_config(*overrides: str):
    return build_config({}, [*SMALL, *overrides])


def small_args(*overrides: str) -> list[str]:
    out = []
    for kv in [*SMALL, *overrides]:
        out += ["--set", kv]
    return out


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False):
    """Run `python -m minitrain ARGS` in a subprocess; returns CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "minitrain", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"minitrain {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


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
    from minitrain import loop

    exp = tmp_path_factory.mktemp("experiments")
    out = exp / "18-baseline"
    loop.train(small_config(), out)
    return out
