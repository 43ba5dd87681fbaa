"""core/data.py: training batches cut from blocks are exactly the per-step batches of the documented order."""
import torch

from minitrain.core import data as D
from minitrain.core.config import TrainConfig
from minitrain.core.tokenizer import make_batch


def one_step_indices(data, step: int, batch_size: int, seed: int) -> list[int]:
    """The documented order, one step at a time: positions step*B .. step*B+B-1 of the stream of
    epoch permutations."""
    n = len(data.train)
    return [int(D.epoch_permutation(seed, pos // n, n)[pos % n]) for pos in range(step * batch_size, (step + 1) * batch_size)]


def test_block_batches_equal_per_step_batches_across_blocks_and_epochs():
    data = D.prepare(TrainConfig())
    n = len(data.train)
    # steps around block edges (250) and epoch edges (1679 rows / 8 per step), other batch sizes and seeds
    steps = [0, 1, 209, 210, 249, 250, 251, 499, 500, 1999, 5000]
    for seed, bs in ((42, 8), (7, 3), (42, 16)):
        for step in steps:
            a = data.train_batch(step, bs, seed)
            b = make_batch(data.train, one_step_indices(data, step, bs, seed))
            assert a.rows == b.rows == data.batch_indices(step, bs, seed)
            for f in ("x", "y", "loss_mask", "key_pad", "irregular"):
                assert torch.equal(getattr(a, f), getattr(b, f)), (seed, bs, step, f)
    assert n % 8 != 0  # the epoch edge falls inside a step: that step mixes two epochs' rows


def test_a_batch_is_a_function_of_seed_and_step_alone():
    data = D.prepare(TrainConfig())
    late = data.train_batch(1234, 8, 42)
    data.train_batch(0, 8, 42)  # walk elsewhere (evicting blocks), then come back
    data.train_batch(3000, 8, 42)
    assert torch.equal(data.train_batch(1234, 8, 42).x, late.x)
    assert data.train_batch(1234, 8, 43).rows != late.rows


def test_ngram_baseline_is_cached_by_its_exact_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITRAIN_CACHE", str(tmp_path))
    data = D.prepare(TrainConfig())
    fresh = D.ngram_baseline(data.train, data.val, 512)
    assert D.cached_ngram_baseline(data.train, data.val, 512) == fresh  # computed, stored
    assert len(list((tmp_path / "ngram").glob("*.json"))) == 1
    calls = []
    monkeypatch.setattr(D, "ngram_baseline", lambda *a: calls.append(a) or {"val_loss": 0.0})
    assert D.cached_ngram_baseline(data.train, data.val, 512) == fresh and not calls  # read back, bit-exact
    D.cached_ngram_baseline(data.val, data.val, 512)  # other inputs: computed again, never the stored value
    assert len(calls) == 1


def test_block_counts_equal_each_batchs_own_count():
    """batch_block counts every batch's regular / irregular targets at once; Batch.kind_counts and
    target_kinds agree with the batch's own mask."""
    import torch

    from minitrain.core.config import build_config
    from minitrain.core.data import prepare
    from minitrain.core.tokenizer import Batch

    cfg = build_config({}, ["progress=false"])
    data = prepare(cfg)
    for step in (0, 5, 251):
        b = data.train_batch(step, cfg.batch_size, cfg.seed)
        fresh = Batch(x=b.x, y=b.y, loss_mask=b.loss_mask, key_pad=b.key_pad, irregular=b.irregular, rows=b.rows)
        assert b.kind_counts() == fresh.kind_counts()
        assert torch.equal(b.target_index(), fresh.target_index()) and torch.equal(b.target_kinds(), fresh.target_kinds())
        reg, irr = fresh.kind_counts()
        assert reg + irr == int(b.loss_mask.sum()) and irr == int(b.loss_mask[b.irregular].sum())
        kinds = fresh.target_kinds()
        assert kinds.shape == (2, reg + irr) and torch.equal(kinds.sum(1), torch.tensor([reg, irr], dtype=torch.float))
