"""Strict, bounded JSON reading: the one way every minitrain file in JSON is parsed (run/reader.py re-exports it).

    loads_json          text -> value; NaN/Infinity and float-range overflow read as None; nesting bounded
    read_bytes          a regular file's bytes (a FIFO or device placed in a run folder never hangs a reader)
    read_json           one file, strict: a one-line UserError when missing, a folder, corrupt or unreadable
    read_optional_json  an object or None, with a note instead of an error
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minitrain.core.errors import UserError

_DECODER = json.JSONDecoder(parse_constant=lambda _c: None)
# A float literal past float range (1e999) reads as None too: only a literal with 300+ digits or a 3-digit
# exponent can be one, and only a text holding such a literal pays for the slower exact decoder. The test is
# the pattern [0-9]{300}|[eE][-+]?[0-9]{3} taken as substring searches on the text with every digit read as 0
# and E as e: a sixth of the pattern's time (it runs on every metrics row of every read)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")
_HUGE_MARKS = (b"0" * 300, b"e000", b"e+000", b"e-000")
_EXACT_DECODER = json.JSONDecoder(parse_constant=lambda _c: None,
                                  parse_float=lambda t: (lambda f: f if f - f == 0 else None)(float(t)),
                                  parse_int=lambda t: int(t) if len(t.lstrip("-")) <= 308 else None)
MAX_NESTING = 64  # deepest JSON a reader takes (minitrain writes 4 levels; a tokenizer file about 6)


def may_overflow(raw: bytes) -> bool:
    """Does RAW hold a literal that could be past float range (300+ digits in a row, or a 3-digit exponent)?"""
    text = raw.translate(_DIGITS_AS_ZERO)
    return any(mark in text for mark in _HUGE_MARKS)


class DamagedJSON(json.JSONDecodeError):
    """Valid JSON text that no minitrain file holds: nested deeper than MAX_NESTING."""


def _nesting(obj: Any) -> int:
    """How deep OBJ nests (iteratively: the point is to refuse what recursion cannot take)."""
    deepest, todo = 0, [(obj, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_NESTING:
                break
        children = value.values() if isinstance(value, dict) else value
        todo += [(c, depth + 1) for c in children if isinstance(c, (dict, list))]
    return deepest


def loads_json(text: str | bytes) -> Any:
    """Parse JSON; a NaN / Infinity token (not JSON: files written before minitrain wrote strict JSON)
    reads as None, as minitrain writes a non-finite value now. A value nested deeper than MAX_NESTING is a
    DamagedJSON error (a json.JSONDecodeError, which every caller already handles)."""
    raw = text if isinstance(text, bytes) else text.encode()
    text = raw.decode()
    try:
        obj = (_EXACT_DECODER if may_overflow(raw) else _DECODER).decode(text)
    except RecursionError:
        raise DamagedJSON(f"nested deeper than {MAX_NESTING} levels", text, 0) from None
    if raw.count(b"[") + raw.count(b"{") > MAX_NESTING and _nesting(obj) > MAX_NESTING:
        raise DamagedJSON(f"nested deeper than {MAX_NESTING} levels", text, 0)
    return obj


def read_bytes(path: Path) -> bytes:
    """A file's bytes; an OSError unless it is a regular file (a FIFO or /dev/zero put in a run folder, as a
    symlink or by hand, would hang a reader)."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        raise OSError(f"{path.name} is not a regular file")
    return path.read_bytes()


def read_json(path: Path, what: str) -> Any:
    try:
        return loads_json(read_bytes(path))
    except FileNotFoundError:
        raise UserError(f"{what} {path} is missing; is this a minitrain run folder?") from None
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a folder, not a file; give the run folder that holds it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {path} is corrupt ({e.msg if hasattr(e, 'msg') else e}); restore or re-create it") from None
    except OSError as e:
        raise UserError(f"{what} {path} cannot be read ({e.strerror or e}); restore or re-create it") from None


def read_optional_json(path: Path) -> tuple[dict | None, str | None]:
    """A JSON object if the file exists, else None; a note instead of an error if it is unreadable."""
    path = Path(path)
    if not path.exists():
        return None, None
    try:
        obj = loads_json(read_bytes(path))
    except (OSError, ValueError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else str(e).splitlines()[0] if str(e) else type(e).__name__
        return None, f"{path.name} is unreadable ({why[:80]})"
    if not isinstance(obj, dict):
        return None, f"{path.name} does not hold a JSON object"
    return obj, None
