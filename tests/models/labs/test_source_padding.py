"""source_mask on the squares models: a padded source with its mask is the unpadded source, row by row.

The reference for every model is the same weights built for the shorter, unpadded source (``input_len=L``)
and run without a mask: two independent paths that must agree. The helpers (check_source_mask, last_steps)
are checked against plain Python loops.
"""

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from attnlab.data import SquarePrefixes, make_loaders
from attnlab.labs.squares.figures import attention_weights
from attnlab.labs.squares.models import SQUARES_MODELS, squares_model
from attnlab.models import EncoderDecoder, EncoderDecoderAttn
from attnlab.models.labs.source_padding import check_source_mask, last_steps
from attnlab.training import fit, supervised

from lab_code import Decoder as LabDecoder
from lab_code import DecoderAttn as LabDecoderAttn
from lab_code import Encoder as LabEncoder

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-6
GRU_MODELS = ("gru", "gru-attn")


def padded_batch():
    """Squares of 2, 3 and 4 given corners (each length several times), padded to 4, with the two that follow."""
    data = SquarePrefixes(24, seed=5)
    assert {2, 3, 4} <= set(data.lengths.tolist())
    return data.source, data.source_mask, data.target, data.lengths


def build(name, seed, input_len, **kwargs):
    torch.manual_seed(seed)
    return squares_model(name, input_len=input_len, **kwargs)


def build_short(model, name, L, **kwargs):
    """The same weights, for an unpadded source of ``L`` steps."""
    short = squares_model(name, input_len=L, **kwargs)
    short.load_state_dict(model.state_dict())
    return short


# -- last_steps and check_source_mask --------------------------------------------------------------


def test_last_steps_is_each_rows_last_true():
    g = torch.Generator().manual_seed(1)
    B, S, D = 9, 5, 3
    seq = torch.randn(B, S, D, generator=g)
    mask = torch.rand(B, 1, S, generator=g) < 0.5
    mask[:, 0, 0] |= ~mask[:, 0].any(dim=-1)  # at least one real step per row
    mask[0, 0] = torch.tensor([False, False, True, False, False])
    mask[1, 0] = True
    expected = torch.stack([seq[b, max(s for s in range(S) if mask[b, 0, s])] for b in range(B)])[:, None]
    assert_close(last_steps(seq, mask), expected, atol=0, rtol=0)
    assert torch.equal(last_steps(seq, None), seq[:, -1:])
    assert last_steps(seq, mask).shape == (B, 1, D)


def test_check_source_mask_accepts_and_converts():
    source = torch.zeros(3, 4, 2)
    mask = torch.tensor([[[1, 1, 0, 0]], [[1, 1, 1, 1]], [[1, 1, 1, 0]]], dtype=torch.bool)
    assert check_source_mask(None, source) is None
    assert torch.equal(check_source_mask(mask, source, right_padded=True), mask)
    converted = check_source_mask(mask.float(), source)  # the labs' 0/1 floats
    assert converted.dtype == torch.bool and torch.equal(converted, mask)
    one = torch.tensor([[[True, True, True, False]]])
    expanded = check_source_mask(one, source)
    assert expanded.shape == (3, 1, 4) and torch.equal(expanded, one.expand(3, 1, 4))
    assert expanded.stride(0) == 0  # expanded, not copied
    # Any pattern with a real step per row, when right padding is not required.
    left = torch.tensor([[[False, False, True, True]]]).expand(3, 1, 4)
    assert torch.equal(check_source_mask(left, source), left)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("mask", "kwargs", "error", "match"), [
    (torch.ones(3, 4, dtype=torch.bool), {}, ValueError, r"source_mask must have shape \[B, 1, S\] = \[3, 1, 4\]"),
    (torch.ones(3, 2, 4, dtype=torch.bool), {}, ValueError, r"source_mask must have shape.*got \[3, 2, 4\]"),
    (torch.ones(3, 1, 5, dtype=torch.bool), {}, ValueError, r"source_mask must have shape.*got \[3, 1, 5\]"),
    (torch.ones(2, 1, 4, dtype=torch.bool), {}, ValueError, r"source_mask must have shape.*got \[2, 1, 4\]"),
    (torch.tensor([[[1, 1, 0, 0]], [[0, 0, 0, 0]], [[1, 0, 0, 0]]]).bool(), {}, ValueError,
     r"source_mask row 1 marks no step as real"),
    (torch.tensor([[[1, 1, 0, 0]], [[1, 1, 1, 0]], [[1, 0, 1, 0]]]).bool(), {"right_padded": True}, ValueError,
     r"source_mask row 2 is \[1, 0, 1, 0\].*right-padded"),
    (torch.tensor([[[0, 1, 1, 1]]]).bool(), {"right_padded": True}, ValueError, r"source_mask row 0 is \[0, 1, 1, 1\]"),
    ([[[True, True, True, True]]], {}, TypeError, r"source_mask must be a tensor.*got list"),
    (torch.full((3, 1, 4), 0.5), {}, ValueError,
     r"source_mask: mask of dtype torch.float32 must hold only 0 \(masked\) and 1"),
])
def test_check_source_mask_bad_input(mask, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_source_mask(mask, torch.zeros(3, 4, 2), **kwargs)


# -- a padded source with its mask predicts what the unpadded source does -------------------------


@pytest.mark.parametrize("name", SQUARES_MODELS)
def test_eval_predictions_on_padded_source_are_the_unpadded_ones(name):
    source, mask, _, lengths = padded_batch()
    model = build(name, seed=3, input_len=4).eval()
    padded = model(source, source_mask=mask)  # [B, 2, 2]
    assert padded.shape == (len(source), 2, 2)
    assert_close(model.predict(source, mask), padded, atol=ATOL, rtol=0)
    unmasked = model(source)
    for L in (2, 3, 4):
        rows = lengths == L
        short = build_short(model, name, L).eval()
        expected = short(source[rows, :L])
        assert_close(padded[rows], expected, atol=ATOL, rtol=0)
        if L < 4:  # the test can fail: reading the padding as data changes the predictions
            assert (unmasked[rows] - expected).abs().max() > 1e-3


@pytest.mark.parametrize("name", SQUARES_MODELS)
def test_teacher_forced_training_on_padded_source_is_the_unpadded_one(name):
    source, mask, target, lengths = padded_batch()
    # GRU models: every coin says "feed the truth", so both runs feed the same points.
    kwargs = {"teacher_forcing_prob": 1.0} if name in GRU_MODELS else {}
    model = build(name, seed=4, input_len=4, **kwargs).train()
    torch.manual_seed(11)
    padded = model(torch.cat([source, target], dim=1), source_mask=mask)  # X [B, 6, 2] -> [B, 2, 2]
    torch.manual_seed(11)
    unmasked = model(torch.cat([source, target], dim=1))
    for L in (2, 3, 4):
        rows = lengths == L
        short = build_short(model, name, L, **kwargs).train()
        torch.manual_seed(11)
        expected = short(torch.cat([source[rows, :L], target[rows]], dim=1))  # X [B_L, L + 2, 2]
        assert_close(padded[rows], expected, atol=ATOL, rtol=0)
        if L < 4:  # the test can fail: reading the padding as data changes the predictions
            assert (unmasked[rows] - expected).abs().max() > 1e-3


def _outputs_and_grads(model, X, mask, target):
    model.zero_grad()
    torch.manual_seed(12)
    out = model(X, source_mask=mask)
    nn.functional.mse_loss(out, target).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", SQUARES_MODELS)
@pytest.mark.parametrize("value", [1e3, float("nan"), float("-inf")])
def test_padding_values_do_not_matter(name, value):
    # NaN or inf padding too: a zero attention weight times NaN is NaN, so the models zero the padding.
    source, mask, target, _ = padded_batch()
    kwargs = {"teacher_forcing_prob": 1.0} if name in GRU_MODELS else {}
    model = build(name, seed=5, input_len=4, **kwargs).train()
    padding = ~mask[:, 0]  # [B, S]
    loud = source.clone()
    loud[padding] = value
    out, grads = _outputs_and_grads(model, torch.cat([source, target], dim=1), mask, target)
    loud_out, loud_grads = _outputs_and_grads(model, torch.cat([loud, target], dim=1), mask, target)
    assert_close(loud_out, out, atol=ATOL, rtol=0)
    assert grads.keys() == loud_grads.keys() and len(grads) > 0
    for key, grad in grads.items():
        assert_close(loud_grads[key], grad, atol=ATOL, rtol=1e-5, msg=key)
    model.eval()
    assert_close(model(loud, source_mask=mask), model(source, source_mask=mask), atol=ATOL, rtol=0)
    # The test can fail: without the mask, the loud padding moves the predictions.
    assert not torch.allclose(model(loud), model(source), atol=1e-3, equal_nan=False)


@pytest.mark.parametrize("name", ["selfattn-pe", "transformer"])
def test_attention_models_take_any_mask_and_ignore_what_it_hides(name):
    # Not right padding: a hole, padding first. Decoding starts from each row's last real step.
    source, _, _, _ = padded_batch()
    mask = torch.tensor([[True, False, True, True], [False, False, True, False], [True, True, False, True],
                         [False, True, True, True]]).repeat(6, 1)[:, None]  # [B, 1, 4]
    model = build(name, seed=10, input_len=4).eval()
    loud = source.clone()
    loud[~mask[:, 0]] = 1e3
    assert_close(model(loud, source_mask=mask), model(source, source_mask=mask), atol=ATOL, rtol=0)
    assert (model(loud) - model(source)).abs().max() > 1e-3


@pytest.mark.parametrize("name", SQUARES_MODELS)
@pytest.mark.parametrize("input_len", [2, 4])
def test_without_a_mask_every_step_is_real(name, input_len):
    source, _, target, _ = padded_batch()
    source = source[:, :input_len]
    model = build(name, seed=6, input_len=input_len)
    all_real = torch.ones(len(source), 1, input_len, dtype=torch.bool)
    X = torch.cat([source, target], dim=1)
    torch.manual_seed(13)
    plain = model.train()(X)
    torch.manual_seed(13)
    masked = model(X, source_mask=all_real)
    assert_close(masked, plain, atol=ATOL, rtol=0)
    model.eval()
    assert_close(model(source, source_mask=all_real), model(source), atol=ATOL, rtol=0)
    assert_close(model(source, source_mask=all_real[:1]), model(source), atol=ATOL, rtol=0)  # [1, 1, S]


# -- attention never looks at the padding --------------------------------------------------------


@pytest.mark.parametrize("name", ["selfattn-pe", "gru-attn", "transformer"])
def test_no_attention_weight_on_padded_keys(name):
    source, mask, _, _ = padded_batch()
    model = build(name, seed=7, input_len=4)
    weights = attention_weights(model, source, mask)  # {layer: [B, H, T, S]}
    padded_keys = ~mask[:, :, None, :]  # [B, 1, 1, S]
    checked = 0
    for layer, w in weights.items():
        if w.shape[-1] != 4:  # the decoder's self-attention: its keys are the decoded steps, never padding
            continue
        checked += 1
        assert torch.all(w.masked_select(padded_keys.expand_as(w)) == 0), layer
        assert_close(w.sum(dim=-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)
    encoder_layers = [k for k in weights if k.startswith(("encoder", "transformer.encoder"))]
    cross_layers = [k for k in weights if "cross" in k or k == "decoder.attn"]
    assert checked == len(encoder_layers) + len(cross_layers) and cross_layers
    assert (name == "gru-attn") or encoder_layers


# -- GRU models: right padding only, and attnlab's own parts only ---------------------------------


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize("name", GRU_MODELS)
def test_gru_models_refuse_left_padding(name):
    source, _, target, _ = padded_batch()
    left = torch.zeros(len(source), 1, 4, dtype=torch.bool)
    left[:, :, 2:] = True  # padding first, then two real steps
    model = build(name, seed=8, input_len=4, teacher_forcing_prob=1.0)
    with pytest.raises(ValueError, match=r"source_mask row 0 is \[0, 0, 1, 1\]"):
        model.train()(torch.cat([source, target], dim=1), source_mask=left)
    with pytest.raises(ValueError, match=r"source_mask row 0"):
        model.eval()(source, source_mask=left)
    with pytest.raises(ValueError, match=r"source_mask row 0"):
        model.predict(source, left)


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize(("model_class", "decoder_class"), [(EncoderDecoder, LabDecoder),
                                                            (EncoderDecoderAttn, LabDecoderAttn)])
def test_the_labs_own_gru_parts_refuse_a_source_mask(model_class, decoder_class):
    torch.manual_seed(21)
    model = model_class(LabEncoder(2, 2), decoder_class(2, 2), input_len=2, target_len=2, teacher_forcing_prob=0.0)
    source = torch.randn(3, 2, 2)
    model.eval()
    assert model(source).shape == (3, 2, 2)  # without a mask they run, the lab's way
    with pytest.raises(ValueError, match=r"source_mask: the lab's own encoder and decoder take no source mask"):
        model(source, source_mask=torch.ones(3, 1, 2, dtype=torch.bool))


# -- training on the variable-length squares ------------------------------------------------------


def test_training_smoke_on_variable_length_squares():
    train_loader, test_loader = make_loaders(n_train=32, n_test=16, batch_size=8, variable_len=True)
    model = build("transformer", seed=9, input_len=4)
    calls = []

    def keep_call(module, args, kwargs):
        calls.append((module.training, len(args), sorted(kwargs), tuple(kwargs["X"].shape)))

    model.register_forward_pre_hook(keep_call, with_kwargs=True)
    history = fit(model, torch.optim.Adam(model.parameters(), lr=0.01), train_loader, epochs=2,
                  loss=supervised(nn.MSELoss()), val_loader=test_loader)
    assert history.epochs == 2
    assert all(math.isfinite(v) for v in history.losses + history.val_losses)
    # model(**x): the dict's keys arrive as keyword arguments, the padded source with its mask.
    train_calls = [c for c in calls if c[0]]
    eval_calls = [c for c in calls if not c[0]]
    assert len(train_calls) == 2 * 4 and len(eval_calls) == 2 * 2
    assert all(c[1:] == (0, ["X", "source_mask"], (8, 6, 2)) for c in train_calls)
    assert all(c[1:] == (0, ["X", "source_mask"], (8, 4, 2)) for c in eval_calls)
