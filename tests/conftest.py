"""Shared fixtures: small configs that train in a second or two, and a CLI runner."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from minitrain.core.config import build_config
from minitrain.core.course import LAB_LETTERS  # noqa: F401 - the tests import it from here

ROOT = Path(__file__).resolve().parents[1]
# `./dev test` runs the suite with MINITRAIN_VIA set (hints then read `./dev minitrain ...`, core/hints.py): the
# tests read the hints as a shell with the venv active prints them, and set it themselves where they test it
os.environ.pop("MINITRAIN_VIA", None)
SMALL_K = 60  # the small lab's injection step (small_lab; test_injections.py, test_learner.py, test_faults.py)

# A small run: same model and data, few steps. K must be < steps. Validation on 64 rows (one batch, not the
# default 256): the tests read that a validation happened and when, not how precise it is.
SMALL = ["steps=120", "ckpt_every=20", "eval_every=20", "spectral_every=40", "warmup_steps=20", "val_max_rows=64",
         "progress=false", "ckpt_keep_last=0"]  # keep every checkpoint: tests fork at any K (test_faults.py: retention)


def ctrl_c_as_at_a_terminal() -> None:
    """Popen's preexec_fn for a child a test sends SIGINT: the default disposition back. A test run started
    in the background by a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and a Python child
    then never raises KeyboardInterrupt: the test would wait for it forever."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


class ForkedCLI:
    """`minitrain ARGV` as a real process forked from this one (runner.ChildProcess's way, what `minitrain lab`
    does): a separate process that can be SIGKILLed anywhere and holds its own lock, without the ~3.5 s of CPU
    a fresh interpreter spends importing torch. Output goes to /dev/null. The part of Popen the tests use."""

    def __init__(self, *argv: str):
        import multiprocessing

        from minitrain.lab import runner

        runner.warm_up()  # one OpenMP thread here before the fork, as the lab keeps it
        runner.warm_up_runs(small_config())
        self.process = multiprocessing.get_context("fork").Process(target=_cli_child, args=(list(argv),))
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return None if self.process.is_alive() else self.process.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()


def as_a_new_process() -> None:
    """In a child forked from the test process: the signal dispositions a new `python` starts with, not the
    test process's (a Ray driver started by an earlier test in this worker handles SIGTERM, and the runner
    defers to such a handler), and its output to /dev/null."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)


def _cli_child(argv: list[str]) -> None:
    from minitrain import cli

    as_a_new_process()
    sys.exit(cli.main(argv))


def assert_one_line_error(proc, *needles: str):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under FOLDER (hidden ones included) by relative path: the sha256 of its bytes. A run's
    `.lock` counts by its presence only: its text names the last process that took the lock, which a
    command that only checks the run (a --resume of a finished run) may be, in another xdist worker."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): "lock" if p.name == ".lock" else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def read_only(folder: Path):
    """Hand FOLDER to the tests that share it, then fail if one of them wrote into it: a test that changes a
    run copies it first (shutil.copytree into its tmp_path). The check compares bytes, not file modes: the
    suite may run as root, which ignores a read-only mode."""
    before = fingerprint(folder)
    yield folder
    after = fingerprint(folder)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a test wrote into the shared fixture {folder}: {changed[:10]}"


def make_small_baseline(out: Path) -> Path:
    """The small config's run (SMALL, 120 steps) into `out`, as `minitrain train` makes it."""
    from minitrain.lab.runs import train_run

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


def make_small_lab(baseline: Path, exp: Path) -> Path:
    """`exp` with a copy of `baseline` and the lab's three injections at SMALL_K forked from it."""
    from minitrain import trainer

    shutil.copytree(baseline, exp / "18-baseline")
    for name, letter in LAB_LETTERS.items():
        trainer.train(small_config(f"injection={name}", f"injection_step={SMALL_K}"), exp / f"19-injection-{letter}")
    return exp


def built_once(tmp_path_factory, name: str, make) -> Path:
    """`make(folder)` run once per test session, not once per xdist worker: the workers share the session's
    base temp folder, and the first to need NAME builds it under a lock while the others wait for it."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder above the workers' own, the same for every worker of this session
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half way left it
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def small_baseline(tmp_path_factory):
    """A finished small baseline run folder (18-baseline layout); read-only (read_only)."""
    exp = built_once(tmp_path_factory, "experiments", lambda exp: make_small_baseline(exp / "18-baseline"))
    yield from read_only(exp / "18-baseline")


@pytest.fixture(scope="session")
def small_lab(small_baseline, tmp_path_factory):
    """An experiments folder: a copy of the small baseline and the lab's three injections at SMALL_K forked
    from it (19-injection-A/B/C, no pages); read-only (read_only)."""
    yield from read_only(built_once(tmp_path_factory, "small-lab", lambda exp: make_small_lab(small_baseline, exp)))


@pytest.fixture(scope="session")
def small_blind_lab(small_baseline, tmp_path_factory):
    """A sealed, shuffled spike lab in experiments/19-blind/ (small runs), beside a copy of the baseline;
    read-only (a test that reveals it works on a copy)."""
    from minitrain.lab import blind

    def make(root: Path) -> None:
        shutil.copytree(small_baseline, root / "experiments" / "18-baseline")
        blind.make_lab("spike", root / "experiments" / "19-blind", list(SMALL))

    yield from read_only(built_once(tmp_path_factory, "blind", make) / "experiments")


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = os.environ.get("MINITRAIN_TEST_ARTIFACTS")  # a folder for the browser tests' screenshots


def screenshot(page, name: str) -> None:
    """A full-page PNG of PAGE as ARTIFACTS/NAME, to look at, when MINITRAIN_TEST_ARTIFACTS names a folder; else
    nothing (a full-page screenshot costs a second or two of Chromium and checks nothing)."""
    if ARTIFACTS:
        Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(ARTIFACTS) / name), full_page=True)


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium through Playwright, launched once per worker (each test opens its own
    context, so nothing is shared between tests but the process); skipped when it is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright python package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()
