"""The commands that write pages and files for other tools: a run's dashboard, the index, the live site, and
runs in and out (import, TensorBoard export)."""
from __future__ import annotations

from pathlib import Path


def cmd_dashboard(args) -> int:
    from minitrain.lab.pages import write_run_page

    print(write_run_page(Path(args.run), Path(args.baseline) if args.baseline else None,
                         find_baseline=not args.no_baseline, compare=tuple(Path(c) for c in args.compare or []),
                         out=Path(args.out) if args.out else None))
    return 0


def cmd_index(args) -> int:
    from minitrain.lab import spoilers

    out = spoilers.refresh(Path(args.experiments))
    print(f"wrote {out}")
    return 0


def cmd_serve(args) -> int:
    from minitrain.lab.pages import serve_site

    return serve_site(Path(args.experiments), port=args.port, host=args.host)


def cmd_export(args) -> int:
    from minitrain.lab.spoilable import export

    res = export(Path(args.run), Path(args.tensorboard), force=args.force, spoil=args.spoil)
    print(f"wrote {res['dir']}: {res['steps']} steps, {res['scalar_tags']} scalar tags, {res['texts']} text events; "
          f"view it with: tensorboard --logdir {args.tensorboard}")
    return 0


def cmd_import(args) -> int:
    from minitrain.lab import spoilers
    from minitrain.run.importer import import_run

    res = import_run(Path(args.source), Path(args.out), args.map or [], force=args.force, vocab_size=args.vocab_size,
                     batch_size=args.batch_size, log_every=args.log_every)
    mapped = ", ".join(f"{tag} -> {signal}" for signal, tag in res["signals"].items())
    print(f"wrote {res['out']}: {res['steps']} steps from a {res['kind']} history ({mapped})"
          + (f"; not imported: {', '.join(res['unmapped'])} (map with --map TAG=SIGNAL)" if res["unmapped"] else ""))
    carried = ", ".join(f"{signal} at {n} steps" for signal, n in res["carried_forward"].items())
    if carried:
        print(f"carried forward (not logged at those steps, so their last earlier value): {carried}")
    if res["dropped"]:
        print("not imported: " + ", ".join(f"{n} {what}" for what, n in res["dropped"].items()))
    facts = res["facts"]
    unknown = [k for k in ("vocab_size", "batch_size") if k not in facts]
    print("known: " + ", ".join(f"{k} {facts[k]} ({facts[k + '_from']})" for k in ("vocab_size", "batch_size",
                                                                                     "log_every") if k in facts)
          + (f"; unknown: {', '.join(unknown)} (pass --{unknown[0].replace('_', '-')} to test the checks that "
             f"need it)" if unknown else ""))
    print(f"next: minitrain diagnose {args.out}   (what the source lacks reads 'not measured')")
    spoilers.refresh_beside(Path(args.out))
    return 0
