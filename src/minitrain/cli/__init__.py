"""The `minitrain` command, declared as a table of commands.

Each sub-command is a `Command` (cli/command.py): the name, the one-line help of `minitrain --help`, the
description of `minitrain NAME --help`, its arguments and its handler `cmd_NAME(args) -> exit code`. The handlers
sit in the modules of this package by job (runs, sweeps, reports, pages, learner); each reads its arguments and
calls one function of the layer below. `COMMANDS` at the end is the table: the order `minitrain --help` lists
them in. `build_parser` only turns the table into argparse parsers.

Errors a user can cause end as one line on stderr and exit code 2 (see minitrain.core.errors.UserError).
--help imports neither torch nor the training code: each handler imports what it runs.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys

from minitrain.cli import learner, pages, reports, runs, sweeps
from minitrain.cli.command import AGAIN, Arg, Command, Parser, add_commands
from minitrain.core import hints
from minitrain.core.errors import EXIT_USER_ERROR, UserError
from minitrain.core.course import LAB_K, LAB_SEED

# A process that imported torch spends ~0.45 CPU s of its exit in the cyclic garbage collector, run again and
# again over ~170,000 objects while the interpreter tears its modules down (docs/benchmarks.md). Frozen at
# the first atexit call, they are freed by reference counting as before and only never scanned for cycles:
# every file is closed by its own `with` before then.
atexit.register(gc.freeze)

LAB_NAMES = ("spike", "blind", "break-it")  # the keys of learner.LABS (kept here so --help needs no torch)

# Arguments several commands share.
SPOIL = Arg("--spoil", action="store_true",
            help="run it on a run of a learner lab that is not revealed yet (19-injection-A/B/C, 19-blind/NN, "
                 "19-break-it/NN): without it such a run is refused so the answer is not given away; with it the "
                 "spoil is logged in the lab folder's SPOILED.json and grade and check show it")
NO_PROGRESS = Arg("--no-progress", action="store_true", help="no progress bar (e.g. when the output is a log file)")
RAY = Arg("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
          help="run on a Ray cluster (pip install 'minitrain[ray]'): at ADDRESS (auto, HOST:PORT, ray://HOST:PORT), "
               "or without one on a local cluster started for this command; the experiments folder must be on a "
               "filesystem every node shares (docs/scale.md)")
INJECTIONS_HELP = ("none (no fault), one of the lab's scale | bad_batch | v_corrupt, or another injection "
                   "'minitrain config' lists")
LEARNER_NAME = Arg("name", metavar="NAME", help="the learner's name, as given to 'minitrain learner init'")
LEARNER_LAB = (  # which lab and where its files are: reveal, grade and check read the same ones
    Arg("--lab", choices=LAB_NAMES, default="spike",
        help="spike (19-injection-A/B/C, default), blind (19-blind/01..03) or break-it (19-break-it/01..03)"),
    Arg("--learners", default="learners", metavar="DIR", help="where learner folders live (default learners)"),
    Arg("--experiments", default="experiments", metavar="DIR", help="where the runs live (default experiments)"),
    Arg("--solutions", metavar="DIR", help="reference solutions folder (default: the repository's)"))

# What to run after Ctrl-C, for the commands that leave something to continue.
AGAIN_RUNS = "run the same command again: finished runs are kept, the others continue from their last checkpoint"

TRAIN = Command(
    "train", "train one run into a run folder (or resume one)",
    "Train the mini-GPT into a run folder: manifest.json, config.yaml, metrics.jsonl (one row per step), "
    "checkpoints/, results.json. An injection run forks from a sibling run that differs only in its injection "
    "settings, instead of recomputing steps 0..K-1.",
    (Arg("--out", metavar="DIR", help="run folder to create (refused if it holds a run, unless --force)"),
     Arg("--config", metavar="FILE", help="YAML file of config fields (see 'minitrain config')"),
     Arg("--seed", type=str, help="seed for init and batch order (default 42)"),
     Arg("--steps", type=str, help="number of training steps (default 2000)"),
     Arg("--injection", metavar="NAME", help=f"the fault to inject at step K: {INJECTIONS_HELP} (default none)"),
     Arg("--injection-step", dest="injection_step", metavar="K",
         help="step at which to inject (default 500)"),
     Arg("--set", action="append", metavar="KEY=VALUE",
         help="override any config field, repeatable (e.g. --set injection_factor=0.01)"),
     Arg("--force", action="store_true", help="replace an existing run folder (only a minitrain run, never the "
                                              "current folder or one holding a git repository; refused while "
                                              "another process writes it, or while it holds files minitrain "
                                              "did not write)"),
     Arg("--resume", metavar="DIR", help="continue a stopped or killed run from its last checkpoint (verified by "
                                         "sha256); same bytes as an uninterrupted run"),
     Arg("--no-fork", action="store_true", help="recompute steps 0..K-1 even if a baseline can be forked"),
     NO_PROGRESS,
     Arg("--preset", metavar="NAME", help="course | medium | gpt2-small-shaped | pretraining-like: a named set of "
                                         "model/corpus/clipping defaults (default course); --set still overrides"),
     Arg("--device", metavar="DEV", help="cpu (default) | cuda | auto (cuda when available); with --resume: "
                                         "continue on this device"),
     Arg("--precision", metavar="P", help="fp32 (default) | bf16 (autocast, GPU only)")),
    runs.cmd_train, interrupted="resume with 'minitrain train --resume DIR'", distributed=True)


LAB_RUN = Command(
    "lab-run", "one lab run, named as the lab names it (used by 'just phase-18-train' and 'phase-19-train')",
    "Train one run of the spike-injection lab into EXPERIMENTS/18-baseline or EXPERIMENTS/19-injection-{A,B,C}. "
    "A finished run with the same config is left alone (up to date).",
    (Arg("--from-env", action="store_true", help="read the lab's shell variables seed, injection, injection_step "
                                                 "(unset ones take the defaults below)"),
     Arg("--seed", type=int, default=LAB_SEED,
         help=f"seed for init and batch order (default {LAB_SEED})"),
     Arg("--injection", default="none", metavar="NAME",
         help=f"the fault to inject at step K: {INJECTIONS_HELP} (default none: the baseline)"),
     Arg("--injection-step", dest="injection_step", type=int, default=LAB_K, metavar="K",
         help=f"the step at which to inject (default {LAB_K})"),
     Arg("--experiments", default="experiments", metavar="DIR", help="where runs land (default experiments)"),
     Arg("--set", action="append", metavar="KEY=VALUE", help="override a config field, repeatable"),
     Arg("--force", action="store_true", help="re-run even if the run is up to date"),
     NO_PROGRESS,
     Arg("--no-index", action="store_true",
         help="do not rewrite EXPERIMENTS/index.html ('minitrain lab' writes it once after all four runs)")),
    runs.cmd_lab_run, interrupted=AGAIN_RUNS)


LAB = Command(
    "lab", "the lab's four runs: baseline + injections A, B, C forked at K, in parallel",
    "Train EXPERIMENTS/18-baseline and, from its checkpoint at K, the three injection runs "
    "19-injection-{A,B,C}, one process per core, with one progress line per run. Up-to-date runs are left "
    "alone. The same bytes as running 'minitrain lab-run' four times in a row. Then writes index.html and says "
    "where the runs are and what to do next; the expected-vs-observed report (lab-report.md) is printed here only "
    "once the lab is revealed ('minitrain reveal NAME' shows it).",
    (Arg("--seed", type=int, default=LAB_SEED,
         help=f"seed for init and batch order of all four runs (default {LAB_SEED})"),
     Arg("--injection-step", dest="injection_step", type=int, default=LAB_K, metavar="K",
         help=f"the step at which A, B and C inject and fork from the baseline (default {LAB_K})"),
     Arg("--experiments", default="experiments", metavar="DIR", help="where runs land (default experiments)"),
     Arg("--jobs", type=int, default=None, metavar="N", help="runs at a time (default: one per core)"),
     Arg("--set", action="append", metavar="KEY=VALUE", help="override a config field of every run, repeatable"),
     Arg("--force", action="store_true", help="re-run even the runs that are up to date"),
     RAY,
     Arg("--no-report", action="store_true",
         help="do not write and print EXPERIMENTS/lab-report.md at the end (it is never written before the "
              "reveal)")),
    runs.cmd_lab, interrupted=AGAIN_RUNS)


CORPUS = Command(
    "corpus", "show (or write) the generated corpus, its split and its long tail",
    "Generate the verb-grammar corpus, print its split, the n-gram baseline and each token of the lab's rare "
    "sentence with its training-split count.",
    (Arg("--out", metavar="DIR", help="also write train.jsonl, val.jsonl, data_manifest.json here"),
     Arg("--sentence", action="append", help="report the tokens of this sentence (repeatable; default: the "
                                             "config's injection_sentence)"),
     Arg("--rare", action="store_true", help="list rare sentences usable as injection_sentence"),
     Arg("--set", action="append", metavar="KEY=VALUE", help="override a config field (e.g. --set corpus_seed=7), "
                                                              "repeatable")),
    runs.cmd_corpus)


CONFIG = Command(
    "config", "print every config field with its default",
    "Print the default config as YAML: every key --set accepts, then one line per injection.",
    (Arg("--preset", metavar="NAME",
         help="show this preset's config (course | medium | gpt2-small-shaped | pretraining-like)"),),
    runs.cmd_config)


SIGNATURE = Command(
    "signature", "measure what an injection did, against its baseline (signature.json)",
    "Write RUN/signature.json: loss at K, largest excess over the baseline, pre/post-clip norm ratios, recovery "
    "time, and the lab's predictions marked holds / does not hold. The baseline is the sibling run with the same "
    "config and no injection, unless --baseline names one.",
    (Arg("run", metavar="RUN", help="an injection run folder, e.g. experiments/19-injection-A"),
     Arg("--baseline", metavar="RUN", help="the run without the injection to measure against (default: found "
                                           "beside RUN)"),
     SPOIL),
    reports.cmd_signature)


REPORT = Command(
    "report", "the lab report: expected vs observed for every injection run",
    "Write EXPERIMENTS/lab-report.md (and each run's signature.json): measured values per injection next to the "
    "lab text's predictions.",
    (Arg("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
         help="folder holding 18-baseline and 19-injection-* (default experiments)"),
     SPOIL),
    reports.cmd_report)


EXPLORE = Command(
    "explore", "the regime map: where each of the lab's 10 predictions holds",
    "Sweep the settings that decide whether the lab's predictions can hold (clip threshold relative to the "
    "healthy run's own norm, injection magnitude, C's target tensor, learning rate, batch size): each cell is an "
    "injection at K=500 forked from its trunk's baseline. Judges every prediction with the lab report's "
    "definitions; writes EXPERIMENTS/explore/index.html (a heat map per prediction), cells.json and regimes.md. "
    "Runs are cached by config hash: a re-run trains only new cells. Default grid: 70 cells; --quick: 16.",
    (Arg("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
         help="the map goes to EXPERIMENTS/explore/ (default: experiments)"),
     Arg("--quick", action="store_true", help="the small grid: the lab's own injections at four clip thresholds "
                                              "(16 cells, a few minutes)"),
     Arg("--jobs", type=int, default=None, metavar="N", help="worker processes, one run each (default: one per "
                                                             "CPU core)"),
     Arg("--set", action="append", metavar="KEY=VALUE",
         help="a config override for every run (e.g. seed=7); the grid's own fields are refused"),
     Arg("--doc", metavar="PATH", help="also write the doc there (e.g. docs/regimes.md)"),
     RAY),
    sweeps.cmd_explore)


DASHBOARD = Command(
    "dashboard", "write a run's self-contained dashboard.html (no network needed)",
    "Write RUN/dashboard.html: one static, offline page (uPlot inlined) with the panels numbered as "
    "stability-check.md cites them, sharing the step axis (drag or wheel to zoom, shift+drag to pan), a tooltip "
    "with the values at the cursor, legend entries that hide/show a series, a smoothing slider, PNG/CSV export per "
    "panel, the runs on the page chosen in the page, the health summary, every question of the stability check "
    "measured on the run (none of it while a lab run is sealed: the reveal writes it in) and the manifest. An injection run is "
    "overlaid with its baseline when one exists. Also written at the end of every run.",
    (Arg("run", metavar="RUN", help="run folder, e.g. experiments/19-injection-B"),
     Arg("--baseline", metavar="RUN", help="overlay this run and plot the difference (default: the clean run "
                                           "found beside RUN, if any)"),
     Arg("--no-baseline", action="store_true", help="do not look for a baseline run"),
     Arg("--compare", action="append", metavar="RUN",
         help="also draw this run on every panel it has data for (and its difference to the baseline); repeatable"),
     Arg("--out", metavar="FILE", help="where to write the page (default RUN/dashboard.html)")),
    pages.cmd_dashboard)


EXPORT = Command(
    "export", "write a run as TensorBoard event files (needs minitrain[tensorboard])",
    "Write RUN's metrics as TensorBoard event files under DIR/<run name>/: the scalars (loss, lr, pre/post-clip "
    "gradient norm, activations, logits, batch composition), every per-tensor statistic under one tag group per "
    "tensor, and the injection, spike-detector and diagnosis steps as text. Point 'tensorboard --logdir DIR' at "
    "it beside your other runs.",
    (Arg("run", metavar="RUN", help="run folder (minitrain train, a lab run or a probe run)"),
     Arg("--tensorboard", required=True, metavar="DIR", help="TensorBoard log folder to write into"),
     Arg("--force", action="store_true", help="replace this run's events already in DIR"),
     SPOIL),
    pages.cmd_export)


INDEX = Command(
    "index", "write EXPERIMENTS/index.html linking every run with a one-line summary",
    "Write EXPERIMENTS/index.html: one line per run folder found at any depth (status, injection, final "
    "validation loss vs the n-gram baseline, the stability check's verdict or 'sealed' before a lab's reveal) "
    "linking its dashboard. Every command that writes a run rebuilds it.",
    (Arg("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
         help="folder holding the run folders (default experiments)"),),
    pages.cmd_index)


DIAGNOSE = Command(
    "diagnose", "walk the stability check over a run's metrics and name the cause",
    "Walk stability-check.md from §1 over RUN/metrics.jsonl alone (never the injection settings, the metrics' "
    "'injected' field or the folder name): each node with its measured value and threshold, then the first leaf "
    "reached, its diagnosis, remediation and evidence steps.",
    (Arg("run", metavar="RUN", help="run folder, e.g. experiments/19-injection-A"),
     Arg("--baseline", metavar="RUN", help="also report difference curves against this run"),
     Arg("--json", action="store_true", help="print one JSON object instead of the report"),
     Arg("--write", action="store_true", help="also write RUN/diagnosis.json (the dashboard shows it)"),
     SPOIL),
    reports.cmd_diagnose)


STABILITY_MD = Command(
    "stability-md", "regenerate stability-check.md from the tree in analysis/tree.py",
    "Write ROOT/stability-check.md from the decision tree defined in src/minitrain/analysis/tree.py (rendered by "
    "src/minitrain/analysis/report.py); --check only tells whether it is stale.",
    (Arg("--root", default=".", metavar="DIR", help="repository root (default: current folder)"),
     Arg("--check", action="store_true", help="exit 2 if the file is stale, write nothing")),
    reports.cmd_stability_md)


LEARNER = Command(
    "learner", "create a learner's folder: learners/NAME/phase-19/",
    "Create learners/NAME/phase-19/ with spike-diagnoses.md (one section per run: run, node, cause, diagnosis, "
    "remediation), the same for the blind and break-it labs, and notes/lessons.md. Refuses an existing folder.",
    actions=(Command(
        "init", "create learners/NAME/phase-19/ with a diagnoses file per lab",
        "Create DIR/NAME/phase-19/ (DIR: --learners) with one diagnoses file per lab (spike, blind, break-it) "
        "and notes/lessons.md, then say what to do next. Refuses an existing folder.",
        (Arg("name", metavar="NAME", help="letters, digits, '-' or '_' (no slashes or dots)"),
         Arg("--learners", default="learners", metavar="DIR", help="where learner folders live (default learners)")),
        learner.cmd_learner),))


REVEAL = Command(
    "reveal", "seal NAME's diagnoses, then show the reference solutions",
    "Seal learners/NAME/phase-19/<lab>-diagnoses.md (sha256 + UTC time, written to a .seal.json beside it) and "
    "only then print the reference solutions, completed with numbers measured on NAME's own runs. Refuses to "
    "seal a file with unfilled sections unless --force.",
    (LEARNER_NAME, *LEARNER_LAB,
     Arg("--force", action="store_true", help="seal and reveal even with unfilled sections")),
    learner.cmd_reveal)


GRADE = Command(
    "grade", "score NAME's sealed diagnoses out of 3, explaining each point",
    "Score the sealed diagnoses: correct when the node is on the reference's documented path to the correct leaf, "
    "the diagnosis names the run's failure mode and no other cause, and the remediation a fix registered for it "
    "and nothing harmful (see docs/learner.md); ambiguous answers are counted apart for a teacher's review. Flags "
    "a diagnoses file edited after the seal, a seal made after a reveal, and answers seen with --spoil before it.",
    (LEARNER_NAME, *LEARNER_LAB),
    learner.cmd_grade)


CHECK = Command(
    "check", "the lab's Definition of Done and stop condition, one line each",
    "Check, one line each: the maybe_inject hook is a no-op by default (a 4-step run with injection none writes "
    "the same metrics bytes with the hook and with it taken out of the loop), the three runs exist with "
    "manifests, diagnoses filled in and sealed before the reveal, 3/3 correct, three new lines in "
    "notes/lessons.md. Exit 0 when all hold, 1 otherwise.",
    (LEARNER_NAME, *LEARNER_LAB),
    learner.cmd_check)


POSTMORTEM = Command(
    "postmortem", "fill the post-mortem template from a run's evidence",
    "Fill theory/04-loss-spike-postmortem-template.md from RUN's metrics, manifest, results, the stability "
    "walker and the baseline, into RUN/postmortem.md (or --out) for you to edit. Never overwrites an existing "
    "file without --force.",
    (Arg("run", metavar="RUN", help="the run to write up, e.g. experiments/19-injection-B"),
     Arg("--baseline", metavar="RUN", help="the run to measure against (default: the run it forked from, or a "
                                           "clean run with the same config beside it or in --experiments)"),
     Arg("--out", metavar="FILE", help="where to write it (default RUN/postmortem.md)"),
     Arg("--experiments", default="experiments", metavar="DIR",
         help="also look for the baseline here (default experiments)"),
     Arg("--force", action="store_true", help="overwrite an existing post-mortem (your edits in it are lost)"),
     SPOIL),
    reports.cmd_postmortem)


BLIND_RUNS = Command(
    "blind-runs", "train a shuffled, sealed lab: spike -> 19-blind, break-it -> 19-break-it",
    "Draw which fault each of 01, 02, 03 carries (sealed: only a salted hash is published in SEALED.json until "
    "the reveal), then train the runs in folder order with blind=true, so names, manifests, config.yaml, metrics "
    "and dashboards do not say which is which. An existing sealed lab is reused; --force draws a new one.",
    (Arg("lab", choices=["spike", "break-it"], help="spike: the lab's three injections, shuffled, into "
                                                    "EXPERIMENTS/19-blind; break-it: three config mistakes (bad init, "
                                                    "no warmup, broken causal mask) into EXPERIMENTS/19-break-it"),
     Arg("--run", choices=["01", "02", "03"], help="train only this run (the sealed draw is made if needed)"),
     Arg("--random", default="0", metavar="0|1", help="1: draw K and the magnitude per run too (spike)"),
     Arg("--experiments", default="experiments", metavar="DIR", help="where the lab's folder goes (default "
                                                                     "experiments)"),
     Arg("--set", action="append", metavar="KEY=VALUE", help="override a config field of every run, repeatable"),
     Arg("--force", action="store_true", help="draw a new lab (or, with --run, re-train that run)"),
     NO_PROGRESS),
    learner.cmd_blind_runs)


REMEDIATE = Command(
    "remediate", "re-run RUN from before its anomaly with the leaf's remedy, walk again",
    "Walk RUN with the stability check, re-run it from the last checkpoint before the anomaly with the leaf's "
    "registered remedy (skip_batch, restore_moments, zclip; config fixes re-run from step 0) into "
    "RUN-remediated, walk that again, and write one dashboard of the remediated run against the original and the "
    "baseline. Numbers go to RUN-remediated/remediation.json. The same command again continues an interrupted "
    "remediation from its last checkpoint (or reuses one that has ended).",
    (Arg("run", metavar="RUN", help="the run to remediate, e.g. experiments/19-injection-A"),
     Arg("--remedy", metavar="NAME", help="override the leaf's remedy (skip_batch, restore_moments, zclip)"),
     Arg("--baseline", metavar="RUN", help="the clean run to measure both against (default: found beside RUN)"),
     Arg("--force", action="store_true", help="replace an existing RUN-remediated"),
     Arg("--spoil", action="store_true", help="remediate a run of a learner lab that is not revealed yet (the "
         "remedy it picks names the cause; logged, and grade and check show it)")),
    learner.cmd_remediate)


IMPORT = Command(
    "import", "make a run folder from another trainer's TensorBoard events or CSV / JSONL history",
    "Write RUN from a run made elsewhere: a TensorBoard log folder or events file (read with tensorboard's own "
    "event reader; a parent folder with one run below it, as HF's runs/), HF's trainer_state.json, nanoGPT's "
    "printed log, a CSV history (W&B's export, Lightning's CSVLogger) or a JSONL history (nanoGPT's wandb.log "
    "dicts). The usual tag names of the training loss, learning rate, gradient norm and validation loss are "
    "recognised; --map TAG=SIGNAL maps any other. Then 'minitrain diagnose RUN' walks the stability check on it, "
    "answering 'not measured' where a question reads what the source does not hold (docs/probe.md).",
    (Arg("source", metavar="SOURCE", help="TensorBoard log folder or events file, trainer_state.json, printed log, .csv or .jsonl"),
     Arg("--out", required=True, metavar="RUN", help="run folder to write"),
     Arg("--map", action="append", metavar="TAG=SIGNAL",
         help="map a source tag to loss | lr | grad_norm | val_loss | grad_norm_clipped | logit_max; repeatable"),
     Arg("--vocab-size", type=int, metavar="V", help="the model's vocabulary size (the walker's ln V at step 0; "
                                                     "default: HF's config.json beside the log, else unknown and "
                                                     "the checks that need it are not testable)"),
     Arg("--batch-size", type=int, metavar="B", help="sequences per optimizer step (the bad-batch check's unit; "
                                                     "default: trainer_state.json's, else unknown)"),
     Arg("--log-every", type=int, metavar="N", help="steps between logged rows (default: trainer_state.json's "
                                                    "logging_steps, else the logged steps' spacing)"),
     Arg("--force", action="store_true", help="replace RUN when it already holds a run")),
    pages.cmd_import)


SERVE = Command(
    "serve", "serve the runs table and every run's dashboard live on a local port (Ctrl-C stops it)",
    "Serve EXPERIMENTS on http://127.0.0.1:PORT/: the runs table (sortable, filterable; tick runs to compare them "
    "on one dashboard) with live step counts, and each run's dashboard, whose curves follow a run still training "
    "within a second or two of each new row. Sealed lab runs stay sealed. Only pages and images under EXPERIMENTS "
    "are served.",
    (Arg("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
         help="folder holding the run folders (default experiments); a run folder serves its parent, opening "
              "that run's page"),
     Arg("--port", type=int, default=8000, help="port to listen on (default 8000; 0 = any free port)"),
     Arg("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")),
    pages.cmd_serve)


EXPLAIN = Command(
    "explain", "prove a diagnosis by replay: counterfactuals from the checkpoint before the anomaly",
    "From the last kept checkpoint at or before step S (default: the walker's anomaly step) replay RUN's "
    "counterfactuals to S+20: the identical replay (it must give the recorded rows bit for bit), the batch at S "
    "swapped for another of the same data order, the batches of the 3 steps before swapped, Adam's state of an "
    "earlier checkpoint put back, the leaf's remedy, clipping off/on where the leaf involves clipping. Prints "
    "whether the anomaly at S is still there in each and the conclusion (data-driven, state-driven, the "
    "remedy removes it), and adds them to RUN/diagnosis.json and the page. Replays live in RUN/explain/ (cached).",
    (Arg("run", metavar="RUN", help="run folder, e.g. experiments/19-injection-B"),
     Arg("--step", type=int, metavar="S", help="the step to explain (default: the walker's anomaly step)"),
     Arg("--jobs", type=int, metavar="N", help="replays at a time (default: one per core)"),
     Arg("--json", action="store_true", help="print the report as one JSON object"),
     Arg("--spoil", action="store_true", help="explain a run of a learner lab that is not revealed yet")),
    sweeps.cmd_explain)


REPRODUCE = Command(
    "reproduce", "find the registered perturbation (kind, step, magnitude) that turns BASE into RUN",
    "Search the registered injections for the one whose metrics best match RUN's: every kind at its default "
    "magnitude at the step where RUN first differs from BASE (and the step before), forked from BASE's "
    "checkpoint and cut 10 steps later; then the two best kinds over their magnitude grids, cut --window steps "
    "later. Prints the ranked hypotheses with their distance (mean |ln ratio| of the logged signals) and whether "
    "the best reproduces RUN exactly (bit-identical metrics), within rounding or approximately. Hypotheses live "
    "in RUN/reproduce/ (cached).",
    (Arg("run", metavar="RUN", help="the run to reproduce, e.g. experiments/19-injection-A"),
     Arg("--baseline", required=True, metavar="BASE", help="the clean run it is compared with, e.g. experiments/18-baseline"),
     Arg("--window", type=int, metavar="N", help="steps compared after the first differing step (default 100)"),
     Arg("--budget", type=int, metavar="N", help="hypotheses trained at most (default 60)"),
     Arg("--kinds", metavar="K1,K2", help="search only these registered injections (default: every one)"),
     Arg("--jobs", type=int, metavar="N", help="hypotheses at a time (default: one per core)"),
     Arg("--json", action="store_true", help="print the report as one JSON object"),
     Arg("--spoil", action="store_true", help="reproduce a run of a learner lab that is not revealed yet"),
     RAY),
    sweeps.cmd_reproduce)


LR_SWEEP = Command(
    "lr-sweep", "natural instabilities: final loss against learning rate, with and without their remedies",
    "Train the plain model, qk-layernorm, z-loss, both, a longer warmup and update clipping at peak LRs over three "
    "orders of magnitude (one whole run each, natural-instability signals on), then judge them: final loss and the "
    "LR-sensitivity number per variant, the largest attention logit and log Z against the LR, the papers' claims "
    "against this model, and the plain model's failures labelled by the intervention that alone removes them. "
    "Writes EXPERIMENTS/lr-sweep/index.html, sweep.json and natural-instabilities.md. Runs are cached by config "
    "hash: a re-run trains only new runs. Default grid: 42 runs of 1000 steps; --quick: 18 runs of 150 steps.",
    (Arg("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
         help="the sweep goes to EXPERIMENTS/lr-sweep/ (default: experiments)"),
     Arg("--quick", action="store_true", help="three LRs, 150-step runs (a few minutes on 2 cores)"),
     Arg("--jobs", type=int, default=None, metavar="N", help="worker processes, one run each (default: one per "
                                                             "CPU core)"),
     Arg("--set", action="append", metavar="KEY=VALUE",
         help="a config override for every run (e.g. seed=7 or preset=medium); the sweep's own fields are refused"),
     Arg("--doc", metavar="PATH", help="also write the doc there (e.g. docs/natural-instabilities.md)"),
     RAY),
    sweeps.cmd_lr_sweep)


COMMANDS = (TRAIN, LAB_RUN, LAB, CORPUS, CONFIG, SIGNATURE, REPORT, EXPLORE, DASHBOARD, EXPORT, INDEX, DIAGNOSE,
            STABILITY_MD, LEARNER, REVEAL, GRADE, CHECK, POSTMORTEM, BLIND_RUNS, REMEDIATE, IMPORT, SERVE,
            EXPLAIN, REPRODUCE, LR_SWEEP)

DESCRIPTION = ("A small, exact laboratory for training-stability work on a mini-GPT: train it on CPU in seconds, "
               "break it at a chosen step, and read the damage from the dashboard.")
EPILOG = ("The lab, step by step: see README.md. Every command has --help.\n"
          "Exit codes: 0 done; 1 'check' not done yet; 2 a user error (one line on stderr, nothing changed); 3 a "
          "run stopped on a non-finite value (rows, results and dashboard kept); 130 interrupted. See "
          "docs/reliability.md.")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="minitrain", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_commands(parser, COMMANDS, dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    if os.environ.get(hints.VIA) and not isinstance(sys.stdout, hints.TypedHints):
        stdout, sys.stdout = sys.stdout, hints.TypedHints(sys.stdout)  # hints as typed: ./dev minitrain ...
        try:
            return main(argv)
        finally:
            sys.stdout = stdout
    parser, args = build_parser(), None
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        if not args.spec.distributed and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UserError(f"'{args.command}' runs in one process; under torchrun launch only "
                            "'minitrain train' (e.g. nproc=2 just ddp-train --out DIR)")
        return args.func(args)
    except UserError as e:
        if runs.is_main_process():  # under torchrun every rank raises it; one line is enough
            print(f"minitrain: error: {hints.as_typed(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        # the interrupted code knows what to run (core.errors.Interrupted), else the command does
        say = getattr(e, "hint", None) or getattr(getattr(args, "spec", None), "interrupted", AGAIN)
        print(f"minitrain: interrupted; {hints.as_typed(say)}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a write that failed where no code expected it (a full disk, a read-only folder)
        from minitrain.run.files import disk_error

        print(f"minitrain: error: {disk_error(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
