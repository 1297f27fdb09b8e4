"""The PositionScheme protocol, relative_positions and NoPosition."""

import pytest
import torch

from attnlab.encodings.alibi import ALiBi
from attnlab.encodings.relative import ShawRelative
from attnlab.encodings.rotary import Rotary
from attnlab.encodings.scheme import NoPosition, PositionScheme, bias_dtype, relative_positions
from attnlab.encodings.t5 import T5RelativeBias


def test_relative_positions_is_key_minus_query():
    rel = relative_positions(3, 4)
    assert rel.dtype == torch.int64
    assert rel.tolist() == [[0, 1, 2, 3], [-1, 0, 1, 2], [-2, -1, 0, 1]]


def test_relative_positions_with_offsets_as_in_cached_decoding():
    # A new query at position 5 against cached keys 0..5.
    assert relative_positions(1, 6, q_offset=5).tolist() == [[-5, -4, -3, -2, -1, 0]]
    # Keys that start later than the queries (k_offset > q_offset).
    assert relative_positions(2, 2, q_offset=1, k_offset=10).tolist() == [[9, 10], [8, 9]]
    assert relative_positions(0, 3).shape == (0, 3)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(T=-1, S=2), ValueError, r"T.*-1"),
    (dict(T=2, S=-4), ValueError, r"S.*-4"),
    (dict(T=2, S=2, q_offset=0.5), TypeError, r"q_offset.*0\.5"),
    (dict(T=2, S=2, k_offset="1"), TypeError, r"k_offset.*'1'"),
])
def test_relative_positions_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        relative_positions(**kwargs)


def test_base_class_does_nothing():
    scheme = PositionScheme()
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    rq, rk = scheme.rotate(q, k, q_offset=2, k_offset=0)
    assert rq is q and rk is k
    assert scheme.bias(q, 5) is None
    assert scheme.value_term(torch.rand(1, 2, 3, 5)) is None
    assert scheme.max_len is None and scheme.adds_value is False


def test_no_position_is_a_first_class_scheme():
    nope = NoPosition()
    assert isinstance(nope, PositionScheme) and isinstance(nope, torch.nn.Module)
    q = torch.randn(2, 2, 3, 4)
    assert nope.rotate(q, q)[0] is q and nope.bias(q, 3) is None and nope.value_term(q) is None
    assert list(nope.parameters()) == [] and nope.max_len is None and not nope.adds_value


def test_bias_dtype():
    assert bias_dtype(torch.float16) == torch.float32
    assert bias_dtype(torch.bfloat16) == torch.float32
    assert bias_dtype(torch.float32) == torch.float32
    assert bias_dtype(torch.float64) == torch.float64


@pytest.mark.parametrize("scheme", [NoPosition(), Rotary(8), ALiBi(2), T5RelativeBias(2), ShawRelative(8)],
                         ids=lambda s: type(s).__name__)
def test_every_scheme_speaks_the_protocol(scheme):
    # What MultiHeadAttention will do with any scheme: rotate, bias, softmax, value term.
    B, H, T, S, Dh = 2, 2, 3, 5, 8
    q, k, v = torch.randn(B, H, T, Dh), torch.randn(B, H, S, Dh), torch.randn(B, H, S, Dh)
    rq, rk = scheme.rotate(q, k, q_offset=2, k_offset=0)
    assert rq.shape == q.shape and rk.shape == k.shape and rq.dtype == q.dtype
    scores = rq @ rk.transpose(-1, -2) / Dh**0.5  # [B, H, T, S]
    bias = scheme.bias(q, S, q_offset=2, k_offset=0)
    if bias is not None:
        assert bias.dim() == 4 and bias.shape[1:] == (H, T, S) and bias.shape[0] in (1, B)
        scores = scores + bias
    weights = scores.softmax(-1)
    out = weights @ v
    term = scheme.value_term(weights, q_offset=2, k_offset=0)
    assert (term is not None) == scheme.adds_value
    if term is not None:
        assert term.shape == out.shape
        out = out + term
    assert torch.isfinite(out).all()
    assert scheme.max_len is None


# A scheme that wrote a primitive without its declaration ran as no position at all: attention calls a primitive
# only when the class declares it. Now the class is refused as it is made, naming both.
@pytest.mark.bad_input("silent wrong results")
@pytest.mark.parametrize(("declared", "primitive", "missing"), [
    ({"relative": True}, "bias_rel", "adds_score"),  # the catalogue's case: a distance bias, undeclared
    ({}, "rotate_at", "rotates"),
    ({"adds_score": True}, "bias_rel", "relative"),
    ({}, "value_term_at", "adds_value"),
    ({"adds_value": True}, "value_term_rel", "relative"),
    ({"adds_score": True}, "score_mod", "has_score_mod"),
    ({}, "bias_at", "adds_score"),
])
def test_a_primitive_without_its_declaration_is_refused_as_the_class_is_made(declared, primitive, missing):
    def written(self, *args, **kwargs):
        return None

    with pytest.raises(TypeError, match=rf"^Mine writes {primitive} but does not declare {missing} = True: .*"
                                        rf"add {missing} = True"):
        type("Mine", (PositionScheme,), {**declared, primitive: written})


def test_every_built_in_scheme_declares_what_it_writes():
    import importlib

    from attnlab import catalog

    made = [getattr(importlib.import_module(module), cls)
            for module, cls in (target.split(":") for target in catalog.SCHEMES.values())]  # made: none refused
    assert sum(issubclass(c, PositionScheme) for c in made) >= 10  # the schemes inside attention among them
