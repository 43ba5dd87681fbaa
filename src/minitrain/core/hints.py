"""The commands a printed hint names, as the user types them in their own shell.

`./dev` starts minitrain with the venv first on the PATH and sets MINITRAIN_VIA=./dev: a hint then reads
`./dev minitrain reveal ana` and `./dev lab` (what works in a new shell, as the README writes them) rather than
`minitrain reveal ana` and `just lab`, which only work where the venv is activated. Started from an activated
venv (no MINITRAIN_VIA), hints stay as they are. Only quoted commands are rewritten ('...' or `...`), so prose
that mentions minitrain is left alone.
"""
from __future__ import annotations

import os
import re

VIA = "MINITRAIN_VIA"
_QUOTED = re.compile(r"(['`])(minitrain|just) (?=[a-z])")


def as_typed(text: str) -> str:
    via = os.environ.get(VIA)
    if not via:
        return text
    return _QUOTED.sub(lambda m: f"{m[1]}{via} " + ("minitrain " if m[2] == "minitrain" else ""), text)


class TypedHints:
    """A text stream whose writes go through as_typed (the command's stdout while it runs under ./dev)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(as_typed(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)
