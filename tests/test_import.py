"""`minitrain import`: runs made by another training loop (TensorBoard events written by
torch.utils.tensorboard.SummaryWriter, CSV and JSONL histories) become run folders the walker diagnoses."""
from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from conftest import run_cli
from minitrain.analysis import stability

VOCAB, K, STEPS = 256, 150, 240


def foreign_loop(logdir, lr_spike: float = 1.0):
    """A tiny language model trained by its own loop (no minitrain in it), logging with torch's SummaryWriter
    the tags such a loop usually writes. The fault: the LR x`lr_spike` for 10 steps from step K (a scheduler
    bug); 1.0 = healthy."""
    from torch.utils.tensorboard import SummaryWriter

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only wait on each other
    try:
        _train(logdir, lr_spike)
    finally:
        torch.set_num_threads(threads)


def _train(logdir, lr_spike: float) -> None:
    from torch.utils.tensorboard import SummaryWriter

    g = torch.Generator().manual_seed(0)
    table = torch.randint(0, VOCAB, (VOCAB,), generator=g)  # the data: each token's next token (a bigram map)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, VOCAB))
    torch.manual_seed(0)
    for m in model:
        torch.nn.init.normal_(m.weight, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    writer = SummaryWriter(str(logdir))
    val_x = torch.randint(0, VOCAB, (64,), generator=g)
    for step in range(STEPS):
        lr = 1e-2 * min(1.0, (step + 1) / 20) * (0.5 + 0.5 * math.cos(math.pi * step / STEPS))
        if K <= step < K + 10:
            lr *= lr_spike
        for group in opt.param_groups:
            group["lr"] = lr
        x = torch.randint(0, VOCAB, (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), table[x])
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        writer.add_scalar("train/loss", loss.item(), step)
        writer.add_scalar("train/lr", lr, step)
        writer.add_scalar("train/grad_norm", norm.item(), step)
        if step % 20 == 0:
            with torch.no_grad():
                writer.add_scalar("val/loss", torch.nn.functional.cross_entropy(model(val_x), table[val_x]).item(), step)
    writer.close()


def test_a_foreign_tensorboard_run_with_an_lr_spike_is_diagnosed_after_import(tmp_path):
    foreign_loop(tmp_path / "tb-lr-spike", lr_spike=30.0)
    run = tmp_path / "imported"
    r = run_cli("import", str(tmp_path / "tb-lr-spike"), "--out", str(run), "--vocab-size", str(VOCAB), check=True)
    assert "train/loss -> loss" in r.stdout and "train/grad_norm -> grad_norm" in r.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == list(range(STEPS))
    assert sum(x["val_loss"] is not None for x in rows) == STEPS // 20
    result = stability.diagnose_run(run)
    assert result["cause"] == "lr_spike", (result["leaf"], result["cause"])
    assert abs(result["anomaly_step"] - K) <= 1
    assert "§2.4" in run_cli("diagnose", str(run), check=True).stdout
    # the page reads it too
    assert run_cli("dashboard", str(run), "--no-baseline").returncode == 0 and (run / "dashboard.html").exists()


def test_csv_and_jsonl_histories_and_the_map_option(tmp_path):
    hist = [{"_step": s, "loss": 5 * math.exp(-s / 40) + 1 + 0.05 * math.sin(s), "grad_norm": 1 + 0.1 * math.cos(s),
             "learning_rate": 1e-3 * min(1, (s + 1) / 10) * (0.55 + 0.45 * math.cos(math.pi * s / 100)),
             **({"eval/loss": 5.2 - s / 100} if s % 10 == 0 else {})} for s in range(100)]
    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["_step", "loss", "learning_rate", "grad_norm", "eval/loss"])
        w.writeheader()
        w.writerows(hist)
    run_cli("import", str(path), "--out", str(tmp_path / "a"), check=True)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 100 and rows[10]["val_loss"] == pytest.approx(5.1) and rows[11]["val_loss"] is None
    walk = run_cli("diagnose", str(tmp_path / "a"), check=True).stdout  # what the source lacks is named, never guessed
    assert "not measured (this run has no params.ur" in walk and "not measured (this run has no batch.dup_rows)" in walk
    assert "not measured on this run (the verdict cannot rest on them)" in walk
    # nanoGPT's wandb.log dicts: iter, train/loss, val/loss, lr; its grad norm under a name of the user's
    jl = tmp_path / "log.jsonl"
    jl.write_text("".join(json.dumps({"iter": s, "train/loss": 4 - s / 100, "lr": 6e-4, "gn": 0.5}) + "\n"
                          for s in range(30)))
    # without the map it imports without a gradient norm, names the tag it left out, and the walk says which
    # leaves that leaves untestable instead of reading the absent norm as a value
    bare = run_cli("import", str(jl), "--out", str(tmp_path / "bare"), check=True).stdout
    assert "not imported: gn (map with --map TAG=SIGNAL)" in bare
    assert "grad_norm" not in (tmp_path / "bare" / "metrics.jsonl").read_text()
    verdict = json.loads(run_cli("diagnose", str(tmp_path / "bare"), "--json", check=True).stdout)
    assert verdict["cause"] != "non_finite" and "§1.B broken_mask" in verdict["untestable"]
    assert any("grad_norm" in t["needs"] and "clip_grad_norm_" in t["how"] for t in verdict["to_test"])
    run_cli("import", str(jl), "--out", str(tmp_path / "b"), "--map", "gn=grad_norm", check=True)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["imported"]["signals"]["grad_norm"] == "gn" and "params" in manifest["imported"]["absent"]
    again = run_cli("import", str(jl), "--out", str(tmp_path / "b"), "--map", "gn=grad_norm")
    assert again.returncode == 2 and "--force" in again.stderr  # nothing overwritten
