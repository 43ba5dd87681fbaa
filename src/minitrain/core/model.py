"""The mini-GPT: a pre-norm decoder with RoPE, output head tied to the token embedding plus a bias.

Parameter names are stable (injections and telemetry address them):

    tok_emb.weight               [V, d]   token embedding; also the output head's weight (tied)
    blocks.{i}.ln1.weight        [d]      pre-attention norm gain
    blocks.{i}.attn.qkv.weight   [3d, d]  fused query/key/value projection
    blocks.{i}.attn.proj.weight  [d, d]   attention output projection
    blocks.{i}.ln2.weight        [d]      pre-MLP norm gain
    blocks.{i}.mlp.fc.weight     [d_ff, d]
    blocks.{i}.mlp.proj.weight   [d, d_ff]
    ln_f.weight                  [d]      final norm gain
    lm_head.bias                 [V]      output bias, zero at init
  with qk_norm on, also:
    blocks.{i}.attn.q_ln.weight  [d/h]    query norm gain (one LayerNorm over each head's query)
    blocks.{i}.attn.k_ln.weight  [d/h]    key norm gain

`lm_head.weight` is accepted as an alias of `tok_emb.weight`.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PARAM_ALIASES = {"lm_head.weight": "tok_emb.weight"}


def rope_table(context: int, d_head: int, base: float = 10000.0) -> torch.Tensor:
    """[T, d_head/2] complex64: cos + i sin of each position's angle for each channel pair."""
    inv = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)
    ang = torch.outer(torch.arange(context, dtype=torch.float32), inv)  # [T, d_head/2]
    return torch.complex(ang.cos(), ang.sin())


def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (even, odd) of x [B, T, heads, d_head] by position-dependent angles: each pair
    is one complex number, multiplied by rot [T, 1, d_head/2] (one complex multiply, no strided slices)."""
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
    return torch.view_as_real(z * rot).flatten(-2)


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, qk_norm: bool = False):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.qk_norm = qk_norm
        if qk_norm:  # qk-layernorm (Wortsman et al. 2023): bounds the attention logits whatever the weights' growth
            self.q_ln = nn.LayerNorm(d_model // n_head, bias=False)
            self.k_ln = nn.LayerNorm(d_model // n_head, bias=False)
        self.record_qk = False  # keep q and k of each forward in last_qk (GPT.record_attention)
        self.last_qk: torch.Tensor | None = None

    def forward(self, x, mask, rot, at=None):
        """[B, T, C]; or, given `at` (flat indices into [B*T]), the output at those positions only, [len(at), C]
        (every position is still a key and value)."""
        B, T, C = x.shape
        qk, v = self.qkv(x).split([2 * C, C], dim=2)
        qk = qk.view(B, T, 2 * self.n_head, C // self.n_head)
        if self.qk_norm:
            qk = torch.cat([self.q_ln(qk[:, :, :self.n_head]), self.k_ln(qk[:, :, self.n_head:])], dim=2)
        qk = apply_rope(qk, rot)  # q and k in one multiply
        q, k = qk.transpose(1, 2).split(self.n_head, dim=1)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.record_qk:  # a reference, no copy: [B, T, 2 * heads, d_head], queries then keys, after RoPE
            self.last_qk = qk.detach()
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y if at is None else y.flatten(0, 1).index_select(0, at))


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ff: int, qk_norm: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, bias=False)
        self.attn = Attention(d_model, n_head, qk_norm)
        self.ln2 = nn.LayerNorm(d_model, bias=False)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x, mask, rot, at=None):
        """[B, T, C]; or, given `at`, the output at those positions only (see Attention.forward)."""
        a = self.attn(self.ln1(x), mask, rot, at)
        x = (x if at is None else x.flatten(0, 1).index_select(0, at)) + a
        return x + self.mlp(self.ln2(x))


class LMHeadBias(nn.Module):
    """Holds `lm_head.bias`; the head's weight is the token embedding."""

    def __init__(self, vocab: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, n_layer: int, d_model: int, n_head: int, d_ff: int, context: int,
                 qk_norm: bool = False):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, d_ff, qk_norm) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model, bias=False)
        self.lm_head = LMHeadBias(vocab_size)
        self.register_buffer("rope", rope_table(context, d_model // n_head)[:, None, :], persistent=False)
        # mean |activation| per layer of the last forward (telemetry reads it; no autograd graph kept)
        self.record_activations = True
        self.last_activations: list[torch.Tensor] = []
        # what the attention logits of the last training forward need (record_attention): its mask and padding
        self.last_mask: torch.Tensor | None = None  # None: causal
        self.last_key_pad: torch.Tensor | None = None

    def record_attention(self, on: bool = True) -> None:
        """Keep each block's q and k (and the mask) of every forward, for telemetry's attention logits."""
        for block in self.blocks:
            block.attn.record_qk = on

    def init_weights(self, std: float, scale: float, generator: torch.Generator) -> None:
        """GPT-2 style init: N(0, std) for matrices and embeddings, residual projections scaled by
        1/sqrt(2 n_layer), norm gains 1, lm_head.bias 0. `scale` multiplies every weight afterwards."""
        resid_std = std / math.sqrt(2 * len(self.blocks))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                    p.normal_(0.0, resid_std, generator=generator)
                elif p.dim() >= 2:
                    p.normal_(0.0, std, generator=generator)
                elif name == "lm_head.bias":
                    p.zero_()
                else:
                    p.fill_(1.0)
                if scale != 1.0 and name != "lm_head.bias":
                    p.mul_(scale)

    def attention_mask(self, key_pad: torch.Tensor, causal: bool) -> torch.Tensor:
        """[B, 1, T, T] bool, True = may attend. Causal + padding; `causal=False` is the broken
        all-ones mask of the break-it lab (padding stays masked, so no row is ever empty).
        The causal forward does not build it: rows are right-padded, so under the causal mask no real
        token ever sees a pad key, and `is_causal` gives the same losses and gradients, bit for bit."""
        T = key_pad.shape[1]
        allowed = ~key_pad[:, None, None, :]
        if causal:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=key_pad.device).tril()
        # a padded query row must still see something: let every query see position 0 (<bos>)
        allowed = allowed.clone()
        allowed[..., 0] = True
        return allowed

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor, causal: bool = True,
                at: torch.Tensor | None = None, prune_last: bool = False) -> torch.Tensor:
        """Logits [B, T, V]; or, given `at` (flat indices into [B*T], e.g. `Batch.target_index()`), only at
        those positions, [len(at), V]: the final norm and the output head (a third of the step's matrix
        work at full width) then run on the loss's targets alone. `prune_last` (with `at`) also runs the last
        block's attention output, projection and MLP at those positions only (the validation pass: nothing
        reads the rest; training does not, since telemetry's `act` reads every position of every block)."""
        T = x.shape[1]
        mask = None if causal else self.attention_mask(key_pad, causal)  # None: is_causal (see attention_mask)
        if self.blocks[0].attn.record_qk:
            self.last_mask, self.last_key_pad = mask, key_pad
        rot = self.rope[:T]
        h = self.tok_emb(x)
        outs = []
        for i, block in enumerate(self.blocks):
            pruned = prune_last and at is not None and i == len(self.blocks) - 1
            h = block(h, mask, rot, at if pruned else None)
            if self.record_activations:
                outs.append(h)
        # after the last block: the same operations one after another, each after its first in cache
        self.last_activations = [o.detach().abs().mean() for o in outs]
        if at is not None and h.dim() == 3:  # not already cut to the targets by a pruned last block
            h = h.flatten(0, 1).index_select(0, at)
        h = self.ln_f(h)
        return F.linear(h, self.tok_emb.weight, self.lm_head.bias)


def build_model(cfg, generator: torch.Generator) -> GPT:
    model = GPT(cfg.vocab_size, cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_ff, cfg.context, cfg.qk_norm)
    model.init_weights(cfg.init_std, cfg.init_scale, generator)
    return model



def param_names(cfg) -> list[str]:
    """The model's parameter names for a config, without allocating or initialising any weights."""
    with torch.device("meta"):
        model = GPT(cfg.vocab_size, cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_ff, cfg.context, cfg.qk_norm)
    return [n for n, _ in model.named_parameters()]
