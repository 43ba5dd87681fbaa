"""`minitrain corpus` as text: the generated corpus, its split, the n-gram baseline and the long tail (each token
of a sentence with its training-split count); optionally the corpus written out as JSONL."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def corpus_lines(sets: list[str], sentences: list[str] | None = None, rare: bool = False,
                 out: Path | None = None) -> Iterator[str]:
    """The report's lines, as they are made, for the corpus the config (with `sets`) generates; with `out`,
    also write train.jsonl, val.jsonl and data_manifest.json there. `sentences`: default the config's
    injection_sentence."""
    from minitrain.core.config import build_config
    from minitrain.core.data import prepare, token_report

    cfg = build_config({}, sets)
    data = prepare(cfg)
    if out is not None:
        from minitrain.run.files import atomic_write_json, atomic_write_text

        for split, rows in (("train", data.train_rows), ("val", data.val_rows)):
            atomic_write_text(out / f"{split}.jsonl",
                              "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rows))
        atomic_write_json(out / "data_manifest.json", data.manifest)
        yield f"wrote {len(data.train_rows)} train and {len(data.val_rows)} validation rows to {out}"
    m = data.manifest
    yield (f"corpus seed {m['seed']}: {m['rows']} rows, {m['train_rows']} train / {m['val_rows']} validation "
           f"(held-out verbs: {', '.join(m['val_verbs'])}), data hash {m['hash']}")
    yield "train rows by tense: " + ", ".join(f"{k} {v}" for k, v in m["train_by_tense"].items())
    yield "train rows by class: " + ", ".join(f"{k} {v}" for k, v in m["train_by_regularity"].items())
    yield f"n-gram baseline: val loss {data.ngram['val_loss']:.3f} (ppl {data.ngram['val_ppl']:.2f})"
    total = int(data.token_counts.sum())
    for sentence in sentences or [cfg.injection_sentence]:
        cells = ", ".join(f"{tok!r}:{n}" for tok, n in token_report(data, sentence))
        yield f"tokens of {sentence!r} with training counts (of {total}): {cells}"
    if rare:
        yield "rare sentences (irregular perfect) usable as injection_sentence:"
        rows = [r for r in data.rows if r.tense == "perfect" and r.regularity == "irregular"]
        yield from (f"  {r.text}" for r in rows[:20])
