"""The chunked path's single-pass operations, each against the plain torch computation it replaces.

Golden values: ``index_select`` / ``index_add_`` by the distance index ``j - i + T - 1``
(the gather the chunked path used before), ``torch.softmax``, and the rule of
``backend="auto"`` computed from its stated formula (bytes of ``[B, H, T, S]``
against the budget, scores per head against the crossover).
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention.backends.choose import (
    DENSE_MEMORY_BUDGET,
    DENSE_SCORES,
    DENSE_SCORES_THREADED,
    choose_backend,
    dense_bytes,
    dense_fits,
)
from attnlab.attention.backends.chunk_kernels import (
    ChunkMask,
    causal_table,
    hankel_add_,
    hankel_rows,
    softmax_rows,
    weights_at,
)
from attnlab.encodings import T5RelativeBias


def gathered(table, T, start, stop, n):
    """The chunk's rows read by index, in their own order: ``[H, C, n]``."""
    index = (torch.arange(n)[None, :] - torch.arange(start, stop)[:, None] + T - 1).flatten()
    return table.index_select(1, index).view(table.shape[0], stop - start, n)


@pytest.mark.parametrize("T,S,start,stop,n", [(16, 16, 0, 4, 4), (16, 16, 12, 16, 16), (5, 13, 2, 5, 13),
                                              (9, 7, 3, 9, 7), (1, 1, 0, 1, 1)])
def test_the_strided_view_of_the_table_equals_the_gathered_rows_exactly(T, S, start, stop, n):
    table = torch.randn(3, T + S - 1, dtype=torch.float64)
    view = hankel_rows(table, first=T - stop, rows=stop - start, n=n)[0]  # [H, C, n], rows last to first
    assert view.data_ptr() == table[:, T - stop :].data_ptr()  # a view: nothing copied
    assert torch.equal(view.flip(-2), gathered(table, T, start, stop, n))


def test_the_strided_view_refuses_rows_outside_the_table_and_a_transposed_table():
    table = torch.randn(2, 9)
    with pytest.raises(ValueError, match="outside the table"):
        hankel_rows(table, first=3, rows=4, n=4)
    with pytest.raises(ValueError, match="contiguous along the distances"):
        hankel_rows(torch.randn(9, 2).t(), first=0, rows=2, n=2)


@pytest.mark.parametrize("C,n", [(4, 10), (1, 5), (6, 6)])
def test_the_table_gradient_along_anti_diagonals_equals_index_add(C, n):
    T = S = 12
    start, stop = 12 - C, 12
    g = torch.Generator().manual_seed(C * n)
    values = torch.randint(-50, 50, (3, C, n), generator=g).double()  # integers: sums exact in any order
    got = torch.zeros(3, T + S - 1, dtype=torch.float64)
    hankel_add_(got, values, first=T - stop)
    want = torch.zeros_like(got)
    index = (torch.arange(n)[None, :] - torch.arange(start, stop)[:, None] + T - 1).flatten()
    want.index_add_(1, index, values.flip(1).flatten(1))  # values' rows run last to first
    assert torch.equal(got, want)
    scratch = torch.full((3 * C * (n + C - 1) + 7,), float("nan"), dtype=torch.float64)  # stale contents
    again = torch.zeros_like(got)
    hankel_add_(again, values, first=T - stop, scratch=scratch)
    assert torch.equal(again, want)


def test_the_causal_table_masks_the_future_and_floors_only_when_every_weight_stays_normal():
    T = S = 64
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64)
    distance = torch.arange(T + S - 1, dtype=torch.float64) - (T - 1)  # j - i
    table = -slopes[:, None] * distance.abs()  # [H, T + S - 1], ALiBi's shape
    out, floored = causal_table(table, n_keys=S, bound=2.0)
    assert floored
    assert torch.isinf(out[:, S:]).all() and (out[:, S:] < 0).all()  # past the diagonal: masked
    margin = -math.log(torch.finfo(torch.float64).eps) + 10.0
    floor = -2.0 * 2.0 - margin  # the diagonal's entry is 0
    torch.testing.assert_close(out[:, :S], table[:, :S].clamp(min=floor), rtol=0, atol=0)
    assert torch.equal(table, -slopes[:, None] * distance.abs())  # the input is left as it was
    out32, floored32 = causal_table(table.float(), n_keys=S, bound=20.0)  # 4 * 20 + 26 > 87 - log(64)
    assert not floored32
    assert torch.equal(out32[:, :S], table[:, :S].float())


def test_softmax_rows_leaves_no_subnormal_weight_and_equals_torch_softmax():
    """ALiBi-like scores thousands below the row's maximum: weights 0 (masked) or normal numbers."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 2, 8, 4000, generator=g) - torch.arange(4000.0) * 2.0  # down to -8000
    keep = torch.rand(8, 100, generator=g) > 0.5
    keep[:, 0] = True
    mask = ChunkMask(keep, 3900, None)
    want = scores.clone()
    want[..., 3900:].masked_fill_(~keep, float("-inf"))
    want = torch.softmax(want.double(), dim=-1)
    weights, lse = softmax_rows(scores.clone(), mask, want_lse=True)
    tiny = torch.finfo(torch.float32).tiny
    assert bool(((weights == 0) | (weights >= tiny)).all())
    assert bool((weights[..., 3900:].masked_select(~keep.expand(1, 2, 8, 100)) == 0).all())
    torch.testing.assert_close(weights.double(), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores.double().masked_fill(
        torch.nn.functional.pad(~keep, (3900, 0)), float("-inf")), dim=-1, keepdim=True), rtol=0, atol=1e-4)
    again = weights_at(scores.clone() - lse, mask)  # the backward pass's recomputation
    assert bool(((again == 0) | (again >= tiny)).all())
    torch.testing.assert_close(again.double(), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_the_auto_rule_is_the_stated_byte_budget_and_crossover(threads):
    f32 = torch.float32
    assert dense_bytes(batch=4, heads=8, T=2048, S=2048, dtype=f32) == 4 * 8 * 2048 * 2048 * 4
    assert dense_bytes(batch=1, heads=8, T=100, S=100, dtype=torch.bfloat16) == 8 * 100 * 100 * 4  # float32 scores
    crossover = DENSE_SCORES if threads == 1 else DENSE_SCORES_THREADED
    cases = [(1, 8, 256, 256), (4, 8, 256, 256), (1, 8, 512, 512), (4, 8, 2048, 2048), (16, 8, 2048, 2048),
             (8192, 8, 256, 256), (1, 1, 300, 200), (1, 8, 4096, 4096)]
    picked = []
    for batch, heads, T, S in cases:
        stated = T * S <= crossover and batch * heads * T * S * 4 <= DENSE_MEMORY_BUDGET
        assert dense_fits(batch=batch, heads=heads, T=T, S=S, dtype=f32, threads=threads) == stated
        kw = {"need_weights": False, "backward": False, "dropout_p": 0.0, "flex_mask_ok": True}
        path = choose_backend("auto", position=T5RelativeBias(heads), T=T, S=S, device=torch.device("cpu"),
                              batch=batch, heads=heads, dtype=f32, threads=threads, **kw)
        assert path == ("dense" if stated else "chunked")
        picked.append(path)
    assert {"dense", "chunked"} <= set(picked)  # both sides of the rule are exercised
    # The budget is an argument, not the machine's free memory: the same call, two budgets.
    assert dense_fits(batch=4, heads=8, T=128, S=128, dtype=f32, threads=threads, memory_budget=2**21)
    assert not dense_fits(batch=4, heads=8, T=128, S=128, dtype=f32, threads=threads, memory_budget=2**21 - 1)
    with pytest.raises(ValueError, match="memory_budget"):
        dense_fits(batch=1, heads=1, T=1, S=1, dtype=f32, memory_budget=-1)
    with pytest.raises(ValueError, match="threads"):
        dense_fits(batch=1, heads=1, T=1, S=1, dtype=f32, threads=0)


def test_the_issues_case_is_dense_on_two_threads_and_chunked_past_the_crossover():
    """Issue 29: B=4, H=8, L=2048 on two threads took 16 s chunked against 1.5 s dense."""
    kw = {"need_weights": False, "backward": True, "dropout_p": 0.0, "flex_mask_ok": True, "batch": 4, "heads": 8}
    cpu = torch.device("cpu")
    assert choose_backend("auto", position=T5RelativeBias(8), T=2048, S=2048, device=cpu, threads=2, **kw) == "dense"
    assert choose_backend("auto", position=T5RelativeBias(8), T=2048, S=2048, device=cpu, threads=1, **kw) == "chunked"
    assert choose_backend("auto", position=T5RelativeBias(8), T=4096, S=4096, device=cpu, threads=2, **kw) == "chunked"
