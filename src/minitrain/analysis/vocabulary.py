"""The words the causes' concepts are made of (analysis/causes.py), as synonyms in English and Spanish.

A part is synonyms separated by "|"; each synonym is one or more words, each matched by its stem in English or
Spanish, or by a regular expression over the whole word when written "~regex". Each name below is one thing a
learner can speak of (the gradients, Adam's second moment, the mask) or one thing that can happen to it
(multiplied, inflated, restored), so a cause's concept is a few of them put together.
"""
from __future__ import annotations


def any_of(*groups: str) -> str:
    """Synonym groups joined into one part."""
    return "|".join(groups)


# The things causes are made of, as synonyms (English | Spanish). A word is matched by its stem.
# the gradient norm: one number over every tensor, which a bad batch moves as much as a scaled gradient does
GRAD_NORM = any_of("gradient norm|grad norm|pre clip norm|preclip norm|global norm|norm of the gradient",
                   "norma del gradiente|norma de los gradientes|norma pre clip|norma global")
GRAD = any_of("gradient|grad|grads", GRAD_NORM, "gradiente")
SQUARED = any_of("squared gradient|square gradient|gradient squared|squared grad|g2|g^2|g²",
                 "gradiente al cuadrado|gradientes al cuadrado|cuadrado del gradiente|cuadrados de los gradientes")
# Adam's second moment, by name or by its role in the update (the per-weight normaliser under the square root)
V = any_of("v|v_hat|vhat|exp_avg_sq|second moment|2nd moment|second raw moment|adam's v|adam v|variance estimate",
           "running variance|varianza",
           "opt state|optim state|sq grad|sq grads|" + SQUARED,
           "running average of squared gradient|moving average of squared gradient|ema of squared gradient",
           "average of squared gradient|average of the squared gradient|squared gradient average",
           "normaliser|normalizer|normalisation term|denominator|divisor|square root|sqrt|preconditioner",
           "optimizer state|optimiser state|adam state|adam's state|optimizer moments|adam moments|moments",
           "segundo momento|momentos|v de adam|estado del optimizador|estado de adam|denominador|divisor",
           "normalizador|raíz cuadrada|raiz cuadrada|media móvil de los gradientes al cuadrado",
           # by what it averages: the squares of the gradients
           "mean of the squares|average of the squares|mean square|media de los cuadrados|promedio de los cuadrados")
OPTIMIZER = "adam|adamw|optimizer|optimiser|optimizador"
# not Adam's v: the vocabulary size (ln V), and Adam's first moment (m)
NOT_V = ("ln v|log v|ln of v|first moment|first moments|1st moment|momentum|adam's m|adam m|exp_avg|primer momento"
         "|primeros momentos|momento de primer orden")
# a factor of ten or more: "x3.6" or "x1.0" beside a right diagnosis is a measurement, not an explosion
# ("many times" counts nothing)
TIMES = any_of(r"~[x×][1-9]\d+(?:\.\d+)?|~[1-9]\d+(?:\.\d+)?[x×]|~\d+-?fold|~[1-9]\d+ times|fold|factor|hundredfold",
               r"fiftyfold|fifty|hundred|orders of magnitude|order of magnitude|órdenes de magnitud|by ~[1-9]\d+",
               r"by a factor|~[1-9]\d+ veces|cincuenta|cien|centenar|por ~[1-9]\d+")
EXPLODED = any_of("explode|exploding|explosion|blow up|blew up|blown up|skyrocket|shot up|soar|through the roof",
                  "explotar|explosión|estallar|por las nubes")
SCALING = any_of("scale|scaled up|multiply|multiplied|amplify|magnify|boost|crank|cranked up|turn up|turned up",
                 "inflate|pump|pumped up|escalar|multiplicar|amplificar|inflar")
SCALED_UP = any_of(EXPLODED, SCALING, "blew|volume|knob|balloon|escalado|disparar|dispararon", TIMES)
INFLATED = any_of("corrupt|corrupted|inflate|inflated|multiply|scale|scaled|blow up|blew up|blew|blown|explode",
                  "jump|jumped|grow|grew|went up|rose|rise|increase|bigger|larger|too big|too large|too high|huge",
                  "bloat|swell|balloon|pump|subir|subió",
                  "pumped up|overwrite|overwritten|tamper|poison|garbage|wrong value|spike",
                  "corromper|corrompido|corrupto|inflar|inflado|aumentar|multiplicar|disparar|crecer|creció",
                  "enorme|hinchar|escalar|dañar|estropear|alterar|sobrescribir", TIMES)
# the other way round: what grew in the fault fell
SHRANK = any_of("shrink|shrank|shrunk|divide|divided|fell|fall|drop|dropped|decrease|decreased|reduce|reduced",
                "too small|smaller|lower|vanish|dividir|dividió|encoger|encogió|bajar|bajó|caer|cayó|disminuir",
                "disminuyó|reducir|reducido|menor",
                # a factor the other way: "50x smaller", "cien veces menor"
                r"~[1-9][\d.]*[x×] smaller|~[1-9][\d.]*[x×] lower|~[1-9][\d.]*[x×] less|~[1-9][\d.]*[x×] menor",
                r"~[1-9][\d.]* times smaller|~[1-9][\d.]* times lower|~[1-9][\d.]* times less",
                r"~[1-9][\d.]* veces menor|~[1-9][\d.]* veces más pequeño|~[1-9][\d.]* veces más bajo",
                "hundred times smaller|fifty times smaller|cien veces menor|cincuenta veces menor")
STALL = any_of("stall|stalled|froze|frozen|freeze|barely moved|barely move|stopped moving|stop moving|stuck",
               "tiny|strapped|anchor|brake|ballast|weighed down|dead weight|paralysed",
               "paralyzed|stopped learning|stop learning|no longer learned",
               "estancar|estancado|congelado|frenado|frenar|apenas se movió|dejó de moverse|dejar de moverse",
               "dejó de aprender|detenido|paralizado|ancla|lastre")
TENSOR = any_of("tensor|parameter|param|bias|lm_head.bias|weight|layer|parámetro|sesgo|peso|capa")
# clipping Adam's update (StableAdamW), not the gradient: another cause's fix
UPDATE_CLIP = ("update clipping|update clip|clip updates|clip the updates|clip the update|updates clipping"
               "|recorte de actualizaciones|recorte del update|clipping de updates|clipping del update")
CLIP = any_of("clip|clipping|clipper|zclip|limiter|norm cap|max_grad_norm|grad_clip|clip_grad_norm",
              "gradient clipping|grad clipping|norm clipping|global norm clipping|gradient norm clipping",
              "global clipping|adaptive clipping",
              "recorte|recortar|limitador|tope|recorte de gradiente|recorte del gradiente|recorte de gradientes")
# a config knob is the concept it sets: lr_max is the learning rate
LR = any_of("lr|learning rate|tasa de aprendizaje|tasa|ritmo de aprendizaje|lr_max|lr max|max lr|peak lr|peak_lr",
            "step size|tamaño de paso|tamaño del paso")
# bigger, said of what follows or of what came before ("a more aggressive LR", "un lr más grande")
BIGGER = any_of("higher|larger|bigger|mayor|más alta|más alto|más grande|more aggressive|aggressive|hotter|looser",
                "more lenient|más agresivo|más agresiva|más laxo|más laxa|más suave")
# a change upward, by its verb ("bump", "double", "nudge up", "subir", "duplicar") or a factor above one
RAISE = any_of(BIGGER, "raise|increase|boost|double|triple|crank|crank up|turn up|bump|bump up|nudge up",
               "push up|jack up|scale up|subir|aumentar|incrementar|más alta|más alto|mayor|duplicar|triplicar",
               r"elevar|~[x×][2-9]\d*(?:\.\d+)?|~[x×]1\d+(?:\.\d+)?|~[2-9]\d*(?:\.\d+)?[x×]|~1\d+(?:\.\d+)?[x×]")
LOWER = any_of("lower|reduce|decrease|smaller|cut|drop|halve|bajar|reducir|disminuir")
OFF = any_of("disable|remove|drop|stop|without|quit|deactivate|get rid of|switch off|turn off|shut off|lift|ditch",
             "kill|bypass|strip",
             "desactivar|eliminar|quitar|apagar|sin|suprimir|retirar|sacar|saltarse")
# what a run needs, said to be unneeded: its removal
NOT_NEEDED = any_of("can go|may go|is not needed|isn't needed|not needed|unnecessary|is optional|can be dropped",
                    "can be removed|no hace falta|sobra|innecesario|innecesaria|no es necesario|no es necesaria")
BATCH = any_of("batch|minibatch|mini batch|lote|minilote|mini lote|data|datos|sample|muestra|example|ejemplo")
ROWS = any_of("row|sentence|line|sequence|sample|example|document|text|fila|frase|oración|línea|secuencia",
              "muestra|ejemplo|documento|texto")
COUNT = any_of(r"~\d+|two|three|four|five|six|seven|eight|nine|ten|dozen|several|dos|tres|cuatro|cinco|seis|siete",
               "ocho|nueve|diez|docena|varias|varios")
# training time, not data: "100 steps of the same LR" repeats no row
STEPS = "step|steps|paso|pasos|lr|learning rate|tasa de aprendizaje|iteration|iteración"
# Spanish "repetir" changes its stem (repite, repitió): its forms are written out
REPEATED_ES = "repite|repiten|repitió|repitieron|repitiendo"
DUPLICATED = any_of("duplicate|duplicated|repeat|repeated|copy|copies|rare|uncommon|outlier|corrupt", REPEATED_ES,
                    "corrupted|stuffed|long tail|appeared|occurred|duplicado|repetido|repetir|copia|copiado|raro",
                    "rara|poco común|atípico|atípica|cola larga|aparecía|aparecer")
BAD = any_of("bad|corrupt|corrupted|poisoned|garbage|weird|odd|broken|outlier|anomalous|dirty|faulty|malformed",
             "contaminated|polluted|tainted|contaminado",
             "malo|mala|mal|corrupto|raro|anómalo|atípico|envenenado|sucio|basura|defectuoso")
# "recover" is what a run does by itself, no action: "recover the checkpoint" is said with its object
RESTORE = any_of("reload|reinstate|restore|load|go back|roll back|rollback|rewind|revert|resume|recover from",
                 "recover the|bring back|continue|continuar|seguir|retomar|recargar|restaurar|volver|retroceder",
                 "cargar|reanudar|recuperar el|recuperar la|recuperar los|restablecer|reponer")
CHECKPOINT = any_of("checkpoint|snapshot|punto de control|copia de seguridad|before step|before the spike",
                    r"before the jump|before k|step ~\d+|antes del paso|paso ~\d+", V)
RESET = any_of("reset|reinitialise|reinitialize|reinit|re init|re initialise|re initialize|initialise|initialize",
               "zero|clear|recompute|rebuild|reiniciar|reinicializar|inicializar|poner a cero|borrar|recalcular",
               "resetear|restablecer")
MASK = any_of("mask|masking|causal_mask|máscara|enmascaramiento")
# a "no" before a verb of being negates the clause ("no fue el warmup", "it was not"), it says nothing is missing
NOT_BEING = "no fue|no es|no era|no ha sido|no son|no eran|no fueron|no parece"
# what a measurement is compared with: a run named here is a baseline, not a diagnosis ("~120x the healthy run")
COMPARED = any_of(r"than|vs|versus|compared|relative|baseline|times|over|above|below|under|por encima|por debajo|~[1-9][\d.,]*[x×]|~[x×][1-9][\d.,]*|like|as in",
                  "veces|como|frente|comparado|respecto|la de|el de|las de|los de")
# the loss side of training: a mask near these words is the loss's, not the attention's
LOSS = any_of("loss|pérdida")
# a training curve, and what it did
CURVE = any_of("loss|train loss|training loss|val loss|validation loss|validation|pérdida|grad norm|gradient norm",
               "pre clip norm|norma del gradiente")
MOVED = any_of("spike|spiked|jump|jumped|rose|rise|went up|go up|climb|climbed|fell|fall|drop|dropped|plateau|flat",
               "stall|stalled|recover|recovered|came back|came down|come back|come down|goes from|went from|diverge|diverged|nan|inf|pico|saltó|subió|subir",
               "cayó|bajó|estancó|estancada|plana|meseta|recupera|recuperó|volvió|goes up|going up|triples|doubles",
               "stop improving|stops improving|stopped improving|desploma|desplomó|hunde|hundió|dispara|disparó",
               "sube|baja|no para de subir",
               # sunk below a reference line (a loss far above one at step 0 is the init's sign, not a curve's)
               "far under|far below|well under|well below|muy por debajo")
SPIKE = any_of("spike|spiked|jump|jumped|peak|pico|salto|saltó|saltar")
LOSS_SIDE = "loss|padding|pad|label|labels|pérdida|relleno|etiqueta|etiquetas"
# masks that are not the attention's causal mask: a near miss, not broken_mask
OTHER_MASK = ("loss mask|loss masking|padding mask|pad mask|label mask|target mask|mask in the loss|masking in the loss"
              "|mask of the loss|mask on the loss|máscara de pérdida|máscara de la pérdida|máscara del loss"
              "|máscara en la pérdida|máscara en el loss|máscara de padding|máscara de relleno")
# the warmup by what it does: the LR raised step by step, not raised
RAMP = any_of("linear ramp|linear increase|gradual increase|increase gradually|increase linearly|raise gradually",
              "raise linearly|subida lineal|subida gradual|rampa lineal|aumento gradual|aumento lineal",
              "subir gradualmente|subir linealmente|subirlo poco a poco")
WARMUP = any_of("warmup|warm up|ramp|ramp up|calentamiento|rampa", RAMP)
# a starting point, not a value ("the LR ramps up from 0")
FROM_ZERO = ("from 0|from zero|from ~0|from almost 0|from nearly 0|from near 0|from about 0|from almost zero"
             "|from near zero|desde 0|desde cero|desde casi 0|desde casi cero|desde cerca de 0")
# the loader that serves the data, the same whole batch again, every batch: not rows repeated in one batch
LOADER = ("data loader|dataloader|loader|cargador de datos|cargador|same batch|identical batch|mismo lote|mismo batch"
          "|every batch|all batches|each batch|all the batches|cada lote|todos los lotes|cada batch|todos los batches")
# weights that grew during training, not weights born too large
GREW = "grow|grew|grown|growing|became|become|drift|drifted|crecer|creció|crecieron|volverse|se volvieron"
# the initialisation's scale, not a scaling of the gradients
INIT_TERM = ("init scale|init_scale|initial scale|initialisation scale|initialization scale|escala inicial"
             "|escala de inicialización|escala de init|init std")
INIT = any_of("init|initialisation|initialization|initialise|initialize|init scale|init_scale|initial scale",
              "inicialización|inicializar|escala inicial",
              # the weights as they were drawn, before any step
              "initial weights|starting weights|drawn with|drawn from|sampled with|sampled from|pesos iniciales",
              "valores iniciales|muestreados con")
WEIGHTS = any_of("weight|weights|parameter|parameters|peso|pesos|parámetro|parámetros")
# when: a weight too large from the start, not one that grew during training
AT_START = any_of("init|initial|initially|initialised|initialized|start|started|begin|began|born|step 0|untrained",
                  "from the start|inicial|inicialmente|inicializar|arrancar|empezar|comenzar|desde el principio",
                  "paso 0|nacer|drawn|sampled|muestreado|out of the gate|from the outset|from the get go|de entrada|de arranque")
BIG = any_of("too large|too big|huge|large|big|~scaled|scaled up|enormous|oversized|enorme|grande|demasiado grande",
             "giant|gigantic|massive|gigante|gigantesco|descomunal|wide|too wide|broad|ancha|amplia|excessive",
             "excesivo|excesiva|off the charts|fuera de escala", TIMES)
# the other way round: weights drawn too small
SMALL = any_of("too small|small|smaller|tiny|minuscule|pequeño|pequeños|pequeña|diminuto|minúsculo|demasiado pequeño")
KEEP = any_of("keep|leave|use|add|turn on|switch on|enable|apply|rely on|retain|in place|mantener|usar|activar",
              "dejar|aplicar|conservar|poner|puesto")
# looking at something, which changes nothing by itself
INSPECT = any_of("check|examine|investigate|inspect|audit|look at|look into|review|debug|trace",
                 "revisar|comprobar|verificar|investigar|mirar|examinar|auditar|depurar|rastrear")
FIND = any_of("find|look for|track down|hunt down|hunt|search|locate|fix|buscar|encontrar|localizar|arreglar|corregir",
              INSPECT)
SCALER = any_of("scaling|scale|scaled|multiply|multiplier|reduction|loss scale|loss scaling|knob|amplify",
                "escalar|escaló|multiplicar|amplificar|reducción")
CULPRIT = any_of("bug|source|cause|origin|culprit|whoever|who|causa|error|fallo|origen|culpable|qué|que")
REPAIR = "fix|repair|correct|arreglar|corregir|reparar"
SKIP = any_of("skip|drop|remove|filter|exclude|discard|omit|throw away|throw out|toss|leave out|take out|cut out",
              "ignore|dedupe|deduplicate",
              "saltar|descartar|eliminar|filtrar|quitar|omitir|ignorar|sacar|deduplicar|excluir|desechar|apartar")

# a judgement on what a cause is about ("the learning rate was too low"): the answer puts the fault there
JUDGED = ("too|far too|wrong|broken|bad|incorrect|off|demasiado|mal|malo|mala|incorrecto|incorrecta|erróneo"
          "|errónea|roto|rota|equivocado|equivocada")
# the gradients' clipping, not the gradients: "gradient clipping kicked in" says nothing of their size
NOT_GRAD = SQUARED + ("|gradient clipping|grad clipping|gradient clip|grad clip|clipping de gradiente"
                      "|recorte de gradiente|recorte del gradiente|clipping del gradiente")

# a learner's short forms, read as the word they stand for before stemming ("reload the ckpt", "8 dup rows")
ABBREVIATIONS = {
    "ckpt": "checkpoint", "chkpt": "checkpoint", "ckp": "checkpoint", "ckpts": "checkpoints", "dup": "duplicate",
    "dups": "duplicates", "dupe": "duplicate", "dupes": "duplicates", "dupl": "duplicate", "opt": "optimizer",
    "optim": "optimizer", "params": "parameters", "param": "parameter", "attn": "attention", "seq": "sequence",
    "seqs": "sequences", "tok": "token", "toks": "tokens", "init'd": "initialised", "wu": "warmup",
    "val": "validation",
}
