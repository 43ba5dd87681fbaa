"""`minitrain import` on the formats other trainers write (run/formats.py), each fixture made the way its trainer
makes it: by the trainer's own code where it is installed here (transformers' TrainerState and GPT2Config,
torch's SummaryWriter), by hand from the documented format where not (Lightning's CSVLogger, nanoGPT's printed
log, a W&B panel export); and the walker's honest verdict on what such a log cannot test."""
from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import run_cli
from minitrain.run import importer

STEPS = 120


def loss_at(step: int, v: int = 67) -> float:
    """A healthy curve: ln V at the start, falling smoothly with a little batch noise."""
    return 0.6 * math.log(v) * math.exp(-step / 40) + 0.4 * math.log(v) + 0.03 * math.sin(1.7 * step)


def diagnosis(run) -> dict:
    return json.loads(run_cli("diagnose", str(run), "--json", check=True).stdout)


def test_hf_trainer_state_and_config_are_read_with_their_vocabulary_and_logging_interval(tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf-out"
    transformers.GPT2Config(vocab_size=67, n_layer=1, n_embd=16, n_head=2).save_pretrained(out)  # config.json
    state = transformers.TrainerState(logging_steps=1, max_steps=STEPS, train_batch_size=16)
    state.log_history = [{"loss": loss_at(s), "grad_norm": 1.0 + 0.1 * math.cos(s), "learning_rate": 5e-5,
                          "epoch": s / STEPS, "step": s} for s in range(1, STEPS + 1)]
    state.log_history.append({"train_runtime": 3.2, "train_loss": 2.9, "total_flos": 1.0, "step": STEPS})
    state.save_to_json(str(out / "trainer_state.json"))
    got = run_cli("import", str(out / "trainer_state.json"), "--out", str(tmp_path / "run"), check=True).stdout
    assert "vocab_size 67" in got and "config.json vocab_size" in got and "trainer_state.json logging_steps" in got
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS and rows[0]["step"] == 1  # the summary's run-mean train_loss is not a step
    d = diagnosis(tmp_path / "run")
    # V read from config.json: the step-0 loss is judged against ln 67, and HF's default 5e-5 needs no warmup
    assert d["cause"] == "healthy", d["cause"]
    assert "§2.E lr_too_high" in d["untestable"] and "§2.A lr_schedule" in d["untestable"]


def test_a_tensorboard_parent_folder_with_one_run_is_read_and_with_two_is_refused_by_name(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    runs = tmp_path / "runs"
    writer = SummaryWriter(str(runs / "Dec03_10-00-00_host"))  # SummaryWriter()'s default: runs/<date>_<host>
    for s in range(STEPS):
        writer.add_scalar("train/loss", loss_at(s, 25), s)
        writer.add_scalar("lr", 1e-3 * min(1, (s + 1) / 20), s)
    writer.close()
    got = run_cli("import", str(runs), "--out", str(tmp_path / "one"), check=True).stdout
    assert f"{STEPS} steps from a tensorboard history" in got and "unknown: vocab_size" in got
    d = diagnosis(tmp_path / "one")
    # no V and no gradient norm: the step-0 and norm leaves are untestable, never read against a guessed V
    assert d["cause"] == "healthy" and "§1.A bad_init" in d["untestable"] and "§1.B broken_mask" in d["untestable"]
    SummaryWriter(str(runs / "Dec03_11-00-00_host")).close()
    writer = SummaryWriter(str(runs / "Dec03_11-00-00_host"))
    writer.add_scalar("train/loss", 3.0, 0)
    writer.close()
    bad = run_cli("import", str(runs), "--out", str(tmp_path / "two"))
    assert bad.returncode == 2 and "2 TensorBoard runs" in bad.stderr and "Dec03_10-00-00_host" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_lightning_metrics_csv_every_50_steps_makes_the_step0_and_one_step_leaves_untestable(tmp_path):
    # by hand, as lightning.pytorch.loggers.CSVLogger writes it (Lightning docs, "CSVLogger"): one row per
    # log_metrics call, columns epoch, step and each metric; LearningRateMonitor's `lr-Adam` on rows of its own;
    # log_every_n_steps=50, so the first training row is step 49
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["epoch", "lr-Adam", "step", "train_loss"])
        w.writeheader()
        for s in range(49, 400, 50):
            w.writerow({"epoch": 0, "lr-Adam": 3e-4, "step": s, "train_loss": ""})
            w.writerow({"epoch": 0, "lr-Adam": "", "step": s, "train_loss": loss_at(s, 256)})
    got = run_cli("import", str(path), "--out", str(tmp_path / "run"), check=True).stdout
    assert "lr-Adam -> lr" in got and "train_loss -> loss" in got and "log_every 50 (the logged steps)" in got
    d = diagnosis(tmp_path / "run")
    assert d["cause"] == "healthy" and "§1.A bad_init" in d["untestable"]  # step 49 is not the untrained model
    assert "§4.B stuck_loader" in d["untestable"]


def test_nanogpt_printed_log_is_read(tmp_path):
    # by hand, as nanoGPT's train.py prints it (github.com/karpathy/nanoGPT, train.py's print calls)
    lines = []
    for s in range(STEPS):
        if s % 50 == 0:
            lines.append(f"step {s}: train loss {loss_at(s, 65):.4f}, val loss {loss_at(s, 65) + 0.02:.4f}")
        lines.append(f"iter {s}: loss {loss_at(s, 65):.4f}, time 35.12ms, mfu 1.20%")
    (tmp_path / "train.log").write_text("number of parameters: 0.80M\n" + "\n".join(lines) + "\n")
    got = run_cli("import", str(tmp_path / "train.log"), "--out", str(tmp_path / "run"), "--vocab-size", "65",
                  check=True).stdout
    assert f"{STEPS} steps from a printed_log history" in got and "val_loss" in got
    d = diagnosis(tmp_path / "run")
    assert d["cause"] == "healthy" and "§2.D lr_spike" in d["untestable"]  # no LR in a printed log


def test_a_wandb_panel_export_is_read_by_its_metric(tmp_path):
    # by hand, as a W&B chart's "Export CSV" writes it: Step, then "<run> - <metric>" and its __MIN / __MAX band
    path = tmp_path / "wandb_export.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Step", "ruby-sun-3 - train/loss", "ruby-sun-3 - train/loss__MIN", "ruby-sun-3 - train/loss__MAX"])
        for s in range(STEPS):
            w.writerow([s, loss_at(s), loss_at(s), loss_at(s)])
    got = run_cli("import", str(path), "--out", str(tmp_path / "run"), check=True).stdout
    assert "train/loss -> loss" in got and "__MIN" not in got


@pytest.mark.parametrize("tag,signal", [
    ("grad_2.0_norm_total", "grad_norm"), ("gnorm", "grad_norm"), ("lm loss", "loss"), ("learning-rate", "lr"),
    ("grad-norm", "grad_norm"), ("loss/train/total", "loss"), ("lr-DecoupledAdamW/group0", "lr"),
    ("loss_metrics/global_avg_loss", "loss"), ("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr"),
])
def test_the_common_trainers_tags_need_no_map(tag, signal):
    assert importer.signal_of(tag, {}) == signal


def test_a_constant_adam_lr_and_a_small_vocabulary_are_not_faults(tmp_path):
    # the loop people write first: Adam at a constant 3e-4, a character vocabulary (V = 30), every step logged
    path = tmp_path / "log.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "lr", "grad_norm"])
        for s in range(300):
            w.writerow([s, loss_at(s, 30), 3e-4, 1.0 + 0.1 * math.cos(s)])
    run_cli("import", str(path), "--out", str(tmp_path / "run"), "--vocab-size", "30", check=True)
    d = diagnosis(tmp_path / "run")
    assert d["cause"] == "healthy", d  # not lr_schedule (a constant LR is a choice), not no_warmup, not bad_init
    assert "§2.A lr_schedule" in d["untestable"]


def test_the_readme_import_commands_work_as_written(tmp_path):
    """The README's three imports and its diagnose, run as written in a folder holding the files they name."""
    import re
    import shlex
    from pathlib import Path

    from torch.utils.tensorboard import SummaryWriter

    transformers = pytest.importorskip("transformers")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## Someone else's run.*?```bash\n(.*?)```", readme, re.S).group(1)
    lines = [shlex.split(x)[2:] for x in block.strip().splitlines()]  # without ./dev minitrain
    assert [x[0] for x in lines] == ["import", "import", "import", "diagnose"]
    out = tmp_path / "hf-output"
    transformers.GPT2Config(vocab_size=67, n_layer=1, n_embd=16, n_head=2).save_pretrained(out)
    state = transformers.TrainerState(logging_steps=1, max_steps=STEPS, train_batch_size=16)
    state.log_history = [{"loss": loss_at(s), "grad_norm": 1.0, "learning_rate": 5e-5, "step": s}
                         for s in range(1, STEPS + 1)]
    state.save_to_json(str(out / "trainer_state.json"))
    writer = SummaryWriter(str(tmp_path / "runs" / "Dec03_10-00-00_host"))
    for s in range(STEPS):
        writer.add_scalar("train/loss", loss_at(s, 65), s)
    writer.close()
    with open(tmp_path / "log.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "lr", "grad_norm"])
        w.writerows([s, loss_at(s, 256), 3e-4, 1.0] for s in range(STEPS))
    for args in lines:
        run_cli(*args, cwd=tmp_path, check=True)
    assert json.loads(run_cli("diagnose", "imported/hf", "--json", cwd=tmp_path, check=True).stdout)["cause"] == "healthy"
