import torch

from minitrain.core.config import TrainConfig
from minitrain.core.data import prepare
from minitrain.core.tokenizer import BOS, EOS, PAD, encode_row, make_batch


def test_vocab_is_exactly_512_with_specials_first():
    tok = prepare(TrainConfig()).tokenizer
    assert tok.get_vocab_size() == 512
    assert [tok.token_to_id(s) for s in ("<pad>", "<bos>", "<eos>")] == [PAD, BOS, EOS]


def test_prompt_target_split_equals_whole_encoding():
    tok = prepare(TrainConfig()).tokenizer
    ids, start = encode_row(tok, "Ella ha escrito la carta.", "She has written the letter.")
    whole = tok.encode("es:Ella ha escrito la carta. / en:She has written the letter.").ids
    assert ids == [BOS] + whole + [EOS]
    assert tok.decode(ids[start:-1]) == "She has written the letter."


def test_masks_cover_targets_only_and_padding():
    data = prepare(TrainConfig())
    b = make_batch(data.train, [0, 1, 2, 3])
    lengths = data.train.lengths[:4]
    starts = data.train.target_start[:4]
    assert b.x.shape[1] == int(lengths.max()) - 1  # padded to the batch's longest row
    for i in range(4):
        n, s = int(lengths[i]), int(starts[i])
        row_mask = b.loss_mask[i]
        # position t predicts token t+1: targets are tokens s..n-1 (English + <eos>)
        assert row_mask[s - 1:n - 1].eq(1).all() and row_mask[: s - 1].eq(0).all() and row_mask[n - 1:].eq(0).all()
        assert b.y[i, n - 2] == EOS
        assert b.key_pad[i, :n].eq(False).all() and b.key_pad[i, n:].eq(True).all()  # x[n-1] is <eos>


def test_attention_mask_is_causal_plus_padding():
    from minitrain.core.model import GPT

    m = GPT(512, 1, 16, 2, 32, 32)
    key_pad = torch.tensor([[False, False, False, True]])
    mask = m.attention_mask(key_pad, causal=True)[0, 0]
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(mask, expected)
    broken = m.attention_mask(key_pad, causal=False)[0, 0]
    assert broken[:, :3].all() and not broken[:, 3].any()  # all-ones except padding
