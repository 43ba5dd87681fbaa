"""The causes the stability check can name: ONE registry, read by the tree, the walker, the learner's grading,
the post-mortem and the remediation.

A cause is its name, how to prevent it next time, how this run is fixed (a registered in-step remedy,
core/remedy.py, forked from before the anomaly, or a config fix to re-run from step 0), and the concepts a
learner's sentence can say about it, in English and Spanish:

    names     the failure mode itself ("the gradients were multiplied by 50")
    signs     a symptom that points at it but that other causes share ("the gradient norm jumped")
    fixes     the fixes registered for it ("keep clipping on", "skip that batch")
    harmful   fixes that make it worse ("turn clipping off" for an explosion); HARMFUL_ALWAYS adds to every cause
    workarounds  fixes that ease it without removing it (a lower peak LR for a missing warmup): a teacher reads them
SUBJECTS says what each cause is about (the learning rate, the mask, the data...): the right cause offered "or"
another cause's subject is a hedge even where that subject is not said as a cause.

A concept is a few parts that must all be said close together, in one sentence: what moved (the gradients,
Adam's second moment, the mask), what happened to it or what is done to it (multiplied, inflated, restored)
and, where it matters, in which direction. Each part is a set of synonyms, so a paraphrase is heard without
its exact words: the grader (lab/learner/meaning.py) matches the words after stemming them (English and
Spanish), so "multiplied", "multiply" and "se multiplicó" are one word. A concept's label is what the learner
is shown. Adding a cause is one entry here plus its leaf and check in the tree; tests/test_causes.py checks that
every leaf's cause is here, every cause but `unknown` has names, and every registered remedy answers a cause
that names it.
"""
from __future__ import annotations

from dataclasses import dataclass

from minitrain.analysis.vocabulary import (
    AT_START, BAD, BATCH, BIG, BIGGER, CHECKPOINT, CLIP, COMPARED, COUNT, CULPRIT, CURVE, DUPLICATED, EXPLODED, FIND,
    FROM_ZERO, GRAD, GRAD_NORM, GREW, INFLATED, INIT, INIT_TERM, JUDGED, KEEP, LOADER, LOSS, LOSS_SIDE, LOWER, LR, MASK, MOVED,
    NOT_BEING, NOT_GRAD, NOT_NEEDED, NOT_V, OFF, OPTIMIZER, OTHER_MASK, RAISE, RAMP, REPAIR, REPEATED_ES, RESET, RESTORE, ROWS,
    SCALED_UP, SCALER, SCALING, SHRANK, SKIP, SMALL, SPIKE, SQUARED, STALL, STEPS, TENSOR, UPDATE_CLIP, V, WARMUP, WEIGHTS)


@dataclass(frozen=True)
class Concept:
    """Something a learner can say, shown to them as `label`. It is said when every one of `parts` is in one
    sentence, at most `reach` words between one part and the next (in the given order when `ordered`), or when
    `pattern` (a regular expression over the lower-cased text, for identifiers and settings) matches.

    A part is synonyms separated by "|"; each synonym is one or more words, each matched by its stem in English
    or Spanish ("multiplied" is "multiply"), or by a regular expression over the whole word when written
    "~regex" ("~x\\d+" is x50). Words of `unless` are invisible to the parts (the "gradients" of "squared
    gradients" is Adam's second moment, not the gradient). When `opposite` is given, the first word of `along` or
    `opposite` after the first part, in its sentence, says which way it moved: `opposite` there says the concept the
    wrong way round ("v shrank" where v grew), which a teacher reads."""
    label: str
    parts: tuple[str, ...] = ()
    pattern: str = ""
    reach: int = 6
    ordered: bool = False
    unless: str = ""
    along: str = ""
    opposite: str = ""
    step: bool = False  # a step many fixes share (rewinding to a checkpoint): beside another fix it is its step
    not_near: str = ""  # words that, close by in the clause, make it another thing ("masking was wrong in the loss")


@dataclass(frozen=True)
class Cause:
    name: str
    names: tuple[Concept, ...]
    prevention: str
    remedy: str | None = None  # a registered in-step remedy (core/remedy.py) that fixes this run
    config_fix: str | None = None  # or a config change to re-run from step 0 with
    signs: tuple[Concept, ...] = ()
    fixes: tuple[Concept, ...] = ()
    harmful: tuple[Concept, ...] = ()
    workarounds: tuple[Concept, ...] = ()  # act on the mechanism without removing the cause: a teacher reads them
    recovers: bool = False  # the run recovers by itself: "no fix needed" is defensible, a teacher reads it
    follows: bool = False  # a state other causes end in (NaN): named beside another cause it is a symptom listed

    @property
    def words(self) -> tuple[str, ...]:
        """The regular expressions that name it (its identifier and fixed expressions, matched at a word start)."""
        return tuple(c.pattern for c in self.names if c.pattern)


# What a cause is about, and the causes about it: the right cause "or" one of these is two answers offered
# ("a bad batch or the learning rate"), whether or not the other is said as a cause
SUBJECTS: tuple[tuple[Concept, tuple[str, ...]], ...] = (
    (Concept("the learning rate", (LR + "|lr_max|schedule|scheduler",)),
     ("lr_too_high", "lr_spike", "lr_schedule", "no_warmup")),
    (Concept("the warmup", (WARMUP,)), ("no_warmup",)),
    (Concept("the initialisation", (INIT + "|init_scale",)), ("bad_init",)),
    (Concept("the data", (BATCH + "|loader|dataloader|cargador",)), ("bad_batch", "stuck_loader", "target_leak")),
    (Concept("the optimizer", (OPTIMIZER + "|beta2|β2|eps|epsilon",), unless=NOT_V),
     ("optimizer_state_corruption", "optimizer_setting", "second_moment_underestimate")),
    (Concept("Adam's second moment", (V,), unless=NOT_V),
     ("optimizer_state_corruption", "second_moment_underestimate")),
    (Concept("the mask", (MASK,), unless=OTHER_MASK, not_near=LOSS_SIDE), ("broken_mask",)),
    (Concept("the targets", ("target|targets|label|labels|objetivo|etiqueta",)), ("target_leak",)),
    (Concept("the gradients", (GRAD,), unless=SQUARED), ("gradient_explosion",)),
    (Concept("the attention", ("attention|atención",)), ("attention_logit_growth",)),
)

# what a training curve did: a symptom every cause can show, for a teacher to read when nothing else is said
SYMPTOMS_ALWAYS: tuple[Concept, ...] = (
    Concept("what a training curve did", (CURVE, MOVED), reach=4),
)

# a diagnosis that is no failure mode of a training run: a symptom beside it is no answer
NOT_A_CAUSE: tuple[Concept, ...] = (
    Concept("overfitting", ("overfitting|overfit|overfits|overfitted|sobreajuste|sobreajustar|sobreajusta",)),
)

# changes that ease a fault's damage and leave its cause: a teacher reads them
TIGHTER_CLIP = Concept("tightening the clip threshold, which caps the spike and leaves its cause",
                       ("tighten|tighter|stricter|apretar|endurecer|más estricto|lower|reduce|bajar|reducir", CLIP),
                       reach=3, ordered=True, unless=UPDATE_CLIP, pattern=r"grad_clip\s*[=:]\s*0?\.\d+")
LOWER_BETA2 = Concept("a lower beta2, which makes v forget the step sooner and leaves its cause",
                      (LOWER, "beta2|β2|b2"), reach=3, ordered=True)
HARMFUL_ALWAYS: tuple[Concept, ...] = (
    Concept("turning gradient clipping off", (OFF, CLIP), reach=2, ordered=True,
            pattern=r"grad_clip\s*=\s*0(?![.\d])"),
    Concept("turning gradient clipping off", ("turn|switch|shut|poner", CLIP, "off"), reach=3, ordered=True),
    Concept("turning gradient clipping off", (CLIP, "off|disabled|desactivado|apagado|fuera"), reach=2, ordered=True),
    Concept("loosening the clip threshold", (RAISE + "|loosen|relax|relajar|aflojar", CLIP,
                                             "threshold|limit|max|norm|umbral|límite|máximo"), reach=3, ordered=True,
            pattern=r"grad_clip\s*=\s*(?:[2-9]\d|\d{3,})"),
    Concept("turning gradient clipping off", (CLIP, "~0|~0.0|zero|none|infinity|inf|cero|ninguno"), reach=2,
            ordered=True),
    # "a more aggressive clip" is a tighter one: only what loosens it
    Concept("loosening the clip threshold", ("higher|larger|bigger|looser|mayor|más alto|más alta|más grande|más laxo",
                                             "threshold|umbral|clip limit|clip norm|max norm|límite"), reach=2,
            ordered=True),
    Concept("loosening the clip threshold", ("looser|laxer|more lenient|gentler|softer|más laxo|más laxa|más suave",
                                             CLIP), reach=1, ordered=True, unless=UPDATE_CLIP),
    Concept("loosening the clip threshold", (RAISE + "|loosen|relax", "max_grad_norm|grad_clip|clip threshold"
                                             "|clipping threshold|umbral de recorte"), reach=3, ordered=True),
    Concept("loosening the clip threshold", ("threshold|max_grad_norm|grad_clip|clip|clipping|umbral|recorte",
                                             r"to ~[1-9]\d+(?:\.\d+)?|at ~[1-9]\d+(?:\.\d+)?|of ~[1-9]\d+(?:\.\d+)?"
                                             r"|a ~[1-9]\d+(?:\.\d+)?|en ~[1-9]\d+(?:\.\d+)?"), reach=3,
            ordered=True),
    Concept("turning gradient clipping off", ("no", CLIP), reach=0, ordered=True),
    Concept("loosening the clip threshold", (CLIP, r"to ~[1-9](?:\.\d+)?e\+?[1-9]\d*|at ~[1-9](?:\.\d+)?e\+?[1-9]\d*"),
            reach=3, ordered=True),
    Concept("raising the learning rate", (RAISE, LR), reach=3, ordered=True, unless=RAMP + "|double check"),
    Concept("raising the learning rate", (LR, BIGGER + "|up|upward|upwards|hacia arriba|al alza"), reach=4,
            ordered=True, unless=RAMP),
    # harmful for any run: every run needs its warmup and its causal mask
    # the verb only: "a short warmup" is a warmup (the Spanish stem of "shorten" is "short")
    Concept("removing the warmup", (OFF + "|delete|skip|~shorten|~shortens|~shortened|~shortening|borrar|acortar", WARMUP), reach=2,
            ordered=True,
            pattern=r"warmup_steps\s*[=:]\s*0\b"),
    # what the run needs, said to be unneeded ("the warmup can go", "el recorte sobra")
    Concept("removing the warmup", (WARMUP, NOT_NEEDED), reach=3, ordered=True),
    Concept("turning gradient clipping off", (CLIP, NOT_NEEDED), reach=3, ordered=True, unless=UPDATE_CLIP),
    Concept("removing the mask", (MASK, NOT_NEEDED), reach=3, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE),
    Concept("removing the mask", (OFF + "|delete|borrar", MASK), reach=2, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE,
            pattern=r"causal_mask\s*[=:]\s*(?:false|0|off|no)\b"),
    Concept("removing the mask", (MASK, "off|disabled|desactivada|apagada"), reach=2, ordered=True,
            unless=OTHER_MASK, not_near=LOSS_SIDE),
    # keeping the fault in place ("keep warmup at 0", "leave the mask off")
    Concept("keeping the warmup off", (KEEP, WARMUP, "~0|zero|off|none|disabled|cero|ninguno|desactivado"), reach=3,
            ordered=True),
    Concept("keeping the mask off", (KEEP, MASK, "off|disabled|all ones|bidirectional|full|desactivada|apagada"
                                     "|todo unos|bidireccional"), reach=3, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE),
    Concept("removing the mask", ("use|keep|make|leave|usar|mantener|dejar", "all ones|bidirectional|full attention"
                                  "|non causal|noncausal|todo unos|bidireccional"), reach=4, ordered=True),
)


@dataclass(frozen=True)
class Knob:
    """A config field a remediation can set, by the words that name it, and what setting it above the lab's
    value (`up`) or to zero (`zero`) does, when that is harmful for any run."""
    field: str
    words: str  # a regular expression over the lower-cased text
    up: str = ""
    zero: str = ""
    only: str = ""  # harmful for this cause only, where not for every run


KNOBS: tuple[Knob, ...] = (
    Knob("lr_max", r"(?:lr_max|lr max|max lr|peak lr|lr|learning rate|tasa de aprendizaje)(?! ?schedul)",
         up="raising the learning rate"),
    Knob("grad_clip", r"grad_clip|max_grad_norm|clip(?:ping)? (?:threshold|norm|limit)|clip(?:ping)?|umbral de recorte"
                      r"|recorte", up="loosening the clip threshold", zero="turning gradient clipping off"),
    Knob("init_scale", r"init_scale|init scale|initial scale|escala de inicializaci[oó]n|escala inicial",
         up="raising the init scale"),
    Knob("warmup_steps", r"warmup_steps|warm-?up|calentamiento", zero="removing the warmup"),
    Knob("beta2", r"beta2|β2|beta 2", up="raising beta2 (v decays slower, the stall lasts longer)",
         only="optimizer_state_corruption"),
)


_ALL = (
    Cause("healthy",
          (Concept("a healthy run", ("run|model|training|entrenamiento|modelo|corrida", "healthy|sano|saludable"),
                   reach=2, not_near=COMPARED + "|rest|remainder|otherwise|resto|demás"),  # "the rest ..., healthy"
           # "nothing wrong with the data" clears the data, not the run
           Concept("no anomaly", pattern=r"no anomal|nothing wrong(?! with)|nothing wrong with (?:the )?(?:run|model"
                                         r"|training)|sin anomal|nada raro(?! en)")),
          "Nothing to prevent: keep the baseline's settings and monitoring.",
          fixes=(Concept("no fix needed", pattern=r"no (?:fix|change|action)|nothing to (?:fix|do)|do nothing|nothing needed|wait it out|ninguna"
                                    r"|nada que|no hacer nada"),)),
    Cause("gradient_explosion",
          (Concept("an exploding gradient", (GRAD, EXPLODED), reach=3, unless=NOT_GRAD,
                   pattern=r"gradient_explosion"),
           # the norm 50x its usual value alone is a measurement a bad batch gives too: a sign, not this name
           Concept("the gradients multiplied at one step", (GRAD, SCALED_UP), ordered=True,
                   unless=NOT_GRAD + "|" + GRAD_NORM, along=SCALED_UP, opposite=SHRANK),
           Concept("the gradients multiplied at one step", (SCALING, GRAD), reach=2, ordered=True, unless=NOT_GRAD),
           Concept("the gradients multiplied at one step", (SCALING, "volume|knob|dial|gain|volumen|perilla",
                                                            "on|of|for|de|del|a", GRAD), reach=3, ordered=True,
                   unless=NOT_GRAD),
           Concept("every tensor's gradient jumped together", ("every|all|each|todos|todas|cada", GRAD,
                                                               "jump|spike|rise|rose|went up|salto|saltar|subir|subió"),
                   reach=3, ordered=True, unless=NOT_GRAD),
           Concept("every tensor's gradient jumped together", (GRAD, "every|all|each|todos|todas|cada",
                                                               "tensor|tensors|layer|layers|parameter|capa|capas",
                                                               "alike|together|at once|same factor|uniformly|same time"
                                                               "|simultaneously|a la vez|por igual|mismo factor"),
                   unless=NOT_GRAD)),
          "Keep global-norm clipping on and log the pre-clip norm every step; add an adaptive detector (z-score of "
          "the norm against its EMA, as ZClip) that flags or down-weights outliers.", remedy="zclip",
          signs=(Concept("a gradient-norm spike", (GRAD, "spike|jump|huge|large|peak|pico|salto|saltar|enorme"),
                         reach=3, unless=SQUARED),
                 Concept("a gradient-norm spike", (GRAD_NORM, SCALED_UP), ordered=True, unless=SQUARED)),
          fixes=(Concept("keeping (adaptive) gradient clipping", (KEEP, CLIP), reach=3, ordered=True,
                         unless=UPDATE_CLIP),
                 Concept("keeping (adaptive) gradient clipping", (CLIP, KEEP + "|on|active|activado|enabled|adaptive"
                                                                  "|adaptativo|at 1|stay|stays|remain"),
                         reach=3, ordered=True, unless=UPDATE_CLIP, pattern=r"zclip|clip_grad_norm|tighter clip"
                                 r"|grad_clip\s*(?:[=:]|(?:back )?to|at)\s*(?:0?\.\d+|1(?:\.0+)?)(?![\d-]|\.\d)"),
                 Concept("keeping (adaptive) gradient clipping", ("lower|reduce|decrease|tighten|smaller|bajar|reducir"
                                                                  "|disminuir|ajustar", CLIP), reach=2, ordered=True, unless=UPDATE_CLIP),
                 Concept("keeping (adaptive) gradient clipping", (CLIP, GRAD), reach=2, ordered=True,
                         unless=UPDATE_CLIP),
                 Concept("keeping (adaptive) gradient clipping", ("not|never|nunca|no|don't", OFF + "|turn|switch", CLIP),
                         reach=3, ordered=True, unless=UPDATE_CLIP),
                 Concept("finding what scaled the gradients", (FIND, SCALER), ordered=True, unless=INIT_TERM),
                 Concept("finding what scaled the gradients", (FIND, CULPRIT, GRAD + "|" + SCALER), ordered=True,
                         unless=SQUARED),
                 Concept("down-weighting the outlier step (ZClip)", pattern=r"down-?weight")), workarounds=(LOWER_BETA2,)),
    Cause("bad_batch",
          (Concept("a bad batch", (BAD, BATCH), reach=2, pattern=r"bad[-_ ]batch"),
           Concept("repeated or rare rows in one batch", (ROWS + "|" + BATCH, DUPLICATED), unless=LOADER),
           Concept("repeated or rare rows in one batch", (ROWS, "times|veces|over and over|again and again"
                                                          "|una y otra vez"), reach=3, ordered=True),
           Concept("repeated or rare rows in one batch", ("same|identical|mismo|misma|idéntico|idéntica", ROWS),
                   reach=1, not_near="panel|chart|plot|curve|graph|gráfico|gráfica|curva"),  # a chart's line
           # "eight plates of the same dish": a count of one thing is a repetition, whatever the thing is called
           Concept("repeated or rare rows in one batch", (COUNT, "of the same|of one|del mismo|de la misma|de un mismo"
                                                          "|de una misma"), reach=1, ordered=True, not_near=STEPS),
           Concept("repeated or rare rows in one batch", ("rare|uncommon|unusual|raro|rara|inusual|poco común",
                                                          "token|word|palabra"), reach=1)),
          "Check batch composition before the step (duplicated rows, rare-token share); deduplicate the data by "
          "fingerprint; skip a batch whose loss and gradient norm are both outliers (llm.c, Lightning).",
          remedy="skip_batch", recovers=True,
          signs=(Concept("the data", ("batch|minibatch|lote|minilote|data|datos",)),
                 Concept("a loss spike that recovers", (LOSS, SPIKE, "recover|recovered|came back|back|settle|settled"
                                                        "|recuperar|recupera|recuperó|volver|vuelve|volvió",
                                                        "next step|one step|single step|a step later|un paso"
                                                        "|siguiente paso|paso siguiente"), reach=6)),
          fixes=(Concept("skipping or filtering the batch",
                         (SKIP, BATCH + "|" + ROWS + "|it|step|update|duplicate|duplicado|paso|copies|copias"), reach=4,
                         ordered=True),
                 Concept("skipping or filtering the batch", (BATCH + "|" + ROWS, "skipped|dropped|removed|filtered"
                                                             "|discarded|excluded|descartado|saltado|eliminado"
                                                             "|filtrado"), reach=3, ordered=True),
                 Concept("skipping or filtering the batch", ("not|never|don't|no|nunca", "train|use|feed|entrenar|usar",
                                                             BATCH + "|it"), reach=3, ordered=True),
                 Concept("deduplicating the data", pattern=r"de-?dup|deduplic|sin duplicad")),
          harmful=(Concept("training on the bad batch again", ("train|repeat|feed|entrenar|repetir",
                                                               BATCH + "|it|them",
                                                               "again|more|más|otra vez|times|twice|veces"), reach=4,
                           ordered=True, pattern=r"oversampl|more copies|m[aá]s copias|up-?weight"),
                   Concept("training on the bad batch again", ("more weight|extra weight|más peso", BATCH + "|it|them"),
                           reach=4)), workarounds=(TIGHTER_CLIP,)),
    Cause("optimizer_state_corruption",
          (Concept("Adam's second moment (v) corrupted or inflated", (V, INFLATED), reach=8, ordered=True,
                   unless=NOT_V, along=INFLATED, opposite=SHRANK,
                   not_near="still|yet|todavía|aún"),  # "Adam's moments are still garbage": not estimated yet
           Concept("Adam's second moment (v) corrupted or inflated", (INFLATED, V), reach=3, ordered=True,
                   unless=NOT_V),
           Concept("a corrupted optimizer state", ("corrupt|tamper|overwrite|poison|corromper|dañar|estropear",
                                                   OPTIMIZER), reach=3,
                   pattern=r"state corruption|v_corrupt|optimizer_state_corruption"),
           Concept("one tensor's updates held back by Adam's second moment", (V, STALL), reach=10, unless=NOT_V,
                   along=INFLATED, opposite=SHRANK),
           Concept("one tensor's updates held back by Adam's second moment", (OPTIMIZER, STALL, TENSOR), reach=8,
                   along=INFLATED, opposite=SHRANK)),
          "Checkpoint the optimizer moments with the weights and monitor RMS(g^2/v) and v per tensor; on a jump, "
          "reload the last pre-spike checkpoint's moments.", remedy="restore_moments", recovers=True,
          signs=(Concept("Adam's second moment", (V,), unless=NOT_V),
                 Concept("one tensor stalled", (OPTIMIZER, STALL), reach=6),
                 Concept("one tensor stalled", (TENSOR + "|update|step|actualización|paso", STALL), reach=6),
                 Concept("a jump for one tensor", (SPIKE, "for|of|in|on|del|de|en", TENSOR), reach=0, ordered=True),
                 Concept("one tensor's updates fell", ("update|update rms|actualización", "fell|fall|drop|dropped"
                                                       "|small|smaller|cayó|bajó|pequeña"), reach=4)),
          harmful=(Concept("raising beta2 (v decays slower, the stall lasts longer)", (RAISE, "beta2|β2"), reach=3,
                           ordered=True),),
          workarounds=(Concept("resetting the whole optimizer, not the tensor's moments",
                               ("whole|entire|every|all|fresh|todo|toda|todos|completo|entero",
                                OPTIMIZER + "|state|estado|tensor|tensors"), reach=2, ordered=True), LOWER_BETA2),
          fixes=(Concept("reloading a checkpoint or the optimizer's moments", (RESTORE, CHECKPOINT), ordered=True,
                         step=True),
                 Concept("resetting the tensor's moments", (RESET, V), reach=5, ordered=True, unless=NOT_V),
                 Concept("resetting the tensor's moments", ("set|put|bring|poner|devolver", V, "back|anterior"),
                         reach=4, ordered=True))),
    Cause("optimizer_setting",
          (Concept("Adam's setting changed", ("beta2|β2|eps|epsilon|adam's setting|optimizer setting|hyperparameter"
                                              "|ajuste del optimizador|hiperparámetro",
                                              "change|edit|modify|differ|wrong|rebuilt|reset|swap|cambiar|distinto"
                                              "|erróneo|equivocado"), reach=5, pattern=r"\boptimizer_setting\b"),),
          "Pin the optimizer's hyperparameters in the config and the checkpoint, and assert them on resume; the "
          "walker fits beta2 from the logged second moment, so log it.", config_fix="beta2=0.95",
          signs=(Concept("Adam's beta2 or eps", ("beta2|β2|eps|epsilon",)),),
          fixes=(Concept("restoring the setting", ("restore|set|pin|restaurar|fijar", "beta2|β2|0.95|setting|eps"),
                         reach=4, ordered=True),)),
    Cause("bad_init",
          (Concept("weights initialised too large", (INIT, BIG), reach=4,
                   pattern=r"bad init|bad_init|mala inicializ|init_scale|inicializaci[oó]n (?:mala|err[oó]nea)"),
           Concept("weights initialised too large", (WEIGHTS, BIG, AT_START), reach=5, not_near=GREW, along=BIG,
                   opposite=SMALL),
           Concept("weights initialised too large", (INIT, "bad|wrong|broken|mal|mala|malo|erróneo|errónea"),
                   reach=1),
           Concept("weights initialised too large", (INIT, "scale|escala", r"~[1-9]\d+"), reach=2, ordered=True)),
          "Assert the step-0 loss is within ln V +- 0.5 and the step-1 gradient norm within [0.1, 10] before a long "
          "run; keep init std at 0.02 scale.", config_fix="init_scale=1",
          signs=(Concept("huge logits at step 0", ("logit|activation|activación", "huge|large|enormous|enorme|grande"),
                         reach=3),),
          workarounds=(Concept("lowering the init scale by some factor, not to the standard one",
                               (LOWER + "|halve|dividir", INIT), reach=4, ordered=True),
                       Concept("scaling the trained weights down by hand", ("divide|shrink|scale down|dividir|encoger",
                                                                           WEIGHTS + "|embedding|embeddings"), reach=4,
                               ordered=True),
                       # a norm layer, or the weights normalised: tames the scale the init left
                       Concept("normalising the weights or the logits instead of re-initialising",
                               ("~normali[sz]e|~normali[sz]ed|~normali[sz]ing|~normali[sz]ation|normalizar"
                                "|normalización|layernorm|layer norm|rmsnorm",))),
          harmful=(Concept("raising the init scale", (RAISE + "|scale up", INIT + "|std|scale|escala"), reach=3,
                           ordered=True),),
          fixes=(Concept("initialising at the standard scale", (RESET + "|init", "0.02|std|standard|small|smaller"
                                                                "|correct|default|proper|properly|desviación|estándar"
                                                                "|pequeño|pequeña|correcta|normal"), reach=6,
                         ordered=True, pattern=r"init_scale\s*=\s*1\b"),
                 Concept("initialising at the standard scale", ("standard|default|proper|correct|small|usual|estándar"
                                                                "|correcta|habitual", INIT + "|scale|escala"), reach=2,
                         ordered=True),
                 Concept("initialising at the standard scale", ("fix|correct|repair|restore|arreglar|corregir"
                                                                "|restaurar", INIT + "|escala de inicialización"),
                         reach=2, ordered=True),
                 Concept("initialising at the standard scale", ("init_scale|init scale|escala de inicialización",
                                                                r"~1|~1\.0+"), reach=3, ordered=True),
                 # the standard deviation GPT-2 initialises with
                 Concept("initialising at the standard scale", ("std|sigma|σ|standard deviation|desviación estándar"
                                                                "|desviación típica", r"~0?\.02"), reach=2,
                         ordered=True))),
    Cause("no_warmup",
          (Concept("no warmup", ("no|without|missing|skip|skipped|lack|lacking|zero|forgot|removed|sin|falta|faltó"
                                 "|ningún|ninguna|omitido|" + OFF, WARMUP), reach=2, ordered=True, unless=NOT_BEING,
                   pattern=r"warmup_steps\s*=\s*0\b|\bno_warmup\b"),
           Concept("no warmup", (WARMUP, "missing|removed|absent|disabled|off|zero|~0|gone|skipped|eliminado|ausente"
                                 "|quitado|desactivado|cero"), reach=5, ordered=True, unless=FROM_ZERO),
           Concept("the LR at its peak from the first step", (LR, r"not|no|never|nunca|~\w*n't", "start|begin|ramp"
                                                              "|arrancar|empezar|comenzar|partir|subir",
                                                              "~0|zero|cero|near zero|low|small|bajo"), reach=3,
                   ordered=True),
           Concept("the LR at its peak from the first step", (LR, "start|begin|jump straight|from step 0|first step"
                                                                  "|step one|empezar|comenzar|arrancar|arrancó"
                                                                  "|empieza|empiezan|empezó|arranca|comienza"
                                                                  "|desde el paso 0|step 0|paso 0|straight|directly"
                                                                  "|right away|immediately|directamente|de golpe",
                                                              "peak|max|maximum|full|top|máximo|pico|tope"), reach=4)),
          "Keep a linear warmup (100 steps here) and plot the LR from step 0; a flat LR at its maximum from the "
          "first step is the tell.", config_fix="warmup_steps=100",
          signs=(Concept("the warmup", (WARMUP,)),
                 Concept("the loss rising in the first steps", (LOSS, "rise|rose|risen|went up|go up|climb|climbed"
                                                                "|jump|jumped|subir|sube|subió|crece|creció",
                                                                "first|early|start|primeros|primeras|inicio|comienzo"),
                         reach=6, ordered=True)),
          fixes=(Concept("restoring the warmup", ("restore|add|put|bring|give|reintroduce|use|keep|enable|turn on|set up|set"
                                                  "|reinstate|restaurar|añadir|agregar|volver|poner|usar|activar"
                                                  "|reactivar|reponer|devolver|reinstaurar|meter|recuperar", WARMUP), reach=5, ordered=True,
                         pattern=r"warmup_steps\s*=\s*[1-9]"),
                 Concept("restoring the warmup", (WARMUP, LR + "|lr_max|peak"), reach=3),
                 Concept("restoring the warmup", (LR, "climb|rise|increase|ramp|grow|go up|subir|crecer|aumentar",
                                                  "linearly|gradually|slowly|from ~0|from 0|from zero|desde 0"
                                                  "|desde cero|poco a poco|linealmente|gradualmente"), reach=4,
                         ordered=True)),
          workarounds=(Concept("lowering the peak LR instead of warming up", (LOWER, LR + "|lr_max|peak|pico"),
                               reach=3, ordered=True), TIGHTER_CLIP,
                       # a lower LR for the first steps only: a warmup of one step
                       Concept("a lower LR for the first steps only", ("half|lower|smaller|reduced|mitad|menor|más bajo"
                                                                        "|más baja", LR + "|peak|pico",
                                                                        "first|early|start|beginning|primeros|primeras"
                                                                        "|inicio|comienzo"), reach=4, ordered=True),
                       Concept("a warmup far shorter than the lab's", ("short|shorter|brief|tiny|corto|cortito|breve",
                                                                       WARMUP), reach=2))),
    Cause("broken_mask",
          (Concept("a broken causal mask", ("broken|all ones|wrong|non causal|noncausal|bidirectional|full|no causal",
                                            MASK), reach=2, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE),
           Concept("a broken causal mask", (MASK, "broken|all ones|ones|not causal|non causal|noncausal|wrong|missing"
                                            "|removed|replaced|disabled|off|gone|full|bidirectional|roto|rota|mal"
                                            "|eliminada|desactivada|quitada|todo unos|todos unos|unos|no causal"
                                            "|not applied|never applied|~\\w*n't applied|not used|~\\w*n't used"
                                            "|no se aplicó|no se aplicaba|ignored|ignorada"
                                            "|skipped|omitida"), reach=3, unless=OTHER_MASK, not_near=LOSS_SIDE,
                   # the setting written as it was: a statement of the fault
                   pattern=r"\bbroken_mask\b|causal_mask\s*[=:]\s*(?:false|0|off|no)\b"),
           # what attention reaches: it sees, attends to or covers the positions after it
           Concept("positions see the future tokens", ("see|peek|look|attend|read|ver|vea|veía|mirar|espiar|atiende"
                                                       "|atienden|atender|atendía|cover|span|reach|cubrir|abarcar"
                                                       "|alcanzar",
                                                       "future|next token|next tokens|later token"
                                                       "|later position|future position|posiciones futuras"
                                                       "|all positions|every position|every other token|whole sequence"
                                                       "|entire sequence|todas las posiciones|toda la secuencia"
                                                       "|futuro|futuros|siguiente|siguientes|after it|after them|ahead"
                                                       "|subsequent|posteriores|que vienen después|que siguen"
                                                       "|on its right|to its right|to the right|on the right"
                                                       "|a su derecha|a la derecha"), reach=4),
           Concept("positions see the future tokens", (MASK, "see|peek|look ahead|attend|ver|vea|veía|mirar"),
                   reach=5, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE),
           Concept("positions see the future tokens", ("copy|copies|copying|copiar|copia", "next token|following token"
                                                       "|siguiente token|token siguiente|future"), reach=3),
           Concept("positions see the future tokens", ("attention|atención", "bidirectional|bidireccional|non causal"
                                                       "|noncausal|not causal|no causal"), reach=3),
           Concept("a broken causal mask", ("no|without|sin|missing|lack|lacks|lacking|absent|falta|faltar|ausente",
                                            MASK), reach=2, ordered=True, unless=OTHER_MASK + "|" + NOT_BEING,
                   not_near=LOSS_SIDE),
           Concept("a broken causal mask", (r"~\w*n't|not", "masked"), reach=0, ordered=True),
           Concept("a broken causal mask", ("unmasked|sin enmascarar",))),
          "Test the attention mask (no position sees a later one) and watch the gap between training and "
          "validation loss; validation always uses the causal mask.", config_fix="causal_mask=true",
          # seeing what it must predict fits a target leak as well
          signs=(Concept("the mask", (MASK,), unless=OTHER_MASK, not_near=LOSS_SIDE),
                 Concept("validation loss not falling with the training loss",
                         ("validation|val|validación", "not fall|doesn't fall|does not fall|not improve|flat|stalls"
                          "|no baja|no mejora|no cae|plana|estancada", "train|training|entrenamiento"), reach=6,
                         ordered=True),
                 Concept("the model sees what it must predict", ("see|sees|peek|look|has|have|copy|copies|ver|tener"
                                                                 "|tiene delante|copiar|copia",
                                                                 "answer|target|must predict|has to predict"
                                                                 "|is to predict|debe predecir|tiene que predecir"
                                                                 "|respuesta|objetivo"), reach=4)),
          fixes=(Concept("restoring the causal mask", ("make|set|keep|hacer|dejar", MASK, "causal|triangular|tril"),
                         reach=3, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE),
                 Concept("restoring the causal mask", (REPAIR, "causal|triangular|tril"), reach=3, ordered=True,
                         unless=OTHER_MASK, not_near=LOSS_SIDE),
                 Concept("restoring the causal mask", ("restore|use|put|bring|enable|re enable|turn|switch"
                                                       "|retrain|train|rerun|re run|entrenar|reentrenar"
                                                       "|reinstate|reapply|re apply|apply|restaurar|usar|poner|volver|aplicar"
                                                       "|activar|reactivar|activate|reactivate|re activate|restablecer|reponer|encender",
                                                       "causal|triangular|tril|" + MASK),
                         reach=4, ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE, pattern=r"causal_mask\s*[=:]\s*(?:true|1|on|yes)\b"),
                 Concept("restoring the causal mask", ("causal|triangular|tril", MASK + "|attention|atención",
                                                       "on|enabled|activada|activa|encendida"), reach=2, ordered=True)),
          # the model learned to peek: going on from its weights keeps what it learned that way
          workarounds=(Concept("resuming the model trained without the mask", (RESTORE + "|go on|keep training",
                                                                                "checkpoint|punto de control"),
                               reach=4, ordered=True),
                       # "fix the mask" does not say which mask, nor how
                       Concept("fixing a mask without saying it is the causal one", (REPAIR, MASK), reach=2,
                               ordered=True, unless=OTHER_MASK, not_near=LOSS_SIDE))),
    Cause("target_leak",
          (Concept("targets leaked into the inputs", ("target|label|objetivo|etiqueta", "leak|leaked|fuga|filtrar"),
                   reach=3, pattern=r"(?:no|missing|forgot\w*) (?:the )?(?:one[- ]token )?shift|\btarget_leak\b"),
           Concept("targets leaked into the inputs", ("input|entrada", "contain|hold|equal|include|contener|incluir",
                                                      "target|objetivo"), reach=3, ordered=True)),
          "Test the data pipeline: targets are the inputs shifted by one token, and no input position holds the "
          "token it must predict; a validation loss above an untrained model's is the alarm."),
    Cause("stuck_loader",
          (Concept("a stuck data loader", ("loader|dataloader|cargador|data pipeline|pipeline|sampler|data iterator"
                                           "|iterator|muestreador|iterador", "stuck|frozen|hang|hung"
                                           "|jammed|wedged|looping|loop|atascado|congelado|pegado|colgado|atorado"
                                           "|trabado|bucle"), reach=3, pattern=r"\bstuck_loader\b|repeated batch(?:es)?|mismo lote repetido"),
           Concept("a stuck data loader", ("same batch|identical batch|mismo lote", "again|every step|over and over"
                                           "|served|repeat|repeated|twice|otra vez|cada paso|repetido|" + REPEATED_ES), reach=4),
           Concept("a stuck data loader", (BATCH, "repeat|repeated|served|again|repetido|servido|" + REPEATED_ES,
                                           "~steps|consecutive|in a row|~pasos|consecutivos|seguidos"), reach=4,
                   ordered=True),
           # the loader serving the same thing again, step after step: what it serves is no bad batch of its own
           Concept("a stuck data loader", ("loader|dataloader|cargador|data pipeline|pipeline",
                                           "serve|served|fed|feed|return|returned|yield|gave|kept|send|sent|sirvió"
                                           "|servir|servía|entregó|devolvió|devolvía|dio|daba|mandó|seguía",
                                           "same|identical|mismo|misma|idéntico|idéntica|again|over and over"
                                           "|una y otra vez|otra vez|repeat|" + REPEATED_ES), reach=6, ordered=True)),
          "Log a fingerprint of every batch (rows, token statistics) and alarm when one repeats; the data order "
          "is a pure function of (seed, step) here, so a repeat is a bug."),
    Cause("non_finite", (Concept("NaN or Inf values", pattern=r"\bnan\b|non[- ]finite|\binf\b|infinit|no finito"),),
          "Stop at the first non-finite loss or gradient (the loop does), and resume from the last finite "
          "checkpoint with the cause fixed.", follows=True),
    Cause("lr_schedule",
          (Concept("a broken LR schedule", ("schedule|scheduler|programa|planificador", JUDGED + "|bug|buggy|reset"
                                            "|restarted|misconfigured|reiniciado"), reach=4,
                   pattern=r"(?:lr|learning rate) (?:is )?constant|constant (?:lr|learning rate)|\blr_schedule\b"),),
          "Log the LR every step and check warmup and decay against the configured schedule.",
          fixes=(Concept("fixing the scheduler", (REPAIR + "|restore|restaurar", "schedule|scheduler|programador"
                                                  "|planificador"), reach=3, ordered=True),)),
    Cause("lr_spike",
          (Concept("an LR spike", (LR, "spike|jump|jumped|pico|salto|saltar|multiply|dispararse|double|triple|duplicar|shot up"), reach=2,
                   pattern=r"\blr_spike\b"),),
          "Log the LR the optimizer actually ran with, every step, and assert it against the schedule's formula "
          "(a resumed or rebuilt scheduler is the usual culprit)."),
    Cause("lr_too_high",
          (Concept("a learning rate too high", (LR, "too high|too large|too big|demasiado alta|demasiado grande"
                                                "|excessive|excesiva|excesivo"), reach=5,
                   pattern=r"\blr_too_high\b|(?:high|large|big|excessive) (?:lr|learning[- ]rate)"),),
          "Start from the course's LR (3e-4 here) and watch the update-to-weight ratio (about 1e-3 is healthy); "
          "raise the LR only while validation still improves.", config_fix="lr_max=0.0003",
          fixes=(Concept("lowering the learning rate", (LOWER, LR), reach=3, ordered=True,
                         pattern=r"lr_max\s*=\s*0?\.0003|3e-4"),)),
    Cause("attention_logit_growth",
          (Concept("attention logits that grew (entropy collapse)",
                   ("attention logit|attention score|logit de atención|logits de la atención|attention",
                    "grow|grew|large|huge|explode|blew|crecer|grande|enorme"), reach=2,
                   pattern=r"entropy collapse|colapso de (?:la )?entrop[ií]a|\battention_logit_growth\b"),
           Concept("attention logits that grew (entropy collapse)", ("attention|atención", "one hot|collapse|colapsar"),
                   reach=4)),
          "Use qk-layernorm in the attention (OLMo 2 and the small-scale proxies do) and log the largest attention "
          "logit per layer on detail steps; raise the LR only while it stays bounded.", config_fix="qk_norm=true",
          signs=(Concept("the attention", ("attention|atención",)),),
          fixes=(Concept("qk-layernorm", ("normalise|normalize|layernorm|layer norm|norm|normalizar",
                                          "query|queries|key|keys|q|k|consulta|clave"), reach=4, ordered=True,
                         pattern=r"qk[-_ ]?(?:layer)?[-_ ]?norm"),
                 Concept("lowering the learning rate", (LOWER, LR), reach=3, ordered=True))),
    Cause("output_logit_divergence",
          (Concept("output logits drifting from the log-probabilities (log Z)",
                   ("output logit|logit de salida|logits de salida|log z|logsumexp",
                    "drift|diverge|far from|lejos|grew|grow|crecer|derivar"), reach=5,
                   pattern=r"divergencia de (?:los )?logits|output[- ]logit divergence|\boutput_logit_divergence\b"),),
          "Add the auxiliary z-loss (PaLM: 1e-4, OLMo 2: 1e-5) and log the mean log Z of the output logits.",
          config_fix="z_loss=0.0001",
          signs=(Concept("the output logits", ("logit",)),),
          fixes=(Concept("an auxiliary z-loss", pattern=r"z[-_ ]?loss|p[eé]rdida z"),)),
    Cause("second_moment_underestimate",
          (Concept("Adam's second moment under-estimating the squared gradient",
                   (V, "underestimate|under estimate|underestimated|too small|too low|lag|lagged|behind|subestimar"
                       "|subestimado|demasiado pequeño|atrasado|retrasado"), reach=6, unless=NOT_V,
                   pattern=r"stableadamw|\bsecond_moment_underestimate\b"),
           Concept("Adam's second moment under-estimating the squared gradient",
                   ("update rms|rms of the update|rms de la actualización", "above|exceed|over|grew|rose|spike|jump"
                                                                           "|too big|too large|superar|por encima"),
                   reach=4)),
          "Log the per-tensor update RMS sqrt(mean(g^2/v_hat)) and clip updates where it exceeds 1 (StableAdamW); "
          "a lower beta2 lets v follow a growing gradient sooner.", config_fix="update_clip=true",
          signs=(Concept("Adam's second moment", (V,), unless=NOT_V),),
          fixes=(Concept("update clipping (StableAdamW)", (CLIP, "update|updates|actualización"), reach=3,
                         pattern=r"update[-_ ]?clip|stableadamw"),)),
    Cause("grads_not_zeroed",
          (Concept("gradients not zeroed between steps",
                   ("zero|reset|clear|cero|reiniciar|limpiar|borrar", GRAD), reach=4,
                   pattern=r"zero_grad|\bgrads_not_zeroed\b"),
           Concept("gradients accumulating across steps",
                   (GRAD, "accumulate|accumulated|accumulating|carry|carried|pile up|acumular|acumulado"), reach=4)),
          "Call optimizer.zero_grad() once per step (before backward); let the probe check that the gradient the "
          "optimizer gets is the one backward produced.",
          signs=(Concept("the gradients", (GRAD,)),),
          # zeroing is done to the gradients: "poner a cero la v" zeroes Adam's v
          fixes=(Concept("zeroing the gradients every step", ("zero|cero|clear|reset|limpiar|reiniciar", GRAD),
                         reach=4, ordered=True, unless=SQUARED, pattern=r"zero_grad"),)),
    Cause("frozen_parameters",
          (Concept("frozen parameters", (WEIGHTS + "|tensor|layer|capa", "frozen|freeze|congelar|congelado|fijo"),
                   reach=4, pattern=r"requires_grad|\bfrozen_parameters\b"),),
          "Print which parameters are trainable (requires_grad and in the optimizer's groups) at the start, and "
          "check that every tensor changes at the first steps.",
          signs=(Concept("weights that do not change",
                         (WEIGHTS, "never change|not change|unchanged|no cambiar|sin cambio"), reach=4),),
          fixes=(Concept("unfreezing them", ("unfreeze|descongelar",), pattern=r"requires_grad\s*=\s*true"),)),
    Cause("update_not_applied",
          (Concept("an optimizer step that changes no weight",
                   ("step|optimizer|optimiser|paso|optimizador",
                    "no effect|nothing|not change|not applied|not update|sin efecto|no cambiar|no aplicar"),
                   # "nothing has trained yet" is step 0, not a step lost
                   reach=6, unless="almost nothing|nearly nothing|next to nothing|casi nada|nothing else|nada más"
                   "|nothing about|nothing to do with|nada que ver",  # what it rules out: "nothing about the data"
                   not_near="yet|todavía|aún|untrained|sin entrenar", pattern=r"update not applied|\bupdate_not_applied\b"),),
          "Build the optimizer on the parameters of the model as trained (after moving and wrapping it) and assert "
          "after the first step that the weights changed.",
          signs=(Concept("the weights", (WEIGHTS,)),),
          fixes=(Concept("building the optimizer after wrapping the model",
                         ("build|create|make|rebuild|construir|crear", "optimizer|optimiser|optimizador"), reach=4),)),
    Cause("loss_reduction",
          (Concept("a loss summed instead of averaged", ("loss|pérdida", "sum|summed|suma|sumar"), reach=4,
                   pattern=r"reduction\s*=\s*.?sum|\bloss_reduction\b"),),
          "Compute the loss as a token mean (reduction='mean', or divide by the target-token count) and check that "
          "the gradient norm does not follow the batch's token count.",
          signs=(Concept("the gradient norm", (GRAD,)),),
          fixes=(Concept("averaging the loss", ("mean|average|divide|media|promedio|dividir",
                                                "token|loss|pérdida|count"), reach=4,
                         pattern=r"reduction\s*=\s*.?mean"),)),
    Cause("ranks_diverged",
          (Concept("data-parallel ranks diverging",
                   ("rank|replica|réplica|process|proceso|worker|gpu",
                    "diverge|drift|differ|desync|apart|desincronizar|distinto"), reach=5,
                   pattern=r"all-?reduce|\branks_diverged\b"),),
          "Wrap the model in DDP once (after moving it, before the optimizer) and compare a weight digest across "
          "ranks every few steps.",
          signs=(Concept("the ranks", ("rank|replica|réplica",)),),
          fixes=(Concept("wrapping the model in DDP once", ("wrap|envolver", "model|modelo"), reach=3,
                         pattern=r"ddp|distributeddataparallel"),)),
    Cause("unknown", (), "Find the cause first: the tree did not name one."),
)

CAUSES: dict[str, Cause] = {c.name: c for c in _ALL}
