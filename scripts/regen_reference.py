"""Regenerate tests/data/reference.json, the pinned sha256 of the reference runs (tests/test_reference.py).

    just regen-reference        (or: python scripts/regen_reference.py)

Run it only when a change moves the numerics on purpose, and say so in that commit (docs/metrics.md,
"Reference outputs"). Trains the runs into a temporary folder (about a minute of CPU) and prints each
entry that changed.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import conftest  # noqa: E402  (tests/: the small config and the small lab, built as the fixtures build them)
import test_reference as ref  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        conftest.make_small_baseline(tmp / "baseline" / "18-baseline")
        conftest.make_small_lab(tmp / "baseline" / "18-baseline", tmp / "small")
        new = {"small": ref.small_lab_shas(tmp / "small"),
               "lab-short": ref.make_lab_short(tmp / "lab-short"),
               "small-lab-k50": ref.make_small_lab_sequential(tmp / "small-lab-k50")}
        shutil.rmtree(tmp, ignore_errors=True)
    old = json.loads(ref.REFERENCE.read_text()) if ref.REFERENCE.exists() else {}
    ref.REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    ref.REFERENCE.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n")
    changed = [f"{group}/{name}" for group, runs in new.items() for name, sha in runs.items()
               if old.get(group, {}).get(name) != sha]
    print(f"wrote {ref.REFERENCE.relative_to(ROOT)}: " + (f"changed {', '.join(changed)}" if changed else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
