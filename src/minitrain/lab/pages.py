"""The views under the lab's seal (spoilers.is_sealed): a run's page (`minitrain dashboard`) and the live site
(`minitrain serve`). The views draw; whether a run is sealed is the lab's rule, decided here."""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.lab import spoilers
from minitrain.run import reader


def say_if_live(run: Path) -> None:
    """A reader of a run another process is writing says so (one line on stderr), then reads what is there."""
    note = reader.live_note(run)
    if note:
        print(f"minitrain: {note}", file=sys.stderr)


def write_run_page(run: Path, baseline: Path | None = None, find_baseline: bool = True,
                   compare: tuple[Path, ...] = (), out: Path | None = None) -> str:
    """Write RUN's dashboard (at `out`, else RUN/dashboard.html, then the index that links it); returns the line
    that says what was written. Without `baseline`, the clean run beside RUN is overlaid unless not
    `find_baseline`."""
    from minitrain.views.dashboard import write_dashboard

    run = Path(run)
    say_if_live(run)
    if baseline is not None and not (baseline / reader.METRICS).exists():
        raise UserError(f"--baseline {baseline} holds no metrics.jsonl; give a run folder such as "
                        "experiments/18-baseline")
    if baseline is None and find_baseline:
        baseline = reader.find_baseline(run)
    for c in compare:
        if not (c / reader.METRICS).exists():
            raise UserError(f"--compare {c} holds no metrics.jsonl; give a run folder such as "
                            "experiments/19-injection-B")
    page = write_dashboard(run, baseline=baseline, out=out, auto_baseline=False, compare=list(compare),
                           sealed=spoilers.is_sealed(run))
    if out is None:  # the index links the page (and says whether it is sealed)
        spoilers.refresh_beside(run)
    return (f"wrote {page}" + (f" (baseline overlay: {baseline.name})" if baseline else "")
            + (f" (compared: {', '.join(c.name for c in compare)})" if compare else ""))


def serve_site(experiments: Path, port: int, host: str) -> int:
    """Serve EXPERIMENTS live (views/serve.py), sealed runs judged by the lab's rule."""
    from minitrain.views.serve import serve

    return serve(Path(experiments), port=port, host=host)
