"""Training a run as a command does: the run itself (trainer.py), then its page, and one summary line.

`lab_run` is one run of the lab named as the lab names it (`just phase-19-train`); `train_run` and
`resume_run` are `minitrain train`. Each writes RUN/dashboard.html when the run ends, and rebuilds the
experiments folder's index.html.
"""
from __future__ import annotations

import sys
from pathlib import Path

from minitrain.analysis import readings
from minitrain.core import course
from minitrain.core.config import TrainConfig
from minitrain.core.errors import EXIT_NON_FINITE, Interrupted, UserError
from minitrain.lab import spoilers
from minitrain.run import reader
from minitrain.run.completion import completed
from minitrain.views import dashboard


def summary_line(name: str, res: dict) -> str:
    """One line per finished run: what the progress bar leaves behind."""
    if res.get("status") == "finished" and res.get("final_val_loss") is not None:
        ppl = f" (ppl {res['final_val_ppl']:.2f})" if res.get("final_val_ppl") is not None else ""
        return (f"{name}: finished {res['steps_done']} steps; val loss {res['final_val_loss']:.3f}{ppl} "
                f"vs n-gram {res['ngram_val_loss']:.3f} (ppl {res['ngram_val_ppl']:.2f}) "
                f"in {res['seconds_this_session']:.1f}s")
    if res.get("status") == "non_finite":
        what = (res.get("non_finite") or {}).get("what", "loss or gradient")
        return (f"{name}: stopped at step {res.get('first_nonfinite_step')}: non-finite {what} (rows up to it kept, "
                f"exit code {EXIT_NON_FINITE})")
    return f"{name}: {res.get('status')} after {res.get('steps_done')} steps"


PAGE = "dashboard.html"
REMEDIATED = "-remediated"  # RUN-remediated: `minitrain remediate RUN`'s run folder (lab/remediate.py)


def write_pages(out: Path, index: bool = True) -> bool:
    """RUN/dashboard.html after a run (its answers sealed if it is a lab exercise not yet revealed), then the
    experiments folder's index.html (`index=False`: the caller writes it once after several runs). What can
    go wrong there (a full disk, a run file damaged meanwhile) must never cost the run, so it is one warning
    line; anything else is a bug and surfaces. Returns whether the page was written.
    Ctrl-C here interrupts a run that has already ended: the message names the command that finishes the
    job (a --resume would only say the run has ended)."""
    with readings.once(), reader.metrics_once():  # the page and the runs table read and walk this run once
        return _write_pages(out, index)


def _write_pages(out: Path, index: bool) -> bool:
    if out is None or not (Path(out) / reader.METRICS).exists():
        return False
    experiments = spoilers.experiments_of(out)
    try:
        dashboard.write_dashboard(out)  # sealed or not: run/sealing.py decides
    except KeyboardInterrupt:
        raise Interrupted(f"{out} has ended and is saved, but its page was not written: run "
                          f"'minitrain dashboard {out}'") from None
    except (OSError, UserError) as e:  # the run is already safely on disk
        print(f"minitrain: warning: {PAGE} not written ({type(e).__name__}: {str(e)[:200]}); "
              f"retry with 'minitrain dashboard {out}'", file=sys.stderr)
        return False
    if index:  # the index, at the end of every command that writes a run
        try:
            spoilers.refresh(experiments)
        except KeyboardInterrupt:
            raise Interrupted(f"{out} and its page are saved, but {experiments / 'index.html'} was not "
                              f"rewritten: run 'minitrain index {experiments}'") from None
        except (OSError, UserError) as e:
            print(f"minitrain: warning: {experiments / 'index.html'} not written ({type(e).__name__}: "
                  f"{str(e)[:200]}); retry with 'minitrain index {experiments}'", file=sys.stderr)
    return True


def exit_code(*runs: Path) -> int:
    """0, or EXIT_NON_FINITE when one of these runs stopped on a non-finite value (docs/reliability.md)."""
    return EXIT_NON_FINITE if any(reader.manifest_of(r).get("status") == "non_finite" for r in runs) else 0


def train_run(cfg: TrainConfig, out: Path, index: bool = True, **kwargs) -> dict:
    from minitrain import trainer  # here: a command that fails on its arguments never imports torch

    res = trainer.train(cfg, out, **kwargs)
    if "steps_done" in res:  # under torchrun only rank 0 writes files and gets the full results
        write_pages(out, index)
    return res


def resume_run(out: Path, device: str | None = None, index: bool = True, stop_at: int | None = None) -> dict:
    from minitrain import trainer

    res = trainer.resume(out, device=device, stop_at=stop_at)
    if "steps_done" in res:
        write_pages(out, index)
        note = remediation_note(out)
        if note:
            print(note, file=sys.stderr)
    return res


def remediation_note(out: Path) -> str | None:
    """A remediation (RUN-remediated) resumed by `train --resume` has its rows but not its report: the line
    that says how to write remediation.json (`remediate` reuses the finished run), else None."""
    out = Path(out)
    original = out.parent / out.name.removesuffix(REMEDIATED)
    if not out.name.endswith(REMEDIATED) or not original.is_dir() or (out / "remediation.json").exists():
        return None
    remedy = reader.config_of(reader.manifest_of(out)).get("remedy")
    command = f"minitrain remediate {original}" + (f" --remedy {remedy}" if remedy not in (None, "none") else "")
    return (f"minitrain: note: {out} is a remediation of {original}; its rows are complete but its "
            f"remediation.json is not written: run '{command}' (it reuses this run, without training)")


def interrupted(out: Path, cfg: TrainConfig) -> bool:
    """Does `out` hold an unfinished run of exactly this config (killed, or interrupted with Ctrl-C)? Such a
    run resumes from its last checkpoint to the same bytes as an uninterrupted one (trainer.resume)."""
    from minitrain.core.config import build_config

    if not (Path(out) / "config.yaml").exists():
        return False
    if reader.manifest_of(out).get("status") in ("finished", "non_finite"):
        return False
    try:
        return build_config(reader.read_config(out)).hash() == cfg.hash()
    except UserError:  # an unreadable or blind (fields withheld) config.yaml: not ours to continue
        return False


def lab_run(cfg: TrainConfig, experiments: Path, force: bool = False, index: bool = True) -> tuple[Path, str]:
    """One run of the lab into experiments/<lab name>; a finished run of the same config is left alone, an
    interrupted one of the same config is resumed.
    Returns (folder, summary line). An injection run also gets its signature.json (expected vs observed), once
    it is not sealed (a learner lab's run gets it at the reveal).
    `index=False`: leave experiments/index.html to the caller (`minitrain lab` writes it once at the end)."""
    from minitrain.analysis import signature

    out = Path(experiments) / course.lab_run_name(cfg.injection, cfg.seed, cfg.injection_step)
    if not force and completed(out, cfg):
        line = f"{out.name}: up to date (same config, already {reader.results_of(out)['status']}); --force re-runs it"
        if not (out / PAGE).exists():  # it ended without its page (a full disk, Ctrl-C): write it now
            line += f"; wrote its missing {PAGE}" if write_pages(out, index) else f"; its {PAGE} is missing"
        return out, line
    with reader.metrics_once():  # the signature reads the rows of the run and its baseline the page has read
        if not force and interrupted(out, cfg):  # `minitrain lab` again after Ctrl-C or a kill: continue it
            res = resume_run(out, index=index)
        else:
            res = train_run(cfg, out, index=index, force=force)
        line = summary_line(out.name, res)
        # expected vs observed (a sealed run's: at the reveal)
        if cfg.injection != "none" and not spoilers.is_sealed(out):
            try:
                signature.write(out)
            except UserError as e:
                print(f"{out.name}: no signature.json yet ({e})", file=sys.stderr)
    return out, line
