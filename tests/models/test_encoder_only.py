"""The encoder-only Transformer: bidirectional, padding never attended to, one pass, clear errors."""

import pytest
import torch
from torch.testing import assert_close

from attnlab.data import PAD, make_task_batch
from attnlab.data.tasks.layouts import encoder_only_batch
from attnlab.encodings.registry import ENCODINGS, RANDOMIZED, task_positions
from attnlab.models import EncoderOnlyTransformer

from model_helpers import perturbed

# Schemes with a fixed answer for a given input (the randomized ones draw new positions each call).
FIXED = [e for e in ENCODINGS if e not in RANDOMIZED and e not in ("xpos", "cope") and task_positions(e) is None]


def model_for(encoding, **sizes):
    torch.manual_seed(0)
    kw = {"vocab_size": 7, "d_model": 16, "n_heads": 2, "position": encoding, "max_len": 64, **sizes}
    return perturbed(EncoderOnlyTransformer(**kw))


@pytest.mark.parametrize("encoding", FIXED)
def test_every_position_sees_the_whole_sequence(encoding):
    # Non-causal: changing the last token changes the output at the first position (a causal stack would not).
    model = model_for(encoding)
    x = torch.randint(3, 7, (2, 9), generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[:, -1] = 3 + (x[:, -1] - 3 + 1) % 4
    with torch.no_grad():
        assert (model(x)[:, 0] - model(y)[:, 0]).abs().max() > 1e-4


@pytest.mark.parametrize("encoding", FIXED)
def test_padding_changes_nothing(encoding):
    # Right padding is masked out of every attention: the real positions' outputs are those of the unpadded row.
    model = model_for(encoding)
    x = torch.randint(3, 7, (3, 8), generator=torch.Generator().manual_seed(2))
    padded = torch.cat([x, torch.full((3, 5), PAD)], dim=1)
    with torch.no_grad():
        assert_close(model(padded)[:, :8], model(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", [e for e in RANDOMIZED])
def test_randomized_positions_are_drawn_in_eval_too(encoding):
    # Ruoss et al.'s code draws positions at every call, training or not: two calls differ, one seed repeats.
    model = model_for(encoding)
    x = torch.randint(3, 7, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.manual_seed(5)
        a = model(x)
        b = model(x)
        torch.manual_seed(5)
        c = model(x)
    assert (a - b).abs().max() > 1e-5
    assert torch.equal(a, c)


def test_predict_and_the_slots_layout():
    model = model_for("rotary")
    batch = make_task_batch("duplicate", 4, 5, n_symbols=4, generator=0)
    inputs, labels = encoder_only_batch(batch)
    pred = model.predict(inputs)
    assert pred.shape == inputs.shape == (4, 15) and pred.dtype == torch.int64
    assert torch.equal(pred, model(inputs).argmax(-1))


def test_causal_only_schemes_are_refused():
    for encoding in ("xpos", "cope"):
        with pytest.raises(ValueError, match=f"{encoding}.*causal"):
            EncoderOnlyTransformer(vocab_size=7, d_model=16, n_heads=2, position=encoding)


@pytest.mark.bad_input("numbers")
def test_bad_inputs_name_the_argument():
    model = model_for("none")
    with pytest.raises(ValueError, match="x holds ids from"):
        model(torch.tensor([[3, 9]]))
    with pytest.raises(TypeError, match="x must be a tensor"):
        model([[3, 4]])
    with pytest.raises(ValueError, match="d_model .* divisible by n_heads"):
        EncoderOnlyTransformer(vocab_size=7, d_model=15, n_heads=2)
    values = EncoderOnlyTransformer(n_features=2, d_model=8, n_heads=2)
    assert values(torch.randn(2, 5, 2)).shape == (2, 5, 2)
    with pytest.raises(TypeError, match="predict is for token models"):
        values.predict(torch.randn(2, 5, 2))
