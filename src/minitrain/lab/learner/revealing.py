"""The reveal: seal the diagnoses, open the lab, then show the reference solutions completed with the numbers
measured on the learner's own runs (and the stability walker's verdict on each)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from minitrain.analysis import readings, signature, stability
from minitrain.analysis.compare import measure, measure_own
from minitrain.analysis.definitions import RECOVERY_RULE
from minitrain.core.errors import UserError
from minitrain.core.fmt import fmt
from minitrain.lab import blind, spoilers
from minitrain.lab.learner.labs import Lab, blind_folder, expected_runs, fault_step, lab_faults
from minitrain.lab.learner.parse import parse_diagnoses
from minitrain.lab.learner.references import Reference, check_reference, read_reference
from minitrain.lab.learner.seal import (history_flags, log_reveal, mark_revealed, read_seal, sha256_text,
                                        write_seal)
from minitrain.lab.learner.workspace import existing_learner
from minitrain.run import files, reader

MEASURE_LINES = {
    # fault -> the measurements that tell it, as (label, key, baseline key)
    "scale": (("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
              ("ratio to the baseline at K", "grad_norm_ratio_at_K", None),
              ("loss at K", "loss_at_K", "baseline_loss_at_K"),
              ("largest Adam v jump at K (run / baseline)", "v_jump_ratio_at_K", None),
              ("mean loss difference over K+1..K+50", "mean_loss_diff_after_K", None),
              ("first step whose loss differs from the baseline", "first_step_differing", None)),
    "bad_batch": (("loss at K", "loss_at_K", "baseline_loss_at_K"),
                  ("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
                  ("duplicated rows in the batch at K", "dup_rows_at_K", "baseline_dup_rows_at_K"),
                  ("rare-token share at K", "rare_share_at_K", "baseline_rare_share_at_K"),
                  ("largest loss difference after K (step)", "max_loss_diff_after_K", "max_loss_diff_step"),
                  (f"recovery steps (until {RECOVERY_RULE})", "recovery_steps", None)),
    "v_corrupt": (("Adam v jump at K (run / baseline)", "v_jump_ratio_at_K", None),
                  ("tensor with the v jump", "v_jump_param", None),
                  ("steps until its v is within 10% of the baseline", "v_steps_to_within_10pct", None),
                  ("loss at K", "loss_at_K", "baseline_loss_at_K"),
                  ("pre-clip grad norm at K", "grad_norm_at_K", "baseline_grad_norm_at_K"),
                  ("mean loss difference over K+1..K+50", "mean_loss_diff_after_K", None),
                  ("largest loss difference after K (step)", "max_loss_diff_after_K", "max_loss_diff_step")),
    "bad_init": (("step-0 loss", "step0_loss", "baseline_step0_loss"),
                 ("layer-0 activation vs baseline at step 0", "act0_ratio_step0", None),
                 ("first non-finite step", "non_finite_step", None),
                 ("largest loss in the first 100 steps", "max_loss_first_100", None)),
    "no_warmup": (("lr at step 0", "lr_first", None),
                  ("largest loss in the first 100 steps", "max_loss_first_100", None),
                  ("step-0 loss", "step0_loss", "baseline_step0_loss"),
                  ("final validation loss (difference to the baseline)", "final_val_loss", "final_val_loss_diff")),
    "broken_mask": (("final validation minus training loss", "final_val_minus_train", "baseline_final_val_minus_train"),
                    ("final validation loss (difference to the baseline)", "final_val_loss", "final_val_loss_diff"),
                    ("step-0 loss", "step0_loss", "baseline_step0_loss")),
}


def measured_lines(fault: str, m: dict) -> list[str]:
    out = []
    for label, key, other in MEASURE_LINES.get(fault, ()):
        never = key in ("recovery_steps", "v_steps_to_within_10pct") and key in m and m[key] is None
        value = "not within the run" if never else fmt(m.get(key))
        if other:
            sep = "step" if other == "max_loss_diff_step" else ("difference" if other.endswith("_diff") else "baseline")
            value += f" ({sep} {fmt(m.get(other))})"
        out.append(f"  - {label}: {value}")
    return out


def walk(run: Path) -> dict | None:
    """The stability walker's verdict on a run ({leaf, cause, anomaly_step, ...}), or None when the run cannot
    be walked (a one-line UserError: no metrics, a damaged file). An informational line: the reveal, the
    post-mortem and `remediate` go on without it."""
    try:
        return stability.diagnose_run(Path(run))
    except UserError:
        return None


def run_seed_k(run: Path, fault: str, mapping: dict | None) -> tuple[int | None, int | None]:
    """The seed and K a run was trained with: a blind run's from the sealed mapping (its config hides them)."""
    drawn = (mapping or {}).get(run.name, {}).get("overrides") or {}
    seed = drawn.get("seed", reader.config_of(reader.manifest_of(run)).get("seed"))
    return seed, fault_step(run, fault, mapping)


def measured_block(fault: str, run_id: str | None, lab: Lab, experiments: Path, mapping: dict | None) -> str:
    if run_id is None:
        return f"**Measured on your run**: no run of the lab carries {fault}."
    run = Path(experiments) / run_id
    where = f"`{run_id}`" + (f" (sealed mapping: {run_id.split('/')[-1]} carried {fault})" if mapping else "")
    if not (run / "metrics.jsonl").exists():
        return f"**Measured on your run {where}**: not found; train it ('just lab', 'just phase-19-blind' or " \
               "'just break-it-shuffled') and reveal again to see your numbers."
    baseline = reader.find_baseline(run, experiments)
    seed, k = run_seed_k(run, fault, mapping)
    m = measure(run, baseline, k)
    against = f"`{m['baseline']}`"
    if m["baseline"] is None and k is not None:  # a blind run has no baseline: as its page, against its own median
        own = measure_own(run, k)
        m.update({key: v for key, v in own.items() if key != "against"})
        against = f"{own.get('against', 'no baseline found')} (no baseline)"
    lines = [f"**Measured on your run {where}** against {against} (seed {seed}"
             + (f", K = {k}" if k is not None else "") + "):"]
    lines += measured_lines(fault, m)
    checks = readings.read(run)  # the walk the run's page made (readings.once), not a second one
    verdict = checks["verdict"] if checks else None
    if verdict and k is None:  # a break lasts the whole run: wrong from step 0, whatever step its evidence is read at
        at = verdict.get("anomaly_step")
        lines.append(f"  - the stability walker on this run: {verdict.get('leaf')} ({verdict.get('cause')}); the "
                     "break is there from step 0" + (f" (the walker reads its evidence at step {at})" if at else ""))
    elif verdict:
        lines.append(f"  - the stability walker on this run: {verdict.get('leaf')} ({verdict.get('cause')}), "
                     f"anomaly at step {verdict.get('anomaly_step')}")
    return "\n".join(lines)


def complete_reference(ref_text: str, refs: dict[str, Reference], lab: Lab, experiments: Path,
                       mapping: dict | None) -> str:
    """The reference text with, under each fault's section, the numbers measured on the learner's run, and
    each section's {seed} and {K} read as that run's own."""
    runs = expected_runs(lab, experiments, mapping)
    sections = re.split(r"(?m)^(?=## )", ref_text)
    out = []
    for section in sections:
        fault = next((f for f in lab_faults(lab) if f"<!-- measured:{f} -->" in section), None)
        if fault is not None:
            run_id = runs.get(fault)
            seed, k = run_seed_k(Path(experiments) / run_id, fault, mapping) if run_id else (None, None)
            section = section.replace("{seed}", str(seed if seed is not None else "?")).replace(
                "{K}", str(k if k is not None else "?"))
            section = section.replace(f"<!-- measured:{fault} -->", measured_block(fault, run_id, lab, experiments,
                                                                                   mapping))
        out.append(section)
    text = "".join(out).replace("{diagnoses}", lab.file)
    missing = [f for f in lab_faults(lab) if f"<!-- measured:{f} -->" not in ref_text]
    return text + "".join("\n" + measured_block(f, runs.get(f), lab, experiments, mapping) + "\n" for f in missing)


def open_lab(name: str, lab: Lab, experiments: Path, mapping: dict | None) -> list[str]:
    """Unseal the lab (REVEALED.json), write what was withheld (the spike lab's signature.json files and
    lab-report.md), and rewrite its pages with the answers in them. Returns the files now visible."""
    runs = [Path(experiments) / r for r in expected_runs(lab, experiments, mapping).values()]
    shown = []
    if lab.key == "spike":
        spoilers.mark_revealed(experiments, by=name)
        try:
            signature.report(experiments)
            shown.append(str(Path(experiments) / "lab-report.md"))
        except UserError as e:  # e.g. no baseline yet: the reveal goes on without the report, and says so
            print(f"minitrain: no lab report: {e}", file=sys.stderr)
    else:
        blind.reveal_mapping(blind_folder(lab, experiments), by=name)
    spoilers.refresh(experiments, runs)
    shown += [str(run / "dashboard.html") for run in runs if (run / "dashboard.html").exists()]
    return shown + [str(Path(experiments) / "index.html")]


def reveal(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None,
           force: bool = False) -> tuple[str, Path]:
    """Seal the diagnoses (first time only) and log the reveal in the learner's history (atomically, before
    anything is unsealed), then open the lab and show the reference completed with the learner's numbers.
    Returns (text to show, file it was also written to)."""
    d = existing_learner(name, learners)
    dfile = d / lab.file
    if not dfile.exists():
        raise UserError(f"{dfile} is missing; restore it from a fresh 'minitrain learner init' of another name")
    read_reference(lab, solutions)  # fail before sealing if the solutions are missing ...
    mapping = None
    if lab.key != "spike":
        mapping = blind.open_mapping(blind_folder(lab, experiments))  # ... or the shuffled lab is missing or altered
    seal = read_seal(d, lab)
    text = dfile.read_text()
    if seal is None:
        filled = [x for x in parse_diagnoses(text) if x.filled()]
        if len(filled) < 3 and not force:
            raise UserError(f"{dfile} has {len(filled)} of 3 diagnoses filled in (node, diagnosis and remediation); "
                            "fill them in first, or pass --force to reveal anyway (the empty ones score 0)")
        seal = write_seal(d, lab, text)
        new_seal = True
        head = f"sealed {dfile} (sha256 {seal['sha256'][:16]}, {seal['sealed_at']}) before showing the solutions"
    else:
        new_seal = False
        head = f"{dfile} was sealed at {seal['sealed_at']} (sha256 {seal['sha256'][:16]})"
        if sha256_text(text) != seal["sha256"]:
            head += "; it has been EDITED since: the sealed text is what is graded"
    log_reveal(d, lab, seal, new_seal)  # the trace first: an interrupt from here on leaves it behind
    mark_revealed(d, lab, seal)
    with readings.once(), reader.metrics_once():  # the pages, the runs table, the lab report and the measured
        # blocks read (and the first two walk) the same runs: once each
        visible = open_lab(name, lab, experiments, mapping)
        _, flags = history_flags(d, lab, seal, experiments)
        ref_text, refs = read_reference(lab, solutions)
        out = [head, *flags, ""]
        problems = check_reference(refs)
        if problems:
            out += ["WARNING: the reference solutions disagree with the stability tree: " + "; ".join(problems), ""]
        out.append(complete_reference(ref_text, refs, lab, experiments, mapping))
    if lab.key == "spike" and (Path(experiments) / "lab-report.md").exists():
        out += ["", (Path(experiments) / "lab-report.md").read_text()]
    out += ["", "Now visible, with the walker's answers in them:", *[f"  {p}" for p in visible]]
    shown = "\n".join(out).rstrip() + "\n"
    path = d / f"reveal-{lab.key}.md"
    files.atomic_write_text(path, shown)
    return shown, path
