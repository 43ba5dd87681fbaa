"""A lab from start to end, as `minitrain lab` and `minitrain blind-runs` make it: its runs, then the index and
what the learner does next (and, for the spike lab once revealed, the expected-vs-observed report)."""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.core.errors import UserError


def train_spike_lab(experiments: Path, seed: int, k: int, jobs: int | None = None, sets: list[str] | None = None,
                    force: bool = False, ray: str | None = None, report: bool = True) -> int:
    """Train the lab into `experiments`, printing each run's summary line and then where things are; returns
    the exit code (EXIT_NON_FINITE if a run diverged)."""
    from minitrain.lab.parallel import LAB_INJECTIONS, lab_configs, run_lab

    lab_configs(seed, k, sets)  # a bad --set: one line, before torch is imported
    from minitrain.analysis import signature
    from minitrain.lab import spoilers
    from minitrain.lab.runs import exit_code
    from minitrain.core import course

    experiments = Path(experiments)
    for line in run_lab(experiments, seed, k, jobs=jobs, sets=sets, force=force, ray=ray):
        print(line)
    runs = [course.lab_run_name(i, seed, k) for i in ("none", *LAB_INJECTIONS)]
    sealed = [r for r in runs if spoilers.is_sealed(experiments / r)]
    if report and not sealed:  # expected vs observed names the signatures: only once revealed
        try:
            print(signature.report(experiments))
            print(f"written to {experiments / 'lab-report.md'}", file=sys.stderr)
        except UserError as e:  # e.g. a run that diverged before K: the runs and their exit code stand
            print(f"minitrain: no lab report: {e}", file=sys.stderr)
    index = spoilers.refresh(experiments)  # the index once every run is in
    print(f"\nthe runs: {', '.join(str(experiments / r) for r in runs)}; their pages: RUN/dashboard.html; "
          f"all of them: {index}")
    if sealed:
        print("next: open each injection run's dashboard.html, walk stability-check.md from §1 to the first leaf "
              "that matches, write your diagnoses (minitrain learner init NAME, then "
              "learners/NAME/phase-19/spike-diagnoses.md), then 'minitrain reveal NAME': it seals them and shows "
              "the answers and the expected-vs-observed report")
    return exit_code(*(experiments / r for r in runs))


def train_blind_lab(lab: str, experiments: Path, sets: list[str], randomize: bool = False, only: str | None = None,
                    force: bool = False) -> int:
    """Train the sealed, shuffled lab `lab` (blind.LABS) into its folder under `experiments`, printing each run's
    summary line and what is sealed; returns the exit code (EXIT_NON_FINITE if a run diverged)."""
    from minitrain.lab import blind, spoilers
    from minitrain.lab.runs import exit_code

    folder = Path(experiments) / Path(blind.LABS[lab]["folder"]).name
    blind.make_lab(lab, folder, sets, randomize=randomize, only=only, force=force,
                   say=lambda line: print(line, flush=True))  # each run's start and end as they happen
    print(f"sealed: which fault each run of {folder} carries is hidden until the reveal "
          f"(mapping hash in {blind.public_path(folder)})")
    if lab == "spike":
        print("each run has its own seed and K (drawn, sealed): read its own signals on its dashboard, as the "
              "stability check does")
    spoilers.refresh(Path(experiments))
    return exit_code(*(folder / run_id for run_id in blind.RUN_IDS))
