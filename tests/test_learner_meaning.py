"""The grader reads meaning (lab/learner/meaning.py): agreement with a teacher's labels on learner answers
(tests/data/grader_answers.jsonl: dev parts used while building it, "dev" written before the first grader,
"dev2" written for the stemmed concepts, "dev3", "dev4" and "dev5" written blind by people who never saw the
grader, each scored once and then tuned on (dev5 scored 147/168 on the round-3 grader, no credit where its key
says no), "dev6" a paraphrase stress set in voices unlike the others with adversarial "no" answers (68/76 on its
first score), "dev7" the fourth blind set (96 answers by a teacher who never saw the grader, scored once: 147/192
on the round-3 grader, 157/192 on the round-4 grader with 4 credits where its key says no; ids j01..j96 are that
set's e01..e96), "dev8" a round-5 stress set of harmful changes said mildly, look-alikes in student words and the
right words for the wrong cause (65/72 on its first score, 4 credits where its key says no), "dev9" the fifth
blind set (96 answers by a teacher who never saw the grader, scored once: 159/192 on the round-4 grader with 4
credits where its key says no, 165/192 on the round-5 grader with none; ids m01..m96), "dev10" a round-6 stress
set (33 answers, 19 with a keyed "no": the right mechanism blamed on another cause, look-alikes, harmful changes
beside right fixes; 59/66 on its first score, no credit where its key says no), "dev11" the sixth blind set (96
answers by a teacher who never saw the grader, scored once: 165/192 on the round-5 grader, 169/192 on the round-6
grader, no credit where its key says no; ids q01..q96), "dev12" a round-7 stress set (34 answers, 18 with a keyed
"no": the right mechanism given another cause as its reason, v or the init the wrong way round, harmful changes
beside right fixes; 59/68 on its first score, 2 credits where its key says no); and a held-out part scored once
at the end; docs/learner.md reports them), and the parts of the rule one by one."""
import json
from pathlib import Path

import pytest

from minitrain.lab import learner

ANSWERS = [json.loads(line) for line in (Path(__file__).parent / "data" / "grader_answers.jsonl").read_text().splitlines()]


SPLITS = ("dev", "dev2", "dev3", "dev4", "dev5", "dev6", "dev7", "dev8", "dev9", "dev10", "dev11", "dev12", "held-out")


def judged(row: dict) -> tuple[str, str]:
    return (learner.judge_diagnosis(row["diagnosis"], row["cause"]).verdict,
            learner.judge_remediation(row["remediation"], row["cause"]).verdict)


def test_the_labelled_set_is_what_docs_learner_md_says():
    splits = {s: [r for r in ANSWERS if r["split"] == s] for s in SPLITS}
    assert len(splits["held-out"]) >= 20 and len(splits["dev2"]) >= 40 and len(splits["dev3"]) == len(splits["dev4"]) == 104
    assert len(splits["dev5"]) == 84 and len(splits["dev6"]) >= 30 and len(splits["dev7"]) == 96
    assert len(splits["dev8"]) >= 30 and len(splits["dev9"]) == 96 and len(splits["dev10"]) >= 30
    assert len(splits["dev11"]) == 96 and len(splits["dev12"]) >= 30
    assert sum("no" in (r["expect_diagnosis"], r["expect_remediation"]) for r in splits["dev12"]) >= 12  # adversarial
    assert sum("no" in (r["expect_diagnosis"], r["expect_remediation"]) for r in splits["dev10"]) >= 12  # adversarial
    assert sum("no" in (r["expect_diagnosis"], r["expect_remediation"]) for r in splits["dev8"]) >= 12  # adversarial
    assert sum("no" in (r["expect_diagnosis"], r["expect_remediation"]) for r in splits["dev6"]) >= 10  # adversarial
    assert len({r["id"] for r in ANSWERS}) == len(ANSWERS)
    assert sum(map(len, splits.values())) == len(ANSWERS)
    assert {r["expect_diagnosis"] for r in ANSWERS} | {r["expect_remediation"] for r in ANSWERS} == {"credit", "no", "review"}
    issue = {(r["diagnosis"], r["remediation"]) for r in ANSWERS}  # the examples the issue reported
    assert ("learning rate was too high", "turn gradient clipping off") in issue
    assert any(r["diagnosis"].startswith("the running average of squared gradients for the output bias became a "
                                         "hundred times too big") and r["cause"] == "optimizer_state_corruption"
               for r in ANSWERS)
    # the answers issue 38 reported refused or sent to review
    assert any(r["remediation"] == "Turn the causal (lower-triangular) mask back on for training and retrain from "
               "scratch." and r["cause"] == "broken_mask" and r["expect_remediation"] == "credit" for r in ANSWERS)
    assert any("update RMS fell to ~0.06" in r["diagnosis"] and r["expect_diagnosis"] == "credit" for r in ANSWERS)


# Credit where one teacher's key says "review" and another's credits the same answer: dev5 sends a bare "keep
# clipping" to review (f08) and "dedupe the dataset" alone (f25), where dev credits "Keep clipping at 1.0." (d07)
# and held-out "Deduplicate the training data." (h10); dev9 sends filtering the rows with rare tokens out of the
# corpus to review (m30), where the registry's bad batch is one of repeated or rare rows and filtering them is its
# fix; dev11 sends "deduplicate the training data." to review (q36), as dev5 did. No answer keyed "no" is ever
# credited.
KEYS_THAT_DISAGREE = {"f08", "f25", "m30", "q36"}


@pytest.mark.parametrize("split", SPLITS)
def test_the_grader_agrees_with_the_teacher(split):
    rows = [r for r in ANSWERS if r["split"] == split]
    pairs = [(r["id"], got, want) for r in rows
             for got, want in zip(judged(r), (r["expect_diagnosis"], r["expect_remediation"]))]
    agree = sum(got == want for _, got, want in pairs) / len(pairs)
    credited_no = [i for i, got, want in pairs if got == "credit" and want == "no"]
    credited_review = [i for i, got, want in pairs if got == "credit" and want == "review" and i not in KEYS_THAT_DISAGREE]
    assert agree >= 0.95 and not credited_no and not credited_review, (agree, credited_no, credited_review)


@pytest.mark.parametrize("part,text,cause,verdict,why", [
    ("diagnosis", "It was not the learning rate: the gradients were multiplied by 50.", "gradient_explosion", "credit",
     "and no other cause"),
    ("diagnosis", "no es un lote malo sino una explosión del gradiente", "gradient_explosion", "credit",
     "an exploding gradient"),
    ("diagnosis", "It was not a gradient explosion.", "gradient_explosion", "no", "rules out an exploding gradient"),
    ("diagnosis", "a bad batch or a corrupted optimizer state", "bad_batch", "no", "hedges between"),
    ("diagnosis", "The gradients were multiplied by 50, which inflated Adam's v.", "gradient_explosion", "review",
     "a teacher decides"),
    ("diagnosis", "gradient, explosion", "gradient_explosion", "no", "a list of words"),
    ("diagnosis", "the gradient norm spiked at step 500", "gradient_explosion", "review", "names only a symptom"),
    ("remediation", "Keep clipping on and never turn it off.", "gradient_explosion", "credit",
     "a fix registered for gradient_explosion"),
    ("remediation", "Do not turn clipping off.", "gradient_explosion", "credit", "keeping (adaptive) gradient clipping"),
    ("remediation", "Turn clipping off.", "gradient_explosion", "no", "turning gradient clipping off"),
    ("remediation", "Skip the batch and raise the learning rate.", "bad_batch", "no", "raising the learning rate"),
    ("remediation", "Skip that batch.", "optimizer_state_corruption", "no", "a fix for another cause"),
    ("remediation", "Maybe reload the checkpoint.", "optimizer_state_corruption", "review", "with a hedge"),
    # a mechanism heard in other words: abbreviations, metaphors, Adam's v by its role, Spanish verb forms
    ("diagnosis", "grads scaled x50 at one step", "gradient_explosion", "credit", "the gradients multiplied"),
    ("diagnosis", "someone turned the volume knob on the gradients up fifty-fold", "gradient_explosion", "credit",
     "the gradients multiplied"),
    ("diagnosis", "the denominator under Adam's square root ballooned for one tensor", "optimizer_state_corruption",
     "credit", "Adam's second moment (v) corrupted or inflated"),
    ("diagnosis", "someone strapped weights to the output bias's optimizer: that tensor barely moved",
     "optimizer_state_corruption", "credit", "held back by Adam's second moment"),
    ("diagnosis", "el segundo momento del sesgo se infló cien veces", "optimizer_state_corruption", "credit",
     "corrupted or inflated"),
    ("diagnosis", "v was inflated 100x for the bias, so its update RMS fell to ~0.06", "optimizer_state_corruption",
     "credit", "and no other cause"),
    ("diagnosis", "Adam's v for one tensor under-estimated the squared gradient", "optimizer_state_corruption", "no",
     "second_moment_underestimate"),
    ("remediation", "Leave the limiter in place.", "gradient_explosion", "credit", "keeping (adaptive) gradient clipping"),
    ("remediation", "Re-initialise that tensor's normaliser.", "optimizer_state_corruption", "credit",
     "resetting the tensor's moments"),
    ("remediation", "Re-initialise that tensor's normaliser.", "bad_init", "no", "a fix for another cause"),
    ("remediation", "Turn the causal (lower-triangular) mask back on for training and retrain from scratch.",
     "broken_mask", "credit", "restoring the causal mask"),
    # round 7: the wrong way round in other words, a setting as the fault, what eases a fault without removing it
    ("diagnosis", "Initial weights far too small, so the logits were tiny.", "bad_init", "review", "wrong way round"),
    ("diagnosis", "The learning rate doubled at step 500 and that multiplied the gradients by fifty.",
     "gradient_explosion", "no", "as what followed"),
    ("diagnosis", "something multiplied every gradient by the same ~50", "gradient_explosion", "credit",
     "the gradients multiplied"),
    ("diagnosis", "causal_mask=false during training.", "broken_mask", "credit", "a broken causal mask"),
    ("diagnosis", "Weights too big out of the gate.", "bad_init", "credit", "weights initialised too large"),
    ("diagnosis", "the gradients were blown up x50 at step 500, nothing about the data.", "gradient_explosion",
     "credit", "and no other cause"),
    ("diagnosis", "The loss shoots up early while Adam's moments are still garbage, with no warmup at all.",
     "no_warmup", "credit", "and no other cause"),
    ("remediation", "restablezca la máscara causal y vuelva a entrenar.", "broken_mask", "credit", "restoring the causal mask"),
    ("remediation", "apretar el clipping (grad_clip=0.5) y seguir entrenando.", "bad_batch", "review", "eases"),
    ("remediation", "grad_clip=0.5", "bad_batch", "review", "eases"),
    ("remediation", "bajar beta2 a 0.9 para que v olvide antes.", "optimizer_state_corruption", "review", "eases"),
    ("remediation", "turn on update clipping and lower beta2.", "optimizer_state_corruption", "no", "another cause"),
    ("remediation", "bajar la escala de init a la mitad.", "bad_init", "review", "eases"),
    # what is not Adam's v: its first moment, the vocabulary's ln V
    ("diagnosis", "Adam's first moment was multiplied by 100.", "optimizer_state_corruption", "no", "no failure mode"),
    ("diagnosis", "The step-0 loss is far above ln V.", "optimizer_state_corruption", "no", "no failure mode"),
    # a negation before a later part rules the concept out; a negated harmful fix is no harm
    ("diagnosis", "The gradients were not scaled; the learning rate spiked.", "gradient_explosion", "no", "lr_spike"),
    ("diagnosis", "The second moment was not corrupted.", "optimizer_state_corruption", "no", "rules out"),
    ("remediation", "No quitar nunca el recorte de gradiente.", "gradient_explosion", "credit", "keeping"),
    # a fix is an action on its object, in that order: words of a fix that are not that fix are no fix
    ("remediation", "Drop the batch that clipping flagged.", "gradient_explosion", "no", "a fix for another cause"),
    ("remediation", "Skip the batch at step 500 and resume.", "optimizer_state_corruption", "no", "another cause"),
    ("remediation", "The warmup is missing; use a lower LR.", "no_warmup", "review", "eases no_warmup"),
    ("remediation", "Train the model again from the checkpoint, skipping that batch.", "bad_batch", "credit",
     "skipping or filtering the batch"),
    # the harmful fixes in other words
    ("remediation", "Increase max_grad_norm to 100.", "gradient_explosion", "no", "loosening the clip threshold"),
    ("remediation", "Sube la tasa de aprendizaje.", "optimizer_state_corruption", "no", "raising the learning rate"),
    ("remediation", "Get rid of the warmup.", "no_warmup", "no", "removing the warmup"),
    # a config knob is the concept it sets; its new value is read against the lab's (lr_max 3e-4, grad_clip 1.0)
    ("remediation", "Re-enable clipping at 1.0 and bump lr_max to 6e-4.", "gradient_explosion", "no",
     "raising the learning rate"),
    ("remediation", "Set grad_clip to 100.", "gradient_explosion", "no", "loosening the clip threshold"),
    ("remediation", "Turn clipping back on (grad_clip=1.0).", "gradient_explosion", "credit", "keeping"),
    ("remediation", "Double lr_max and re-enable the causal mask.", "broken_mask", "no", "raising the learning rate"),
    ("remediation", "Keep clipping, and let the learning rate breathe a little more: say 5e-4.", "gradient_explosion",
     "no", "raising the learning rate"),
    ("remediation", "Reload the moments and push beta2 to 0.999.", "optimizer_state_corruption", "no", "raising beta2"),
    ("remediation", "Re-enable the causal mask; the warmup can go.", "broken_mask", "no", "removing the warmup"),
    ("remediation", "Keep clipping on; causal_mask: false is fine.", "gradient_explosion", "no", "removing the mask"),
    # a look-alike by its mechanism names the look-alike; a misspelt word is its word; a verb of ruling out
    ("diagnosis", "The data loader got stuck and served the same row again and again.", "bad_batch", "no",
     "a stuck data loader"),
    ("diagnosis", "The adam 2nd momnet of the bias got inflated 100x.", "optimizer_state_corruption", "credit",
     "corrupted or inflated"),
    ("diagnosis", "Ruled out the bad batch: the gradients were multiplied by 50.", "gradient_explosion", "credit",
     "and no other cause"),
    ("diagnosis", "The gradients at step 500 were 50x smaller.", "gradient_explosion", "review", "the wrong way round"),
    ("remediation", "Init at the standard 0.02 scale and clipping off.", "bad_init", "no",
     "turning gradient clipping off"),
    # two answers offered by their form are a hedge, whatever the other one is
    ("diagnosis", "Either the LR or a bad batch: the loss jumps and comes back.", "bad_batch", "no", "alternatives"),
    ("diagnosis", "O falta el warmup o la inicialización es mala.", "no_warmup", "no", "alternatives"),
    ("diagnosis", "O es la máscara causal o es una fuga de targets.", "broken_mask", "no", "alternatives"),
    ("diagnosis", "It is a bad batch or the learning rate.", "bad_batch", "no", "or the learning rate"),
    ("diagnosis", "Puede ser un lote malo, aunque también podría ser el optimizador.", "bad_batch", "no",
     "or the optimizer"),
    ("diagnosis", "A bad batch, unless it was the learning rate.", "bad_batch", "no", "alternatives"),
    ("diagnosis", "La máscara de atención o el shift de los targets están mal.", "broken_mask", "no", "alternatives"),
    # "could" alone is ability, not doubt
    ("diagnosis", "Training attention was bidirectional: the model could see the future.", "broken_mask", "credit",
     "no other cause"),
    # an indefinite's adjective names nothing; a near miss is not the cause
    ("diagnosis", "Algo raro pasa en el 500 con los datos.", "bad_batch", "review", "only a symptom (the data)"),
    ("diagnosis", "The loss mask is broken: it includes padding tokens.", "broken_mask", "no", "no failure mode"),
    ("diagnosis", "Masking was wrong in the loss.", "broken_mask", "no", "no failure mode"),
    ("diagnosis", "Gradient clipping kicked in many times over the run.", "gradient_explosion", "no", "no failure mode"),
    ("diagnosis", "The model weights started to grow too large around step 300.", "bad_init", "no", "no failure mode"),
    ("diagnosis", "The causal mask wasn't applied during training.", "broken_mask", "credit", "a broken causal mask"),
    ("diagnosis", "Attention was non-causal in training.", "broken_mask", "credit", "see the future"),
    ("diagnosis", "El batch del paso 500 tenía 8 filas idénticas.", "bad_batch", "credit", "repeated or rare rows"),
    ("diagnosis", "The data loader repeated the same batch for several steps.", "bad_batch", "no", "stuck data loader"),
    ("diagnosis", "El lote se repitió durante varios pasos seguidos.", "bad_batch", "no", "stuck data loader"),
    ("diagnosis", "The model was force-fed one sentence eight times in one batch.", "bad_batch", "credit",
     "repeated or rare rows"),
    # a symptom beside a fault put on what another cause is about names that, not the run's cause
    ("diagnosis", "El learning rate es demasiado bajo después del paso 500: el bias se estanca.",
     "optimizer_state_corruption", "no", "puts the fault on the learning rate"),
    ("remediation", "Fix the loss mask so it only marks target tokens.", "broken_mask", "no", "none of the fixes"),
    ("diagnosis", "The model already has the answer in what it sees.", "broken_mask", "review", "only a symptom"),
    # the direction: v shrank is the fault the wrong way round; a small factor is a measurement, not an explosion
    ("diagnosis", "Adam's v for the bias was shrunk at step 500, so it took oversized steps.",
     "optimizer_state_corruption", "review", "the wrong way round"),
    ("diagnosis", "La v de Adam del bias se dividió por 100 en el paso 500.", "optimizer_state_corruption", "review",
     "the wrong way round"),
    ("diagnosis", "Not an explosion: the grad norm only went up ~3.6x. The batch repeats one sentence 8 times.",
     "bad_batch", "credit", "and no other cause"),
    ("diagnosis", "The denominator of Adam for the bias of the LM head blew up 100x.", "optimizer_state_corruption",
     "credit", "corrupted or inflated"),
    # a NaN listed beside the cause is its symptom, not a second cause
    ("diagnosis", "Weights initialised 100x too large: huge logits and NaN within a few steps.", "bad_init", "credit",
     "weights initialised too large"),
    # fixes: another cause's fix, a half measure, keeping the fault, a side question
    ("remediation", "Turn on update clipping (StableAdamW-style) and rerun.", "gradient_explosion", "no",
     "a fix for another cause"),
    ("remediation", "Skip the batch at 500 and lower the LR.", "bad_batch", "review", "and also lowering"),
    ("remediation", "Rewind to the checkpoint before it and drop that batch.", "bad_batch", "credit", "skipping"),
    ("remediation", "Activar la máscara y seguir desde el último checkpoint.", "broken_mask", "review", "resuming"),
    ("remediation", "Keep warmup at 0 but clip harder.", "no_warmup", "no", "keeping the warmup off"),
    ("remediation", "Restaurar beta2=0.95 y fijarlo en el checkpoint.", "optimizer_state_corruption", "no",
     "a fix for another cause"),
    ("remediation", "Ramp the LR up over the first 100 steps.", "no_warmup", "credit", "restoring the warmup"),
    ("remediation", "Fix the init scale (std 0.02) and restart from step 0.", "bad_init", "credit",
     "initialising at the standard scale"),
    ("remediation", "Keep clipping on; find what multiplied the grads (loss scaling?).", "gradient_explosion",
     "credit", "finding what scaled"),
    # "no fix" is an answer where it says why the run recovers; a bare "it recovered" says nothing
    ("remediation", "Nothing to do: the run recovered in one step.", "bad_batch", "no", "says nothing of why"),
    ("remediation", "Nothing to do: that batch is gone after one step and the run recovers.", "bad_batch", "review",
     "recovers by itself"),
    ("remediation", "No fix needed.", "optimizer_state_corruption", "no", "a fix for another cause"),
    # morphology: an irregular Spanish verb's forms are its verb ("se redujo" is reducir: the wrong way round)
    ("diagnosis", "El segundo momento v del bias se redujo en 500, así que sus updates crecieron.", "optimizer_state_corruption", "review",
     "the wrong way round"),
    # a setting is a statement, not a list of words; a verb's particle may come after its object
    ("remediation", "init_scale=1 (std 0.02), bias zero, re-run.", "bad_init", "credit", "standard scale"),
    ("remediation", "Fix the init scale.", "bad_init", "credit", "standard scale"),
    ("remediation", "Switch the causal mask back on and train again from step 0.", "broken_mask", "credit",
     "restoring the causal mask"),
    # "no" before a verb of being negates the clause; a run a measurement is compared with is no diagnosis
    ("diagnosis", "No fue el warmup, sino la inicialización: pesos cien veces más grandes.", "bad_init", "credit",
     "no other cause"),
    ("diagnosis", "Activations ~120x the healthy run: the initialisation is far too large.", "bad_init", "credit",
     "no other cause"),
    ("diagnosis", "The model is healthy.", "bad_init", "no", "a healthy run"),
    # the right cause offered as a maybe beside another is two answers; a maybe after it explains it
    ("diagnosis", "Maybe a bad batch, maybe the gradients were scaled.", "bad_batch", "no", "hedges between"),
    ("diagnosis", "Adam's v was corrupted, maybe because of a bad batch.", "optimizer_state_corruption", "review",
     "a teacher decides"),
    # symptoms several causes share
    ("diagnosis", "La loss da un pico en 500 y se recupera en un paso.", "bad_batch", "review", "loss spike"),
    ("diagnosis", "The loss spiked at step 500 and recovered.", "bad_batch", "review", "only a symptom"),
    ("diagnosis", "The loss went to NaN within the first 20 steps.", "bad_init", "review", "several causes end in"),
    ("diagnosis", "La validación no baja mientras el entrenamiento sí.", "broken_mask", "review", "only a symptom"),
    ("diagnosis", "The loss rose to 9 in the first 100 steps.", "no_warmup", "review", "only a symptom"),
    ("diagnosis", "The loss spiked at step 500 because of the learning rate.", "gradient_explosion", "no",
     "puts the fault on the learning rate"),
    # what clears a concept rules it out; the cause named first is the answer, what follows it its consequence
    ("diagnosis", "The duplicated rows look harmless; the gradients were multiplied by 50.", "bad_batch", "no",
     "not the fault"),
    ("diagnosis", "La máscara causal funcionaba bien; el problema fue el learning rate.", "broken_mask", "no",
     "no failure mode"),
    ("diagnosis", "The gradients were multiplied by 50 and clipping was fine.", "gradient_explosion", "credit",
     "no other cause"),
    ("diagnosis", "The data loader got stuck, so the batch repeated rows.", "bad_batch", "no", "as the cause"),
    ("diagnosis", "Unlike a gradient explosion, here only one tensor's v jumped 100x.", "optimizer_state_corruption",
     "credit", "no other cause"),
    ("diagnosis", "It looks like a gradient explosion at first, but it is Adam's v for the bias inflating 100x.",
     "optimizer_state_corruption", "review", "a teacher decides"),
    ("diagnosis", "The gradients exploded at step 1 because the weights were initialised 100x too large.", "bad_init",
     "review", "a teacher decides"),
    # a direction turned round in any words; a predicate after a clause with its own subject is that subject's
    ("diagnosis", "Adam's v for the bias was divided by 100.", "optimizer_state_corruption", "review",
     "the wrong way round"),
    ("diagnosis", "Adam's v under-estimated g² for the bias, so its updates were too big.",
     "optimizer_state_corruption", "no", "second_moment_underestimate"),
    # a place to look is no second fix; waiting is an answer where the run recovers; a fix says which mask
    ("remediation", "Keep clipping on and check the loss scaling and the reduction (sum vs mean).",
     "gradient_explosion", "credit", "keeping"),
    ("remediation", "Just wait: the bias recovers on its own as v decays.", "optimizer_state_corruption", "review",
     "recovers by itself"),
    ("remediation", "Fix the mask and retrain.", "broken_mask", "review", "without saying"),
    # terse statements, short forms, the warmup by what it does, a count of one thing
    ("diagnosis", "init mal, pesos x100", "bad_init", "credit", "weights initialised too large"),
    ("remediation", "reload ckpt before 500", "optimizer_state_corruption", "credit", "reloading"),
    ("remediation", "Bring back a gradual increase of the LR over the first 100 steps.", "no_warmup", "credit",
     "restoring the warmup"),
    ("diagnosis", "Batch 500 was six helpings of one dish.", "bad_batch", "credit", "repeated or rare rows"),
    # a particle after its object is its verb's ("leave X out" drops X; "leave X off" keeps it off)
    ("remediation", "Turn the warmup back on (100 steps).", "no_warmup", "credit", "restoring the warmup"),
    ("remediation", "Rewind and leave batch 500 out.", "bad_batch", "credit", "skipping"),
    ("remediation", "Turn causal_mask back on and retrain from step 0.", "broken_mask", "credit", "restoring"),
    ("remediation", "Leave the mask off and add dropout.", "broken_mask", "no", "keeping the mask off"),
    ("remediation", "Skip the batch and turn the LR up a bit.", "bad_batch", "no", "raising the learning rate"),
    # a concept is what happened to a thing, not the thing: a schedule, attention, a step, zeroing
    ("diagnosis", "The LR schedule has no warmup ramp.", "no_warmup", "credit", "no other cause"),
    ("diagnosis", "Every position can peek at later tokens through attention, so it scores every time.",
     "broken_mask", "credit", "no other cause"),
    ("diagnosis", "Step 500's batch was eight copies of one sentence.", "bad_batch", "credit", "no other cause"),
    ("remediation", "Poner a cero la v de ese tensor.", "optimizer_state_corruption", "credit", "resetting"),
    ("diagnosis", "I'd guess the optimizer state got corrupted.", "optimizer_state_corruption", "review", "hedge"),
    ("diagnosis", "Parece que la máscara causal no se aplicaba.", "broken_mask", "review", "hedge"),
    # round 6: the norm alone is a sign; a checkpoint alone is a step; a lowering that stops short; the reason given
    ("diagnosis", "The pre-clip gradient norm jumped to 50 times its median.", "gradient_explosion", "review",
     "a gradient-norm spike"),
    ("remediation", "Rewind to the checkpoint at 450 and re-run.", "bad_batch", "review", "a step of a fix"),
    ("remediation", "Lower init_scale to 10.", "bad_init", "review", "still above the lab's"),
    ("remediation", "Raise init_scale to 10.", "bad_init", "no", "raising the init scale"),
    ("remediation", "Add a short warmup of 10 steps.", "no_warmup", "review", "far shorter"),
    ("remediation", "Shorten the warmup.", "no_warmup", "no", "removing the warmup"),
    ("remediation", "causal_mask: true and re-run from step 0.", "broken_mask", "credit", "restoring"),
    ("remediation", "Back to std 0.02 and retrain.", "bad_init", "credit", "standard scale"),
    ("diagnosis", "The gradients went up fifty times because the learning rate spiked.", "gradient_explosion", "no",
     "lr_spike"),
    ("diagnosis", "What I think happened: every gradient was multiplied by 50; the batch's loss was completely "
     "ordinary.", "gradient_explosion", "credit", "no other cause"),
    ("diagnosis", "Each position's attention covers the positions to its right as well.", "broken_mask", "credit",
     "see the future"),
    ("diagnosis", "Every weight starts 100x too large; nothing has trained yet.", "bad_init", "credit",
     "no other cause"),
    # a second fault beside the right cause goes to a teacher; one that follows from it is its effect
    ("diagnosis", "Adam's v was inflated for the bias, and the warmup was too short.", "optimizer_state_corruption",
     "review", "also faults the warmup"),
    ("diagnosis", "Adam's v for the bias was inflated 100x, so its effective learning rate was far too small.",
     "optimizer_state_corruption", "credit", "no other cause"),
])
def test_each_part_is_read_for_what_it_says(part, text, cause, verdict, why):
    judge = learner.judge_diagnosis if part == "diagnosis" else learner.judge_remediation
    got = judge(text, cause)
    assert got.verdict == verdict and why in got.why, got


def test_words_are_compared_by_their_stems_in_both_languages():
    from minitrain.lab.learner.words import same_word, stems, synonyms

    for a, b in (("multiplied", "multiply"), ("multiplicó", "multiplicar"), ("infló", "inflar"),
                 ("normalizer", "normaliser"), ("gradientes", "gradiente"), ("redujo", "reducir"), ("Adam's", "adam")):
        assert any(x == y for x, y in zip(stems(a.lower()), stems(b.lower()))), (a, b)
    assert not any(x == y for x, y in zip(stems("normal"), stems("normaliser")))  # the normaliser is not "normal"
    (x50,), = [p for p in synonyms("~x\\d+") if len(p) == 1]
    assert same_word(x50, "x50") and not same_word(x50, "xx")


@pytest.mark.parametrize("part,text,verdict", [  # docs/learner.md's examples (a cause the lab has no run of)
    ("diagnosis", "the LR was far too high", "credit"),
    ("diagnosis", "la tasa de aprendizaje era demasiado alta", "credit"),
    ("diagnosis", "an excessive learning rate", "credit"),
    ("diagnosis", "the learning rate was too low", "no"),
    ("diagnosis", "the learning rate was not too high", "no"),
    ("diagnosis", "no era la tasa de aprendizaje sino el cargador atascado", "no"),
    ("remediation", "lower the learning rate", "credit"),
    ("remediation", "bajar la tasa de aprendizaje", "credit"),
    ("remediation", "raise the learning rate", "no"),
    ("remediation", "lower the learning rate and never raise the learning rate", "credit"),
    ("diagnosis", "the learning rate for the last layer was far too high", "credit"),
    ("diagnosis", "the LR was too high, or the data", "no"),
    ("diagnosis", "maybe the LR was too high, though it could be the data", "no"),
    ("diagnosis", "o la tasa de aprendizaje era demasiado alta o el cargador se atascó", "no"),
    ("diagnosis", "something odd happened", "no"),
    ("diagnosis", "the learning rate was too high: the loss rose 1.4x", "credit"),
    ("diagnosis", "the learning rate was too high and the run ended in NaN", "credit"),
    ("remediation", "keep the warmup at 0 and lower the learning rate", "no"),
    ("remediation", "lower the learning rate and add z-loss", "review"),
])
def test_the_examples_docs_learner_md_gives(part, text, verdict):
    judge = learner.judge_diagnosis if part == "diagnosis" else learner.judge_remediation
    assert judge(text, "lr_too_high").verdict == verdict


BLIND7 = [json.loads(line) for line in
          (Path(__file__).parent / "data" / "grader_answers_blind7.jsonl").read_text().splitlines()]


def test_the_seventh_blind_set_keeps_its_measured_agreement_and_credits_no_answer_keyed_no():
    """The seventh blind set (96 answers by a teacher who never saw the grader, never tuned on; 53 carry no remediation
    label and were split by hand where their first proposed action starts) scored once: 153/192 on the round-6 grader,
    154/192 (80.2%) on round 7's, no credit where the key says no (docs/learner.md). A floor for later rounds, and the
    hard rule on what its key refuses."""
    pairs = [(r["id"], got, want) for r in BLIND7
             for got, want in zip(judged(r), (r["expect_diagnosis"], r["expect_remediation"]))]
    assert len(pairs) == 192 and sum(got == want for _, got, want in pairs) >= 154
    assert not [i for i, got, want in pairs if got == "credit" and want == "no"]
