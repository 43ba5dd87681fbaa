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


@pytest.mark.parametrize("node,cause,diagnosis,remediation,ok,why", [
    ("§4.A", "", WORDS, FIX, True, "from leaf §4.A"),
    ("§4", "", "8 copies of one rare sentence", FIX, True, "your diagnosis sentence"),
    ("§4.1", "bad_batch", WORDS, FIX, True, "on the path above the leaf"),
    ("§4.A", "", "el lote repite una frase rara", "descartar ese lote", True, "from leaf §4.A"),
    ("§1.1", "bad_batch", WORDS, FIX, False, "passes with 'no'"),
    ("§6.A", "", WORDS, FIX, False, "not on the documented path"),
    ("§4.A", "gradient_explosion", WORDS, FIX, False, "cause gradient_explosion"),
    ("§4.1", "", "something odd happened", FIX, False, "add a 'cause:' line"),
    ("§9.9", "", WORDS, FIX, False, "does not exist"),
    ("", "", WORDS, FIX, False, "no node given"),
    # the right node and cause with words that name none of the leaf's key concepts lose the point
    ("§4.A", "", "banana", FIX, False, "your diagnosis names none of the key concepts of §4.A: the batch; "
                                       "duplicated rows or rare tokens"),
    ("§4.A", "bad_batch", WORDS, "banana", False, "your remediation names none of the key concepts of §4.A: "
                                                  "skip or filter the batch"),
])
def test_the_grading_rule(node, cause, diagnosis, remediation, ok, why):
    _, refs = learner.read_reference(learner.LABS["spike"])
    d = learner.Diagnosis("t", "19-injection-B", node, cause, diagnosis, remediation)
    correct, text, _, _ = learner.judge(d, refs["bad_batch"])
    assert correct == ok and why in text, text


def test_a_miss_names_the_node_as_the_tree_words_it():
    _, refs = learner.read_reference(learner.LABS["spike"])
    d = learner.Diagnosis("t", "19-injection-B", "§1.1", "bad_batch", WORDS, FIX)
    assert tree.ITEMS["§1.1"].question in learner.judge(d, refs["bad_batch"])[1]


@pytest.mark.parametrize("lab_key", ["spike", "break-it"])
def test_every_reference_answer_names_its_leafs_key_concepts(lab_key):
    """The reference solutions score full marks under the words rule (the rule is not stricter than the key)."""
    _, refs = learner.read_reference(learner.LABS[lab_key])
    for ref in refs.values():
        d = learner.Diagnosis("t", "run", ref.leaf, "", ref.diagnosis, ref.remediation)
        correct, text, _, _ = learner.judge(d, ref)
        assert correct, (ref.fault, text)
