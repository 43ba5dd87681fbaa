"""The commands that train: one run (train, lab-run), the whole lab, and what a run is made of (corpus, config)."""
from __future__ import annotations

import os
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.core.course import LAB_K, LAB_SEED


def _config_from_args(args) -> "TrainConfig":  # noqa: F821
    from minitrain.core.config import build_config, load_yaml

    base = load_yaml(Path(args.config)) if getattr(args, "config", None) else {}
    overrides = list(getattr(args, "set", None) or [])
    for flag, key in (("seed", "seed"), ("injection", "injection"), ("injection_step", "injection_step"),
                      ("steps", "steps"), ("preset", "preset"), ("device", "device"), ("precision", "precision")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    if getattr(args, "no_progress", False):
        overrides.append("progress=false")
    return build_config(base, overrides)


def is_main_process() -> bool:
    """False on torchrun's ranks other than 0 (read from the environment: valid before and after init)."""
    return os.environ.get("RANK", "0") == "0"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"shell variable {name}={raw!r} is not an integer; e.g. {name}={default}") from None


def cmd_train(args) -> int:
    # the config is checked before the loop (and torch) is imported: a one-line error returns at once
    if args.resume:
        if args.out or args.set or args.config or args.preset or args.precision:
            raise UserError("--resume takes the run folder alone (and --device); its config.yaml is used as it is")
        from minitrain.lab.runs import exit_code, resume_run, summary_line

        res = resume_run(Path(args.resume), device=args.device)
        if is_main_process():  # under torchrun, rank 0 speaks for all ranks
            print(summary_line(Path(args.resume).name, res))
        return exit_code(Path(args.resume))
    if not args.out:
        raise UserError("train needs --out DIR (or --resume DIR); e.g. minitrain train --out experiments/my-run")
    cfg = _config_from_args(args)
    from minitrain.lab.runs import exit_code, summary_line, train_run

    res = train_run(cfg, Path(args.out), force=args.force, fork=not args.no_fork)
    if is_main_process():  # under torchrun, rank 0 speaks for all ranks
        print(summary_line(Path(args.out).name, res))
    return exit_code(Path(args.out))


def cmd_lab_run(args) -> int:
    """One run of the lab, named as the lab names it; reads the lab's shell variables with --from-env."""
    from minitrain.core.config import build_config

    if args.from_env:
        seed = _env_int("seed", LAB_SEED)
        injection = os.environ.get("injection", "").strip() or "none"
        step = _env_int("injection_step", LAB_K)
    else:
        seed, injection, step = args.seed, args.injection, args.injection_step
    overrides = [f"seed={seed}", f"injection={injection}", f"injection_step={step}", *(args.set or [])]
    if args.no_progress:
        overrides.append("progress=false")
    cfg = build_config({}, overrides)  # checked before the loop (and torch) is imported
    from minitrain.lab.runs import exit_code, lab_run

    out, line = lab_run(cfg, Path(args.experiments), force=args.force, index=not args.no_index)
    print(line)
    return exit_code(out)


def cmd_lab(args) -> int:
    """The whole lab; `main` is the CLI's entry point, each run forked from this process running it."""
    from minitrain.lab.whole_lab import train_spike_lab

    return train_spike_lab(Path(args.experiments), args.seed, args.injection_step, jobs=args.jobs, sets=args.set,
                           force=args.force, ray=args.ray, report=not args.no_report)


def cmd_corpus(args) -> int:
    from minitrain.views.corpus import corpus_lines

    for line in corpus_lines(args.set or [], args.sentence, args.rare, Path(args.out) if args.out else None):
        print(line)
    return 0


def cmd_config(args) -> int:
    from minitrain.core.config import build_config, config_listing

    cfg = build_config({}, [f"preset={args.preset}"] if args.preset else [])
    print(config_listing(cfg), end="")
    from minitrain.core.injections import describe

    print("# injections (injection: NAME, injection_step: K; 'none' is the default):")
    print("\n".join(f"#   {line}" for line in describe()))
    return 0
