"""Blind mode: runs whose files do not say which fault they carry, and the sealed store that does.

Two shuffled labs, each three runs in folders 01, 02, 03 whose fault is drawn without replacement:

    spike     experiments/19-blind/      the three injections (scale, bad_batch, v_corrupt)
    break-it  experiments/19-break-it/   the three breaks (init_scale=100, warmup_steps=0, causal_mask=false)

A blind run is an ordinary run with `blind: true`, which makes the loop withhold (see minitrain/run/redact.py):
the injection and break fields in manifest.json and config.yaml, the config and trunk hashes (three
candidate configs are easy to hash and compare), the injection record, each metrics row's `injected`
field and the batch's row indices (an injected batch has none). What remains is the evidence a learner is
meant to read: loss, lr, gradient norms, per-parameter statistics, batch composition.

Honesty model (no cryptography against the learner): the truth is kept in plain JSON in
`LAB/.sealed/mapping.json`, with a random salt. `LAB/SEALED.json` publishes sha256(salt + mapping); it
proves at the reveal that the mapping was not changed after the runs were made. Reading `.sealed/` before
the reveal is possible and is cheating, exactly like reading the solutions file early. Runs are trained in
folder order, so start/end times and file dates say nothing about the mapping either.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

from minitrain.core.course import LAB_K, LAB_SEED
from minitrain.core.errors import UserError
from minitrain.core.provenance import utc_now
from minitrain.lab import spoilers
from minitrain.run import files, reader, sealing

RUN_IDS = sealing.BLIND_RUN_IDS

# Each lab: its default folder and its three faults as config overrides.
LABS = {
    "spike": {
        "folder": "experiments/19-blind",
        "faults": {
            "scale": {"injection": "scale"},
            "bad_batch": {"injection": "bad_batch"},
            "v_corrupt": {"injection": "v_corrupt"},
        },
    },
    "break-it": {
        "folder": "experiments/19-break-it",
        "faults": {
            "bad_init": {"init_scale": 100.0},
            "no_warmup": {"warmup_steps": 0},
            "broken_mask": {"causal_mask": False},
        },
    },
}


# ---------------------------------------------------------------------------------------------------
# The sealed store
# ---------------------------------------------------------------------------------------------------


def mapping_digest(salt: str, mapping: dict) -> str:
    return hashlib.sha256((salt + json.dumps(mapping, sort_keys=True)).encode()).hexdigest()


def sealed_path(folder: Path) -> Path:
    return Path(folder) / ".sealed" / "mapping.json"


def public_path(folder: Path) -> Path:
    return Path(folder) / spoilers.SEALED


def read_public(folder: Path) -> dict:
    path = public_path(folder)
    if not path.exists():
        raise UserError(f"{folder} holds no sealed blind lab (no SEALED.json); make it with "
                        "'just phase-19-blind' or 'just break-it-shuffled'")
    return reader.read_json(path, "sealed-lab file")


def open_mapping(folder: Path) -> dict:
    """The secret mapping {run id: {"fault": key, "overrides": {...}}}, checked against the published hash."""
    public = read_public(folder)
    secret = reader.read_json(sealed_path(folder), "sealed mapping")
    digest = mapping_digest(secret.get("salt", ""), secret.get("mapping", {}))
    if digest != public.get("mapping_sha256"):
        raise UserError(f"{sealed_path(folder)} does not match the hash published in {public_path(folder)}: "
                        "the mapping was changed after the runs were made; re-make the lab with --force")
    return secret["mapping"]


def draw_mapping(lab: str, randomize: bool, steps: int, rng: secrets.SystemRandom | None = None) -> dict:
    """Shuffle the lab's faults over 01..03. A blind spike run never reproduces a named run's numbers: each
    draws its own seed (not the lab's 42) and its own K (in 20-70% of the run, not the lab's K); with
    `randomize`, the magnitude too. Everything drawn is recorded in the sealed mapping."""
    rng = rng or secrets.SystemRandom()
    faults = list(LABS[lab]["faults"])
    rng.shuffle(faults)
    mapping = {}
    lab_k = LAB_K if steps > LAB_K else steps // 2
    for run_id, fault in zip(RUN_IDS, faults):
        overrides = dict(LABS[lab]["faults"][fault])
        if lab == "spike":
            lo, hi = max(1, int(steps * 0.2)), max(2, int(steps * 0.7))
            overrides["seed"] = rng.choice([s for s in range(1, 10_000) if s != LAB_SEED])
            overrides["injection_step"] = rng.choice([k for k in range(lo, hi + 1) if k != lab_k] or [lab_k])
            if randomize:
                if fault == "scale":
                    overrides["injection_scale"] = round(rng.uniform(20.0, 100.0), 1)
                if fault == "v_corrupt":
                    overrides["injection_factor"] = round(10 ** rng.uniform(1.5, 2.5), 1)
        mapping[run_id] = {"fault": fault, "overrides": overrides}
    return mapping


def make_lab(lab: str, folder: Path, base_overrides: list[str], randomize: bool = False,
             only: str | None = None, force: bool = False, say=lambda line: None) -> list[str]:
    """Seal a shuffled mapping into `folder` (unless one exists) and train its runs (or only `only`).
    Returns one summary line per run; `say(line)` hears each as it happens, and each run's start (a run takes
    minutes, and a progress bar shows only on a terminal)."""
    from minitrain.core.config import build_config
    from minitrain.lab.runs import summary_line, train_run

    folder = Path(folder)
    if lab not in LABS:
        raise UserError(f"unknown blind lab '{lab}'; valid: {', '.join(LABS)}")
    if only is not None and only not in RUN_IDS:
        raise UserError(f"--run expects one of {', '.join(RUN_IDS)}, got {only!r}")
    base = build_config({}, list(base_overrides))  # validate before anything is written
    exists = public_path(folder).exists()
    if exists and force and only is None:
        for run_id in RUN_IDS:  # none of the old runs may be live or hold a learner's files (refused before
            files.refuse_if_live(folder / run_id)  # anything is deleted)
            files.refuse_foreign_files(folder / run_id, "a new draw")
        for run_id in RUN_IDS:  # a fresh draw replaces every run of the old one
            files.remove_run_dir(folder / run_id)
        (folder / spoilers.REVEALED).unlink(missing_ok=True)
        exists = False
    if exists:
        public = read_public(folder)
        if public.get("lab") != lab:
            raise UserError(f"{folder} holds the sealed '{public.get('lab')}' lab, not '{lab}'; choose another folder")
        if public.get("base_overrides") != list(base_overrides):
            raise UserError(f"{folder} was made with --set {' '.join(public.get('base_overrides') or []) or '(none)'}; "
                            "pass the same settings, or --force to draw and run a new lab")
        mapping = open_mapping(folder)
    else:
        lab_files = (".sealed", spoilers.SEALED, spoilers.REVEALED, spoilers.SPOILED, *RUN_IDS)
        if folder.exists() and any(p.name not in lab_files for p in folder.iterdir()):
            raise UserError(f"{folder} already holds other files; choose another --experiments folder")
        mapping = draw_mapping(lab, randomize, base.steps)
        salt = secrets.token_hex(16)
        files.atomic_write_json(sealed_path(folder), {"lab": lab, "salt": salt, "mapping": mapping})
        files.atomic_write_json(public_path(folder), {
            "lab": lab, "runs": list(RUN_IDS), "random": randomize, "base_overrides": list(base_overrides),
            "mapping_sha256": mapping_digest(salt, mapping), "sealed_at": utc_now(),
            "note": "which fault each run carries is sealed in .sealed/ until 'minitrain reveal NAME --lab "
                    f"{'blind' if lab == 'spike' else 'break-it'}'; reading it before is cheating",
        })
    lines = []
    for run_id in RUN_IDS:  # always in folder order: times and dates then say nothing about the mapping
        if only is not None and run_id != only:
            continue
        out = folder / run_id
        if (out / "results.json").exists() and not force:
            lines.append(f"{folder.name}/{run_id}: already trained (--force re-runs it)")
            say(lines[-1])
            continue
        overrides = [f"{k}={v}" for k, v in mapping[run_id]["overrides"].items()]
        cfg = build_config({}, [*base_overrides, *overrides, "blind=true"])
        say(f"{folder.name}/{run_id}: training {cfg.steps} steps (run {RUN_IDS.index(run_id) + 1} of "
            f"{len(RUN_IDS)}; what it carries is sealed)")
        res = train_run(cfg, out, force=force or out.exists(), fork=False)
        lines.append(summary_line(f"{folder.name}/{run_id}", res))
        say(lines[-1])
    return lines


def reveal_mapping(folder: Path, by: str) -> dict:
    """Open the mapping and publish it in LAB/REVEALED.json (after a learner sealed their diagnoses)."""
    mapping = open_mapping(folder)
    spoilers.mark_revealed(folder, by, {"mapping": mapping})
    return mapping


def true_config(run: Path):
    """The full config of a blind run (secret fields included), for remediation after the reveal."""
    from minitrain.core.config import build_config

    run = Path(run)
    folder = run.parent
    if not (folder / spoilers.REVEALED).exists():
        raise UserError(f"{run} is a blind run and its lab is not revealed yet; reveal it first "
                        "('minitrain reveal NAME --lab blind|break-it')")
    mapping = open_mapping(folder)
    if run.name not in mapping:
        raise UserError(f"{run} is not one of the sealed runs {', '.join(mapping)}")
    base = reader.read_config(run)
    base.update(mapping[run.name]["overrides"])
    base["blind"] = False
    return build_config(base, [])
