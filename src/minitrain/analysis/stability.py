"""The stability check: the decision tree a learner walks to name the cause of a spike, and the walker that
walks it over a run's metrics. This module is its public face; the parts live by concern:

    thresholds.py   every number it judges by, once, with where it comes from (course / tuned / exact)
    causes.py       the causes it can name (words, prevention, remedy): one registry
    evidence.py     a run's metrics as arrays and the statistics the checks share (load_evidence)
    checks/         one function per question (and per rule-out), each a Finding
    tree.py         THE tree, as data: sections, questions, leaves
    walk.py         the walk: verdict, `unknown` with the two closest leaves, evidence around the anomaly
    report.py       the verdict as text / diagnosis.json, and stability-check.md generated from the tree

`minitrain stability-md` regenerates stability-check.md (a test fails when it is stale); `minitrain diagnose
RUN` walks the tree.
"""
from __future__ import annotations

from minitrain.analysis.causes import CAUSES, Cause
from minitrain.analysis.checks import Finding, v_threshold
from minitrain.analysis.evidence import Evidence, load_evidence, trailing_median, trailing_median_fast
from minitrain.analysis.report import (DIAGNOSIS_NAME, MD_NAME, format_report, render_markdown, write_diagnosis,
                                       write_markdown)
from minitrain.analysis.thresholds import GN1_HEALTHY, MIN_HISTORY, THRESHOLDS, WINDOW, T
from minitrain.analysis.tree import (ITEMS, ORDER, RULE, SECTIONS, TREE, Leaf, Node, Section, iter_nodes,
                                     next_node)
from minitrain.analysis.walk import compare, confidence, diagnose_run, leaf_evidence, rule_readings, walk

__all__ = ["CAUSES", "Cause", "Finding", "v_threshold", "Evidence", "load_evidence", "trailing_median", "trailing_median_fast",
           "DIAGNOSIS_NAME", "MD_NAME", "format_report", "render_markdown", "write_diagnosis", "write_markdown",
           "GN1_HEALTHY", "MIN_HISTORY", "THRESHOLDS", "WINDOW", "T", "ITEMS", "ORDER", "RULE", "SECTIONS", "TREE",
           "Leaf", "Node", "Section", "iter_nodes", "next_node", "compare", "diagnose_run", "leaf_evidence", "walk",
           "confidence", "rule_readings"]
