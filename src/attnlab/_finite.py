"""Scores that cannot overflow: queries and keys brought within range before ``q . k`` is formed.

With large inputs (entries of 1e30 in float32) ``q . k`` overflows: ``+inf`` and
``-inf`` meet in one dot product, the score is NaN before any positional term is
added, and so is every weight of its row (torch's fused kernel without a term
answers zeros for such rows on the CPU, so ALiBi, T5, FIRE or KERPLE gave NaN
where no term gave a finite output). A NaN cannot be clamped away afterwards; the
one place to act is before the product.

:func:`bounded_pair` scales ``q`` and ``k`` down, one factor per tensor, just enough
that ``|q . k| * |scale| <= finfo.max / 4`` for every pair (``|q . k| <= Dh * max|q|
* max|k|``), leaving room for a term. Short of ~1e18 in float32 the factor is
exactly 1. Past it the scores were beyond what float resolves anyway: the softmax
is the one-hot of the largest (or a tie) before and after.

Standard library and torch only (a ground-floor module): attention and CoPE's gates use it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["bounded_pair", "score_limit"]

# A quarter of the range for the scores, so that a term of the same size added to them stays finite too.
_HEADROOM = 4.0


def score_limit(dtype: torch.dtype) -> float:
    """The largest ``|q . k * scale|`` :func:`bounded_pair` lets through, for scores computed in ``dtype``.

    Example:
        >>> score_limit(torch.float32) == torch.finfo(torch.float32).max / 4
        True
    """
    return torch.finfo(dtype).max / _HEADROOM


def _factor(x: Tensor, bound: float, compute: torch.dtype) -> Tensor | None:
    """The factor ``<= 1`` that brings ``max|x|`` to at most ``bound`` (a 0-d tensor), or None where 1 will do.

    A non-finite ``x`` (a NaN or inf entry) keeps the factor 1: those entries make their own rows
    non-finite, as they do without a term, and must not shrink every other row to nothing.
    On the CPU, asking whether the factor is 1 is free; elsewhere it would sync the device (and in
    traced code break the graph), so the factor is applied whatever it is (multiplying by exactly 1
    changes nothing).
    """
    if x.numel() == 0:
        return None
    largest = x.detach().abs().amax().to(compute)  # 0-d
    # Traced (torch.compile, torch.export), reading the value back would break the graph: the factor is applied.
    read = x.device.type == "cpu" and not torch.compiler.is_compiling()
    if read and not largest > bound:
        # The condition of the torch.where below, read at once (a NaN compares False): where it is False the
        # factor is 1, found with 2 operators instead of 7 (every attention with a term asks, every step).
        return None
    factor = torch.where(torch.isfinite(largest) & (largest > bound), bound / largest, 1.0)
    if read and bool(factor == 1.0):
        return None
    return factor.to(x.dtype)


def bounded_pair(query: Tensor, key: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """``query`` and ``key`` scaled down where needed so that no score ``q . k * scale`` can overflow.

    Args:
        query: ``[..., T, Dh]``.
        key: ``[..., S, Dh]``.
        scale: the multiplier of ``q . k`` (finite).

    Returns:
        ``(query, key)``, each the input itself, or the input times one factor in ``(0, 1)``
        (detached: the gradient is the factor times the incoming one), such that
        ``Dh * max|q| * max|k| * |scale| <= finfo(dtype).max / 4`` with ``dtype`` float32 for
        half-precision inputs (their scores are computed in float32).

    Example:
        >>> q = torch.full((1, 2), 1e30)
        >>> bool(torch.isfinite(q @ q.T).all())
        False
        >>> qb, kb = bounded_pair(q, q, 1.0)
        >>> bool(torch.isfinite(qb @ kb.T).all())
        True
    """
    width = query.shape[-1]
    if width == 0 or scale == 0.0:
        return query, key
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    # |q_i| <= r and |k_j| <= r for every entry gives |q . k * scale| <= Dh * r * r * |scale| = limit.
    r = math.sqrt(score_limit(compute) / width / abs(scale))
    r = min(r, torch.finfo(compute).max)
    fq, fk = _factor(query, r, compute), _factor(key, r, compute)
    return (query if fq is None else query * fq), (key if fk is None else key * fk)
