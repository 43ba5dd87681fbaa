"""The learner's commands: a learner's folder, the reveal, grading and the Definition of Done, the blind labs
and the remediation of a diagnosed run."""
from __future__ import annotations

from pathlib import Path

from minitrain.core.errors import UserError


def _lab(args):
    from minitrain.lab.learner import LABS

    return LABS[args.lab]


def _solutions(args) -> Path | None:
    return Path(args.solutions) if args.solutions else None


def cmd_learner(args) -> int:
    from minitrain.lab.learner import init_learner

    d = init_learner(args.name, Path(args.learners))
    print(f"created {d}: spike-diagnoses.md, blind-diagnoses.md, break-it-diagnoses.md, notes/lessons.md")
    print(f"next: train the lab ('just lab'), walk stability-check.md for each run, fill in {d / 'spike-diagnoses.md'}, "
          f"then 'minitrain reveal {args.name}'")
    return 0


def cmd_reveal(args) -> int:
    from minitrain.lab.learner import reveal

    text, path = reveal(args.name, _lab(args), Path(args.learners), Path(args.experiments), _solutions(args),
                        force=args.force)
    print(text, end="")
    print_revealed_pages(args)
    print(f"(also written to {path}; next: 'minitrain grade {args.name}"
          + ("" if args.lab == "spike" else f" --lab {args.lab}") + "')")
    return 0


def print_revealed_pages(args) -> None:
    """The end of `reveal`: the paths of the pages it made visible, opened only where a browser can open."""
    from minitrain.lab.browser import revealed_pages, show_pages

    for line in show_pages(revealed_pages(Path(args.experiments), _lab(args).runs)):
        print(line)


def cmd_grade(args) -> int:
    from minitrain.lab.learner import grade, grade_report

    g = grade(args.name, _lab(args), Path(args.learners), Path(args.experiments), _solutions(args))
    print(grade_report(args.name, g))
    return 0


def cmd_check(args) -> int:
    from minitrain.lab.learner import check

    items = check(args.name, _lab(args), Path(args.learners), Path(args.experiments), _solutions(args))
    for ok, line in items:
        print(f"[{'PASS' if ok else 'FAIL'}] {line}")
    done = all(ok for ok, _ in items)
    print("done: the lab's Definition of Done and stop condition hold" if done else
          f"not done: {sum(not ok for ok, _ in items)} item(s) to go")
    return 0 if done else 1


def cmd_blind_runs(args) -> int:
    from minitrain.lab.whole_lab import train_blind_lab

    if args.random not in ("0", "1", ""):
        raise UserError(f"--random expects 0 or 1, got {args.random!r}")
    sets = [*(args.set or []), *(["progress=false"] if args.no_progress else [])]
    return train_blind_lab(args.lab, Path(args.experiments), sets, randomize=args.random == "1", only=args.run,
                           force=args.force)


def cmd_remediate(args) -> int:
    from minitrain.lab.remediate import remediate

    rep = remediate(Path(args.run), args.remedy, Path(args.baseline) if args.baseline else None, force=args.force,
                    spoil=args.spoil)
    print(f"{rep['remediated']}: {rep['summary']}")
    print(f"verdict ({rep['conclusion']['outcome']}): {rep['conclusion']['line']}")
    print("dashboards: " + ", ".join(rep["dashboards"]))
    from minitrain.lab.runs import exit_code

    return exit_code(Path(args.run).parent / rep["remediated"])
