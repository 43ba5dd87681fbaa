"""The run folder: manifest, resolved config, metrics, results, checkpoints. Every write is atomic.

    RUN/
      manifest.json      seed, versions, config (+hash), git sha, data manifest (+hash), hardware, times,
                         injection record, schema version, status
      config.yaml        the resolved config (train it again with `minitrain train --config RUN/config.yaml`)
      tokenizer.json     the BPE tokenizer trained for this run
      metrics.jsonl      one JSON object per step (written in blocks: MetricsWriter)
      results.json       final train/val loss and perplexity against the n-gram baseline
      checkpoints/step-000500/   state *before* step 500 runs (steps 0..499 done)
          model.safetensors       weights
          optimizer.safetensors   Adam moments: exp_avg.<name>, exp_avg_sq.<name>, step.<name>
          manifest.json           step, config hash, metrics byte offset, scheduler / data / RNG state

Never pickle: tensors go through safetensors, everything else through JSON. torch and safetensors are
imported inside the checkpoint functions only, so reading a run (the walker, the dashboard) stays fast.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from minitrain import SCHEMA_VERSION
from minitrain.core.errors import UserError
from minitrain.run.reader import (CONFIG, DIAGNOSIS, LOCK_HEADER, LOCK_NAME, MANIFEST, METRICS, RESULTS, TOKENIZER,
                                  holder_pid, live_pid, loads_json)

CKPT_PREFIX = "step-"
CHECKPOINTS = "checkpoints"
_UMASK = os.umask(0)
os.umask(_UMASK)


TMP_SUFFIX = ".tmp"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file beside `path`, flush it to disk, then rename it over `path`: a reader (or a
    crash, or a full disk) sees the old file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    try:
        write_synced(Path(tmp), data)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def strict_json(obj: Any, **kwargs) -> str:
    """JSON text with no NaN / Infinity tokens (they are not JSON): a non-finite float becomes null and, in a
    top-level object, its dotted path and value are listed under "non_finite_values" (the flag)."""
    flags: dict[str, str] = {}
    clean = _finite_only(obj, "", flags)
    if flags and isinstance(clean, dict):
        clean = {**clean, "non_finite_values": {**(clean.get("non_finite_values") or {}), **flags}}
    return json.dumps(clean, allow_nan=False, **kwargs)


def _finite_only(x: Any, where: str, flags: dict[str, str]) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        flags[where.lstrip(".") or "(value)"] = repr(x)  # 'inf', '-inf' or 'nan'
        return None
    if isinstance(x, dict):
        return {k: _finite_only(v, f"{where}.{k}", flags) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_only(v, f"{where}[{i}]", flags) for i, v in enumerate(x)]
    return x


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, strict_json(obj, indent=2, sort_keys=True) + "\n")


def disk_error(e: OSError, path: Path | str | None = None, fix: str | None = None) -> UserError:
    """One line for an OSError met while writing (a full disk, a read-only or missing folder)."""
    where = e.filename or path or "a file"
    if e.errno == errno.ENOSPC:
        return UserError(f"disk full while writing {where}; free some space, then {fix or 'run again'}")
    return UserError(f"cannot write {where}: {e.strerror or e}; {fix or 'choose a writable folder'}")


# --- the run folder and its lock --------------------------------------------------------------------

class RunLock:
    """An exclusive advisory lock on a run folder (`fcntl.flock` on RUN/.lock), held by the one process that
    writes the run. The OS releases it when that process ends, however it ends (SIGKILL included), so a
    lock is never stale. The file stays (deleting a lock file races with a process about to take it) and
    names the last holder's pid; whether the run is live is the lock, never the file's text.

    An flock belongs to the open file, not to the process: a child forked while it is held (a forked lab
    run, a DataLoader worker) would share it and keep the run "live" after the writer is killed. So a
    forked child closes every lock descriptor it inherited (_close_inherited_locks), and the writer starts
    no subprocess while it holds the lock (loop.process_environment runs git and uname before)."""

    def __init__(self, run: Path, fd: int):
        self.run, self.fd, self.pid = Path(run), fd, os.getpid()
        _HELD.add(fd)

    def release(self) -> None:
        if self.fd is not None and self.pid == os.getpid():  # in a forked child the fd is already closed
            _HELD.discard(self.fd)
            os.close(self.fd)  # closing the descriptor releases the flock
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


_HELD: set[int] = set()  # descriptors of the run locks this process holds


def _close_inherited_locks() -> None:
    """In a forked child: close (never unlock: that would unlock the parent's too) the inherited locks."""
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _live_error(run: Path, pid: str) -> UserError:
    return UserError(f"{run} is live: process {pid} is writing it (lock {Path(run) / LOCK_NAME}); wait for it to "
                     "end or stop that process, then run again")


def refuse_if_live(run: Path) -> None:
    """A command that would write or delete RUN is refused while another process writes it."""
    pid = live_pid(run)
    if pid is not None:
        raise _live_error(run, pid)


def lock_run(run: Path) -> RunLock:
    """Take RUN's lock or refuse, naming the process that holds it. RUN must exist.

    The lock file is opened without following a link, and rewritten only when it is minitrain's: a regular
    file with one name, empty or starting with LOCK_HEADER. A run folder received from someone else may hold
    a `.lock` that links (symbolically or hard) to any file the user can write; that file is never touched
    (a resume also refuses a linked metrics.jsonl or checkpoints/: refuse_links)."""
    run = Path(run)
    path = run / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666 & ~_UMASK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _not_our_lock(path, "a symbolic link") from None
        raise disk_error(e, path) from None
    try:
        _check_our_lock(fd, path)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _live_error(run, holder_pid(path)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{LOCK_HEADER}\npid {os.getpid()}\n".encode())
    return RunLock(run, fd)


def _not_our_lock(path: Path, what: str) -> UserError:
    return UserError(f"{path} is {what}, not minitrain's lock file; nothing was written. Remove it (rm {path}) "
                     "if the folder is yours, then run again")


def _check_our_lock(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _not_our_lock(path, "not a regular file")
    if st.st_nlink != 1:
        raise _not_our_lock(path, f"a file with {st.st_nlink} names (a hard link to another file)")
    head = os.pread(fd, len(LOCK_HEADER), 0)
    if head and head != LOCK_HEADER.encode():
        raise _not_our_lock(path, "a file minitrain did not write")


def refuse_links(run: Path) -> None:
    """A resumed run's metrics file and checkpoints folder are not links: a resume truncates and appends to
    the one and prunes the other, which through a link would change files outside the run folder. (A new or
    --force run removes a link without following it: clear_run_dir.)"""
    for name in (METRICS, CHECKPOINTS):
        if (Path(run) / name).is_symlink():
            raise UserError(f"{Path(run) / name} is a symbolic link, and a run writes only inside its folder; "
                            "replace the link by the file it points to, or re-make the run with --force")


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "manifest.json").exists() or (Path(path) / "metrics.jsonl").exists()


def is_minitrain_run(path: Path) -> bool:
    """Does `path` hold a minitrain run (what --force may replace)? Its manifest says so (a JSON object with minitrain's schema_version
    and config), or minitrain's lock file does (a run killed before it wrote its manifest)."""
    path = Path(path)
    try:
        m = json.loads((path / "manifest.json").read_bytes(), parse_constant=lambda _c: None)
        if isinstance(m, dict) and "schema_version" in m and isinstance(m.get("config"), dict):
            return True
    except (OSError, ValueError):
        pass
    try:
        return (path / LOCK_NAME).read_text(errors="replace").startswith(LOCK_HEADER)
    except OSError:
        return False


def _refuse_unsafe_force(out: Path) -> None:
    """--force never replaces the current folder, one of its parents, or a folder holding a git repository."""
    here, target = Path.cwd().resolve(), out.resolve()
    if target == here or target in here.parents:
        raise UserError(f"--force refuses to replace {out}: it is the current folder or one of its parents; "
                        "choose a run folder below it")
    for root, dirs, files in os.walk(target):
        if ".git" in dirs or ".git" in files:
            raise UserError(f"--force refuses to replace {out}: {Path(root) / '.git'} is a git repository; "
                            "choose another --out")


# What minitrain writes into a run folder (the writer of each: loop.py, the page, signature, diagnose,
# remediate, explore's cost file, the lock), and under checkpoints/ only step-NNNNNN folders. --force and a new
# blind draw delete these and nothing else: a file a learner put there (notes, an edited postmortem.md, which
# `minitrain postmortem` hands over as theirs) is named and the command refused (docs/reliability.md).
RUN_FILES = frozenset({MANIFEST, CONFIG, TOKENIZER, METRICS, RESULTS, DIAGNOSIS, CHECKPOINTS, LOCK_NAME,
                       "dashboard.html", "signature.json", "remediation.json", "explore-cost.json"})


def _is_temporary(name: str) -> bool:
    """An atomic write's temp file (.NAME.*.tmp) or a checkpoint's temp folder (.step-*), as a kill leaves them."""
    return name.startswith(".") and (name.endswith(TMP_SUFFIX) or name.startswith(f".{CKPT_PREFIX}"))


def _is_checkpoint_name(name: str) -> bool:
    return name.startswith(CKPT_PREFIX) and name[len(CKPT_PREFIX):].isdigit()


def foreign_files(run: Path) -> list[str]:
    """The entries of a run folder minitrain did not write (relative paths, sorted): everything but
    RUN_FILES, temp files, and step folders under checkpoints/."""
    run, found = Path(run), []
    if not run.is_dir():
        return found
    for child in run.iterdir():
        if child.name not in RUN_FILES and not _is_temporary(child.name):
            found.append(child.name)
    ckpts = run / CHECKPOINTS
    if ckpts.is_dir() and not ckpts.is_symlink():
        for child in ckpts.iterdir():
            if not (_is_checkpoint_name(child.name) and child.is_dir() and not child.is_symlink()) \
                    and not _is_temporary(child.name):
                found.append(f"{CHECKPOINTS}/{child.name}")
    return sorted(found)


def refuse_foreign_files(run: Path, what: str = "--force") -> None:
    """`what` (--force, a new draw) replaces only what minitrain wrote: refused, naming them, while the
    folder holds anything else."""
    found = foreign_files(run)
    if found:
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        raise UserError(f"{run} holds files minitrain did not write: {shown}; {what} replaces only a run's own "
                        f"files, so move them out of {run}, then run again")


def clear_run_dir(out: Path) -> None:
    """Delete what minitrain wrote in a run folder whose lock we hold (RUN_FILES, temp files), except the
    lock file itself. A link is removed, never followed."""
    for child in Path(out).iterdir():
        if child.name == LOCK_NAME or (child.name not in RUN_FILES and not _is_temporary(child.name)):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def claim_run_dir(out: Path, force: bool) -> RunLock:
    """Create (or, with --force, empty) the folder of a new run and take its lock. Refused: a folder that holds
    files but no minitrain run (even with --force), a run without --force, a live run, an unsafe --force."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; choose another --out")
    try:
        holds = out.exists() and any(p.name != LOCK_NAME for p in out.iterdir())  # a lock alone: killed at once
    except OSError as e:
        raise disk_error(e, out) from None
    if holds:
        if not is_minitrain_run(out):
            raise UserError(f"{out} already holds files that are not a minitrain run; "
                            + ("--force only replaces a run folder; " if force else "")
                            + "choose another --out")
        refuse_if_live(out)
        if not force:
            raise UserError(f"{out} already holds a run; pass --force to replace it, --resume to continue it, "
                            "or choose another --out")
        _refuse_unsafe_force(out)
        refuse_foreign_files(out)
        lock = lock_run(out)
        try:
            clear_run_dir(out)
        except OSError as e:
            lock.release()
            raise disk_error(e, out) from None
        return lock
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise disk_error(e, out) from None
    return lock_run(out)


def remove_run_dir(out: Path) -> None:
    """Delete a whole run folder (a new blind draw replaces its runs): refused while the run is live."""
    out = Path(out)
    if not out.exists():
        return
    if not is_minitrain_run(out):
        raise UserError(f"{out} holds files that are not a minitrain run; move them away and run again")
    refuse_foreign_files(out, "a new draw")
    with lock_run(out):
        clear_run_dir(out)
    shutil.rmtree(out)


def clean_temporaries(run: Path) -> list[str]:
    """Remove what a killed writer leaves: checkpoint temp folders (checkpoints/.step-*) and atomic-write temp
    files (.NAME.*.tmp). Called with the run's lock held, so no live writer owns them."""
    run, gone = Path(run), []
    for d in (run, run / "checkpoints"):
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.name.startswith(f".{CKPT_PREFIX}") and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                gone.append(p.name)
            elif p.name.startswith(".") and p.name.endswith(TMP_SUFFIX) and p.is_file():
                p.unlink(missing_ok=True)
                gone.append(p.name)
    return gone


def write_config_yaml(path: Path, cfg_dict: dict) -> None:
    atomic_write_text(path, yaml.safe_dump(cfg_dict, sort_keys=True, allow_unicode=True))


# --- metrics ---------------------------------------------------------------------------------------


_ROW_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # json.dumps' encoder, built once


def dumps_row(row: dict) -> str:
    """One metrics line: compact, keys in insertion order, strict JSON. The loop writes non-finite values as
    null already; anything else non-finite becomes null too, listed in the row's "non_finite_values"."""
    try:
        return _ROW_ENCODER.encode(row) + "\n"
    except ValueError:
        return strict_json(row, separators=(",", ":")) + "\n"


class MetricsWriter:
    """Appends one line per row. Keeps a running sha256 of the whole file, which each checkpoint records with
    its byte offset (verified on resume and fork: the rows before a checkpoint are exactly the ones it was
    written after).

    `flush_every` (seconds): 0 writes and flushes every row as it comes (the probe: its caller may pause
    anywhere). Above 0, rows are kept and encoded and written as one block once that long has passed since
    the last block, and whenever `flush`, `tell`, `digest` or `close` is called: a checkpoint records
    `tell()` and `digest()`, so the rows it points to are on disk before it exists. Encoding a block at once
    costs a training step less than a row at a time (docs/benchmarks.md). A SIGKILL loses at most the rows of
    the last `flush_every` seconds, all after the last checkpoint, which a resume redoes. A row must not change
    after `write` (it may be encoded later)."""

    def __init__(self, path: Path, flush_every: float = 0.0):
        self.path = Path(path)
        self.f = open(self.path, "ab", opener=_no_follow)
        self.sha = hashlib.sha256()
        self.flush_every = flush_every
        self.pending: list[dict] = []
        self.flushed_at = time.monotonic()
        if self.f.tell():  # a resumed or forked file: hash the rows already there (verified by the caller)
            with open(self.path, "rb") as old:
                for chunk in iter(lambda: old.read(1 << 20), b""):
                    self.sha.update(chunk)

    def write(self, row: dict) -> None:
        self.pending.append(row)
        if time.monotonic() - self.flushed_at >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the kept rows to the file, now."""
        if self.pending:
            data = "".join(map(dumps_row, self.pending)).encode()
            self.pending.clear()
            self.f.write(data)
            self.f.flush()
            self.sha.update(data)
        self.flushed_at = time.monotonic()

    def tell(self) -> int:
        self.flush()
        return self.f.tell()

    def digest(self) -> str:
        self.flush()
        return self.sha.hexdigest()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.f.close()


def _no_follow(path: str, flags: int) -> int:
    """open()'s opener for a run's own files: a link in its place is an error (ELOOP), never followed."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def truncate_metrics(path: Path, size: int) -> None:
    """Cut a metrics file back to `size` bytes (a resume drops the rows after its checkpoint)."""
    with open(path, "ab", opener=_no_follow) as f:
        f.truncate(size)


def last_row(path: Path, end: int) -> dict | None:
    """The last complete row in the first `end` bytes of a metrics file (None if there is none)."""
    path = Path(path)
    if end <= 0 or not path.exists():
        return None
    with open(path, "rb") as f:
        f.seek(max(0, end - (1 << 20)))
        tail = f.read(end - max(0, end - (1 << 20)))
    lines = [line for line in tail.split(b"\n") if line.strip()]
    return loads_json(lines[-1]) if lines else None


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
            write_synced(tmp / name, data)
        sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        write_synced(tmp / "manifest.json", (strict_json({"schema_version": SCHEMA_VERSION, "step": step, **meta,
                                                           "sha256": sums}, indent=2, sort_keys=True) + "\n").encode())
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


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
    metrics, n, step = Path(metrics), int(meta.get("metrics_bytes", 0)), int(meta.get("step", 0))
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
    try:  # a checkpoint from before metrics checksums: check the rows' steps instead
        steps = [loads_json(line)["step"] for line in prefix.split(b"\n") if line.strip()]
    except (ValueError, KeyError, TypeError):
        steps = None
    if steps != list(range(step)):
        raise UserError(f"{metrics} does not hold steps 0..{step - 1} before checkpoint {ckpt}: the file was "
                        "edited or truncated; re-make the run with --force")
    return prefix


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
