"""A run folder trained by loop.py: from scratch, resumed from its last checkpoint, or forked from a sibling
run's checkpoint (an injection run shares steps 0..K-1 with its baseline). loop.py is the training; this is
the run folder's life around it: claim and lock the folder, pick and verify a donor (run/donors.py), restore
a checkpoint, write the config, tokenizer, manifest and results (run/record.py, run/provenance.py)."""
from __future__ import annotations

import time
from pathlib import Path

import torch

from minitrain.core import distributed
from minitrain.core.config import TrainConfig, build_config
from minitrain.core.errors import UserError
from minitrain.core.injections import injection_settings
from minitrain.core.remedy import remedy_record, remedy_restore
from minitrain.core.tokenizer import tokenizer_json
from minitrain.loop import Run, build_run, evaluate, open_metrics, run_steps
from minitrain.run import files, reader, record, redact, sinks
from minitrain.run.donors import (NOT_FORKED, check_donor_unchanged, find_donor, fork_record, load_donor,
                                  recorded_donor)
from minitrain.core.provenance import now_iso
from minitrain.run.provenance import environment, numerics_change, process_environment


def train(cfg: TrainConfig, out: Path, force: bool = False, fork: bool = True,
          donor: tuple[Path, int] | None = None, stop_at: int | None = None) -> dict:
    """Train a run into `out` from scratch, or forked from a sibling run's checkpoint when one fits
    (or from `donor` = (run folder, checkpoint step) when given: remediation forks from the faulty run).
    `stop_at`: end at that step with status 'stopped' (the schedule still spans cfg.steps; `minitrain explore`
    runs the lab's schedule only as far as it measures; `resume` would finish such a run)."""
    out = Path(out)
    run = build_run(cfg, out)  # validates everything before the folder is touched
    found = find_donor(cfg, out) if fork and not donor else None  # before the folder is touched: ranks agree
    donor = donor or found
    start, forked = 0, dict(NOT_FORKED)
    if donor:  # load and verify the donor's checkpoint and rows before the folder is touched
        donor_dir, step = donor
        weights, opt_t, meta, prefix = load_donor(cfg, donor_dir, step, same_trunk=found is not None)
        files.restore(run.model, run.opt, weights, opt_t, files.checkpoint_dir(donor_dir, step))
        run.telemetry.restore(meta.get("telemetry"))
        start, forked = step, fork_record(donor_dir, step, meta)
        forked.update(numerics_change(_manifest_of(donor_dir), f"the donor {Path(donor_dir).name}", [],
                                      announce=distributed.is_main()))
    process_environment()  # its subprocesses run before the lock is taken
    claimed: dict = {}
    distributed.on_main(lambda: claimed.update(lock=files.claim_run_dir(out, force)))  # DDP: rank 0 writes
    run.lock = claimed.get("lock")
    if not distributed.is_main():
        run.out = None
    try:
        if run.out:
            files.write_config_yaml(out / "config.yaml", redact.public_config(cfg))  # BLIND: withheld fields
            write_tokenizer(run)
            if donor:
                files.atomic_write_bytes(out / "metrics.jsonl", prefix)
            run.metrics = open_metrics(out / "metrics.jsonl")
            write_manifest(run, "running", {**environment(run.device), **forked, "started": now_iso()})
        return _drive(run, start, forked, stop_at)
    except OSError as e:
        raise _disk_error(e, out) from None
    finally:
        if run.lock:
            run.lock.release()


def write_manifest(run: Run, status: str, extra: dict) -> None:
    """RUN/manifest.json of a run this process trains (run/record.py writes it)."""
    fields = {
        "seed": run.cfg.seed,
        "config": run.cfg.to_dict(),
        "config_hash": run.cfg.hash(),
        "trunk_hash": run.cfg.trunk_hash(),
        "data_manifest": run.data.manifest,
        "data_manifest_hash": run.data.manifest["hash"],
        "ngram_baseline": run.data.ngram,
        "injection": {**injection_settings(run.cfg), **({"record": run.inject.record} if run.inject and run.inject.record else {})},
        **extra,
    }
    if run.remedy:  # REMEDY (remedy.py): what the remedy did
        fields["remedy"] = remedy_record(run.remedy)
    if run.cfg.blind:  # BLIND (run/redact.py): withhold the injection / break settings until the reveal
        fields = redact.withhold_manifest(fields, run.cfg)
    record.write_manifest(run.out, status, fields)


def write_tokenizer(run: Run) -> None:
    """RUN/tokenizer.json, atomically (a full disk leaves the old file or none, never half of one)."""
    files.atomic_write_bytes(run.out / reader.TOKENIZER, tokenizer_json(run.data.tokenizer))


def _manifest_of(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    return reader.read_json(path, "manifest") if path.exists() else {}


def _disk_error(e: OSError, out: Path) -> UserError:
    """A write failed mid-run (a full disk, usually): one line, and the folder stays resumable."""
    if (Path(out) / "config.yaml").exists():
        return files.disk_error(e, fix=f"resume it with 'minitrain train --resume {out}' (the run folder is kept)")
    return files.disk_error(e)


def resume(out: Path, device: str | None = None, stop_at: int | None = None) -> dict:
    """Continue a stopped (or SIGKILLed) run from its last checkpoint; rows after it are dropped and redone,
    so the finished metrics file is byte-identical to an uninterrupted run, wherever it was killed (before
    its first checkpoint, between checkpoints, after its last one). `device` (cpu | cuda | auto) continues
    it elsewhere; checkpoints are CPU tensors, and under torchrun any number of processes works. `stop_at`: as
    in train (a retried `minitrain explore` run ends where it was meant to)."""
    out = Path(out)
    if not (out / "config.yaml").exists():
        raise UserError(f"{out} is not a run folder (no config.yaml); train it first with --out {out}"
                        + (" --force" if files.is_minitrain_run(out) else ""))
    process_environment()  # its subprocesses run before the lock is taken
    claimed: dict = {}
    distributed.on_main(lambda: claimed.update(lock=files.lock_run(out)))  # refused while another process writes
    lock = claimed.get("lock")
    try:
        return _resume_locked(out, device, lock, stop_at)
    except OSError as e:
        raise _disk_error(e, out) from None
    finally:
        if lock:
            lock.release()


def _resume_locked(out: Path, device: str | None, lock, stop_at: int | None = None) -> dict:
    manifest = reader.read_json(out / "manifest.json", "manifest") if (out / "manifest.json").exists() else {}
    if manifest.get("status") == "non_finite":
        nf = manifest.get("non_finite") or {}
        raise UserError(
            f"{out} stopped at step {nf.get('step', '?')} on a non-finite {nf.get('what', 'value')}; a resume would "
            "only repeat it, so it will not continue: change the config and start over with --force")
    if manifest.get("status") == "finished":
        raise UserError(f"{out} already ended (finished); nothing to resume")
    cfg = build_config(reader.read_config(out), [f"device={device}"] if device else [])
    if cfg.blind:  # BLIND: its config.yaml lacks the withheld fields, so it cannot be rebuilt from it
        raise UserError(f"{out} is a blind run and cannot be resumed; re-make it with --force")
    run = build_run(cfg, out)
    run.lock = lock
    if distributed.is_main():
        files.refuse_links(out)  # a resume truncates metrics.jsonl and prunes checkpoints/: never through a link
        files.clean_temporaries(out)  # a killed writer's temp checkpoint folder and temp files
    steps = files.list_checkpoints(out)
    metrics_path = out / "metrics.jsonl"
    start, metrics_bytes, path, meta = 0, 0, None, None
    if steps:
        path = files.checkpoint_dir(out, steps[-1])
        weights, opt_t, meta = files.load_checkpoint(path)
        if meta.get("config_hash") != cfg.hash():
            raise UserError(f"checkpoint {path} was made with another config; restore config.yaml "
                                     "or start over with --force")
        files.verify_metrics_prefix(metrics_path, meta, path)
    else:  # killed before its first own checkpoint: fork from the same donor again (else from step 0: same bytes)
        donor, same_trunk, forked = None, False, dict(NOT_FORKED)
        recorded = manifest.get("forked_from") or {}
        if recorded.get("run"):  # the same donor again, checked against the checksums recorded at the fork
            donor = recorded_donor(out, recorded)
        elif not manifest:  # killed before its manifest said whether it forked: the donor train() would pick
            donor, same_trunk = find_donor(cfg, out), True
        if donor and files.checkpoint_dir(*donor).exists():
            path = files.checkpoint_dir(*donor)
            weights, opt_t, meta, donor_rows = load_donor(cfg, donor[0], donor[1], same_trunk=same_trunk)
            if recorded.get("run"):
                check_donor_unchanged(out, manifest.get("forked_from_checksums") or {}, meta, path)
            forked = fork_record(donor[0], donor[1], meta)
    if meta is not None:
        files.restore(run.model, run.opt, weights, opt_t, path)
        run.telemetry.restore(meta.get("telemetry"))
        start, metrics_bytes = int(meta["step"]), int(meta["metrics_bytes"])
        if run.remedy and "remedy" in meta:
            remedy_restore(run.remedy, meta["remedy"])
    if cfg.injection != "none" and start > cfg.injection_step:
        _replay_injection_record(run, manifest)
    if not distributed.is_main():  # DDP: rank 0 alone writes (checkpoints hold no rank: any world size resumes)
        run.out = None
        return _drive(run, start, {}, stop_at)
    write_tokenizer(run)  # the file a kill (or a full disk) may have left out: the same bytes as at the start
    if steps:
        files.truncate_metrics(metrics_path, metrics_bytes)
    else:  # the donor's rows (verified), or none: whatever the killed run had copied is replaced
        files.atomic_write_bytes(metrics_path, donor_rows if meta is not None else b"")
    run.metrics = open_metrics(metrics_path)
    extra = {"distributed": None} if "distributed" in manifest else {}  # a DDP run resumed on one process
    if not steps:
        extra.update(forked)
    if not manifest:  # killed before its manifest was first written
        extra["started"] = now_iso()
    if manifest:  # the steps so far were computed by the process that wrote this manifest
        extra.update(numerics_change(manifest, "the steps before this resume", manifest.get("numerics_mixed") or [],
                                     announce=distributed.is_main()))
    write_manifest(run, "running", {"resumed_from_step": start, **environment(run.device), **extra})
    return _drive(run, start, {"resumed_from_step": start}, stop_at, last=files.last_row(metrics_path, metrics_bytes))


def _replay_injection_record(run: Run, manifest: dict) -> None:
    rec = manifest.get("injection", {}).get("record")
    if rec and run.inject is not None:
        run.inject.record.update(rec)


def _drive(run: Run, start: int, extra: dict, stop_at: int | None = None, last: dict | None = None) -> dict:
    """Run the steps, then write results.json, the final manifest and the dashboard. `last` is the row
    before `start` (a resume after the last checkpoint runs no step, yet its results name the last row)."""
    t0 = time.perf_counter()
    last = dict(last or {})
    recorded = bool(run.inject and run.inject.record)

    def on_row(row):
        nonlocal recorded
        last.update(row)
        if run.inject and run.inject.record and not recorded:  # the injection fired: record it at once
            if run.out:
                write_manifest(run, "running", {})
            recorded = True

    try:
        if run.out:  # mirrors of metrics.jsonl, rebuilt from the rows it holds already (run/sinks.py)
            run.sinks = sinks.open_sinks(run.cfg.log, run.out, redact.public_config(run.cfg))
        status = run_steps(run, start, on_row, stop_at)
    finally:
        if run.metrics:
            run.metrics.close()
        if run.sinks:
            run.sinks.close()
    seconds = time.perf_counter() - t0
    if distributed.world_size() > 1:  # every rank takes part; rank 0 records it
        extra = {**extra, "distributed": _check_ranks(run)}
    if run.out is None:  # DDP: ranks other than 0 write nothing
        return {"status": status}
    results = {**final_results(run, status, last), "seconds_this_session": round(seconds, 3)}
    record.write_results(run.out, results)
    # before the manifest says it ended (a kill in between resumes from the last checkpoint); a 'stopped'
    # run (stop_at) may be resumed, so it keeps its last few
    files.prune_checkpoints(run.out, run.cfg, ended=status != "stopped")
    if run.non_finite:
        extra = {**extra, "non_finite": run.non_finite}
    write_manifest(run, status, {"ended": now_iso(), **extra})
    return results


def _check_ranks(run: Run) -> dict:
    """DDP: at the end of a session, did every rank fire the injection at the same steps, and do all ranks
    still hold bit-identical weights? (A collective: every rank calls it.)"""
    fired = distributed.gather(run.inject.fired if run.inject else [])
    if any(fired):
        run.inject.record["fired_steps_by_rank"] = fired
    return {"world_size": distributed.world_size(), "backend": torch.distributed.get_backend(),
            "replicas_agree": distributed.replicas_agree(run.model)}


def final_results(run: Run, status: str, last: dict) -> dict:
    val = evaluate(run.model, run.data.val_batches) if status == "finished" else None
    steps_done = (last.get("step", -1) + 1) if last else None
    return record.results(status, steps_done, last.get("loss"), val, run.data.ngram, run.non_finite)
