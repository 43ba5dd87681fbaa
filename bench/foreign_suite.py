"""Score `minitrain import` + `minitrain diagnose` on runs made by trainers that are not minitrain.

    python bench/foreign_suite.py --part dev|held-out|all|blind2|blind3 [--jobs 2] [--cache DIR] [--cases A,B]
                                  [--import-only]

bench/foreign/ holds three trainers written as their users write them (nanoGPT-style with TensorBoard and a
printed log, the Hugging Face Trainer, a plain loop writing a CSV or Lightning's metrics.csv), none importing
minitrain, and the 40 runs of bench/foreign/cases.py. Each run is trained once into the cache (keyed by its
config and the trainer's source), then imported as its user would import it and diagnosed. Exit 1 when the part
scored holds a wrong name or a false alarm; docs/foreign-runs.md says what each category means.

Both parts have been scored and the rules tuned on all 40 runs (docs/foreign-runs.md): a regression check now.
--part blind2 scores a second suite, bench/foreign2/ (its own three trainers and 42 runs, cached in
build/foreign-suite-blind2/), written by a tester who never read the diagnosis code: held out until round 2's
rules were scored on it once, dev since (docs/foreign-runs.md). --part blind3 a third, bench/foreign3/ (a GRU with
TensorBoard, the HF Trainer on a random OPT / GPT-Neo, an MLP-Mixer writing a W&B history CSV; 42 runs, cached in
build/foreign-suite-blind3/), held out until round 3's rules were scored on it once. --import-only trains and
imports without diagnosing.
"""
import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from foreign.cases import CASES
from foreign2.cases import CASES as BLIND2_CASES
from foreign3.cases import CASES as BLIND3_CASES

ROOT = Path(__file__).resolve().parent.parent
FOREIGN = Path(__file__).resolve().parent / "foreign"
FOREIGN2 = Path(__file__).resolve().parent / "foreign2"
FOREIGN3 = Path(__file__).resolve().parent / "foreign3"
BLIND2_TRAINERS = {c.trainer for c in BLIND2_CASES}
BLIND3_TRAINERS = {c.trainer for c in BLIND3_CASES}
SPLIT_SEED = 35  # fixes which runs are dev (a third of each trainer's runs) and which are held out
CATEGORIES = ["right", "step off", "unknown", "untestable", "healthy on fault", "wrong", "healthy", "false alarm",
              "import refused"]
FAILING = {"wrong", "false alarm"}
NOT_A_FAULT = {"healthy", "unknown", None}


def split():
    """Per trainer, a third of its runs (rounded) to dev, the rest held out, drawn with SPLIT_SEED."""
    rng = random.Random(SPLIT_SEED)
    parts = {}
    for trainer in ("nanogpt", "hf", "csv"):
        names = sorted(c.name for c in CASES if c.trainer == trainer)
        rng.shuffle(names)
        n_dev = round(len(names) / 3)
        parts.update({n: "dev" for n in names[:n_dev]})
        parts.update({n: "held-out" for n in names[n_dev:]})
    return parts


def _home(case):
    """The suite folder holding the case's trainer, and the data module its trainers share."""
    if case.trainer in BLIND3_TRAINERS:
        return FOREIGN3, "data.py"
    return (FOREIGN2, "text.py") if case.trainer in BLIND2_TRAINERS else (FOREIGN, "corpus.py")


def run_key(case):
    home, data = _home(case)
    src = "".join((home / f).read_text() for f in (data, "train_one.py", f"{_module(case)}.py"))
    blob = json.dumps([case.trainer, case.config], sort_keys=True) + src
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _module(case):
    return {"nanogpt": "nanogpt", "hf": "hf", "csv": "plain_loop", "gru": "gru_tb", "opt": "hf_opt",
            "mixer": "mixer_wandb"}.get(case.trainer, case.trainer)


def generate(case, cache):
    """Train the case into the cache unless a finished run with the same key is there; returns its folder."""
    out = cache / f"{case.name}-{run_key(case)}"
    if (out / "trained.json").exists():
        return out, 0.0
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(_home(case)[0] / "train_one.py"), case.trainer, json.dumps(case.config),
                           str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case.name}: the trainer failed:\n{proc.stderr[-2000:]}")
    return out, time.time() - t0


def source_path(case, run):
    """The file or folder this trainer's user hands to `minitrain import`."""
    if case.source == "tb":
        return run / "tb"
    if case.source == "tb-parent":
        return run / "runs"
    if case.source == "tb-run":
        return next((run / "runs").iterdir())
    return run / {"printlog": "train.log", "trainer_state": "trainer_state.json", "csv": "log.csv",
                  "lightning": "metrics.csv", "wandb": "wandb_history.csv"}[case.source]


def flags(case, run):
    vocab = json.loads((run / "trained.json").read_text())["vocab_size"]
    return (["--vocab-size", str(vocab)] if case.vocab_flag else []) + list(case.extra_flags)


def minitrain(*args):
    return subprocess.run([sys.executable, "-m", "minitrain", *args], capture_output=True, text=True)


def diagnose(case, run, work, import_only=False):
    """Import and diagnose one run; returns what came out (cause, step, untestable, or the refusal)."""
    dest = work / case.name
    shutil.rmtree(dest, ignore_errors=True)
    src = source_path(case, run)
    got = minitrain("import", str(src), "--out", str(dest), *flags(case, run))
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"refused": f"{case.source}: " + last.replace(str(run) + "/", "")}
    if import_only:
        return {"imported": str(dest)}
    got = minitrain("diagnose", str(dest), "--json")
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["(no message)"])[-1]
        return {"refused": "diagnose: " + last}
    d = json.loads(got.stdout)
    return {"cause": d.get("cause"), "anomaly_step": d.get("anomaly_step"), "untestable": d.get("untestable") or [],
            "confidence": (d.get("confidence") or {}).get("level")}


def step_ok(case, step):
    """The anomaly step within one logging interval before the fault and two after its last step (+5 steps)."""
    if case.fault_step is None:
        return True
    if step is None:
        return False
    return case.fault_step - case.log_every <= step <= case.fault_step + case.fault_len + 2 * case.log_every + 5


def category(case, out):
    if "refused" in out:
        return "import refused"
    cause = out["cause"]
    if case.healthy:
        return "healthy" if cause == "healthy" else "unknown" if cause in NOT_A_FAULT else "false alarm"
    if cause in case.accept:
        return "right" if step_ok(case, out["anomaly_step"]) else "step off"
    if cause not in NOT_A_FAULT:
        return "wrong"
    if out["untestable"]:
        return "untestable"
    return "unknown" if cause == "unknown" else "healthy on fault"


def table(rows):
    lines = ["| run | trainer | source | flags | expected | trace | got | step (fault) | untestable | result |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for case, out, cat in rows:
        expected = "healthy" if case.healthy else " / ".join(case.accept)
        got = out.get("cause") if "refused" not in out else f"refused: {out['refused']}"
        step = "" if "refused" in out else f"{out.get('anomaly_step')}"
        step += f" ({case.fault_step})" if case.fault_step is not None else ""
        fl = "--vocab-size" if case.vocab_flag else ""
        trace = "" if case.healthy else ("yes" if case.traceable else "no")
        unt = ", ".join(out.get("untestable", []))
        lines.append(f"| {case.name} | {case.trainer} | {case.source} | {fl} | {expected} | {trace} | {got} | "
                     f"{step} | {unt} | **{cat}** |")
    return "\n".join(lines)


def trainers(cases):
    return list(dict.fromkeys(c.trainer for c in cases))


def totals(rows):
    lines = ["| trainer | runs | " + " | ".join(CATEGORIES) + " |", "|---|---|" + "---|" * len(CATEGORIES)]
    for trainer in (*trainers(r[0] for r in rows), "all"):
        sel = [cat for case, _, cat in rows if trainer in ("all", case.trainer)]
        count = Counter(sel)
        lines.append(f"| {trainer} | {len(sel)} | " + " | ".join(str(count[c]) for c in CATEGORIES) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["dev", "held-out", "all", "blind2", "blind3"], default="dev")
    ap.add_argument("--cache", help="where trained runs are kept between scorings (default build/foreign-suite, "
                                    "build/foreign-suite-blind2 or -blind3 for --part blind2 or blind3)")
    ap.add_argument("--cases", help="only these runs of the part (comma-separated names)")
    ap.add_argument("--import-only", action="store_true", help="train and import each run, diagnose nothing")
    ap.add_argument("--jobs", type=int, default=2, help="trainers run at once (one CPU thread each)")
    ap.add_argument("--json", metavar="FILE", help="also write the per-run results to FILE")
    args = ap.parse_args()
    parts = split()
    if args.part in ("blind2", "blind3"):
        cases = BLIND2_CASES if args.part == "blind2" else BLIND3_CASES
        parts.update({c.name: args.part for c in cases})
    else:
        cases = [c for c in CASES if args.part == "all" or parts[c.name] == args.part]
    if args.cases:
        names = args.cases.split(",")
        unknown = sorted(set(names) - {c.name for c in cases})
        if unknown:
            print(f"--cases: not in part {args.part}: {', '.join(unknown)}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c.name in names]
    suffix = f"-{args.part}" if args.part in ("blind2", "blind3") else ""
    cache = Path(args.cache or ROOT / "build" / f"foreign-suite{suffix}")
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        made = list(pool.map(lambda c: generate(c, cache), cases))
    trained = sum(1 for _, s in made if s > 0)
    print(f"{len(cases)} runs ({args.part}); {trained} trained now in {time.time() - t0:.0f} s, "
          f"{len(cases) - trained} from {cache}", file=sys.stderr)
    work = cache / "imported"
    with ThreadPoolExecutor(args.jobs) as pool:
        outs = list(pool.map(lambda cr: diagnose(cr[0], cr[1][0], work, args.import_only), zip(cases, made)))
    if args.import_only:
        refused = [(c.name, o["refused"]) for c, o in zip(cases, outs) if "refused" in o]
        print(f"{len(cases) - len(refused)} of {len(cases)} runs imported into {work}")
        for name, why in refused:
            print(f"refused: {name}: {why}")
        return 1 if refused else 0
    rows = [(c, o, category(c, o)) for c, o in zip(cases, outs)]
    print(f"## Foreign suite: part {args.part} (split seed {SPLIT_SEED})\n")
    for trainer in trainers(cases):
        sel = [r for r in rows if r[0].trainer == trainer]
        if sel:
            print(f"### {trainer}\n\n{table(sel)}\n")
    print(f"### Totals\n\n{totals(rows)}\n")
    faults = [r for r in rows if not r[0].healthy]
    print(f"faults named right: {sum(r[2] == 'right' for r in faults)} of {len(faults)}; "
          f"no-trace faults said untestable: {sum(r[2] == 'untestable' for r in faults if not r[0].traceable)} of "
          f"{sum(not r[0].traceable for r in faults)}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"run": c.name, "part": parts[c.name], "result": cat, **o} for c, o, cat in rows], indent=1))
    failing = [r[0].name for r in rows if r[2] in FAILING]
    if failing:
        print(f"FAIL: wrong name or false alarm on {', '.join(failing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
