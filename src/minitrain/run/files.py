"""The run folder: manifest, resolved config, metrics, results, checkpoints. Every write is atomic.

    RUN/
      manifest.json      seed, versions, config (+hash), git sha, data manifest (+hash), hardware, times,
                         injection record, schema version, status
      config.yaml        the resolved config (train it again with `minitrain train --config RUN/config.yaml`)
      tokenizer.json     the BPE tokenizer trained for this run
      metrics.jsonl      one JSON object per step, flushed every step
      results.json       final train/val loss and perplexity against the n-gram baseline
      checkpoints/step-000500/   state *before* step 500 runs (steps 0..499 done)
          model.safetensors       weights
          optimizer.safetensors   Adam moments: exp_avg.<name>, exp_avg_sq.<name>, step.<name>
          manifest.json           step, config hash, metrics byte offset, scheduler / data / RNG state

Never pickle: tensors go through safetensors, everything else through JSON. torch and safetensors are
imported inside the checkpoint functions only, so reading a run (the walker, the dashboard) stays fast.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from minitrain import SCHEMA_VERSION
from minitrain.core.errors import UserError
from minitrain.run.reader import read_json

CKPT_PREFIX = "step-"
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "manifest.json").exists() or (Path(path) / "metrics.jsonl").exists()


def prepare_run_dir(out: Path, force: bool) -> None:
    """Refuse to touch a folder that already holds a run, unless --force (which replaces it)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; choose another --out")
    if out.exists() and any(out.iterdir()):
        if not force:
            what = "a run" if is_run_dir(out) else "files"
            raise UserError(
                f"{out} already holds {what}; pass --force to replace it, --resume to continue it, "
                "or choose another --out"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def write_config_yaml(path: Path, cfg_dict: dict) -> None:
    atomic_write_text(path, yaml.safe_dump(cfg_dict, sort_keys=True, allow_unicode=True))


# --- metrics ---------------------------------------------------------------------------------------


def dumps_row(row: dict) -> str:
    """One metrics line: compact, keys in insertion order, non-finite floats as null (valid JSON)."""
    return json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n"


class MetricsWriter:
    """Appends one line per step and flushes it, so a killed run keeps every finished step."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.f = open(self.path, "ab")

    def write(self, row: dict) -> None:
        self.f.write(dumps_row(row).encode())
        self.f.flush()

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()


# --- checkpoints -----------------------------------------------------------------------------------


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
    """Write into a temp folder, then rename it into place: a checkpoint is whole or absent."""
    from safetensors.torch import save_file

    final = checkpoint_dir(run, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        weights = {n: p.detach().contiguous().cpu() for n, p in model.named_parameters()}
        save_file(weights, str(tmp / "model.safetensors"))
        save_file(optimizer_tensors(model, optimizer), str(tmp / "optimizer.safetensors"))
        (tmp / "manifest.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "step": step, **meta},
                                                      indent=2, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


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
    """(weights, optimizer tensors, manifest) of one checkpoint, or a UserError that says how to recover."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    fix = f"delete {path} to resume from the checkpoint before it, or start over with --force"
    try:
        meta = json.loads((path / "manifest.json").read_text())
        weights = load_file(str(path / "model.safetensors"))
        opt = load_file(str(path / "optimizer.safetensors"))
    except FileNotFoundError as e:
        raise UserError(f"checkpoint {path} is incomplete ({Path(e.filename).name} missing); {fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"checkpoint {path} has a corrupt manifest.json; {fix}") from None
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise UserError(f"checkpoint {path} is corrupt or truncated ({str(e).splitlines()[0][:80]}); {fix}") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"checkpoint {path} has schema_version {meta.get('schema_version')}, "
                        f"this minitrain reads {SCHEMA_VERSION}; use a matching minitrain version")
    return weights, opt, meta


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
