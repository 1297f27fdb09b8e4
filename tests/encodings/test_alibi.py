"""ALiBi slopes against the paper's values and its get_slopes recipe; the bias itself."""

import math

import pytest
import torch

from attnlab.encodings.alibi import ALiBi, alibi_slopes
from attnlab.encodings.scheme import PositionScheme


def official_get_slopes(n):
    """Press et al.'s get_slopes (ofirpress/attention_with_linear_biases), re-typed in plain math."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + official_get_slopes(2 * closest)[0::2][: n - closest]


# The paper, §3: "for a model with 8 heads, the slopes are 1/2, 1/4, ..., 1/256".
EIGHT_HEADS = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
# 12 heads: the 8 above, then slopes 1, 3, 5, 7 of the 16-head sequence 2 ** (-h / 2):
# 2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5 (anchors §9: 0.707107, 0.353553, 0.176777, 0.088388).
TWELVE_HEADS = EIGHT_HEADS + [0.7071067811865476, 0.3535533905932738, 0.1767766952966369, 0.08838834764831845]


def test_slopes_eight_heads():
    assert alibi_slopes(8).tolist() == EIGHT_HEADS  # powers of two: exact in float32
    assert alibi_slopes(8).dtype == torch.float32


def test_slopes_twelve_heads():
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(TWELVE_HEADS), atol=0, rtol=1e-7)


@pytest.mark.parametrize("n_heads", [1, 2, 3, 5, 6, 7, 12, 16, 20, 24, 32, 40, 64, 96])
def test_slopes_match_the_official_recipe(n_heads):
    expected = torch.tensor(official_get_slopes(n_heads), dtype=torch.float64).to(torch.float32)
    assert torch.equal(alibi_slopes(n_heads), expected)


def test_bias_values_shape_and_offsets():
    alibi = ALiBi(4)
    q = torch.randn(2, 4, 3, 8)
    b = alibi.bias(q, 6, q_offset=5, k_offset=2)
    assert b.shape == (1, 4, 3, 6) and b.dtype == torch.float32
    slopes = [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    for h in range(4):
        for i in range(3):
            for j in range(6):
                assert b[0, h, i, j].item() == -slopes[h] * abs((2 + j) - (5 + i))


def test_bias_is_the_papers_on_the_causal_half():
    # The paper adds -m * (i - j) for j <= i; the symmetric form must agree there.
    alibi = ALiBi(8)
    b = alibi.bias(torch.zeros(1, 8, 10, 4, dtype=torch.float64), 10)[0]  # [H, T, S]
    i, j = torch.arange(10)[:, None], torch.arange(10)[None, :]
    paper = -alibi_slopes(8).double()[:, None, None] * (i - j)  # [H, T, S]
    visible = (j <= i).expand(8, 10, 10)
    assert torch.equal(b[visible], paper[visible])
    assert not torch.equal(b, paper)  # the future half differs: there the mask decides


def test_bias_is_symmetric_and_shift_invariant():
    alibi = ALiBi(3)
    q = torch.randn(1, 3, 5, 4, dtype=torch.float64)
    base = alibi.bias(q, 5)
    assert torch.equal(base, base.transpose(-1, -2))
    assert torch.equal(base, alibi.bias(q, 5, q_offset=1000, k_offset=1000))


def test_bias_dtype_follows_the_queries():
    alibi = ALiBi(2)
    for dtype, want in [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                        (torch.float32, torch.float32), (torch.float64, torch.float64)]:
        assert alibi.bias(torch.zeros(1, 2, 3, 4, dtype=dtype), 3).dtype == want


def test_module_is_fixed_and_unbounded():
    alibi = ALiBi(12, causal=False)
    assert isinstance(alibi, PositionScheme)
    assert alibi.max_len is None and not alibi.adds_value and not alibi.causal
    assert list(alibi.parameters()) == [] and alibi.state_dict() == {}
    torch.testing.assert_close(alibi.slopes, torch.tensor(TWELVE_HEADS), atol=0, rtol=1e-7)
    # long sequences are fine: the bias is a formula, not a table
    b = alibi.bias(torch.zeros(1, 12, 1, 4), 5000, q_offset=4999)
    assert b[0, 0, 0, 0].item() == -0.5 * 4999


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: ALiBi(0), ValueError, r"n_heads.*0"),
    (lambda: ALiBi(4.0), TypeError, r"n_heads.*4\.0"),
    (lambda: ALiBi(True), TypeError, r"n_heads.*True"),
    (lambda: ALiBi(4, causal="yes"), TypeError, r"causal.*'yes'"),
    (lambda: alibi_slopes(-1), ValueError, r"n_heads.*-1"),
    (lambda: ALiBi(4).bias(torch.zeros(1, 3, 2, 8), 2), ValueError, r"n_heads = 4.*\[1, 3, 2, 8\]"),
    (lambda: ALiBi(4).bias(torch.zeros(1, 4, 2, 8), -1), ValueError, r"n_keys.*-1"),
    (lambda: ALiBi(4).bias(torch.zeros(4, 2, 8), 2), ValueError, r"q must be \[B, H, L, Dh\].*\[4, 2, 8\]"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
