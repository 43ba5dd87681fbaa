"""Checkpoints: RUN/checkpoints/step-NNNNNN/ holds the state *before* step NNNNNN (weights and Adam's moments
as safetensors, a manifest with their sha256 and the metrics offset), written whole or not at all, verified
when loaded, pruned by the retention policy. torch and safetensors are imported inside the functions only,
so reading a run (the walker, the dashboard) stays fast."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from minitrain import SCHEMA_VERSION
from minitrain.core.errors import UserError
import minitrain.run.files.atomic as atomic  # atomic.write_synced: one place writes a file's bytes to disk
from minitrain.run.reader import loads_json

if TYPE_CHECKING:
    import torch

CKPT_PREFIX = "step-"
CHECKPOINTS = "checkpoints"
# a checkpoint manifest's fields that a resume or a fork computes with, and the types they may have
CHECKPOINT_FIELDS = {"step": (int,), "metrics_bytes": (int,), "metrics_sha256": (str, type(None)),
                     "sha256": (dict, type(None))}



def checkpoint_dir(run: Path, step: int) -> Path:
    return Path(run) / "checkpoints" / f"{CKPT_PREFIX}{step:06d}"


def list_checkpoints(run: Path) -> list[int]:
    root = Path(run) / "checkpoints"
    if not root.is_dir():
        return []
    steps = []
    for d in root.iterdir():
        if d.is_dir() and d.name.startswith(CKPT_PREFIX) and d.name[len(CKPT_PREFIX):].isdigit():
            steps.append(int(d.name[len(CKPT_PREFIX):]))
    return sorted(steps)


def save_checkpoint(run: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    meta: dict) -> Path:
    """Write into a temp folder, then rename it into place: a checkpoint is whole or absent. Its manifest
    records the sha256 of each tensor file (verified when it is loaded)."""
    from safetensors.torch import save

    final = checkpoint_dir(run, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        weights = {n: p.detach().contiguous().cpu() for n, p in model.named_parameters()}
        files = {"model.safetensors": save(weights), "optimizer.safetensors": save(optimizer_tensors(model, optimizer))}
        for name, data in files.items():
            atomic.write_synced(tmp / name, data)
        sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        manifest = {"schema_version": SCHEMA_VERSION, "step": step, **meta, "sha256": sums}
        atomic.write_synced(tmp / "manifest.json", (atomic.strict_json(manifest, indent=2, sort_keys=True) + "\n").encode())
        os.chmod(tmp, 0o777 & ~atomic.UMASK)  # mkdtemp makes 0700
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final



def checkpoints_to_keep(steps: list[int], cfg, ended: bool) -> set[int]:
    """The retention policy (docs/reliability.md). Kept: the last `ckpt_keep_last` checkpoints while the run
    goes on (the last alone once it has ended: a finished run is not resumed), and for each fork point F in
    `ckpt_keep_steps` (default 500, the lab's K) the last checkpoint at or before F (where an injection at F
    forks from) and the last at or before F - remedy_zclip_warmup (where `remediate` starts ZClip for a
    spike at F). ckpt_keep_last=0 keeps every checkpoint."""
    steps = sorted(steps)
    if cfg.ckpt_keep_last == 0 or not steps:
        return set(steps)
    keep = set(steps[-(1 if ended else cfg.ckpt_keep_last):])
    for fork in cfg.ckpt_keep_steps:
        for limit in (fork, fork - cfg.remedy_zclip_warmup):
            before = [s for s in steps if s <= limit]
            if before:
                keep.add(before[-1])
    return keep


def prune_checkpoints(run: Path, cfg, ended: bool = False) -> list[int]:
    """Delete the checkpoints the retention policy does not keep (after a new one is whole on disk)."""
    steps = list_checkpoints(run)
    gone = [s for s in steps if s not in checkpoints_to_keep(steps, cfg, ended)]
    for s in gone:
        shutil.rmtree(checkpoint_dir(run, s), ignore_errors=True)
    return gone


def optimizer_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    import torch

    out = {}
    for name, p in model.named_parameters():
        st = optimizer.state.get(p)
        if not st:
            continue
        out[f"exp_avg.{name}"] = st["exp_avg"].detach().contiguous().cpu()
        out[f"exp_avg_sq.{name}"] = st["exp_avg_sq"].detach().contiguous().cpu()
        out[f"step.{name}"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1).cpu()
    return out


def load_checkpoint(path: Path) -> tuple[dict, dict, dict]:
    """(weights, optimizer tensors, manifest) of one checkpoint, each file checked against the sha256 its
    manifest recorded when it was written, or a UserError that names the file and says how to recover."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(path)
    fix = f"delete {path} to resume from the checkpoint before it, or start over with --force"
    try:
        meta = json.loads((path / "manifest.json").read_bytes())
        if not isinstance(meta, dict):
            raise ValueError
        blobs = {name: (path / name).read_bytes() for name in ("model.safetensors", "optimizer.safetensors")}
    except FileNotFoundError as e:
        raise UserError(f"checkpoint {path} is incomplete ({Path(e.filename).name} missing); {fix}") from None
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"checkpoint {path} has a corrupt manifest.json; {fix}") from None
    except OSError as e:
        raise UserError(f"checkpoint {path} cannot be read ({e.strerror}); {fix}") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"checkpoint {path} has schema_version {meta.get('schema_version')}, "
                        f"this minitrain reads {SCHEMA_VERSION}; use a matching minitrain version")
    damaged = next((k for k, kinds in CHECKPOINT_FIELDS.items() if type(meta.get(k)) not in kinds), None)
    if damaged:
        raise UserError(f"checkpoint {path} has a damaged manifest.json ('{damaged}' is "
                        f"{type(meta.get(damaged)).__name__}); {fix}")
    sums = meta.get("sha256")  # absent only in checkpoints written before checksums existed
    for name, data in blobs.items():
        if sums is not None and hashlib.sha256(data).hexdigest() != sums.get(name):
            raise UserError(f"checkpoint file {path / name} is corrupt or truncated (its sha256 differs from the "
                            f"one recorded when it was written); {fix}")
    try:
        weights, opt = load(blobs["model.safetensors"]), load(blobs["optimizer.safetensors"])
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise UserError(f"checkpoint {path} is corrupt or truncated ({str(e).splitlines()[0][:80]}); {fix}") from None
    return weights, opt, meta


def verify_metrics_prefix(metrics: Path, meta: dict, ckpt: Path) -> bytes:
    """The rows a checkpoint was written after must be the file's first `metrics_bytes` bytes, unchanged
    (sha256 recorded at the checkpoint) and complete: one row per step before it. Returns those bytes;
    else one line naming the file."""
    metrics, n, step = Path(metrics), meta["metrics_bytes"], meta["step"]  # checked by load_checkpoint
    try:
        size = metrics.stat().st_size
    except FileNotFoundError:
        size = -1
    if size < n:
        have = "is missing" if size < 0 else f"holds {size} bytes"
        raise UserError(f"{metrics} {have}, but checkpoint {ckpt} was written after {n} bytes (steps 0..{step - 1}): "
                        "the file was truncated or deleted; re-make the run with --force")
    with open(metrics, "rb") as f:
        prefix = f.read(n)
    want = meta.get("metrics_sha256")
    if want is not None:
        if hashlib.sha256(prefix).hexdigest() != want:
            raise UserError(f"{metrics} differs from the rows checkpoint {ckpt} was written after (sha256 mismatch "
                            "in its first {n} bytes): the file was edited; re-make the run with --force".replace("{n}", str(n)))
        return prefix
    # a checkpoint from before metrics checksums: check the rows' steps instead
    steps = [row_step(line) for line in prefix.split(b"\n") if line.strip()]
    if steps != list(range(step)):
        raise UserError(f"{metrics} does not hold steps 0..{step - 1} before checkpoint {ckpt}: the file was "
                        "edited or truncated; re-make the run with --force")
    return prefix


def row_step(line: bytes) -> int | None:
    """The step of one metrics line; None when the line is no row (not JSON, not an object, no integer step)."""
    try:
        row = loads_json(line)
    except ValueError:  # not JSON, not UTF-8, nested too deep: all ValueErrors (run/jsonfile.py)
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return step if type(step) is int else None


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: dict, opt_tensors: dict,
            path: Path) -> None:
    import torch

    names = dict(model.named_parameters())
    if set(weights) != set(names) or any(weights[n].shape != names[n].shape for n in names):
        raise UserError(f"checkpoint {path} does not match this model's parameters; was the config changed?")
    with torch.no_grad():
        for n, p in names.items():
            p.copy_(weights[n])
    # a fused (or capturable) optimizer keeps its step counters beside the parameters, the others on the host
    on_device = any(g.get("fused") or g.get("capturable") for g in optimizer.param_groups)
    for n, p in names.items():
        if f"exp_avg.{n}" not in opt_tensors:
            continue
        optimizer.state[p] = {
            "step": opt_tensors[f"step.{n}"].reshape(()).to(p.device if on_device else "cpu").clone(),
            "exp_avg": opt_tensors[f"exp_avg.{n}"].to(p.device).clone(),
            "exp_avg_sq": opt_tensors[f"exp_avg_sq.{n}"].to(p.device).clone(),
        }
