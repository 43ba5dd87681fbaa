"""The natural-instability options and signals (docs/natural-instabilities.md): qk_norm, z_loss, update_clip
(each equal to the plain model when off, its defining property when on), the signals natural_signals adds on
detail steps, the tree's §2.6-§2.8, and the lr-sweep machinery on a tiny grid."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import small_config
from minitrain import loop
from minitrain.analysis import checks, lrsweep as judge
from minitrain.analysis.evidence import Evidence
from minitrain.analysis.thresholds import T
from minitrain.analysis.walk import walk
from minitrain.core import telemetry
from minitrain.core.model import build_model
from minitrain.core.update_clip import clip_updates


def _steps(cfg, n):
    run = loop.build_run(cfg)
    return run, [loop.train_step(run, s) for s in range(n)]


def test_the_options_off_are_the_plain_model_and_keep_the_config_hash():
    """Written out at their defaults, the three options change neither the hash nor one byte of the rows."""
    plain = small_config()
    off = small_config("qk_norm=false", "z_loss=0", "update_clip=false", "natural_signals=false")
    assert off.hash() == plain.hash() and off.trunk_hash() == plain.trunk_hash()
    assert small_config("qk_norm=true").hash() != plain.hash()
    _, a = _steps(plain, 6)
    _, b = _steps(off, 6)
    assert json.dumps(a) == json.dumps(b)


def test_qk_norm_normalises_each_heads_queries_and_keys():
    """With qk_norm every head's query and key is a LayerNorm output (gain 1 at init): mean 0, |x| = sqrt(d_head)
    before RoPE, and RoPE is a rotation, so the norm survives into the attention; without it, it does not."""
    for on in (True, False):
        cfg = small_config(f"qk_norm={str(on).lower()}")
        model = build_model(cfg, torch.Generator().manual_seed(0))
        model.record_attention(True)
        x = torch.randint(3, cfg.vocab_size, (2, 12))
        model(x, torch.zeros(2, 12, dtype=torch.bool))
        d_head = cfg.d_model // cfg.n_head
        norms = model.blocks[0].attn.last_qk.norm(dim=-1)
        assert torch.allclose(norms, torch.full_like(norms, math.sqrt(d_head)), rtol=1e-3) == on
    names = [n for n, _ in build_model(small_config("qk_norm=true"), torch.Generator().manual_seed(0)).named_parameters()]
    assert "blocks.0.attn.q_ln.weight" in names and "blocks.1.attn.k_ln.weight" in names


def test_z_loss_adds_2_c_logz_softmax_to_the_logits_gradient():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(7, 11, generator=g) * 3).requires_grad_()
    c, count = 1e-2, torch.tensor(7.0)
    loop.z_loss_term(logits, c, count).backward()
    logz = torch.logsumexp(logits.detach(), -1, keepdim=True)
    expect = 2 * c * logz * torch.softmax(logits.detach(), -1) / count
    assert torch.allclose(logits.grad, expect, rtol=1e-5, atol=1e-9)


def test_update_clipping_divides_each_tensors_lr_by_its_rms():
    """lr_t = lr / max(1, RMS_t), RMS_t = sqrt(mean(g^2 / max(v_hat, eps^2))) with the v the step will use; the
    step then equals plain AdamW run at lr_t on that tensor; and telemetry's rebuilt update stays exact."""
    cfg = small_config("update_clip=true")
    run, _ = _steps(cfg, 4)
    opt = run.opt
    assert len(opt.param_groups) == len(list(run.model.parameters()))  # one group per tensor
    with torch.no_grad():
        for i, p in enumerate(run.model.parameters()):  # gradients far above what v has seen: RMS > 1 somewhere
            p.grad = torch.randn_like(p) * (30.0 if i % 2 else 0.0)
    before = [(p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()}) for p in run.model.parameters()]
    rms = clip_updates(opt, 1e-3)
    assert max(rms) > 1 > min(rms)
    for group, r, (p0, st) in zip(opt.param_groups, rms, before):
        (p,) = group["params"]
        b1, b2 = group["betas"]
        t = float(st["step"]) + 1
        v_hat = (b2 * st["exp_avg_sq"] + (1 - b2) * p.grad ** 2) / (1 - b2 ** t)
        assert math.isclose(r, float((p.grad ** 2 / v_hat.clamp_min(group["eps"] ** 2)).mean().sqrt()), rel_tol=1e-5)
        assert group["lr"] == pytest.approx(1e-3 / max(1.0, r), rel=1e-12)
    ref = torch.nn.Parameter(before[1][0].clone())
    ref.grad = list(run.model.parameters())[1].grad.clone()
    ref_opt = torch.optim.AdamW([ref], lr=opt.param_groups[1]["lr"], betas=opt.param_groups[1]["betas"], eps=cfg.eps,
                                weight_decay=opt.param_groups[1]["weight_decay"], fused=True)
    ref_opt.state[ref] = {k: v.clone() for k, v in before[1][1].items()}
    run.telemetry.before_step(True)
    opt.step()
    ref_opt.step()
    assert torch.equal(ref.detach(), list(run.model.parameters())[1].detach())
    m = telemetry._Moments(run.telemetry, [opt.state[p] for p in run.telemetry.params])
    measured = torch.stack([(p.detach() - p0).norm() for p, (p0, _) in zip(run.telemetry.params, before)])
    rel = ((m.update - measured).abs() / measured.clamp_min(1e-12)).max()
    assert rel < 1e-4, float(rel)


def test_attention_stats_match_a_naive_softmax():
    g = torch.Generator().manual_seed(2)
    qk = torch.randn(2, 5, 4, 6, generator=g) * 2  # 2 heads
    key_pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    top, ent, n = telemetry.attention_stats(qk, None, key_pad)
    best, sums = -math.inf, torch.zeros(2)
    for b in range(2):
        for h in range(2):
            for t in range(5):
                if key_pad[b, t]:
                    continue
                s = torch.stack([qk[b, t, h] @ qk[b, j, 2 + h] / math.sqrt(6) for j in range(t + 1)])
                best = max(best, float(s.max()))
                p = torch.softmax(s, 0)
                sums[h] += float(-(p * p.log()).sum())
    assert math.isclose(float(top), best, rel_tol=1e-5) and torch.allclose(ent, sums, rtol=1e-5) and float(n) == 8


def test_natural_signals_ride_on_detail_steps_only():
    run, rows = _steps(small_config("natural_signals=true", "qk_norm=true", "z_loss=1e-4"), 12)
    keys = ("attn_logit_max", "attn_entropy_min", "logz_mean", "logz_max", "logit_mean")
    for r in rows:
        detail = "u" in r["params"]["tok_emb.weight"]
        assert all((k in r) == detail for k in keys), r["step"]
    r = rows[10]
    assert len(r["attn_logit_max"]) == run.cfg.n_layer and 0 < min(r["attn_entropy_min"]) <= math.log(run.cfg.context)
    assert r["logz_max"] >= r["logz_mean"] and abs(r["logz_mean"] - math.log(run.cfg.vocab_size)) < 0.5
    with pytest.raises(Exception, match="natural_signals"):
        small_config("natural_signals=true", "telemetry=basic")


def _rows(n=300, **at):
    """Synthetic metrics rows of a healthy-looking run, with natural signals on every 10th step."""
    rows = []
    for s in range(n):
        r = {"step": s, "loss": 6.0 * math.exp(-s / 80) + 0.5, "lr": 1e-3 * min(1.0, (s + 1) / 20) * (1 - s / 1000), "grad_norm": 2.0, "grad_norm_clipped": 1.0,
             "val_loss": None, "logit_max": 5.0, "nonfinite": 0,
             "params": {"w": {"g": 1.0, "vm": 1e-4, **({"r": 1.0} if s % 10 == 0 else {})}}}
        if s % 10 == 0:
            r.update(attn_logit_max=[5.0, 6.0], attn_entropy_min=[1.5, 1.2], logz_mean=6.0, logz_max=7.0, logit_mean=0.0)
        rows.append(r)
    for s, changes in at.items():
        rows[int(s[1:])].update(changes)
    return rows


def test_the_new_leaves_name_natural_failures_and_leave_healthy_runs_alone():
    healthy = _rows()
    assert walk(Evidence(healthy))["cause"] == "healthy"
    # attention logits beyond the threshold, but the loss keeps falling: not a failure
    big = _rows(s150={"attn_logit_max": [5.0, 2 * T["attn_logit_high"]]})
    assert walk(Evidence(big))["cause"] == "healthy"
    # ... with the loss then climbing: §2.F
    grown = _rows(s150={"attn_logit_max": [5.0, 2 * T["attn_logit_high"]]})
    for r in grown[160:]:
        r["loss"] += min(1.5, (r["step"] - 160) / 40)
    assert walk(Evidence(grown))["leaf"] == "§2.F"
    drift = _rows(s150={"logz_mean": -2 * T["logz_far"]})
    for r in drift[160:]:
        r["loss"] += min(1.5, (r["step"] - 160) / 40)
    assert walk(Evidence(drift))["leaf"] == "§2.G"
    # an update RMS well above 1, then a two-step loss spike 3 steps later: §2.H
    spiky = _rows()
    spiky[200]["params"]["w"]["r"] = 2 * T["rms_high"]
    spiky[203]["loss"] += 3.0
    spiky[204]["loss"] += 2.5
    found = checks.check_rms_before_spike(Evidence(spiky))
    assert found.matched and found.extra["spike_step"] == 203
    # without the natural signals the two signal nodes read "not measured"
    plain = [{k: v for k, v in r.items() if k not in ("attn_logit_max", "logz_mean")} for r in grown]
    w = walk(Evidence(plain))
    assert w["leaf"] != "§2.F" and {"§2.6", "§2.7"} <= set(w["not_measured"])


def test_lr_sensitivity_is_the_papers_capped_mean_gap():
    runs = [{"lr": lr, "initial_loss": 6.0, "final_loss": f, "diverged": f is None}
            for lr, f in ((1e-3, 3.0), (1e-2, 2.0), (1e-1, 7.0), (1.0, None))]
    s = judge.sensitivity(runs)
    assert s["best_loss"] == 2.0 and s["best_lr"] == 1e-2
    assert s["sensitivity"] == pytest.approx(np.mean([1.0, 0.0, 4.0, 4.0]))


def test_lr_sweep_trains_caches_and_writes_its_page(tmp_path, monkeypatch):
    from minitrain.lab import lrsweep
    from minitrain.views import dashboard

    monkeypatch.setitem(lrsweep.GRIDS, "tiny", {"lrs": (1e-3, 1e-1), "sets": (
        "steps=4", "warmup_steps=2", "eval_every=5", "ckpt_every=5", "spectral_every=0")})
    monkeypatch.setattr(lrsweep, "VARIANTS", lrsweep.VARIANTS[:1])
    lines = []
    data = lrsweep.run_lrsweep(tmp_path, "tiny", jobs=1, log=lines.append)
    assert len(data["runs"]) == 2 and data["trained"] == 2
    assert sum(1 for line in lines if " lr " in line and "final loss" in line) == 2  # one progress line per run
    page = (tmp_path / "index.html").read_text()
    own = page.replace(dashboard.asset(dashboard.UPLOT[0]), "")  # uPlot's licence header names its home page
    assert page.count('id="lrsweep-data"') == 1 and "https://" not in own
    assert "| claim |" in (tmp_path / "natural-instabilities.md").read_text()
    assert all((tmp_path / r["dashboard"]).exists() for r in data["runs"])
    table = (tmp_path / "runs" / "index.html").read_text()  # the runs table, written once at the end
    assert all(f'"{r["dashboard"].split("/")[-2]}/dashboard.html"' in table for r in data["runs"]), table[:300]
    assert lrsweep.run_lrsweep(tmp_path, "tiny", jobs=1, log=lines.append)["reused"] == 2
