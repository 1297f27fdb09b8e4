"""Shaw et al.'s relative attention against a naive float64 implementation of eqs. 3-4."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnlab.encodings.relative import ShawRelative


def naive_shaw(q, k, v, w_k, w_v, max_rel, *, q_offset=0, k_offset=0):
    """Shaw eqs. 3-5 as written: materialise a^K_ij and a^V_ij, [T, S, Dh] each."""
    T, S, Dh = q.shape[-2], k.shape[-2], q.shape[-1]
    rows_k, rows_v = [], []
    for i in range(T):
        row_k, row_v = [], []
        for j in range(S):
            c = max(-max_rel, min(max_rel, (k_offset + j) - (q_offset + i)))
            row_k.append(w_k[c + max_rel])
            row_v.append(w_v[c + max_rel])
        rows_k.append(torch.stack(row_k))
        rows_v.append(torch.stack(row_v))
    a_k, a_v = torch.stack(rows_k), torch.stack(rows_v)  # [T, S, Dh] each
    # e_ij = q_i (k_j + a^K_ij)^T / sqrt(Dh)
    e = (q[..., :, None, :] * (k[..., None, :, :] + a_k)).sum(-1) / math.sqrt(Dh)  # [B, H, T, S]
    alpha = e.softmax(-1)
    # z_i = sum_j alpha_ij (v_j + a^V_ij)
    z = alpha @ v + (alpha[..., None] * a_v).sum(-2)  # [B, H, T, Dh]
    return z, alpha


def ours(shaw, q, k, v, *, q_offset=0, k_offset=0):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores + shaw.bias(q, k.shape[-2], q_offset=q_offset, k_offset=k_offset)
    weights = scores.softmax(-1)
    return weights @ v + shaw.value_term(weights, q_offset=q_offset, k_offset=k_offset), weights


@pytest.mark.parametrize(("T", "S", "q_offset", "k_offset"), [(7, 7, 0, 0), (3, 9, 6, 0), (5, 4, 0, 10)])
def test_matches_naive_implementation_with_gradients(T, S, q_offset, k_offset):
    shaw = ShawRelative(6, max_relative_position=2).double()
    with torch.no_grad():  # larger than the 0.02 init, so the terms matter in the comparison
        shaw.rel_keys.normal_()
        shaw.rel_values.normal_()
    q = torch.randn(2, 3, T, 6, dtype=torch.float64)
    k, v = torch.randn(2, 3, S, 6, dtype=torch.float64), torch.randn(2, 3, S, 6, dtype=torch.float64)
    out, weights = ours(shaw, q, k, v, q_offset=q_offset, k_offset=k_offset)

    w_k = shaw.rel_keys.detach().clone().requires_grad_()
    w_v = shaw.rel_values.detach().clone().requires_grad_()
    want, alpha = naive_shaw(q, k, v, w_k, w_v, 2, q_offset=q_offset, k_offset=k_offset)
    torch.testing.assert_close(weights, alpha, atol=1e-13, rtol=0)
    torch.testing.assert_close(out, want, atol=1e-13, rtol=0)

    g = torch.randn_like(out)
    (out * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(shaw.rel_keys.grad, w_k.grad, atol=1e-12, rtol=0)
    torch.testing.assert_close(shaw.rel_values.grad, w_v.grad, atol=1e-12, rtol=0)
    assert shaw.rel_keys.grad.abs().sum() > 0 and shaw.rel_values.grad.abs().sum() > 0


def test_gradcheck_bias_and_value_term():
    shaw = ShawRelative(3, max_relative_position=1).double()
    q = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: shaw.bias(x, 4, q_offset=1), (q,))
    assert torch.autograd.gradcheck(lambda x: shaw.value_term(x, k_offset=2), (w,))


def test_offsets_beyond_k_are_clipped():
    shaw = ShawRelative(4, max_relative_position=2)
    q = torch.randn(1, 1, 1, 4)
    b = shaw.bias(q, 12, q_offset=6)[0, 0, 0]  # key offsets -6 .. 5
    expected = (q[0, 0, 0] @ shaw.rel_keys.T) / 2.0  # [5]: offsets -2 .. 2
    torch.testing.assert_close(b[:5], expected[0].expand(5))  # -6 .. -2 all share offset -2
    torch.testing.assert_close(b[5:8], expected[1:4])  # -1, 0, 1
    torch.testing.assert_close(b[8:], expected[4].expand(4))  # 2 .. 5 share offset 2
    assert shaw.clipped_index(1, 12, q_offset=6).tolist() == [[0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 4]]


def test_value_term_sums_weights_per_clipped_offset():
    shaw = ShawRelative(2, max_relative_position=1)
    with torch.no_grad():
        shaw.rel_values.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [10.0, 10.0]]))  # offsets -1, 0, +1
    weights = torch.tensor([[[[0.1, 0.2, 0.3, 0.4]]]])  # one query at position 1, keys 0..3
    vt = shaw.value_term(weights, q_offset=1)
    # offset -1 <- 0.1; offset 0 <- 0.2; offset +1 <- 0.3 + 0.4 (offset 2 clipped to 1)
    torch.testing.assert_close(vt, torch.tensor([[[[0.1 + 7.0, 0.2 + 7.0]]]]))


class _LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_never_materialises_a_T_by_S_by_Dh_tensor():
    B, H, T, S, Dh = 1, 1, 16, 16, 32
    shaw = ShawRelative(Dh, max_relative_position=3)
    q, weights = torch.randn(B, H, T, Dh), torch.rand(B, H, T, S)
    with _LargestTensor() as probe:
        shaw.bias(q, S)
        shaw.value_term(weights)
    assert probe.largest < T * S * Dh  # [T, S] or [T, Dh] sized at most
    with _LargestTensor() as naive:  # and the probe does see the naive [T, S, Dh]
        naive_shaw(q, torch.randn(B, H, S, Dh), torch.randn(B, H, S, Dh), shaw.rel_keys.detach(),
                   shaw.rel_values.detach(), 3)
    assert naive.largest >= T * S * Dh


def test_keys_only_variant():
    shaw = ShawRelative(8, max_relative_position=4, on_values=False)
    assert not shaw.adds_value and shaw.rel_values is None
    assert [n for n, _ in shaw.named_parameters()] == ["rel_keys"]
    assert shaw.value_term(torch.rand(1, 1, 2, 2)) is None
    full = ShawRelative(8)
    assert full.adds_value and full.max_len is None
    assert [n for n, _ in full.named_parameters()] == ["rel_keys", "rel_values"]
    assert full.rel_keys.shape == (33, 8)


def test_dtypes_and_initialisation():
    shaw = ShawRelative(64, max_relative_position=200)  # 401 x 64 = 25,664 draws per table
    assert abs(shaw.rel_keys.std().item() - 0.02) < 0.001 and abs(shaw.rel_values.std().item() - 0.02) < 0.001
    q = torch.randn(1, 2, 3, 64).to(torch.float16)
    assert shaw.bias(q, 3).dtype == torch.float32
    w = torch.rand(1, 2, 3, 3).to(torch.bfloat16)
    assert shaw.value_term(w).dtype == torch.bfloat16


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: ShawRelative(8, max_relative_position=-1), ValueError, r"max_relative_position.*-1"),
    (lambda: ShawRelative(8, max_relative_position=0), ValueError, r"max_relative_position.*0"),
    (lambda: ShawRelative(0), ValueError, r"head_dim.*0"),
    (lambda: ShawRelative(8, on_values=1), TypeError, r"on_values.*1"),
    (lambda: ShawRelative(8).bias(torch.randn(1, 1, 2, 4), 2), ValueError, r"head_dim = 8.*\[1, 1, 2, 4\]"),
    (lambda: ShawRelative(8).bias(torch.randn(1, 1, 2, 8), -3), ValueError, r"n_keys.*-3"),
    (lambda: ShawRelative(8).value_term(torch.rand(2, 2, 2)), ValueError, r"weights.*\[2, 2, 2\]"),
    (lambda: ShawRelative(8).value_term(torch.ones(1, 1, 2, 2, dtype=torch.long)), TypeError, r"weights.*int64"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
