"""The course's lab: its seed and injection step as the lab text prints them (`seed=42 ... injection_step=500`),
the letters of its three injections and the names of its run folders, built and parsed here only.

    lab_run_name(injection, seed, step)   experiments/ folder of a lab run: 18-baseline, 19-injection-A, ...
    parse_lab_run_name(name)              the (injection, seed, step) such a name stands for, or None

It imports nothing, so that `minitrain --help` can name these without loading the config machinery."""
from __future__ import annotations

import re

LAB_SEED, LAB_K = 42, 500
LAB_LETTERS = {"scale": "A", "bad_batch": "B", "v_corrupt": "C"}  # the lab's injection runs A, B, C
LAB_INJECTIONS = tuple(LAB_LETTERS)
BASELINE_NAME = "18-baseline"
INJECTION_PREFIX = "19-injection-"

# a suffix appears only off the lab's defaults: -kK for another injection step, -seedS for another seed
_NAME = re.compile(rf"^(?:(?P<baseline>{BASELINE_NAME})|{INJECTION_PREFIX}(?P<letter>[A-Z]))"
                   r"(?:-k(?P<k>\d+))?(?:-seed(?P<seed>\d+))?$")


def lab_run_name(injection: str, seed: int, step: int) -> str:
    """experiments/ folder of a lab run: 18-baseline, 19-injection-A.. (suffixes only off the lab defaults)."""
    if injection == "none":
        name = BASELINE_NAME
    else:
        name = f"{INJECTION_PREFIX}{LAB_LETTERS.get(injection, injection)}"
        if step != LAB_K:
            name += f"-k{step}"
    if seed != LAB_SEED:
        name += f"-seed{seed}"
    return name


def parse_lab_run_name(name: str) -> tuple[str, int, int] | None:
    """(injection, seed, step) of a lab run's folder name (the inverse of lab_run_name for the lab's
    baseline and its A, B, C), or None for any other name. The baseline's step is the lab's K."""
    m = _NAME.match(name)
    if m is None or (m["baseline"] and m["k"]):
        return None
    injection = "none" if m["baseline"] else {v: k for k, v in LAB_LETTERS.items()}.get(m["letter"])
    if injection is None:
        return None
    return injection, int(m["seed"] or LAB_SEED), int(m["k"] or LAB_K)
