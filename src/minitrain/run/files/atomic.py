"""Writing a file of a run folder: atomically (a temp file beside it, synced, renamed over it), as strict
JSON, and the one line a failed write (a full disk) becomes."""
from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from minitrain.core.errors import UserError

TMP_SUFFIX = ".tmp"  # an atomic write's temp file: .NAME.*.tmp beside NAME
UMASK = os.umask(0)  # the process's umask (read by setting it), for the modes of files made by mkstemp / mkdtemp
os.umask(UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file beside `path`, flush it to disk, then rename it over `path`: a reader (or a
    crash, or a full disk) sees the old file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    os.close(fd)
    try:
        write_synced(Path(tmp), data)
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes 0600; give the file the usual permissions
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


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_config_yaml(path: Path, cfg_dict: dict) -> None:
    atomic_write_text(path, yaml.safe_dump(cfg_dict, sort_keys=True, allow_unicode=True))

