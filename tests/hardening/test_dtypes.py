"""Inputs of the wrong dtype, and heads of width 0 (issue 13, part of class 7).

A float32 module fed float64, float16 or integer input used to fail deep inside
torch ("mat1 and mat2 must have the same dtype", or an RNN's ValueError), or not
at all: a key/value cache silently cast float64 steps into its float32 buffer. Now
the value is checked where it first meets the weights (or the cache), once, by its
dtype attribute, and a ``TypeError`` names the argument and both dtypes.
``pytest -m bad_input -q`` counts these under "messages and streams".
"""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import (
    AdditiveScore,
    Attention,
    DecodingCache,
    GeneralScore,
    KVCache,
    LabMultiHeadAttention,
    MultiHeadAttention,
    scaled_dot_scores,
)
from attnlab.labs.squares.models import SQUARES_MODELS, squares_model
from attnlab.models import Decoder, DecoderAttn, DecoderOnlyTransformer, Encoder, Transformer
from attnlab.training import Trainer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.bad_input("messages and streams")]

F64, F32, F16, I64 = torch.float64, torch.float32, torch.float16, torch.int64


def message(name: str, got: torch.dtype, want: torch.dtype = F32) -> str:
    """The start of the error: the argument, its dtype and the parameters' dtype."""
    return rf"{name} has dtype {got} but the .*parameters are {want}"


# -- the squares models, at their entry -----------------------------------------------------


@pytest.mark.parametrize("name", SQUARES_MODELS)
@pytest.mark.parametrize("dtype", [F64, F16])
@pytest.mark.parametrize("train", [True, False])
def test_a_float32_squares_model_given_another_float_dtype_names_both(name, dtype, train):
    model = squares_model(name).train(train)
    X = torch.randn(2, 4 if train else 2, 2, dtype=dtype)
    with pytest.raises(TypeError, match=message("X", dtype) + r"; convert with X\.float\(\) or model\."):
        model(X)


@pytest.mark.parametrize("name", ["selfattn-pe", "transformer"])
def test_predict_given_float64_names_the_source(name):
    model = squares_model(name).eval()
    with pytest.raises(TypeError, match=message("source(_seq)?", F64)):
        model.predict(torch.randn(2, 2, 2, dtype=F64))


@pytest.mark.parametrize("name", ["gru", "gru-attn"])
def test_the_gru_models_given_integers_name_both_dtypes(name):
    model = squares_model(name).eval()
    with pytest.raises(TypeError, match=message("X", I64) + r"; convert with X\.float\(\)"):
        model(torch.ones(2, 2, 2, dtype=I64))


def test_trainer_predict_with_integer_squares_names_both_dtypes():
    # Floating inputs are cast to the model's dtype (the book's .float()); integers are kept, and refused here.
    model = squares_model("gru-attn")
    trainer = Trainer(model, torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    with pytest.raises(TypeError, match=message("X", I64)):
        trainer.predict(torch.ones(2, 2, 2, dtype=I64))


# -- the GRU parts ---------------------------------------------------------------------------


def test_gru_parts_given_float64_name_the_argument():
    with pytest.raises(TypeError, match=message("X", F64)):
        Encoder(2, 3)(torch.randn(1, 4, 2, dtype=F64))
    with pytest.raises(TypeError, match=message("hidden_seq", F64)):
        Decoder(2, 3).init_hidden(torch.randn(1, 4, 3, dtype=F64))  # used to be kept, and fail a step later
    with pytest.raises(TypeError, match=message("hidden_seq", F64)):
        DecoderAttn(2, 3).init_hidden(torch.randn(1, 4, 3, dtype=F64))
    decoder = Decoder(2, 3)
    decoder.init_hidden(torch.randn(1, 4, 3))
    with pytest.raises(TypeError, match=message("X", F64)):
        decoder(torch.randn(1, 1, 2, dtype=F64))


# -- attention modules ----------------------------------------------------------------------


X = torch.randn(2, 3, 4)


@pytest.mark.parametrize("dtype", [F64, I64])
def test_multihead_attention_names_the_query(dtype):
    mha = MultiHeadAttention(2, 4)
    x = X.to(dtype)
    with pytest.raises(TypeError, match=message("query", dtype)):
        mha(x, x, x)


def test_multihead_cross_attention_names_the_key_or_value():
    mha = MultiHeadAttention(2, 4)
    with pytest.raises(TypeError, match=message("key", F64)):
        mha(X, X.double())
    with pytest.raises(TypeError, match=message("value", F64)):
        mha(X, X, X.double())
    with pytest.raises(TypeError, match=message("keys", F64)):
        LabMultiHeadAttention(2, 4).init_keys(X.double())  # the labs' stateful call


def test_a_float64_module_given_float32_names_both_the_other_way():
    mha = MultiHeadAttention(2, 4).double()
    with pytest.raises(TypeError, match=message("query", F32, F64) + r"; convert with query\.double\(\)"):
        mha(X, X, X)


def test_single_head_attention_names_keys_and_query():
    attn = Attention(4)
    with pytest.raises(TypeError, match=message("keys", F64)):
        attn.init_keys(X.double())
    attn.init_keys(X)
    with pytest.raises(TypeError, match=message("query", F64)):
        attn(X.double())


@pytest.mark.parametrize("score", [lambda: AdditiveScore(4, 4, 3), lambda: GeneralScore(4, 4)])
def test_learned_score_functions_name_the_query(score):
    with pytest.raises(TypeError, match=message("query", F64)):
        score()(X.double(), X.double())


# -- key/value caches -----------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [0, 8])
def test_a_float32_cache_fed_float64_names_both(capacity):
    # It used to cast the float64 step into its float32 buffer without a word.
    cache = KVCache(capacity)
    step = torch.zeros(1, 2, 1, 4)
    cache.append(step, step)
    with pytest.raises(TypeError, match=r"keys have dtype torch.float64 but the cache holds torch.float32"):
        cache.append(step.double(), step.double())
    with pytest.raises(TypeError, match=r"values have dtype torch.float64 but the cache holds torch.float32"):
        cache.append(step, step.double())
    assert len(cache) == 1  # nothing was appended


def test_a_decoding_cache_filled_by_a_float32_model_refuses_a_float64_one():
    torch.manual_seed(0)
    small = DecoderOnlyTransformer(n_features=2, d_model=8, n_heads=2, n_layers=1)
    big = DecoderOnlyTransformer(n_features=2, d_model=8, n_heads=2, n_layers=1).double()
    cache = DecodingCache()
    with torch.no_grad():
        small(torch.randn(1, 3, 2), cache=cache)
        cache.advance(3)
        with pytest.raises(TypeError, match="keys have dtype torch.float64 but the cache holds torch.float32"):
            big(torch.randn(1, 1, 2, dtype=F64), cache=cache)


# -- the Transformers -----------------------------------------------------------------------


def test_real_valued_transformers_name_the_argument():
    torch.manual_seed(0)
    model = Transformer(n_features=2, d_model=8, n_heads=2, n_layers=1)
    with pytest.raises(TypeError, match=message("source", F64)):
        model(torch.randn(1, 3, 2, dtype=F64), torch.randn(1, 3, 2))
    with pytest.raises(TypeError, match=message("target_in", F64)):
        model(torch.randn(1, 3, 2), torch.randn(1, 3, 2, dtype=F64))
    with pytest.raises(TypeError, match=message("source", F64)):
        model.generate(torch.randn(1, 3, 2, dtype=F64), 2, torch.zeros(1, 1, 2))
    with pytest.raises(TypeError, match=message("x", F64)):
        DecoderOnlyTransformer(n_features=2, d_model=8, n_heads=2, n_layers=1)(torch.randn(1, 3, 2, dtype=F64))


def test_integers_given_to_a_real_valued_transformer_are_a_type_error():
    # It was a ValueError ("must be floating"); a wrong dtype is a TypeError everywhere else.
    model = Transformer(n_features=2, d_model=8, n_heads=2, n_layers=1)
    with pytest.raises(TypeError, match=message("source", I64) + r"; convert with source\.float\(\)"):
        model(torch.ones(1, 3, 2, dtype=I64), torch.randn(1, 3, 2))


# -- heads of width 0 -----------------------------------------------------------------------


def test_scaled_dot_scores_of_width_zero_are_refused():
    # sqrt(0) divides the empty dot products (zeros): every score was 0 / 0 = NaN.
    with pytest.raises(ValueError, match=r"query and keys have width D=0"):
        scaled_dot_scores(torch.randn(1, 2, 0), torch.randn(1, 3, 0))
