"""Masks: the labs' padding and subsequent masks, lengths, bottom-right causal, torch converters."""

import pytest
import torch

from attnlab.attention import (
    causal_mask,
    from_torch_mask,
    padding_mask,
    padding_mask_from_lengths,
    subsequent_mask,
    to_torch_mask,
)


def test_attention_lab_padding_mask():
    source_seq = torch.tensor([[[-1.0, 1.0], [0.0, 0.0]]])
    assert padding_mask(source_seq).tolist() == [[[True, False]]]


def test_padding_mask_keeps_a_point_with_one_zero_coordinate():
    assert padding_mask(torch.tensor([[[0.5, 0.0], [0.0, 0.0]]])).tolist() == [[[True, False]]]


def test_lengths():
    m = padding_mask_from_lengths(torch.tensor([3, 1, 0]), max_len=4)
    assert m.shape == (3, 1, 4)
    assert m[:, 0].int().tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    assert padding_mask_from_lengths([2, 1]).shape == (2, 1, 2)
    with pytest.raises(ValueError, match="max_len"):
        padding_mask_from_lengths([5], max_len=3)
    with pytest.raises(ValueError, match="lengths"):
        padding_mask_from_lengths([-1])


def test_pe_lab_subsequent_mask():
    assert subsequent_mask(2).tolist() == [[[True, False], [True, True]]]
    # The positional-encoding lab builds it as 1 - triu(ones, 1) and converts it with .bool().
    for n in range(1, 6):
        theirs = (1 - torch.triu(torch.ones(1, n, n), diagonal=1)).bool()
        assert torch.equal(subsequent_mask(n), theirs)


def test_causal_bottom_right_alignment():
    assert causal_mask(2, 4).int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert causal_mask(1, 5).all()
    # torch's own lower-right causal bias agrees.
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(3, 6)
    q = torch.randn(1, 1, 3, 4)
    k = torch.randn(1, 1, 6, 4)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=bias)
    got = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=causal_mask(3, 6))
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="n_keys"):
        causal_mask(4, 3)


def test_converters_round_trip_and_match_nn_multiheadattention():
    m = causal_mask(4)
    assert torch.equal(from_torch_mask(to_torch_mask(m)), m)
    torch_float = torch.nn.Transformer.generate_square_subsequent_mask(4)  # 0 / -inf
    assert torch.equal(from_torch_mask(torch_float), m)
    with pytest.raises(TypeError, match="bias"):
        from_torch_mask(torch.tensor([[0.0, -2.0]]))
    with pytest.raises(TypeError, match="boolean"):
        to_torch_mask(torch.ones(2, 2))
