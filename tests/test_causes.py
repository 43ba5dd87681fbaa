"""The causes registry (analysis/causes.py): one entry per cause, and everything that names causes agrees."""
import re

from minitrain.analysis import stability
from minitrain.analysis.causes import CAUSES
from minitrain.core.remedy import REGISTRY as REMEDIES


def test_every_leaf_names_a_registered_cause_and_every_cause_has_a_leaf():
    leaf_causes = {it.cause for it in stability.ITEMS.values() if isinstance(it, stability.Leaf)}
    assert leaf_causes <= set(CAUSES)
    assert set(CAUSES) == leaf_causes  # no cause the tree can never name, no leaf outside the registry


def test_every_registered_remedy_answers_a_cause_and_every_cause_names_a_remedy_for_it():
    for name, r in REMEDIES.items():  # a cause may have alternatives (minitrain remediate --remedy NAME)
        assert r.cause in CAUSES, (name, r.cause)
    for c in CAUSES.values():  # the one `minitrain remediate` picks
        assert c.remedy is None or (c.remedy in REMEDIES and REMEDIES[c.remedy].cause == c.name), c.name
        assert c.config_fix is None or re.fullmatch(r"[a-z_0-9]+=[^=]+", c.config_fix), c.name
        assert not (c.remedy and c.config_fix), c.name


def test_every_cause_has_words_and_prevention_and_the_words_compile():
    for c in CAUSES.values():
        assert c.prevention.strip(), c.name
        if c.name != "unknown":
            assert c.words, c.name
        for w in c.words:
            re.compile(w)


def test_lab_modules_read_the_registry():
    from minitrain.lab import learner, postmortem, remediate

    assert learner.CAUSE_WORDS == {c.name: c.words for c in CAUSES.values() if c.words}
    assert set(learner.CAUSES) == set(CAUSES)
    assert not hasattr(postmortem, "PREVENTION") and not hasattr(remediate, "CAUSE_REMEDY")
    assert remediate.fix_for("bad_batch") == "skip_batch" and remediate.fix_for("lr_too_high") == "lr_max=0.0003"
    assert remediate.fix_for("stuck_loader") is None


def test_learner_words_name_exactly_one_new_cause():
    from minitrain.lab.learner import cause_from_words

    for text, cause in (("the data loader was stuck, serving the same batch again for 20 steps", "stuck_loader"),
                        ("a target leak: the inputs contained the targets", "target_leak"),
                        ("the learning rate was too high for the whole run", "lr_too_high"),
                        ("an LR spike at step 600", "lr_spike"),
                        ("8 copies of a rare sentence in one batch", "bad_batch")):
        assert cause_from_words(text)[0] == cause, (text, cause_from_words(text))
