"""The attention lab's GRU encoder-decoder (with and without attention): golden values, teacher forcing, invariants.

Every expected number below is printed in the attention lab (and listed in the book helpers'
"Golden values"), to 4 decimals, so the tolerance is 1e-4.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from attnlab.attention import Attention, attend, collect_attention, padding_mask, record_attention
from attnlab.models import Decoder, DecoderAttn, Encoder, EncoderDecoder, EncoderDecoderAttn

FULL_SEQ = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0]]).view(1, 4, 2)
SOURCE = FULL_SEQ[:, :2]
ATOL = 1e-4


def close4(actual, expected):
    assert_close(actual.detach(), torch.tensor(expected), atol=ATOL, rtol=0)


# -- the attention lab's golden values ---------------------------------------------------


def _keys_and_query():
    """The attention lab §1.5.3-1.5.4: encoder states (keys = values) and the decoder's first query."""
    torch.manual_seed(21)
    encoder = Encoder(n_features=2, hidden_dim=2)
    hidden_seq = encoder(SOURCE)  # [1, 2, 2]
    torch.manual_seed(21)
    decoder = Decoder(n_features=2, hidden_dim=2)
    decoder.init_hidden(hidden_seq)
    out = decoder(SOURCE[:, -1:])
    assert out.shape == (1, 1, 2)
    query = decoder.hidden.permute(1, 0, 2)  # [1, B, D] -> [B, 1, D]
    return hidden_seq.detach(), query.detach()


def test_encoder_hidden_states_are_the_labs():
    torch.manual_seed(21)
    encoder = Encoder(n_features=2, hidden_dim=2)
    hidden_seq = encoder(SOURCE)
    close4(hidden_seq, [[[0.0832, -0.0356], [0.3105, -0.5263]]])
    # the final state is kept, sequence-first, as nn.GRU returns it
    assert encoder.hidden.shape == (1, 1, 2)
    assert_close(encoder.hidden[0], hidden_seq[:, -1])


def test_decoder_first_query_is_the_labs():
    _, query = _keys_and_query()
    close4(query, [[[0.3913, -0.6853]]])


def test_scores_and_contexts_from_query_and_keys_with_attend():
    keys, query = _keys_and_query()
    q = query.unsqueeze(1)  # [B, 1, 1, D]: one head
    k = keys.unsqueeze(1)  # [B, 1, S, D]; the values are the keys

    # uniform weights (every score 0) average the values
    context, weights = attend(q, k, k, scale=0.0, need_weights=True)
    close4(weights[:, 0], [[[0.5, 0.5]]])
    close4(context[:, 0], [[[0.1968, -0.2809]]])

    products = q @ k.transpose(-2, -1)  # [B, 1, 1, S]
    close4(products[:, 0], [[[0.0569, 0.4821]]])
    _, weights = attend(q, k, k, scale=1.0, need_weights=True)
    close4(weights[:, 0], [[[0.3953, 0.6047]]])

    close4(products[:, 0] / math.sqrt(2), [[[0.0403, 0.3409]]])
    context, weights = attend(q, k, k, need_weights=True)  # default scale 1/sqrt(D)
    close4(weights[:, 0], [[[0.4254, 0.5746]]])
    close4(context[:, 0], [[[0.2138, -0.3175]]])


def test_masked_attention_alphas_are_the_labs():
    source_seq = torch.tensor([[[-1.0, 1.0], [0.0, 0.0]]])
    keys = torch.tensor([[[-0.38, 0.44], [0.85, -0.05]]])
    query = torch.tensor([[[-1.0, 1.0]]])
    source_mask = padding_mask(source_seq)
    assert source_mask.tolist() == [[[True, False]]]
    torch.manual_seed(11)
    attnh = Attention(2)
    attnh.init_keys(keys)
    attnh(query, mask=source_mask)
    close4(attnh.alphas, [[[1.0, 0.0]]])


LAB_OUTPUTS = [[[-0.3555, -0.1220]], [[-0.2641, -0.2521]]]


def test_decoder_attn_free_running_outputs_are_the_labs():
    torch.manual_seed(21)
    encoder = Encoder(n_features=2, hidden_dim=2)
    decoder_attn = DecoderAttn(n_features=2, hidden_dim=2)
    decoder_attn.init_hidden(encoder(SOURCE))
    inputs = SOURCE[:, -1:]
    for expected in LAB_OUTPUTS:
        out = decoder_attn(inputs)
        close4(out, [expected])
        inputs = out
    # each step's weights are kept, as the lab's alphas [B, 1, S]
    assert decoder_attn.attn.alphas.shape == (1, 1, 2)


@pytest.mark.parametrize("cls", [EncoderDecoder, EncoderDecoderAttn])
@pytest.mark.parametrize("train", [True, False])
def test_encoder_decoder_with_attention_gives_the_labs_rows(cls, train):
    torch.manual_seed(21)
    encoder = Encoder(n_features=2, hidden_dim=2)
    decoder_attn = DecoderAttn(n_features=2, hidden_dim=2)
    encdec = cls(encoder, decoder_attn, input_len=2, target_len=2, teacher_forcing_prob=0.0)
    encdec.train(train)
    outputs = encdec(FULL_SEQ)
    close4(outputs, [[row[0] for row in LAB_OUTPUTS]])
    assert outputs.requires_grad  # the predictions keep their graph for the loss


# -- attention weights ---------------------------------------------------------------------


def _attn_model(batch, target_len=3, input_len=4, prob=0.0):
    torch.manual_seed(3)
    model = EncoderDecoderAttn(Encoder(2, 5), DecoderAttn(2, 5), input_len, target_len, prob)
    X = torch.randn(batch, input_len + target_len, 2)
    return model, X


@pytest.mark.parametrize("batch", [1, 7])
def test_alphas_hold_every_step(batch):
    model, X = _attn_model(batch)
    outputs = model(X)
    assert outputs.shape == (batch, 3, 2)
    assert model.alphas.shape == (batch, 3, 4)  # [B, T, S]
    assert not model.alphas.requires_grad
    assert_close(model.alphas.sum(-1), torch.ones(batch, 3))
    # the last row is the decoder's own last alphas
    assert_close(model.alphas[:, -1:], model.decoder.attn.alphas)


def test_collect_attention_gives_the_gru_attention_as_one_head():
    model, X = _attn_model(5)
    with record_attention():
        model(X)
    recorded = collect_attention(model)
    assert list(recorded) == ["decoder.attn"]
    assert recorded["decoder.attn"].shape == (5, 1, 3, 4)  # [B, 1, T, S]
    assert_close(recorded["decoder.attn"][:, 0], model.alphas)


def test_alphas_match_a_step_by_step_reference():
    """The stored weights are softmax(q k^T / sqrt(D)) of each step's GRU output and the encoder states."""
    model, X = _attn_model(4)
    model.eval()
    outputs = model(X)
    enc, dec = model.encoder, model.decoder
    keys = enc(X[:, :4])  # [B, S, D]
    hidden = keys[:, -1:].transpose(0, 1)
    inputs = X[:, 3:4]
    for t in range(3):
        out, hidden = dec.basic_rnn(inputs, hidden)  # [B, 1, D]
        q = dec.attn.linear_query(out)
        k = dec.attn.linear_key(keys)
        alphas = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(5), dim=-1)  # [B, 1, S]
        assert_close(model.alphas[:, t : t + 1], alphas.detach())
        inputs = dec.regression(torch.cat([alphas @ keys, out], dim=-1))
        assert_close(outputs[:, t : t + 1], inputs)


# -- teacher forcing -----------------------------------------------------------------------


def _free_running(model, X):
    """The model's decoder fed its own predictions: the reference for no teacher forcing."""
    source = X[:, : model.input_len]
    model.decoder.init_hidden(model.encoder(source))
    inputs, outs = source[:, -1:], []
    for _ in range(model.target_len):
        inputs = model.decoder(inputs)
        outs.append(inputs)
    return torch.cat(outs, dim=1)


def test_teacher_forcing_is_never_used_in_eval():
    model, X = _attn_model(6, prob=1.0)
    model.eval()
    expected = _free_running(model, X)
    assert_close(model(X), expected)
    assert_close(model(X[:, :4]), expected)  # eval needs only the source


def test_teacher_forcing_feeds_the_targets_in_training():
    model, X = _attn_model(6, prob=1.0)
    outputs = model(X)
    source, target = X[:, :4], X[:, 4:]
    model.decoder.init_hidden(model.encoder(source))
    inputs = torch.cat([source[:, -1:], target[:, :-1]], dim=1)  # the true previous points
    expected = torch.cat([model.decoder(inputs[:, t : t + 1]) for t in range(3)], dim=1)
    assert_close(outputs, expected)
    assert not torch.allclose(outputs, _free_running(model, X))


def test_teacher_forcing_coin_uses_torchs_rng_like_the_attention_lab():
    """The attention lab flips `torch.rand(1) <= prob` at every step; a seeded run makes the same choices."""
    model, X = _attn_model(3, target_len=8, prob=0.5)
    source, target = X[:, :4], X[:, 4:]
    torch.manual_seed(1234)
    outputs = model(X)
    after_forward = torch.rand(1)

    torch.manual_seed(1234)
    coins = [bool(torch.rand(1) <= 0.5) for _ in range(8)]
    assert_close(torch.rand(1), after_forward)  # one draw per step, no more
    assert 0 < sum(coins) < 8  # the test exercises both branches
    model.decoder.init_hidden(model.encoder(source))
    inputs, expected = source[:, -1:], []
    for t, coin in enumerate(coins):
        out = model.decoder(inputs)
        expected.append(out)
        inputs = target[:, t : t + 1] if coin else out
    assert_close(outputs, torch.cat(expected, dim=1))


def test_eval_draws_the_coin_too_so_seeded_streams_stay_in_step():
    model, X = _attn_model(2, target_len=5, prob=0.5)
    model.eval()
    torch.manual_seed(7)
    model(X)
    after = torch.rand(1)
    torch.manual_seed(7)
    for _ in range(5):
        torch.rand(1)
    assert_close(torch.rand(1), after)


# -- devices, dtypes, batches, gradients ---------------------------------------------------


@pytest.mark.parametrize("batch", [1, 7])
def test_plain_encoder_decoder_shapes_and_gradients(batch):
    torch.manual_seed(0)
    model = EncoderDecoder(Encoder(3, 4), Decoder(3, 4), input_len=2, target_len=5)
    X = torch.randn(batch, 7, 3)
    outputs = model(X)
    assert outputs.shape == (batch, 5, 3)
    outputs.pow(2).mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_outputs_follow_the_input_dtype_and_device():
    model, X = _attn_model(2)
    model.double()
    outputs = model(X.double())
    assert outputs.dtype == torch.float64 and outputs.device == X.device
    assert model.alphas.dtype == torch.float64


# -- bad arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, error, name",
    [
        (lambda: Encoder(0, 2), ValueError, "n_features"),
        (lambda: Encoder(2, 2.5), TypeError, "hidden_dim"),
        (lambda: Decoder(2, -1), ValueError, "hidden_dim"),
        (lambda: DecoderAttn("2", 2), TypeError, "n_features"),
        (lambda: EncoderDecoder(Encoder(2, 2), Decoder(2, 2), 0, 2), ValueError, "input_len"),
        (lambda: EncoderDecoder(Encoder(2, 2), Decoder(2, 2), 2, True), TypeError, "target_len"),
        (lambda: EncoderDecoder(Encoder(2, 2), Decoder(2, 2), 2, 2, 1.5), ValueError, "teacher_forcing_prob"),
        (lambda: EncoderDecoder("encoder", Decoder(2, 2), 2, 2), TypeError, "encoder"),
        (lambda: EncoderDecoder(torch.nn.GRU(2, 2), Decoder(2, 2), 2, 2), TypeError, "n_features"),
        (lambda: EncoderDecoderAttn(Encoder(2, 2), Decoder(2, 2), 2, 2), TypeError, "attn"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(build, error, name):
    with pytest.raises(error, match=name):
        build()


def test_bad_inputs_raise_clear_errors():
    model, X = _attn_model(2, prob=0.5)
    with pytest.raises(ValueError, match="target_len"):
        model(X[:, :4])  # training with teacher forcing needs the targets
    with pytest.raises(ValueError, match=r"\[B, L, 2\]"):
        model(torch.randn(2, 7, 3))
