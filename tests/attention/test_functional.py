"""attend: parity with torch's SDPA and a float64 softmax reference, masks, bias, half precision."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import attend, causal_mask


def reference(q, k, v, mask=None, bias=None, scale=None):
    """Float64 textbook attention; fully masked rows are defined as zeros."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)
    return w @ v, w


def qkv(B=2, H=3, T=5, S=7, D=8, Dv=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(B, H, T, D, generator=g, dtype=dtype),
        torch.randn(B, H, S, D, generator=g, dtype=dtype),
        torch.randn(B, H, S, Dv or D, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("need_weights", [False, True])
def test_matches_sdpa_and_float64(need_weights):
    q, k, v = qkv(Dv=6)
    out, w = attend(q, k, v, need_weights=need_weights)
    assert out.shape == (2, 3, 5, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=0)
    ref_out, ref_w = reference(q, k, v)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-6, rtol=0)
    if need_weights:
        assert w.shape == (2, 3, 5, 7)
        torch.testing.assert_close(w.double(), ref_w, atol=1e-6, rtol=0)
    else:
        assert w is None


@pytest.mark.parametrize("mask_shape", [(7,), (5, 7), (2, 1, 1, 7), (2, 3, 5, 7), (1, 1, 5, 7)])
def test_fused_and_explicit_agree_under_masks_and_bias(mask_shape):
    q, k, v = qkv()
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(mask_shape, generator=g) > 0.3
    bias = torch.randn(3, 5, 7, generator=g)
    fused, _ = attend(q, k, v, mask=mask, bias=bias)
    explicit, w = attend(q, k, v, mask=mask, bias=bias, need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=0)
    ref_out, ref_w = reference(q, k, v, mask=mask, bias=bias)
    torch.testing.assert_close(explicit.double(), ref_out, atol=1e-6, rtol=0)
    torch.testing.assert_close(w.double(), ref_w, atol=1e-6, rtol=0)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = (t.requires_grad_() for t in qkv())
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[0, :, 2] = False  # query 2 of sequence 0 may attend to nothing
    mask[1] = False  # sequence 1 attends to nothing at all
    for need_weights in (False, True):
        out, w = attend(q, k, v, mask=mask, need_weights=need_weights)
        assert torch.isfinite(out).all()
        assert torch.all(out[0, :, 2] == 0) and torch.all(out[1] == 0)
        assert out[0, :, 1].abs().sum() > 0
        if w is not None:
            assert torch.all(w[0, :, 2] == 0) and torch.allclose(w[0, :, 1].sum(-1), torch.ones(3))
        out.sum().backward()
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all()
            t.grad = None


def test_no_minus_1e9_in_float16():
    # -1e9 overflows float16 (apex#1052); masked scores must simply vanish.
    q, k, v = qkv(dtype=torch.float16)
    mask = causal_mask(5, 7)
    for need_weights in (False, True):
        out, _ = attend(q, k, v, mask=mask, need_weights=need_weights)
        assert out.dtype == torch.float16 and torch.isfinite(out).all()
        ref_out, _ = reference(q, k, v, mask=mask)
        torch.testing.assert_close(out.double(), ref_out, atol=2e-3, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_softmax_in_float32(dtype):
    # Large logits: a float16 softmax would overflow exp; weights stay finite and sum to 1.
    q, k, v = qkv(dtype=dtype)
    out, w = attend(q * 30, k * 30, v, need_weights=True)
    assert w.dtype == dtype and torch.isfinite(w).all()
    torch.testing.assert_close(w.float().sum(-1), torch.ones(2, 3, 5), atol=1e-2, rtol=0)


def test_bottom_right_causal_mask_for_a_cached_decoding_step():
    # The last 2 of 7 positions, computed alone, equal the last 2 rows of the full causal pass.
    q, k, v = qkv(T=7, S=7)
    full, _ = attend(q, k, v, mask=causal_mask(7))
    tail, _ = attend(q[:, :, -2:], k, v, mask=causal_mask(2, 7))
    torch.testing.assert_close(tail, full[:, :, -2:], atol=1e-6, rtol=0)


def test_causal_outputs_do_not_depend_on_the_future():
    q, k, v = qkv(T=6, S=6)
    out, _ = attend(q, k, v, mask=causal_mask(6))
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] += 5.0
    v2[:, :, 4:] -= 3.0
    out2, _ = attend(q, k2, v2, mask=causal_mask(6))
    torch.testing.assert_close(out[:, :, :4], out2[:, :, :4], atol=0, rtol=0)
    assert not torch.allclose(out[:, :, 4:], out2[:, :, 4:])


def test_scale_and_dropout():
    q, k, v = qkv()
    out, w = attend(q, k, v, scale=1.0, need_weights=True)
    torch.testing.assert_close(w.double(), reference(q, k, v, scale=1.0)[1], atol=1e-6, rtol=0)
    torch.manual_seed(0)
    dropped, w2 = attend(q, k, v, dropout_p=0.5, need_weights=True)
    torch.testing.assert_close(w2, attend(q, k, v, need_weights=True)[1])  # weights before dropout
    assert not torch.allclose(dropped, attend(q, k, v)[0])


def test_gradcheck_float64_both_paths():
    q, k, v = (t.double().requires_grad_() for t in qkv(B=1, H=2, T=3, S=4, D=3))
    mask = torch.tensor([[True, True, False, True], [False, False, False, False], [True, True, True, True]])
    bias = torch.randn(2, 3, 4, dtype=torch.float64)
    for need_weights in (False, True):

        def fn(a, b, c, need_weights=need_weights):
            return attend(a, b, c, mask=mask, bias=bias, need_weights=need_weights)[0]

        assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(mask=torch.ones(5, 7)), TypeError, "boolean"),
        (dict(mask=torch.ones(4, 7, dtype=torch.bool)), ValueError, "mask"),
        (dict(bias=torch.ones(3, 5, 6)), ValueError, "bias"),
        (dict(bias=torch.ones(3, 5, 7, dtype=torch.bool)), TypeError, "bias"),
        (dict(dropout_p=1.5), ValueError, "dropout_p"),
        (dict(scale=float("nan")), ValueError, "scale"),
    ],
)
def test_bad_arguments(kwargs, exc, words):
    q, k, v = qkv()
    with pytest.raises(exc, match=words):
        attend(q, k, v, **kwargs)


def test_bad_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="query"):
        attend(q[0], k, v)
    with pytest.raises(ValueError, match="Dh"):
        attend(q, k[..., :4], v)
    with pytest.raises(ValueError, match="length S"):
        attend(q, k, v[:, :, :3])
    with pytest.raises(TypeError, match="dtype"):
        attend(q, k.double(), v)


def test_repeat_kv_heads_is_repeat_interleave_on_the_heads():
    from attnlab.attention.functional import repeat_kv_heads

    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(repeat_kv_heads(x, 6), torch.repeat_interleave(x, 2, dim=1))
    assert repeat_kv_heads(x, 3) is x
