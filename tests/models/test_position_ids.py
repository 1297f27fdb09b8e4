"""Positions from the data through the models: ``position_ids``, left-padded prompts, per-row backends.

Invariants, each of which fails if a position goes astray:

* explicit positions at the indices are the default call, for every built-in encoding;
* a relative scheme gives the same outputs when every row is shifted (its own shift);
* a left-padded batch generates exactly what each row generates alone (transformers
  #22161), with and without the cache; so does a left-padded encoder-decoder source;
* per-row positions in a batch give what each row gives alone, on the dense and the
  chunked path (several chunks, gradients included), and cached decoding at per-row
  positions gives the full pass's numbers.
"""

import pytest
import torch

from attnlab import catalog
from attnlab.attention import DecodingCache, KVCache, MultiHeadAttention
from attnlab.attention.backends.choose import attend_with_position, choose_backend
from attnlab.attention.backends.chunked import chunked_attend
from attnlab.encodings.positions import positions_from_mask
from attnlab.encodings.registry import CAUSAL_ONLY, attention_position, draws_positions, is_input_table, task_positions
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer

V, D, HEADS = 11, 16, 2
# Abacus and position coupling take no default positions: tests/models/test_task_positions.py.
OWN = [name for name in catalog.SCHEMES if task_positions(name) is None]
CACHING = [name for name in OWN if not draws_positions(name)]
# Schemes whose outputs depend on positions only through their differences (FIRE reads the query's own).
TRANSLATION_INVARIANT = ["relative", "t5", "rotary", "alibi", "none", "kerple", "xpos", "cope"]
INSIDE = [name for name in CACHING if not is_input_table(name)]


def decoder(name, seed=0):
    torch.manual_seed(seed)
    return DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=2, position=name,
                                  max_len=24).eval()


def encoder(name, seed=0):
    torch.manual_seed(seed)
    return EncoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=2, position=name,
                                  max_len=24).eval()


def tokens(B, L, seed=1):
    return torch.randint(2, V, (B, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(OWN))
def test_positions_at_the_indices_are_the_default_forward(name):
    x = tokens(3, 7)
    ids = torch.arange(7).expand(3, 7)
    models = ([] if name in CAUSAL_ONLY else [encoder(name)]) + ([] if draws_positions(name) else [decoder(name)])
    with torch.no_grad():
        for model in models:
            torch.manual_seed(5)  # the randomized encodings draw: the same draw both times
            want = model(x)
            torch.manual_seed(5)
            torch.testing.assert_close(model(x, position_ids=ids), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", TRANSLATION_INVARIANT)
def test_a_relative_scheme_is_blind_to_each_rows_shift(name):
    x = tokens(3, 7, seed=2)
    shifted = torch.arange(7) + torch.tensor([[0], [3], [9]])  # [B, L]: each row moved by its own amount
    models = [decoder(name)] + ([] if name in CAUSAL_ONLY else [encoder(name)])
    with torch.no_grad():
        for model in models:
            torch.testing.assert_close(model(x, position_ids=shifted), model(x), rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", [n for n in OWN if n not in CAUSAL_ONLY])
def test_tokens_moved_with_their_positions_move_the_outputs(name):
    """Bidirectional: the order is in the position ids alone, so permuting tokens and ids permutes the outputs."""
    model = encoder(name)
    x = tokens(2, 7, seed=4)
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [3, 4, 5, 6, 7, 8, 9]])
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        torch.manual_seed(6)  # the randomized encodings: one draw, indexed by the ids, both times
        want = model(x, position_ids=ids)[:, perm]
        torch.manual_seed(6)
        torch.testing.assert_close(model(x[:, perm], position_ids=ids[:, perm]), want, rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", CACHING)
def test_elements_masked_anywhere_are_invisible_when_the_positions_skip_them(name):
    """Padding in the middle of a row, positions counted over the real elements: the compact row's outputs."""
    model = decoder(name)
    row = tokens(1, 6, seed=5)[0]
    mask = torch.tensor([[True, False, True, True, False, False, True, True, True]])
    padded = torch.zeros(1, 9, dtype=torch.long)
    padded[mask] = row
    with torch.no_grad():
        got = model(padded, mask=mask, position_ids=positions_from_mask(mask))[mask]
        torch.testing.assert_close(got, model(row[None])[0], rtol=0, atol=1e-5)


def left_padded(rows):
    """Rows of different lengths padded on the left with 0: ``(prompt [B, P], mask [B, P])``."""
    P = max(len(r) for r in rows)
    prompt = torch.zeros(len(rows), P, dtype=torch.long)
    mask = torch.zeros(len(rows), P, dtype=torch.bool)
    for i, r in enumerate(rows):
        prompt[i, P - len(r):], mask[i, P - len(r):] = r, True
    return prompt, mask


ROWS = [tokens(1, n, seed=n)[0] for n in (5, 2, 7)]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", CACHING)
def test_a_left_padded_batch_generates_what_each_row_generates_alone(name, use_cache):
    model = decoder(name)
    prompt, mask = left_padded(ROWS)
    got = model.generate(prompt, 5, prompt_mask=mask, use_cache=use_cache)
    alone = torch.cat([model.generate(r[None], 5, use_cache=use_cache) for r in ROWS])
    assert torch.equal(got, alone)
    with torch.no_grad():  # and the logits of the real elements, not only their argmax
        logits = model(prompt, mask=mask, position_ids=positions_from_mask(mask))
        for i, r in enumerate(ROWS):
            torch.testing.assert_close(logits[i, -len(r):], model(r[None])[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in CACHING if n not in CAUSAL_ONLY])
def test_a_left_padded_source_decodes_as_the_unpadded_source(name):
    torch.manual_seed(0)
    model = Transformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1, position=name, max_len=24,
                        pad_id=0).eval()
    source, mask = left_padded(ROWS)  # the padding is pad_id 0: masked by the model itself
    ids = positions_from_mask(mask)
    for use_cache in (True, False):
        got = model.generate(source, 4, 1, source_position_ids=ids, use_cache=use_cache)
        alone = torch.cat([model.generate(r[None], 4, 1, use_cache=use_cache) for r in ROWS])
        assert torch.equal(got, alone)
    target = torch.ones(3, 3, dtype=torch.long)
    with torch.no_grad():
        padded = model(source, target, source_position_ids=ids, target_position_ids=torch.arange(3).expand(3, 3))
        for i, r in enumerate(ROWS):
            torch.testing.assert_close(padded[i], model(r[None], target[:1])[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["rotary", "alibi", "learned", "cope", "fire"])
def test_positions_given_up_front_decode_the_same_with_and_without_the_cache(name):
    """Abacus-style positions, known for the answer too: not monotone, per row."""
    model = decoder(name)
    prompt = tokens(2, 4, seed=3)
    ids = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 3], [2, 1, 0, 5, 4, 3, 0, 1]])  # [B, P + steps]
    cached = model.generate(prompt, 4, position_ids=ids)
    assert torch.equal(cached, model.generate(prompt, 4, position_ids=ids, use_cache=False))


# -- attention: per-row positions on every path ---------------------------------------------------------------


def mha(name, backend, seed=0):
    torch.manual_seed(seed)
    scheme = attention_position(name, n_heads=HEADS, head_dim=D // HEADS, causal=True, max_len=32)
    module = MultiHeadAttention(HEADS, D, position=scheme, backend=backend).double()
    with torch.no_grad():  # CoPE's table starts at zero: move every scheme off its initialisation
        for p in module.position.parameters() if module.position is not None else ():
            p.add_(0.3 * torch.randn_like(p))
    return module


POS = torch.tensor([[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [0, 0, 0, 1, 2, 3]])


@pytest.mark.parametrize("backend", ["dense", "chunked"])
@pytest.mark.parametrize("name", INSIDE)
def test_each_row_of_a_batch_attends_as_it_does_alone(name, backend):
    module = mha(name, backend)
    x = torch.randn(3, 6, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    out = module(x, is_causal=True, position_ids=POS)
    for b in range(3):
        alone = module(x[b : b + 1], is_causal=True, position_ids=POS[b : b + 1])
        torch.testing.assert_close(out[b : b + 1], alone, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, mha(name, "dense")(x, is_causal=True, position_ids=POS), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in INSIDE if n not in ("rotary", "xpos", "none")])
def test_chunks_at_per_row_positions_equal_the_dense_path_gradients_included(name):
    scheme = mha(name, "dense").position
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, HEADS, 6, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[2, ..., :3] = False  # row 2's left padding
    out = chunked_attend(q, k, v, position=scheme, mask=mask, is_causal=True, chunk_size=2, position_ids=POS)
    ref, _ = attend_with_position(q, k, v, position=scheme, backend="dense", q_offset=0, mask=mask, bias=None,
                                  is_causal=True, scale=None, dropout_p=0.0, need_weights=False, position_ids=POS)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    params = [q, k, v, *scheme.parameters()]
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, params, grad), torch.autograd.grad(ref, params, grad), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", INSIDE)
def test_cached_steps_at_per_row_positions_give_the_full_pass(name):
    module = mha(name, "dense")
    x = torch.randn(3, 6, D, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    full = module(x, is_causal=True, position_ids=POS)
    cache = KVCache()
    first = module(x[:, :4], is_causal=True, position_ids=POS[:, :4], cache=cache)
    given = module(x[:, 4:5], is_causal=True, position_ids=POS[:, 4:5], cache=cache)
    continued = module(x[:, 5:], is_causal=True, cache=cache)  # no ids: each row after its own last
    torch.testing.assert_close(torch.cat([first, given, continued], dim=1), full, rtol=0, atol=1e-12)
    assert torch.equal(cache.positions, POS)


def test_per_row_positions_never_take_flexattention():
    """FlexAttention's score_mod reads the indices; per-row positions take the chunked path instead."""
    scheme = attention_position("alibi", n_heads=HEADS, head_dim=8, causal=True)
    kw = dict(position=scheme, T=2048, S=2048, need_weights=False, device=torch.device("cuda"), backward=False,
              dropout_p=0.0, flex_mask_ok=True)
    assert choose_backend("auto", **kw) == "flex"
    assert choose_backend("auto", **kw, per_row=True) == "chunked"
    assert choose_backend("flex", **kw, per_row=True) == "chunked"
    assert scheme.score_mod(torch.zeros(1, HEADS, 3, 8), 3, position_ids=torch.zeros(1, 3, dtype=torch.long)) is None


def test_a_decoding_cache_continues_each_row_and_keeps_the_padding():
    model = decoder("alibi")
    prompt, mask = left_padded(ROWS)
    cache = DecodingCache()
    with torch.no_grad():
        model(prompt, mask=mask, position_ids=positions_from_mask(mask), cache=cache)
        cache.advance(prompt.shape[1])
        step = model(torch.full((3, 1), 4), cache=cache)  # no mask, no ids: real, each row after its last
    assert cache.last_position.tolist() == [5, 2, 7] and cache.mask.shape == (3, prompt.shape[1] + 1)
    with torch.no_grad():
        for i, r in enumerate(ROWS):
            alone = model(torch.cat([r, torch.tensor([4])])[None])[:, -1:]
            torch.testing.assert_close(step[i : i + 1], alone, rtol=0, atol=1e-5)


# -- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda m: m(tokens(2, 4), position_ids=torch.zeros(2, 4)), TypeError, r"position_ids .*float32"),
    (lambda m: m(tokens(2, 4), position_ids=torch.zeros(2, 5, dtype=torch.long)), ValueError,
     r"position_ids must be \[2, 4\].*\[2, 5\]"),
    (lambda m: m(tokens(2, 4), position_ids=torch.tensor([[0, 1, 2, -3]] * 2)), ValueError,
     r"position_ids must be positions >= 0, got -3"),
    (lambda m: m(tokens(2, 4), mask=torch.ones(2, 4)), TypeError, r"mask must be a boolean"),
    (lambda m: m.generate(tokens(2, 4), 2, position_ids=torch.zeros(2, 4, dtype=torch.long)), ValueError,
     r"position_ids must be \[2, 6\]"),
    (lambda m: m.generate(tokens(2, 4), 2, position_ids=torch.zeros(2, 6)), TypeError, r"position_ids .*float32"),
    (lambda m: m.generate(tokens(2, 4), 2, prompt_mask=torch.ones(2, 3, dtype=torch.bool)), ValueError,
     r"prompt_mask must be \[B, L\] = \[2, 4\]"),
    (lambda m: m.generate(tokens(2, 4), 2, prompt_mask=torch.tensor([[True] * 4, [True, True, True, False]])),
     ValueError, r"prompt_mask must mark left padding.*row 1"),
])
def test_bad_positions_are_refused_naming_them(call, error, match):
    with pytest.raises(error, match=match):
        call(decoder("rotary"))


def test_bad_positions_of_the_other_models_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"position_ids must be positions >= 0"):
        encoder("alibi")(tokens(2, 4), position_ids=torch.tensor([[0, -1, 1, 2]] * 2))
    model = Transformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1, position="t5")
    with pytest.raises(TypeError, match=r"source_position_ids .*float32"):
        model(tokens(2, 4), tokens(2, 3), source_position_ids=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"target_position_ids must be \[2, 3\]"):
        model(tokens(2, 4), tokens(2, 3), target_position_ids=torch.zeros(2, 4, dtype=torch.long))
    cross = MultiHeadAttention(HEADS, D)
    with pytest.raises(ValueError, match="position_ids place self-attention"):
        cross(torch.zeros(1, 2, D), torch.zeros(1, 3, D), position_ids=torch.zeros(1, 2, dtype=torch.long))


# -- a mask or positions on another device: named with both devices, before any value is read ------------

MESSAGES = pytest.mark.bad_input("tracebacks and messages")


def _meta(shape, dtype):
    return torch.zeros(shape, dtype=dtype, device="meta")


def _decoder(position="alibi"):
    return DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1, position=position)


@MESSAGES
@pytest.mark.parametrize(("name", "call"), [
    ("mask", lambda x: _decoder()(x, mask=_meta((2, 6), torch.bool))),
    ("position_ids", lambda x: _decoder()(x, position_ids=_meta((2, 6), torch.long))),
    ("position_ids", lambda x: _decoder("sinusoidal")(x, position_ids=_meta((2, 6), torch.long))),
    ("prompt_mask", lambda x: _decoder().generate(x, 2, prompt_mask=_meta((2, 6), torch.bool))),
    ("position_ids", lambda x: _decoder().generate(x, 2, position_ids=_meta((2, 8), torch.long))),
    ("position_ids", lambda x: EncoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1,
                                                      position="t5")(x, position_ids=_meta((2, 6), torch.long))),
    ("source_mask", lambda x: Transformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1).encode(
        x, _meta((2, 1, 6), torch.bool))),
    ("source_position_ids", lambda x: Transformer(vocab_size=V, d_model=D, n_heads=HEADS, n_layers=1).encode(
        x, position_ids=_meta((2, 6), torch.long))),
    ("mask", lambda x: MultiHeadAttention(HEADS, D)(torch.randn(2, 6, D), mask=_meta((6, 6), torch.bool))),
    ("bias", lambda x: MultiHeadAttention(HEADS, D)(torch.randn(2, 6, D), bias=_meta((HEADS, 6, 6), torch.float))),
    ("position_ids", lambda x: MultiHeadAttention(HEADS, D, position=attention_position(
        "alibi", n_heads=HEADS, head_dim=D // HEADS, causal=True))(torch.randn(2, 6, D),
                                                                    position_ids=_meta((2, 6), torch.long))),
])
def test_a_meta_tensor_beside_cpu_inputs_is_named_with_both_devices(name, call):
    x = torch.randint(1, V, (2, 6))
    with pytest.raises(ValueError, match=rf"^{name} is on meta \(a meta tensor holds no values\) but the inputs are "
                                         rf"on cpu; move it with {name}.to\('cpu'\)$"):
        call(x)


@MESSAGES
@pytest.mark.parametrize("name", ["mask", "bias"])
def test_attend_names_a_mask_or_bias_on_another_device(name):
    from attnlab.attention import attend

    q = torch.randn(1, HEADS, 4, 8)
    given = {name: _meta((4, 4), torch.bool if name == "mask" else torch.float)}
    with pytest.raises(ValueError, match=rf"{name} is on meta .* but query, key and value are on cpu"):
        attend(q, q, q, **given)

