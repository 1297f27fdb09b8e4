"""The labs' own code, run unchanged against attnlab's classes (issue 14).

The labs' model classes are copied below as the labs wrote them (the
positional-encoding lab's self-attention models, the attention lab's GRU models,
the PE walkthrough's ``PositionalEncoding``), under their own names; attnlab's
classes are reached as ``ours.<Name>``. Each test builds the lab's model and
attnlab's from the same seed (or loads the lab's ``state_dict`` into attnlab's) and
checks, side by side, what code copied from the labs reads: ``.alphas`` right
after a forward, the labs' 0/1 float masks, and the labs' checkpoints.
"""

import io

import pytest
import torch

import attnlab.models as ours
from attnlab.attention import Attention as OurAttention
from attnlab.attention import MultiHeadAttention as OurMultiHeadAttention
from attnlab.attention import record_attention
from attnlab.encodings import PositionalEncoding as OurPositionalEncoding

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-6


def close(actual, expected, atol=ATOL):
    assert actual is not None, "attnlab's module kept nothing"
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


# -- the labs' code (tests/lab_code.py: copied unchanged from the positional-encoding lab and the attention lab) --

from lab_code import (  # noqa: E402
    Attention,
    DecoderAttn,
    DecoderPe,
    DecoderSelfAttn,
    Encoder,
    EncoderDecoderAttn,
    EncoderDecoderSelfAttn,
    EncoderPe,
    EncoderSelfAttn,
    MultiHeadAttention,
    WalkthroughPositionalEncoding,
)

# -- building both side by side ---------------------------------------------------------------------------------


def selfattn_pair(seed=43, input_len=2, target_len=2):
    """The positional-encoding lab's model (3 heads, d_model 2, ff 10) and attnlab's, from one seed."""
    torch.manual_seed(seed)
    theirs = EncoderDecoderSelfAttn(EncoderPe(3, 2, 10, 2), DecoderPe(3, 2, 10, 2), input_len, target_len)
    torch.manual_seed(seed)
    mine = ours.EncoderDecoderSelfAttn(ours.EncoderPe(3, 2, 10, 2), ours.DecoderPe(3, 2, 10, 2), input_len, target_len)
    return theirs, mine


def gru_pair(seed=21, target_len=2):
    """The attention lab's GRU model with attention and attnlab's, from one seed."""
    torch.manual_seed(seed)
    theirs = EncoderDecoderAttn(Encoder(2, 2), DecoderAttn(2, 2), input_len=2, target_len=target_len)
    torch.manual_seed(seed)
    mine = ours.EncoderDecoderAttn(ours.Encoder(2, 2), ours.DecoderAttn(2, 2), input_len=2, target_len=target_len)
    return theirs, mine


ALPHAS = ("encoder.layer.self_attn_heads.alphas", "decoder.layer.self_attn_heads.alphas",
          "decoder.layer.cross_attn_heads.alphas")  # what the lab's plot_attention reads (alphas_attr)


def read(model, path):
    for name in path.split("."):
        model = getattr(model, name)
    return model


def source_masks(batch, length):
    """The lab's float padding mask ``[B, 1, S]`` (no row fully masked), and the same as booleans."""
    float_mask = torch.ones(batch, 1, length)
    float_mask[0, 0, -1] = 0.0
    float_mask[-1, 0, 0] = 0.0
    return float_mask, float_mask.bool()


# -- (a) alphas right after a forward --------------------------------------------------------------------------


def test_encoder_layer_alphas_after_a_forward_equal_the_labs():
    torch.manual_seed(3)
    theirs = EncoderSelfAttn(3, 2, 10, 2)
    torch.manual_seed(3)
    mine = ours.EncoderSelfAttn(3, 2, 10, 2)
    x = torch.randn(4, 3, 2)
    close(mine(x), theirs(x))
    assert mine.self_attn_heads.alphas.shape == (3, 4, 3, 3)  # [H, B, T, S], as the lab stacks its heads
    close(mine.self_attn_heads.alphas, theirs.self_attn_heads.alphas)
    # Kept until the next forward, which replaces them.
    y = torch.randn(2, 5, 2)
    close(mine(y), theirs(y))
    close(mine.self_attn_heads.alphas, theirs.self_attn_heads.alphas)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_model_alphas_after_a_forward_equal_the_labs(training):
    theirs, mine = selfattn_pair(target_len=3)
    theirs.train(training), mine.train(training)
    X = torch.randn(5, 5, 2)
    x = X if training else X[:, :2]
    close(mine(x), theirs(x))
    for path in ALPHAS:
        close(read(mine, path), read(theirs, path))


def test_eval_alphas_are_the_whole_last_step_with_and_without_the_cache():
    # The lab's eval forward re-decodes the prefix: after it, the decoder's alphas cover every step.
    theirs, mine = selfattn_pair(seed=7, target_len=4)
    theirs.eval(), mine.eval()
    source = torch.randn(3, 2, 2)
    expected_out = theirs(source)
    expected = {path: read(theirs, path) for path in ALPHAS}
    assert expected["decoder.layer.self_attn_heads.alphas"].shape == (3, 3, 4, 4)
    close(mine(source), expected_out)  # decodes with attnlab's cache, one step at a time
    for path in ALPHAS:
        close(read(mine, path), expected[path])
    mine(torch.randn(2, 2, 2))  # another batch in between: replaced by the next call
    with record_attention():  # decodes without the cache, re-running the prefix as the lab does
        close(mine(source), expected_out)
    for path in ALPHAS:
        close(read(mine, path), expected[path])


def test_predict_the_thread_safe_path_keeps_no_alphas():
    _, mine = selfattn_pair(seed=7)
    mine.eval()
    source = torch.randn(3, 2, 2)
    assert all(read(mine, path) is None for path in ALPHAS)
    mine.predict(source)
    assert all(read(mine, path) is None for path in ALPHAS)
    mine(source)  # the lab's entry point keeps them
    kept = {path: read(mine, path) for path in ALPHAS}
    mine.predict(torch.randn(5, 2, 2))
    for path in ALPHAS:
        close(read(mine, path), kept[path])


def test_decoder_layer_alphas_in_the_labs_stateful_use():
    torch.manual_seed(5)
    theirs = DecoderSelfAttn(3, 2, 10, 2)
    torch.manual_seed(5)
    mine = ours.DecoderSelfAttn(3, 2, 10, 2)
    states, query = torch.randn(4, 3, 2), torch.randn(4, 2, 2)
    target_mask = EncoderDecoderSelfAttn.subsequent_mask(2)  # the lab's float [1, T, T]
    theirs.init_keys(states), mine.init_keys(states)
    close(mine(query, None, target_mask), theirs(query, None, target_mask))
    close(mine.self_attn_heads.alphas, theirs.self_attn_heads.alphas)
    close(mine.cross_attn_heads.alphas, theirs.cross_attn_heads.alphas)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gru_attention_alphas_after_a_forward_equal_the_labs(training):
    theirs, mine = gru_pair(target_len=3)
    theirs.train(training), mine.train(training)
    X = torch.randn(4, 5, 2)
    torch.manual_seed(11)  # the teacher-forcing coins: both draw one per step
    expected = theirs(X)
    torch.manual_seed(11)
    close(mine(X), expected)
    close(mine.alphas, theirs.alphas)
    close(mine.decoder.attn.alphas, theirs.decoder.attn.alphas)  # the last step's [B, 1, S]


def test_attnlabs_own_attention_keeps_weights_only_on_request():
    mha = OurMultiHeadAttention(2, 4)
    x = torch.randn(2, 3, 4)
    mha(x, x, x)
    assert mha.alphas is None and mha.attn_weights is None
    assert ours.EncoderSelfAttn(3, 2, 10, 2).self_attn_heads.alphas is None  # nothing run yet


# -- (b) the labs' float masks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.int64])
def test_attention_takes_the_labs_float_masks(dtype):
    torch.manual_seed(1)
    theirs = Attention(2)
    torch.manual_seed(1)
    mine = OurAttention(2)
    keys, query = torch.randn(3, 4, 2), torch.randn(3, 1, 2)
    float_mask, bool_mask = source_masks(3, 4)
    theirs.init_keys(keys), mine.init_keys(keys)
    expected = theirs(query, mask=float_mask)
    close(mine(query, mask=float_mask.to(dtype)), expected)
    close(mine.alphas, theirs.alphas)
    close(mine(query, mask=bool_mask), expected)


def test_multihead_attention_takes_the_labs_float_masks():
    torch.manual_seed(2)
    theirs = MultiHeadAttention(3, 2, input_dim=2)
    torch.manual_seed(2)
    mine = ours.EncoderSelfAttn(3, 2, 10, 2).self_attn_heads  # the lab-style multi-head attention
    x = torch.randn(3, 4, 2)
    float_mask, bool_mask = source_masks(3, 4)
    theirs.init_keys(x), mine.init_keys(x)
    expected = theirs(x, float_mask)
    close(mine(x, mask=float_mask), expected)
    close(mine.alphas, theirs.alphas)
    close(mine(x, mask=bool_mask), expected)
    close(mine(x, bool_mask), expected)  # the lab's positional call, with a boolean mask


def test_layers_take_the_labs_float_masks():
    torch.manual_seed(4)
    their_enc, their_dec = EncoderSelfAttn(3, 2, 10, 2), DecoderSelfAttn(3, 2, 10, 2)
    torch.manual_seed(4)
    my_enc, my_dec = ours.EncoderSelfAttn(3, 2, 10, 2), ours.DecoderSelfAttn(3, 2, 10, 2)
    source, target = torch.randn(3, 4, 2), torch.randn(3, 3, 2)
    float_mask, bool_mask = source_masks(3, 4)
    states = their_enc(source, float_mask)
    close(my_enc(source, float_mask), states)
    close(my_enc(source, bool_mask), states)
    close(my_enc.self_attn_heads.alphas, their_enc.self_attn_heads.alphas)
    trg = EncoderDecoderSelfAttn.subsequent_mask(3)  # float [1, T, T]
    their_dec.init_keys(states.detach()), my_dec.init_keys(states.detach())
    expected = their_dec(target, float_mask, trg)
    close(my_dec(target, float_mask, trg), expected)
    close(my_dec(target, bool_mask, trg.bool()), expected)


def test_model_encode_decode_predict_take_the_labs_float_masks():
    theirs, mine = selfattn_pair(seed=8, target_len=3)
    source, shifted = torch.randn(4, 2, 2), torch.randn(4, 3, 2)
    float_mask, bool_mask = source_masks(4, 2)
    trg = theirs.subsequent_mask(3)  # float [1, T, T]
    theirs.encode(source, float_mask), mine.encode(source, float_mask)
    expected = theirs.decode(shifted, float_mask, trg)
    close(mine.decode(shifted, float_mask, trg), expected)
    close(mine.decode(shifted, bool_mask, trg.bool()), expected)
    # The lab decodes from the last source step whatever the mask says; attnlab from the last step the
    # mask keeps (the last real point of a padded source). With a mask that keeps the last step of
    # every row, the two are the same:
    float_mask[0, 0, -1], float_mask[0, 0, 0] = 1.0, 0.0
    bool_mask = float_mask.bool()
    theirs.eval(), mine.eval()
    expected = theirs(source, float_mask)  # the lab's eval forward: encode, then its predict
    close(mine(source, float_mask), expected)
    for path in ALPHAS:
        close(read(mine, path), read(theirs, path))
    for mask in (float_mask, bool_mask, float_mask.to(torch.int64)):
        for use_cache in (True, False):
            close(mine.predict(source, mask, use_cache=use_cache), expected)


def test_gru_attention_decoder_takes_the_labs_float_masks():
    torch.manual_seed(6)
    their_enc, theirs = Encoder(2, 2), DecoderAttn(2, 2)
    torch.manual_seed(6)
    my_enc, mine = ours.Encoder(2, 2), ours.DecoderAttn(2, 2)
    source = torch.randn(3, 4, 2)
    float_mask, bool_mask = source_masks(3, 4)
    theirs.init_hidden(their_enc(source)), mine.init_hidden(my_enc(source))
    step = source[:, -1:]
    close(mine(step, float_mask), theirs(step, float_mask))
    close(mine.attn.alphas, theirs.attn.alphas)
    close(mine(step, bool_mask), theirs(step, bool_mask))


BAD_MASKS = {
    "a 0.5": torch.tensor([[[1.0, 0.5, 1.0, 1.0]]]),
    "an additive -inf": torch.tensor([[[0.0, float("-inf"), 0.0, 0.0]]]),
    "a NaN": torch.tensor([[[1.0, float("nan"), 1.0, 1.0]]]),
    "a 2": torch.tensor([[[1, 2, 1, 1]]]),
}


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize("bad", list(BAD_MASKS), ids=list(BAD_MASKS))
def test_a_mask_of_other_values_than_0_and_1_is_refused(bad):
    mask = BAD_MASKS[bad]
    x = torch.randn(1, 4, 2)
    attn = OurAttention(2)
    attn.init_keys(x)
    mha = ours.EncoderSelfAttn(3, 2, 10, 2).self_attn_heads
    _, model = selfattn_pair()
    model.eval()
    calls = [
        lambda: attn(x[:, :1], mask=mask),
        lambda: mha.attend(x, mask=mask),
        lambda: ours.EncoderSelfAttn(3, 2, 10, 2)(x, mask),
        lambda: model.predict(x[:, :2], mask[..., :2]),
        lambda: model(x[:, :2], mask[..., :2]),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="mask"):
            call()


@pytest.mark.bad_input("catalogue")
def test_attnlabs_own_attention_still_wants_boolean_masks():
    mha = OurMultiHeadAttention(2, 4)
    x = torch.randn(1, 3, 4)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        mha(x, x, x, mask=torch.ones(1, 3, 3))
    with pytest.raises(TypeError, match="mask"):
        OurAttention(2).attend_projected(x[..., :2], x[..., :2], x[..., :2], mask=torch.ones(1, 1, 3) * 1j)


# -- (c) the labs' checkpoints -----------------------------------------------------------------------------------


def saved(model):
    """``model.state_dict()`` through ``torch.save`` / ``torch.load``, as a checkpoint file would give it."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_the_labs_selfattn_checkpoint_loads_and_gives_the_labs_outputs():
    torch.manual_seed(17)
    theirs = EncoderDecoderSelfAttn(EncoderPe(3, 2, 10, 2), DecoderPe(3, 2, 10, 2), input_len=2, target_len=2)
    for p in theirs.parameters():  # weights no seed of ours would draw
        p.data.add_(torch.randn_like(p) * 0.3)
    state = saved(theirs)
    assert sum(".attn_heads." in key for key in state) == 54  # 3 modules x 3 heads x (q, k, v) x (weight, bias)
    torch.manual_seed(99)
    mine = ours.EncoderDecoderSelfAttn(ours.EncoderPe(3, 2, 10, 2), ours.DecoderPe(3, 2, 10, 2), 2, 2)
    keys_before = list(state)
    result = mine.load_state_dict(state)  # strict
    assert not result.missing_keys and not result.unexpected_keys
    assert list(state) == keys_before  # the caller's dictionary is left as it was
    X = torch.randn(6, 4, 2)
    close(mine(X), theirs(X))
    for path in ALPHAS:
        close(read(mine, path), read(theirs, path))
    theirs.eval(), mine.eval()
    close(mine(X), theirs(X))
    for path in ALPHAS:
        close(read(mine, path), read(theirs, path))
    # Back out and in again in attnlab's own layout.
    again = ours.EncoderDecoderSelfAttn(ours.EncoderPe(3, 2, 10, 2), ours.DecoderPe(3, 2, 10, 2), 2, 2).eval()
    again.load_state_dict(saved(mine))
    close(again(X), theirs(X))


def test_the_labs_layer_checkpoints_load_into_the_layers():
    torch.manual_seed(12)
    their_enc, their_dec = EncoderSelfAttn(2, 3, 8, 2), DecoderSelfAttn(2, 3, 8, 2)
    mine_enc, mine_dec = ours.EncoderSelfAttn(2, 3, 8, 2), ours.DecoderSelfAttn(2, 3, 8, 2)
    mine_enc.load_state_dict(their_enc.state_dict())
    mine_dec.load_state_dict(their_dec.state_dict())
    source, target = torch.randn(2, 4, 2), torch.randn(2, 3, 2)
    states = their_enc(source)
    close(mine_enc(source), states)
    their_dec.init_keys(states), mine_dec.init_keys(states)
    trg = EncoderDecoderSelfAttn.subsequent_mask(3)
    close(mine_dec(target, None, trg), their_dec(target, None, trg))
    close(mine_dec.cross_attn_heads.alphas, their_dec.cross_attn_heads.alphas)


def test_the_labs_gru_attention_checkpoint_loads_and_gives_the_labs_outputs():
    torch.manual_seed(23)
    theirs = EncoderDecoderAttn(Encoder(2, 2), DecoderAttn(2, 2), input_len=2, target_len=2)
    torch.manual_seed(24)
    mine = ours.EncoderDecoderAttn(ours.Encoder(2, 2), ours.DecoderAttn(2, 2), input_len=2, target_len=2)
    result = mine.load_state_dict(saved(theirs))
    assert not result.missing_keys and not result.unexpected_keys
    theirs.eval(), mine.eval()
    X = torch.randn(5, 4, 2)
    close(mine(X), theirs(X))
    close(mine.alphas, theirs.alphas)
    close(mine.predict(X[:, :2]), theirs(X))


@pytest.mark.bad_input("catalogue")
def test_a_checkpoint_in_neither_layout_gets_torchs_error():
    torch.manual_seed(0)
    state = saved(EncoderDecoderSelfAttn(EncoderPe(3, 2, 10, 2), DecoderPe(3, 2, 10, 2), 2, 2))
    mine = ours.EncoderDecoderSelfAttn(ours.EncoderPe(3, 2, 10, 2), ours.DecoderPe(3, 2, 10, 2), 2, 2)
    partial = dict(state)
    del partial["encoder.layer.self_attn_heads.attn_heads.1.linear_key.bias"]
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*encoder\.layer\.self_attn_heads\.in_proj\.weight"):
        mine.load_state_dict(partial)
    two_heads = saved(EncoderDecoderSelfAttn(EncoderPe(2, 2, 10, 2), DecoderPe(2, 2, 10, 2), 2, 2))
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*attn_heads\.0\.linear_query\.weight"):
        mine.load_state_dict(two_heads)
    wider = saved(EncoderSelfAttn(3, 4, 10, 2))  # the heads stack, into an in_proj of another size
    with pytest.raises(RuntimeError, match=r"size mismatch for self_attn_heads\.in_proj\.weight"):
        ours.EncoderSelfAttn(3, 2, 10, 2).load_state_dict(wider)
    unrelated = {"something.else": torch.zeros(1)}
    with pytest.raises(RuntimeError, match="Missing key"):
        mine.load_state_dict(unrelated)


# -- (d) the PE walkthrough's buffer name ----------------------------------------------------------------------


def test_the_walkthroughs_positional_encoding_checkpoint_loads():
    theirs = WalkthroughPositionalEncoding(encoding_size=16, dropout_prob=0.2, max_len=64).eval()
    state = saved(theirs)
    assert list(state) == ["positional_encoding"] and state["positional_encoding"].shape == (1, 64, 16)
    mine = OurPositionalEncoding(64, 16, dropout=0.2, scale_input=False)
    mine.pe.zero_()  # so that the loaded table, not attnlab's own, is what the outputs show
    result = mine.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    torch.testing.assert_close(mine.pe, state["positional_encoding"], atol=0, rtol=0)
    x = torch.arange(0, 128, dtype=torch.float).reshape(2, 4, 16)  # the walkthrough's input_1
    close(mine.eval()(x), theirs(x))
    bare = OurPositionalEncoding(64, 16, scale_input=False)
    bare.pe.zero_()
    bare.load_state_dict({"positional_encoding": state["positional_encoding"][0]})  # [max_len, D]
    torch.testing.assert_close(bare.pe, state["positional_encoding"], atol=0, rtol=0)


@pytest.mark.bad_input("catalogue")
def test_the_walkthroughs_table_of_another_length_gets_torchs_error():
    state = saved(WalkthroughPositionalEncoding(encoding_size=16, dropout_prob=0.0, max_len=32))
    with pytest.raises(RuntimeError, match=r"size mismatch for pe"):
        OurPositionalEncoding(64, 16, scale_input=False).load_state_dict(state)
