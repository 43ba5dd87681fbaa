"""Reading a learner's words (lab/learner/parse.py): the diagnoses file, node ids, the cause a text names."""
import pytest

from minitrain.lab import learner


def test_diagnoses_parser_tolerates_the_learners_formatting():
    text = """# mine
<!-- a comment with node: §9 -->
## Injection A
* **Node:** §4.2 (gradient spike)
* **Diagnosis**: the gradient was scaled
  by a large factor at K.
* Remediation: keep clipping.

### inyección B
- nodo: 4.3
- causa: bad batch
- diagnóstico: 8 copias de una frase rara
- remediación: saltar el batch

## 03
1. run: `experiments/19-blind/03/`
2. node: § 4.4.
3. cause: optimizer_state_corruption
4. diagnosis: v of the LM-head bias inflated
5. remedy: reload the moments
"""
    a, b, c = learner.parse_diagnoses(text)
    assert (a.run, learner.node_key(a.node), a.diagnosis) == (
        "19-injection-A", "§4.2", "the gradient was scaled by a large factor at K.")
    assert a.remediation == "keep clipping." and a.filled()
    assert (b.run, learner.node_key(b.node), b.cause) == ("19-injection-B", "§4.3", "bad batch")
    assert b.remediation == "saltar el batch"
    assert (c.run, learner.node_key(c.node), c.remediation) == ("19-blind/03", "§4.4", "reload the moments")


@pytest.mark.parametrize("text,cause", [
    ("bad_batch", "bad_batch"),
    ("Bad batch", "bad_batch"),
    ("8 copies of one rare sentence concentrate the gradient on rare-token rows", "bad_batch"),
    ("Adam's second moment of the LM-head bias was inflated", "optimizer_state_corruption"),
    ("every gradient was scaled x50 before clipping", "gradient_explosion"),
    ("no warmup: the LR starts at its maximum", "no_warmup"),
    ("weights x100 at init", "bad_init"),
    ("the attention mask lets positions see future tokens", "broken_mask"),
    ("something odd", None),
    ("a bad batch or a corrupted optimizer state", None),  # two causes: ambiguous
])
def test_cause_from_words(text, cause):
    assert learner.cause_from_words(text)[0] == cause

