"""What a `minitrain train` process pays besides its steps, cut without changing a byte it writes:
EagerAdamW (torch's AdamW without the wrappers that import torch._dynamo), the strict JSON reader's overflow
test, each metrics file parsed once per page (reader.metrics_once) and each row encoded once by data.prepare.
docs/benchmarks.md ("Sweeps faster on one machine") has the measurements."""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from conftest import small_config
from minitrain.core.optimizer import EagerAdamW
from minitrain.run import jsonfile, reader


def adamw_pair():
    """Two copies of one small model, one with torch's fused AdamW and one with EagerAdamW, same groups."""
    out = []
    for cls in (torch.optim.AdamW, EagerAdamW):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
        groups = [{"params": [model[0].weight, model[2].weight], "weight_decay": 0.1},
                  {"params": [model[0].bias, model[2].bias], "weight_decay": 0.0}]
        out.append((model, cls(groups, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)))
    return out


def test_eager_adamw_takes_torchs_steps_bit_for_bit_and_round_trips_its_state():
    pair = adamw_pair()
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    for step in range(6):
        for model, opt in pair:
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        if step == 2:  # a checkpoint's way: the state out and back in (EagerAdamW's own methods)
            model, opt = pair[1]
            state = opt.state_dict()
            opt.load_state_dict(state)
    (m1, o1), (m2, o2) = pair
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for k in s1["state"]:
        assert all(torch.equal(s1["state"][k][n], s2["state"][k][n]) for n in ("step", "exp_avg", "exp_avg_sq"))
    seen = []  # torch's step hooks still run around EagerAdamW's step (Optimizer wraps every subclass's step)
    o2.register_step_pre_hook(lambda opt, args, kwargs: seen.append("pre"))
    o2.register_step_post_hook(lambda opt, args, kwargs: seen.append("post"))
    o2.step()
    assert seen == ["pre", "post"]
    o2.zero_grad()
    assert all(p.grad is None for p in m2.parameters())  # set_to_none, as torch's
    assert torch.is_grad_enabled()  # step restored it


def test_the_run_optimizer_never_imports_torch_dynamo():
    """In a new interpreter (this one may hold torch._dynamo from other tests): the run's optimizer built,
    stepped, saved and restored, and torch._dynamo is still not imported."""
    from minitrain import loop
    from minitrain.core.model import build_model

    cfg = small_config()
    assert isinstance(loop.make_optimizer(build_model(cfg, torch.Generator().manual_seed(0)), cfg), EagerAdamW)
    code = """
import sys, torch
from minitrain.core.optimizer import EagerAdamW
m = torch.nn.Linear(4, 4)
o = EagerAdamW(m.parameters(), lr=1e-3, fused=True)
m(torch.ones(2, 4)).sum().backward()
o.step(); o.zero_grad(); o.load_state_dict(o.state_dict())
print("torch._dynamo" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_the_overflow_test_finds_exactly_what_its_pattern_finds():
    pattern = re.compile(rb"[0-9]{300}|[eE][-+]?[0-9]{3}")
    cases = [b"", b"1e999", b"1E+308", b"-1e-400", b"1e99", b"1e+99", b"e12", b"E1234", b"9" * 299, b"9" * 300,
             b"1" + b"0" * 299, b'{"a": 1.5e-3, "b": "e000"}', b'{"x": 12e3}', b"5" * 150 + b"." + b"5" * 150]
    rng = random.Random(0)
    alphabet = b"0123456789eE+-.,:{}[]\"a "
    for _ in range(3000):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.05:
            text += bytes(rng.choice(b"0123456789") for _ in range(rng.randint(295, 305))) + text
        cases.append(text)
    for text in cases:
        assert jsonfile.may_overflow(text) == bool(pattern.search(text)), text[:40]


def test_inside_metrics_once_a_file_is_parsed_once_while_unchanged(small_baseline, tmp_path, monkeypatch):
    run = Path(shutil.copytree(small_baseline, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints")))
    parsed = []
    parse = reader.parse_metrics
    monkeypatch.setattr(reader, "parse_metrics", lambda path: parsed.append(path) or parse(path))
    path = run / reader.METRICS
    first, _ = reader.read_metrics(path)
    reader.read_metrics(path)
    assert len(parsed) == 2  # outside the scope nothing is kept
    with reader.metrics_once():
        a, _ = reader.read_metrics(path)
        b, _ = reader.read_metrics(run / ".." / "run" / reader.METRICS)
        assert len(parsed) == 3 and a == b == first and a is not b  # one parse; each caller its own list
        with path.open("a") as f:  # a row more: another file now
            f.write(json.dumps({**first[-1], "step": first[-1]["step"] + 1}) + "\n")
        c, _ = reader.read_metrics(path)
        assert len(parsed) == 4 and len(c) == len(first) + 1
    parsed.clear()
    from minitrain.lab import runs

    assert runs.write_pages(run)  # the page, its walk and the runs table beside it: the rows parsed once
    assert parsed == [path]


def test_prepare_encodes_each_row_once(monkeypatch):
    from minitrain.core import data, tokenizer

    calls = []
    encode = data.encode_row
    monkeypatch.setattr(data, "encode_row", lambda *a: calls.append(a) or encode(*a))
    monkeypatch.setattr(tokenizer, "encode_row", lambda *a: calls.append(a) or encode(*a))
    cfg = small_config("corpus_seed=7")  # not the other tests' data: prepare's cache must not answer
    got = data.prepare(cfg)
    train_rows, val_rows = data.corpus.split(got.rows, list(cfg.val_verbs), cfg.corpus_seed)
    assert len(calls) == len(train_rows) + len(val_rows)  # each row of both splits, once
