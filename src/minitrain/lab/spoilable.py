"""The commands that read a run's answer (its signature, its walk, the lab report, its TensorBoard events): on a
run of a learner lab that is not revealed yet each is refused, or with `spoil` logged and done (spoilers.gate)."""
from __future__ import annotations

from pathlib import Path

from minitrain.lab import spoilers


def signature(run: Path, baseline: Path | None, spoil: bool = False) -> dict:
    """RUN/signature.json, written and returned (analysis/signature.py)."""
    from minitrain.analysis import signature

    spoilers.gate(run, "signature", spoil)
    return signature.write(run, baseline)


def lab_report(experiments: Path, spoil: bool = False) -> str:
    """EXPERIMENTS/lab-report.md (and each injection run's signature.json), written and returned."""
    from minitrain.analysis import signature

    for run in spoilers.spike_runs(experiments):
        spoilers.gate(run, "report", spoil)
    return signature.report(Path(experiments))


def diagnose(run: Path, baseline: Path | None, write: bool = False, spoil: bool = False) -> dict:
    """The stability check walked over RUN (saying first when another process still writes it); with `write`,
    also RUN/diagnosis.json."""
    from minitrain.analysis import stability
    from minitrain.lab.pages import say_if_live

    spoilers.gate(run, "diagnose", spoil)
    say_if_live(run)
    result = stability.diagnose_run(run, baseline)
    if write:
        stability.write_diagnosis(run, result)
    return result


def export(run: Path, tensorboard: Path, force: bool = False, spoil: bool = False) -> dict:
    """RUN's metrics as TensorBoard event files under TENSORBOARD (views/tensorboard.py)."""
    from minitrain.views.tensorboard import export_tensorboard

    spoilers.gate(run, "export", spoil)
    return export_tensorboard(run, tensorboard, force=force)
