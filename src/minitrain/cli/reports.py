"""The commands that measure a run and write it up: signature, the lab report, the stability check's walk and
its markdown, the post-mortem."""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.core.errors import UserError


def cmd_signature(args) -> int:
    from minitrain.analysis import signature
    from minitrain.run.files import strict_json

    from minitrain.lab import spoilers

    spoilers.gate(Path(args.run), "signature", args.spoil)
    sig = signature.write(Path(args.run), Path(args.baseline) if args.baseline else None)
    print(strict_json(sig, indent=2))
    return 0


def cmd_report(args) -> int:
    from minitrain.analysis import signature
    from minitrain.lab import spoilers

    for run in sorted(Path(args.experiments).glob("19-injection-*")):
        spoilers.gate(run, "report", args.spoil)
    print(signature.report(Path(args.experiments)))
    print(f"written to {Path(args.experiments) / 'lab-report.md'}", file=sys.stderr)
    return 0


def cmd_diagnose(args) -> int:
    """Walk the stability check over RUN's metrics; print the path, the leaf and its evidence."""
    from minitrain.analysis import stability
    from minitrain.lab import spoilers
    from minitrain.lab.pages import say_if_live
    from minitrain.run.files import strict_json

    run = Path(args.run)
    spoilers.gate(run, "diagnose", args.spoil)
    say_if_live(run)
    result = stability.diagnose_run(run, Path(args.baseline) if args.baseline else None)
    if args.write:
        stability.write_diagnosis(run, result)
    if args.json:
        print(strict_json(result, indent=2, ensure_ascii=False))
    else:
        print(stability.format_report(result, run.name))
        if args.write:
            print(f"wrote {run / stability.DIAGNOSIS_NAME}")
    return 0


def cmd_stability_md(args) -> int:
    from minitrain.analysis import stability

    path, ok = stability.write_markdown(Path(args.root), check=args.check)
    if args.check:
        if not ok:
            raise UserError(f"{path} is stale (the tree in analysis/tree.py changed); regenerate it with "
                            "'minitrain stability-md'")
        print(f"{path} is up to date")
    else:
        print(f"wrote {path}")
    return 0


def cmd_postmortem(args) -> int:
    from minitrain.lab.postmortem import write_postmortem

    out = write_postmortem(Path(args.run), Path(args.baseline) if args.baseline else None,
                           Path(args.out) if args.out else None, force=args.force,
                           experiments=Path(args.experiments), spoil=args.spoil)
    print(f"wrote {out}: edit it, it is yours (re-running needs --force and overwrites it)")
    return 0
