"""The causes the stability check can name: ONE registry, read by the tree, the walker, the learner's grading,
the post-mortem and the remediation.

A cause is its name, how to prevent it next time, how this run is fixed (a registered in-step remedy,
core/remedy.py, forked from before the anomaly, or a config fix to re-run from step 0), and the words a learner
uses for it, English and Spanish, each a (concept, regular expression over the lower-cased text) pair:

    names     words that name the failure mode itself ("the gradients were multiplied by 50")
    signs     a symptom that points at it but that other causes share ("the gradient norm jumped")
    fixes     the fixes registered for it ("keep clipping on", "skip that batch")
    harmful   fixes that make it worse ("turn clipping off" for an explosion); HARMFUL_ALWAYS adds to every cause

The grader (lab/learner/meaning.py) reads them; a concept's name is what the learner is shown. Adding a cause
is one entry here plus its leaf and check in the tree; tests/test_causes.py checks that every leaf's cause is
here, every cause but `unknown` has names, and every registered remedy answers a cause that names it.
"""
from __future__ import annotations

from dataclasses import dataclass

Concept = tuple[str, str]  # (what it is, in words a learner is shown; regular expression, lower case)


def near(a: str, b: str, words: int = 4) -> str:
    """`a` then `b` with at most `words` words in between."""
    return rf"(?:{a})\w*\W+(?:[\w'.]+\W+){{0,{words}}}?(?:{b})"


def either(a: str, b: str, words: int = 4) -> str:
    """`a` and `b` in either order, at most `words` words apart."""
    return f"{near(a, b, words)}|{near(b, a, words)}"


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

    @property
    def words(self) -> tuple[str, ...]:
        """The patterns that name it (matched at a word start)."""
        return tuple(pattern for _, pattern in self.names)


# the words learners use for the things the causes are made of
GRAD = r"(?<!squared )(?<!square )(?<!de los )gradient(?!e?s? al cuadrado)|grad[- _]norm"
LR = r"lr\b|learning[- ]rate|tasa(?: de aprendizaje)?"
TIMES = r"x\s?\d+|\d+\s?(?:x|times|veces)\b|(?:by|por) (?:a factor of )?\d+|fifty|hundred|cien|cincuenta|factor"
ROWS = r"rows?\b|filas?\b|sentences?|frases?|examples?|ejemplos?"
BATCH = r"batch|lote|data\b|datos|" + ROWS
V = (r"second[- ]moments?|(?<!ln )\bv\b|exp_avg_sq|adam'?s? (?:v|state|moments?)|optimi[sz]er'?s? (?:state|moments?)"
     r"|(?:running|moving) average of (?:the )?squared gradients?|squared[- ]gradients? (?:average|estimate)"
     r"|variance estimate|segundo momento|momentos? de adam|estado del optimizador|la v de adam"
     r"|media m[oó]vil de los gradientes al cuadrado")
WENT_UP = (r"corrupt|inflat|multipl|scaled|blown|blew|jump|grew|bigger|larger|too (?:big|large|high)|hundred"
           r"|x\s?100|100\s?x|by 100|corromp|infl|aument|multiplic|cien|dispar|por 100|escal")
CLIP = r"clip|zclip|recort"
RESTORE = r"reload|restor|load|go back|roll ?back|rewind|revert|recarg|restaur|volver|retroced|cargar"
CHECKPOINT = r"checkpoint|punto de control|moments?|momentos|state|estado|\bv\b|snapshot"
UP = r"raise|increas|higher|bigger|larger|boost|doubl|sub[ie]|aument|increment|m[aá]s alt"
MASK = r"mask|m[aá]scara"

HARMFUL_ALWAYS: tuple[Concept, ...] = (
    ("turning gradient clipping off",
     near(r"turn|switch|shut", r"off\W+(?:\w+\W+){0,2}(?:" + CLIP + ")", 2) + "|" + near(CLIP, r"off\b", 2) + "|"
     + near(r"disabl|remov|drop|stop|without|no\b|quit|desactiv|elimin|apag|sin\b", CLIP, 2) + r"|grad_clip\s*=\s*0\b"),
    ("loosening the clip threshold",
     near(UP + r"|loosen|relax", r"(?:" + CLIP + r")\w*\W+(?:\w+\W+){0,1}(?:threshold|limit|max|umbral|l[ií]mite)", 2)
     + r"|grad_clip\s*=\s*(?:[2-9]\d|\d{3,})"),
    ("raising the learning rate", near(UP, LR, 3) + r"|(?:higher|larger|bigger) (?:lr|learning[- ]rate)"),
)


_ALL = (
    Cause("healthy",
          (("a healthy run", near(r"run|model|training|entrenamiento|modelo", r"healthy|sano|normal\b", 2)),
           ("no anomaly", r"no anomal|nothing wrong|sin anomal|nada raro")),
          "Nothing to prevent: keep the baseline's settings and monitoring.",
          fixes=(("no fix needed", r"no (?:fix|change|action)|nothing to (?:fix|do)|ninguna|nada que"),)),
    Cause("gradient_explosion",
          (("an exploding gradient", either(GRAD, r"explo", 3) + r"|explosi[oó]n de(?:l| los)? gradiente"),
           ("the gradients multiplied at one step",
            near(GRAD, r"scaled|multipl|blew|blown|escal|multiplic|explot|" + TIMES, 5)
            + "|" + near(r"scaled|multipl|multiplic|escal", r"(?:every |all |the )?" + GRAD, 3)),
           ("gradient_explosion", r"gradient_explosion")),
          "Keep global-norm clipping on and log the pre-clip norm every step; add an adaptive detector (z-score of "
          "the norm against its EMA, as ZClip) that flags or down-weights outliers.", remedy="zclip",
          signs=(("a gradient-norm spike", near(GRAD, r"spik|jump|huge|large|pico|salt|enorm", 3)
                  + r"|pico de(?:l)? (?:norma de(?:l)? )?gradiente"),),
          fixes=(("keeping (adaptive) gradient clipping",
                  near(r"keep|leave|use|add|turn on|enable|apply|mant|us|activ|dej|aplic", CLIP, 3)
                  + r"|zclip|" + near(CLIP, r"on\b|adaptiv|activ|at 1|=\s?1|the gradients?|them\b|los gradientes", 3)
                  + "|" + near(CLIP, r"handl|contain|caught|catch|absorb|cut", 3)
                  + "|" + near(r"lower|tighten|reduc|smaller|baj", CLIP, 3) + r"|tighter clip|clip_grad_norm"
                  + r"|(?:do not|don't|never|nunca|no) (?:turn|switch|disabl|remov|desactiv|quit)\w*\W+(?:\w+\W+){0,3}?(?:clip|recort)"),
                 ("finding what scaled the gradients",
                  near(r"find|look for|track|search|locate|fix|busc|encontr|localiz|arregl|correg",
                       r"scal|multipl|reduction|loss scal|bug|source|cause|origin|escal|multiplic|reducci|causa|error", 6)),
                 ("down-weighting the outlier step (ZClip)", r"down-?weight"))),
    Cause("bad_batch",
          (("a bad batch", r"bad[-_ ]batch|batch (?:malo|raro)|lote (?:malo|corrupt\w*|raro)|mal lote|data outlier"
                           r"|outlier batch|" + near(r"corrupt\w*|bad|poison\w*|garbage|weird|odd", BATCH, 2)),
           ("repeated or rare rows in one batch",
            either(ROWS, r"duplicat|repeat|copies|copy|copied|same|rare|outlier|corrupt|repetid|copias|copiad"
                         r"|mism|rar[oa]s?\b|at[ií]pic", 6)
            + "|" + either(r"batch|lote", r"duplicat|copies|rare|outlier|corrupt|at[ií]pic|rar[oa]s?\b", 6)
            + r"|copies of|copias de|long[- ]tail|cola larga|rare[- ]tokens?|tokens? raros?"),
           ("bad_batch", r"bad_batch")),
          "Check batch composition before the step (duplicated rows, rare-token share); deduplicate the data by "
          "fingerprint; skip a batch whose loss and gradient norm are both outliers (llm.c, Lightning).",
          remedy="skip_batch",
          signs=(("the data", r"batch|lote|\bdata\b|datos"),),
          fixes=(("skipping or filtering the batch",
                  near(r"skip|drop|remov|filter|exclud|discard|omit|salt|descart|elimin|filtr|quit|omit",
                       BATCH + r"|it\b|step|update|duplicat|duplicad|paso", 4)),
                 ("deduplicating the data", r"de-?dup|deduplic|sin duplicad")),
          harmful=(("training on the bad batch again",
                    near(r"train|entren|repeat|repet", r"again|more|m[aá]s|otra vez|times|veces", 5)
                    + r"|oversampl|more copies|m[aá]s copias"),)),
    Cause("optimizer_state_corruption",
          (("Adam's second moment (v) corrupted or inflated", either(V, WENT_UP, 8)),
           ("a corrupted optimizer state", r"state corruption|v_corrupt|optimizer_state_corruption"
                                           r"|corrup\w* (?:\w+ ){0,2}(?:optimi[sz]er|adam)")),
          "Checkpoint the optimizer moments with the weights and monitor RMS(g^2/v) and v per tensor; on a jump, "
          "reload the last pre-spike checkpoint's moments.", remedy="restore_moments",
          signs=(("Adam's second moment", V),),
          fixes=(("reloading a checkpoint or the optimizer's moments", near(RESTORE, CHECKPOINT, 6)),
                 ("resetting the tensor's moments", near(r"reset|reinici|zero|re-?init", CHECKPOINT + r"|" + V, 5)))),
    Cause("optimizer_setting",
          (("Adam's setting changed", either(r"beta2|β2|\beps(?:ilon)?\b|adam(?:w)?'?s? (?:setting|hyper)|optimi[sz]er'?s? "
                                             r"(?:setting|hyper)|ajuste del optimizador|hiperpar[aá]metros? de adam",
                                             r"chang|edit|modif|differ|wrong|rebuilt|reset|swapp|cambi|distint|err[oó]ne", 5)),),
          "Pin the optimizer's hyperparameters in the config and the checkpoint, and assert them on resume; the "
          "walker fits beta2 from the logged second moment, so log it.", config_fix="beta2=0.95",
          signs=(("Adam's beta2 or eps", r"beta2|β2|\beps(?:ilon)?\b"),),
          fixes=(("restoring the setting", near(r"restor|set|pin|restaur", r"beta2|β2|0\.95|setting|eps", 4)),)),
    Cause("bad_init",
          (("weights initialised too large",
            near(r"weights?|pesos|init|initiali|inicializ", r"too (?:large|big)|huge|large|scaled|enorm|grandes?|" + TIMES, 4)
            + r"|bad init|mala inicializ|init_scale|(?:large|huge|wrong|bad) init|inicializaci[oó]n (?:mala|err[oó]nea)"),),
          "Assert the step-0 loss is within ln V +- 0.5 and the step-1 gradient norm within [0.1, 10] before a long "
          "run; keep init std at 0.02 scale.", config_fix="init_scale=1",
          signs=(("huge logits at step 0", near(r"logits?|activation|activaci", r"huge|large|enorm|grandes?", 3)),),
          fixes=(("initialising at the standard scale",
                  near(r"init|initiali|inicializ|re-?init|reinicializ", r"0\.02|std|standard|small|correct|default|proper|normal|desviaci|est[aá]ndar|peque", 6)
                  + r"|init_scale\s*=\s*1\b|re-?initiali|reinicializ|volver a inicializar"),)),
    Cause("no_warmup",
          (("no warmup", near(r"no|without|missing|skipped|sin|lacks?|lacking|falta", r"warm[- ]?up|calentamiento", 2)
                         + r"|warmup_steps\s*=\s*0\b|"
                         + near(r"starts?|begins?|empieza|comienza|arranca|from step 0", r"peak|max|m[aá]xim", 4)),),
          "Keep a linear warmup (100 steps here) and plot the LR from step 0; a flat LR at its maximum from the "
          "first step is the tell.", config_fix="warmup_steps=100",
          signs=(("the warmup", r"warm[- ]?up|calentamiento"),),
          fixes=(("restoring the warmup",
                  near(r"restor|add|put|bring|reintroduc|use|keep|enable|restaur|añad|agreg|volv|pon|us", r"warm[- ]?up|calentamiento|ramp", 5)
                  + r"|warmup_steps\s*=\s*[1-9]"),),
          harmful=(("removing the warmup", near(r"remov|drop|skip|quit|elimin", r"warm[- ]?up|calentamiento", 3)),)),
    Cause("broken_mask",
          (("a broken causal mask",
            near(MASK, r"broken|all[- ]ones|ones|rot[oa]|not causal|wrong|missing|replaced|non-?causal|no causal|mal", 4)
            + "|" + near(r"broken|all[- ]ones|wrong|no causal|non-?causal", MASK, 2)),
           ("positions see the future tokens",
            near(r"sees?|see|ve|peek|look", r"future|futur|answers?|respuestas?|next token", 4)
            + "|" + near(MASK, r"see|peek|look ahead|ve\b|vea", 5) + r"|future tokens|tokens futuros")),
          "Test the attention mask (no position sees a later one) and watch the gap between training and "
          "validation loss; validation always uses the causal mask.", config_fix="causal_mask=true",
          signs=(("the mask", MASK),),
          fixes=(("restoring the causal mask", near(r"restor|fix|use|put|bring|enable|restaur|arregl|us|pon|volv", r"causal|triangular", 4)
                                               + r"|causal_mask\s*=\s*true"),),
          harmful=(("removing the mask", near(r"remov|drop|delet|disabl|quit|elimin|desactiv", MASK, 3)),)),
    Cause("target_leak",
          (("targets leaked into the inputs", r"(?:target|label) leak|(?:no|missing|forgot\w*) (?:the )?(?:one[- ]token )?shift"
                                              r"|" + near(r"inputs?", r"contain|hold|equal", 1) + r"\w*\W+(?:\w+\W+){0,4}?targets?"
                                              r"|fuga de (?:etiquetas|objetivos)"),),
          "Test the data pipeline: targets are the inputs shifted by one token, and no input position holds the "
          "token it must predict; a validation loss above an untrained model's is the alarm."),
    Cause("stuck_loader",
          (("a stuck data loader", r"stuck (?:data )?loader|loader (?:is |was |got )?stuck|same batch (?:again|served|repeated)"
                                   r"|repeated batch(?:es)?|cargador atascado|mismo lote repetido"),),
          "Log a fingerprint of every batch (rows, token statistics) and alarm when one repeats; the data order "
          "is a pure function of (seed, step) here, so a repeat is a bug."),
    Cause("non_finite", (("NaN or Inf values", r"\bnan\b|non[- ]finite|\binf\b|infinit|no finito"),),
          "Stop at the first non-finite loss or gradient (the loop does), and resume from the last finite "
          "checkpoint with the cause fixed."),
    Cause("lr_schedule",
          (("a broken LR schedule", r"(?:learning[- ]rate|lr) schedul|scheduler|(?:lr|learning rate) (?:is )?constant"
                                    r"|constant (?:lr|learning rate)|programa de lr"),),
          "Log the LR every step and check warmup and decay against the configured schedule.",
          fixes=(("fixing the scheduler", r"schedul|programador"),)),
    Cause("lr_spike",
          (("an LR spike", near(LR, r"spik|jump|pico|salt|multipl", 2)),),
          "Log the LR the optimizer actually ran with, every step, and assert it against the schedule's formula "
          "(a resumed or rebuilt scheduler is the usual culprit)."),
    Cause("lr_too_high",
          (("a learning rate too high", near(LR, r"too (?:high|large|big)|demasiado (?:alta|grande)|alt[ao]\b|excesiv", 3)
                                        + r"|(?:high|large|big|excessive) (?:lr|learning[- ]rate)"),),
          "Start from the course's LR (3e-4 here) and watch the update-to-weight ratio (about 1e-3 is healthy); "
          "raise the LR only while validation still improves.", config_fix="lr_max=0.0003",
          fixes=(("lowering the learning rate", near(r"lower|reduc|decreas|smaller|cut|baj|reduc|disminu", LR, 3)
                                                + r"|lr_max\s*=\s*0?\.0003|3e-4"),)),
    Cause("attention_logit_growth",
          (("attention logits that grew (entropy collapse)",
            either(near(r"attention|atenci[oó]n", r"logits?|scores?", 2) + r"|logits? de (?:la )?atenci[oó]n",
                   r"grow|grew|large|huge|explod|blew|crec|grande|enorm", 5)
            + r"|entropy collapse|colapso de (?:la )?entrop[ií]a|"
            + near(r"attention|atenci[oó]n", r"one-?hot|collaps|colaps", 4)),),
          "Use qk-layernorm in the attention (OLMo 2 and the small-scale proxies do) and log the largest attention "
          "logit per layer on detail steps; raise the LR only while it stays bounded.", config_fix="qk_norm=true",
          signs=(("the attention", r"attention|atenci[oó]n"),),
          fixes=(("qk-layernorm", r"qk[-_ ]?(?:layer)?[-_ ]?norm|" + near(r"normali[sz]|layer ?norm|norm",
                                                                           r"quer|keys?|q\b|k\b|consultas|claves", 4)),
                 ("lowering the learning rate", near(r"lower|reduc|decreas|smaller|cut|baj|disminu", LR, 3)))),
    Cause("output_logit_divergence",
          (("output logits drifting from the log-probabilities (log Z)",
            either(near(r"output|salida", r"logits?", 2) + r"|logits de salida|log ?z\b|logsumexp",
                   r"drift|diverg|deriv|far from|lejos|grew|grow|crec", 5)
            + r"|divergencia de (?:los )?logits|output[- ]logit divergence"),),
          "Add the auxiliary z-loss (PaLM: 1e-4, OLMo 2: 1e-5) and log the mean log Z of the output logits.",
          config_fix="z_loss=0.0001",
          signs=(("the output logits", r"logits?"),),
          fixes=(("an auxiliary z-loss", r"z[-_ ]?loss|p[eé]rdida z"),)),
    Cause("second_moment_underestimate",
          (("Adam's second moment under-estimating the squared gradient",
            near(V, r"under-?estimat|too (?:small|low)|subestim|lag", 6) + r"|update rms|stableadamw"),),
          "Log the per-tensor update RMS sqrt(mean(g^2/v_hat)) and clip updates where it exceeds 1 (StableAdamW); "
          "a lower beta2 lets v follow a growing gradient sooner.", config_fix="update_clip=true",
          signs=(("Adam's second moment", V),),
          fixes=(("update clipping (StableAdamW)", r"update[-_ ]?clip|stableadamw|" + near(r"clip|recort", r"updates?|actualizaci", 3)),)),
    Cause("grads_not_zeroed",
          (("gradients not zeroed between steps",
            near(r"zero_grad|zero|reset|clear|cero|reinici|limpi|borr", GRAD, 4)
            + r"|zero_grad|" + near(GRAD, r"accumul|acumul|carr|pil", 4)),
           ("grads_not_zeroed", r"grads_not_zeroed")),
          "Call optimizer.zero_grad() once per step (before backward); let the probe check that the gradient the "
          "optimizer gets is the one backward produced.",
          signs=(("the gradients", GRAD),),
          fixes=(("zeroing the gradients every step",
                  near(r"call|add|put|restor|llam|a[nñ]ad|pon", r"zero_grad", 3) + r"|zero_grad\(\)"),)),
    Cause("frozen_parameters",
          (("frozen parameters",
            either(r"param|weights?|tensors?|layers?|capas?|pesos|par[aá]metros", r"frozen|freez|congel|fij", 4)
            + r"|requires_grad"),
           ("frozen_parameters", r"frozen_parameters")),
          "Print which parameters are trainable (requires_grad and in the optimizer's groups) at the start, and "
          "check that every tensor changes at the first steps.",
          signs=(("weights that do not change", near(r"weights?|pesos|tensors?", r"never chang|not chang|no cambi|unchang", 4)),),
          fixes=(("unfreezing them", r"unfreez|descongel|requires_grad\s*=\s*true|" + near(r"add|a[nñ]ad", r"optimi[sz]", 4)),)),
    Cause("update_not_applied",
          (("an optimizer step that changes no weight",
            near(r"step|optimi[sz]er|paso|optimizador", r"no (?:effect|change)|nothing|not (?:chang|appl|updat)"
                 r"|sin efecto|no cambi|no aplic|no actualiz|copy|copia", 6)
            + r"|update not applied|actualizaci[oó]n no aplicada"),
           ("update_not_applied", r"update_not_applied")),
          "Build the optimizer on the parameters of the model as trained (after moving and wrapping it) and assert "
          "after the first step that the weights changed.",
          signs=(("the weights", r"weights?|pesos"),),
          fixes=(("building the optimizer after wrapping the model",
                  near(r"build|creat|make|rebuild|constru|cre", r"optimi[sz]", 4)),)),
    Cause("loss_reduction",
          (("a loss summed instead of averaged",
            either(r"loss|p[eé]rdida", r"sum|suma", 4) + r"|reduction\s*=\s*.?sum|" + near(r"sum|suma", r"mean|average|media|promedio", 4)),
           ("loss_reduction", r"loss_reduction")),
          "Compute the loss as a token mean (reduction='mean', or divide by the target-token count) and check that "
          "the gradient norm does not follow the batch's token count.",
          signs=(("the gradient norm", GRAD),),
          fixes=(("averaging the loss", near(r"mean|average|divid|media|promedi", r"tokens?|loss|p[eé]rdida|count", 4)
                  + r"|reduction\s*=\s*.?mean"),)),
    Cause("ranks_diverged",
          (("data-parallel ranks diverging",
            either(r"ranks?|replica|r[eé]plicas?|procesos?|workers?|gpus?", r"diverg|drift|differ|desync|apart|desincron|distint", 5)
            + r"|all-?reduce"),
           ("ranks_diverged", r"ranks_diverged")),
          "Wrap the model in DDP once (after moving it, before the optimizer) and compare a weight digest across "
          "ranks every few steps.",
          signs=(("the ranks", r"ranks?|r[eé]plicas?"),),
          fixes=(("wrapping the model in DDP once", r"ddp|distributeddataparallel|" + near(r"wrap|envolv", r"model|modelo", 3)),)),
    Cause("unknown", (), "Find the cause first: the tree did not name one."),
)

CAUSES: dict[str, Cause] = {c.name: c for c in _ALL}
