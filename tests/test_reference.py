"""Reference outputs: the sha256 of the metrics.jsonl of a few runs, committed in tests/data/reference.json.

The other "same bytes" tests compare two runs of the code under test (a fork with a run from scratch, a
resume with an uninterrupted run); these compare with bytes pinned by an earlier commit, so a change that
moves the numerics fails here. When a change moves them on purpose: `just regen-reference`
(scripts/regen_reference.py), and the commit says so (docs/metrics.md, "Reference outputs").

Pinned:
  small-*      the small config (conftest.SMALL, 120 steps) and its three lab injections forked at step 60
  lab-short/*  `minitrain lab --injection-step 100 --set steps=120 --set ckpt_keep_steps=100`: the lab's own
               config but its length. K = 100 is the lab's first checkpoint (ckpt_every 100) and the end of
               its warmup, so the injection runs fork at a checkpoint exactly as the full lab's do at 500
               (kept as 500 is: ckpt_keep_steps), and run 20 steps past K: the shortest lab that still forks
               at K and shows each injection's first steps.
  small-lab-k50/*  the small lab at K = 50 made one run after another (test_lab_parallel.py compares the
               parallel lab with it)

metrics.jsonl holds no clock, path or host (times are in results.json and manifest.json: see
test_metrics_rows_hold_no_time_path_or_host), so its bytes depend on the config, the code and the torch
build only; the whole file is hashed, no projection.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import LAB_LETTERS, SMALL, SMALL_K, run_cli

REFERENCE = Path(__file__).resolve().parent / "data" / "reference.json"
LAB_SHORT_K, LAB_SHORT_STEPS = 100, 120
SMALL_LAB_K = 50
LAB_INJECTIONS = ("none", *LAB_LETTERS)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metrics_sha(run: Path) -> str:
    return sha256((Path(run) / "metrics.jsonl").read_bytes())


def pinned() -> dict:
    return json.loads(REFERENCE.read_text())


def small_lab_shas(exp: Path) -> dict[str, str]:
    """conftest.small_lab's four runs: {run folder name: sha}."""
    return {p.name: metrics_sha(p) for p in sorted(Path(exp).iterdir()) if (p / "metrics.jsonl").exists()}


def make_lab_short(exp: Path) -> dict[str, str]:
    """`minitrain lab` at LAB_SHORT_STEPS steps, K = LAB_SHORT_K, into `exp`: {run folder name: sha}."""
    from minitrain.run.reader import lab_run_name

    run_cli("lab", "--experiments", str(exp), "--injection-step", str(LAB_SHORT_K), "--set", f"steps={LAB_SHORT_STEPS}",
            "--set", f"ckpt_keep_steps={LAB_SHORT_K}", "--no-report", check=True)
    names = [lab_run_name(inj, 42, LAB_SHORT_K) for inj in LAB_INJECTIONS]
    return {name: metrics_sha(exp / name) for name in names}


def make_small_lab_sequential(exp: Path) -> dict[str, str]:
    """The small lab at K = SMALL_LAB_K (seed 42), one `lab-run` after another in this process."""
    from minitrain.core.config import build_config
    from minitrain.lab.runs import lab_run

    out = {}
    for inj in LAB_INJECTIONS:
        cfg = build_config({}, [*SMALL, "seed=42", f"injection={inj}", f"injection_step={SMALL_LAB_K}"])
        folder, _ = lab_run(cfg, exp)
        out[folder.name] = metrics_sha(folder)
    return out


def test_a_120_step_run_and_its_forks_at_60_have_the_pinned_bytes(small_lab):
    assert small_lab_shas(small_lab) == pinned()["small"]
    for letter in LAB_LETTERS.values():  # forked from the baseline's checkpoint at K, not trained from scratch
        manifest = json.loads((small_lab / f"19-injection-{letter}" / "manifest.json").read_text())
        assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": SMALL_K}


def test_the_lab_at_120_steps_has_the_pinned_bytes(tmp_path):
    assert make_lab_short(tmp_path) == pinned()["lab-short"]
    for name in list(pinned()["lab-short"])[1:]:
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": LAB_SHORT_K}


def test_metrics_rows_hold_no_time_path_or_host(small_lab):
    """What makes the hash of a whole metrics.jsonl portable between machines and folders."""
    run = small_lab / "19-injection-A"
    data = (run / "metrics.jsonl").read_bytes()
    keys = {k for line in data.splitlines() for k in json.loads(line)}
    assert not {k for k in keys if any(w in k for w in ("time", "second", "wall", "date", "host", "path"))}
    manifest = json.loads((run / "manifest.json").read_text())
    for value in (str(small_lab), manifest["started"][:10], manifest["hardware"]["platform"]):
        assert value.encode() not in data
