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


# --- what a history file can hold that is not a clean log (issue 37) ----------------------------------------


def write_csv(path, header, rows, prefix=b""):
    path.write_bytes(prefix + ("\n".join([",".join(header), *(",".join(map(str, r)) for r in rows)]) + "\n").encode())
    return path


def imported(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((run / "manifest.json").read_text())


def healthy(steps, every=1):
    return [(s, 3 - s / 1000, 1e-3, 0.5) for s in range(0, steps, every)]


def test_a_loss_that_turns_nan_as_printf_writes_it_is_a_non_finite_run(tmp_path):
    """C's printf writes -nan: a number (not text to skip), so the run is non_finite at that step."""
    rows = [(s, "-nan" if s >= 150 else 3 - s / 1000, 1e-3, 0.5) for s in range(200)]
    run_cli("import", str(write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], rows)), "--out",
            str(tmp_path / "r"), check=True)
    got, manifest = imported(tmp_path / "r")
    assert len(got) == 200 and got[150]["loss"] is None and manifest["status"] == "non_finite"
    assert json.loads((tmp_path / "r" / "results.json").read_text())["non_finite"]["step"] == 150


def test_empty_cells_are_carried_forward_and_the_manifest_says_how_many(tmp_path):
    rows = [(s, 3 - s / 1000, 1e-3 if s % 10 == 0 else "", 0.5) for s in range(100)]
    proc = run_cli("import", str(write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], rows)), "--out",
                   str(tmp_path / "r"), check=True)
    got, manifest = imported(tmp_path / "r")
    assert [r["lr"] for r in got] == [1e-3] * 100
    assert manifest["imported"]["carried_forward"] == {"lr": 90} and "lr at 90 steps" in proc.stdout


@pytest.mark.parametrize("cell, needle", [("=A2*2", "'=A2*2', which is not a number"),
                                          ("0.5\0", "NUL byte")])
def test_a_formula_or_a_nul_in_a_signal_column_is_one_line(tmp_path, cell, needle):
    rows = healthy(20)
    rows[7] = (7, 2.9, cell, 0.5)
    from conftest import assert_one_line_error

    proc = run_cli("import", str(write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], rows)), "--out",
                   str(tmp_path / "r"))
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "r").exists()


def test_a_byte_order_mark_before_the_header_keeps_the_step_column(tmp_path):
    src = write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], healthy(30, 10), prefix=b"\xef\xbb\xbf")
    run_cli("import", str(src), "--out", str(tmp_path / "r"), check=True)
    assert [r["step"] for r in imported(tmp_path / "r")[0]] == [0, 10, 20]
    jl = tmp_path / "h.jsonl"
    jl.write_bytes(b"\xef\xbb\xbf" + b"".join(json.dumps({"step": s, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0}).encode()
                                              + b"\n" for s in (0, 10, 20)))
    run_cli("import", str(jl), "--out", str(tmp_path / "j"), check=True)
    assert [r["step"] for r in imported(tmp_path / "j")[0]] == [0, 10, 20]


@pytest.mark.parametrize("step", ["0.5", "1e300", "nan"])
def test_a_step_that_is_not_a_whole_number_a_reader_keeps_is_one_line(tmp_path, step):
    from conftest import assert_one_line_error

    rows = [(0, 3.0, 1e-3, 0.5), (step, 2.9, 1e-3, 0.5), (2, 2.8, 1e-3, 0.5)]
    proc = run_cli("import", str(write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], rows)), "--out",
                   str(tmp_path / "r"))
    assert_one_line_error(proc, "is not a whole number")


def test_a_row_cut_short_is_damage_not_a_missing_value(tmp_path):
    from conftest import assert_one_line_error

    src = write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], healthy(10))
    src.write_bytes(src.read_bytes()[:-9])  # the last row ends inside its lr cell
    assert_one_line_error(run_cli("import", str(src), "--out", str(tmp_path / "r")), "damaged or truncated")


def test_a_truncated_events_file_is_damaged_not_a_shorter_finished_run(tmp_path):
    from conftest import assert_one_line_error

    foreign_loop(tmp_path / "tb")
    (events,) = (tmp_path / "tb").glob("events.out.tfevents*")
    whole = events.read_bytes()
    events.write_bytes(whole[:len(whole) * 2 // 3])
    assert_one_line_error(run_cli("import", str(tmp_path / "tb"), "--out", str(tmp_path / "r")), "damaged or truncated")
    events.write_bytes(whole[:20])  # cut inside its first record: no tag read at all
    assert_one_line_error(run_cli("import", str(events), "--out", str(tmp_path / "r")), "damaged or truncated")
    assert not (tmp_path / "r").exists()


def test_a_fifo_a_device_or_a_file_too_large_is_refused_before_reading(tmp_path, monkeypatch):
    import os
    import threading

    from conftest import assert_one_line_error
    from minitrain.run import importer

    fifo = tmp_path / "h.csv"
    os.mkfifo(fifo)
    # a writer that opens and closes at once: a reader that opened the FIFO would read nothing, not hang
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        assert_one_line_error(run_cli("import", str(fifo), "--out", str(tmp_path / "r")), "not a regular file")
    finally:
        # a reader held open until the writer has joined lets its open return, whenever the thread gets to it
        held = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        writer.join()
        os.close(held)
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    assert_one_line_error(run_cli("import", str(tmp_path / "zero.csv"), "--out", str(tmp_path / "r")), "not a regular file")
    monkeypatch.setattr(importer, "MAX_SOURCE_BYTES", 100)
    big = write_csv(tmp_path / "big.csv", ["step", "loss", "lr", "grad_norm"], healthy(50))
    assert_one_line_error(run_cli("import", str(big), "--out", str(tmp_path / "r")), "MiB a history may be")
    assert not (tmp_path / "r").exists()


def test_a_csv_text_field_over_128_kib_is_a_cell(tmp_path):
    rows = [(s, 3.0, 1e-3, 0.5, "x" * 200_000 if s == 1 else "a") for s in range(5)]
    proc = run_cli("import", str(write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm", "config"], rows)),
                   "--out", str(tmp_path / "r"), check=True)
    assert "not imported: config" in proc.stdout


def test_importing_twice_does_not_suggest_a_resume_import_does_not_have(tmp_path):
    src = write_csv(tmp_path / "h.csv", ["step", "loss", "lr", "grad_norm"], healthy(10))
    run_cli("import", str(src), "--out", str(tmp_path / "r"), check=True)
    again = run_cli("import", str(src), "--out", str(tmp_path / "r"))
    assert again.returncode == 2 and "--force" in again.stderr and "--resume" not in again.stderr


class CountingDict(dict):
    """A signal's points that count how many of them any pass reads."""
    reads = 0

    def __iter__(self):
        for k in super().__iter__():
            CountingDict.reads += 1
            yield k

    def items(self):
        CountingDict.reads += len(self)
        return super().items()

    def keys(self):
        CountingDict.reads += len(self)
        return super().keys()


def test_sparse_signals_are_carried_forward_in_one_pass(tmp_path):
    """The work of filling a signal logged every 10th step (and a validation loss every 100th) is linear in
    the rows: each point is read a bounded number of times, not once per row (docs/benchmarks.md times
    10^6 rows)."""
    from minitrain.run import importer

    n = 5000
    series = importer.Series()
    series.update({"loss": {s: 2.0 for s in range(n)}, "grad_norm": {s: 1.0 for s in range(n)},
                   "lr": CountingDict({s: 1e-3 for s in range(0, n, 10)}),
                   "val_loss": CountingDict({s: 2.5 for s in range(0, n, 100)})})
    CountingDict.reads = 0
    rows, _, notes = importer.build_rows(series, {}, tmp_path / "h.csv")
    assert len(rows) == n and notes["carried_forward"] == {"lr": n - n // 10}
    assert CountingDict.reads <= 4 * (n // 10 + n // 100), CountingDict.reads
