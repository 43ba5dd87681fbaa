import torch

from minitrain.core.config import TrainConfig
from minitrain.core.model import build_model


def model():
    return build_model(TrainConfig(), torch.Generator().manual_seed(0))


def test_size_names_and_tied_head():
    m = model()
    n = sum(p.numel() for p in m.parameters())
    assert 120_000 < n < 140_000, n
    names = [k for k, _ in m.named_parameters()]
    assert names[0] == "tok_emb.weight" and names[-1] == "lm_head.bias"
    assert "blocks.1.attn.qkv.weight" in names and "blocks.0.mlp.proj.weight" in names
    assert torch.count_nonzero(m.lm_head.bias) == 0
    x = torch.randint(3, 512, (2, 10))
    logits = m(x, torch.zeros_like(x, dtype=torch.bool))
    h = m.ln_f(m.blocks[1](m.blocks[0](m.tok_emb(x), m.attention_mask(torch.zeros_like(x, dtype=torch.bool), True),
                                           m.rope_cos[:10], m.rope_sin[:10]),
                           m.attention_mask(torch.zeros_like(x, dtype=torch.bool), True), m.rope_cos[:10], m.rope_sin[:10]))
    assert torch.allclose(logits, h @ m.tok_emb.weight.T, atol=1e-5)


def test_causal_mask_hides_the_future_and_the_broken_mask_does_not():
    m = model()
    x = torch.randint(3, 512, (1, 12))
    y = x.clone()
    y[0, 8] = (x[0, 8] + 1) % 509 + 3
    pad = torch.zeros_like(x, dtype=torch.bool)
    assert torch.allclose(m(x, pad)[0, :8], m(y, pad)[0, :8], atol=1e-6)
    assert not torch.allclose(m(x, pad, causal=False)[0, :8], m(y, pad, causal=False)[0, :8], atol=1e-6)


def test_init_scale_multiplies_weights():
    a = build_model(TrainConfig(), torch.Generator().manual_seed(0))
    b = build_model(TrainConfig(init_scale=100.0), torch.Generator().manual_seed(0))
    assert torch.allclose(b.tok_emb.weight, 100 * a.tok_emb.weight)
    assert torch.count_nonzero(b.lm_head.bias) == 0
