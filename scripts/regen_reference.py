"""Add this machine's pins to tests/data/reference.json (tests/test_reference.py), beside the other machines'.

    just regen-reference                  this machine's exact pins, one per CPU kernel set it can run
    just regen-reference --values         the same, and the value tier re-pinned from this machine's native
                                          kernels (only when a change moves the numerics on purpose: say so in
                                          the commit; docs/metrics.md, "Where byte-identity holds")

Each kernel set (ATen's DEFAULT, AVX2, AVX512 where the CPU has them) trains the reference runs in a process of
its own, started with ATEN_CPU_CAPABILITY set (a process chooses its kernels once). A pin is keyed by the
platform fingerprint (core/numerics.py); a pin of another machine is kept, unless this machine's own pins moved:
then the code moved the numerics, every other machine's pin is stale, and those are dropped (named).

The value tier's tolerance is derived here, from the spread measured between this machine's kernel sets:
TOLERANCE_FACTOR times the largest relative difference of a loss or gradient norm, to one significant digit.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import conftest  # noqa: E402  (tests/: the small config and the small lab, built as the fixtures build them)
import test_reference as ref  # noqa: E402

# The tolerance is this many times the spread measured between kernel sets: a machine's kernels differ from
# this one's in which sums they round differently, not in how many, and 120 steps carry that forward alike.
TOLERANCE_FACTOR = 50
SMALL_NAMES = ["18-baseline", *(f"19-injection-{x}" for x in conftest.LAB_LETTERS.values())]


def kernel_sets() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this machine can run: the scalar kernels and each vector set up to its own."""
    import torch

    native = torch.backends.cpu.get_cpu_capability()
    order = ["default", "avx2", "avx512"]
    return order[: order.index(native.lower()) + 1] if native.lower() in order else ["default", native.lower()]


def this_process() -> dict:
    """Train the reference runs here and return this process's fingerprint, shas and values."""
    from minitrain.core import numerics

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        conftest.make_small_baseline(tmp / "baseline" / "18-baseline")
        conftest.make_small_lab(tmp / "baseline" / "18-baseline", tmp / "small")
        shas = {"small": ref.small_lab_shas(tmp / "small"), "lab-short": ref.make_lab_short(tmp / "lab-short")}
        values = {"small": ref.values_of(tmp / "small", SMALL_NAMES),
                  "lab-short": ref.values_of(tmp / "lab-short", ref.lab_short_names())}
    return {"numerics": {k: v for k, v in numerics.fingerprint().items() if k != "env"}, "runs": shas,
            "values": {part: {f"{group}/{name}": v for group, vals in values.items() for name, v in vals[part].items()}
                       for part in ("series", "signatures")}}


def in_kernel_set(cap: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": cap}
    proc = subprocess.run([sys.executable, __file__, "--this-process"], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"regen-reference: the {cap} kernels' runs failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def max_rel(a: dict, b: dict) -> float:
    worst = 0.0
    for name, sa in a["series"].items():
        for key in ref.SERIES:
            for x, y in zip(sa[key], b["series"][name][key]):
                if x is not None and y is not None and math.isfinite(x) and math.isfinite(y) and y != 0:
                    worst = max(worst, abs(x - y) / abs(y))
    return worst


def one_digit_up(x: float) -> float:
    exp = math.floor(math.log10(x))
    return math.ceil(x / 10 ** exp) * 10 ** exp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", action="store_true", help="re-pin the value tier from this machine's native kernels")
    parser.add_argument("--this-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.this_process:
        print(json.dumps(this_process()))
        return 0
    from minitrain.core import numerics

    caps = kernel_sets()
    made = {}
    for cap in caps:
        print(f"regen-reference: training the reference runs with the {cap} kernels", file=sys.stderr)
        made[cap] = in_kernel_set(cap)
    old = json.loads(ref.REFERENCE.read_text()) if ref.REFERENCE.exists() else {}
    old.setdefault("pins", [])  # a file from before fingerprints: its pins name no platform, so none is kept
    native = made[caps[-1]]
    mine = [m["numerics"] for m in made.values()]
    moved = [numerics.key(m["numerics"]) for m in made.values()
             if (p := ref.exact_pins(m["numerics"], old)) is not None and p != m["runs"]]
    others = [p for p in old["pins"] if not any(numerics.same(p["numerics"], fp) for fp in mine)]
    if moved and others:
        print("regen-reference: this machine's pins moved (" + "; ".join(moved) + "), so the code moved the numerics: "
              "dropping the stale pins of " + "; ".join(numerics.key(p["numerics"]) for p in others), file=sys.stderr)
        others = []
    values = old.get("values")
    spread = max(max_rel(made[c]["values"], native["values"]) for c in caps)
    if values is None or args.values:
        tolerance = one_digit_up(TOLERANCE_FACTOR * spread)
        values = {**native["values"], "made_on": numerics.key(native["numerics"]), "rel_tolerance": tolerance,
                  "measured_spread": {"kernel_sets": caps, "max_rel": spread, "factor": TOLERANCE_FACTOR}}
    else:
        for cap in caps:
            diffs = ref.value_differences(made[cap]["values"], values, values["rel_tolerance"])
            if diffs:
                sys.exit(f"regen-reference: the {cap} kernels' values left the value tier ({diffs[0]}; "
                         f"{len(diffs)} in all): if the code moved the numerics on purpose, pass --values and say why "
                         "in the commit")
    pins = others + [{"numerics": m["numerics"], "runs": m["runs"]} for m in made.values()]
    out = {"about": "tests/test_reference.py: exact sha256 per platform fingerprint, and one value tier",
           "pins": pins, "values": values}
    ref.REFERENCE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {ref.REFERENCE.relative_to(ROOT)}: {len(pins)} pins ({len(others)} of other machines kept); "
          f"spread between this machine's kernel sets: {spread:.3g} (tolerance {values['rel_tolerance']:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
