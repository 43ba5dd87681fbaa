"""How good is the stability walker? Generate a suite of runs, diagnose each blind, score it.

    python bench/eval_diagnosis.py --quick            # short runs, a few minutes of CPU: tests / CI
    python bench/eval_diagnosis.py                    # the full suite (2000-step runs), run once, see docs/diagnosis.md
    python bench/eval_diagnosis.py --suite DIR --jobs 2

The suite: clean runs on several seeds; each injection across seeds, injection steps (early, middle,
late), magnitudes and parameters; the three break-it faults; the two LR-schedule bugs. Each seed has
its clean run in SUITE/seedN/clean, and every injection run of that seed lands beside it, so it forks
from the clean run's checkpoint instead of recomputing steps 0..K-1. Runs already in the suite with the
same config are reused.

Each run is diagnosed with `stability.diagnose_run` (metrics only; the truth is kept here, never shown to
the walker) and with the field's detectors (`detectors.py`). Written: SUITE/report.md, SUITE/results.json.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from minitrain.analysis import detectors
from minitrain.analysis import stability
from minitrain.core.config import build_config
from minitrain.lab import runner
from minitrain.run import reader

CAUSE_OF_INJECTION = {"scale": "gradient_explosion", "bad_batch": "bad_batch", "v_corrupt": "optimizer_state_corruption",
                      "lr_spike": "lr_spike", "corrupt_batch": "bad_batch", "stuck_loader": "stuck_loader",
                      "target_leak": "target_leak", "adam_setting": "optimizer_setting"}
NO_NAME = ("healthy", "unknown")  # the answers that name no cause: never a wrong name
DETECT_WINDOW = 20  # a detector "detects" an injection at K if it flags a step in [K, K + 20]


@dataclass
class Case:
    name: str  # folder: seedN/name
    seed: int
    sets: list[str]  # config overrides beyond the suite's base
    truth: str  # the cause that was put in
    expect: str  # what a correct walker says: the truth, or "healthy" for a designed no-trace case
    kind: str  # clean | injection | break | lr_bug
    k: int | None = None
    magnitude: str = ""  # scale / factor / sentence, for the by-magnitude table
    param: str = ""
    borderline: bool = False  # within natural variation: either verdict is accepted, reported apart
    split: str = "tuning"  # tuning: runs the thresholds were set on | held-out: runs that only measured them
    near_miss: bool = False  # must stay healthy or unknown (the right name also counts as right)
    oov: bool = False  # a fault outside the tree's vocabulary: healthy / unknown accepted, any name is wrong
    result: dict = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return f"seed{self.seed}/{self.name}"


# ---------------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------------

FULL_BASE = ["progress=false"]
QUICK_BASE = ["steps=200", "warmup_steps=20", "ckpt_every=50", "eval_every=50", "spectral_every=0", "progress=false"]

RARE_SENTENCES = ["She has written the letter.", "You have eaten an apple.", "It has gone.", "I have seen."]
COMMON_SENTENCE = "You finish the project."


def _k(slot: int, seed: int, steps: int) -> int:
    """Injection step: early / middle / late, jittered by seed so no threshold can lean on one step."""
    if steps >= 2000:
        return [140 + 11 * seed, 900 + 37 * seed, 1700 + 13 * seed][slot]
    return [30 + 7 * seed, 90 + 11 * seed, 150 + 9 * seed][slot]


def full_suite() -> list[Case]:
    cases: list[Case] = []
    for seed in (1, 2, 3, 4, 5):
        cases.append(Case("clean", seed, [], "healthy", "healthy", "clean"))
    for seed in (1, 2, 3):
        i = 0

        def slot():
            nonlocal i
            i += 1
            return _k((i + seed) % 3, seed, 2000)

        # scale: 0.5 and 2 leave a pre-clip trace of the size natural steps show (the clipped update is
        # unchanged): borderline, reported apart; 5-200 must be caught; 0.05 takes the norm under the clip
        # value: a real, downward change of every gradient
        for s in (0.5, 2, 5, 10, 20, 50, 200, 0.05):
            k = slot()
            cases.append(Case(f"scale-x{s:g}-k{k}", seed, ["injection=scale", f"injection_step={k}",
                                                            f"injection_scale={s}"], "gradient_explosion",
                              "gradient_explosion", "injection", k, f"scale x{s:g}", borderline=s in (0.5, 2)))
        for sentence in RARE_SENTENCES + [COMMON_SENTENCE]:
            k = slot()
            tag = "common" if sentence == COMMON_SENTENCE else "rare"
            cases.append(Case(f"bad_batch-{tag}{RARE_SENTENCES.index(sentence) if tag == 'rare' else ''}-k{k}", seed,
                              ["injection=bad_batch", f"injection_step={k}", f"injection_sentence={sentence}"],
                              "bad_batch", "bad_batch", "injection", k, f"{tag}: {sentence}"))
        for param, factor in (("lm_head.bias", 100), ("lm_head.bias", 0.01), ("tok_emb.weight", 1000),
                              ("blocks.0.attn.qkv.weight", 0.1), ("blocks.1.mlp.fc.weight", 10),
                              ("ln_f.weight", 0.01), ("blocks.1.attn.proj.weight", 2), ("blocks.0.ln1.weight", 0.5),
                              ("blocks.1.mlp.proj.weight", 1.05), ("lm_head.bias", 1.001)):
            k = slot()
            expect = "healthy" if factor == 1.001 else "optimizer_state_corruption"
            cases.append(Case(f"v-{param}-x{factor:g}-k{k}", seed, ["injection=v_corrupt", f"injection_step={k}",
                                                                   f"injection_param={param}",
                                                                   f"injection_factor={factor}"],
                              "optimizer_state_corruption", expect, "injection", k, f"factor x{factor:g}", param))
        if seed == 1:  # v_corrupt at step 0 is a no-op (Adam has no state yet): no trace at all
            cases.append(Case("v-lm_head.bias-x100-k0", seed, ["injection=v_corrupt", "injection_step=0"],
                              "optimizer_state_corruption", "healthy", "injection", 0, "factor x100 at step 0",
                              "lm_head.bias"))
    for seed in (1, 2):
        cases += [Case("break-init-x100", seed, ["init_scale=100"], "bad_init", "bad_init", "break"),
                  Case("break-no-warmup", seed, ["warmup_steps=0"], "no_warmup", "no_warmup", "break"),
                  Case("break-no-mask", seed, ["causal_mask=false"], "broken_mask", "broken_mask", "break")]
    short = ["steps=300", "ckpt_every=100"]
    # LR 100 without clipping: NaN within ~10 steps (the LR schedule itself is normal)
    cases.append(Case("break-nonfinite", 1, [*short, "lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0"],
                      "non_finite", "non_finite", "break"))
    cases += [Case("lr-constant", 1, [*short, "warmup_steps=0", "lr_min=0.0003"], "lr_schedule", "lr_schedule", "lr_bug"),
              Case("lr-zero", 1, [*short, "lr_max=0", "lr_min=0"], "lr_schedule", "lr_schedule", "lr_bug")]
    return cases


def fault_cases(seed: int, split: str) -> list[Case]:
    """The faults beyond the lab's three (issue 12) on one seed: every kind over steps and severities, plus
    near misses. K is late (1200-1700, jittered by seed) so each forks from the clean run and costs little."""
    j = 17 * seed % 97
    k1, k2, k3 = 1210 + j, 1450 + j, 1620 + j
    inj = lambda kind, k, *extra: ["injection=" + kind, f"injection_step={k}", *extra]  # noqa: E731
    cases = [
        Case(f"lr_spike-x30-5-k{k1}", seed, inj("lr_spike", k1, "injection_mult=30", "injection_span=5"),
             "lr_spike", "lr_spike", "injection", k1, "LR x30 for 5 steps", split=split),
        Case(f"lr_spike-x3-50-k{k2}", seed, inj("lr_spike", k2, "injection_mult=3", "injection_span=50"),
             "lr_spike", "lr_spike", "injection", k2, "LR x3 for 50 steps", split=split),
        Case(f"lr_spike-x0.2-30-k{k3}", seed, inj("lr_spike", k3, "injection_mult=0.2", "injection_span=30"),
             "lr_spike", "lr_spike", "injection", k3, "LR x0.2 for 30 steps (a dip)", split=split),
        Case(f"corrupt-random8-k{k1}", seed, inj("corrupt_batch", k1, "injection_mode=random"),
             "bad_batch", "bad_batch", "injection", k1, "random ids, 8 of 8 rows", split=split),
        Case(f"corrupt-shift4-k{k2}", seed, inj("corrupt_batch", k2, "injection_mode=shift", "injection_rows=4"),
             "bad_batch", "bad_batch", "injection", k2, "wrong-place cuts, 4 of 8 rows", split=split),
        Case(f"corrupt-mismatch2-k{k3}", seed, inj("corrupt_batch", k3, "injection_mode=mismatch", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", k3, "mismatched targets, 2 of 8 rows", split=split),
        Case(f"corrupt-shift1-k{k1 + 40}", seed, inj("corrupt_batch", k1 + 40, "injection_mode=shift", "injection_rows=1"),
             "bad_batch", "bad_batch", "injection", k1 + 40, "wrong-place cut, 1 of 8 rows", split=split,
             near_miss=True),
        Case(f"stuck-20-k{k2}", seed, inj("stuck_loader", k2, "injection_span=20"),
             "stuck_loader", "stuck_loader", "injection", k2, "same batch 20 steps", split=split),
        Case(f"stuck-2-k{k3}", seed, inj("stuck_loader", k3, "injection_span=2"),
             "stuck_loader", "stuck_loader", "injection", k3, "same batch 2 steps (one repeat)", split=split,
             near_miss=True),
        Case(f"leak-k{k1 - 200}", seed, inj("target_leak", k1 - 200, "injection_span=0"),
             "target_leak", "target_leak", "injection", k1 - 200, "inputs = targets to the end", split=split),
        Case(f"leak-20-k{k2}", seed, inj("target_leak", k2, "injection_span=20"),
             "target_leak", "target_leak", "injection", k2, "inputs = targets for 20 steps", split=split,
             near_miss=True),
        Case(f"adam-b2-0.6-k{k1}", seed, inj("adam_setting", k1, "injection_beta2=0.6"),
             "optimizer_setting", "optimizer_setting", "injection", k1, "beta2 0.95 -> 0.6 from K", split=split),
    ]
    return cases


def whole_run_cases(seed: int, split: str) -> list[Case]:
    """Faults that change a whole run (no fork): the LR's size, clipping off."""
    return [
        Case("lr-x10", seed, ["lr_max=0.003", "lr_min=0.0003"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x10 (3e-3)", split=split),
        Case("lr-x30", seed, ["lr_max=0.009", "lr_min=0.0009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x30 (9e-3)", split=split),
        Case("lr-x3", seed, ["lr_max=0.0009", "lr_min=0.00009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x3 (9e-4)", split=split, near_miss=True),
    ]


def tuning_cases() -> list[Case]:
    """Seed 1: the runs the new thresholds were set on (measured first, while the faults were being built)."""
    t = "tuning"
    inj = lambda kind, k, *extra: ["injection=" + kind, f"injection_step={k}", *extra]  # noqa: E731
    return [
        Case("clean", 1, [], "healthy", "healthy", "clean", split=t),
        Case("lr10x20-k600", 1, inj("lr_spike", 600, "injection_mult=10", "injection_span=20"), "lr_spike",
             "lr_spike", "injection", 600, "LR x10 for 20 steps", split=t),
        Case("cb-random8-k600", 1, inj("corrupt_batch", 600, "injection_mode=random"), "bad_batch", "bad_batch",
             "injection", 600, "random ids, 8 of 8 rows", split=t),
        Case("cb-shift8-k600", 1, inj("corrupt_batch", 600, "injection_mode=shift"), "bad_batch", "bad_batch",
             "injection", 600, "wrong-place cuts, 8 of 8 rows", split=t),
        Case("cb-mismatch8-k600", 1, inj("corrupt_batch", 600, "injection_mode=mismatch"), "bad_batch", "bad_batch",
             "injection", 600, "mismatched targets, 8 of 8 rows", split=t),
        Case("cb-random2-k1500", 1, inj("corrupt_batch", 1500, "injection_mode=random", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", 1500, "random ids, 2 of 8 rows", split=t),
        Case("cb-mismatch2-k1500", 1, inj("corrupt_batch", 1500, "injection_mode=mismatch", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", 1500, "mismatched targets, 2 of 8 rows", split=t),
        Case("stuck50-k600", 1, inj("stuck_loader", 600, "injection_span=50"), "stuck_loader", "stuck_loader",
             "injection", 600, "same batch 50 steps", split=t),
        Case("leak-k600", 1, inj("target_leak", 600, "injection_span=0"), "target_leak", "target_leak", "injection",
             600, "inputs = targets to the end", split=t),
        Case("leak-k1400", 1, inj("target_leak", 1400, "injection_span=0"), "target_leak", "target_leak",
             "injection", 1400, "inputs = targets to the end", split=t),
        Case("leak-k0", 1, inj("target_leak", 0, "injection_span=0"), "target_leak", "target_leak", "injection", 0,
             "inputs = targets, the whole run", split=t),
        Case("lrhigh10", 1, ["lr_max=0.003", "lr_min=0.0003"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x10 (3e-3)", split=t),
        Case("lrhigh30", 1, ["lr_max=0.009", "lr_min=0.0009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x30 (9e-3)", split=t),
        Case("nomask", 1, ["causal_mask=false"], "broken_mask", "broken_mask", "break", split=t),
        # a setting from step 0 leaves no change to see, and measured no spike: healthy is the honest answer
        Case("beta2-999", 1, ["beta2=0.999"], "optimizer_setting", "healthy", "break",
             magnitude="beta2 0.999, whole run", split=t, oov=True),
        Case("beta2-9999", 1, ["beta2=0.9999"], "optimizer_setting", "healthy", "break",
             magnitude="beta2 0.9999, whole run", split=t, oov=True),
        *[Case(f"adam-b2-{b2}{'-eps' + eps if eps else ''}-k300", 1,
               inj("adam_setting", 300, f"injection_beta2={b2}", *([f"injection_eps={eps}"] if eps else [])),
               "optimizer_setting", "optimizer_setting", "injection", 300,
               f"beta2 0.95 -> {b2}{', eps ' + eps if eps else ''} from K", split=t)
          for b2, eps in (("0.6", ""), ("0.8", ""), ("0.6", "1e-16"), ("0.9999", ""))],
    ]


def grown_suite() -> list[Case]:
    """Issue 12's faults. Seed 1 is the TUNING split (the runs the new thresholds were set on); seed 6 is HELD
    OUT (other K, magnitudes and severities; trained and scored only after the thresholds were fixed). Clipping
    off: a clean run and a x50 scale on it (the leaf's text must say the clipping-off thing)."""
    cases = tuning_cases()
    # seed 7: held out from everything, including the two fixes made after seed 6 was scored (docs/diagnosis.md)
    cases.append(Case("clean", 7, [], "healthy", "healthy", "clean", split="held-out-2"))
    cases += fault_cases(7, "held-out-2")
    cases.append(Case("lr-x30", 7, ["lr_max=0.009", "lr_min=0.0009"], "lr_too_high", "lr_too_high", "break",
                      magnitude="LR x30 (9e-3)", split="held-out-2"))
    seed, split = 6, "held-out"
    cases.append(Case("clean", seed, [], "healthy", "healthy", "clean", split=split))
    cases += fault_cases(seed, split)
    cases += whole_run_cases(seed, split)
    cases.append(Case("break-no-mask", seed, ["causal_mask=false"], "broken_mask", "broken_mask", "break",
                      split=split))
    cases.append(Case("noclip/clean", seed, ["grad_clip=0"], "healthy", "healthy", "clean", split=split))
    cases.append(Case("noclip/scale-x50-k1500", seed, ["grad_clip=0", "injection=scale", "injection_step=1500",
                                                       "injection_scale=50"],
                      "gradient_explosion", "gradient_explosion", "injection", 1500, "scale x50, clipping off",
                      split=split))
    return cases


def quick_suite() -> list[Case]:
    """Short runs (200 steps): the pipeline and the clear-cut leaves, in about a minute of CPU."""
    cases = [Case("clean", s, [], "healthy", "healthy", "clean") for s in (1, 2)]
    seed = 1
    inj = [("scale", 50, None, 1), ("scale", 0.01, None, 2), ("bad_batch", None, None, 0),
           ("v_corrupt", 100, "lm_head.bias", 2), ("v_corrupt", 0.01, "blocks.0.attn.qkv.weight", 1),
           ("v_corrupt", 100, "lm_head.bias", None)]  # at step 0: Adam has no state yet, a no-op: no trace
    for name, mag, param, slot in inj:
        k = _k(slot, seed, 200) if slot is not None else 0
        sets = [f"injection={name}", f"injection_step={k}"]
        if name == "scale":
            sets.append(f"injection_scale={mag}")
        if name == "v_corrupt":
            sets += [f"injection_factor={mag}", f"injection_param={param}"]
        truth = CAUSE_OF_INJECTION[name]
        expect = "healthy" if k == 0 else truth
        tag = f"-x{mag:g}" if mag is not None else ""
        folder = f"{name}{tag}-k{k}" if k else f"{name}-at-step0{tag}"
        cases.append(Case(folder, seed, sets, truth, expect, "injection", k,
                          f"{'scale' if name == 'scale' else 'factor'} x{mag:g}" if mag else "rare", param or ""))
    cases += [Case("break-init-x100", seed, ["init_scale=100"], "bad_init", "bad_init", "break"),
              Case("break-no-warmup", seed, ["warmup_steps=0"], "no_warmup", "no_warmup", "break"),
              Case("break-nonfinite", seed, ["lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0"],
                   "non_finite", "non_finite", "break"),
              Case("lr-constant", seed, ["warmup_steps=0", "lr_min=0.0003"], "lr_schedule", "lr_schedule", "lr_bug"),
              Case("lr-zero", seed, ["lr_max=0", "lr_min=0"], "lr_schedule", "lr_schedule", "lr_bug")]
    return cases


# ---------------------------------------------------------------------------------------------------
# Training (reusing what is there)
# ---------------------------------------------------------------------------------------------------


def _config(case: Case, base: list[str]):
    return build_config({}, [*base, f"seed={case.seed}", *case.sets])


def _up_to_date(out: Path, cfg) -> bool:
    m = reader.manifest_of(out)
    return (out / "results.json").exists() and m.get("config_hash") == cfg.hash() and \
        m.get("status") in ("finished", "non_finite")


def _train_one(args: tuple[str, list[str], str]) -> tuple[str, float]:
    folder, sets, suite = args
    from minitrain import loop

    cfg = build_config({}, sets)
    t0 = time.perf_counter()
    out = Path(suite) / folder
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # the per-run dashboard warning, if any, is not ours
        loop.train(cfg, out, force=True)
    return folder, time.perf_counter() - t0


def ensure_runs(cases: list[Case], suite: Path, base: list[str], jobs: int) -> None:
    """Train every case not already in the suite with the same config, `jobs` at a time (lab/runner.py: one
    process per run; one job: one after another in this process). An injection run starts once the clean
    run beside it (its donor) has ended."""
    todo = [c for c in cases if not _up_to_date(suite / c.folder, _config(c, base))]
    todo.sort(key=lambda c: c.kind != "clean")  # clean runs first: the injection runs fork from them
    names = {c.folder for c in todo}
    work = []
    for c in todo:
        clean = (Path(c.folder).parent / "clean").as_posix()
        args = ((c.folder, [*base, f"seed={c.seed}", *c.sets], str(suite)),)
        work.append(runner.Job(c.folder, call=_train_one, args=args,
                               donor=clean if c.kind == "injection" and clean in names else None))
    if not work:
        return
    print(f"training {len(work)} run(s) with {jobs} job(s) ...", file=sys.stderr)
    backend = runner.LocalProcesses(jobs) if jobs > 1 else runner.InThisProcess()

    def trained(j: runner.Job) -> None:
        if not j.failed:
            print(f"  {j.result[0]}: {j.result[1]:.1f}s", file=sys.stderr)

    done = runner.run_jobs(work, backend, on_end=trained)
    failed = [j for j in done if j.failed or j.state == "skipped"]
    if failed:
        why = failed[0].error() if failed[0].failed else "its clean run failed"
        raise SystemExit(f"{failed[0].name}: not trained ({why})")


# ---------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------


def evaluate(cases: list[Case], suite: Path) -> None:
    for c in cases:
        run = suite / c.folder
        t0 = time.perf_counter()
        verdict = stability.diagnose_run(run)
        secs = time.perf_counter() - t0
        ev = stability.load_evidence(run)
        flags = detectors.run_detectors(ev.loss, ev.grad_norm)
        steps = ev.steps
        c.result = {
            "leaf": verdict["leaf"], "cause": verdict["cause"], "anomaly_step": verdict["anomaly_step"],
            "seconds": round(secs, 3),
            "detectors": {name: [int(steps[i]) for i in idx] for name, idx in flags.items()},
        }
        if c.kind == "clean":
            c.result["margins"] = clean_margins(ev)
        if c.kind == "injection":
            clean = (suite / c.folder).parent / "clean"
            if clean.exists():
                cmp = stability.compare(ev, stability.load_evidence(clean), c.k)
                c.result["trace"] = {"first_differing_step": cmp.get("first_differing_step"),
                                     "max_abs_loss_diff": cmp.get("max_abs_loss_diff"),
                                     "grad_norm_ratio_at_k": _at(ev, stability.load_evidence(clean), c.k)}


def clean_margins(ev) -> dict:
    """How close a clean run comes to each statistical threshold (the exact checks have no near misses)."""
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)
    with np.errstate(all="ignore"):
        up = ev.gn_log_ratio - np.maximum(np.nan_to_num(ev.loss_log_ratio, nan=0.0), 0)
        excess = ev.loss_excess
        gn_ratio = np.exp(ev.gn_log_ratio)
        back = np.append(excess[1:], np.nan) <= stability.T["outlier_back"] * excess
        vf = ev.v_factor
        idx = np.flatnonzero(np.isfinite(ev.val_loss))
        val = ev.val_loss[idx]
        return {
            "v_factor_max_dev": float(math.exp(abs(vf["log_factor"]))) if vf else None,
            "all_tensor_up_max": float(np.exp(np.nanmax(ev.g_all_up))),
            "all_tensor_down_min": float(np.exp(np.nanmin(ev.g_all_down))),
            "gn_jump_any_max": float(np.exp(np.nanmax(up))),
            "loss_excess_max_nats": float(np.nanmax(excess)),
            "loss_excess_max_with_gn_and_back": float(np.nanmax(np.where(
                (gn_ratio >= stability.T["outlier_gn"]) & back, excess, np.nan))),
            "update_ratio_median": float(np.nanmedian(ev.update_ratio)),
            "stuck_repeats_max": int(ev.repeat_run.max()) if len(ev.repeat_run) else 0,
            "lr_jump_max": float(np.exp(np.nanmax(np.abs(np.log(ev.lr_step_ratio[2:]))))),
            "val_worst_over_lnv": float(val[idx > 0].max() / ev.ln_v) if (idx > 0).any() else None,
            "v_fit_noise": float(vf["noise"]) if vf else None,
            "best_val_over_ngram": float(val.min() / ev.ngram_val_loss) if len(val) and ev.ngram_val_loss else None,
            "last_val_over_best": float(val[-1] / val.min()) if len(val) else None,
        }


def _at(ev, base, k):
    i = int(np.searchsorted(ev.steps, k))
    if i >= len(ev.steps) or i >= len(base.steps):
        return None
    r = ev.grad_norm[i] / base.grad_norm[i]
    return float(r) if math.isfinite(r) else None


def correct(c: Case) -> bool:
    """Right: the expected cause (and, for a fault at one step, the step). A near miss or a fault outside the
    tree's vocabulary is also right when the answer names no cause (healthy / unknown)."""
    if (c.near_miss or c.oov) and c.result["cause"] in NO_NAME:
        return True
    if c.oov or c.result["cause"] != c.expect:
        return False
    if c.kind == "injection" and c.expect != "healthy" and c.result["anomaly_step"] is not None:
        return c.result["anomaly_step"] == c.k
    return c.kind != "injection" or c.expect == "healthy"


def wrong_name(c: Case) -> bool:
    """A cause named that is not the fault's: worse than 'unknown'. The goal is zero."""
    return c.result["cause"] not in NO_NAME and (c.oov or c.result["cause"] != c.truth)


def detector_rows(cases: list[Case]) -> list[dict]:
    out = []
    by_truth = defaultdict(list)
    for c in cases:
        if c.kind != "clean" and c.expect != "healthy" and not c.borderline:
            by_truth[c.truth].append(c)
    clean = [c for c in cases if c.kind == "clean"]
    clean_flags = {c.seed: c.result["detectors"] for c in clean}
    names = [d.name for d in detectors.DETECTORS] + ["walker"]
    for name in names:
        row = {"detector": name}
        for truth, cs in sorted(by_truth.items()):
            hits, delays = 0, []
            for c in cs:
                if name == "walker":
                    ok = c.result["cause"] == c.expect and (c.kind != "injection" or c.result["anomaly_step"] == c.k)
                    if ok:
                        hits += 1
                        if c.k is not None:
                            delays.append(0)
                    continue
                flagged = c.result["detectors"][name]
                if c.k is None:
                    if flagged:
                        hits += 1
                        delays.append(flagged[0])
                else:
                    # a flag the seed's clean run raises at the same step is the run's own natural spike
                    # (an injection run shares every batch with it), not a detection of the injection
                    natural = set(clean_flags.get(c.seed, {}).get(name, []))
                    inside = [s for s in flagged if c.k <= s <= c.k + DETECT_WINDOW and s not in natural]
                    if inside:
                        hits += 1
                        delays.append(inside[0] - c.k)
            row[truth] = {"hit": hits, "of": len(cs), "median_delay": float(np.median(delays)) if delays else None,
                          "at_k": all(c.k is not None for c in cs)}
        if name == "walker":
            fa = [c for c in clean if c.result["cause"] != "healthy"]
            row["clean_runs_alarmed"], row["clean_flags"] = len(fa), len(fa)
        else:
            row["clean_runs_alarmed"] = sum(1 for c in clean if c.result["detectors"][name])
            row["clean_flags"] = sum(len(c.result["detectors"][name]) for c in clean)
        row["clean_runs"] = len(clean)
        out.append(row)
    return out


def render(cases: list[Case], mode: str, secs: float) -> str:
    causes = [c for c in stability.CAUSES]
    rows_present = [x for x in causes if any(c.expect == x for c in cases)]
    cols_present = [x for x in causes if any(c.result["cause"] == x for c in cases) or x in rows_present]
    m = Counter((c.expect, c.result["cause"]) for c in cases if not c.borderline)
    lines = [f"# Diagnosis evaluation ({mode} suite)", "",
             f"{len(cases)} runs; walker correct on {sum(correct(c) for c in cases if not c.borderline)} of "
             f"{sum(1 for c in cases if not c.borderline)} (borderline cases apart). Cause AND step must match for an "
             f"injection. Largest walker time on one run: {max(c.result['seconds'] for c in cases):.2f}s. "
             f"Suite time (training + scoring, this session): {secs:.0f}s.", "",
             "## Confusion matrix (rows: expected cause, columns: diagnosed cause; borderline cases excluded)", "",
             "| expected \\ diagnosed | " + " | ".join(cols_present) + " |",
             "|---|" + "---|" * len(cols_present)]
    for r in rows_present:
        lines.append(f"| {r} | " + " | ".join(str(m.get((r, col), 0) or ".") for col in cols_present) + " |")
    inj = [c for c in cases if c.kind == "injection" and c.expect != "healthy" and not c.borderline
           and not c.near_miss and not c.oov]
    step_ok = sum(1 for c in inj if c.result["anomaly_step"] == c.k)
    wrong = [c for c in cases if wrong_name(c)]
    oov = [c for c in cases if c.oov]
    named = [c for c in cases if c.result["cause"] not in NO_NAME]
    lines += ["", f"Anomaly step exactly right on {step_ok} of {len(inj)} injections that must be caught.", "",
              f"**Wrong names: {len(wrong)}** of {len(named)} runs given a cause "
              f"(precision {1 - len(wrong) / max(1, len(named)):.3f}); 'unknown' answers: "
              f"{sum(c.result['cause'] == 'unknown' for c in cases)}. Faults outside the tree's vocabulary: "
              f"{len(oov)}, of which named wrongly: {sum(wrong_name(c) for c in oov)}.", ""]
    for split in sorted({c.split for c in cases}):
        sc = [c for c in cases if c.split == split and not c.borderline]
        lines.append(f"- {split}: {sum(correct(c) for c in sc)} of {len(sc)} right, "
                     f"{sum(wrong_name(c) for c in sc)} wrong names")
    lines += ["", "## Every run", "",
              "| run | split | truth | expected | diagnosed | leaf | K | step found | ok |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        tag = " (near miss)" if c.near_miss else " (outside the vocabulary)" if c.oov else ""
        ok = "borderline" if c.borderline else ("**WRONG NAME**" if wrong_name(c) else "yes" if correct(c) else "**NO**")
        lines.append(f"| {c.folder} | {c.split} | {c.truth} {c.magnitude} {c.param}{tag} | {c.expect} | "
                     f"{c.result['cause']} | {c.result['leaf']} | {c.k if c.k is not None else ''} | "
                     f"{c.result['anomaly_step'] if c.result['anomaly_step'] is not None else ''} | {ok} |")
    clean = [c for c in cases if c.kind == "clean" and "margins" in c.result]
    if clean:
        lines += ["", "## How close clean runs come to each threshold", "",
                  "| clean run | split | v factor (§6.1: 1.02) | every tensor up (§7.1: 2) | every tensor down (§7.2: 0.4) | "
                  "any jump (§7.3: 30) | loss excess nats (§4.2: 1; with gn x1.5 and back) | best val / n-gram (§3.2: 0.85) | "
                  "last / best val (§3.2: 1.15) | median update ratio (§2.5: 0.0025) | LR jump (§2.4: 1.8) | "
                  "repeats (§4.3: 3) | worst val / ln V (§3.4: 1) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in clean:
            mg = c.result["margins"]
            f = lambda x, d=3: "n/a" if x is None else f"{x:.{d}g}"  # noqa: E731
            lines.append(f"| {c.folder} | {c.split} | {f(mg['v_factor_max_dev'], 6)} | {f(mg['all_tensor_up_max'])} | "
                         f"{f(mg['all_tensor_down_min'])} | {f(mg['gn_jump_any_max'])} | "
                         f"{f(mg['loss_excess_max_nats'])} ({f(mg['loss_excess_max_with_gn_and_back'])}) | "
                         f"{f(mg['best_val_over_ngram'])} | {f(mg['last_val_over_best'])} | "
                         f"{f(mg['update_ratio_median'])} | {f(mg['lr_jump_max'])} | {mg['stuck_repeats_max']} | "
                         f"{f(mg['val_worst_over_lnv'])} |")
    lines += ["", "## The field's detectors over the same runs", "",
              f"A detector detects an injection when it flags a step in [K, K+{DETECT_WINDOW}] that the same seed's "
              "clean run does not flag (the two share every batch; delay = first such flag - K); a break or LR bug when it flags any step (shown: the first flagged step, which may have "
              "nothing to do with the fault). None of them names a cause; the walker's row counts a hit only with "
              "the right cause (and, for an injection, the right step). Borderline and no-trace cases are left out.",
              ""]
    drows = detector_rows(cases)
    truths = [k for k in drows[0] if k not in ("detector", "clean_runs_alarmed", "clean_flags", "clean_runs")]
    lines.append("| detector | " + " | ".join(truths) + " | clean runs with a flag | flags on clean runs |")
    lines.append("|---|" + "---|" * (len(truths) + 2))
    for r in drows:
        cells = []
        for t in truths:
            v = r[t]
            label = "delay" if v["at_k"] else "first flag at"
            d = "" if v["median_delay"] is None else f" ({label} {v['median_delay']:g})"
            cells.append(f"{v['hit']}/{v['of']}{d}")
        lines.append(f"| {r['detector']} | " + " | ".join(cells) +
                     f" | {r['clean_runs_alarmed']}/{r['clean_runs']} | {r['clean_flags']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (200 steps) for tests and CI")
    ap.add_argument("--grown", action="store_true",
                    help="issue 12's faults (LR spike / too high, corrupted and stuck batches, target leak, optimizer "
                         "setting, clipping off) on a tuning seed and two held-out seeds, 2000-step runs")
    ap.add_argument("--suite", metavar="DIR", help="where the suite's runs live (default experiments/diagnosis-suite[-quick])")
    ap.add_argument("--jobs", type=int, default=1, help="training processes in parallel (default 1)")
    ap.add_argument("--no-train", action="store_true", help="score the runs already there, train nothing")
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "grown" if args.grown else "full"
    suite = Path(args.suite or f"experiments/diagnosis-suite{'' if mode == 'full' else '-' + mode}")
    cases = quick_suite() if args.quick else grown_suite() if args.grown else full_suite()
    base = QUICK_BASE if args.quick else FULL_BASE
    t0 = time.perf_counter()
    if not args.no_train:
        ensure_runs(cases, suite, base, max(1, args.jobs))
    cases = [c for c in cases if (suite / c.folder / "metrics.jsonl").exists()]
    evaluate(cases, suite)
    text = render(cases, mode, time.perf_counter() - t0)
    from minitrain.run.files import atomic_write_text

    suite.mkdir(parents=True, exist_ok=True)
    atomic_write_text(suite / "report.md", text)
    atomic_write_text(suite / "results.json", json.dumps(
        {"mode": mode, "cases": [asdict(c) for c in cases], "detectors": detector_rows(cases)}, indent=1) + "\n")
    print(text)
    wrong = [c.folder for c in cases if not c.borderline and not correct(c)]
    print(f"not right: {', '.join(wrong) if wrong else 'none'}; wrong names: "
          f"{', '.join(c.folder for c in cases if wrong_name(c)) or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
