"""Property-based tests (hypothesis) of the attention core and the positional encodings.

Every property draws its shapes, lengths, masks, dtypes and data with hypothesis
(small sizes: ``B <= 3``, ``H <= 4``, ``T, S <= 12``, ``Dh <= 16``); tensor
contents come from a ``torch.Generator`` seeded by a drawn integer, so an example
is fully described by its drawn arguments. ``derandomize=True`` and no example
database: CI runs the same examples every time.

Properties checked (examples per property in ``EXAMPLES``):

1. ``fused_vs_explicit``: ``attend`` without weights (SDPA) equals ``attend`` with
   weights (explicit softmax) and a float64 reference, float32 and float64, masks
   of every broadcastable shape, with and without bias and ``is_causal``.
2. ``empty_rows``: a query with nothing to attend to gets zeros, never NaN, in the
   output and in the gradients of q, k and v, on both paths, in float32, float16
   and bfloat16 (and in float32 both paths give the same gradients).
3. ``half_precision``: float16 / bfloat16 inputs with ``|x| <= 30`` give finite
   outputs on both paths, close to float64 attention of the same (rounded) inputs.
4. ``causal_attend`` / ``causal_mha`` / ``causal_models``: perturbing the inputs at
   positions ``>= p`` leaves every output at a position ``< p`` unchanged, for
   ``attend(is_causal=True)``, ``MultiHeadAttention(is_causal=True)`` with every
   position scheme, ``DecoderOnlyTransformer`` and ``Transformer``'s decoder.
5. ``sinusoidal`` / ``positional_module`` / ``fixed_base`` / ``apply_rotary`` /
   ``rotary_rotate``: the tables (also ``PositionalEncoding`` moved to float64, past
   ``max_len`` and at an offset) and rotations equal float64 formulas written here
   (numpy), not by the library.
6. ``kv_cache``: a sequence fed through ``MultiHeadAttention(is_causal=True,
   cache=KVCache())`` in random chunks gives the one-shot output.
7. ``bad_inputs``: malformed masks and biases raise the documented error type
   (``TypeError`` / ``ValueError``) on both paths; so do a "t2t" table with
   "vaswani" rates and NTK scaling of a 2-feature rotary (inside properties 5).

Not properties, by design (``attend``'s docstring, Note): NaN / inf inputs, and a
bias that is ``-inf`` across a whole row.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.attention import KVCache, MultiHeadAttention, attend
from attnlab.catalog import ENCODINGS
from attnlab.encodings import (
    ALiBi,
    NoPosition,
    PositionalEncoding,
    Rotary,
    ShawRelative,
    T5RelativeBias,
    apply_rotary,
    fixed_base,
    sinusoidal,
)
from attnlab.encodings.registry import CAUSAL_ONLY, task_positions
from attnlab.models import DecoderOnlyTransformer, Transformer

#: Examples per property and per pytest parametrization (the comment gives how many there
#: are), chosen so the whole file runs in well under 40 s on 2 shared cores.
EXAMPLES = {
    "fused_vs_explicit": 60,  # x 10 mask kinds (none, scalar and 8 shapes)
    "empty_rows": 50,  # x 3 dtypes x 2 paths
    "half_precision": 80,  # x 2 dtypes x 2 paths
    "causal_attend": 200,
    "causal_mha": 25,  # x 7 position schemes
    "causal_models": 6,  # x 2 architectures x 7 encodings
    "sinusoidal": 300,
    "positional_module": 150,
    "fixed_base": 100,
    "apply_rotary": 200,
    "rotary_rotate": 150,
    "kv_cache": 25,  # x 7 position schemes
    "bad_inputs": 15,  # x 7 kinds of bad mask / bias
}


def props(name: str):
    """``@settings`` of the property ``name``: deterministic, no deadline, no database."""
    return settings(max_examples=EXAMPLES[name], deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- drawing -------------------------------------------------------------------------------

FLOATS = (torch.float32, torch.float64)
HALVES = (torch.float16, torch.bfloat16)
EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float32: 2.0**-23, torch.float64: 2.0**-52}

seeds = st.integers(0, 2**31 - 1)
batch = st.integers(1, 3)
heads = st.integers(1, 4)
length = st.integers(1, 12)
width = st.integers(1, 16)
SCALES = st.floats(0.05, 2.0)

#: mask / bias shapes that broadcast to [B, H, T, S], as functions of (B, H, T, S).
MASK_SHAPES = {
    "scalar": lambda B, H, T, S: (),
    "S": lambda B, H, T, S: (S,),
    "TS": lambda B, H, T, S: (T, S),
    "1TS": lambda B, H, T, S: (1, T, S),
    "HTS": lambda B, H, T, S: (H, T, S),
    "B1TS": lambda B, H, T, S: (B, 1, T, S),
    "BHTS": lambda B, H, T, S: (B, H, T, S),
    "B11S": lambda B, H, T, S: (B, 1, 1, S),
    "1H1S": lambda B, H, T, S: (1, H, 1, S),
}
MASKS = (None, *MASK_SHAPES)
BIAS_SHAPES = (None, "S", "TS", "HTS", "BHTS", "B11S")


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)  # shape () too (FIRE's c)


def random_mask(g: torch.Generator, shape: tuple[int, ...], density: float) -> torch.Tensor:
    return torch.rand(shape, generator=g) < density


def reference(q, k, v, *, mask=None, bias=None, is_causal=False, scale=None):
    """Float64 textbook attention: softmax(q k^T * scale + bias, masked) v; empty rows are zeros."""
    q, k, v = q.double(), k.double(), v.double()
    T, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # [B, H, T, S]
    if bias is not None:
        scores = scores + bias.double()
    allowed = torch.ones(T, S, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril(S - T)  # bottom-right: query t sits at position S - T + t
    if mask is not None:
        allowed = allowed & mask
    allowed = allowed.expand_as(scores)
    scores = scores.masked_fill(~allowed, float("-inf"))
    empty = ~allowed.any(-1, keepdim=True)  # [B, H, T, 1]
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ v, weights


@st.composite
def attention_case(draw, dtypes=FLOATS, masks=MASKS, scales=SCALES, bias_offsets=(0.0,)):
    """Sizes, dtype, mask / bias shapes and flags of one ``attend`` call."""
    return {
        "B": draw(batch), "H": draw(heads), "T": draw(length), "S": draw(length),
        "Dh": draw(width), "Dv": draw(width),
        "dtype": draw(st.sampled_from(dtypes)),
        "mask": draw(st.sampled_from(masks)),
        "density": draw(st.sampled_from([0.0, 0.2, 0.6, 0.9, 1.0])),
        "bias": draw(st.sampled_from(BIAS_SHAPES)),
        # Positional schemes give float32 biases for half-precision queries (bias_dtype).
        "bias_dtype": draw(st.sampled_from([None, torch.float32])),
        "bias_offset": draw(st.sampled_from(bias_offsets)),
        "is_causal": draw(st.booleans()),
        "scale": draw(st.none() | scales),
        "seed": draw(seeds),
    }


def build(case, *, amp: float = 1.0, empty_rows: bool = False):
    """``(q, k, v, mask, bias)`` for a case; ``empty_rows`` forces some rows to see nothing."""
    g = gen(case["seed"])
    B, H, T, S, dtype = case["B"], case["H"], case["T"], case["S"], case["dtype"]
    if amp == 1.0:
        q, k, v = (randn(g, B, H, n, d, dtype=dtype) for n, d in ((T, case["Dh"]), (S, case["Dh"]), (S, case["Dv"])))
    else:  # uniform in [-amp, amp]
        q, k, v = ((torch.rand(B, H, n, d, generator=g, dtype=torch.float64) * 2 - 1).mul(amp).to(dtype)
                   for n, d in ((T, case["Dh"]), (S, case["Dh"]), (S, case["Dv"])))
    mask = None
    if case["mask"] is not None:
        mask = random_mask(g, MASK_SHAPES[case["mask"]](B, H, T, S), case["density"])
    if empty_rows:
        # A full [B, H, T, S] mask with some random (b, h, t) rows all False.
        full = torch.ones(B, H, T, S, dtype=torch.bool) if mask is None else mask.expand(B, H, T, S).clone()
        rows = torch.rand(B, H, T, generator=g) < 0.4
        rows.view(-1)[torch.randint(rows.numel(), (1,), generator=g)] = True  # at least one
        mask = full & ~rows[..., None]
    bias = None
    if case["bias"] is not None:
        bias = randn(g, *MASK_SHAPES[case["bias"]](B, H, T, S), dtype=torch.float64, scale=2.0)
        bias = (bias + case["bias_offset"]).to(case["bias_dtype"] or dtype)
    return q, k, v, mask, bias


def call(q, k, v, mask, bias, case, need_weights):
    return attend(q, k, v, mask=mask, bias=bias, is_causal=case["is_causal"], scale=case["scale"],
                  need_weights=need_weights)


# -- 1. fused and explicit paths agree -------------------------------------------------------


@pytest.mark.parametrize("mask_kind", MASKS)
@props("fused_vs_explicit")
@given(data=st.data())
def test_fused_and_explicit_agree(mask_kind, data):
    case = data.draw(attention_case(masks=(mask_kind,)), label="case")
    q, k, v, mask, bias = build(case)
    fused, none = call(q, k, v, mask, bias, case, need_weights=False)
    explicit, weights = call(q, k, v, mask, bias, case, need_weights=True)
    assert none is None
    B, H, T, S = case["B"], case["H"], case["T"], case["S"]
    assert fused.shape == explicit.shape == (B, H, T, case["Dv"])
    assert weights.shape == (B, H, T, S)
    assert fused.dtype == explicit.dtype == weights.dtype == case["dtype"]
    tol = 1e-5 if case["dtype"] == torch.float32 else 1e-12
    torch.testing.assert_close(fused, explicit, atol=tol, rtol=tol)
    ref_out, ref_w = reference(q, k, v, mask=mask, bias=bias, is_causal=case["is_causal"], scale=case["scale"])
    torch.testing.assert_close(explicit.double(), ref_out, atol=tol, rtol=tol)
    torch.testing.assert_close(weights.double(), ref_w, atol=tol, rtol=tol)


# -- 2. fully masked rows: zeros, never NaN, in outputs and gradients ------------------------


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, *HALVES], ids=str)
@props("empty_rows")
@given(data=st.data())
def test_fully_masked_rows_give_zeros_and_finite_gradients(dtype, need_weights, data):
    case = data.draw(attention_case(dtypes=(dtype,)), label="case")
    q, k, v, mask, bias = build(case, empty_rows=True)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, weights = call(q, k, v, mask, bias, case, need_weights)

    allowed = mask.expand(case["B"], case["H"], case["T"], case["S"])
    if case["is_causal"]:
        allowed = allowed & torch.ones(case["T"], case["S"], dtype=torch.bool).tril(case["S"] - case["T"])
    empty = ~allowed.any(-1)  # [B, H, T]
    assert empty.any()
    assert torch.isfinite(out).all()
    assert (out[empty] == 0).all()
    if need_weights:
        assert torch.isfinite(weights).all() and (weights[empty] == 0).all()
        sums = weights.float().sum(-1)[~empty]
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=2 * EPS[case["dtype"]] * case["S"], rtol=0)

    g = gen(case["seed"] + 1)
    direction = randn(g, *out.shape, dtype=out.dtype)
    (out * direction).sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and torch.isfinite(t.grad).all(), name
    assert (q.grad[empty] == 0).all()  # an empty row's output is 0 whatever its query

    if case["dtype"] == torch.float32:
        # Both paths differentiate the same function.
        q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out2, _ = call(q2, k2, v2, mask, bias, case, not need_weights)
        (out2 * direction).sum().backward()
        for a, b in ((q.grad, q2.grad), (k.grad, k2.grad), (v.grad, v2.grad)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


# -- 3. half precision: finite and close to float64 ------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@props("half_precision")
@given(data=st.data(), amp=st.floats(0.5, 30.0))
def test_half_precision_is_finite_and_close_to_float64(dtype, need_weights, data, amp):
    # Scales up to 8: with |x| = 30 and Dh = 16, q . k * scale reaches 1e5, past float16's 65504.
    # Bias offsets: a constant per row changes nothing exactly, but only a float32 bias
    # keeps its small differences at -3000 (ALiBi far from the query).
    case = data.draw(attention_case(dtypes=(dtype,), scales=st.floats(0.05, 8.0),
                                    bias_offsets=(0.0, -3000.0)), label="case")
    q, k, v, mask, bias = build(case, amp=amp)
    out, weights = call(q, k, v, mask, bias, case, need_weights)
    assert out.dtype == case["dtype"]
    assert torch.isfinite(out).all()
    if need_weights:
        assert torch.isfinite(weights).all()
    # The reference sees the same (already rounded) inputs: only the computation is compared.
    ref_out, _ = reference(q, k, v, mask=mask, bias=bias, is_causal=case["is_causal"], scale=case["scale"])
    # The output is a convex combination of the values: rounding it costs eps / 2 * max|v|,
    # and the explicit path's weights rounded to the dtype before ``weights @ v`` as much
    # again; scores and softmax in float32 add next to nothing.
    tol = 1.5 * EPS[case["dtype"]] * max(float(v.double().abs().max()), 1e-3)
    err = float((out.double() - ref_out).abs().max())
    assert err <= tol, f"max error {err:.3g} > {tol:.3g}"


# -- 4. causality: outputs do not depend on the future ----------------------------------------


def perturb_from(x: torch.Tensor, p: int, g: torch.Generator, dim: int) -> torch.Tensor:
    """``x`` with every entry at index ``>= p`` along ``dim`` replaced by large random values."""
    y = x.clone()
    idx = [slice(None)] * x.dim()
    idx[dim] = slice(p, None)
    y[tuple(idx)] = randn(g, *y[tuple(idx)].shape, dtype=x.dtype, scale=5.0)
    return y


@props("causal_attend")
@given(case=attention_case(), data=st.data())
def test_causal_attend_ignores_the_future(case, data):
    case = {**case, "is_causal": True}
    q, k, v, mask, bias = build(case)
    T, S = case["T"], case["S"]
    p = data.draw(st.integers(0, S), label="p")  # first perturbed position
    need_weights = data.draw(st.booleans(), label="need_weights")
    g = gen(case["seed"] + 2)
    # Key j sits at position j; query t at position S - T + t (bottom-right alignment).
    q_first = max(0, min(T, p - (S - T)))  # first query at a position >= p
    q2 = perturb_from(q, q_first, g, dim=2)
    k2, v2 = perturb_from(k, p, g, dim=2), perturb_from(v, p, g, dim=2)
    out, _ = call(q, k, v, mask, bias, case, need_weights)
    out2, _ = call(q2, k2, v2, mask, bias, case, need_weights)
    torch.testing.assert_close(out2[:, :, :q_first], out[:, :, :q_first], atol=1e-6, rtol=0)


SCHEMES = ("none", "nope", "rotary", "alibi", "t5", "shaw", "shaw-keys")


def make_scheme(name: str, n_heads: int, head_dim: int):
    return {
        "none": lambda: None,
        "nope": NoPosition,
        "rotary": lambda: Rotary(head_dim, rotary_dim=head_dim - head_dim % 2),
        "alibi": lambda: ALiBi(n_heads),
        "t5": lambda: T5RelativeBias(n_heads, bidirectional=False, num_buckets=8, max_distance=6),
        "shaw": lambda: ShawRelative(head_dim, max_relative_position=3),
        "shaw-keys": lambda: ShawRelative(head_dim, max_relative_position=3, on_values=False),
    }[name]()


def random_weights(module: torch.nn.Module, seed: int, scale: float = 0.3) -> torch.nn.Module:
    """Add ``scale * N(0, 1)`` to every parameter (fresh layers barely react to position), eval mode."""
    g = gen(seed)
    with torch.no_grad():
        for prm in module.parameters():
            prm.add_(randn(g, *prm.shape, dtype=prm.dtype, scale=scale))
    return module.eval()


@st.composite
def mha_case(draw, scheme):
    return {
        "B": draw(batch), "L": draw(length), "H": draw(heads), "Dh": draw(st.integers(2, 8)),
        "scheme": scheme, "seed": draw(seeds),
    }


def make_mha(case) -> MultiHeadAttention:
    with torch.random.fork_rng():
        torch.manual_seed(case["seed"])
        position = make_scheme(case["scheme"], case["H"], case["Dh"])
        mha = MultiHeadAttention(case["H"], case["H"] * case["Dh"], position=position)
    return random_weights(mha, case["seed"])


@pytest.mark.parametrize("scheme", SCHEMES)
@props("causal_mha")
@given(data=st.data())
def test_causal_multihead_ignores_the_future(scheme, data):
    case = data.draw(mha_case(scheme), label="case")
    mha = make_mha(case)
    g = gen(case["seed"] + 3)
    x = randn(g, case["B"], case["L"], mha.d_model)
    p = data.draw(st.integers(0, case["L"]), label="p")
    need_weights = data.draw(st.booleans(), label="need_weights")
    x2 = perturb_from(x, p, g, dim=1)
    with torch.no_grad():
        out = mha(x, is_causal=True, need_weights=need_weights)
        out2 = mha(x2, is_causal=True, need_weights=need_weights)
    if need_weights:
        (out, w), (out2, w2) = out, out2
        torch.testing.assert_close(w2[:, :, :p], w[:, :, :p], atol=1e-6, rtol=0)
        assert (w[:, :, :p, p:] == 0).all()
    torch.testing.assert_close(out2[:, :p], out[:, :p], atol=1e-6, rtol=0)


@functools.cache
def make_model(arch: str, encoding: str, tokens: bool) -> torch.nn.Module:
    kind = {"vocab_size": 11} if tokens else {"n_features": 3}
    cls = DecoderOnlyTransformer if arch == "decoder-only" else Transformer
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = cls(**kind, d_model=16, n_heads=2, n_layers=2, ff_units=24, position=encoding, max_len=16,
                    max_relative_position=3)
    return random_weights(model, 1)


@pytest.mark.parametrize("encoding", [e for e in ENCODINGS if task_positions(e) is None])  # the task's: not here
@pytest.mark.parametrize("arch", ["decoder-only", "encoder-decoder"])
@props("causal_models")
@given(tokens=st.booleans(), B=batch, L=length, S=length, seed=seeds, data=st.data())
def test_causal_models_ignore_the_future(arch, encoding, tokens, B, L, S, seed, data):
    if arch == "encoder-decoder" and encoding in CAUSAL_ONLY:
        return  # refused by the bidirectional encoder (tests/models/test_transformer.py)
    model = make_model(arch, encoding, tokens)
    g = gen(seed)

    def inputs(n: int) -> torch.Tensor:
        if tokens:
            return torch.randint(1, 11, (B, n), generator=g)
        return randn(g, B, n, 3)

    x = inputs(L)
    p = data.draw(st.integers(0, L), label="p")
    x2 = x.clone()
    x2[:, p:] = inputs(L - p)
    source = inputs(S)
    with torch.no_grad():
        # The randomized schemes draw positions at every call: the same draws for both calls.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            out = model(x) if arch == "decoder-only" else model(source, x)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            out2 = model(x2) if arch == "decoder-only" else model(source, x2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out2[:, :p], out[:, :p], atol=1e-6, rtol=0)


# -- 5. encoding tables against float64 formulas ------------------------------------------


def sinusoid_formula(positions: np.ndarray, d_model: int, base: float, layout: str, rates: str | None) -> np.ndarray:
    """The table in float64 numpy, from the formulas (not the library).

    Rates: "vaswani" ``w_i = base ** (-2i / D)`` for ``i < ceil(D / 2)``;
    "linspace" ``w_i = base ** (-i / (n - 1))`` over ``n`` rates (``n = 1``: rate 1).
    Layouts: interleaved ``sin(p w_0) cos(p w_0) sin(p w_1) ...`` (odd D: last cosine
    dropped); concat ``[sin(p w_0..w_{n-1}) | cos(p w_0..w_{D-n-1})]`` with
    ``n = ceil(D/2)``; t2t ``[sin | cos]`` over ``D // 2`` linspace rates, odd D
    padded with a zero column.
    """
    P, D = len(positions), d_model
    table = np.zeros((P, D))
    if layout == "t2t":
        n = D // 2
        if n == 0:
            return table
        w = base ** (-np.arange(n) / max(n - 1, 1))
        angles = positions[:, None] * w[None, :]
        table[:, :n] = np.sin(angles)
        table[:, n:2 * n] = np.cos(angles)
        return table
    n = (D + 1) // 2
    i = np.arange(n)
    w = base ** (-2 * i / D) if rates in (None, "vaswani") else base ** (-i / max(n - 1, 1))
    angles = positions[:, None] * w[None, :]
    if layout == "interleaved":
        table[:, 0::2] = np.sin(angles)
        table[:, 1::2] = np.cos(angles)[:, : D // 2]
    else:
        table[:, :n] = np.sin(angles)
        table[:, n:] = np.cos(angles)[:, : D - n]
    return table


@props("sinusoidal")
@given(max_len=st.integers(1, 20), d_model=st.integers(1, 33),
       base=st.sampled_from([10000.0]) | st.floats(1.5, 1e6),
       layout=st.sampled_from(["interleaved", "concat", "t2t"]),
       rates=st.sampled_from([None, "vaswani", "linspace"]),
       start=st.integers(0, 50) | st.integers(0, 10**6),
       dtype=st.sampled_from(FLOATS))
def test_sinusoidal_matches_its_float64_formula(max_len, d_model, base, layout, rates, start, dtype):
    if layout == "t2t" and rates == "vaswani":
        with pytest.raises(ValueError, match="rates"):
            sinusoidal(max_len, d_model, base=base, layout=layout, rates=rates)
        return
    table = sinusoidal(max_len, d_model, base=base, layout=layout, rates=rates, start=start, dtype=dtype)
    assert table.shape == (max_len, d_model) and table.dtype == dtype
    positions = np.arange(start, start + max_len, dtype=np.float64)
    expected = sinusoid_formula(positions, d_model, base, layout, rates)
    # float64: the angle p * w is itself rounded (relative 1e-16, a few ulps of the rate).
    # float32: correctly rounded values, within half an ulp of 1.
    tol = 1e-7 if dtype == torch.float32 else 0.0
    tol += 16 * EPS[torch.float64] * (1 + start + max_len)
    np.testing.assert_allclose(table.double().numpy(), expected, rtol=0, atol=tol)


@props("positional_module")
@given(max_len=st.integers(1, 12), d_model=st.integers(1, 17), B=batch, L=st.integers(1, 30),
       offset=st.integers(0, 40), layout=st.sampled_from(["interleaved", "concat", "t2t"]),
       scale_input=st.booleans(), extend_first=st.booleans(), dtype=st.sampled_from(FLOATS), seed=seeds)
def test_positional_encoding_module_adds_the_float64_table(max_len, d_model, B, L, offset, layout, scale_input,
                                                            extend_first, dtype, seed):
    posenc = PositionalEncoding(max_len, d_model, scale_input=scale_input, layout=layout)
    if extend_first:  # rows past max_len computed before the module changes dtype
        posenc(torch.zeros(1, max_len + 3, d_model))
    posenc = posenc.to(dtype)
    assert posenc.pe.dtype == dtype
    x = randn(gen(seed), B, L, d_model, dtype=dtype)
    out = posenc(x, offset=offset)
    assert out.dtype == dtype and out.shape == x.shape
    table = sinusoid_formula(np.arange(offset, offset + L, dtype=np.float64), d_model, 10000.0, layout, None)
    expected = x.double().numpy() * (math.sqrt(d_model) if scale_input else 1.0) + table[None]
    tol = 4 * EPS[dtype] * (1 + np.abs(expected).max())
    np.testing.assert_allclose(out.double().numpy(), expected, rtol=0, atol=tol)


@props("fixed_base")
@given(max_len=st.integers(1, 40), bases=st.lists(st.floats(0.5, 200.0) | st.integers(1, 50), min_size=1, max_size=4),
       dtype=st.sampled_from(FLOATS))
def test_fixed_base_matches_its_float64_formula(max_len, bases, dtype):
    table = fixed_base(max_len, bases, dtype=dtype)
    assert table.shape == (max_len, 2 * len(bases)) and table.dtype == dtype
    p = np.arange(max_len, dtype=np.float64)[:, None]
    angles = 2 * np.pi * p / np.asarray(bases, dtype=np.float64)[None, :]
    expected = np.empty((max_len, 2 * len(bases)))
    expected[:, 0::2], expected[:, 1::2] = np.sin(angles), np.cos(angles)
    tol = 1e-7 if dtype == torch.float32 else 1e-13
    np.testing.assert_allclose(table.double().numpy(), expected, rtol=0, atol=tol)


def rotary_formula(x: np.ndarray, positions: np.ndarray, d: int, base: float, convention: str,
                   interpolation: float = 1.0, ntk_factor: float = 1.0) -> np.ndarray:
    """RoFormer in float64 numpy: pair i (adjacent, or i and i + d/2) turned by ``(p / interp) * theta_i``."""
    if ntk_factor != 1.0:
        base = base * ntk_factor ** (d / (d - 2))
    theta = base ** (-np.arange(0, d, 2) / d)  # [d/2]
    angles = (positions / interpolation)[..., None] * theta  # [..., L, d/2]
    c, s = np.cos(angles), np.sin(angles)
    out = x.copy()
    if convention == "interleaved":
        x0, x1 = x[..., 0:d:2], x[..., 1:d:2]
        out[..., 0:d:2], out[..., 1:d:2] = x0 * c - x1 * s, x1 * c + x0 * s
    else:
        x0, x1 = x[..., : d // 2], x[..., d // 2 : d]
        out[..., : d // 2], out[..., d // 2 : d] = x0 * c - x1 * s, x1 * c + x0 * s
    return out


@st.composite
def rotary_dims(draw):
    head_dim = draw(st.integers(2, 16))
    partial = st.integers(1, head_dim // 2).map(lambda n: 2 * n)
    rotary_dim = draw(st.none() | partial if head_dim % 2 == 0 else partial)
    return head_dim, rotary_dim


@props("apply_rotary")
@given(dims=rotary_dims(), B=batch, L=length, per_sample=st.booleans(),
       max_pos=st.sampled_from([20, 5000]), base=st.sampled_from([10000.0, 500000.0]) | st.floats(2.0, 1e5),
       convention=st.sampled_from(["interleaved", "half"]), interpolation=st.sampled_from([1.0, 2.5]),
       ntk=st.sampled_from([1.0, 4.0]), dtype=st.sampled_from(FLOATS),
       angle_dtype=st.sampled_from(FLOATS), seed=seeds)
def test_apply_rotary_matches_its_float64_formula(dims, B, L, per_sample, max_pos, base, convention,
                                                  interpolation, ntk, dtype, angle_dtype, seed):
    head_dim, rotary_dim = dims
    d = head_dim if rotary_dim is None else rotary_dim
    if ntk != 1.0 and d < 4:
        with pytest.raises(ValueError, match="ntk"):
            apply_rotary(torch.zeros(L, head_dim), torch.arange(L), rotary_dim=rotary_dim, ntk_factor=ntk)
        return
    g = gen(seed)
    x = randn(g, B, 2, L, head_dim, dtype=dtype)
    pos_shape = (B, 1, L) if per_sample else (L,)
    positions = torch.randint(0, max_pos, pos_shape, generator=g)
    out = apply_rotary(x, positions, rotary_dim=rotary_dim, base=base, convention=convention,
                       interpolation=interpolation, ntk_factor=ntk, angle_dtype=angle_dtype)
    assert out.shape == x.shape and out.dtype == dtype
    expected = rotary_formula(x.double().numpy(), positions.double().numpy(), d, base, convention, interpolation, ntk)
    # Angle error ~ p * eps(angle_dtype) radians, times |x|; plus the result's rounding.
    amax = float(x.abs().max())
    tol = amax * (4 * max_pos * EPS[angle_dtype] + 4 * EPS[dtype])
    np.testing.assert_allclose(out.double().numpy(), expected, rtol=0, atol=tol)
    if rotary_dim is not None:
        assert torch.equal(out[..., d:], x[..., d:])  # pass-through features untouched


@props("rotary_rotate")
@given(dims=rotary_dims(), B=batch, H=heads, T=length, S=length, q_offset=st.integers(0, 40),
       k_offset=st.integers(0, 40), convention=st.sampled_from(["interleaved", "half"]),
       dtype=st.sampled_from((*FLOATS, *HALVES)), seed=seeds)
def test_rotary_rotate_matches_its_float64_formula(dims, B, H, T, S, q_offset, k_offset, convention, dtype, seed):
    head_dim, rotary_dim = dims
    d = head_dim if rotary_dim is None else rotary_dim
    rope = Rotary(head_dim, rotary_dim=rotary_dim, convention=convention, angle_dtype=torch.float64)
    g = gen(seed)
    q, k = randn(g, B, H, T, head_dim, dtype=dtype), randn(g, B, H, S, head_dim, dtype=dtype)
    rq, rk = rope.rotate(q, k, q_offset=q_offset, k_offset=k_offset)
    assert rq.dtype == rk.dtype == dtype and rq.shape == q.shape and rk.shape == k.shape
    # float64 angles: off by ~p * eps64 radians; then the result's rounding in its dtype.
    amax = max(float(q.abs().max()), float(k.abs().max()))
    tol = amax * (4 * (max(q_offset + T, k_offset + S)) * EPS[torch.float64] + 4 * EPS[dtype])
    for got, x, off, n in ((rq, q, q_offset, T), (rk, k, k_offset, S)):
        expected = rotary_formula(x.double().numpy(), np.arange(off, off + n, dtype=np.float64), d, 10000.0,
                                  convention)
        np.testing.assert_allclose(got.double().numpy(), expected, rtol=0, atol=tol)


# -- 6. the key/value cache --------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
@props("kv_cache")
@given(data=st.data())
def test_kv_cache_in_random_chunks_equals_one_shot(scheme, data):
    case = data.draw(mha_case(scheme), label="case")
    mha = make_mha(case)
    L = case["L"]
    x = randn(gen(case["seed"] + 4), case["B"], L, mha.d_model)
    cuts = sorted(data.draw(st.sets(st.integers(1, L - 1), max_size=4), label="cuts")) if L > 1 else []
    capacity = data.draw(st.sampled_from([0, 1, L]), label="capacity")
    with torch.no_grad():
        whole = mha(x, is_causal=True)
        cache = KVCache(capacity)
        pieces = []
        for a, b in zip([0, *cuts], [*cuts, L], strict=True):
            step = x[:, a:b]
            pieces.append(mha(step, is_causal=True, cache=cache))
            assert len(cache) == b
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=1e-5, rtol=1e-5)


# -- 7. bad inputs raise the documented error types ------------------------------------


@pytest.mark.parametrize(
    "kind", ["float-mask", "int-mask", "mask-too-long", "mask-5d", "int-bias", "bias-wrong-T", "bias-not-tensor"])
@props("bad_inputs")
@given(case=attention_case(dtypes=(torch.float32,)))
def test_bad_masks_and_biases_raise_the_documented_error(kind, case):
    q, k, v, _, _ = build(case)
    B, H, T, S = case["B"], case["H"], case["T"], case["S"]
    bad = {
        "float-mask": ("mask", torch.ones(T, S), TypeError),
        "int-mask": ("mask", torch.ones(T, S, dtype=torch.int64), TypeError),
        "mask-too-long": ("mask", torch.ones(T, S + 1, dtype=torch.bool), ValueError),
        "mask-5d": ("mask", torch.ones(1, B, H, T, S, dtype=torch.bool), ValueError),
        "int-bias": ("bias", torch.zeros(T, S, dtype=torch.int64), TypeError),
        "bias-wrong-T": ("bias", torch.zeros(H, T + 1, S), ValueError),
        "bias-not-tensor": ("bias", 0.0, TypeError),
    }
    name, value, error = bad[kind]
    for need_weights in (False, True):
        with pytest.raises(error, match=name):
            attend(q, k, v, need_weights=need_weights, **{name: value})
