import torch
import torch.nn.functional as F

from minitrain.core.config import TrainConfig
from minitrain.core.model import apply_rope, build_model, rope_table


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
    mask = m.attention_mask(torch.zeros_like(x, dtype=torch.bool), True)
    h = m.ln_f(m.blocks[1](m.blocks[0](m.tok_emb(x), mask, m.rope[:10]), mask, m.rope[:10]))
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


def test_rope_as_one_complex_multiply_equals_the_rotation_of_channel_pairs_bit_for_bit():
    x = torch.randn(3, 20, 8, 16, generator=torch.Generator().manual_seed(1))  # [B, T, heads, d_head]
    rot = rope_table(32, 16)
    cos, sin = rot.real[:20, None, :], rot.imag[:20, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]  # the textbook form: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)
    expected = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    assert torch.equal(apply_rope(x, rot[:20, None, :]), expected)


def test_is_causal_forward_gives_the_masked_forwards_losses_and_gradients_bit_for_bit():
    """Right-padded rows: the causal forward skips the [B, 1, T, T] mask; no real token can see a pad key,
    so the loss on real tokens and every gradient are exactly those of the explicit causal+padding mask."""
    x = torch.randint(3, 512, (4, 16), generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([16, 11, 7, 13])
    pad = torch.arange(16)[None, :] >= lengths[:, None]
    x[pad] = 0
    y = torch.roll(x, -1, 1)
    keep = (~pad).float()
    keep[torch.arange(4), lengths - 1] = 0

    def loss_and_grads(explicit: bool):
        m = model()
        mask = m.attention_mask(pad, True) if explicit else None
        h = m.tok_emb(x)
        for block in m.blocks:
            h = block(h, mask, m.rope[:16])
        logits = F.linear(m.ln_f(h), m.tok_emb.weight, m.lm_head.bias)
        loss = (F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none") * keep.flatten()).sum()
        loss.backward()
        return loss, [p.grad for p in m.parameters()]

    (la, ga), (lb, gb) = loss_and_grads(True), loss_and_grads(False)
    assert torch.equal(la, lb)
    assert all(torch.equal(a, b) for a, b in zip(ga, gb))


def test_logits_at_the_targets_only_equal_the_full_logits_there():
    """`at` runs the final norm and the head on the loss's targets alone, `prune_last` (validation) also the
    last block's attention output and MLP: the logits there are the full forward's, to float rounding."""
    from minitrain.core.config import build_config
    from minitrain.core.data import prepare

    cfg = build_config({}, ["progress=false"])
    m = build_model(cfg, torch.Generator().manual_seed(0))
    batch = prepare(cfg).train_batch(3, cfg.batch_size, cfg.seed)
    at = batch.target_index()
    assert 0 < len(at) < batch.loss_mask.numel() and bool((batch.loss_mask.flatten()[at] == 1).all())
    with torch.no_grad():
        full = m(batch.x, batch.key_pad).flatten(0, 1)[at]
        only = m(batch.x, batch.key_pad, at=at)
        pruned = m(batch.x, batch.key_pad, at=at, prune_last=True)
    assert only.shape == pruned.shape == (len(at), cfg.vocab_size)
    assert torch.allclose(only, full, rtol=0, atol=1e-5) and torch.allclose(pruned, full, rtol=0, atol=1e-5)
