"""The `minitrain` command. Every sub-command is one `cmd_*` function plus its parser block in `build_parser`.

Errors a user can cause end as one line on stderr and exit code 2 (see minitrain.errors.UserError).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from minitrain.errors import UserError

LAB_LETTERS = {"scale": "A", "bad_batch": "B", "v_corrupt": "C"}
LAB_DEFAULT_SEED, LAB_DEFAULT_STEP = 42, 500


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 like every other bad input."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _config_from_args(args) -> "TrainConfig":  # noqa: F821
    from minitrain.config import build_config, load_yaml

    base = load_yaml(Path(args.config)) if getattr(args, "config", None) else {}
    overrides = list(getattr(args, "set", None) or [])
    for flag, key in (("seed", "seed"), ("injection", "injection"), ("injection_step", "injection_step"),
                      ("steps", "steps")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    if getattr(args, "no_progress", False):
        overrides.append("progress=false")
    return build_config(base, overrides)


def _summary_line(name: str, res: dict) -> str:
    if res.get("status") == "finished" and res.get("final_val_loss") is not None:
        ppl = f" (ppl {res['final_val_ppl']:.2f})" if res.get("final_val_ppl") is not None else ""
        return (f"{name}: finished {res['steps_done']} steps; val loss {res['final_val_loss']:.3f}{ppl} "
                f"vs n-gram {res['ngram_val_loss']:.3f} (ppl {res['ngram_val_ppl']:.2f}) "
                f"in {res['seconds_this_session']:.1f}s")
    if res.get("status") == "non_finite":
        return f"{name}: stopped at step {res.get('stopped_at_step')}: non-finite loss or gradient (rows kept)"
    return f"{name}: {res.get('status')} after {res.get('steps_done')} steps"


# --- train ---------------------------------------------------------------------------------------


def cmd_train(args) -> int:
    from minitrain import loop

    if args.resume:
        if args.out or args.set or args.config:
            raise UserError("--resume takes the run folder alone; its config.yaml is used as it is")
        res = loop.resume(Path(args.resume))
        print(_summary_line(Path(args.resume).name, res))
        return 0
    if not args.out:
        raise UserError("train needs --out DIR (or --resume DIR); e.g. minitrain train --out experiments/my-run")
    cfg = _config_from_args(args)
    res = loop.train(cfg, Path(args.out), force=args.force, fork=not args.no_fork)
    print(_summary_line(Path(args.out).name, res))
    return 0


def lab_run_name(injection: str, seed: int, step: int) -> str:
    """experiments/ folder of a lab run: 18-baseline, 19-injection-A.. (suffixes only off the lab defaults)."""
    if injection == "none":
        name = "18-baseline"
    else:
        name = f"19-injection-{LAB_LETTERS.get(injection, injection)}"
        if step != LAB_DEFAULT_STEP:
            name += f"-k{step}"
    if seed != LAB_DEFAULT_SEED:
        name += f"-seed{seed}"
    return name


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"shell variable {name}={raw!r} is not an integer; e.g. {name}={default}") from None


def cmd_lab_run(args) -> int:
    """One run of the lab, named as the lab names it; reads the lab's shell variables with --from-env."""
    from minitrain import loop
    from minitrain.config import build_config

    if args.from_env:
        seed = _env_int("seed", LAB_DEFAULT_SEED)
        injection = os.environ.get("injection", "").strip() or "none"
        step = _env_int("injection_step", LAB_DEFAULT_STEP)
    else:
        seed, injection, step = args.seed, args.injection, args.injection_step
    overrides = [f"seed={seed}", f"injection={injection}", f"injection_step={step}", *(args.set or [])]
    if args.no_progress:
        overrides.append("progress=false")
    cfg = build_config({}, overrides)
    out = Path(args.experiments) / lab_run_name(injection, seed, step)
    if (out / "results.json").exists() and not args.force:
        manifest = json.loads((out / "manifest.json").read_text())
        if manifest.get("config_hash") == cfg.hash() and manifest.get("status") in ("finished", "non_finite"):
            print(f"{out.name}: up to date (same config, already {manifest['status']}); --force re-runs it")
            return 0
    res = loop.train(cfg, out, force=args.force)
    print(_summary_line(out.name, res))
    return 0


# --- corpus --------------------------------------------------------------------------------------


def cmd_corpus(args) -> int:
    from minitrain.config import build_config
    from minitrain.data import prepare, token_report

    cfg = build_config({}, args.set or [])
    data = prepare(cfg)
    if args.out:
        from minitrain.runfiles import atomic_write_json, atomic_write_text

        out = Path(args.out)
        for split, rows in (("train", data.train_rows), ("val", data.val_rows)):
            atomic_write_text(out / f"{split}.jsonl",
                              "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rows))
        atomic_write_json(out / "data_manifest.json", data.manifest)
        print(f"wrote {len(data.train_rows)} train and {len(data.val_rows)} validation rows to {out}")
    m = data.manifest
    print(f"corpus seed {m['seed']}: {m['rows']} rows, {m['train_rows']} train / {m['val_rows']} validation "
          f"(held-out verbs: {', '.join(m['val_verbs'])}), data hash {m['hash']}")
    print("train rows by tense: " + ", ".join(f"{k} {v}" for k, v in m["train_by_tense"].items()))
    print("train rows by class: " + ", ".join(f"{k} {v}" for k, v in m["train_by_regularity"].items()))
    print(f"n-gram baseline: val loss {data.ngram['val_loss']:.3f} (ppl {data.ngram['val_ppl']:.2f})")
    total = int(data.token_counts.sum())
    for sentence in args.sentence or [cfg.injection_sentence]:
        report = token_report(data, sentence)
        cells = ", ".join(f"{tok!r}:{n}" for tok, n in report)
        print(f"tokens of {sentence!r} with training counts (of {total}): {cells}")
    if args.rare:
        rare = [r for r in data.rows if r.tense == "perfect" and r.regularity == "irregular"]
        print("rare sentences (irregular perfect) usable as injection_sentence:")
        for r in rare[:20]:
            print(f"  {r.text}")
    return 0


def cmd_config(args) -> int:
    import yaml

    from minitrain.config import TrainConfig

    print(yaml.safe_dump(TrainConfig().to_dict(), sort_keys=False, allow_unicode=True), end="")
    return 0


# --- dashboard and index ---------------------------------------------------------------------------


def cmd_dashboard(args) -> int:
    from minitrain.dashboard import find_baseline, write_dashboard

    run = Path(args.run)
    baseline = Path(args.baseline) if args.baseline else None
    if baseline is not None and not (baseline / "metrics.jsonl").exists():
        raise UserError(f"--baseline {baseline} holds no metrics.jsonl; give a run folder such as experiments/18-baseline")
    if baseline is None and not args.no_baseline:
        baseline = find_baseline(run)
    out = write_dashboard(run, baseline=baseline, out=Path(args.out) if args.out else None, auto_baseline=False)
    print(f"wrote {out}" + (f" (baseline overlay: {baseline.name})" if baseline else ""))
    return 0


def cmd_index(args) -> int:
    from minitrain.dashboard import write_index

    out = write_index(Path(args.experiments))
    print(f"wrote {out}")
    return 0


# --- parser --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="minitrain", description=(
        "A small, exact laboratory for training-stability work on a mini-GPT: train it on CPU in seconds, "
        "break it at a chosen step, and read the damage from the dashboard."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The lab, step by step: see README.md. Every command has --help.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    t = sub.add_parser("train", help="train one run into a run folder (or resume one)",
                       description="Train the mini-GPT into a run folder: manifest.json, config.yaml, "
                                   "metrics.jsonl (one row per step), checkpoints/, results.json. "
                                   "An injection run forks from a sibling run that differs only in its "
                                   "injection settings, instead of recomputing steps 0..K-1.")
    t.add_argument("--out", metavar="DIR", help="run folder to create (refused if it holds a run, unless --force)")
    t.add_argument("--config", metavar="FILE", help="YAML file of config fields (see 'minitrain config')")
    t.add_argument("--seed", type=str, help="seed for init and batch order (default 42)")
    t.add_argument("--steps", type=str, help="number of training steps (default 2000)")
    t.add_argument("--injection", metavar="NAME", help="none | scale | bad_batch | v_corrupt")
    t.add_argument("--injection-step", dest="injection_step", metavar="K", help="step at which to inject")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override any config field, repeatable (e.g. --set injection_factor=0.01)")
    t.add_argument("--force", action="store_true", help="replace an existing run folder")
    t.add_argument("--resume", metavar="DIR", help="continue a stopped or killed run from its last checkpoint")
    t.add_argument("--no-fork", action="store_true", help="recompute steps 0..K-1 even if a baseline can be forked")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    lr = sub.add_parser("lab-run", help="one lab run, named as the lab names it (used by 'just phase-19-train')",
                        description="Train one run of the spike-injection lab into EXPERIMENTS/18-baseline or "
                                    "EXPERIMENTS/19-injection-{A,B,C}. A finished run with the same config is "
                                    "left alone (up to date).")
    lr.add_argument("--from-env", action="store_true",
                    help="read the lab's shell variables seed, injection, injection_step")
    lr.add_argument("--seed", type=int, default=LAB_DEFAULT_SEED)
    lr.add_argument("--injection", default="none")
    lr.add_argument("--injection-step", dest="injection_step", type=int, default=LAB_DEFAULT_STEP)
    lr.add_argument("--experiments", default="experiments", metavar="DIR", help="where runs land")
    lr.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field")
    lr.add_argument("--force", action="store_true", help="re-run even if the run is up to date")
    lr.add_argument("--no-progress", action="store_true")
    lr.set_defaults(func=cmd_lab_run)

    c = sub.add_parser("corpus", help="show (or write) the generated corpus, its split and its long tail",
                       description="Generate the verb-grammar corpus, print its split, the n-gram baseline and "
                                   "each token of the lab's rare sentence with its training-split count.")
    c.add_argument("--out", metavar="DIR", help="also write train.jsonl, val.jsonl, data_manifest.json here")
    c.add_argument("--sentence", action="append", help="report the tokens of this sentence (repeatable)")
    c.add_argument("--rare", action="store_true", help="list rare sentences usable as injection_sentence")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field")
    c.set_defaults(func=cmd_corpus)

    cf = sub.add_parser("config", help="print every config field with its default",
                        description="Print the default config as YAML: every key --set accepts.")
    cf.set_defaults(func=cmd_config)

    d = sub.add_parser("dashboard", help="write a run's self-contained dashboard.html (no network needed)",
                       description="Write RUN/dashboard.html: one static page with every plot of the run sharing "
                                   "the step axis, the injection marker, the health summary and the manifest. "
                                   "An injection run is overlaid with its sibling baseline (same trunk hash, no "
                                   "injection) when one exists. Also written at the end of every run.")
    d.add_argument("run", metavar="RUN", help="run folder, e.g. experiments/19-injection-B")
    d.add_argument("--baseline", metavar="RUN", help="overlay this run and plot the difference (default: found)")
    d.add_argument("--no-baseline", action="store_true", help="do not look for a baseline run")
    d.add_argument("--out", metavar="FILE", help="where to write the page (default RUN/dashboard.html)")
    d.set_defaults(func=cmd_dashboard)

    ix = sub.add_parser("index", help="write EXPERIMENTS/index.html linking every run with a one-line summary",
                        description="Write EXPERIMENTS/index.html: one line per run folder (status, injection, "
                                    "final validation loss vs the n-gram baseline, anomaly) linking its dashboard.")
    ix.add_argument("experiments", nargs="?", default="experiments", metavar="EXPERIMENTS",
                    help="folder holding the run folders (default experiments)")
    ix.set_defaults(func=cmd_index)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except UserError as e:
        print(f"minitrain: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("minitrain: interrupted; resume with 'minitrain train --resume DIR'", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
