"""The grading rule (lab/learner/grading.py) and the reference solutions (lab/learner/references.py), both read
against the stability tree itself (analysis/tree.py)."""
import dataclasses

import pytest

from minitrain.analysis import tree
from minitrain.lab import learner


# ---------------------------------------------------------------------------------------------------
# The reference solutions stay in sync with the stability tree
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lab_key", ["spike", "break-it"])
def test_reference_node_ids_exist_in_the_tree_and_paths_follow_it(lab_key):
    _, refs = learner.read_reference(learner.LABS[lab_key])
    assert sorted(refs) == sorted(learner.lab_faults(learner.LABS[lab_key]))
    assert learner.check_reference(refs) == []
    for ref in refs.values():  # the reference's cause is the leaf's, read from the tree
        assert isinstance(tree.ITEMS[ref.leaf], tree.Leaf) and tree.ITEMS[ref.leaf].cause == ref.cause
    # the check can fail: a renamed leaf, a wrong cause and an impossible step are all reported
    ref = next(iter(refs.values()))
    broken = {"x": learner.Reference("x", "§9.Z", ref.cause, ref.path[:-1] + ["§9.Z"], "", "", ""),
              "y": learner.Reference("y", ref.leaf, "healthy", ref.path, "", "", ""),
              "z": learner.Reference("z", ref.leaf, ref.cause, [ref.path[0], ref.leaf], "", "", "")}
    problems = " | ".join(learner.check_reference(broken))
    assert "§9.Z does not exist" in problems and "has cause" in problems and "neither its yes nor its no" in problems


def test_accepted_nodes_are_the_turns_toward_the_leaf():
    _, refs = learner.read_reference(learner.LABS["spike"])
    assert learner.accepted_nodes(refs["bad_batch"].path) == ["§4.1", "§4", "§4.A"]
    assert learner.accepted_nodes(refs["v_corrupt"].path) == ["§6.1", "§6.2", "§6", "§6.A"]
    assert learner.accepted_nodes([]) == []


def test_grading_reads_the_live_tree(monkeypatch):
    """No copy of the tree: a question whose "yes" the tree changes is no longer a turn toward the leaf, and
    the reference's path through it is reported."""
    _, refs = learner.read_reference(learner.LABS["spike"])
    monkeypatch.setitem(tree.ITEMS, "§4.1", dataclasses.replace(tree.ITEMS["§4.1"], yes="§4.2"))
    assert "§4.1" not in learner.accepted_nodes(refs["bad_batch"].path)
    problems = learner.check_reference({"bad_batch": refs["bad_batch"]})
    assert problems == ["bad_batch: the path goes from §4.1 to §4.A, which is neither its yes nor its no"]


# ---------------------------------------------------------------------------------------------------
# The grading rule
# ---------------------------------------------------------------------------------------------------

WORDS = "the batch repeats one rare sentence"
FIX = "skip that batch and re-run"


@pytest.mark.parametrize("node,cause,diagnosis,remediation,status,why", [
    ("§4.A", "", WORDS, FIX, "correct", "node ok: §4.A; diagnosis ok: names repeated or rare rows in one batch (bad_batch)"),
    ("§4", "", "8 copies of one rare sentence", FIX, "correct", "a fix registered for bad_batch"),
    ("§4.1", "bad_batch", WORDS, FIX, "correct", "on the path above the leaf"),
    ("§4.A", "", "el lote repite una frase rara", "descartar ese lote", "correct", "and no other cause"),
    ("§1.1", "", WORDS, FIX, "miss", "passes with 'no'"),
    ("§6.A", "", WORDS, FIX, "miss", "not on this run's path"),
    ("§4.A", "gradient_explosion", WORDS, FIX, "miss", "your cause field says gradient_explosion"),
    ("§4.A", "", "the gradients exploded at K", FIX, "miss", "not the fault of this run"),
    ("§4.1", "", "something odd happened", FIX, "miss", "names no failure mode"),
    ("§9.9", "", WORDS, FIX, "miss", "does not exist"),
    ("", "", WORDS, FIX, "miss", "no node given"),
    ("§4.A", "", "batch, duplicates, rare", FIX, "miss", "a list of words, not a sentence"),
    ("§4.A", "", "not a bad batch: the gradients exploded", FIX, "miss", "not the fault of this run"),
    ("§4.A", "", "maybe the batch repeats one rare sentence", FIX, "review", "with a hedge"),
    ("§4.A", "", "probably the data", FIX, "review", "names only a symptom (the data)"),
    # the right node and cause with words that name nothing lose the point; so does a harmful fix
    ("§4.A", "", "banana", FIX, "miss", "diagnosis refused: names no failure mode"),
    ("§4.A", "bad_batch", WORDS, "banana", "miss", "remediation refused: proposes none of the fixes registered"),
    ("§4.A", "", WORDS, "skip it and turn clipping off", "miss", "proposes turning gradient clipping off"),
])
def test_the_grading_rule(node, cause, diagnosis, remediation, status, why):
    _, refs = learner.read_reference(learner.LABS["spike"])
    d = learner.Diagnosis("t", "19-injection-B", node, cause, diagnosis, remediation)
    got, text = learner.judge(d, refs["bad_batch"])
    assert got == status and why in text, text


def test_a_miss_names_the_node_as_the_tree_words_it():
    _, refs = learner.read_reference(learner.LABS["spike"])
    d = learner.Diagnosis("t", "19-injection-B", "§1.1", "", WORDS, FIX)
    assert tree.ITEMS["§1.1"].question in learner.judge(d, refs["bad_batch"])[1]


@pytest.mark.parametrize("lab_key", ["spike", "break-it"])
def test_every_reference_answer_is_credited(lab_key):
    _, refs = learner.read_reference(learner.LABS[lab_key])
    for ref in refs.values():
        d = learner.Diagnosis("t", "", ref.leaf, "", ref.diagnosis, ref.remediation)
        status, text = learner.judge(d, ref)
        assert status == "correct", (ref.fault, text)
