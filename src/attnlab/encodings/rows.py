"""A scheme's primitives at per-row positions: called once for the batch, or once per row.

The built-in schemes evaluate their primitives at positions of every row at once
(``q_pos [B, T]``, ``k_pos [B, S]``, distances ``rel [B, T, S]``) and declare it
(:attr:`~attnlab.encodings.PositionScheme.batched_positions`). A scheme written for
one sequence's positions (``[T]``, ``[S]``, ``[T, S]``: a user's own, written before
positions could come from the data) keeps working: these helpers call its
primitive once per row, with that row's 1-d positions and its slice of the batch,
and concatenate the rows. The result is the same; it costs ``B`` calls instead of one.

With 1-d positions (the default, and positions shared by the batch) every helper
is the primitive itself, called once.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

__all__ = ["bias_rel_rows", "bias_rows", "rotate_rows", "value_rel_rows", "value_rows"]


class _Primitives(Protocol):
    """What these helpers call: a :class:`~attnlab.encodings.PositionScheme`'s primitives and two declarations."""

    batched_positions: bool
    reads_mask: bool

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]: ...
    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor | None: ...
    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None: ...
    def value_term_at(self, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None: ...
    def value_term_rel(self, weights: Tensor, *, rel: Tensor) -> Tensor | None: ...


def _per_row(*pairs: tuple[Tensor, int]) -> int:
    """How many rows the positions have (0: none is per row); each pair is (tensor, its dims when not per row)."""
    return max((t.shape[0] for t, ndim in pairs if t.ndim > ndim), default=0)


def _row(t: Tensor | None, b: int, *, ndim: int = 4) -> Tensor | None:
    """Row ``b`` of a batch-first ``ndim``-d tensor, batch dim kept (``[1, ...]``); batch 1 or fewer dims serve all."""
    if t is None or t.ndim < ndim or t.shape[0] == 1:
        return t
    return t[b : b + 1]


def _pos(t: Tensor, b: int, ndim: int) -> Tensor:
    """Row ``b`` of per-row positions or distances (``ndim + 1`` dims), unbatched; shared ones as they are."""
    if t.ndim == ndim:
        return t
    return t[0] if t.shape[0] == 1 else t[b]


def _stack(terms: list[Tensor | None]) -> Tensor | None:
    """Per-row terms, each broadcastable to ``[1, H, T, X]``, as one ``[B, H|1, T, X]`` (None when every one is)."""
    real = [t for t in terms if t is not None]
    if not real:
        return None
    full = [t if t is not None else torch.zeros_like(real[0]) for t in terms]
    full = [t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) for t in full]  # each [1|.., H|1, T|1, X|1]
    return torch.cat(torch.broadcast_tensors(*full), dim=0)  # [B, H|1, T, X]


def rotate_rows(scheme: _Primitives, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """``scheme.rotate_at`` of ``q [B, H, T, Dh]``, ``k [B, H, S, Dh]`` at ``q_pos [T]|[B, T]``, ``k_pos [S]|[B, S]``.

    Returns the rotated ``(q, k)``.
    """
    n = 0 if scheme.batched_positions else _per_row((q_pos, 1), (k_pos, 1))
    if not n:
        return scheme.rotate_at(q, k, q_pos=q_pos, k_pos=k_pos)
    pairs = []
    for b in range(n):
        q_b, k_b = _row(q, b), _row(k, b)
        assert q_b is not None and k_b is not None
        pairs.append(scheme.rotate_at(q_b, k_b, q_pos=_pos(q_pos, b, 1), k_pos=_pos(k_pos, b, 1)))
    return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])  # [B, H, T, Dh], [B, H, S, Dh]


def bias_rows(scheme: _Primitives, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None,
              mask: Tensor | None = None) -> Tensor | None:
    """``scheme.bias_at`` of ``q [B, H, T, Dh]`` at ``q_pos [T]|[B, T]``, ``k_pos [S]|[B, S]``: ``[B|1, H|1, T, S]``.

    ``k [B, H, S, Dh]`` is passed on as the primitive takes it; ``mask`` (boolean, broadcastable
    to ``[B, H, T, S]``) only to a scheme that declares ``reads_mask``.
    """
    extra = {"mask": mask} if scheme.reads_mask else {}
    n = 0 if scheme.batched_positions else _per_row((q_pos, 1), (k_pos, 1))
    if not n:
        return scheme.bias_at(q, q_pos=q_pos, k_pos=k_pos, k=k, **extra)
    terms = []
    for b in range(n):
        q_b = _row(q, b)
        assert q_b is not None
        row_extra = {"mask": _row(mask, b)} if scheme.reads_mask else {}
        terms.append(scheme.bias_at(q_b, q_pos=_pos(q_pos, b, 1), k_pos=_pos(k_pos, b, 1), k=_row(k, b), **row_extra))
    return _stack(terms)


def bias_rel_rows(scheme: _Primitives, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None:
    """``scheme.bias_rel`` of ``q [B, H, T, Dh]`` at distances ``rel [T, S]|[B, T, S]``: ``[B|1, H|1, T, S]``."""
    n = 0 if scheme.batched_positions else _per_row((rel, 2))
    if not n:
        return scheme.bias_rel(q, rel=rel, k=k)
    terms = []
    for b in range(n):
        q_b = _row(q, b)
        assert q_b is not None
        terms.append(scheme.bias_rel(q_b, rel=_pos(rel, b, 2), k=_row(k, b)))
    return _stack(terms)


def value_rows(scheme: _Primitives, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
    """``scheme.value_term_at`` of ``weights [B, H, T, S]`` at per-row or shared positions: ``[B, H, T, Dh]``."""
    n = 0 if scheme.batched_positions else _per_row((q_pos, 1), (k_pos, 1))
    if not n:
        return scheme.value_term_at(weights, q_pos=q_pos, k_pos=k_pos)
    terms = []
    for b in range(n):
        w_b = _row(weights, b)
        assert w_b is not None
        terms.append(scheme.value_term_at(w_b, q_pos=_pos(q_pos, b, 1), k_pos=_pos(k_pos, b, 1)))
    return _stack(terms)


def value_rel_rows(scheme: _Primitives, weights: Tensor, *, rel: Tensor) -> Tensor | None:
    """``scheme.value_term_rel`` of ``weights [B, H, T, S]`` at distances ``rel [T, S]|[B, T, S]``.

    Returns ``[B, H, T, Dh]`` or None.
    """
    n = 0 if scheme.batched_positions else _per_row((rel, 2))
    if not n:
        return scheme.value_term_rel(weights, rel=rel)
    terms = []
    for b in range(n):
        w_b = _row(weights, b)
        assert w_b is not None
        terms.append(scheme.value_term_rel(w_b, rel=_pos(rel, b, 2)))
    return _stack(terms)
