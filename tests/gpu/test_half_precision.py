"""Half-precision attention (float16, bfloat16) against float32, on CUDA and on the CPU.

:func:`attnlab.attention.attend` promises that half-precision scores are softmaxed in float32.
Its two paths keep it differently (attention/functional.py): the explicit path (``need_weights``)
casts queries and keys to float32 and forms scores, bias and softmax there, then rounds the
weights to the values' dtype; the fused path hands the half tensors to torch's SDPA, whose
kernels accumulate ``q . k`` and the softmax in float32 (flash and memory-efficient on CUDA, the
CPU's own, each taking float32 as the accumulation type of half inputs). On CUDA the fused path
first rounds a ``bias`` to the queries' dtype (the memory-efficient kernel requires it); on the
CPU it stays float32.

Two checks, each a function of the device, run on ``cuda`` under the ``cuda`` marker and on the
CPU in every ``make test``:

* scores ``1000 + s / 8`` (s = 0..7), exact in float32, are all ``1000`` or ``1000.5`` once rounded
  to float16 (its spacing at 1000 is 0.5; bfloat16's is 4): a softmax of half-precision scores is
  then nearly uniform, a float32 one is ``softmax(s / 8)``, which the weights must equal to their
  own rounding;
* random queries, keys, values, a bias and a padded causal mask: the half-precision result against
  float32 attention of the same (rounded) inputs, within the bound the rounding steps give.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import attend

DTYPES = [torch.float16, torch.bfloat16]
# The unit roundoff u (half the spacing at 1): 11 significand bits in float16, 8 in bfloat16.
ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def check_softmax_in_float32(*, device: str, dtype: torch.dtype, need_weights: bool) -> None:
    """One query against 8 keys whose scores are ``1000 + s / 8``; values the identity, so ``out`` is the weights.

    Head dim 16 (zeros after the first two entries) and scale 1.0, so that CUDA's flash and
    memory-efficient kernels take the call and the scores are exact.
    """
    S, Dh = 8, 16
    q = torch.zeros(1, 1, 1, Dh)
    q[..., :2] = 1.0
    k = torch.zeros(1, 1, S, Dh)
    k[..., 0], k[..., 1] = 1000.0, torch.arange(S) / 8  # q . k = 1000 + s / 8: exact in float32
    v = torch.eye(S, Dh).view(1, 1, S, Dh)  # out[s] = weight of key s
    out, weights = attend(*(t.to(device=device, dtype=dtype) for t in (q, k, v)), scale=1.0,
                          need_weights=need_weights)
    exact = torch.softmax(torch.arange(S, dtype=torch.float64) / 8, dim=-1)  # [S], 0.077 to 0.186
    u = ROUNDOFF[dtype]
    assert out.dtype == dtype
    # The weights rounded to dtype (u), their products with one-hot values accumulated exactly in
    # float32, the result rounded again (u): 2u relative at most. A uniform softmax (0.125, what
    # half-precision scores give) is off by 0.05, 17x the bound even for bfloat16.
    got = out.double().cpu().flatten()[:S]
    assert (got - exact).abs().max() <= 2 * u * exact.max(), (got, exact)
    assert out.double().cpu().flatten()[S:].abs().max() == 0
    if need_weights:
        assert weights is not None and weights.dtype == dtype
        assert (weights.double().cpu().flatten() - exact).abs().max() <= u * exact.max()  # one rounding


def check_against_float32(*, device: str, dtype: torch.dtype, need_weights: bool) -> None:
    """Random attention with a bias and a padded causal mask in ``dtype`` against float32 of the same inputs."""
    B, H, T, Dh = 2, 4, 37, 16
    g = torch.Generator().manual_seed(5)
    # Rounded to dtype first: the float32 reference then sees exactly the numbers the half call sees.
    q, k, v = (torch.randn(B, H, T, Dh, generator=g).to(dtype).float() for _ in range(3))
    # The bias stays float32 in both calls, as a positional scheme's term is: each path decides what
    # it does with it (the explicit path adds it in float32, the fused one rounds it on CUDA).
    bias = torch.randn(H, T, T, generator=g)
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[1, ..., :4] = False  # left padding: sequence 1's first 4 queries see no key under the causal mask
    kw = {"mask": mask.to(device), "bias": bias.to(device), "is_causal": True, "need_weights": need_weights}
    ref, ref_w = attend(*(t.to(device) for t in (q, k, v)), **kw)
    out, w = attend(*(t.to(device=device, dtype=dtype) for t in (q, k, v)), **kw)
    u = ROUNDOFF[dtype]
    # The error, step by step (inputs exact in both): q . k of half inputs accumulated in float32
    # (each product exact, 16 of them: ~1e-6 relative, negligible); the bias rounded to dtype where
    # the fused path rounds it (CUDA), which moves each score by <= u |b| and the softmax's
    # weights by <= 2 u max|b| relatively (d w_j = w_j (d s_j - sum_k w_k d s_k)); the weights
    # rounded to dtype before the product with v (u); the output rounded (u). So
    # |out - ref| <= (2 u max|b| + 2 u) max|v|, and the weights' error <= (2 u max|b| + u) max w;
    # both allowed twice over.
    bound = 2 * (2 * u * bias.abs().max().item() + 2 * u)
    assert out.dtype == dtype and torch.isfinite(out).all()
    err = (out.float() - ref).abs().max().item()
    assert err <= bound * v.abs().max().item(), (err, bound)
    assert torch.equal(out[1, :, :4].float().cpu(), torch.zeros(H, 4, Dh))  # rows with no key: zeros
    if need_weights:
        assert w is not None and ref_w is not None and w.dtype == dtype
        w_err = (w.float() - ref_w).abs().max().item()
        assert w_err <= bound * ref_w.abs().max().item(), (w_err, bound)


@pytest.mark.cuda
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_precision_on_cuda_softmaxes_in_float32(dtype, need_weights):
    check_softmax_in_float32(device="cuda", dtype=dtype, need_weights=need_weights)


@pytest.mark.cuda
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_precision_on_cuda_equals_float32_within_its_rounding(dtype, need_weights):
    check_against_float32(device="cuda", dtype=dtype, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_precision_on_the_cpu_softmaxes_in_float32(dtype, need_weights):
    check_softmax_in_float32(device="cpu", dtype=dtype, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_precision_on_the_cpu_equals_float32_within_its_rounding(dtype, need_weights):
    check_against_float32(device="cpu", dtype=dtype, need_weights=need_weights)


def test_the_float32_check_fails_for_a_softmax_of_half_precision_scores(monkeypatch):
    """The check can fail: attention that forms its scores in float16 gives the near-uniform weights."""
    def half_scores(query, key, value, *, scale, need_weights, **_):
        scores = (query @ key.transpose(-2, -1)) * scale  # [B, H, T, S] in float16
        weights = torch.softmax(scores, dim=-1)
        return weights @ value, weights

    monkeypatch.setitem(globals(), "attend", half_scores)
    with pytest.raises(AssertionError):
        check_softmax_in_float32(device="cpu", dtype=torch.float16, need_weights=True)
