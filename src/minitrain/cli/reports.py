"""The commands that measure a run and write it up: signature, the lab report, the stability check's walk and
its markdown, the post-mortem."""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.core.errors import UserError


def cmd_signature(args) -> int:
    from minitrain.lab.spoilable import signature
    from minitrain.run.files import strict_json

    sig = signature(Path(args.run), Path(args.baseline) if args.baseline else None, spoil=args.spoil)
    print(strict_json(sig, indent=2))
    return 0


def cmd_report(args) -> int:
    from minitrain.lab.spoilable import lab_report

    print(lab_report(Path(args.experiments), spoil=args.spoil))
    print(f"written to {Path(args.experiments) / 'lab-report.md'}", file=sys.stderr)
    return 0


def cmd_diagnose(args) -> int:
    """Walk the stability check over RUN's metrics; print the path, the leaf and its evidence."""
    from minitrain.analysis import stability
    from minitrain.lab.spoilable import diagnose
    from minitrain.run.files import strict_json

    run = Path(args.run)
    result = diagnose(run, Path(args.baseline) if args.baseline else None, write=args.write, spoil=args.spoil)
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
