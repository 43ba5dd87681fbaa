"""The commands that run many runs on the runner: the sweeps (explore, lr-sweep) and the replays that explain
or reproduce a run."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def cmd_explore(args) -> int:
    from minitrain.lab import explore

    explore.run_explore(Path(args.experiments) / "explore", "quick" if args.quick else "default", args.jobs,
                        args.set or [], Path(args.doc) if args.doc else None, ray=args.ray)
    return 0


def cmd_lr_sweep(args) -> int:
    from minitrain.lab import lrsweep

    lrsweep.run_lrsweep(Path(args.experiments) / "lr-sweep", "quick" if args.quick else "default", args.jobs,
                        args.set or [], Path(args.doc) if args.doc else None, ray=args.ray)
    return 0


def _print_report(args, rep: dict, text: Callable[[], str]) -> int:
    """A report as one JSON object (--json) or as its text."""
    from minitrain.run.files import strict_json

    print(strict_json(rep, indent=2) if args.json else text())
    return 0


def cmd_explain(args) -> int:
    from minitrain.lab.explain import explain, format_report

    rep = explain(Path(args.run), args.step, spoil=args.spoil, jobs=args.jobs)
    return _print_report(args, rep, lambda: format_report(Path(args.run), rep))


def cmd_reproduce(args) -> int:
    from minitrain.lab.reproduce import BUDGET, WINDOW, format_report, reproduce

    rep = reproduce(Path(args.run), Path(args.baseline), window=args.window or WINDOW, budget=args.budget or BUDGET,
                    jobs=args.jobs, spoil=args.spoil, kinds=args.kinds.split(",") if args.kinds else None,
                    ray=args.ray)
    return _print_report(args, rep, lambda: format_report(rep))
