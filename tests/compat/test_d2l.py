"""attnlab.compat.d2l against d2l's own code, run side by side, and the d2l chapter's cells run unchanged.

The reference below is d2l's PyTorch implementation (d2l-ai/d2l-en, ``d2l/torch.py``), copied
as the book defines it; the only change is ``d2l.Module`` -> ``nn.Module`` as the base of
``MultiHeadAttention`` (d2l's base adds plotting and hyperparameter helpers, no parameters,
so the ``state_dict`` is the same).
"""

import math

import pytest
import torch
from torch import nn

import attnlab.compat.d2l as d2l

pytestmark = pytest.mark.usefixtures("one_thread")


# -- d2l's own code, the reference ---------------------------------------------------------


def ref_masked_softmax(X, valid_lens):
    """Perform softmax operation by masking elements on the last axis."""
    # X: 3D tensor, valid_lens: 1D or 2D tensor
    def _sequence_mask(X, valid_len, value=0):
        maxlen = X.size(1)
        mask = torch.arange((maxlen), dtype=torch.float32,
                            device=X.device)[None, :] < valid_len[:, None]
        X[~mask] = value
        return X

    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    else:
        shape = X.shape
        if valid_lens.dim() == 1:
            valid_lens = torch.repeat_interleave(valid_lens, shape[1])
        else:
            valid_lens = valid_lens.reshape(-1)
        # On the last axis, replace masked elements with a very large negative
        # value, whose exponentiation outputs 0
        X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
        return nn.functional.softmax(X.reshape(shape), dim=-1)


class RefDotProductAttention(nn.Module):
    """Scaled dot product attention."""
    def __init__(self, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    # Shape of queries: (batch_size, no. of queries, d)
    # Shape of keys: (batch_size, no. of key-value pairs, d)
    # Shape of values: (batch_size, no. of key-value pairs, value dimension)
    # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
    def forward(self, queries, keys, values, valid_lens=None):
        d = queries.shape[-1]
        # Swap the last two dimensions of keys with keys.transpose(1, 2)
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = ref_masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class RefMultiHeadAttention(nn.Module):
    """Multi-head attention."""
    def __init__(self, num_hiddens, num_heads, dropout, bias=False, **kwargs):
        super().__init__()
        self.num_heads = num_heads
        self.attention = RefDotProductAttention(dropout)
        self.W_q = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_k = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_v = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_o = nn.LazyLinear(num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        # Shape of queries, keys, or values:
        # (batch_size, no. of queries or key-value pairs, num_hiddens)
        # Shape of valid_lens: (batch_size,) or (batch_size, no. of queries)
        # After transposing, shape of output queries, keys, or values:
        # (batch_size * num_heads, no. of queries or key-value pairs,
        # num_hiddens / num_heads)
        queries = self.transpose_qkv(self.W_q(queries))
        keys = self.transpose_qkv(self.W_k(keys))
        values = self.transpose_qkv(self.W_v(values))

        if valid_lens is not None:
            # On axis 0, copy the first item (scalar or vector) for num_heads
            # times, then copy the next item, and so on
            valid_lens = torch.repeat_interleave(
                valid_lens, repeats=self.num_heads, dim=0)

        # Shape of output: (batch_size * num_heads, no. of queries,
        # num_hiddens / num_heads)
        output = self.attention(queries, keys, values, valid_lens)
        # Shape of output_concat: (batch_size, no. of queries, num_hiddens)
        output_concat = self.transpose_output(output)
        return self.W_o(output_concat)

    def transpose_qkv(self, X):
        """Transposition for parallel computation of multiple attention heads."""
        # Shape of input X: (batch_size, no. of queries or key-value pairs,
        # num_hiddens). Shape of output X: (batch_size, no. of queries or
        # key-value pairs, num_heads, num_hiddens / num_heads)
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)
        # Shape of output X: (batch_size, num_heads, no. of queries or key-value
        # pairs, num_hiddens / num_heads)
        X = X.permute(0, 2, 1, 3)
        # Shape of output: (batch_size * num_heads, no. of queries or key-value
        # pairs, num_hiddens / num_heads)
        return X.reshape(-1, X.shape[2], X.shape[3])

    def transpose_output(self, X):
        """Reverse the operation of transpose_qkv."""
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])
        X = X.permute(0, 2, 1, 3)
        return X.reshape(X.shape[0], X.shape[1], -1)


class RefPositionalEncoding(nn.Module):
    """Positional encoding."""
    def __init__(self, num_hiddens, dropout, max_len=1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # Create a long enough P
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(
            -1, 1) / torch.pow(10000, torch.arange(
            0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


# -- helpers ---------------------------------------------------------------------------------

B, T, S = 2, 3, 5

# valid_lens for a batch of B sequences with T queries over S keys: none, [B], [B, T], with zeros.
VALID_LENS = {
    "none": None,
    "per_sequence": torch.tensor([4, 2]),
    "per_query": torch.tensor([[1, 2, 3], [5, 4, 2]]),
    "zero_per_sequence": torch.tensor([0, 3]),
    "zero_per_query": torch.tensor([[0, 1, 5], [2, 0, 0]]),
    "float_with_zero": torch.tensor([3.0, 0.0]),  # d2l's BERT passes float32 lengths
    "longer_than_S": torch.tensor([7, 1]),
}


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def pair(num_hiddens=8, num_heads=2, dropout=0.0, bias=False):
    """(d2l's MultiHeadAttention, ours) sharing weights: d2l's initialised by a call, loaded into ours."""
    ref = RefMultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias)
    ref(torch.randn(B, T, 6), torch.randn(B, S, 7), torch.randn(B, S, 4), None)  # materialise the lazy weights
    ours = d2l.MultiHeadAttention(num_hiddens, num_heads, dropout, bias=bias)
    ours.load_state_dict(ref.state_dict())
    return ref.eval(), ours.eval()


# -- side by side with d2l -----------------------------------------------------------------


@pytest.mark.parametrize("name", VALID_LENS)
def test_masked_softmax_matches_d2l(name):
    valid_lens = VALID_LENS[name]
    X = torch.randn(B, T, S)
    kept = X.clone()
    ours = d2l.masked_softmax(X, valid_lens)
    close(ours, ref_masked_softmax(X.clone(), valid_lens))
    assert torch.equal(X, kept)  # d2l overwrites its input; ours must not


def test_zero_valid_length_gives_uniform_weights_like_d2l():
    X = torch.randn(B, T, S) * 100
    weights = d2l.masked_softmax(X, torch.tensor([[0, 2, 0], [1, 0, 5]]))
    for b, t in ((0, 0), (0, 2), (1, 1)):
        assert torch.equal(weights[b, t], torch.full((S,), 1 / S))
    assert weights[0, 1, 2:].sum() == 0 and weights[1, 0, 1:].sum() == 0


@pytest.mark.parametrize("name", VALID_LENS)
def test_dot_product_attention_matches_d2l(name):
    valid_lens = VALID_LENS[name]
    q, k, v = torch.randn(B, T, 4), torch.randn(B, S, 4), torch.randn(B, S, 3)
    ref, ours = RefDotProductAttention(0.3).eval(), d2l.DotProductAttention(0.3).eval()
    close(ours(q, k, v, valid_lens), ref(q, k, v, valid_lens))
    close(ours.attention_weights, ref.attention_weights)


@pytest.mark.parametrize("name", VALID_LENS)
@pytest.mark.parametrize("bias", [False, True])
def test_multihead_matches_d2l_with_d2l_weights(name, bias):
    valid_lens = VALID_LENS[name]
    ref, ours = pair(bias=bias)
    q, k, v = torch.randn(B, T, 6), torch.randn(B, S, 7), torch.randn(B, S, 4)
    out = ours(q, k, v, valid_lens)
    assert out.shape == (B, T, 8)
    close(out, ref(q, k, v, valid_lens))
    assert ours.attention.attention_weights.shape == (B * 2, T, S)
    close(ours.attention.attention_weights, ref.attention.attention_weights)


def test_d2l_loads_our_state_dict():
    ours = d2l.MultiHeadAttention(12, 3, 0.0, bias=True).eval()
    q, k = torch.randn(B, T, 12), torch.randn(B, S, 5)
    valid_lens = torch.tensor([[0, 2, 5], [1, 0, 3]])
    out = ours(q, k, k, valid_lens)  # materialises our lazy weights
    ref = RefMultiHeadAttention(12, 3, 0.0, bias=True).eval()
    ref.load_state_dict(ours.state_dict())
    assert list(ref.state_dict()) == list(ours.state_dict())
    close(out, ref(q, k, k, valid_lens))


def test_gradients_match_d2l():
    ref, ours = pair()
    q, k, v = torch.randn(B, T, 6), torch.randn(B, S, 7), torch.randn(B, S, 4)
    valid_lens = torch.tensor([[0, 2, 5], [3, 0, 1]])
    weights = torch.randn(B, T, 8)
    (ref(q, k, v, valid_lens) * weights).sum().backward()
    (ours(q, k, v, valid_lens) * weights).sum().backward()
    for (name, theirs), (_, mine) in zip(ref.named_parameters(), ours.named_parameters(), strict=True):
        assert name.startswith("W_")
        close(mine.grad, theirs.grad)


def test_dropout_in_train_mode_draws_as_d2l_and_eval_is_deterministic():
    ref, ours = pair(dropout=0.5)
    q, k, v = torch.randn(B, T, 6), torch.randn(B, S, 7), torch.randn(B, S, 4)
    valid_lens = torch.tensor([0, 3])
    ref.train(), ours.train()
    torch.manual_seed(7)
    theirs = ref(q, k, v, valid_lens)
    torch.manual_seed(7)
    mine = ours(q, k, v, valid_lens)
    assert mine.shape == (B, T, 8)
    close(mine, theirs)  # the same random mask on the same weights
    assert not torch.allclose(mine, ours(q, k, v, valid_lens))  # train mode draws anew
    ours.eval()
    first = ours(q, k, v, valid_lens)
    assert torch.equal(first, ours(q, k, v, valid_lens))
    close(first, ref.eval()(q, k, v, valid_lens))


# -- the positional table --------------------------------------------------------------------


@pytest.mark.parametrize("num_hiddens", [32, 7])
def test_positional_table_matches_the_float64_formula(num_hiddens):
    P = d2l.PositionalEncoding(num_hiddens, 0).P
    assert P.shape == (1, 1000, num_hiddens) and P.dtype == torch.float32
    i = torch.arange(1000, dtype=torch.float64)[:, None]
    two_j = torch.arange(0, num_hiddens, 2, dtype=torch.float64)
    angles = i / 10000 ** (two_j / num_hiddens)  # [1000, ceil(D/2)]
    close(P[0, :, 0::2].double(), torch.sin(angles))  # sines in the even columns
    close(P[0, :, 1::2].double(), torch.cos(angles[:, : num_hiddens // 2]))  # cosines in the odd ones


def test_positional_table_matches_d2l_float32_computation():
    ours, ref = d2l.PositionalEncoding(32, 0), RefPositionalEncoding(32, 0)
    # d2l rounds the angle to float32 first: off by 3e-5 near position 1000, by 3e-6 in the first 60 rows.
    close(ours.P, ref.P, atol=1e-4)
    close(ours.P[:, :60], ref.P[:, :60], atol=1e-5)
    X = torch.randn(2, 60, 32)
    close(ours(X), ref(X), atol=1e-5)


def test_positional_encoding_state_dict_is_d2l_s():
    ours, ref = d2l.PositionalEncoding(16, 0.1, max_len=50), RefPositionalEncoding(16, 0.1, max_len=50)
    assert list(ours.state_dict()) == list(ref.state_dict()) == []  # d2l's P is an attribute, not state
    ours.load_state_dict(ref.state_dict())
    ref.load_state_dict(ours.state_dict())
    assert "P" in dict(ours.named_buffers())  # but ours moves with .to(device)


def test_positional_encoding_dropout():
    pos_encoding = d2l.PositionalEncoding(8, 0.5, max_len=20)
    X = torch.zeros(3, 10, 8)
    assert pos_encoding(X).shape == (3, 10, 8)
    pos_encoding.eval()
    assert torch.equal(pos_encoding(X), pos_encoding.P[:, :10].expand(3, -1, -1))


# -- the chapter's cells, run unchanged with d2l = attnlab.compat.d2l -------------------------


def test_chapter_self_attention_cell():
    num_hiddens, num_heads = 100, 5
    attention = d2l.MultiHeadAttention(num_hiddens, num_heads, 0.5)
    batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
    X = torch.ones((batch_size, num_queries, num_hiddens))
    d2l.check_shape(attention(X, X, X, valid_lens), (batch_size, num_queries, num_hiddens))
    # Not in the chapter: the same in eval mode.
    attention.eval()
    assert attention(X, X, X, valid_lens).shape == torch.Size([2, 4, 100])


def test_chapter_positional_encoding_cells():
    PositionalEncoding = d2l.PositionalEncoding  # the chapter defines it in the cell and saves it into d2l
    encoding_dim, num_steps = 32, 60
    pos_encoding = PositionalEncoding(encoding_dim, 0)
    X = pos_encoding(torch.zeros((1, num_steps, encoding_dim)))
    P = pos_encoding.P[:, :X.shape[1], :]
    # d2l.plot(torch.arange(num_steps), P[0, :, 6:10].T, ...) is left out: plotting is not compat's job.
    assert X.shape == P.shape == (1, 60, 32)
    assert torch.equal(X, P)
    close(P, RefPositionalEncoding(encoding_dim, 0).P[:, :num_steps], atol=1e-5)
    # "the 6th and the 7th columns have a higher frequency than the 8th and the 9th": sign changes.
    flips = (P[0, 1:, 6:10].sign() != P[0, :-1, 6:10].sign()).sum(dim=0)
    assert flips[0] > flips[2] and flips[1] > flips[3]
    P = P[0, :, :].unsqueeze(0).unsqueeze(0)
    # d2l.show_heatmaps(P, xlabel='Column (encoding dimension)', ...) is left out too.
    assert P.shape == (1, 1, 60, 32)


def test_chapter_relative_position_projection():
    # The chapter: [[cos(d w), sin(d w)], [-sin(d w), cos(d w)]] @ (p_i,2j, p_i,2j+1) = (p_i+d,2j, p_i+d,2j+1).
    P = d2l.PositionalEncoding(32, 0).P[0].double()
    delta = 5
    for j in range(16):
        w = 1 / 10000 ** (2 * j / 32)
        projection = torch.tensor([[math.cos(delta * w), math.sin(delta * w)],
                                   [-math.sin(delta * w), math.cos(delta * w)]], dtype=torch.float64)
        moved = P[:-delta, 2 * j: 2 * j + 2] @ projection.T  # [L - delta, 2]
        close(moved, P[delta:, 2 * j: 2 * j + 2], atol=1e-6)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize("num_hiddens, error", [(0, ValueError), (-4, ValueError), (2.5, TypeError)])
def test_non_positive_num_hiddens(num_hiddens, error):
    with pytest.raises(error, match="num_hiddens"):
        d2l.MultiHeadAttention(num_hiddens, 1, 0.0)
    with pytest.raises(error, match="num_hiddens"):
        d2l.PositionalEncoding(num_hiddens, 0.0)


@pytest.mark.bad_input("catalogue")
def test_num_heads_must_divide_num_hiddens():
    with pytest.raises(ValueError, match="num_heads"):
        d2l.MultiHeadAttention(10, 3, 0.0)
    with pytest.raises(ValueError, match="num_heads"):
        d2l.MultiHeadAttention(10, 0, 0.0)


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, float("nan")])
def test_dropout_outside_0_1(dropout):
    with pytest.raises(ValueError, match="dropout"):
        d2l.MultiHeadAttention(8, 2, dropout)
    with pytest.raises(ValueError, match="dropout"):
        d2l.DotProductAttention(dropout)
    with pytest.raises(ValueError, match="dropout"):
        d2l.PositionalEncoding(8, dropout)


@pytest.mark.bad_input("catalogue")
def test_max_len_and_sequence_length():
    with pytest.raises(ValueError, match="max_len"):
        d2l.PositionalEncoding(8, 0.0, max_len=0)
    pos_encoding = d2l.PositionalEncoding(8, 0.0, max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        pos_encoding(torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match="X"):
        pos_encoding(torch.zeros(1, 3, 6))
    with pytest.raises(TypeError, match="X"):
        pos_encoding(torch.zeros(1, 3, 8, dtype=torch.long))


BAD_VALID_LENS = [
    (torch.tensor([1, 2, 3]), ValueError),  # [B + 1]
    (torch.tensor([[1, 2], [3, 4]]), ValueError),  # [B, T - 1]
    (torch.ones(B, T, 1, dtype=torch.long), ValueError),  # 3-D
    (torch.tensor([1, -1]), ValueError),  # negative
    (torch.tensor([1.0, float("nan")]), ValueError),
    (torch.tensor([True, False]), TypeError),  # a mask, not lengths
    ([1, 2], TypeError),  # not a tensor
]


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize("valid_lens, error", BAD_VALID_LENS)
def test_bad_valid_lens(valid_lens, error):
    q, k = torch.randn(B, T, 4), torch.randn(B, S, 4)
    with pytest.raises(error, match="valid_lens"):
        d2l.masked_softmax(torch.randn(B, T, S), valid_lens)
    with pytest.raises(error, match="valid_lens"):
        d2l.DotProductAttention(0.0)(q, k, k, valid_lens)
    with pytest.raises(error, match="valid_lens"):
        d2l.MultiHeadAttention(4, 2, 0.0)(q, k, k, valid_lens)


@pytest.mark.bad_input("catalogue")
def test_bad_queries_keys_values():
    attention = d2l.DotProductAttention(0.0)
    with pytest.raises(ValueError, match="queries"):
        attention(torch.randn(B, T, 4), torch.randn(B, S, 5), torch.randn(B, S, 3))
    with pytest.raises(ValueError, match="keys"):
        d2l.MultiHeadAttention(4, 2, 0.0)(torch.randn(B, T, 4), torch.randn(B, S, 4), torch.randn(B, S + 1, 4), None)
    with pytest.raises(TypeError, match="values"):
        attention(torch.randn(B, T, 4), torch.randn(B, S, 4), torch.ones(B, S, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="masked_softmax|X"):
        d2l.masked_softmax(torch.randn(B, 1, T, S), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="expected shape"):
        d2l.check_shape(torch.zeros(2, 3), (3, 2))
