"""Scoring functions: the attention lab's numbers, parity with attend() and float64 formulas, masks, RNG."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import attend
from attnlab.attention.scoring import (
    AdditiveScore,
    GeneralScore,
    alphas_from_scores,
    context_vector,
    dot_product_variance,
    dot_scores,
    scaled_dot_scores,
    uniform_scores,
)

# The attention lab, "Visualizing the Context": one query, three keys (the values are the keys).
Q = torch.tensor([0.55, 0.95]).view(1, 1, 2)  # [B, T, D]
K = torch.tensor([[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75]]).view(1, 3, 2)  # [B, S, D]


def close(actual, expected, atol=1e-4):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# -- the attention lab's golden numbers ---------------------------------------------


def test_attention_lab_dot_products_softmax_and_context():
    products = dot_scores(Q, K)
    close(products, [[[0.5475, 0.0875, -1.2350]]])
    alphas = alphas_from_scores(products)
    close(alphas, [[[0.5557, 0.3508, 0.0935]]])
    close(context_vector(alphas, K), [[[0.5706, -0.0993]]])


def test_attention_lab_softmax_saturates_when_scores_grow():
    close(alphas_from_scores(torch.tensor([4.0, 1.0])), [0.9526, 0.0474])
    close(alphas_from_scores(100 * torch.tensor([4.0, 1.0])), [1.0, 0.0])


def test_attention_lab_encoder_decoder_walkthrough():
    # The GRU's hidden states as keys/values and the decoder's hidden state as query (printed to 4 dp).
    keys = torch.tensor([[[0.0832, -0.0356], [0.3105, -0.5263]]])
    query = torch.tensor([[[0.3913, -0.6853]]])
    close(context_vector(alphas_from_scores(uniform_scores(query, keys)), keys), [[[0.1968, -0.2809]]])
    close(dot_scores(query, keys), [[[0.0569, 0.4821]]])
    close(alphas_from_scores(dot_scores(query, keys)), [[[0.3953, 0.6047]]])
    close(scaled_dot_scores(query, keys), [[[0.0403, 0.3409]]])
    alphas = alphas_from_scores(scaled_dot_scores(query, keys))
    close(alphas, [[[0.4254, 0.5746]]])
    close(context_vector(alphas, keys), [[[0.2138, -0.3175]]], atol=2e-4)  # from rounded inputs


# -- shapes, references --------------------------------------------------------------


def test_uniform_scores_average_the_values():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)  # widths may differ: only shapes matter
    scores = uniform_scores(q, k)
    assert scores.shape == (2, 3, 5) and scores.dtype == q.dtype
    alphas = alphas_from_scores(scores)
    close(alphas, torch.full((2, 3, 5), 1 / 5))
    v = torch.randn(2, 5, 7)
    close(context_vector(alphas, v), v.mean(dim=1, keepdim=True).expand(2, 3, 7), atol=1e-6)


def test_scaled_dot_scores_match_attend_weights():
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 5)
    mask = torch.rand(3, 4, 6) > 0.3
    mask[..., 0] = True
    out, weights = attend(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), mask=mask.unsqueeze(1),
                          need_weights=True)  # [B, 1, T, S]
    alphas = alphas_from_scores(scaled_dot_scores(q, k), mask)
    close(alphas, weights[:, 0], atol=1e-6)
    close(context_vector(alphas, v), out[:, 0], atol=1e-5)
    close(scaled_dot_scores(q, k), dot_scores(q, k) / math.sqrt(8), atol=1e-6)


def test_dot_scores_against_float64_formula():
    q, k = torch.randn(2, 3, 5, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    expected = torch.einsum("btd,bsd->bts", q, k)
    torch.testing.assert_close(dot_scores(q, k), expected)


def test_additive_score_against_float64_formula():
    score = AdditiveScore(query_dim=3, key_dim=5, hidden_dim=7).double()
    q, k = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 6, 5, dtype=torch.float64)
    Wq, Wk, v = score.linear_query.weight, score.linear_key.weight, score.v.weight[0]  # [7, 3], [7, 5], [7]
    expected = torch.empty(2, 4, 6, dtype=torch.float64)
    for b in range(2):
        for t in range(4):
            for s in range(6):
                expected[b, t, s] = v @ torch.tanh(Wq @ q[b, t] + Wk @ k[b, s])
    out = score(q, k)
    assert out.shape == (2, 4, 6)
    torch.testing.assert_close(out, expected)
    assert sorted(n for n, _ in score.named_parameters()) == ["linear_key.weight", "linear_query.weight",
                                                               "v.weight"]


def test_general_score_against_float64_formula():
    score = GeneralScore(query_dim=3, key_dim=5).double()
    q, k = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 6, 5, dtype=torch.float64)
    W = score.linear.weight  # [Dq, Dk]
    assert W.shape == (3, 5)
    expected = torch.stack([q[b] @ W @ k[b].T for b in range(2)])  # [B, T, S]
    torch.testing.assert_close(score(q, k), expected)


def test_general_score_with_identity_is_the_dot_product():
    score = GeneralScore(4, 4)
    with torch.no_grad():
        score.linear.weight.copy_(torch.eye(4))
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    close(score(q, k), dot_scores(q, k), atol=1e-6)


def test_score_modules_have_gradients():
    q, k = torch.randn(2, 3, 4, requires_grad=True), torch.randn(2, 5, 6)
    for module in (AdditiveScore(4, 6, 8), GeneralScore(4, 6)):
        module(q, k).sum().backward()
        assert all(p.grad is not None for p in module.parameters())
    assert q.grad is not None


# -- masking -------------------------------------------------------------------------


def test_masked_keys_get_zero_weight_and_rows_sum_to_one():
    scores = torch.randn(2, 3, 4)
    mask = torch.tensor([True, False, True, False]).view(1, 1, 4)  # padding: [B|1, 1, S]
    alphas = alphas_from_scores(scores, mask)
    assert (alphas[..., 1] == 0).all() and (alphas[..., 3] == 0).all()
    close(alphas.sum(-1), torch.ones(2, 3), atol=1e-6)
    close(alphas[..., [0, 2]], F.softmax(scores[..., [0, 2]], dim=-1), atol=1e-6)


def test_causal_mask_broadcasts_from_t_by_s():
    scores = torch.randn(2, 3, 3)
    alphas = alphas_from_scores(scores, torch.ones(3, 3, dtype=torch.bool).tril())
    assert (alphas.triu(1) == 0).all()
    close(alphas[:, 0, 0], torch.ones(2))


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    scores = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of sequence 0 may attend to nothing
    alphas = alphas_from_scores(scores, mask)
    assert torch.isfinite(alphas).all()
    assert (alphas[0, 1] == 0).all()
    close(alphas[0, 0].sum(), 1.0, atol=1e-6)
    (alphas * torch.randn(2, 3, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[0, 1] == 0).all()


def test_half_precision_scores_are_softmaxed_in_float32():
    scores = torch.tensor([[[10.0, 0.0, -5.0]]], dtype=torch.float16)
    alphas = alphas_from_scores(scores, torch.tensor([True, True, False]))
    assert alphas.dtype == torch.float16
    close(alphas.float(), F.softmax(torch.tensor([[[10.0, 0.0, float("-inf")]]]), -1), atol=1e-3)


# -- the variance demonstration ------------------------------------------------------


def test_dot_product_variance_is_about_the_width():
    assert dot_product_variance(10) == pytest.approx(10, rel=0.1)
    for d in (1, 4, 16, 64):
        assert dot_product_variance(d) / d == pytest.approx(1.0, rel=0.1), d


def test_dot_product_variance_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    first = dot_product_variance(8, 2000)
    assert dot_product_variance(8, 2000) == first  # its own seeded generator: reproducible
    gen = torch.Generator().manual_seed(5)
    value = dot_product_variance(8, 2000, generator=gen)
    assert value != first and value == pytest.approx(8, rel=0.2)
    assert torch.equal(torch.get_rng_state(), state)
    assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(5).get_state())  # it drew from gen


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc", "word"),
    [
        (lambda: dot_scores(torch.randn(1, 2, 3), torch.randn(1, 2, 4)), ValueError, "width"),
        (lambda: dot_scores(torch.randn(2, 3), torch.randn(1, 2, 3)), ValueError, "query"),
        (lambda: dot_scores(torch.randn(1, 2, 3), [[1.0]]), TypeError, "keys"),
        (lambda: dot_scores(torch.randn(2, 2, 3), torch.randn(1, 2, 3)), ValueError, "batch"),
        (lambda: scaled_dot_scores(torch.ones(1, 2, 3, dtype=torch.long), torch.randn(1, 2, 3)), TypeError,
         "query"),
        (lambda: uniform_scores(torch.randn(1, 2, 3), torch.randn(1, 2)), ValueError, "keys"),
        (lambda: alphas_from_scores(torch.randn(2, 3), torch.ones(2, 3)), TypeError, "mask"),
        (lambda: alphas_from_scores(torch.randn(2, 3), torch.ones(4, 3, dtype=torch.bool)), ValueError,
         "mask"),
        (lambda: alphas_from_scores([1.0, 2.0]), TypeError, "scores"),
        (lambda: context_vector(torch.rand(1, 2, 3), torch.randn(1, 4, 5)), ValueError, "alphas"),
        (lambda: context_vector(torch.rand(1, 2, 3), torch.randn(3, 5)), ValueError, "values"),
        (lambda: AdditiveScore(0, 2, 2), ValueError, "query_dim"),
        (lambda: AdditiveScore(2, 2, 2.5), TypeError, "hidden_dim"),
        (lambda: GeneralScore(2, -1), ValueError, "key_dim"),
        (lambda: GeneralScore(2, 3)(torch.randn(1, 2, 3), torch.randn(1, 2, 3)), ValueError, "query"),
        (lambda: AdditiveScore(2, 3, 4)(torch.randn(1, 2, 2), torch.randn(1, 2, 2)), ValueError, "keys"),
        (lambda: dot_product_variance(0), ValueError, "d"),
        (lambda: dot_product_variance(3, 1), ValueError, "n"),
        (lambda: dot_product_variance(3.0), TypeError, "d"),
        (lambda: dot_product_variance(3, generator=13), TypeError, "generator"),
    ],
)
def test_bad_input_names_the_argument(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
