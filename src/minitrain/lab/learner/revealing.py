"""The reveal: seal the diagnoses, open the lab, then show the reference solutions completed with the numbers
measured on the learner's own runs (and the stability walker's verdict on each)."""
from __future__ import annotations

from pathlib import Path

from minitrain.analysis import stability
from minitrain.analysis.compare import measure
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
                  ("recovery steps (loss within 0.02 nats of the baseline from then on)", "recovery_steps", None)),
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
        value = fmt(m.get(key))
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


def measured_block(fault: str, run_id: str | None, lab: Lab, experiments: Path, mapping: dict | None) -> str:
    if run_id is None:
        return f"**Measured on your run**: no run of the lab carries {fault}."
    run = Path(experiments) / run_id
    where = f"`{run_id}`" + (f" (sealed mapping: {run_id.split('/')[-1]} carried {fault})" if mapping else "")
    if not (run / "metrics.jsonl").exists():
        return f"**Measured on your run {where}**: not found; train it ('just lab', 'just phase-19-blind' or " \
               "'just break-it-shuffled') and reveal again to see your numbers."
    baseline = reader.find_baseline(run, experiments)
    k = fault_step(run, fault, mapping)
    m = measure(run, baseline, k)
    lines = [f"**Measured on your run {where}** against `{m['baseline'] or 'no baseline found'}`"
             + (f", K = {k}" if k is not None else "") + ":"]
    lines += measured_lines(fault, m)
    verdict = walk(run)
    if verdict:
        lines.append(f"  - the stability walker on this run: {verdict.get('leaf')} ({verdict.get('cause')}), "
                     f"anomaly at step {verdict.get('anomaly_step')}")
    return "\n".join(lines)


def complete_reference(ref_text: str, refs: dict[str, Reference], lab: Lab, experiments: Path,
                       mapping: dict | None) -> str:
    """The reference text with, under each fault's section, the numbers measured on the learner's run."""
    runs = expected_runs(lab, experiments, mapping)
    text = ref_text
    for fault in lab_faults(lab):
        block = measured_block(fault, runs.get(fault), lab, experiments, mapping)
        marker = f"<!-- measured:{fault} -->"
        text = text.replace(marker, block) if marker in text else text + "\n" + block + "\n"
    return text


def reveal(name: str, lab: Lab, learners: Path, experiments: Path, solutions: Path | None = None,
           force: bool = False) -> tuple[str, Path]:
    """Seal the diagnoses (first time only), then the reference completed with the learner's numbers.
    Returns (text to show, file it was also written to)."""
    d = existing_learner(name, learners)
    dfile = d / lab.file
    if not dfile.exists():
        raise UserError(f"{dfile} is missing; restore it from a fresh 'minitrain learner init' of another name")
    read_reference(lab, solutions)  # fail before sealing if the solutions are missing ...
    if lab.key != "spike":
        blind.read_public(blind_folder(lab, experiments))  # ... or the shuffled lab was never made
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
    mapping = None
    if lab.key != "spike":
        mapping = blind.reveal_mapping(blind_folder(lab, experiments), by=name)
    else:
        spoilers.mark_revealed(experiments, by=name)
    # the lab's pages and the index show the walker's answers from here on (they are sealed until the reveal)
    spoilers.refresh(experiments, [Path(experiments) / r for r in expected_runs(lab, experiments, mapping).values()])
    mark_revealed(d, lab, seal)
    log_reveal(d, lab, seal, new_seal)  # before anything is shown
    _, flags = history_flags(d, lab, seal)
    ref_text, refs = read_reference(lab, solutions)
    out = [head, *flags, ""]
    problems = check_reference(refs)
    if problems:
        out += ["WARNING: the reference solutions disagree with the stability tree: " + "; ".join(problems), ""]
    out.append(complete_reference(ref_text, refs, lab, experiments, mapping))
    shown = "\n".join(out).rstrip() + "\n"
    path = d / f"reveal-{lab.key}.md"
    files.atomic_write_text(path, shown)
    return shown, path
