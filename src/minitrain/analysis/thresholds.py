"""Every number the stability check judges by, defined once, with where it comes from.

The tree's checks, its generated markdown, the dashboard's health summary and the evaluation suite all read
these; nothing else in the package may restate one. `source` says who set the number:

    course   a fact of the course (course-notes.md): kept as the course gives it
    tuned    set on the TUNING runs (seeds 1-3 of the evaluation suite, docs/diagnosis.md) with its margin over
             them recorded there; the HELD-OUT runs (other seeds, steps and magnitudes) only measured it
    exact    an identity of the training step (Adam's recurrence, the schedule's own shape), not a fit
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    value: float
    source: str  # course | tuned | exact
    meaning: str


THRESHOLDS: dict[str, Threshold] = {
    # §1 did the run start? (course)
    "loss0_high": Threshold(8.0, "course", "step-0 loss above this: broken init or a non-zero LM-head bias"),
    "loss0_low": Threshold(4.0, "course", "step-0 loss below this: the model is not untrained"),
    "loss0_band": Threshold(0.5, "course", "step-0 loss within ln V +- this"),
    "gn1_healthy_low": Threshold(0.1, "course", "healthy step-1 gradient norm: at least this (health summary)"),
    "gn1_healthy_high": Threshold(10.0, "course", "healthy step-1 gradient norm: at most this (health summary)"),
    "gn1_high": Threshold(100.0, "course", "step-1 gradient norm above this: bad init or a sum/mean mix-up (leaf)"),
    "gn1_low": Threshold(0.001, "course", "step-1 gradient norm below this: degenerate data or an all-zero loss mask (leaf)"),
    # §2 the LR
    "lr_flat": Threshold(1e-3, "exact", "(max LR - min LR) / max LR below this: the LR never changed"),
    "warmup_share": Threshold(0.5, "exact", "first-step LR at or above this share of the peak LR: no warmup ramp"),
    "warmup_lr": Threshold(1e-3, "tuned", "a run whose intended schedule is unknown (imported): §2.3 names no "
                                          "warmup only at a peak LR this large or larger. Adam's first steps move "
                                          "each weight by about the LR, and small transformers train without "
                                          "warmup at 3e-4 (Adam's usual default) and at transformers' 5e-5; "
                                          "those missing a warmup that hurts them ran at 3e-2 and 5e-2 here"),
    "lr_jump": Threshold(1.8, "exact", "LR changed by more than this factor in one step (from step 2 on): neither "
                                       "a linear warmup (at most x1.5 from step 2) nor a cosine does that"),
    "lr_steady": Threshold(1.2, "exact", "... out of a steady schedule: the step before changed the LR by less than "
                                         "this factor (a warmup from an LR of 0, as transformers' schedules start, or "
                                         "a decay to 0 changes it by more on every step near its ends)"),
    "ur_high": Threshold(5e-3, "tuned", "median update-to-weight ratio (|p_new - p_old| / |p_old|, median over "
                                        "tensors) over the steps at ur_peak_share of the peak LR or more, above "
                                        "this: the LR is too large (healthy runs up to 4e-3 at twice the course's LR)"),
    "ur_peak_share": Threshold(0.5, "exact", "... the steps whose LR is at least this share of the run's peak LR: "
                                             "the ratio follows the LR, so a warmup or a decay to 0 does not dilute it"),
    "ur_run_steps": Threshold(1000, "tuned", "steps a run needs before §2.5 judges its LR's size: early in any run "
                                            "the weights are small and the ratio is high whatever the LR (a 200-step "
                                            "run's median is near the threshold); validated on 2000-step runs"),
    # §2.9 the LR's size read from the loss and the LR (a run without the update-to-weight ratio), set on the
    # foreign suite's 40 runs (docs/foreign-runs.md)
    "lr_peak_share": Threshold(0.8, "tuned", "§2.9: a row 'at the peak LR' has an LR at least this share of the run's "
                                             "largest ..."),
    "lr_decay_share": Threshold(0.5, "tuned", "... and one 'decayed' at most this share, after the peak"),
    "above_untrained": Threshold(1.2, "tuned", "§2.9: the smoothed loss at the peak LR above this many times an "
                                               "untrained model's (ln V, else the first logged loss): worse than "
                                               "not training (healthy runs here: at most 1.0, their first row; the too-high "
                                               "runs 1.32-8.75)"),
    "peak_onset_share": Threshold(0.25, "tuned", "... within this share of the run's steps after the LR first reached "
                                                 "its peak (the too-high runs: at once, or 24 steps of 300 after; an "
                                                 "LR spike between logged rows lands later)"),
    "stall_noise": Threshold(3.0, "tuned", "§2.9: the loss's net fall at the peak LR (median of the first third of those "
                                           "rows less the last's) within this many σ of its own row-to-row noise "
                                           "there: it stalled at the peak (the too-high runs -1.5 to 1.4; every "
                                           "other run here at least 6.4, the healthy ones 12 or more) ..."),
    "decay_fall": Threshold(0.01, "tuned", "... and fell at least this share of its level once the LR decayed "
                                           "(the stalled runs 2-17%: the fall the LR's decay allows)"),
    "stall_share": Threshold(0.04, "tuned", "§2.9, an LR held at its peak: the loss's median over the run's last "
                                            "quarter fell less than this share below its second quarter's (healthy "
                                            "constant-LR runs here: 11-13%; the stalled ones -1% to 2.7%) ..."),
    "stall_level": Threshold(0.6, "tuned", "... while it stays above this share of an untrained model's loss (the "
                                           "stalled runs 0.80-0.85; the healthy runs held at their peak: 0.30)"),
    # §3 loss health
    "mask_train": Threshold(0.5, "tuned", "training loss (smoothed) below this share of the n-gram baseline ..."),
    "mask_val": Threshold(0.85, "tuned", "... while the best validation loss stays above this share of it ..."),
    "mask_rise": Threshold(1.15, "tuned", "... and the last validation loss is this many times the best"),
    "mask_ur": Threshold(3e-3, "tuned", "a broken mask's rule-out: the peak-LR update-to-weight ratio (as ur_high) "
                                        "above this is an LR above the course's, which memorises and climbs too "
                                        "(broken masks at the course's LR: at most 2.4e-3)"),
    "leak_val": Threshold(1.0, "tuned", "validation loss above this many times ln V (worse than an untrained "
                                        "model) while training loss is below half the n-gram baseline: a leak"),
    "leak_climb": Threshold(1.2, "tuned", "... or a loss jump (outlier_z σ and outlier_rows, as §4.2) after which the "
                                          "last validation loss is above this many times its best before the jump: "
                                          "a leak from that step (leaks 1.45-2.64, bad batches and 20-step leaks at "
                                          "most 1.03)"),
    "not_learning": Threshold(0.9, "tuned", "final training loss above this share of the step-0 loss"),
    # §4 batches
    "dup_share": Threshold(0.5, "tuned", "share of a batch's rows that repeat an earlier row of it"),
    "silent_steps": Threshold(3, "tuned", "consecutive steps a silent-bug signal (core/silent.py) must fire on "
                              "before §9 names it: one flagged step could be a skipped update"),
    "silent_window": Threshold(10, "tuned", "steps on each side of a candidate onset over which §9.4 compares the "
                               "pre-clip norm's and the loss's medians"),
    "loss_sum_shift": Threshold(8, "tuned", "lasting rise of the pre-clip norm (x its trailing median, and still at "
                                "the run's end) that §9.4 reads as a loss summed over tokens: a batch has far more "
                                "target tokens than 8"),
    "loss_sum_loss_move": Threshold(0.25, "tuned", "largest relative move of the loss's median across the onset "
                                    "for §9.4: a summed loss logged as its token mean does not move"),
    "stuck_steps": Threshold(3, "tuned", "consecutive steps whose batch composition equals the previous step's "
                                          "(clean runs: at most 1, by coincidence)"),
    "outlier_z": Threshold(10.0, "tuned", "a batch's own loss this many σ of the run's own loss noise above its "
                                          "trailing median (robust z) ..."),
    "outlier_rows": Threshold(1.0, "exact", "... and at least this many rows' worth of a chance-level loss over the "
                                            "batch (ln V / batch size nats per row: the batch mean's own unit, so "
                                            "the bar falls as the batch grows) ..."),
    "outlier_loss_share": Threshold(0.1, "tuned", "... (an imported run whose batch size or vocabulary is unknown: "
                                                  "at least this share of the run's median loss instead) ..."),
    "outlier_gn_z": Threshold(1.0, "tuned", "... with the pre-clip gradient norm this many σ of its own noise above "
                                            "its median ..."),
    "outlier_back": Threshold(0.5, "tuned", "... and the previous and next steps' loss excess below this share of "
                                            "the jump (a bad batch is one step: the model was not damaged)"),
    "stuck_fall_steps": Threshold(10, "tuned", "without batch composition (§4.4): the loss fell at every step for "
                                               "at least this many steps (a real batch's noise breaks a run of "
                                               "falls within a few steps once the loss has flattened) ..."),
    "stuck_fall_z": Threshold(3.0, "tuned", "... by at least this many σ of its own noise in all ..."),
    "stuck_back": Threshold(0.5, "tuned", "... and the next step's loss jumped back at least this share of that "
                                          "fall (new batches: the memorised one's gain is gone)"),
    "stuck_fall_rows": Threshold(5, "tuned", "in a log every N steps (§4.4): the loss fell at every row for at least "
                                            "this many rows (a repeat shorter than five intervals is not read) ..."),
    "stuck_speed": Threshold(3.0, "tuned", "... this many times as fast as over as many rows before (a healthy "
                                           "run's fall does not speed up: the suites' other coarse logs 0.3 or "
                                           "less, their coarse repeats x3.6 or more), then back where it began"),
    "coarse_min_rows": Threshold(20, "tuned", "a log written every N steps (§4.5) needs this many rows before one row's "
                                              "bump is read against the others' (8 rows of a Lightning log: too few)"),
    # §5 initialisation
    "logit0_high": Threshold(10.0, "tuned", "largest |logit| at step 0 (an untrained model's logits are ~1)"),
    # §6 optimizer state
    "v_factor": Threshold(1.02, "tuned", "Adam's v moved by a factor outside [1/x, x] that g^2 does not explain ..."),
    "v_factor_warmup": Threshold(1.1, "tuned", "... during a warmup (the LR still rising to its peak), v moves with the "
                                               "growing updates beyond what the fit of the whole run explains (a "
                                               "LayerNorm's v x1.026 under HF's Trainer): there only a factor outside "
                                               "[1/x, x] counts (the lab's corruptions: x0.01 to x100)"),
    "v_noise_mult": Threshold(50.0, "tuned", "... and by at least this many times the run's own rounding noise"),
    "v_fit_noise": Threshold(0.01, "tuned", "residual noise (99th percentile of |log f|) of the v recurrence above "
                                            "which v does not follow one β2 over the run (clean: ~1e-4)"),
    "v_spread": Threshold(0.25, "tuned", "share of tensors whose v departs from the recurrence at the same step "
                                         "above which it is a changed optimizer setting, not one corrupted tensor"),
    # §7 gradient-norm spikes
    "gn_all_up_z": Threshold(3.0, "tuned", "every tensor's g this many σ of its own noise above its trailing "
                                           "median, beyond the batch loss's own jump"),
    "gn_all_down_z": Threshold(3.0, "tuned", "every tensor's g this many σ of its own noise below its trailing "
                                             "median, beyond the loss's own fall"),
    "gn_huge_z": Threshold(20.0, "tuned", "a pre-clip jump (beyond the loss's) this many σ of the norm's own noise"),
    "gn_scaled": Threshold(100.0, "tuned", "without per-tensor gradients (§7.5): the pre-clip norm this many times "
                                           "its trailing median at a step whose loss is normal: a common scale "
                                           "(natural spikes reach a few times the median)"),
    "climb_steps": Threshold(5, "tuned", "without a pre-clip norm (§7.6): the loss rose at every one of at least this "
                                         "many steps in a row (a scaled gradient in Adam's first moment keeps pushing "
                                         "for ~1/(1-beta1) steps; a healthy loss's noise breaks a climb within 2-3) ..."),
    "climb_from_z": Threshold(3.0, "tuned", "... from a step whose loss was within this many σ of its own noise (normal) ..."),
    "loss_jump_z": Threshold(10.0, "tuned", "a loss jump this many σ of the run's own loss noise that no question "
                                            "explained: unknown, not healthy"),
    # §2 natural instabilities (Wortsman et al. 2023 and 2023b), set on the LR sweep's seed-42 runs
    # (docs/natural-instabilities.md); the natural suite's other seeds only measured them
    "loss_rise": Threshold(0.5, "tuned", "the smoothed training loss (21-step median) this many nats above its running "
                                         "minimum: the loss got worse on its own (a healthy run here only falls)"),
    "attn_logit_high": Threshold(2500.0, "tuned", "largest pre-softmax attention logit above this: attention-logit "
                                                  "growth. Seed-42 sweep: at most 1185 in a run that did not fail, "
                                                  "at least 6461 in a failed plain run; 31 at the best LR"),
    "attn_entropy_low": Threshold(0.1, "tuned", "smallest attention entropy over heads (nats) at or below this: "
                                                "near one-hot attention (entropy collapse)"),
    "logz_far": Threshold(30.0, "tuned", "|mean log Z| of the output logits above this: the logits drifted far from "
                                         "log-probabilities. Seed-42 sweep: at most 18.9 in any run, and no larger in "
                                         "failed runs than in healthy ones (no drift at this scale)"),
    "rms_high": Threshold(4.0, "tuned", "a tensor's update RMS, sqrt(mean(g^2 / v_hat)), above this: Adam's second "
                                        "moment under-estimates the squared gradient (StableAdamW's statistic; 1 when "
                                        "v tracks g^2, at most 4.47 at beta2 0.95). Seed-42 sweep: up to 3.85 in runs "
                                        "that did not fail"),
    "rms_from_step": Threshold(60, "tuned", "§2.8 reads spikes from this step on: three of v's memories at beta2 = 0.95 "
                                            "(20 steps each); earlier, v is an average of a handful of gradients"),
}

# The values, by name: what the checks read.
T: dict[str, float] = {name: t.value for name, t in THRESHOLDS.items()}

# The course's healthy range of the step-1 gradient norm, as one pair (the dashboard's health line, health.py).
GN1_HEALTHY = (T["gn1_healthy_low"], T["gn1_healthy_high"])

# A verdict's confidence: the deciding rule's reading over its threshold, in the rule's own units (for a
# robust-z rule: σ of the run's own noise). Not tuned: a reporting convention (docs/diagnosis.md).
CONFIDENCE_STRONG = 2.0  # at least twice the threshold: strong evidence
CONFIDENCE_MODERATE = 1.25  # below 1.25x the threshold: weak evidence, said so

WINDOW = 50        # trailing window (steps) of the robust statistics
MIN_HISTORY = 5    # a step needs this many earlier steps before it can be called an outlier
