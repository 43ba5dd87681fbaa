"""Byte-level BPE (the `tokenizers` library) trained on the training split, and batch encoding.

Vocabulary: exactly `vocab_size` ids, the three specials first (<pad>=0, <bos>=1, <eos>=2).
A sequence is `<bos> es:<spanish> / en:<english> <eos>`; the loss mask covers the English tokens and <eos>.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from minitrain.core.corpus import Row, format_sequence
from minitrain.core.errors import UserError

SPECIALS = ("<pad>", "<bos>", "<eos>")
PAD, BOS, EOS = 0, 1, 2


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise UserError(
            f"the corpus only supports {tok.get_vocab_size()} BPE tokens, not vocab_size={vocab_size}; "
            "lower vocab_size"
        )
    return tok


def tokenizer_json(tok: Tokenizer) -> bytes:
    """The tokenizer as a run's tokenizer.json holds it: the same bytes as `tok.save(path)`, which writes in
    place (a full disk would leave half a file); the run writes these bytes atomically instead."""
    return tok.to_str(pretty=True).encode()


def training_texts(rows: list[Row]) -> list[str]:
    return ["".join(format_sequence(r.spanish, r.text)) for r in rows]


def encode_row(tok: Tokenizer, spanish: str, english: str) -> tuple[list[int], int]:
    """Token ids of one row and the index where the target (English) part starts.
    Prompt and target are encoded apart: the boundary after 'en:' is a pre-token boundary, so this equals
    encoding the whole string, and the split point is exact."""
    prompt, target = format_sequence(spanish, english)
    p = tok.encode(prompt).ids
    t = tok.encode(target).ids
    return [BOS] + p + t + [EOS], 1 + len(p)


@dataclass
class EncodedSet:
    """A split, tokenized once: ids padded to the longest row, with lengths and target starts."""

    ids: torch.Tensor  # [N, L] int64, PAD-padded
    lengths: torch.Tensor  # [N]
    target_start: torch.Tensor  # [N]
    irregular: torch.Tensor  # [N] bool
    row_ids: list[str]

    def __len__(self) -> int:
        return self.ids.shape[0]


def fits(ids: list[int], context: int) -> bool:
    """A row (its ids, as encode_row gives them) fits when its inputs (all tokens but the last) fit the context."""
    return len(ids) - 1 <= context


def encode_rows(tok: Tokenizer, rows: list[Row], context: int,
                encoded: list[tuple[list[int], int]] | None = None) -> EncodedSet:
    """The rows as an EncodedSet; `encoded`: each row's `encode_row` result, when the caller has it already."""
    seqs, starts = [], []
    if encoded is None:
        encoded = [encode_row(tok, r.spanish, r.text) for r in rows]
    for r, (ids, start) in zip(rows, encoded):
        if not fits(ids, context):
            raise UserError(
                f"row {r.id!r} is {len(ids)} tokens, more than context+1={context + 1}; "
                "raise context or shorten the sentence"
            )
        seqs.append(ids)
        starts.append(start)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    return EncodedSet(
        ids=ids,
        lengths=torch.tensor([len(s) for s in seqs]),
        target_start=torch.tensor(starts),
        irregular=torch.tensor([r.regularity == "irregular" for r in rows]),
        row_ids=[r.id for r in rows],
    )


@dataclass
class Batch:
    x: torch.Tensor  # [B, T] inputs
    y: torch.Tensor  # [B, T] next-token targets
    loss_mask: torch.Tensor  # [B, T] float: 1 on English target tokens and <eos>
    key_pad: torch.Tensor  # [B, T] bool: True where the input is padding
    irregular: torch.Tensor  # [B] bool
    rows: list[int]  # indices into the split (or -1 for injected rows)
    _targets: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _kinds: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    _counts: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)
    # telemetry's composition counts, when counted for a block of batches at once (data.batch_block)
    token_stats: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def target_index(self) -> torch.Tensor:
        """Flat indices (into [B*T], row-major) of the loss's target positions: the only positions whose
        logits the loss reads (about 30% of a training batch: the Spanish prompt and the padding are not
        targets). Computed once per batch, on the host."""
        if self._targets is None:
            self._targets = self.loss_mask.flatten().nonzero().squeeze(1)
        return self._targets

    def target_kinds(self) -> torch.Tensor:
        """[2, N] float: row 0 marks the targets (in `target_index` order) of regular-verb rows, row 1 those of
        irregular ones; `target_kinds() @ per_target_losses` gives both loss sums in one product."""
        if self._kinds is None:
            irregular = self.irregular[self.target_index() // self.x.shape[1]]
            self._kinds = torch.stack([~irregular, irregular]).float()
        return self._kinds

    def kind_counts(self) -> tuple[int, int]:
        """(targets of regular rows, targets of irregular rows), on the host (counted once per batch, or for a
        whole block of batches by data.batch_block)."""
        if self._counts is None:
            irregular = int(self.loss_mask[self.irregular].sum())
            self._counts = (int(self.loss_mask.sum()) - irregular, irregular)
        return self._counts

    def to(self, device: torch.device) -> "Batch":
        """The batch on `device` (itself on CPU). `irregular` stays on the host: masking a device tensor with
        a host boolean mask needs no device-to-host sync (the mask's nonzero is taken on the host), and the
        target index is taken on the host before the move for the same reason."""
        if device.type == "cpu":
            return self
        moved = Batch(x=self.x.to(device), y=self.y.to(device), loss_mask=self.loss_mask.to(device),
                      key_pad=self.key_pad.to(device), irregular=self.irregular, rows=self.rows)
        moved._targets = self.target_index().to(device)
        moved._kinds = self.target_kinds().to(device)
        return moved


def make_batch(data: EncodedSet, index: list[int]) -> Batch:
    """Slice rows out of an encoded split, trimmed to the batch's longest row ("padded per batch")."""
    idx = torch.tensor(index, dtype=torch.long)
    lengths = data.lengths[idx]
    width = int(lengths.max())
    seq = data.ids[idx, :width]
    x, y = seq[:, :-1], seq[:, 1:]
    pos = torch.arange(width - 1).unsqueeze(0)
    # target position t predicts token t+1; it is a loss target when t+1 lies in [target_start, length)
    start = data.target_start[idx].unsqueeze(1)
    loss_mask = ((pos + 1 >= start) & (pos + 1 < lengths.unsqueeze(1))).float()
    key_pad = x == PAD
    return Batch(x=x, y=y, loss_mask=loss_mask, key_pad=key_pad, irregular=data.irregular[idx], rows=list(index))
