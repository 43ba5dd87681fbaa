"""Everything a run derives from its config before the first step: corpus, split, tokenizer, encoded splits,
rare-token mask, the fixed validation batch and the n-gram baseline. Pure functions of the config."""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from tokenizers import Tokenizer

from minitrain.core import corpus
from minitrain.core.corpus import Row
from minitrain.core.errors import UserError
from minitrain.core.telemetry import block_token_stats, rare_token_mask
from minitrain.core.tokenizer import (PAD, Batch, EncodedSet, encode_row, encode_rows, fits, make_batch,
                                 train_tokenizer, training_texts)


@dataclass
class RunData:
    rows: list[Row]
    train_rows: list[Row]
    val_rows: list[Row]
    tokenizer: Tokenizer
    train: EncodedSet
    val: EncodedSet
    val_batches: list[Batch]  # the fixed validation subset, in length buckets (less padding to compute)
    token_counts: torch.Tensor  # per token id, over the training split (non-pad)
    rare_mask: torch.Tensor
    ngram: dict
    manifest: dict
    _blocks: dict = field(default_factory=dict, repr=False)  # (seed, batch_size, block) -> its batches

    def batch_indices(self, step: int, batch_size: int, seed: int) -> list[int]:
        """Rows of step `step`: consecutive slices of per-epoch permutations, a pure function of
        (seed, step), so the data iterator's state is just the step number."""
        return self.train_batch(step, batch_size, seed).rows

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """The training batch of `step`, cut from a block of BATCH_BLOCK steps built at once (one gather,
        one mask computation, one transfer of the widths for the whole block)."""
        block, i = divmod(step, BATCH_BLOCK)
        key = (seed, batch_size, block)
        if key not in self._blocks:
            if len(self._blocks) >= 4:  # a run walks forward: the oldest block is done with
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[key] = batch_block(self.train, seed, batch_size, block * BATCH_BLOCK, BATCH_BLOCK,
                                            self.rare_mask)
        return self._blocks[key][i]

    def sentence_batch(self, sentence: str, copies: int, context: int) -> tuple[Batch, dict]:
        """`copies` copies of one sentence, formatted like any corpus row (paired with its Spanish)."""
        row = corpus.find_sentence(sentence)
        if row is None:
            raise UserError(
                f"injection_sentence {sentence!r} is not a sentence of the corpus grammar, so it has no Spanish "
                "pair; try one from 'minitrain corpus --rare', e.g. 'She has written the letter.'"
            )
        ids, start = encode_row(self.tokenizer, row.spanish, row.text)
        if len(ids) - 1 > context:
            raise UserError(f"injection_sentence is {len(ids)} tokens, more than context+1={context + 1}; "
                            "choose a shorter sentence")
        enc = encode_rows(self.tokenizer, [row] * copies, context)
        batch = make_batch(enc, list(range(copies)))
        batch.rows = [-1] * copies
        info = {"sentence": row.text, "spanish": row.spanish, "token_ids": ids,
                "tokens": [self.tokenizer.id_to_token(i) for i in ids],
                "train_counts": [int(self.token_counts[i]) for i in ids]}
        return batch, info


BATCH_BLOCK = 250  # training batches built together


@lru_cache(maxsize=64)
def epoch_permutation(seed: int, epoch: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def batch_block(data: EncodedSet, seed: int, batch_size: int, first: int, count: int,
                rare_mask: torch.Tensor | None = None) -> list[Batch]:
    """The batches of steps [first, first + count): step s takes positions s*B .. s*B+B-1 of the stream of
    epoch permutations (epoch e = permutation of (seed, e)); each batch trimmed to its longest row, exactly
    as `make_batch` cuts it, but with every gather and mask computed once for the block (and, given the
    rare-token mask, telemetry's composition counts of every batch)."""
    n = len(data)
    pos = torch.arange(first * batch_size, (first + count) * batch_size)
    e0, e1 = first * batch_size // n, ((first + count) * batch_size - 1) // n
    stream = torch.cat([epoch_permutation(seed, e, n) for e in range(e0, e1 + 1)])
    idx = stream[pos - e0 * n].view(count, batch_size)
    lengths = data.lengths[idx]  # [S, B]
    seq = data.ids[idx]  # [S, B, L]
    L = seq.shape[2]
    t = torch.arange(1, L)  # target position t-1 predicts token t
    loss_mask = ((t >= data.target_start[idx].unsqueeze(2)) & (t < lengths.unsqueeze(2))).float()
    x, y = seq[:, :, :-1], seq[:, :, 1:]
    key_pad = x == PAD
    irregular = data.irregular[idx]
    widths = lengths.max(1).values.tolist()
    batches = [Batch(x=x[s, :, :w - 1], y=y[s, :, :w - 1], loss_mask=loss_mask[s, :, :w - 1],
                     key_pad=key_pad[s, :, :w - 1], irregular=irregular[s], rows=rows)
               for s, (w, rows) in enumerate(zip(widths, idx.tolist()))]
    # each batch's target index, target kinds and counts (Batch.target_index / target_kinds / kind_counts),
    # for the whole block at once: the loss's targets in row-major order of each trimmed [B, w - 1] batch
    s_, b_, t_ = loss_mask.nonzero(as_tuple=True)
    flat = b_ * (torch.tensor(widths) - 1)[s_] + t_
    irr_t = irregular[s_, b_]
    kinds = torch.stack([~irr_t, irr_t]).float()
    per_step = torch.bincount(s_, minlength=count).tolist()
    irr_per_step = torch.bincount(s_[irr_t], minlength=count).tolist()
    for batch, idx, kind, n, irr in zip(batches, flat.split(per_step), kinds.split(per_step, dim=1), per_step,
                                        irr_per_step):
        batch._targets, batch._kinds, batch._counts = idx, kind, (n - irr, irr)
    if rare_mask is not None:
        for batch, stats in zip(batches, block_token_stats(x, [w - 1 for w in widths], rare_mask)):
            batch.token_stats = stats
    return batches


def ngram_baseline(train: EncodedSet, val: EncodedSet, vocab: int) -> dict:
    """Interpolated trigram (with bigram and add-one unigram) fitted on training sequences, scored on the
    validation targets exactly where the model's loss is taken. Weights are fixed, not tuned on validation."""
    lam = (0.6, 0.3, 0.1)
    uni = torch.ones(vocab)
    bi: dict[int, dict[int, int]] = {}
    tri: dict[tuple[int, int], dict[int, int]] = {}
    for seq, n in zip(train.ids.tolist(), train.lengths.tolist()):
        s = seq[:n]
        for t in range(1, n):
            uni[s[t]] += 1
            bi.setdefault(s[t - 1], {}).setdefault(s[t], 0)
            bi[s[t - 1]][s[t]] += 1
            if t >= 2:
                d = tri.setdefault((s[t - 2], s[t - 1]), {})
                d[s[t]] = d.get(s[t], 0) + 1
    p_uni = uni / uni.sum()
    total, count = 0.0, 0
    for seq, n, start in zip(val.ids.tolist(), val.lengths.tolist(), val.target_start.tolist()):
        s = seq[:n]
        for t in range(start, n):
            w = s[t]
            p = lam[2] * float(p_uni[w])
            b = bi.get(s[t - 1], {})
            if b:
                p += lam[1] * b.get(w, 0) / sum(b.values())
            else:
                p += lam[1] * float(p_uni[w])
            tr = tri.get((s[t - 2], s[t - 1]), {})
            if tr:
                p += lam[0] * tr.get(w, 0) / sum(tr.values())
            else:
                p += lam[0] * (b.get(w, 0) / sum(b.values()) if b else float(p_uni[w]))
            total -= math.log(p)
            count += 1
    loss = total / count
    return {"kind": "interpolated trigram (0.6, 0.3, 0.1), add-one unigram", "val_loss": loss,
            "val_ppl": math.exp(loss), "tokens": count}


NGRAM_VERSION = 1  # bump when ngram_baseline's definition changes: cached results are then recomputed


def cache_dir() -> Path:
    """Where derived data artefacts are kept between processes: $MINITRAIN_CACHE, else
    $XDG_CACHE_HOME/minitrain, else ~/.cache/minitrain. Deleting it is always safe."""
    if os.environ.get("MINITRAIN_CACHE"):
        return Path(os.environ["MINITRAIN_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minitrain"


def cached_ngram_baseline(train: EncodedSet, val: EncodedSet, vocab: int) -> dict:
    """`ngram_baseline`, computed once per distinct input: the result is stored under a hash of exactly
    what it reads (the encoded splits, the vocabulary size, the definition's version), so a cached value
    can never belong to other data (computing it costs ~0.4 s, paid once per input, not per command)."""
    import hashlib
    import json

    h = hashlib.sha256(f"ngram v{NGRAM_VERSION} vocab {vocab}".encode())
    for t in (train.ids, train.lengths, val.ids, val.lengths, val.target_start):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    path = cache_dir() / "ngram" / f"{h.hexdigest()[:32]}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    result = ngram_baseline(train, val, vocab)
    try:  # atomic (a concurrent process writes the same bytes); a read-only home only costs the recompute
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return result


@lru_cache(maxsize=8)
def _prepare(corpus_seed: int, val_verbs: tuple[str, ...], vocab_size: int, context: int,
             val_max_rows: int, corpus_scale: int = 1) -> RunData:
    rows = corpus.generate(corpus_seed, corpus_scale)
    train_rows, val_rows = corpus.split(rows, list(val_verbs), corpus_seed)
    tok = train_tokenizer(training_texts(train_rows), vocab_size)
    # every row encoded once: whether it fits the context and its EncodedSet read the same ids. Rows longer
    # than the context are dropped (and counted): mostly held-out verbs, whose words the training-split
    # tokenizer has never merged and so spells out in short pieces.
    def fitting(split: list) -> list:
        encoded = ((r, encode_row(tok, r.spanish, r.text)) for r in split)
        return [(r, e) for r, e in encoded if fits(e[0], context)]

    train_pairs, val_pairs = fitting(train_rows), fitting(val_rows)
    dropped = {"train": len(train_rows) - len(train_pairs), "val": len(val_rows) - len(val_pairs)}
    if dropped["train"] > len(train_rows) // 2 or dropped["val"] == len(val_rows):
        raise UserError(f"context={context} is too short: {dropped['train']} of {len(train_rows)} training rows "
                        f"and {dropped['val']} of {len(val_rows)} validation rows do not fit; raise context (default 32)")
    if len(val_pairs) > val_max_rows:  # an evenly spaced, fixed subset: same rows for every run
        stride = len(val_pairs) / val_max_rows
        val_pairs = [val_pairs[int(i * stride)] for i in range(val_max_rows)]
    train_rows, val_rows = [r for r, _ in train_pairs], [r for r, _ in val_pairs]
    train = encode_rows(tok, train_rows, context, [e for _, e in train_pairs])
    val = encode_rows(tok, val_rows, context, [e for _, e in val_pairs])
    counts, rare = rare_token_mask(train.ids, vocab_size)
    manifest = corpus.data_manifest(rows, train_rows, val_rows, corpus_seed, list(val_verbs), corpus_scale)
    manifest["dropped_longer_than_context"] = dropped
    manifest["tokenizer_vocab_sha256"] = _vocab_hash(tok)
    by_length = sorted(range(len(val)), key=lambda i: (int(val.lengths[i]), i))
    buckets = [make_batch(val, by_length[i:i + 64]) for i in range(0, len(by_length), 64)]
    return RunData(rows, train_rows, val_rows, tok, train, val, buckets,
                   counts, rare, cached_ngram_baseline(train, val, vocab_size), manifest)


def _vocab_hash(tok: Tokenizer) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()[:16]


def prepare(cfg) -> RunData:
    return _prepare(cfg.corpus_seed, tuple(cfg.val_verbs), cfg.vocab_size, cfg.context, cfg.val_max_rows,
                    cfg.corpus_scale)


def token_report(data: RunData, sentence: str) -> list[tuple[str, int]]:
    """Each token of a sentence (English side) with its count in the training split."""
    ids = data.tokenizer.encode(sentence).ids
    return [(data.tokenizer.id_to_token(i), int(data.token_counts[i])) for i in ids]


__all__ = ["RunData", "prepare", "token_report", "ngram_baseline", "PAD"]
