"""The lab's Transformer: every encoding, cached decoding equal to uncached, errors that name the value."""

import pytest
import torch
from torch.testing import assert_close

from attnlab.encodings import FIRE, KERPLE, ALiBi, NoPosition, Rotary, ShawRelative, T5RelativeBias
from attnlab.encodings.registry import ADDED_TO_INPUT, CAUSAL_ONLY, RANDOMIZED, task_positions
from attnlab.encodings.t5 import SharedT5RelativeBias
from attnlab.encodings.transformer_xl import TransformerXLRelative
from attnlab.models import ENCODINGS, DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer

from model_helpers import perturbed

# The encoder is bidirectional: the causal-only schemes are refused there (test below). The randomized ones
# draw new positions at every call, so there is no single answer to cache.
BIDIRECTIONAL = [e for e in ENCODINGS if e not in CAUSAL_ONLY and task_positions(e) is None]
CACHING = [e for e in BIDIRECTIONAL if e not in RANDOMIZED]


@pytest.mark.parametrize("encoding", CACHING)
def test_cached_decoding_equals_uncached_decoding_tokens(encoding):
    torch.manual_seed(0)
    model = perturbed(Transformer(vocab_size=13, d_model=32, n_heads=4, position=encoding, max_len=32))
    source = torch.randint(3, 13, (5, 9), generator=torch.Generator().manual_seed(1))
    source[0, 6:] = 0  # padding in the source
    cached = model.generate(source, 14, start=1)
    full = model.generate(source, 14, start=1, use_cache=False)
    assert torch.equal(cached, full)
    # And the logits themselves, step by step, against one teacher-forced pass over the outputs.
    target_in = torch.cat([torch.ones(5, 1, dtype=torch.long), cached[:, :-1]], dim=1)  # [B, T]
    with torch.no_grad():
        teacher_forced = model(source, target_in)  # [B, T, V]
        memory, mask = model.encode(source)
        from attnlab.attention import DecodingCache

        cache = DecodingCache()
        steps = []
        for t in range(target_in.shape[1]):
            steps.append(model.decode(target_in[:, t : t + 1], memory, mask, cache=cache))
            cache.advance(1)
    assert_close(torch.cat(steps, dim=1), teacher_forced, atol=1e-5, rtol=0)


@pytest.mark.parametrize("encoding", CACHING)
def test_cached_decoding_equals_uncached_decoding_values(encoding):
    torch.manual_seed(0)
    model = perturbed(Transformer(n_features=2, d_model=16, n_heads=2, position=encoding, max_len=16))
    source = torch.randn(3, 2, 2)
    cached = model.generate(source, 10, start=source[:, -1:])
    full = model.generate(source, 10, start=source[:, -1:], use_cache=False)
    assert cached.shape == (3, 10, 2)
    assert_close(cached, full, atol=1e-5, rtol=0)


def test_each_encoding_puts_its_scheme_where_it_belongs():
    schemes = {"relative": ShawRelative, "t5": T5RelativeBias, "rotary": Rotary, "alibi": ALiBi, "none": NoPosition,
               "fire": FIRE, "kerple": KERPLE, "rotary-quarter": Rotary, "transformer-xl": TransformerXLRelative,
               "t5-shared": SharedT5RelativeBias}
    for encoding in BIDIRECTIONAL:
        model = Transformer(vocab_size=8, d_model=16, n_heads=2, n_layers=1, position=encoding)
        enc_pos = model.encoder_layers[0].self_attn.position
        dec_pos = model.decoder_layers[0].self_attn.position
        assert model.decoder_layers[0].cross_attn.position is None  # never in cross-attention
        if encoding in ADDED_TO_INPUT:
            assert enc_pos is None and dec_pos is None and model.input_position is not None
            continue
        assert model.input_position is None
        if encoding in RANDOMIZED:
            enc_pos, dec_pos = enc_pos.scheme, dec_pos.scheme
        kind = schemes[encoding.removeprefix("random-")]
        assert isinstance(enc_pos, kind) and isinstance(dec_pos, kind)
    for encoding in CAUSAL_ONLY:
        with pytest.raises(ValueError, match=f"encoding '{encoding}' is defined for causal attention only"):
            Transformer(vocab_size=8, d_model=16, n_heads=2, n_layers=1, position=encoding)
    alibi = Transformer(vocab_size=8, d_model=16, n_heads=2, n_layers=1, position="alibi")
    # the bidirectional encoder tells left from right as Ruoss et al.'s code does; the causal decoder needs not
    assert alibi.encoder_layers[0].self_attn.position.left_offset == 0.5
    assert alibi.decoder_layers[0].self_attn.position.left_offset == 0.0
    t5 = Transformer(vocab_size=8, d_model=16, n_heads=2, n_layers=1, position="t5")
    assert t5.encoder_layers[0].self_attn.position.bidirectional
    assert not t5.decoder_layers[0].self_attn.position.bidirectional


@pytest.mark.parametrize("cls", [Transformer, DecoderOnlyTransformer, EncoderOnlyTransformer])
def test_a_model_takes_position_and_refuses_encoding_naming_position(cls):
    model = cls(vocab_size=8, d_model=16, n_heads=2, n_layers=1, position="alibi")
    assert model.position == "alibi" and model.position_name == "alibi"
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'encoding': .*position="):
        cls(vocab_size=8, d_model=16, n_heads=2, n_layers=1, encoding="alibi")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'd_modle'$"):  # any other: Python's message
        cls(vocab_size=8, d_modle=16)


def test_the_decoder_is_causal_and_the_encoder_sees_everything():
    torch.manual_seed(0)
    model = perturbed(Transformer(vocab_size=13, d_model=32, n_heads=4, position="rotary"))
    source = torch.randint(3, 13, (2, 6))
    target_in = torch.randint(3, 13, (2, 7))
    changed = target_in.clone()
    changed[:, 4] = (changed[:, 4] - 3 + 1) % 10 + 3
    with torch.no_grad():
        a, b = model(source, target_in), model(source, changed)
    assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=0)  # outputs before position 4 cannot see it
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3


def test_a_learned_table_refuses_longer_sequences_naming_its_max_len():
    model = Transformer(vocab_size=13, d_model=16, n_heads=2, position="learned", max_len=9)
    model(torch.randint(3, 13, (2, 9)), torch.ones(2, 9, dtype=torch.long))  # fits
    with pytest.raises(ValueError, match="max_len=9"):
        model(torch.randint(3, 13, (2, 12)), torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=9"):
        model.generate(torch.randint(3, 13, (2, 5)), 12, start=1)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"position": "wavelet"}, ValueError, "encoding .*wavelet.*sinusoidal"),
    ({"vocab_size": None}, ValueError, "exactly one of vocab_size"),
    ({"n_features": 2}, ValueError, "exactly one of vocab_size"),
    ({"d_model": 30, "n_heads": 4}, ValueError, r"d_model \(30\) must be divisible by n_heads \(4\)"),
    ({"n_layers": 0}, ValueError, "n_layers"),
    ({"dropout": 1.5}, ValueError, "dropout"),
    ({"vocab_size": 1}, ValueError, "vocab_size"),
])
def test_bad_arguments(kwargs, error, match):
    args = {"vocab_size": 13, "d_model": 16, "n_heads": 2, **kwargs}
    with pytest.raises(error, match=match):
        Transformer(**args)


def test_bad_inputs_name_the_argument():
    model = Transformer(vocab_size=13, d_model=16, n_heads=2)
    with pytest.raises(ValueError, match="source holds ids from 3 to 20; the vocabulary is 0..12"):
        model(torch.tensor([[3, 20]]), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"target_in must be token ids \[B, L\]"):
        model(torch.ones(1, 2, dtype=torch.long), torch.ones(1, 2, 3))
    with pytest.raises(ValueError, match="source is empty"):
        model(torch.ones(1, 0, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="start must be a token id"):
        model.generate(torch.ones(1, 2, dtype=torch.long), 3, start=torch.ones(1, 1))
    with pytest.raises(ValueError, match="steps"):
        model.generate(torch.ones(1, 2, dtype=torch.long), 0, start=1)
