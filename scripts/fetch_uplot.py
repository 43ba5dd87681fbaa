"""Re-fetch the vendored uPlot from the npm registry and check it byte for byte.

    python scripts/fetch_uplot.py           # npm pack uplot@VERSION, check hashes, (re)write the vendored files
    python scripts/fetch_uplot.py --check   # offline: check the vendored files against the pinned hashes

The pins live in src/minitrain/views/assets/vendor/uplot.json (version, the npm tarball's sha256 and
sha512 integrity as the registry publishes it, and the sha256 of each vendored file). The files are the
package's own, unmodified: dist/uPlot.iife.min.js, dist/uPlot.min.css and LICENSE (MIT). The dashboard
inlines the first two into every page.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parent.parent / "src" / "minitrain" / "views" / "assets" / "vendor"
PINS = VENDOR / "uplot.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(pins: dict) -> list[str]:
    """Problems with the vendored files (empty when every file matches its pin)."""
    bad = []
    for name, digest in pins["files"].items():
        path = VENDOR / name
        if not path.exists():
            bad.append(f"{name}: missing")
        elif sha256(path.read_bytes()) != digest:
            bad.append(f"{name}: sha256 differs from the pin")
    return bad


def fetch(pins: dict) -> None:
    spec = f"uplot@{pins['version']}"
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(["npm", "pack", spec, "--json"], cwd=tmp, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"error: npm pack {spec} failed: {out.stderr.strip().splitlines()[-1:]}")
        tgz = Path(tmp) / json.loads(out.stdout)[0]["filename"]
        data = tgz.read_bytes()
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        if sha256(data) != pins["tarball_sha256"] or integrity != pins["integrity"]:
            sys.exit(f"error: the registry's {tgz.name} does not match the pinned hashes; refusing to vendor it")
        with tarfile.open(tgz) as tar:
            for name, member in pins["members"].items():
                blob = tar.extractfile(member).read()
                if sha256(blob) != pins["files"][name]:
                    sys.exit(f"error: {member} in {tgz.name} does not match its pin")
                (VENDOR / name).write_bytes(blob)
    print(f"vendored {spec} into {VENDOR} (all hashes match)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check the vendored files (no network)")
    args = ap.parse_args(argv)
    pins = json.loads(PINS.read_text())
    if not args.check:
        fetch(pins)
    bad = check(pins)
    for b in bad:
        print(f"error: {b}", file=sys.stderr)
    if not bad:
        print(f"uPlot {pins['version']}: {len(pins['files'])} vendored files match their pins")
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
