"""The grader reads meaning (lab/learner/meaning.py): agreement with a teacher's labels on learner answers
(tests/data/grader_answers.jsonl: two dev parts used while building it, "dev" written before the first grader and
"dev2" written for the stemmed concepts, and a held-out part scored once at the end; docs/learner.md reports
them), and the parts of the rule one by one."""
import json
from pathlib import Path

import pytest

from minitrain.lab import learner

ANSWERS = [json.loads(line) for line in (Path(__file__).parent / "data" / "grader_answers.jsonl").read_text().splitlines()]


def judged(row: dict) -> tuple[str, str]:
    return (learner.judge_diagnosis(row["diagnosis"], row["cause"]).verdict,
            learner.judge_remediation(row["remediation"], row["cause"]).verdict)


def test_the_labelled_set_is_what_docs_learner_md_says():
    splits = {s: [r for r in ANSWERS if r["split"] == s] for s in ("dev", "dev2", "held-out")}
    assert len(splits["held-out"]) >= 20 and len(splits["dev2"]) >= 40 and sum(map(len, splits.values())) == len(ANSWERS)
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


@pytest.mark.parametrize("split", ["dev", "dev2", "held-out"])
def test_the_grader_agrees_with_the_teacher(split):
    rows = [r for r in ANSWERS if r["split"] == split]
    pairs = [(got, want) for r in rows for got, want in zip(judged(r), (r["expect_diagnosis"], r["expect_remediation"]))]
    agree = sum(got == want for got, want in pairs) / len(pairs)
    false_credit = [r["id"] for r in rows for got, want in zip(judged(r), (r["expect_diagnosis"], r["expect_remediation"]))
                    if got == "credit" and want != "credit"]
    assert agree >= 0.95 and not false_credit, (agree, false_credit)


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
    ("remediation", "The warmup is missing; use a lower LR.", "no_warmup", "no", "a fix for another cause"),
    ("remediation", "Train the model again from the checkpoint, skipping that batch.", "bad_batch", "credit",
     "skipping or filtering the batch"),
    # the harmful fixes in other words
    ("remediation", "Increase max_grad_norm to 100.", "gradient_explosion", "no", "loosening the clip threshold"),
    ("remediation", "Sube la tasa de aprendizaje.", "optimizer_state_corruption", "no", "raising the learning rate"),
    ("remediation", "Get rid of the warmup.", "no_warmup", "no", "removing the warmup"),
])
def test_each_part_is_read_for_what_it_says(part, text, cause, verdict, why):
    judge = learner.judge_diagnosis if part == "diagnosis" else learner.judge_remediation
    got = judge(text, cause)
    assert got.verdict == verdict and why in got.why, got


def test_words_are_compared_by_their_stems_in_both_languages():
    from minitrain.lab.learner.meaning import same_word, stems, synonyms

    for a, b in (("multiplied", "multiply"), ("multiplicó", "multiplicar"), ("infló", "inflar"),
                 ("normalizer", "normaliser"), ("gradientes", "gradiente"), ("Adam's", "adam")):
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
])
def test_the_examples_docs_learner_md_gives(part, text, verdict):
    judge = learner.judge_diagnosis if part == "diagnosis" else learner.judge_remediation
    assert judge(text, "lr_too_high").verdict == verdict
