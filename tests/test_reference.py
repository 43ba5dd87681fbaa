"""Reference outputs, in two tiers (tests/data/reference.json; docs/metrics.md, "Where byte-identity holds").

A run's bytes depend on its config, the code and the platform it computes on: the torch build, the CPU kernel set,
the BLAS and its reproducibility mode, oneDNN and the thread count (core/numerics.py's fingerprint). So:
  exact   the sha256 of each reference run's metrics.jsonl, keyed by that fingerprint: checked wherever a pin's
          fingerprint is this process's. `just regen-reference` adds this machine's pins beside the others.
  values  everywhere: the losses and gradient norms of the same runs, pinned once, within REL_TOLERANCE (derived
          from the measured spread between kernel sets, documented in reference.json and docs/metrics.md), and
          the lab's signatures identical: x50.00 pre-clip at K, the bad batch's rows, Adam v's jump, each
          prediction's holds / does not hold.
A change that moves the numerics on purpose moves both tiers (`just regen-reference --values`), and its commit
says why.

Runs:
  small/*      the small config (conftest.SMALL, 120 steps) and its three lab injections forked at step 60
  lab-short/*  `minitrain lab --injection-step 100 --set steps=120 --set ckpt_keep_steps=100`: the lab's own
               config but its length. K = 100 is the lab's first checkpoint (ckpt_every 100) and the end of
               its warmup, so the injection runs fork at a checkpoint exactly as the full lab's do at 500
               (kept as 500 is: ckpt_keep_steps), and run 20 steps past K.

Byte-identity between two runs made here (fork == scratch, resume == uninterrupted, parallel == sequential,
sinks change no byte) is a property, tested by comparing runs made in the same session, never with these pins.
metrics.jsonl holds no clock, path or host (test_metrics_rows_hold_no_time_path_or_host): the whole file is hashed.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

from conftest import LAB_LETTERS, SMALL_K, run_cli

REFERENCE = Path(__file__).resolve().parent / "data" / "reference.json"
LAB_SHORT_K, LAB_SHORT_STEPS = 100, 120
LAB_INJECTIONS = ("none", *LAB_LETTERS)
SERIES = ("loss", "grad_norm")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metrics_sha(run: Path) -> str:
    return sha256((Path(run) / "metrics.jsonl").read_bytes())


def pinned() -> dict:
    return json.loads(REFERENCE.read_text())


def exact_pins(fingerprint: dict, reference: dict | None = None) -> dict | None:
    """The pinned sha256 of each run for FINGERPRINT ({group: {run: sha}}), or None where none was made on it."""
    from minitrain.core import numerics

    for pin in (reference or pinned())["pins"]:
        if numerics.same(pin["numerics"], fingerprint):
            return pin["runs"]
    return None


def small_lab_shas(exp: Path) -> dict[str, str]:
    """conftest.small_lab's four runs: {run folder name: sha}."""
    return {p.name: metrics_sha(p) for p in sorted(Path(exp).iterdir()) if (p / "metrics.jsonl").exists()}


def lab_short_names() -> list[str]:
    from minitrain.core.course import lab_run_name

    return [lab_run_name(inj, 42, LAB_SHORT_K) for inj in LAB_INJECTIONS]


def make_lab_short(exp: Path) -> dict[str, str]:
    """`minitrain lab` at LAB_SHORT_STEPS steps, K = LAB_SHORT_K, into `exp`: {run folder name: sha}."""
    run_cli("lab", "--experiments", str(exp), "--injection-step", str(LAB_SHORT_K), "--set", f"steps={LAB_SHORT_STEPS}",
            "--set", f"ckpt_keep_steps={LAB_SHORT_K}", "--no-report", check=True)
    return {name: metrics_sha(exp / name) for name in lab_short_names()}


# ---- the value tier ----------------------------------------------------------------------------------------

def series(run: Path) -> dict[str, list]:
    """The run's loss and pre-clip gradient norm at every step, as the rows hold them."""
    from minitrain.run import reader

    rows = reader.read_metrics(Path(run) / "metrics.jsonl")[0]
    return {"step": [r["step"] for r in rows], **{k: [r.get(k) for r in rows] for k in SERIES}}


def signature_facts(run: Path, baseline: Path) -> dict:
    """What the lab's signature of an injection run says, in the form that must not move between platforms:
    the pre-clip ratio at K to two decimals (x50.00), the bad batch's rows, the injected v's jump, the tensor,
    and each prediction's holds / does not hold."""
    from minitrain.analysis import signature
    from minitrain.run import reader

    sig = signature.lab_signature(Path(run), Path(baseline))
    rows = reader.read_metrics(Path(run) / "metrics.jsonl")[0]
    at_k = next(r for r in rows if r["step"] == sig["injection_step"])
    return {"injection": sig["injection"], "step": sig["injection_step"],
            # the injected factor as the lab prints it (the other injections' ratio is a measurement, not a signature)
            "ratio_at_k": f"x{sig['grad_norm_ratio_vs_baseline_at_k']:.2f}" if sig["injection"] == "scale" else None,
            "rows_at_k": at_k.get("batch"), "v_param": sig.get("v_param"), "v_ratio_at_k": sig.get("v_ratio_at_k"),
            "holds": [p["holds"] for p in sig["predictions"]]}


def values_of(exp: Path, names: list[str]) -> dict:
    """The value tier of the runs NAMES in EXP (the first is the baseline): series and signatures."""
    base = Path(exp) / names[0]
    return {"series": {name: series(Path(exp) / name) for name in names},
            "signatures": {name: signature_facts(Path(exp) / name, base) for name in names[1:]}}


def close(a, b, rel: float) -> bool:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def value_differences(measured: dict, reference: dict, rel: float) -> list[str]:
    """Where MEASURED (values_of) leaves REFERENCE's values: [] when every loss and gradient norm is within REL
    and every signature fact is the same (the v ratio within REL too: it is a quotient of measured values)."""
    out = []
    for name, ref in reference["series"].items():
        got = measured["series"].get(name)
        if got is None or got["step"] != ref["step"]:
            out.append(f"{name}: steps differ")
            continue
        for key in SERIES:
            bad = [(s, a, b) for s, a, b in zip(ref["step"], got[key], ref[key]) if not close(a, b, rel)]
            if bad:
                s, a, b = bad[0]
                out.append(f"{name}: {key} at step {s} is {a!r}, pinned {b!r} ({len(bad)} steps beyond rel {rel:g})")
    for name, ref in reference["signatures"].items():
        got = dict(measured["signatures"].get(name) or {})
        if not close(got.pop("v_ratio_at_k", None), ref["v_ratio_at_k"], rel):
            out.append(f"{name}: v ratio at K differs")
        for key, value in ref.items():
            if key != "v_ratio_at_k" and got.get(key) != value:
                out.append(f"{name}: signature {key} is {got.get(key)!r}, pinned {value!r}")
    return out


def check_both_tiers(group: str, exp: Path, names: list[str], shas: dict[str, str]) -> None:
    from minitrain.core import numerics

    reference = pinned()
    fp = json.loads((Path(exp) / names[0] / "manifest.json").read_text())["numerics"]  # what the runs ran on
    exact = exact_pins(fp, reference)
    if exact is not None:
        assert shas == exact[group], f"the bytes moved on a pinned platform ({numerics.key(fp)})"
    else:
        warnings.warn(f"no exact pin for {numerics.key(fp)}: the value tier alone checked {group} "
                      "(`just regen-reference` adds this machine's pins)")
    values = reference["values"]
    ref = {"series": {n: values["series"][f"{group}/{n}"] for n in names},
           "signatures": {n: values["signatures"][f"{group}/{n}"] for n in names[1:]}}
    assert value_differences(values_of(exp, names), ref, values["rel_tolerance"]) == []


def test_a_120_step_run_and_its_forks_at_60_match_the_reference(small_lab):
    names = ["18-baseline", *(f"19-injection-{letter}" for letter in LAB_LETTERS.values())]
    check_both_tiers("small", small_lab, names, small_lab_shas(small_lab))
    for letter in LAB_LETTERS.values():  # forked from the baseline's checkpoint at K, not trained from scratch
        manifest = json.loads((small_lab / f"19-injection-{letter}" / "manifest.json").read_text())
        assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": SMALL_K}


def test_the_lab_at_120_steps_matches_the_reference(tmp_path):
    shas = make_lab_short(tmp_path)
    check_both_tiers("lab-short", tmp_path, lab_short_names(), shas)
    for name in lab_short_names()[1:]:
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["forked_from"] == {"run": "18-baseline", "checkpoint_step": LAB_SHORT_K}


def test_the_value_tier_refuses_a_value_beyond_its_tolerance_and_a_changed_signature(small_lab):
    names = ["18-baseline", "19-injection-A"]
    values = pinned()["values"]
    rel = values["rel_tolerance"]
    measured = values_of(small_lab, names)
    ref = json.loads(json.dumps(measured))
    assert value_differences(measured, ref, rel) == []
    ref["series"]["18-baseline"]["loss"][90] *= 1 + 0.5 * rel  # inside: passes
    assert value_differences(measured, ref, rel) == []
    ref["series"]["18-baseline"]["loss"][90] *= 1 + 3 * rel  # beyond: named with its step
    assert [d.split(" is ")[0] for d in value_differences(measured, ref, rel)] == ["18-baseline: loss at step 90"]
    ref = json.loads(json.dumps(measured))
    ref["signatures"]["19-injection-A"]["ratio_at_k"] = "x49.99"
    assert value_differences(measured, ref, rel) == ["19-injection-A: signature ratio_at_k is 'x50.00', pinned 'x49.99'"]


def test_the_reference_records_its_platforms_and_the_tolerance_it_was_derived_from():
    from minitrain.core import numerics

    reference = pinned()
    keys = [numerics.key(pin["numerics"]) for pin in reference["pins"]]
    assert len(keys) == len(set(keys)) and all(k != "unknown" for k in keys)  # one pin per fingerprint
    assert all(set(pin["runs"]) == {"small", "lab-short"} for pin in reference["pins"])
    measured = reference["values"]["measured_spread"]  # what the tolerance was derived from
    assert measured["kernel_sets"] and 0 < measured["max_rel"] < reference["values"]["rel_tolerance"]


def test_metrics_rows_hold_no_time_path_or_host(small_lab):
    """What makes the hash of a whole metrics.jsonl portable between folders and hosts of one platform."""
    run = small_lab / "19-injection-A"
    data = (run / "metrics.jsonl").read_bytes()
    keys = {k for line in data.splitlines() for k in json.loads(line)}
    assert not {k for k in keys if any(w in k for w in ("time", "second", "wall", "date", "host", "path"))}
    manifest = json.loads((run / "manifest.json").read_text())
    for value in (str(small_lab), manifest["started"][:10], manifest["hardware"]["platform"]):
        assert value.encode() not in data
