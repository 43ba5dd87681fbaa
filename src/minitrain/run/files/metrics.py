"""metrics.jsonl: one strict JSON line per step, appended in blocks by MetricsWriter, which keeps the running
sha256 each checkpoint records; a resume cuts the file back to its checkpoint's offset."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from minitrain.run.files.atomic import strict_json
from minitrain.run.reader import loads_json

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

