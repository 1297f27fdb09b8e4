"""The decoder-only Transformer: every encoding, causal, cached decoding equal to uncached, clear errors."""

import pytest
import torch
from torch.testing import assert_close

from attnlab.attention import DecodingCache
from attnlab.encodings import (
    FIRE,
    KERPLE,
    ALiBi,
    CoPE,
    NoPosition,
    RandomizedPositions,
    Rotary,
    ShawRelative,
    T5RelativeBias,
    XPos,
)
from attnlab.encodings.registry import ADDED_TO_INPUT, RANDOMIZED, task_positions
from attnlab.encodings.t5 import SharedT5RelativeBias
from attnlab.encodings.transformer_xl import TransformerXLRelative
from attnlab.models import ENCODINGS, DecoderOnlyTransformer

from model_helpers import perturbed

# The randomized schemes draw new positions at every call: there is no single answer to cache (they decode
# without a cache, tests/encodings/test_randomized.py).
# Abacus and position coupling read the task's positions (tests/models/test_task_positions.py): not here.
OWN = [e for e in ENCODINGS if task_positions(e) is None]
CACHING = [e for e in OWN if e not in RANDOMIZED]


@pytest.mark.parametrize("encoding", CACHING)
def test_cached_generation_equals_uncached_tokens(encoding):
    torch.manual_seed(0)
    model = perturbed(DecoderOnlyTransformer(vocab_size=13, d_model=32, n_heads=4, position=encoding, max_len=40))
    prompt = torch.randint(3, 13, (4, 9), generator=torch.Generator().manual_seed(1))
    cached = model.generate(prompt, 14)
    assert cached.shape == (4, 14)
    assert torch.equal(cached, model.generate(prompt, 14, use_cache=False))
    # The logits too: a prefill of the prompt and then one step at a time, against one pass over it all.
    sequence = torch.cat([prompt, cached[:, :-1]], dim=1)  # [B, 22]
    with torch.no_grad():
        full = model(sequence)  # [B, 22, V]
        cache = DecodingCache()
        parts = [model(sequence[:, :9], cache=cache)]
        cache.advance(9)
        for t in range(9, sequence.shape[1]):
            parts.append(model(sequence[:, t : t + 1], cache=cache))
            cache.advance(1)
    assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", CACHING)
def test_cached_generation_equals_uncached_values(encoding):
    torch.manual_seed(0)
    model = perturbed(DecoderOnlyTransformer(n_features=2, d_model=16, n_heads=2, position=encoding, max_len=16))
    prompt = torch.randn(3, 2, 2)
    cached = model.generate(prompt, 10)
    assert cached.shape == (3, 10, 2)
    assert_close(cached, model.generate(prompt, 10, use_cache=False), atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", OWN)
def test_no_output_depends_on_a_later_input(encoding):
    torch.manual_seed(0)
    model = perturbed(DecoderOnlyTransformer(vocab_size=13, d_model=32, n_heads=4, position=encoding))
    x = torch.randint(3, 13, (2, 10))
    changed = x.clone()
    changed[:, 6] = (changed[:, 6] - 3 + 1) % 10 + 3
    with torch.no_grad():
        torch.manual_seed(1)  # the randomized schemes then draw the same positions for both
        a = model(x)
        torch.manual_seed(1)
        b = model(changed)
    assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-3


def test_every_scheme_is_causal_and_inside_the_attention():
    schemes = {"relative": ShawRelative, "t5": T5RelativeBias, "rotary": Rotary, "alibi": ALiBi, "none": NoPosition,
               "fire": FIRE, "kerple": KERPLE, "xpos": XPos, "cope": CoPE, "rotary-quarter": Rotary,
               "transformer-xl": TransformerXLRelative, "t5-shared": SharedT5RelativeBias}
    for encoding in OWN:
        model = DecoderOnlyTransformer(vocab_size=8, d_model=16, n_heads=2, n_layers=2, position=encoding)
        positions = [layer.self_attn.position for layer in model.layers]
        base = encoding.removeprefix("random-")
        if encoding in ADDED_TO_INPUT:
            assert positions == [None, None] and model.input_position is not None
            continue
        assert model.input_position is None
        if positions[0].shared_across_layers:  # T5's one table: the same module in every layer
            assert positions[0] is positions[1]
        else:
            assert positions[0] is not positions[1]  # each layer learns (and draws) its own
        if encoding in RANDOMIZED:
            assert all(isinstance(p, RandomizedPositions) and isinstance(p.scheme, schemes[base]) for p in positions)
            assert all(p.max_len == model.max_len for p in positions)
        else:
            assert all(isinstance(p, schemes[encoding]) for p in positions)
    assert not DecoderOnlyTransformer(vocab_size=8, d_model=16, n_heads=2, position="t5").layers[0] \
        .self_attn.position.bidirectional


def test_right_padding_changes_nothing_before_it():
    # Causal attention: the padding after a sequence is never seen by the sequence itself.
    torch.manual_seed(0)
    model = perturbed(DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2, position="alibi"))
    x = torch.randint(3, 13, (1, 5))
    padded = torch.cat([x, torch.zeros(1, 4, dtype=torch.long)], dim=1)  # PAD = 0
    with torch.no_grad():
        assert_close(model(padded)[:, :5], model(x), atol=1e-6, rtol=0)


def test_a_learned_table_refuses_longer_sequences_naming_its_max_len():
    model = DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2, position="learned", max_len=9)
    model(torch.randint(3, 13, (2, 9)))  # fits
    with pytest.raises(ValueError, match="max_len=9"):
        model(torch.randint(3, 13, (2, 10)))
    with pytest.raises(ValueError, match="max_len=9"):
        model.generate(torch.randint(3, 13, (2, 5)), 6)  # 5 + 6 - 1 = 10 inputs


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda m: m(torch.ones(1, 3)), ValueError, r"x must be token ids \[B, L\]"),
    (lambda m: m(torch.tensor([[3, 13]])), ValueError, "x holds ids from 3 to 13; the vocabulary is 0..12"),
    (lambda m: m(torch.ones(1, 0, dtype=torch.long)), ValueError, "x is empty"),
    (lambda m: m([[3, 4]]), TypeError, "x must be a tensor, got list"),
    (lambda m: m.generate(torch.ones(1, 2, dtype=torch.long), 0), ValueError, "steps"),
    (lambda m: m.generate(torch.ones(1, 2, dtype=torch.long), 2.5), TypeError, "steps"),
])
def test_bad_inputs_name_the_argument(call, error, match):
    model = DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2)
    with pytest.raises(error, match=match):
        call(model)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"position": "wavelet"}, "encoding .*wavelet.*sinusoidal"),
    ({"vocab_size": None}, "exactly one of vocab_size"),
    ({"d_model": 30, "n_heads": 4}, r"d_model \(30\) must be divisible by n_heads \(4\)"),
    ({"n_layers": 0}, "n_layers"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DecoderOnlyTransformer(**{"vocab_size": 13, "d_model": 16, "n_heads": 2, **kwargs})
