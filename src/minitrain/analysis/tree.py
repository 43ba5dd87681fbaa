"""THE stability tree, defined once, as data: sections of questions (Nodes) and verdicts (Leaves).

`stability-check.md` is generated from it (analysis/report.py), and `minitrain diagnose RUN` walks it
(analysis/walk.py): walk from §1 in order; at each question measure its metric; "yes" and "no" name the next
node or a leaf. A leaf may carry rule-outs: evidence that contradicts it (what else can trip the question that
led there); when one holds, the walk moves on as if the question had answered "no". A leaf whose text depends
on a condition of the run (clipping on or off) carries one text per case.

Node ids are stable: learners cite them. A new node or cause: its check in checks/, its node and leaf here,
its cause in causes.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from minitrain.analysis import checks as C
from minitrain.analysis.causes import CAUSES
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.panels import cite
from minitrain.analysis.thresholds import T

RULE = ("Walk the sections in order and stop at the first leaf you reach. Then apply the leaf's fix, "
        "re-run, and re-walk from §1: a run can carry more than one fault, and the tree names them one at a time.")


@dataclass(frozen=True)
class Node:
    id: str
    question: str
    metric: str
    panel: str
    threshold: str
    check: Callable[[Evidence], C.Finding]
    yes: str
    no: str | None = None  # None: the next node in order
    needs: tuple[str, ...] = ()  # signals the check reads (Evidence.has); a run without one: "not measured"


@dataclass(frozen=True)
class Leaf:
    id: str
    cause: str
    title: str
    diagnosis: str
    remediation: str
    # evidence that contradicts this leaf: (what it means, check(ev, finding) -> Finding matched when it holds)
    rule_out: tuple[tuple[str, Callable[[Evidence, C.Finding], C.Finding]], ...] = ()
    # texts that depend on the run: {case: (diagnosis, remediation)}, the case chosen by `case_of(ev)`
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)
    case_of: Callable[[Evidence], str] | None = None
    resume: str | None = None  # where the walk goes on when a rule-out holds (default: the leading node's "no")

    def texts(self, ev: Evidence | None = None) -> tuple[str, str]:
        """(diagnosis, remediation) true for this run (the default texts when the leaf has no cases)."""
        if self.cases and self.case_of is not None and ev is not None:
            return self.cases[self.case_of(ev)]
        return self.diagnosis, self.remediation


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    intro: str
    items: tuple  # Nodes and Leaves, in order


# ---------------------------------------------------------------------------------------------------
# THE TREE (edit here; then `minitrain stability-md` regenerates stability-check.md)
# ---------------------------------------------------------------------------------------------------

# Dashboard panels, by the titles dashboard.html gives them (the course's panel number first).
# Dashboard panels, cited by the number and title the panel registry (analysis/panels.py) gives them.
P_LOSS = cite("loss")
P_LR = cite("lr")
P_GN = cite("grad")
P_ACT = cite("logits", "act")
P_UPD = cite("vm", "v-factor")
P_UR = cite("ur")
P_G = cite("g", "g-all")
P_BATCH = cite("batch-shares") + " (duplicated rows / batch size, rare-token share)"
P_ATTN = cite("attn-logit", "attn-entropy")
P_LOGZ = cite("logz")
P_RMS = cite("rms") + "; " + P_LOSS

# shared by the two one-tensor corruption leaves (§6.A inflated, §6.B deflated)
RULE_OUT_OPTIMIZER_CHANGED = ("many tensors' v left the recurrence at the same step: the optimizer changed, not one "
                              "tensor's state", C.rule_out_v_spread)
TREE: tuple[Section, ...] = (
    Section("§1", "Did the run start?",
            "An untrained model predicts every token about equally: loss near ln V, moderate gradients.", (
        Node("§1.1", f"Is the step-0 loss above {T['loss0_high']:g} (or non-finite)?", "loss at step 0 (the bound at "
             "the course's V = 512; another vocabulary scales it with ln V)", P_LOSS,
             f"> {T['loss0_high']}", C.check_loss0_high, yes="§5.1", needs=("step0", "vocab")),
        Node("§1.2", f"Is the step-0 loss below {T['loss0_low']:g}?", "loss at step 0 (the bound at the course's "
             "V = 512; another vocabulary scales it with ln V)", P_LOSS,
             f"< {T['loss0_low']}", C.check_loss0_low, yes="§1.A", needs=("step0", "vocab")),
        Node("§1.3", f"Is the step-0 loss outside ln V ± {T['loss0_band']:g}?", "loss at step 0 against ln(vocabulary size)", P_LOSS,
             f"|loss - ln V| > {T['loss0_band']}", C.check_loss0_band, yes="§5.1", needs=("step0", "vocab")),
        Node("§1.4", f"Is the step-1 gradient norm above {T['gn1_high']:g}?", "grad_norm (pre-clip) of the first step (row step 0)", P_GN,
             f"> {T['gn1_high']:g}", C.check_gn1_high, yes="§5.1", needs=("step0", "grad_norm")),
        Node("§1.5", f"Is the step-1 gradient norm below {T['gn1_low']:g}?", "grad_norm (pre-clip) of the first step (row step 0)", P_GN,
             f"< {T['gn1_low']:g}", C.check_gn1_low, yes="§1.B", no="§9.1", needs=("step0", "grad_norm")),
        Leaf("§1.A", "bad_init", "not an untrained model",
             "The model already predicts well at step 0: it did not start from its initialisation "
             "(a checkpoint loaded by mistake, or the wrong seed).",
             "Check the manifest's seed and forked_from, start from a fresh initialisation, and re-run."),
        Leaf("§1.B", "broken_mask", "no gradient signal",
             "The first gradients are almost zero: the loss mask selects no target tokens or the batches are "
             "degenerate (all padding).",
             "Check that the loss mask marks the English target tokens and that batches hold real rows, then re-run."),
    )),
    Section("§2", "Is the LR schedule applying, and is the LR the right size?",
            "The LR panel must show a linear warmup from near 0, then a cosine decay, and nothing else; the "
            "update-to-weight ratio says whether the LR is the right size for the model (Adam's update follows "
            "the LR, whatever the gradient's size).", (
        Node("§2.1", "Is the LR constant and non-zero over the whole run?", "lr", P_LR,
             f"(max - min) / max < {T['lr_flat']:g}", C.check_lr_constant, yes="§2.A", needs=("lr", "schedule")),
        Node("§2.2", "Is the LR zero at every step?", "lr", P_LR, "max LR == 0", C.check_lr_zero, yes="§2.B", needs=("lr",)),
        Node("§2.3", "Does the first step already run at (near) the peak LR?", "lr at step 0 / max lr", P_LR,
             f">= {T['warmup_share']:g} (a run whose intended schedule is unknown: a schedule that varies, at a peak "
             f"of {T['warmup_lr']:g} or more)", C.check_no_warmup, yes="§2.C", needs=("lr", "first_lr")),
        Node("§2.4", f"Does the LR jump (up or down) by more than x{T['lr_jump']:g} from one step to the next, after step 1?",
             "lr[t] / lr[t-1] from step 2 on (a linear warmup gives at most x1.5 there, a cosine far less)", P_LR,
             f"> x{T['lr_jump']:g} or < 1/{T['lr_jump']:g}", C.check_lr_jump, yes="§2.D", needs=("lr",)),
        # §2.6-§2.8 come before §2.5: a high LR's natural instabilities (Wortsman et al. 2023) are named by
        # their mechanism before the LR's size alone (§2.5) is judged; their "no" leads on to §2.5
        Node("§2.6", "Did the attention logits grow far beyond a healthy run's while the loss got worse?",
             "largest pre-softmax attention logit over layers (attn_logit_max, detail steps of runs trained with "
             "natural_signals=true; a run without it: no, and its panels are absent); the loss: a non-finite "
             f"value, a loss spike, or the smoothed loss {T['loss_rise']:g} nats above its running minimum", P_ATTN,
             f"> {T['attn_logit_high']:g} and the loss got worse", C.check_attn_logit_growth, yes="§2.F",
             needs=("attn_logit_max",)),
        Node("§2.7", "Did the output logits drift far from log-probabilities (log Z far from 0) while the loss got worse?",
             "|mean log Z| of the output logits over target positions (logz_mean, detail steps of natural_signals "
             "runs; a run without it: no); the loss as in §2.6",
             P_LOGZ, f"> {T['logz_far']:g} nats and the loss got worse", C.check_logz_drift, yes="§2.G",
             needs=("logz_mean",)),
        Node("§2.8", f"Did a loss spike start {C.RMS_LEAD[0]}-{C.RMS_LEAD[1]} steps after some tensor's update RMS rose "
             "well above 1?", "params[*].r = sqrt(mean(g² / v̂)) per tensor (detail steps), then a loss spike (+"
             f"{T['outlier_z']:g} σ of the run's own loss noise over the trailing median, not back the next step)", P_RMS,
             f"RMS > {T['rms_high']:g}, then a spike {C.RMS_LEAD[0]}-{C.RMS_LEAD[1]} steps later",
             C.check_rms_before_spike, yes="§2.H", needs=("params.r",)),
        Node("§2.5", "Are the updates far larger than healthy over the run?",
             "median over the steps at half the peak LR or more of the median over tensors of params[*].ur "
             f"(update / weight), on runs of {T['ur_run_steps']:g}+ steps", P_UR,
             f"> {T['ur_high']:g}", C.check_update_ratio, yes="§2.E",
             needs=("params.ur", "long_run")),
        Node("§2.9", "Without the update-to-weight ratio: did the loss climb above an untrained model's at the peak "
             "LR, or stall at the peak and fall only as the LR decayed (or stall far up with the LR held there)?",
             "the loss (median over a tenth of the log) against the untrained loss (ln V, else the first logged "
             "loss) and the lr (a run that measured params[*].ur: no, §2.5 decides)", P_LOSS + "; " + P_LR,
             f"> x{T['above_untrained']:g} the untrained loss at >= {T['lr_peak_share']:g} x the peak LR (within "
             f"{T['peak_onset_share']:.0%} of the run after reaching it); or a net fall at the peak within "
             f"{T['stall_noise']:g} σ of its row-to-row noise, then a fall >= {T['decay_fall']:.0%} once the LR is "
             f"<= {T['lr_decay_share']:g} x peak; or, held at the peak, the last quarter < {T['stall_share']:.0%} "
             f"below the second at >= {T['stall_level']:g} x the untrained loss",
             C.check_lr_too_high_loss, yes="§2.I", needs=("lr",)),
        Leaf("§2.A", "lr_schedule", "the scheduler never stepped",
             "The learning rate never changes: the scheduler is not stepped (or the optimizer is rebuilt every "
             "step), so there is neither warmup nor decay.",
             "Build the optimizer and scheduler once, step the scheduler after every optimizer step, and re-run."),
        Leaf("§2.B", "lr_schedule", "the learning rate is zero",
             "The learning rate is zero at every step: warmup multiplies a base LR of 0, so nothing trains.",
             "Set a non-zero lr_max (the course default is 3e-4) and re-run."),
        Leaf("§2.C", "no_warmup", "no warmup",
             "Training starts at the peak learning rate with no warmup ramp, so the first updates are as large "
             "as the schedule ever allows while Adam's moment estimates are still poor.",
             "Restore the linear warmup (warmup_steps=100) and re-run."),
        Leaf("§2.D", "lr_spike", "LR spike (a schedule bug)",
             "The LR the optimizer ran with jumped at one step (and came back later, or never): the schedule did "
             "not produce it. Adam's update follows the LR, so those steps moved the weights N times as far.",
             "Fix the schedule (a scheduler rebuilt or resumed at the wrong step, a multiplier applied twice), "
             "then rewind to the checkpoint before the jump and re-run from there."),
        Leaf("§2.E", "lr_too_high", "learning rate too high",
             "Every step moves the weights several times further than a healthy run here (update-to-weight ratio "
             "well above 1e-3): the model memorises its training split (training loss near 0) and validation "
             "climbs after an early best.",
             "Lower lr_max (the course default is 3e-4) and re-run from step 0; keep the update-to-weight ratio "
             "near 1e-3.",
             rule_out=(("validation never climbed after its best: the large updates did not make the model memorise",
                        C.rule_out_val_not_climbing),)),
        Leaf("§2.I", "lr_too_high", "learning rate too high (read from the loss)",
             "The loss answers the LR's size: at the peak LR it climbed above what an untrained model scores, or "
             "stalled there and fell only once the LR decayed, or stalled far up with the LR held at its peak. A "
             "step too large for the loss surface overshoots, so the loss cannot settle until the LR comes down.",
             "Lower the peak LR (3-10x, or run a short LR sweep) and re-run from step 0; to see the cause directly, "
             "log the update-to-weight ratio (attach minitrain's probe)."),
        Leaf("§2.F", "attention_logit_growth", "attention-logit growth",
             "The LR is too high for this attention: the pre-softmax attention logits grew far beyond a healthy "
             "run's, attention went near one-hot (its entropy collapsed), and the loss degraded or diverged. "
             "Queries and keys grow with the weights, and their dot product grows with both.",
             "Turn qk-layernorm on (qk_norm=true: a LayerNorm on each head's queries and keys bounds the logits "
             "whatever the weights do) and re-run from step 0; or lower lr_max.",
             rule_out=(("the attention logits were already that large at their first measurement: an "
                        "initialisation, not growth", C.rule_out_logits_large_from_start),)),
        Leaf("§2.G", "output_logit_divergence", "output-logit divergence",
             "The output logits drifted away from log-probabilities: log Z (the logsumexp of the logits, 0 for "
             "normalised log-probabilities) moved far from 0 and the loss degraded or diverged. The softmax cannot "
             "see a common shift of the logits, so nothing in the loss holds it back at a high LR.",
             "Add the auxiliary z-loss (z_loss=1e-4, PaLM's coefficient: it pulls log Z towards 0) and re-run from "
             "step 0; or lower lr_max."),
        Leaf("§2.H", "second_moment_underestimate", "second moment under-estimates g²: a natural spike",
             "Adam's second moment v under-estimated the squared gradient of some tensor (update RMS "
             "sqrt(mean(g²/v̂)) well above 1: the gradient grew faster than v, which follows it at β2), so that "
             "tensor's update was larger than Adam's design allows, and the loss spiked a few steps later (the "
             "StableAdamW mechanism). Nothing corrupted v: it followed its recurrence.",
             "Turn update clipping on (update_clip=true: each tensor's LR divided by max(1, RMS), as StableAdamW "
             "does) and re-run; or lower lr_max or beta2.",
             rule_out=(("v left its recurrence near that step: something changed Adam's state (§6), not the "
                        "gradient outrunning it", C.rule_out_v_left_recurrence),)),
    )),
    Section("§3", "Is the loss healthy?",
            "Non-finite values end a run; a training loss that falls while validation does not means the "
            "model sees something at training time that it cannot see at validation time.", (
        Node("§3.1", "Is any value of a step's metrics non-finite (loss, gradient norm, logits, activations, a "
             "per-tensor statistic), or its non-finite count non-zero?",
             "every value of a metrics row (null = not finite), nonfinite", P_LOSS, "non-finite values > 0",
             C.check_nonfinite, yes="§3.A"),
        Node("§3.2", "Does training loss fall below half the n-gram baseline while validation never gets 15% "
             "below it and then climbs?", "train loss (21-step median), val_loss (best, last), n-gram baseline "
             "(dashed line)", P_LOSS, f"train < {T['mask_train']:g} x baseline, best val > {T['mask_val']:g} x "
             f"baseline, last val > {T['mask_rise']:g} x best val", C.check_mask, yes="§3.B",
             needs=("val_loss", "ngram")),
        Node("§3.3", "Has the training loss failed to fall?", "median training loss of the last 10% of steps / "
             "step-0 loss", P_LOSS, f"> {T['not_learning']:g}", C.check_not_learning, yes="§3.C"),
        Node("§3.4", "Does validation end up worse than an untrained model (above ln V) while training loss falls "
             "below half the n-gram baseline, or climb for good after a loss jump far outside the run's own noise?",
             "val_loss (worst) / ln V, train loss (21-step median) / n-gram baseline; the first loss jump of "
             f"{T['outlier_z']:g} σ and a row's worth (as §4.2), last val_loss / best val_loss before it", P_LOSS,
             f"val > {T['leak_val']:g} x ln V and train < {T['mask_train']:g} x baseline, or last val > "
             f"{T['leak_climb']:g} x best val before the jump", C.check_target_leak, yes="§3.D",
             needs=("val_loss", "ngram")),
        Leaf("§3.A", "non_finite", "non-finite values",
             "The loss or the gradients became NaN/Inf, so every later update is garbage.",
             "Resume from the last checkpoint before the first non-finite step with a lower LR or tighter "
             "clipping, and re-run."),
        Leaf("§3.B", "broken_mask", "broken causal mask",
             "Training loss collapses far below the n-gram baseline while validation (always causal) stalls "
             "near it and then climbs: the attention mask lets positions see the tokens they must predict.",
             "Restore the causal (lower-triangular) attention mask in training (causal_mask=true) and re-run.",
             rule_out=(("the updates at the peak LR are larger than at the course's LR: an LR above it memorises "
                        "and climbs too", C.rule_out_updates_above_course),
                       ("the training loss collapsed only after validation's best: something changed mid-run, a mask "
                        "is broken from step 0", C.rule_out_collapse_after_best_val),
                       ("validation ends above ln V: a mask lets training peek, its causal validation stays near "
                        "the n-gram baseline", C.rule_out_val_above_untrained))),
        Leaf("§3.C", "unknown", "not learning",
             "The training loss does not fall although the LR schedule applies: the model or data pipeline is "
             "broken in a way this tree does not name.",
             "Overfit a single batch to find the broken piece (data, loss, optimizer wiring), then re-run."),
        Leaf("§3.D", "target_leak", "target leak",
             "The model drives its training loss to almost nothing while validation becomes worse than an "
             "untrained model's: in training each input already holds the token it must predict (the one-token "
             "shift between inputs and targets is missing), so it learns to copy, which is confidently wrong "
             "at validation time. Unlike a broken mask, no attention is needed to cheat.",
             "Fix the data pipeline so targets are the inputs shifted by one token (a test: no input position "
             "equals its target for every row), then re-run from the checkpoint before the leak began.",
             rule_out=(("the updates are far larger than healthy: an LR too high also ends above ln V",
                        C.rule_out_lr_too_large),)),
    )),
    Section("§4", "Is there a batch anomaly?",
            "A bad batch (one repeated sentence, rare rows, or corrupted rows: random tokens, rows cut in the "
            "wrong place, targets that belong to other rows) has a high loss of its own, measured before the "
            "update, and a large gradient; the next batch's loss is back to normal because the model was barely "
            "moved. A loader that serves the same batch again shows identical batches on consecutive steps.", (
        Node("§4.1", "Does some batch repeat one row for at least half of its rows?",
             "batch.dup_rows / batch size", P_BATCH, f">= {T['dup_share']:g}", C.check_dup_rows, yes="§4.A",
             needs=("batch.dup_rows",)),
        Node("§4.2", "Is one batch's own loss far above the run's recent losses, with its gradient norm up and the "
             "batches before and after it normal?",
             "loss - trailing median, in σ of the run's own loss noise (1.4826 x the median absolute excess of the "
             "50 steps before); grad_norm / trailing median, in σ of its own noise; the previous and next steps' "
             "loss excess", P_LOSS + "; " + P_GN, f"loss >= {T['outlier_z']:g} σ and >= {T['outlier_rows']:g} x ln V / batch "
             f"size nats, grad norm >= {T['outlier_gn_z']:g} σ, "
             f"previous and next excess <= {T['outlier_back']:g} x the jump (a log without a pre-clip norm: the loss "
             "alone)", C.check_data_outlier, yes="§4.A", needs=("every_step",)),
        Node("§4.3", "Is the same batch served on several consecutive steps?",
             "batch.rows and the batch's token statistics equal to the previous step's", P_BATCH,
             f">= {T['stuck_steps']:g} repeats in a row", C.check_stuck_loader, yes="§4.B", needs=("batch",)),
        Node("§4.4", "Without batch composition: did the loss fall at every step for many steps, then jump back?",
             "loss, step to step (a run whose batches are not measured; one that measured them: no, §4.3 decides)",
             P_LOSS, f">= {T['stuck_fall_steps']:g} falls in a row, >= {T['stuck_fall_z']:g} σ in all, then back "
             f">= {T['stuck_back']:.0%} of it in one step (a log every N steps: >= {T['stuck_fall_rows']:g} rows "
             f"falling x{T['stuck_speed']:g} as fast as the rows before, then back to where the fall began in one "
             "row)", C.check_loss_memorised_run, yes="§4.B",
             needs=("rows",)),
        Node("§4.5", "In a log written every N steps: is one row's loss far above both its neighbours, which agree?",
             "loss - the mean of the rows before and after, in σ of the log's own row-to-row noise (a log of every "
             "step: no, §4.2 decides)", P_LOSS, f">= {T['outlier_z']:g} σ and >= {T['outlier_rows']:g} x ln V / batch "
             f"size / N nats, neighbours apart, each from the row before the previous, and every other row's bump <= "
             f"{T['outlier_back']:g} x it", C.check_interval_outlier,
             yes="§4.A"),
        Leaf("§4.A", "bad_batch", "bad batch / data outlier",
             "One batch is an outlier (one repeated or rare sentence, or corrupted rows: random tokens, rows cut "
             "in the wrong place, targets that belong to other rows): its own loss is high and its gradient large, "
             "and the next batch's loss is normal again (one bad step, not a damaged model). A batch of rare rows "
             "puts its gradient on rarely-updated embedding and output rows, whose small v makes the step large.",
             "Skip that batch (rewind to the checkpoint before it and drop it from the data order, as PaLM "
             "and Lightning do), deduplicate the data, and re-run."),
        Leaf("§4.B", "stuck_loader", "stuck data loader",
             "The data loader served the same batch again and again: the training loss on it falls step after "
             "step (the model memorises that batch) while the gradient norm shrinks, and no other data is seen.",
             "Fix the loader (an iterator re-created each step, a cached batch, a sampler stuck on one index); "
             "rewind to the checkpoint before the first repeat and re-run."),
    )),
    Section("§5", "Is the initialisation sane?",
            "Reached from §1 when the run did not start like an untrained model, and walked in order otherwise.", (
        Node("§5.1", f"Is the step-0 largest |logit| above {T['logit0_high']:g}?", "logit_max at step 0 (and act)", P_ACT,
             f"> {T['logit0_high']:g}", C.check_logit0, yes="§5.A", needs=("logit_max",)),
        Node("§5.2", f"Did §1 send you here (step-0 loss off ln V, or step-1 grad norm > {T['gn1_high']:g})?",
             "loss and grad_norm of the first step", P_LOSS,
             f"|loss - ln V| > {T['loss0_band']} or grad norm > {T['gn1_high']:g}", C.check_came_from_s1,
             yes="§5.B", needs=("step0", "vocab")),
        Leaf("§5.A", "bad_init", "weights initialised too large",
             "The untrained model already outputs huge logits and activations: the weights (or the LM-head "
             "bias) start far too large, so the loss starts far above ln V.",
             "Initialise weights with std 0.02 (init_scale=1) and the LM-head bias at zero, and re-run."),
        Leaf("§5.B", "bad_init", "wrong starting loss",
             "The step-0 loss or gradient is off although the logits are small: the initialisation or the loss "
             "reduction (sum instead of mean) is wrong.",
             "Check the init and that the loss is a token mean over target tokens, and re-run.",
             rule_out=(("the step-0 loss is BELOW chance: no init or reduction bug does that; walk the other "
                        "sections", C.rule_out_loss0_below_chance),), resume="§2.1"),
    )),
    Section("§6", "Is the optimizer state consistent?",
            "Adam's second moment obeys v_t = β2·v_(t-1) + (1-β2)·g_t² exactly, so the per-tensor mean of v "
            "(vm) must follow from the logged gradients; the walker fits β2 and each tensor's size from the "
            "run itself and measures the factor f by which v moved beyond what g² explains.", (
        Node("§6.1", "Did some tensor's v jump or drop in one step beyond what its gradient explains?",
             "params[*].vm against params[*].g, grad_norm_clipped / grad_norm", P_UPD,
             f"f outside [1/{T['v_factor']:g}, {T['v_factor']:g}] and > {T['v_noise_mult']:g}x rounding noise",
             C.check_v_factor, yes="§6.2", no="§6.3", needs=("params.vm", "params.g")),
        Node("§6.2", "Did v go up (f > 1)?", "the factor f of §6.1", P_UPD, "f > 1", C.check_v_up,
             yes="§6.A", no="§6.B"),
        Node("§6.3", "Does v stop following one recurrence at some step (another β2 fits from then on)?",
             "params[*].vm against params[*].g: residual noise of the fit, β2 fitted on each side", P_UPD,
             f"residual noise > {T['v_fit_noise']:g}", C.check_v_regime, yes="§6.C", no="§7.1",
             needs=("params.vm", "params.g")),
        Leaf("§6.A", "optimizer_state_corruption", "second moment inflated: a stall",
             "One tensor's Adam v was multiplied up at one step, so its updates shrink by about sqrt(f) and "
             "recover as v decays at β2 per step: a stall of that tensor, not a spike.",
             "Reload the last checkpoint before the step (or reset that tensor's moments) and re-run.",
             rule_out=(RULE_OUT_OPTIMIZER_CHANGED,), resume="§6.3"),
        Leaf("§6.B", "optimizer_state_corruption", "second moment deflated: the spike mechanism",
             "One tensor's Adam v was shrunk at one step, so v under-estimates g² and that tensor's updates "
             "grow by about 1/sqrt(f) for the next steps: the known loss-spike mechanism.",
             "Reload the last checkpoint before the step (or reset that tensor's moments; StableAdamW-style "
             "update clipping guards against it) and re-run.",
             rule_out=(RULE_OUT_OPTIMIZER_CHANGED,), resume="§6.3"),
        Leaf("§6.C", "optimizer_setting", "optimizer setting changed",
             "Adam's second moment follows one β2 up to a step and another from then on, on every tensor: the "
             "optimizer's setting changed mid-run (β2 or eps edited on resume, or the optimizer rebuilt with "
             "other defaults). Its measured effect here is small; a β2 far from 0.95 changes how fast v forgets.",
             "Restore the intended setting (beta2=0.95, eps=1e-8), pin it in the checkpoint and assert it on "
             "resume, and re-run from the checkpoint before the change."),
    )),
    Section("§7", "Is there a gradient-norm spike (before / after clipping)?",
            "With clipping on (grad_clip=1.0, the default) it engages on every step of a healthy run here "
            "(pre-clip norm 2-5), so 'clipped' means nothing alone and the clipped norm hides every spike: read "
            "the pre-clip norm. With clipping off (grad_clip=0) the two norms are equal and every spike reaches "
            "Adam's moments. Natural spikes late in training reach several times the median but move a few "
            "tensors, not all.", (
        Node("§7.1", f"Did every tensor's gradient norm jump at least {T['gn_all_up_z']:g} σ of its own noise above its "
             "trailing median at one step, beyond the batch loss's own jump?",
             "min over tensors of log(params[*].g / its 50-step trailing median) less the loss's log rise (when > 0), "
             "over that tensor's own trailing spread (robust z)", P_GN + "; " + P_G, f">= {T['gn_all_up_z']:g} σ",
             C.check_gn_all_up, yes="§7.A",
             needs=("params.g",)),
        Node("§7.2", f"Did every tensor's gradient norm fall at least {T['gn_all_down_z']:g} σ of its own noise below its "
             "trailing median at one step, beyond the loss's own fall?", "max over tensors of log(params[*].g / its "
             "trailing median) less the loss's log fall (when < 0), over that tensor's own trailing spread",
             P_GN + "; " + P_G, f"<= -{T['gn_all_down_z']:g} σ", C.check_gn_all_down,
             yes="§7.B", needs=("params.g",)),
        Node("§7.5", f"Without per-tensor gradients: did the pre-clip norm jump x{T['gn_scaled']:g} or more at a step "
             "whose own loss was normal?", "grad_norm / its trailing median at steps whose loss is within "
             f"{T['outlier_z']:g} σ of its own (a run that measured per-tensor g: no, §7.1 decides)", P_GN,
             f">= x{T['gn_scaled']:g}", C.check_gn_scaled, yes="§7.A", needs=("every_step", "grad_norm")),
        Node("§7.6", "Without a pre-clip norm: was the loss, still falling, normal at one step, then rising at every "
             "step after it, far out of its own noise, at a steady LR?", "loss step to step, its excess over the trailing median in "
             f"σ of its own noise; lr (a run that logged a pre-clip norm: no, §7.5 decides)", P_LOSS + "; " + P_LR,
             f"< {T['climb_from_z']:g} σ at K, then >= {T['climb_steps']:g} rises in a row, on to >= {T['outlier_z']:g} σ "
             f"before falling back under {T['climb_from_z']:g} σ; "
             f"the loss fell >= {T['stall_share']:.0%} over the 50 steps before K",
             C.check_loss_climb_after_scale, yes="§7.A", needs=("every_step", "lr")),
        Node("§7.3", f"Is there any pre-clip jump of {T['gn_huge_z']:g} σ of the norm's own noise beyond what the loss "
             "explains?", "log(grad_norm / trailing median) less the loss's log rise (if > 0), over the norm's own "
             "trailing spread", P_GN, f">= {T['gn_huge_z']:g} σ", C.check_gn_huge, yes="§7.C", needs=("every_step", "grad_norm")),
        Node("§7.4", f"Is there any loss jump of {T['loss_jump_z']:g} σ of the run's own loss noise or more over its "
             "trailing median that nothing above explained?",
             "loss - trailing median, in σ of the run's own loss noise (and nats)", P_LOSS,
             f">= {T['loss_jump_z']:g} σ and >= {T['outlier_rows']:g} x ln V / batch size nats",
             C.check_loss_jump,
             yes="§8.B", no="§8.A"),
        Leaf("§7.A", "gradient_explosion", "transient gradient explosion",
             "Every gradient was multiplied by one common factor at one step; clipping cut the update back to "
             "its usual size, so the spike lives in the pre-clip norm only and the run continues unharmed.",
             "Keep gradient clipping on (or clip adaptively, as ZClip does) and find what scaled the gradients "
             "at that step (loss scaling, a reduction bug); no rewind is needed.",
             cases={"clipping on": (
                 "Every gradient was multiplied by one common factor at one step; clipping cut the update back to "
                 "its usual size, so the spike lives in the pre-clip norm only and the run continues unharmed.",
                 "Keep gradient clipping on (or clip adaptively, as ZClip does) and find what scaled the "
                 "gradients at that step (loss scaling, a reduction bug); no rewind is needed."),
                 "clipping off": (
                 "Every gradient was multiplied by one common factor at one step and clipping is off, so the "
                 "whole scaled gradient entered Adam's moments: the step itself grew far less than the gradient "
                 "(Adam divides by sqrt(v), which took the same jump), but v stays inflated and shrinks the next "
                 "updates until it decays at β2 (about 20 steps at 0.95).",
                 "Turn gradient clipping on (grad_clip=1.0) or clip adaptively (ZClip), and find what scaled the "
                 "gradients at that step (loss scaling, a reduction bug); if the loss did not recover, reload the "
                 "checkpoint before the step.")},
             case_of=C.clipping_case),
        Leaf("§7.B", "gradient_explosion", "transient gradient collapse",
             "Every gradient was multiplied by one common small factor at one step (the same fault as an "
             "explosion, downwards): clipping did not engage and that step's update was smaller.",
             "Find what scaled the gradients at that step (loss scaling, a reduction bug); no rewind is needed.",
             cases={"clipping on": (
                 "Every gradient was multiplied by one common small factor at one step (the same fault as an "
                 "explosion, downwards): clipping did not engage and that step's update was smaller.",
                 "Find what scaled the gradients at that step (loss scaling, a reduction bug); no rewind is needed."),
                 "clipping off": (
                 "Every gradient was multiplied by one common small factor at one step (the same fault as an "
                 "explosion, downwards): that step's update was smaller, and Adam's v took a small dip.",
                 "Find what scaled the gradients at that step (loss scaling, a reduction bug); no rewind is needed.")},
             case_of=C.clipping_case),
        Leaf("§7.C", "unknown", "unexplained gradient spike",
             "A gradient-norm spike far beyond natural variation that neither the batch, the optimizer state "
             "nor a uniform scaling explains.",
             "Rewind to the checkpoint before the spike, replay the same batches to tell a transient from a "
             "persistent fault, and re-run."),
    )),
    Section("§8", "Verdict", "Reached when no question above matched (healthy), or when the loss jumped or a "
            "leaf was ruled out and no other leaf fits (unknown: better than a wrong name).", (
        Leaf("§8.A", "healthy", "healthy",
             "Nothing in the run's metrics departs from healthy training beyond natural variation.",
             "No fix needed; keep the run as the reference for later comparisons."),
        Leaf("§8.B", "unknown", "an anomaly no leaf explains",
             "Something departs from healthy training (a question matched, or the loss jumped), but no leaf's "
             "evidence fits it, so this tree does not name the fault. The verdict lists the two closest leaves "
             "and the evidence that ruled each out.",
             "Do not apply a leaf's fix blindly: rewind to the checkpoint before the anomaly, replay the same "
             "batches to tell a transient from a persistent fault, and compare with a baseline run (--baseline)."),
    )),
    # printed last, walked right after §1 (§1.5 "no" leads here, §9.5 "no" to §2.1): a silent bug leaves the loss
    # falling, so what a spike or a stall would name later (§6's v jumps with a summed loss) must not name it first
    Section("§9", "Does each step do what the loop says?",
            "Silent bugs make no spike: nothing crashes and the loss still falls, only worse. Each is seen "
            "directly in the step: the gradient the optimizer gets against the one backward produced, the "
            "weights before and after the step, the ranks' weights against each other (core/silent.py; a row "
            "carries a signal only at a step where it fired).", (
        Node("§9.1", f"Did the gradient carry the previous step's for {T['silent_steps']:g} steps in a row?",
             "grads_carried (the gradient's digest = backward's fresh one + what the previous step left in .grad)",
             P_GN, f">= {T['silent_steps']:g} steps in a row", C.check_grads_carried, yes="§9.A"),
        Node("§9.2", f"Did the optimizer step change no weight at all, {T['silent_steps']:g} steps in a row?",
             "unchanged (the tensors whose weights were equal before and after a step with LR > 0): every tensor",
             P_UR, f"every tensor, >= {T['silent_steps']:g} steps in a row", C.check_update_not_applied,
             yes="§9.B"),
        Node("§9.3", f"Did some tensors stop changing, {T['silent_steps']:g} steps in a row?",
             "unchanged: some tensors, the same ones step after step", P_UR,
             f"some tensors, >= {T['silent_steps']:g} steps in a row", C.check_frozen_parameters, yes="§9.C"),
        Node("§9.4", "Did the pre-clip gradient norm rise for good by a batch's worth of tokens while the loss "
             "did not move?", "grad_norm (median of the next steps / trailing median, and at the run's end), loss "
             "(median on each side)", P_GN, f">= x{T['loss_sum_shift']:g} for good, loss within "
             f"{T['loss_sum_loss_move']:.0%}", C.check_loss_reduction, yes="§9.D",
             needs=("grad_norm",)),
        Node("§9.5", "Did the data-parallel ranks' weights differ at some step?",
             "ranks_differ (per tensor, the largest minus the smallest weight norm over ranks, under torchrun)",
             P_UR, "> 0 on any tensor", C.check_ranks_diverged, yes="§9.E", no="§2.1"),
        Leaf("§9.A", "grads_not_zeroed", "gradients not zeroed",
             "From that step on the gradients were not zeroed between steps: each step's gradient is its own plus "
             "everything left in .grad before it, so the update follows a running sum of old gradients. The loss "
             "still falls, more slowly or noisier; nothing spikes.",
             "Call optimizer.zero_grad() (or model.zero_grad()) once per step, before backward, and re-run from "
             "the checkpoint before that step."),
        Leaf("§9.B", "update_not_applied", "the optimizer step changed nothing",
             "From that step on optimizer.step() left every weight as it was, although the LR was not zero and the "
             "optimizer's state moved: the step ran on copies or on parameters the model does not use (a wrapper "
             "built after the optimizer, a model moved or re-wrapped after the optimizer was made).",
             "Build the optimizer on the parameters of the model as it is trained (after wrapping and moving it), "
             "assert that one step changes the weights, and re-run from the checkpoint before that step."),
        Leaf("§9.C", "frozen_parameters", "frozen parameters",
             "From that step on some tensors were never updated: they were left out of the step (requires_grad "
             "left False, missing from the optimizer's groups), while the rest trained on.",
             "Unfreeze them (requires_grad=True and in the optimizer's param groups), print which parameters are "
             "trainable at the start, and re-run from the checkpoint before that step."),
        Leaf("§9.D", "loss_reduction", "loss summed instead of averaged",
             "From that step on the loss backward differentiates is summed over the batch's target tokens instead "
             "of averaged: every gradient is multiplied by the token count. With Adam and clipping the step barely "
             "changes, but the gradient norm, the clip rate and any SGD-like step do, and the effective LR then "
             "depends on how many tokens a batch holds.",
             "Use the token mean (reduction='mean', or divide the summed loss by the target-token count) and "
             "re-run from the checkpoint before that step."),
        Leaf("§9.E", "ranks_diverged", "data-parallel ranks diverged",
             "The ranks' copies of the weights stopped being equal: some rank's gradients were not all-reduced "
             "(a model wrapped in DDP only on some paths, hooks lost when the model was moved), so each rank "
             "steps on its own gradient and the replicas drift apart.",
             "Wrap the model in DDP once, after moving it to its device and before building the optimizer; check "
             "a weight digest across ranks every few steps; re-run from the last checkpoint where they agreed."),
    )),
)

ITEMS: dict[str, Node | Leaf] = {it.id: it for s in TREE for it in s.items}
SECTIONS: dict[str, Section] = {s.id: s for s in TREE}
ORDER: list[str] = [it.id for s in TREE for it in s.items]


def next_node(node_id: str) -> str:
    """The node after `node_id` in reading order, skipping leaves."""
    i = ORDER.index(node_id)
    for nid in ORDER[i + 1:]:
        if isinstance(ITEMS[nid], Node):
            return nid
    return "§8.A"


def iter_nodes():
    """Every section, question and leaf as a plain dict, in reading order. `parent` is the section for a
    section's first-level questions and the question whose "yes" (or explicit "no") leads to an item within
    the same section otherwise (the learner workflow uses it to check that a cited node lies on the way to a leaf)."""
    for s in TREE:
        yield {"id": s.id, "kind": "section", "title": s.title, "parent": None}
        for it in s.items:
            parent = next((n.id for n in s.items if isinstance(n, Node) and it.id in (n.yes, n.no)), s.id)
            if isinstance(it, Node):
                yield {"id": it.id, "kind": "question", "title": it.question, "parent": parent,
                       "metric": it.metric, "panel": it.panel, "threshold": it.threshold,
                       "yes": it.yes, "no": it.no or next_node(it.id)}
            else:
                yield {"id": it.id, "kind": "leaf", "title": it.title, "parent": parent, "cause": it.cause,
                       "diagnosis": it.diagnosis, "remediation": it.remediation,
                       "ruled_out_by": [why for why, _ in it.rule_out], "cases": dict(it.cases)}


def _validate_tree() -> None:
    for it in ITEMS.values():
        if isinstance(it, Leaf):
            assert it.cause in CAUSES, it
            assert it.resume is None or isinstance(ITEMS.get(it.resume), Node), (it.id, it.resume)
            assert bool(it.cases) == (it.case_of is not None), it.id
        else:
            for target in (it.yes, it.no):
                assert target is None or target in ITEMS, (it.id, target)


_validate_tree()

