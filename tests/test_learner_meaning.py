"""The grader reads meaning (lab/learner/meaning.py): agreement with a teacher's labels on learner answers
written before the grader (tests/data/grader_answers.jsonl: a dev part used while building it, a held-out part
scored once at the end; docs/learner.md reports both), and the parts of the rule one by one."""
import json
from pathlib import Path

import pytest

from minitrain.lab import learner

ANSWERS = [json.loads(line) for line in (Path(__file__).parent / "data" / "grader_answers.jsonl").read_text().splitlines()]


def judged(row: dict) -> tuple[str, str]:
    return (learner.judge_diagnosis(row["diagnosis"], row["cause"]).verdict,
            learner.judge_remediation(row["remediation"], row["cause"]).verdict)


def test_the_labelled_set_is_what_docs_learner_md_says():
    splits = {s: [r for r in ANSWERS if r["split"] == s] for s in ("dev", "held-out")}
    assert len(ANSWERS) >= 60 and len(splits["held-out"]) >= 20 and len(splits["dev"]) + len(splits["held-out"]) == len(ANSWERS)
    assert {r["expect_diagnosis"] for r in ANSWERS} | {r["expect_remediation"] for r in ANSWERS} == {"credit", "no", "review"}
    issue = {(r["diagnosis"], r["remediation"]) for r in ANSWERS}  # the examples the issue reported
    assert ("learning rate was too high", "turn gradient clipping off") in issue
    assert any(r["diagnosis"].startswith("the running average of squared gradients for the output bias became a "
                                         "hundred times too big") and r["cause"] == "optimizer_state_corruption"
               for r in ANSWERS)


@pytest.mark.parametrize("split", ["dev", "held-out"])
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
])
def test_each_part_is_read_for_what_it_says(part, text, cause, verdict, why):
    judge = learner.judge_diagnosis if part == "diagnosis" else learner.judge_remediation
    got = judge(text, cause)
    assert got.verdict == verdict and why in got.why, got
