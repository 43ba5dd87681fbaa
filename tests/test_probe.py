"""The probe on a model the project did not write: a tiny `transformers` GPT-2 (random init, no download)
trained on the project's corpus through a plain PyTorch loop with `minitrain.probe.attach` and through the
Hugging Face Trainer with `MinitrainCallback`. The plain loop's own code scales every gradient x50 at step K;
the walker must name that cause at K there and call the Trainer's clean run healthy."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from conftest import screenshot
from minitrain.cli import main
from minitrain.core.errors import UserError

transformers = None  # the optional extra (in .[test]): imported when this module's tests start, not at collection


@pytest.fixture(scope="module", autouse=True)
def _transformers():
    """`transformers` for the module's tests (skipped without it). Imported here, not at the top: every xdist
    worker collects every module, and this import costs about a second."""
    global transformers
    transformers = pytest.importorskip("transformers")

STEPS, K = 200, 120


def rows_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def cli_json(capsys, *args: str) -> dict:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def data():
    from minitrain.core.config import build_config
    from minitrain.core.data import prepare

    torch.set_num_threads(1)
    return prepare(build_config({}, []))


def gpt2(data, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=data.tokenizer.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2,
                                  n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                                  eos_token_id=None, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def batch(data, step: int):
    b = data.train_batch(step, 8, 42)
    return b.x, (~b.key_pad).long(), b.x.masked_fill(b.key_pad, -100)


def plain_loop(data, out: Path, steps: int, scale_at: int | None = None, optimizer: str = "adamw",
               ids: bool = True, zero_grad_until: int | None = None, **options):
    """A user's own loop: warmup + cosine, clipping at 1.0; `scale_at`: the user's bug, every gradient x50;
    `zero_grad_until`: the other bug, zero_grad() no longer called from that step on (step S adds step S-1's)."""
    from minitrain.probe import attach

    model = gpt2(data)
    opt = (torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1) if optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    with attach(model, opt, out, **options) as probe:
        for step in range(steps):
            x, mask, labels = batch(data, step)
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
            loss.backward()
            if step == scale_at:
                for p in model.parameters():
                    p.grad.mul_(50.0)
            probe.log(loss, x if ids else None, attention_mask=mask if ids else None)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if zero_grad_until is None or step + 1 < zero_grad_until:
                opt.zero_grad(set_to_none=True)
    return out


def train_with_trainer(data, out: Path, steps: int, batch_size: int, accumulate: int = 1, eval_every: int = 0,
                       **options):
    """The Trainer on the corpus rows, with MinitrainCallback; returns (out, [(step, the Trainer's own logged
    pre-clip grad_norm, its logged loss)]) to check the probe against."""
    from minitrain.core.tokenizer import PAD
    from minitrain.probe.hf import MinitrainCallback

    class Rows(torch.utils.data.Dataset):
        def __init__(self, split, n=None):
            self.ids = split.ids[:n]

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            x = self.ids[i]
            return {"input_ids": x, "attention_mask": (x != PAD).long(), "labels": x.masked_fill(x == PAD, -100)}

    logged: list[tuple] = []

    class Keep(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "grad_norm" in logs:
                logged.append((state.global_step - 1, logs["grad_norm"], logs.get("loss")))
            if logs and "eval_loss" in logs:
                logged.append((state.global_step, "eval", logs["eval_loss"]))

    evaluation = {"eval_strategy": "steps", "eval_steps": eval_every, "per_device_eval_batch_size": 32}
    args = transformers.TrainingArguments(
        output_dir=str(out.parent / ".hf"), max_steps=steps, per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulate, learning_rate=2e-3, warmup_steps=20, weight_decay=0.1,
        max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, **(evaluation if eval_every else {}))
    trainer = transformers.Trainer(model=gpt2(data), args=args, train_dataset=Rows(data.train),
                                   eval_dataset=Rows(data.val, 64) if eval_every else None,
                                   callbacks=[MinitrainCallback(out, tokenizer=data.tokenizer, **options), Keep()])
    trainer.remove_callback(transformers.PrinterCallback)
    trainer.train()
    return out, logged


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data):
    """Both runs of the issue, in one experiments folder: the plain loop with the x50 bug at K, and the
    Trainer's clean run (which also records the Trainer's own per-step logs to check the probe against)."""
    exp = tmp_path_factory.mktemp("experiments")
    plain = plain_loop(data, exp / "plain-x50", STEPS, scale_at=K, tokenizer=data.tokenizer,
                       token_counts=data.token_counts, config={"lr_max": 2e-3, "warmup_steps": 20, "grad_clip": 1.0})
    hf, logs = train_with_trainer(data, exp / "hf-clean", STEPS, batch_size=8, token_counts=data.token_counts)
    return {"exp": exp, "plain": plain, "hf": hf, "hf_logs": logs}


def test_plain_loop_writes_the_run_folder_format(runs):
    run = runs["plain"]
    for name in ("manifest.json", "metrics.jsonl", "results.json", "tokenizer.json"):
        assert (run / name).exists(), name
    rows = rows_of(run)
    assert [r["step"] for r in rows] == list(range(STEPS))
    keys = list(rows[5])
    assert keys[:8] == ["step", "loss", "lr", "grad_norm", "grad_norm_clipped", "clipped", "val_loss", "injected"]
    assert {"logit_max", "act", "params", "nonfinite", "batch"} <= set(keys)
    assert len(rows[5]["act"]) == 2  # GPT-2's two blocks (transformer.h)
    assert set(rows[10]["params"]["transformer.wte.weight"]) == {"g", "u", "ur", "vm", "vx", "vn", "r"}  # detail step
    assert {"g", "vm"} <= set(rows[5]["params"]["transformer.wte.weight"])  # every step
    assert set(rows[K]["params"]["transformer.wte.weight"]) == {"g", "u", "ur", "vm", "vx", "vn", "r"}  # triggered
    assert rows[5]["batch"]["rows"] == [None] * 8
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["probe"]["model"] == "GPT2LMHeadModel"
    assert manifest["probe"]["absent"] == {}
    assert json.loads((run / "results.json").read_text())["steps_done"] == STEPS


def test_pre_clip_norm_is_measured_before_the_users_clipping(runs):
    rows = rows_of(runs["plain"])
    at_k = rows[K]
    med = sorted(r["grad_norm"] for r in rows[K - 20:K])[10]
    assert at_k["grad_norm"] > 30 * med  # the x50 the user's code made, seen before clipping
    assert at_k["clipped"] and at_k["grad_norm_clipped"] == pytest.approx(1.0, rel=1e-5)  # what the optimizer got
    per_tensor = math.sqrt(sum(st["g"] ** 2 for st in at_k["params"].values()))
    assert per_tensor == pytest.approx(at_k["grad_norm"], rel=1e-3)  # per-tensor g are pre-clip too


def test_trainer_grad_norm_matches_the_trainers_own(runs):
    """The Trainer clips inside its loop, out of the callback's reach; the probe's pre-clip norm must still
    equal the norm the Trainer's own clip_grad_norm_ returned (its logged grad_norm)."""
    rows = rows_of(runs["hf"])
    assert len(rows) == STEPS
    logged = {step: gn for step, gn, _ in runs["hf_logs"]}
    assert len(logged) == STEPS
    for row in rows:
        assert row["grad_norm"] == pytest.approx(logged[row["step"]], rel=1e-5)
        assert row["grad_norm_clipped"] <= 1.0 + 1e-5
    manifest = json.loads((runs["hf"] / "manifest.json").read_text())
    assert manifest["probe"]["kind"] == "transformers Trainer"
    assert manifest["config"]["warmup_steps"] == 20 and manifest["config"]["grad_clip"] == 1.0


def test_trainer_with_gradient_accumulation(tmp_path, data):
    """Two micro-batches per step: one row per optimizer step, its loss the step's (the Trainer's own logged
    loss) and its pre-clip norm the Trainer's, its composition over both micro-batches' rows; the Trainer's
    evaluations land as val_loss where minitrain measures it (before the step's update)."""
    run, logged = train_with_trainer(data, tmp_path / "ga", 8, batch_size=4, accumulate=2, eval_every=4)
    rows = rows_of(run)
    steps = [(s, gn, loss) for s, gn, loss in logged if gn != "eval"]
    assert [r["step"] for r in rows] == list(range(8)) == [s for s, _, _ in steps]
    for row, (_, gn, loss) in zip(rows, steps):
        assert row["grad_norm"] == pytest.approx(gn, rel=1e-6) and row["loss"] == pytest.approx(loss, rel=1e-5)
        assert len(row["batch"]["rows"]) == 8
    # the Trainer evaluates after 4 and 8 updates: before step 4's update (row 4), and after the last step
    evals = {s: loss for s, kind, loss in logged if kind == "eval"}
    assert [r["step"] for r in rows if r["val_loss"] is not None] == [4]
    assert rows[4]["val_loss"] == pytest.approx(evals[4], rel=1e-6)
    assert json.loads((run / "results.json").read_text())["final_val_loss"] == pytest.approx(evals[8], rel=1e-6)


def test_diagnose_names_the_users_x50_at_k(runs, capsys):
    d = cli_json(capsys, "diagnose", str(runs["plain"]))
    assert (d["cause"], d["anomaly_step"], d["leaf"]) == ("gradient_explosion", K, "§7.A")


def test_diagnose_calls_the_trainer_run_healthy(runs, capsys):
    d = cli_json(capsys, "diagnose", str(runs["hf"]))
    assert d["cause"] == "healthy", d["path"]
    # no natural-instability signals (§2.6, §2.7), too short a run for the LR's size (§2.5), no validation loss or
    # n-gram baseline on a foreign run: each leaf those lead to is listed as not testable
    assert d["not_measured"] == ["§2.6", "§2.7", "§2.5", "§3.2", "§3.4"]
    assert "§2.E lr_too_high" in d["untestable"]


def test_index_lists_probe_runs(runs, capsys):
    assert main(["index", str(runs["exp"])]) == 0
    page = (runs["exp"] / "index.html").read_text()
    assert "plain-x50" in page and "hf-clean" in page


def test_absent_signals_are_recorded_and_not_measured(tmp_path, data, capsys):
    """SGD keeps no Adam moments and the loop passes no token ids: those signals are left out of the rows,
    named in the manifest, and the walker marks the questions that read them 'not measured'."""
    run = plain_loop(data, tmp_path / "sgd", 40, optimizer="sgd", ids=False)
    rows = rows_of(run)
    assert "batch" not in rows[3] and "params" not in rows[3] and rows[3]["grad_norm"] > 0
    absent = json.loads((run / "manifest.json").read_text())["probe"]["absent"]
    assert set(absent) == {"batch", "params"}
    d = cli_json(capsys, "diagnose", str(run))
    assert {"§2.5", "§4.1", "§6.1", "§6.3", "§7.1", "§7.2"} <= set(d["not_measured"])
    text = [p for p in d["walk"] if p["node"] == "§4.1"][0]["measured"]
    assert text.startswith("not measured")


def test_a_model_without_blocks_or_logits_structure(tmp_path, data, capsys):
    """A plain nn.Sequential language model: its output tensor is the logits, it has no list of blocks (no
    activations, named as absent) and, with no tokenizer, the vocabulary is the logits' width."""
    from minitrain.core.tokenizer import PAD
    from minitrain.probe import attach

    torch.manual_seed(0)
    vocab = data.tokenizer.get_vocab_size()
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with attach(model, opt, tmp_path / "seq", pad_id=PAD) as probe:
        for step in range(6):
            x, mask, _ = batch(data, step)
            loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
            loss.backward()
            probe.log(loss, x)
            opt.step()
            opt.zero_grad()
    rows = rows_of(tmp_path / "seq")
    assert "act" not in rows[0] and rows[0]["logit_max"] > 0
    assert set(rows[0]["params"]) == {"0.weight", "1.weight", "1.bias"}
    assert rows[0]["batch"]["distinct_tokens"] > 1
    manifest = json.loads((tmp_path / "seq" / "manifest.json").read_text())
    assert set(manifest["probe"]["absent"]) == {"act"} and manifest["config"]["vocab_size"] == vocab


def test_same_loop_twice_gives_the_same_bytes(tmp_path, data):
    a = plain_loop(data, tmp_path / "a", 25, tokenizer=data.tokenizer)
    b = plain_loop(data, tmp_path / "b", 25, tokenizer=data.tokenizer)
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()


def test_the_probe_changes_nothing_in_the_training(tmp_path, data):
    """The same loop without the probe gives bit-identical losses and final weights: hooks only read."""
    steps = 15
    model = gpt2(data)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, mask, labels = batch(data, step)
        loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
        loss.backward()
        losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    from minitrain.probe import attach

    probed = gpt2(data)
    popt = torch.optim.AdamW(probed.parameters(), lr=2e-3, weight_decay=0.1)
    with attach(probed, popt, tmp_path / "probed") as probe:
        for step in range(steps):
            x, mask, labels = batch(data, step)
            loss = probed(input_ids=x, attention_mask=mask, labels=labels).loss
            loss.backward()
            probe.log(loss, x, attention_mask=mask)
            torch.nn.utils.clip_grad_norm_(probed.parameters(), 1.0)
            popt.step()
            popt.zero_grad(set_to_none=True)
    assert [r["loss"] for r in rows_of(tmp_path / "probed")] == losses
    for (name, a), b in zip(model.named_parameters(), probed.parameters()):
        assert torch.equal(a, b), name


def test_grads_at_backward_lets_log_come_after_the_step(tmp_path, data):
    """grads_at='backward' reads the pre-clip norms when backward ends, so log() may come after the step
    (where many loops log): the same rows, byte for byte, as log() before clipping."""
    from minitrain.probe import attach

    before = plain_loop(data, tmp_path / "before", 12, tokenizer=data.tokenizer)
    model = gpt2(data)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / 12))))
    with attach(model, opt, tmp_path / "after", tokenizer=data.tokenizer, grads_at="backward") as probe:
        for step in range(12):
            x, mask, labels = batch(data, step)
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            probe.log(loss, x, attention_mask=mask)
    assert (tmp_path / "after" / "metrics.jsonl").read_bytes() == (before / "metrics.jsonl").read_bytes()


def test_a_non_finite_loss_is_recorded_and_diagnosed(tmp_path, data, capsys):
    """The user's loop goes on after a NaN; the probe records it, the status says non_finite, the walker says
    where it started."""
    from minitrain.probe import attach

    model = gpt2(data)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 12)  # a warmup: §2 has nothing to say
    with attach(model, opt, tmp_path / "nan") as probe:
        for step in range(12):
            x, mask, labels = batch(data, step)
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss * (math.nan if step == 7 else 1.0)
            loss.backward()
            probe.log(loss, x, attention_mask=mask)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    rows = rows_of(tmp_path / "nan")
    assert len(rows) == 12 and rows[6]["loss"] is not None and rows[7]["loss"] is None and rows[7]["nonfinite"] > 0
    assert json.loads((tmp_path / "nan" / "results.json").read_text())["first_nonfinite_step"] == 7
    assert json.loads((tmp_path / "nan" / "manifest.json").read_text())["status"] == "non_finite"
    d = cli_json(capsys, "diagnose", str(tmp_path / "nan"))
    assert (d["cause"], d["anomaly_step"]) == ("non_finite", 7)


def test_checkpoints_are_minitrain_checkpoints(tmp_path, data):
    from minitrain.run.files import checkpoint_dir, list_checkpoints, load_checkpoint

    run = plain_loop(data, tmp_path / "ck", 20, ckpt_every=10)
    assert list_checkpoints(run) == [10, 20]
    weights, opt, meta = load_checkpoint(checkpoint_dir(run, 10))
    assert "transformer.wte.weight" in weights and "exp_avg_sq.transformer.wte.weight" in opt
    assert (run / "metrics.jsonl").read_bytes()[:meta["metrics_bytes"]].count(b"\n") == 10


def test_refuses_a_folder_holding_a_run_and_a_misplaced_log(tmp_path, data):
    from minitrain.probe import attach

    model = gpt2(data)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = plain_loop(data, tmp_path / "r", 3)
    with pytest.raises(UserError, match="already holds a run"):
        attach(model, opt, run)
    probe = attach(model, opt, tmp_path / "late")
    x, mask, labels = batch(data, 0)
    loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
    with pytest.raises(UserError, match="after loss.backward"):
        probe.log(loss)  # before backward: nothing to measure yet
    loss.backward()
    with pytest.raises(UserError, match="before clipping and optimizer.step"):
        opt.step()  # the user forgot probe.log(loss) before the step
    assert probe.closed and json.loads((tmp_path / "late" / "results.json").read_text())["steps_done"] == 0


def test_dashboard_of_a_probe_run_renders_in_chromium(runs, browser):
    """`minitrain dashboard` on a probe run: the page opens offline in headless Chromium, draws the foreign
    model's panels (its own tensor names, its two blocks) and logs no error."""
    assert main(["dashboard", str(runs["plain"])]) == 0
    errors, requests = [], []
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                   else (requests.append(route.request.url), route.abort()))
        page.goto((runs["plain"] / "dashboard.html").resolve().as_uri())
        page.wait_for_function("window.__dashboardReady === true", timeout=30_000)
        text = page.inner_text("body")
        titles = page.locator(".panel h2").all_text_contents()
        screenshot(page, "probe-dashboard.png")
    finally:
        context.close()
    assert errors == [] and requests == []
    assert any("Loss" in t for t in titles) and any("Gradient norm" in t for t in titles)
    assert "transformer.wte.weight" in text or "transformer.h.0" in text


def test_tensorboard_export_of_a_probe_run(runs, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["export", str(runs["hf"]), "--tensorboard", str(tmp_path / "tb")]) == 0
    acc = EventAccumulator(str(tmp_path / "tb" / "hf-clean"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "transformer.h.1.attn.c_attn.weight/adam_v_mean" in tags and "loss/regular" not in tags
    assert len(acc.Scalars("grad_norm/pre_clip")) == STEPS
    summary = acc.Tensors("run/summary")[0].tensor_proto.string_val[0].decode()
    assert "GPT2LMHeadModel" in summary and "transformers Trainer" in summary


def test_a_loop_that_stops_zeroing_gradients_is_named_at_that_step(tmp_path, data, capsys):
    """The user's loop (AdamW, warmup, decaying LR) forgets optimizer.zero_grad() from step S; the
    probe's gradient hooks see the optimizer get the fresh gradient plus the last step's, and the walker names
    grads_not_zeroed at S, not a gradient explosion later."""
    run = plain_loop(data, tmp_path / "no-zero-grad", 140, zero_grad_until=100)
    d = cli_json(capsys, "diagnose", str(run))
    assert (d["cause"], d["anomaly_step"], d["leaf"]) == ("grads_not_zeroed", 100, "§9.A")
