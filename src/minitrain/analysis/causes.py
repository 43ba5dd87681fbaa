"""The causes the stability check can name: ONE registry, read by the tree, the walker, the learner's grading,
the post-mortem and the remediation.

A cause is its name, the words that name it in a learner's text (regular expressions, lower case, English and
Spanish), how to prevent it next time, and how this run is fixed: a registered in-step remedy
(core/remedy.py, forked from before the anomaly) or a config fix (re-run from step 0). The key concepts a
learner's diagnosis and remediation must name belong to each leaf (tree.py `Concepts`). Adding a cause is one entry here plus
its leaf and check in the tree; tests/test_causes.py checks that every leaf's cause is here, every cause but
`unknown` has a leaf, and every registered remedy answers a cause that names it.
"""
from __future__ import annotations

from dataclasses import dataclass

_NEAR = r"(?:\W+\w+){0,4}?\W+"  # up to four words in between


@dataclass(frozen=True)
class Cause:
    name: str
    words: tuple[str, ...]  # patterns that name it in a learner's text (matched at a word start)
    prevention: str
    remedy: str | None = None  # a registered in-step remedy (core/remedy.py) that fixes this run
    config_fix: str | None = None  # or a config change to re-run from step 0 with


_ALL = (
    Cause("healthy", (r"healthy", r"no anomal", r"nothing wrong", r"sano", r"sin anomal"),
          "Nothing to prevent: keep the baseline's settings and monitoring."),
    Cause("gradient_explosion",
          (r"explod\w* gradient", r"gradient\w* explo", r"gradient" + _NEAR + r"(?:scaled|multiplied|x\s?\d)",
           r"(?:scaled|multiplied)" + _NEAR + r"gradient", r"grad(?:ient)?[- ]norm spike", r"gradient spike",
           r"explosi[oó]n de(?:l)? gradiente", r"gradientes? escalad", r"gradientes?" + _NEAR + r"multiplicad",
           r"pico de(?:l)? (?:norma de(?:l)? )?gradiente"),
          "Keep global-norm clipping on and log the pre-clip norm every step; add an adaptive detector (z-score of "
          "the norm against its EMA, as ZClip) that flags or down-weights outliers.", remedy="zclip"),
    Cause("bad_batch",
          (r"bad[-_ ]batch", r"(?:repeated|same|duplicated?) (?:rare )?(?:sentence|row)", r"copies of",
           r"rare[- ]token", r"long[- ]tail", r"corrupt\w* (?:batch|rows?|data)", r"batch (?:malo|raro)",
           r"lote malo", r"frase repetida", r"misma frase", r"copias de", r"tokens? raros?", r"cola larga",
           r"lote corrupt"),
          "Check batch composition before the step (duplicated rows, rare-token share); deduplicate the data by "
          "fingerprint; skip a batch whose loss and gradient norm are both outliers (llm.c, Lightning).",
          remedy="skip_batch"),
    Cause("optimizer_state_corruption",
          (r"optimi[sz]er(?:'s)? state", r"second moment", r"adam(?:'s)? (?:state|moment|v\b)", r"\bv_t\b",
           r"exp_avg_sq", r"moments?" + _NEAR + r"corrupt", r"corrupt\w*" + _NEAR + r"moment", r"state corruption",
           r"v_corrupt", r"estado del optimizador", r"segundo momento", r"momentos de adam"),
          "Checkpoint the optimizer moments with the weights and monitor RMS(g^2/v) and v per tensor; on a jump, "
          "reload the last pre-spike checkpoint's moments.", remedy="restore_moments"),
    Cause("optimizer_setting",
          (r"beta2", r"\beps(?:ilon)?\b", r"adam(?:w)?(?:'s)? (?:setting|hyper)", r"optimi[sz]er (?:setting|hyper)",
           r"ajuste del optimizador", r"hiperpar[aá]metros? de adam"),
          "Pin the optimizer's hyperparameters in the config and the checkpoint, and assert them on resume; the "
          "walker fits beta2 from the logged second moment, so log it.", config_fix="beta2=0.95"),
    Cause("bad_init", (r"bad init", r"initiali[sz]", r"init[_ ]scale", r"weights (?:x|scaled|multiplied)", r"inicializ"),
          "Assert the step-0 loss is within ln V +- 0.5 and the step-1 gradient norm within [0.1, 10] before a long "
          "run; keep init std at 0.02 scale.", config_fix="init_scale=1"),
    Cause("no_warmup", (r"(?:no|without|missing|skipped) (?:lr )?warm[- ]?up", r"warm[- ]?up", r"calentamiento"),
          "Keep a linear warmup (100 steps here) and plot the LR from step 0; a flat LR at its maximum from the "
          "first step is the tell.", config_fix="warmup_steps=100"),
    Cause("broken_mask", (r"(?:causal|attention|broken|all[- ]ones) mask", r"\bmask", r"m[aá]scara", r"future tokens",
                          r"tokens futuros", r"sees? (?:the )?future"),
          "Test the attention mask (no position sees a later one) and watch the gap between training and "
          "validation loss; validation always uses the causal mask.", config_fix="causal_mask=true"),
    Cause("target_leak", (r"(?:target|label) leak", r"(?:no|missing|forgot\w*) (?:the )?(?:one[- ]token )?shift",
                          r"inputs? (?:contain|hold|equal)\w*" + _NEAR + r"targets?", r"fuga de (?:etiquetas|objetivos)"),
          "Test the data pipeline: targets are the inputs shifted by one token, and no input position holds the "
          "token it must predict; a validation loss above an untrained model's is the alarm."),
    Cause("stuck_loader", (r"stuck (?:data )?loader", r"loader (?:is |was |got )?stuck", r"same batch (?:again|served|repeated)",
                           r"repeated batch(?:es)?", r"cargador atascado", r"mismo lote repetido"),
          "Log a fingerprint of every batch (rows, token statistics) and alarm when one repeats; the data order "
          "is a pure function of (seed, step) here, so a repeat is a bug."),
    Cause("non_finite", (r"\bnan\b", r"non[- ]finite", r"\binf\b", r"infinit", r"no finito"),
          "Stop at the first non-finite loss or gradient (the loop does), and resume from the last finite "
          "checkpoint with the cause fixed."),
    Cause("lr_schedule", (r"(?:learning[- ]rate|lr) schedul", r"scheduler", r"(?:lr|learning rate) (?:is )?constant",
                          r"constant (?:lr|learning rate)", r"programa de lr"),
          "Log the LR every step and check warmup and decay against the configured schedule."),
    Cause("lr_spike", (r"(?:lr|learning[- ]rate) spike", r"spike in the (?:lr|learning rate)",
                       r"(?:lr|learning[- ]rate) (?:jump|multipl)\w*", r"pico de(?:l)? (?:lr|learning rate|tasa)"),
          "Log the LR the optimizer actually ran with, every step, and assert it against the schedule's formula "
          "(a resumed or rebuilt scheduler is the usual culprit)."),
    Cause("lr_too_high", (r"(?:lr|learning[- ]rate) (?:is |was )?too (?:high|large|big)",
                          r"(?:high|large|big) (?:lr|learning[- ]rate)", r"tasa de aprendizaje (?:alta|grande)",
                          r"lr (?:alto|grande)"),
          "Start from the course's LR (3e-4 here) and watch the update-to-weight ratio (about 1e-3 is healthy); "
          "raise the LR only while validation still improves.", config_fix="lr_max=0.0003"),
    Cause("attention_logit_growth",
          (r"attention[- ]logit", r"attention (?:scores?|logits?) (?:grow|grew|explod)", r"entropy collapse",
           r"qk[-_ ]?(?:layer)?norm", r"logits? de (?:la )?atenci[oó]n", r"colapso de (?:la )?entrop[ií]a"),
          "Use qk-layernorm in the attention (OLMo 2 and the small-scale proxies do) and log the largest attention "
          "logit per layer on detail steps; raise the LR only while it stays bounded.", config_fix="qk_norm=true"),
    Cause("output_logit_divergence",
          (r"output[- ]logit (?:divergence|drift)", r"log ?z\b", r"logsumexp", r"z[-_ ]?loss",
           r"divergencia de (?:los )?logits", r"logits de salida"),
          "Add the auxiliary z-loss (PaLM: 1e-4, OLMo 2: 1e-5) and log the mean log Z of the output logits.",
          config_fix="z_loss=0.0001"),
    Cause("second_moment_underestimate",
          (r"(?:second moment|\bv\b)" + _NEAR + r"under-?estimat", r"under-?estimat\w*" + _NEAR + r"(?:g\^?2|squared gradient)",
           r"update rms", r"stableadamw", r"update[-_ ]clip", r"subestima"),
          "Log the per-tensor update RMS sqrt(mean(g^2/v_hat)) and clip updates where it exceeds 1 (StableAdamW); "
          "a lower beta2 lets v follow a growing gradient sooner.", config_fix="update_clip=true"),
    Cause("unknown", (), "Find the cause first: the tree did not name one."),
)

CAUSES: dict[str, Cause] = {c.name: c for c in _ALL}
