"""Every command that reads a run, fuzzed: Hypothesis damages a copy of a real small run (truncated or
deleted files, bytes of garbage, fields of the wrong type, huge or deeply nested values, numbers past float
range, symlinks to elsewhere, duplicated, dropped or reordered steps, hostile YAML) and each command must
end in a result (exit 0) or one line on stderr (exit 2), never a traceback, never a write outside the run
and its own outputs, never a hang (a generous alarm turns a hang into a failure instead of a stuck suite).

Examples per test: EXAMPLES (CI: derandomized, the same examples every run, within the suite's time);
`MINITRAIN_FUZZ=long pytest -n 0 tests/test_fuzz_readers.py` runs LONG_EXAMPLES fresh random ones per test
(docs/reliability.md records such a run, and says to cap its memory: a command that allocates without bound
then fails its example instead of the machine). A failing example prints the damage that broke it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from minitrain.views import index

LONG = os.environ.get("MINITRAIN_FUZZ") == "long"
# examples per test: (the five readers on one damaged folder, train --resume of one)
EXAMPLES = {"readers": 6, "resume": 3}
LONG_EXAMPLES = {"readers": 400, "resume": 60}
HANG = 300  # seconds one command may take before it counts as hung (a run of these takes well under 1)


def fuzz_settings(kind: str) -> settings:
    return settings(max_examples=(LONG_EXAMPLES if LONG else EXAMPLES)[kind], deadline=None, derandomize=not LONG,
                    database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------------
# Damage, as data (Hypothesis prints it when an example fails)
# ---------------------------------------------------------------------------------------------------

JSON_FILES = ["manifest.json", "results.json", "tokenizer.json", "diagnosis.json"]
READ_FILES = ["metrics.jsonl", *JSON_FILES, "config.yaml"]
WRITTEN = ["dashboard.html", "postmortem.md"]  # what the readers write into the run
KNOWN_KEYS = {"manifest.json": ["config", "injection", "forked_from", "status", "trunk_hash", "config_hash", "probe",
                                "ngram_baseline", "non_finite", "remedy", "started", "ended", "seed", "name"],
              "results.json": ["status", "steps_done", "final_val_loss", "ngram_val_loss", "final_train_loss",
                               "stopped_at_step", "non_finite", "final_val_ppl"],
              "diagnosis.json": ["leaf", "anomaly_step", "title", "cause", "path"],
              "tokenizer.json": ["model", "added_tokens", "pre_tokenizer"]}
ROW_KEYS = ["step", "loss", "lr", "grad_norm", "grad_norm_clipped", "clipped", "val_loss", "injected", "logit_max",
            "act", "params", "sigma", "nonfinite", "batch", "loss_regular", "extra"]
CONFIG_KEYS = ["injection", "injection_step", "blind", "vocab_size", "steps", "grad_clip", "lr_max", "batch_size",
               "remedy", "seed"]

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=12))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)
# a value as JSON text: ordinary values, and what json.dumps never writes
VALUE = st.one_of(
    _json.map(json.dumps),
    st.sampled_from(["NaN", "-Infinity", "1e999", "-1e400", "9" * 400, "9" * 5000, '"' + "x" * 100_000 + '"', '"</script><b>"']),
    st.sampled_from([2, 64, 65, 1000, 200_000]).map(lambda n: "[" * n + "]" * n),
    st.sampled_from([3, 70, 5000]).map(lambda n: '{"a": ' * n + "1" + "}" * n),
)
HOSTILE_YAML = [
    "ckpt_keep_steps: [&a [1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], "
    "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], [*e,*e,*e,*e,*e,*e,*e,*e,*e]]\n",
    "steps: " + "[" * 100_000 + "\n", "- a\n- b\n", "? [1, 2]\n: x\n", "seed: " + "9" * 5000 + "\n", "steps: !!python/object:os.system ls\n",
    "injection_sentence: " + "x" * 200_000 + "\n", "", "{",
]

FRACTION = st.floats(0, 1)
OPS = st.one_of(
    st.tuples(st.just("truncate"), st.sampled_from(READ_FILES), FRACTION),
    st.tuples(st.just("delete"), st.sampled_from(READ_FILES)),
    st.tuples(st.just("garbage"), st.sampled_from(READ_FILES), FRACTION, st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("field"), st.sampled_from(JSON_FILES), st.text(max_size=6) | st.sampled_from(sum(KNOWN_KEYS.values(), [])), VALUE),
    st.tuples(st.just("config"), st.sampled_from(CONFIG_KEYS), VALUE),
    st.tuples(st.just("row"), FRACTION, st.sampled_from(ROW_KEYS), VALUE),
    st.tuples(st.just("inner"), FRACTION, st.sampled_from(["params", "batch", "sigma"]), st.sampled_from(["g", "rows", "x"]), VALUE),
    st.tuples(st.just("rows"), st.sampled_from(["duplicate", "swap", "drop", "reverse", "blank"]), FRACTION, FRACTION),
    st.tuples(st.just("symlink"), st.sampled_from([*READ_FILES, *WRITTEN, ".lock"]),
              st.sampled_from(["outside", "devnull", "devzero", "folder", "dangling", "loop", "fifo"])),
    st.tuples(st.just("yaml"), st.sampled_from(HOSTILE_YAML)),
)


def apply(run: Path, outside: Path, op: tuple) -> None:
    """Damage RUN by one op (see OPS); an op that does not apply to what is there does nothing."""
    kind, *a = op
    if kind in ("truncate", "garbage", "delete", "field") and not regular(run / a[0]):
        return
    if kind == "truncate":
        data = (run / a[0]).read_bytes()
        (run / a[0]).write_bytes(data[:int(len(data) * a[1])])
    elif kind == "delete":
        (run / a[0]).unlink()
    elif kind == "garbage":
        data = (run / a[0]).read_bytes()
        at = int(len(data) * a[1])
        (run / a[0]).write_bytes(data[:at] + a[2] + data[at:])
    elif kind in ("field", "config"):
        name = a[0] if kind == "field" else "manifest.json"
        path = run / name
        if not regular(path):
            return
        try:
            obj = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):  # damaged by an earlier op: leave it as it is
            return
        if not isinstance(obj, dict):
            return
        if kind == "config" and isinstance(obj.get("config"), dict):
            obj["config"][a[0]] = "@VALUE@"
        elif kind == "field":
            obj[a[1]] = "@VALUE@"
        path.write_text(json.dumps(obj).replace('"@VALUE@"', a[-1], 1))
    elif kind in ("row", "inner", "rows"):
        path = run / "metrics.jsonl"
        if not regular(path):
            return
        lines = path.read_bytes().split(b"\n")
        lines = lines[:-1] if lines and not lines[-1] else lines
        if not lines:
            return
        i = min(int(len(lines) * a[0 if kind != "rows" else 1]), len(lines) - 1)
        if kind == "rows":
            j = min(int(len(lines) * a[2]), len(lines) - 1)
            how = a[0]
            if how == "duplicate":
                lines.insert(i, lines[i])
            elif how == "swap":
                lines[i], lines[j] = lines[j], lines[i]
            elif how == "drop":
                del lines[i]
            elif how == "reverse":
                lines.reverse()
            else:
                lines.insert(i, b"")
        else:
            try:
                row = json.loads(lines[i])
            except (ValueError, RecursionError):
                return
            if not isinstance(row, dict):
                return
            if kind == "row":
                row[a[1]] = "@VALUE@"
            else:
                inner = row.get(a[1])
                if isinstance(inner, dict) and a[1] == "params" and inner:
                    inner = next(iter(inner.values()))
                if not isinstance(inner, dict):
                    return
                inner[a[2]] = "@VALUE@"
            lines[i] = json.dumps(row).replace('"@VALUE@"', a[-1], 1).encode()
        path.write_bytes(b"\n".join(lines) + b"\n")
    elif kind == "symlink":
        path = run / a[0]
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        target = {"outside": outside / "victim.json", "devnull": Path("/dev/null"), "devzero": Path("/dev/zero"),
                  "folder": outside, "dangling": outside / "nothing-here", "loop": path}.get(a[1])
        if a[1] == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(target)
    elif kind == "yaml":
        if (run / "config.yaml").is_symlink():
            (run / "config.yaml").unlink()
        (run / "config.yaml").write_text(a[0])


def regular(path: Path) -> bool:
    """A regular file of the run itself (the damage never writes through a symlink an earlier op made)."""
    return path.is_file() and not path.is_symlink()


# ---------------------------------------------------------------------------------------------------
# What every command must do
# ---------------------------------------------------------------------------------------------------


class Hung(BaseException):
    """A command ran past HANG seconds (BaseException: no handler of the CLI's catches it)."""


def command(*args: str, codes=(0, 2)):
    """Run `minitrain ARGS` in this process; fail the example on a traceback, another exit code, a second
    line of error, or a hang."""
    def alarm(signum, frame):
        raise Hung(f"minitrain {' '.join(args)[:200]} ran past {HANG} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG)
    try:
        proc = run_cli(*args)
    except BaseException as e:  # a traceback: the command's bug, shown with the damage Hypothesis prints
        pytest.fail(f"minitrain {' '.join(args)[:200]} raised {type(e).__name__}: {str(e)[:300]}\n"
                    + "".join(traceback.format_exception(e))[-3000:], pytrace=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr, err[-3000:]
    assert proc.returncode in codes, (args, proc.returncode, err[-2000:])
    if proc.returncode == 2:
        assert len(err.splitlines()) == 1 and err.startswith("minitrain: error: "), err[:2000]
    return proc


def fingerprint(folder: Path, skip: set[Path] = frozenset()) -> dict[str, str]:
    """sha256 of every regular file under FOLDER, not following symlinks, except under SKIP."""
    out = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if Path(root, d) not in skip]
        for name in names:
            p = Path(root, name)
            if p not in skip and p.is_file() and not p.is_symlink():
                out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def lay_out(tmp: Path, source: Path, checkpoints: bool = False) -> tuple[Path, Path]:
    """TMP/exp/run (a copy of SOURCE) beside TMP/outside (a file and a folder that nothing may write)."""
    if tmp.exists():
        for p in tmp.rglob("*"):  # a FIFO or a symlink loop left by the last example: rmtree copes with neither
            if p.is_symlink() or p.is_fifo():
                p.unlink()
        shutil.rmtree(tmp)
    run, outside = tmp / "exp" / "run", tmp / "outside"
    keep = shutil.ignore_patterns("dashboard.html", *([] if checkpoints else ["checkpoints"]))
    shutil.copytree(source, run, ignore=keep)
    outside.mkdir(parents=True)
    (outside / "victim.json").write_text('{"mine": "do not touch"}')
    (outside / "keep").mkdir()
    (outside / "keep" / "notes.md").write_text("mine")
    return run, outside


@pytest.fixture(scope="module")
def fuzz_base(small_baseline, tmp_path_factory) -> Path:
    """The small baseline as a reader sees it, without its checkpoints (a reader never opens them)."""
    base = tmp_path_factory.mktemp("fuzz-base") / "run"
    shutil.copytree(small_baseline, base, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    return base


@fuzz_settings("readers")
@given(ops=st.lists(OPS, min_size=1, max_size=3))
def test_every_reader_of_a_damaged_run_ends_in_a_result_or_one_line(tmp_path, fuzz_base, ops):
    run, outside = lay_out(tmp_path / "case", fuzz_base)
    sibling = run.parent / "sibling"
    shutil.copytree(fuzz_base, sibling, ignore=shutil.ignore_patterns("tokenizer.json"))
    for op in ops:
        apply(run, outside, op)
    tb = tmp_path / "case" / "tb"
    root = tmp_path / "case"
    before = fingerprint(root, skip={run, tb, run.parent / "index.html", run.parent / index.ROW_CACHE})
    command("diagnose", str(run), "--spoil")
    command("dashboard", str(run))
    command("postmortem", str(run), "--force")
    command("export", str(run), "--tensorboard", str(tb), "--force")
    command("index", str(run.parent))
    assert fingerprint(root, skip={run, tb, run.parent / "index.html", run.parent / index.ROW_CACHE}) == before, "a write outside the run"
    # the undamaged sibling keeps its line in the index, whatever its neighbour holds
    row = next(line for line in (run.parent / "index.html").read_text().splitlines() if 'data-run="sibling"' in line)
    assert '<td data-col="status">finished</td>' in row, row


@pytest.fixture(scope="module")
def resume_base(small_baseline, tmp_path_factory) -> Path:
    """The small baseline as a run killed at step 110 leaves it: rows to 109, its checkpoint at 100, no results."""
    base = tmp_path_factory.mktemp("resume-base") / "run"
    shutil.copytree(small_baseline, base, ignore=shutil.ignore_patterns("dashboard.html", "step-0000[0-8]*", "step-000120"))
    lines = (base / "metrics.jsonl").read_bytes().split(b"\n")
    (base / "metrics.jsonl").write_bytes(b"\n".join(lines[:110]) + b"\n")
    (base / "results.json").unlink()
    manifest = json.loads((base / "manifest.json").read_text())
    (base / "manifest.json").write_text(json.dumps({**manifest, "status": "running", "ended": None}))
    return base


@fuzz_settings("resume")
@given(ops=st.lists(OPS.filter(lambda op: op[0] != "symlink" or op[1] != ".lock"), min_size=1, max_size=2))
def test_resume_of_a_damaged_run_ends_in_a_result_or_one_line(tmp_path, resume_base, ops):
    """`train --resume` continues the run (exit 0, or 3 if it diverges) or refuses it in one line. (A
    symlinked .lock is the lock's own test: tests/test_faults.py.)"""
    run, outside = lay_out(tmp_path / "case", resume_base, checkpoints=True)
    for op in ops:
        apply(run, outside, op)
    root = tmp_path / "case"
    before = fingerprint(root, skip={run, run.parent / "index.html", run.parent / index.ROW_CACHE})
    command("train", "--resume", str(run), codes=(0, 2, 3))
    assert fingerprint(root, skip={run, run.parent / "index.html", run.parent / index.ROW_CACHE}) == before, "a write outside the run"
