"""The three labs a learner diagnoses, and which of a lab's runs carries which fault."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minitrain.core.course import INJECTION_PREFIX, LAB_LETTERS, parse_lab_run_name
from minitrain.lab import blind
from minitrain.run import reader

PHASE = "phase-19"
REPO_ROOT = Path(__file__).resolve().parents[4]  # src/minitrain/lab/learner/labs.py -> the checkout (editable install)


@dataclass(frozen=True)
class Lab:
    key: str
    title: str
    file: str  # the learner's diagnoses file in learners/NAME/phase-19/
    reference: str  # the solutions file, relative to the repository
    runs: tuple[str, ...]  # default run ids, relative to the experiments folder


LABS = {
    "spike": Lab("spike", "lab 04, spike injection", "spike-diagnoses.md", "solutions/04-spike-injection-ref.md",
                 ("19-injection-A", "19-injection-B", "19-injection-C")),
    "blind": Lab("blind", "lab 04, spike injection, blind (shuffled and sealed)", "blind-diagnoses.md",
                 "solutions/04-spike-injection-ref.md", ("19-blind/01", "19-blind/02", "19-blind/03")),
    "break-it": Lab("break-it", "lab 02, break it (shuffled and sealed)", "break-it-diagnoses.md",
                    "solutions/02-break-it-ref.md", ("19-break-it/01", "19-break-it/02", "19-break-it/03")),
}


def lab_faults(lab: Lab) -> tuple[str, ...]:
    return tuple(blind.LABS["break-it" if lab.key == "break-it" else "spike"]["faults"])


def blind_folder(lab: Lab, experiments: Path) -> Path:
    return Path(experiments) / lab.runs[0].split("/")[0]


def fault_of(lab: Lab, run_id: str, experiments: Path, mapping: dict | None = None) -> str | None:
    """The fault a run carries: its manifest (spike lab), its name (19-injection-A/B/C) or the sealed mapping."""
    if lab.key == "spike":
        inj = reader.injection_of(reader.manifest_of(Path(experiments) / run_id))
        if inj and inj != "none":
            return inj
        parsed = parse_lab_run_name(run_id)
        return parsed[0] if parsed and parsed[0] != "none" else None
    short = run_id.split("/")[-1]
    return (mapping or {}).get(short, {}).get("fault")


def spike_run_id(fault: str, experiments: Path) -> str:
    """The lab's run folder of an injection: 19-injection-A, or the one 19-injection-A-* if only that exists."""
    name = f"{INJECTION_PREFIX}{LAB_LETTERS[fault]}"
    if (Path(experiments) / name).is_dir():
        return name
    others = sorted(p.name for p in Path(experiments).glob(f"{name}-*")
                    if (p / "manifest.json").exists() and not p.name.endswith("-remediated"))
    return others[0] if len(others) == 1 else name


def expected_runs(lab: Lab, experiments: Path, mapping: dict | None = None) -> dict[str, str]:
    """{fault: run id} for the lab's three runs."""
    if lab.key == "spike":
        return {f: spike_run_id(f, experiments) for f in lab_faults(lab)}
    out = {}
    for run in lab.runs:
        fault = fault_of(lab, run, experiments, mapping)
        if fault:
            out[fault] = run
    return out


def fault_step(run: Path, fault: str, mapping: dict | None) -> int | None:
    """The step K the run's fault was injected at (None for a break, which lasts the whole run)."""
    if fault in blind.LABS["break-it"]["faults"]:
        return None
    if mapping:
        return (mapping.get(run.name, {}).get("overrides") or {}).get("injection_step")
    return reader.config_of(reader.manifest_of(run)).get("injection_step")
