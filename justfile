# minitrain task runner. The lab's commands read shell variables, exactly as the lab prints them:
#   seed=42 injection=scale injection_step=500 just phase-19-train
# Recipes use the project's virtual environment (made by ./dev, or `just setup`).

set shell := ["bash", "-euo", "pipefail", "-c"]
# Every argument reaches the command as one word, never as shell code: recipes pass "$@" (variadic
# arguments) or quote(NAME) (named ones). `just learner 'zed; echo X'` makes a learner named that, or fails.
set positional-arguments
# a refusal (exit 2, one line from minitrain) is not followed by just's "error: Recipe ... failed" (a crash's look)
set no-exit-message
export PATH := justfile_directory() + "/.venv/bin:" + env_var("PATH")
export PYTHONUNBUFFERED := "1"

# list the recipes
default:
    @just --list --unsorted

# the command line tool from the venv: ./dev minitrain diagnose experiments/19-injection-A
minitrain *args:
    @minitrain "$@"

# create .venv and install minitrain with its pinned dependencies (idempotent)
setup:
    ./dev --setup-only

# train the phase-18 baseline into experiments/18-baseline
phase-18-train *args:
    minitrain lab-run --injection none "$@"

# one lab run from the shell variables seed, injection (none|scale|bad_batch|v_corrupt), injection_step
phase-19-train *args:
    minitrain lab-run --from-env "$@"

# the config preset the lab runs with: `preset=pretraining-like just lab` (or `just preset=pretraining-like lab`)
# runs it where clipping engages rarely, into experiments/preset-pretraining-like/ (see docs/regimes.md)
preset := env_var_or_default("preset", "course")
lab_dir := if preset == "course" { "experiments" } else { "experiments/preset-" + preset }

# the whole lab: baseline + injections A, B, C at step 500 (seed 42), each forked from the baseline's
# checkpoint at 500 as soon as it exists and run in parallel (one process per core; the same bytes as
# one after another); each run writes its dashboard.html; then the expected-vs-observed report
# (lab-report.md, printed) and experiments/index.html
[doc("the whole lab: baseline + injections A, B, C at step 500 (seed 42), in parallel; dashboards, lab-report.md and experiments/index.html")]
lab *args:
    minitrain lab --experiments {{quote(lab_dir)}} --set preset={{quote(preset)}} "$@"

# the regime map: where each of the lab's 10 predictions holds (quick=1: the 16-cell grid, a few minutes);
# writes experiments/explore/index.html (a heat map per prediction) and regimes.md; cached by config hash
[doc("the regime map of where each of the lab's 10 predictions holds (quick=1: a 16-cell grid, a few minutes)")]
explore *args:
    minitrain explore $([ "${quick:-0}" = 1 ] && echo --quick) "$@"

# create a learner's folder learners/NAME/phase-19/ (spike-diagnoses.md, notes/lessons.md, blind and break-it files)
learner name:
    minitrain learner init {{quote(name)}}

# seal NAME's diagnoses, then show the reference solutions with NAME's numbers (lab=spike|blind|break-it)
reveal name lab="spike":
    minitrain reveal {{quote(name)}} --lab {{quote(lab)}}

# score NAME's sealed diagnoses out of 3, each miss explained (lab=spike|blind|break-it)
grade name lab="spike":
    minitrain grade {{quote(name)}} --lab {{quote(lab)}}

# the lab's Definition of Done and stop condition for NAME, one line each
check name lab="spike":
    minitrain check {{quote(name)}} --lab {{quote(lab)}}

# blind lab: the three injections shuffled and sealed into experiments/19-blind/01..03 (random=1: random K, magnitude)
phase-19-blind *args:
    minitrain blind-runs spike --random "${random:-0}" "$@"

# companion lab: the three breaks (init x100, no warmup, all-ones mask) shuffled and sealed into experiments/19-break-it/
break-it-shuffled *args:
    minitrain blind-runs break-it "$@"

# one run of the shuffled break-it lab: just run-break 01|02|03
run-break id *args:
    minitrain blind-runs break-it --run "$@"

# fill the post-mortem template from a run's evidence into RUN/postmortem.md
postmortem run *args:
    minitrain postmortem "$@"

# re-run RUN from before its anomaly with the leaf's remedy into RUN-remediated, walk it again
remediate run *args:
    minitrain remediate "$@"

# walk the stability check over a run's metrics: just diagnose experiments/19-injection-A [--json] [--write] [--spoil: before the reveal]
diagnose run *args:
    minitrain diagnose "$@"

# regenerate stability-check.md from the tree in src/minitrain/analysis/tree.py
stability-md:
    minitrain stability-md

# score the walker and the field's detectors on a generated suite (quick=1: short runs, about a minute;
# grown=1: the five realistic faults of docs/diagnosis.md on a tuning and two held-out seeds)
[doc("score the walker and the field's detectors on a generated suite (quick=1: about a minute; grown=1: the realistic faults)")]
eval-diagnosis *args:
    python bench/eval_diagnosis.py $([ "${quick:-0}" = 1 ] && echo --quick) $([ "${grown:-0}" = 1 ] && echo --grown) "$@"

# score import + diagnose on runs from three trainers that are not minitrain (docs/foreign-runs.md):
#   just foreign-suite --part dev|held-out|all   (trains each run once into build/foreign-suite/; exit 1 on a
#   wrong name or a false alarm)
[doc("score import + diagnose on runs of three other trainers (--part dev|held-out|all; exit 1 on a wrong name or a false alarm)")]
foreign-suite *args:
    python bench/foreign_suite.py "$@"

# run the whole test suite (installs the test tools and a headless Chromium if missing)
test *args:
    ./dev --setup-only --test-tools
    python -m pytest -n auto --dist loadfile "$@"

# benchmarks (docs/benchmarks.md): the bare step against a reference GPT step, the default run against the
# bare step (interleaved rounds in one process)
[doc("benchmarks (docs/benchmarks.md): the bare step against a reference GPT step, and the default run against the bare step")]
bench *args:
    python bench/perf.py step "$@"

# the whole lab's wall time against four sequential bare 2000-step runs (several minutes)
bench-lab *args:
    python bench/perf.py lab "$@"

# the probe's cost on a transformers GPT-2 against the same loop without it (needs minitrain[transformers])
probe-bench *args:
    python bench/probe_bench.py "$@"

# train with PyTorch DDP on $nproc processes (default 2; gloo on CPU, nccl on GPU); rank 0 writes the run folder:
#   nproc=2 just ddp-train --out experiments/ddp-2 [--preset medium] [--device auto]   (or --resume DIR)
[doc("train with PyTorch DDP on $nproc processes (default 2): nproc=2 just ddp-train --out experiments/ddp-2")]
ddp-train *args:
    python -m torch.distributed.run --standalone --nproc_per_node "${nproc:-2}" -m minitrain train "$@"

# step time, tokens/s and peak memory of each preset on the device found here (markdown table)
device-bench *args:
    python bench/device_bench.py "$@"

# add this machine's pins to tests/data/reference.json (one per CPU kernel set it runs; --values: re-pin the value
# tier after a change that moves the numerics on purpose, and say why in the commit)
[doc("add this machine's pins to tests/data/reference.json (--values: re-pin the value tier, saying why in the commit)")]
regen-reference *args:
    python scripts/regen_reference.py "$@"
