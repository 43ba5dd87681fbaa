"""The learner's side of the lab: a folder of diagnoses written blind, sealed, revealed, graded and checked.

    minitrain learner init NAME   learners/NAME/phase-19/ with spike-diagnoses.md (+ blind-diagnoses.md,
                                  break-it-diagnoses.md for the shuffled labs) and notes/lessons.md
    minitrain reveal NAME         seal the diagnoses (sha256 + UTC time), then show the reference solutions
                                  completed with numbers measured on the learner's own runs
    minitrain grade NAME          correct diagnoses / 3, each point given or refused with its reason, ambiguous
                                  answers counted apart for a teacher's review, edits after the seal flagged
    minitrain check NAME          the lab's Definition of Done and stop condition, one line each

Three labs share the procedure (`--lab`):

    spike     the lab itself: experiments/19-injection-{A,B,C}  reference solutions/04-spike-injection-ref.md
    blind     the same injections shuffled: experiments/19-blind/01..03        (same reference)
    break-it  the companion lab shuffled: experiments/19-break-it/01..03   reference solutions/02-break-it-ref.md

One job per module, in the order a learner meets them:

    labs.py        the three labs, and which of a lab's runs carries which fault
    workspace.py   the learner's folder: names, templates, init
    parse.py       the learner's words: the diagnoses file, node ids, the cause a text names
    meaning.py     what a sentence says: the causes it names (negations understood), the fixes it proposes
    references.py  the reference solutions, read against the stability tree (analysis/tree.py)
    seal.py        the seal and the hash-chained reveal history
    revealing.py   reveal: seal, open the lab, show the solutions with the learner's own numbers
    grading.py     grade: the grading rule (in its docstring) and the grade report
    done.py        check: the Definition of Done, the hook's no-op checked by a short run with and without it

The names other modules use are imported here: `from minitrain.lab.learner import grade, check`.
"""
from __future__ import annotations

from minitrain.lab.learner.done import HOOK_RUN, check, hook_is_noop, new_lesson_lines
from minitrain.lab.learner.grading import Grade, Verdict, grade, grade_report, grade_text, judge, judge_node
from minitrain.lab.learner.meaning import Point, causes_named, judge_diagnosis, judge_remediation
from minitrain.lab.learner.labs import (LABS, PHASE, REPO_ROOT, Lab, blind_folder, expected_runs, fault_of,
                                        lab_faults, spike_run_id)
from minitrain.lab.learner.parse import (CAUSE_WORDS, CAUSES, Diagnosis, cause_from_words, node_key,
                                         parse_diagnoses)
from minitrain.lab.learner.references import Reference, accepted_nodes, check_reference, read_reference
from minitrain.lab.learner.revealing import reveal, walk
from minitrain.lab.learner.seal import HISTORY_NAME, read_history, read_seal, sha256_text
from minitrain.lab.learner.workspace import LESSONS_TEMPLATE, check_name, init_learner
from minitrain.core.course import LAB_LETTERS

__all__ = ["HOOK_RUN", "check", "hook_is_noop", "new_lesson_lines", "Grade", "Verdict", "grade",
           "grade_report", "grade_text", "judge", "judge_node", "Point", "causes_named", "judge_diagnosis",
           "judge_remediation", "LABS", "PHASE", "REPO_ROOT", "Lab", "blind_folder",
           "expected_runs", "fault_of", "lab_faults", "spike_run_id", "CAUSE_WORDS", "CAUSES", "Diagnosis",
           "cause_from_words", "node_key", "parse_diagnoses", "Reference", "accepted_nodes", "check_reference",
           "read_reference", "reveal", "walk", "HISTORY_NAME", "read_history", "read_seal", "sha256_text",
           "LESSONS_TEMPLATE", "check_name", "init_learner", "LAB_LETTERS"]
