"""The O(L)-memory paths of attention with a positional scheme: chunked, FlexAttention score_mods, the routing.

Every golden value is the dense path's: the scheme's ``bias`` as a ``[.., T, S]``
tensor (itself tested against float64 formulas and peers in tests/encodings),
then the explicit softmax. FlexAttention runs eagerly here (``compiled=False``:
the same score_mods and block masks, without a compile of tens of seconds);
``benchmarks/bench_long_context.py`` runs the compiled kernel and checks it
against the dense path at L=4096.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention.backends.choose import adds_terms, choose_backend, key_valid_of, may_attend
from attnlab.attention.backends.chunked import chunk_rows, chunked_attend
from attnlab.attention.backends.flex import flex_attend, shape_family
from attnlab.attention.functional import attend_unchecked
from attnlab.encodings import ALiBi, NoPosition, Rotary, ShawRelative, T5RelativeBias
from attnlab.encodings.cope import CoPE
from attnlab.encodings.fire import FIRE
from attnlab.encodings.kerple import KERPLE
from attnlab.encodings.registry import attention_position

B, H, DH = 2, 4, 8


def schemes():
    """Every scheme that adds a term, in float64, with its parameters moved off their initial values."""
    torch.manual_seed(0)
    out = {
        "alibi": ALiBi(H),
        "alibi-bidirectional": ALiBi(H, causal=False, left_offset=0.5),
        "t5": T5RelativeBias(H, num_buckets=8, max_distance=16),
        "t5-causal": T5RelativeBias(H, num_buckets=8, max_distance=16, bidirectional=False),
        "shaw": ShawRelative(DH, max_relative_position=3),
        "shaw-keys": ShawRelative(DH, max_relative_position=3, on_values=False),
        "fire": FIRE(H, hidden=8, init_threshold=6.0),
        "fire-bidirectional": FIRE(H, causal=False, hidden=8, init_threshold=6.0),
        "kerple": KERPLE(H),
        "cope": CoPE(DH, npos_max=12),
    }
    with torch.no_grad():
        for scheme in out.values():
            for p in scheme.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return {name: s.double() for name, s in out.items()}


SCHEMES = schemes()


def dense(position, q, k, v, *, q_offset, mask, is_causal, bias=None):
    """The dense path: the scheme's whole term, the explicit softmax, the value term."""
    kw = {"k": k} if position.reads_keys else {}
    if position.reads_mask:  # CoPE counts only the keys a query may attend to, as attention passes them
        kw["mask"] = may_attend(mask, q.shape[-2], k.shape[-2], is_causal=is_causal, device=q.device)
    term = position.bias(q, k.shape[-2], q_offset=q_offset, k_offset=0, **kw)
    if bias is not None:
        term = bias if term is None else term + bias
    out, w = attend_unchecked(q, k, v, mask=mask, bias=term, dropout_p=0.0, scale=None, need_weights=True,
                              is_causal=is_causal)
    extra = position.value_term(w, q_offset=q_offset, k_offset=0) if position.adds_value else None
    return out if extra is None else out + extra


def qkv(T, S, *, grad=False):
    g = torch.Generator().manual_seed(T * 100 + S)
    return [torch.randn(B, H, n, DH, generator=g, dtype=torch.float64, requires_grad=grad) for n in (T, S, S)]


# Causal schemes: fewer queries than keys, after cached steps; the bidirectional ones: more queries than keys.
BIDIRECTIONAL = {"alibi-bidirectional", "t5", "fire-bidirectional"}


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_chunked_equals_dense_outputs_and_gradients(name):
    position = SCHEMES[name]
    T, S, causal = (9, 7, False) if name in BIDIRECTIONAL else (5, 13, True)
    padded = True
    q, k, v = qkv(T, S, grad=True)
    g = torch.Generator().manual_seed(7)
    mask = (torch.rand(B, 1, 1, S, generator=g) > 0.3) if padded else None
    user_bias = torch.randn(H, T, S, generator=g, dtype=torch.float64)
    offset = S - T if causal else 0
    out = chunked_attend(q, k, v, position=position, q_offset=offset, mask=mask, bias=user_bias,
                         is_causal=causal, chunk_size=4)
    ref = dense(position, q, k, v, q_offset=offset, mask=mask, is_causal=causal, bias=user_bias)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    with torch.no_grad():  # the inference paths: SDPA per chunk, or the in-place softmax for a value term
        again = chunked_attend(q, k, v, position=position, q_offset=offset, mask=mask, bias=user_bias,
                               is_causal=causal, chunk_size=4)
    torch.testing.assert_close(again, ref, rtol=0, atol=1e-12)
    params = [q, k, v, *position.parameters()]
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(out, params, grad_out)
    want = torch.autograd.grad(ref, params, grad_out)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", ["alibi", "t5-causal", "shaw", "cope", "fire"])
def test_chunked_gradients_with_grouped_keys_empty_rows_and_a_trainable_bias(name):
    """Two key/value heads for four query heads, rows that see no key, and a user bias that learns."""
    position = SCHEMES[name]
    T, S = 9, 6  # causal, bottom-right: the first three queries see no key at all
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, T, DH, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, 2, S, DH, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    user_bias = torch.randn(1, H, T, S, generator=g, dtype=torch.float64, requires_grad=True)
    out = chunked_attend(q, k, v, position=position, bias=user_bias, is_causal=True, chunk_size=2)
    k_full, v_full = (t.repeat_interleave(H // 2, dim=1) for t in (k, v))  # head h reads key/value head h // 2
    ref = dense(position, q, k_full, v_full, q_offset=0, mask=None, is_causal=True, bias=user_bias)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    assert out[:, :, :3].abs().max() == 0  # the empty rows are zero, as attend's
    params = [q, k, v, user_bias, *position.parameters()]
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, params, grad_out), torch.autograd.grad(ref, params, grad_out),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", ["alibi", "alibi-bidirectional", "t5", "t5-causal", "kerple", "fire"])
@pytest.mark.parametrize("T,S,grow", [(11, 11, 1.0), (6, 13, 1.0), (11, 11, 40.0)])
def test_chunked_causal_table_path_equals_dense(name, T, S, grow):
    """Causal, no other mask or bias: the table carries the mask and, for a moderate |q . k|, the floor.

    ``grow`` 40 makes ``|q . k| * scale`` so large that the floor cannot be built into the
    table (chunk_kernels.causal_table) and the softmax's own floor pass runs instead.
    """
    position = SCHEMES[name]
    q, k, v = qkv(T, S, grad=True)
    with torch.no_grad():
        q.mul_(grow)
    out = chunked_attend(q, k, v, position=position, q_offset=S - T, is_causal=True, chunk_size=4)
    ref = dense(position, q, k, v, q_offset=S - T, mask=None, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(chunked_attend(q, k, v, position=position, q_offset=S - T, is_causal=True,
                                                  chunk_size=3), ref, rtol=0, atol=1e-12)
    params = [q, k, v, *position.parameters()]
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, params, grad_out), torch.autograd.grad(ref, params, grad_out),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11 * max(1.0, b.abs().max().item()))


def test_chunked_float32_matches_the_dense_path_to_1e_5():
    """The issue's tolerance at a size with many chunks: outputs and every gradient, ALiBi and Shaw's two terms."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, H, 300, DH, generator=g, requires_grad=True) for _ in range(3))
    for position in (ALiBi(H), ShawRelative(DH, max_relative_position=8)):
        out = chunked_attend(q, k, v, position=position, is_causal=True, chunk_size=37)
        ref = dense(position, q, k, v, q_offset=0, mask=None, is_causal=True)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
        params = [q, k, v, *position.parameters()]
        for a, b in zip(torch.autograd.grad(out.square().sum(), params),
                        torch.autograd.grad(ref.square().sum(), params), strict=True):
            # 1e-5 of the gradient's size: w^V's gradient sums 90,000 products and reaches 130, where
            # float32 rounding alone is 4e-5 on the dense path (against float64; the chunked path's is 1e-5).
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5 * max(1.0, b.abs().max().item()))


def test_chunked_training_with_dropout_draws_the_inference_paths_masks():
    """With dropout the chunks run under checkpointing: the same RNG draws as chunking without autograd."""
    q, k, v = qkv(12, 12, grad=True)
    position = SCHEMES["alibi"]
    torch.manual_seed(5)
    out = chunked_attend(q, k, v, position=position, is_causal=True, dropout_p=0.5, chunk_size=5)
    torch.manual_seed(5)
    with torch.no_grad():
        again = chunked_attend(q, k, v, position=position, is_causal=True, dropout_p=0.5, chunk_size=5)
    torch.testing.assert_close(out, again, rtol=0, atol=0)
    grads = torch.autograd.grad(out.sum(), [q, k, v])
    assert all(bool(torch.isfinite(g).all()) and g.abs().sum() > 0 for g in grads)


def test_chunked_keeps_no_chunks_scores_for_the_backward_pass():
    """With gradients, the forward pass saves q, k, v and a number per row: no [.., C, S] scores of any chunk."""
    q, k, v = (t.float() for t in qkv(64, 64, grad=True))
    saved: list[torch.Size] = []

    def pack(t):
        saved.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        chunked_attend(q, k, v, position=ALiBi(H), is_causal=True, chunk_size=8).sum()
    assert saved, "nothing saved at all: the test would not see a leak"
    assert all(shape[-2:] != (8, 64) for shape in saved), saved


def test_chunk_rows_keep_a_chunk_near_the_budget():
    assert chunk_rows(1, 8, 16384) == 128  # 2**24 numbers by default: 64 MiB in float32
    assert chunk_rows(4, 8, 2**20) == 1  # never zero rows
    assert chunk_rows(1, 1, 10, budget=100) == 10


@pytest.mark.parametrize("name", ["alibi", "alibi-bidirectional", "t5", "t5-causal", "shaw-keys", "fire",
                                  "fire-bidirectional", "kerple"])
def test_score_mods_through_flex_equal_the_dense_bias(name):
    """Across a block boundary (128): three queries after 147 cached steps, or 130 queries of 140 keys."""
    T, S, causal, offset = (130, 140, False, 0) if name in BIDIRECTIONAL else (3, 150, True, 147)
    padded = True
    position = copy.deepcopy(SCHEMES[name]).float()
    q, k, v = (t.float() for t in qkv(T, S))
    g = torch.Generator().manual_seed(3)
    valid = torch.rand(B, S, generator=g) > 0.3 if padded else None
    if valid is not None:
        valid[0] = False  # a batch row with no key at all: zeros, as attend gives
    with torch.no_grad():
        out = flex_attend(q, k, v, is_causal=causal, key_valid=valid, compiled=False,
                          score_mod=lambda Tp, Sp: position.score_mod(F.pad(q, (0, 0, 0, Tp - T)), Sp,
                                                                      q_offset=offset))
        mask = None if valid is None else valid[:, None, None, :]
        ref = dense(position, q, k, v, q_offset=offset, mask=mask, is_causal=causal)
    torch.testing.assert_close(out, ref, rtol=0, atol=2e-6)


def test_flex_with_grouped_query_keys_equals_repeated_keys():
    q = torch.randn(1, 4, 20, DH)
    k, v = torch.randn(1, 2, 20, DH), torch.randn(1, 2, 20, DH)
    alibi = ALiBi(4)
    out = flex_attend(q, k, v, is_causal=True, compiled=False,
                      score_mod=lambda Tp, Sp: alibi.score_mod(F.pad(q, (0, 0, 0, Tp - 20)), Sp))
    ref, _ = attend_unchecked(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask=None,
                              bias=alibi.bias(q, 20), dropout_p=0.0, scale=None, need_weights=False, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=2e-6)


def test_shape_families_are_powers_of_two_from_one_block():
    assert [shape_family(n) for n in (1, 128, 129, 4096, 4097)] == [128, 128, 256, 4096, 8192]


def test_the_routing_rule():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    alibi = ALiBi(8)
    kw = {"need_weights": False, "backward": False, "dropout_p": 0.0, "flex_mask_ok": True}
    assert choose_backend("auto", position=alibi, T=4096, S=4096, device=cpu, **kw) == "chunked"
    assert choose_backend("auto", position=alibi, T=4096, S=4096, device=cuda, **kw) == "flex"
    assert choose_backend("auto", position=alibi, T=1024, S=1024, device=cuda, **kw) == "dense"
    assert choose_backend("auto", position=Rotary(64), T=8192, S=8192, device=cpu, **kw) == "dense"
    assert choose_backend("auto", position=None, T=8192, S=8192, device=cpu, **kw) == "dense"
    cope = CoPE(64, npos_max=16)
    assert choose_backend("auto", position=cope, T=4096, S=4096, device=cuda, **kw) == "chunked"
    weights = {**kw, "need_weights": True}
    assert choose_backend("auto", position=alibi, T=4096, S=4096, device=cpu, **weights) == "dense"
    drawn = attention_position("random-alibi", n_heads=8, head_dim=64, causal=True, max_len=9000)
    assert choose_backend("auto", position=drawn, T=4096, S=4096, device=cpu, **kw) == "dense"
    assert choose_backend("flex", position=alibi, T=64, S=64, device=cpu, **kw) == "flex"
    assert adds_terms(ShawRelative(8)) and adds_terms(cope) and not adds_terms(NoPosition())


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize("forced,kw,message", [
    ("flex", {"backward": True}, "no FlexAttention backward on cpu"),
    ("flex", {"dropout_p": 0.1}, "no attention dropout"),
    ("flex", {"flex_mask_ok": False}, "more than causal and key padding"),
    ("chunked", {"need_weights": True}, "does not return attention weights"),
    ("sparse", {}, "backend"),
])
def test_a_forced_path_that_cannot_serve_the_call_says_why(forced, kw, message):
    args = {"need_weights": False, "backward": False, "dropout_p": 0.0, "flex_mask_ok": True, **kw}
    with pytest.raises(ValueError, match=message):
        choose_backend(forced, position=ALiBi(8), T=64, S=64, device=torch.device("cpu"), **args)


@pytest.mark.bad_input("numbers")
def test_flex_refuses_a_scheme_without_score_mod_and_chunked_a_scheme_that_draws():
    with pytest.raises(ValueError, match="CoPE has no score_mod"):
        choose_backend("flex", position=CoPE(8, npos_max=4), T=8, S=8, device=torch.device("cpu"),
                       need_weights=False, backward=False, dropout_p=0.0, flex_mask_ok=True)
    drawn = attention_position("random-t5", n_heads=H, head_dim=DH, causal=True, max_len=64)
    q = torch.randn(1, H, 4, DH)
    with pytest.raises(ValueError, match="draws new positions"):
        chunked_attend(q, q, q, position=drawn)


def test_key_valid_of_tells_key_padding_from_other_masks():
    pad = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert key_valid_of(None, 3) is None
    assert key_valid_of(pad, 3).shape == (2, 5)
    assert key_valid_of(torch.ones(1, 1, 3, 5, dtype=torch.bool), 3) is False


MODULE_SCHEMES = {
    "alibi": lambda: ALiBi(H), "t5": lambda: T5RelativeBias(H, num_buckets=8, bidirectional=False),
    "shaw": lambda: ShawRelative(DH, max_relative_position=3), "fire": lambda: FIRE(H, init_threshold=6.0),
    "cope": lambda: CoPE(DH, npos_max=16),
}


def twin_modules(name, backend):
    """Two MultiHeadAttention with one set of weights (grouped-query, 2 key/value heads): dense and ``backend``."""
    from attnlab.attention import MultiHeadAttention

    torch.manual_seed(0)
    dense_mha = MultiHeadAttention(H, H * DH, position=MODULE_SCHEMES[name](), n_kv_heads=2, backend="dense")
    other = copy.deepcopy(dense_mha)
    other.backend = backend
    return dense_mha.double(), other.double()


@pytest.mark.parametrize("name", sorted(MODULE_SCHEMES))
def test_multihead_chunked_backend_equals_dense_with_padding_and_a_cache(name):
    from attnlab.attention import KVCache

    dense_mha, chunked = twin_modules(name, "chunked")
    x = torch.randn(2, 9, H * DH, dtype=torch.float64, requires_grad=True)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, :2] = True  # torch's polarity: the first two keys of sequence 1 are padding
    outs = [m(x, is_causal=True, mask=~pad[:, None, :]) for m in (dense_mha, chunked)]  # [B, 1, S], True = may attend
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-12)
    grads = [torch.autograd.grad(o.sum(), [x, *m.parameters()]) for o, m in zip(outs, (dense_mha, chunked),
                                                                                 strict=True)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)
    with torch.no_grad():  # step by step with a cache: the chunked rows start at the cached length
        cache, steps = KVCache(), []
        for t in range(9):
            steps.append(chunked(x[:, t : t + 1], is_causal=True, cache=cache, mask=~pad[:, None, : t + 1]))
        torch.testing.assert_close(torch.cat(steps, 1), outs[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_multihead_guards_its_inputs_once_on_either_path(monkeypatch, backend):
    """Hidden keys zeroed and q, k bounded once per call, whichever path the call takes."""
    from attnlab.attention.backends import choose, chunked

    calls = []
    for module in (choose, chunked):
        for name in ("bounded_pair", "drop_unseen_keys"):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    _, mha = twin_modules("alibi", backend)
    x = torch.randn(2, 9, H * DH, dtype=torch.float64)
    pad = torch.ones(2, 1, 9, dtype=torch.bool)
    pad[1, :, :2] = False  # the first two keys of sequence 1 are padding
    with torch.no_grad():
        mha(x, is_causal=True, mask=pad)
    assert sorted(calls) == ["bounded_pair", "drop_unseen_keys"]


def test_multihead_flex_backend_routes_the_scheme_to_flex_attention(monkeypatch):
    """The forced flex path binds the scheme's score_mod at the call's offsets (kernel run eagerly here)."""
    import functools

    from attnlab.attention.backends import flex

    calls = []

    def eager(*args, **kwargs):
        calls.append(kwargs["is_causal"])
        return flex_attend(*args, **kwargs, compiled=False)

    monkeypatch.setattr(flex, "flex_attend", functools.partial(eager))
    dense_mha, flex = twin_modules("alibi", "flex")
    x = torch.randn(2, 150, H * DH, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(flex(x, is_causal=True), dense_mha(x, is_causal=True), rtol=0, atol=1e-10)
    assert calls == [True]


def test_auto_keeps_short_calls_and_weights_on_the_dense_path():
    dense_mha, auto = twin_modules("alibi", "auto")
    x = torch.randn(1, 12, H * DH, dtype=torch.float64)
    out, weights = auto(x, is_causal=True, need_weights=True)
    assert weights.shape == (1, H, 12, 12)
    torch.testing.assert_close(out, dense_mha(x, is_causal=True), rtol=0, atol=1e-12)
