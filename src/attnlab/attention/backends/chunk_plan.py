"""What one chunk of query rows needs: its keys, its mask rows, its bias rows, its scores.

:func:`attnlab.attention.chunked_attend` walks the queries ``C`` rows at a time,
in the forward pass and (:mod:`attnlab.attention.backends.chunked_backward`) again in the
backward pass. Both ask a :class:`ChunkPlan` the same questions, so the scores
they build are the same numbers:

* which keys the rows can see. With the causal mask, rows ``c0 .. c1 - 1`` see
  keys ``0 .. S - T + c1 - 1`` (bottom-right alignment); the keys after that
  are left out of the chunk's matmuls altogether, which halves the work of a
  causal call instead of computing scores only to mask them. Schemes that read
  the keys' values (CoPE counts gates over them) always get every key;
* the scheme's term at those rows. A scheme whose bias is a function of the
  distance alone (``by_distance``: ALiBi,
  T5's buckets, KERPLE) is evaluated once per distance for the whole call, a
  table ``[H, T + S - 1]``, and each chunk's ``[H, C, S]`` rows are gathered
  from it: T5's logarithm then runs ``T + S`` times, not ``T * S``. Any other
  scheme, and any scheme at per-row positions (``position_ids``: the distances
  are not those of the indices), is asked for its rows (``q_offset`` = the
  chunk's first position, or the chunk's rows of the position ids);
* the user's boolean ``mask`` and additive ``bias`` rows, and the rows that can
  attend to nothing (they attend everywhere instead and their output is zeroed,
  as :func:`attnlab.attention.attend` does).

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T``
queries, ``S`` keys, ``C`` rows per chunk, ``n`` keys the chunk sees, ``Dh`` head dim.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from attnlab.attention.functional import repeat_kv_heads
from attnlab.encodings.scheme import PositionScheme, bias_dtype, distance_table

__all__ = ["ChunkMask", "ChunkPlan", "Workspace", "grouped_matmul", "grouped_matmul_t", "softmax_rows", "weights_at"]


def grouped_matmul(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a @ b`` where ``b`` has ``Hkv`` heads shared by groups of ``a``'s ``H``: ``[B, H, C, X] x [B, Hkv, X, Y]``.

    Query head ``h`` meets key/value head ``h // (H / Hkv)``. The group's rows are
    stacked, so no ``[B, H, X, Y]`` copy of ``b`` is made. Returns ``[B, H, C, Y]``,
    written into ``out`` (contiguous, that shape) when given.
    """
    B, H, C, X = a.shape
    Hkv, Y = b.shape[1], b.shape[-1]
    if Hkv != H:
        a = a.reshape(B, Hkv, (H // Hkv) * C, X)  # [B, H, C, X] -> [B, Hkv, G * C, X]
    if out is None:
        return (a @ b).view(B, H, C, Y)  # [B, Hkv, G * C, Y] -> [B, H, C, Y]
    torch.matmul(a, b, out=out.view(a.shape[:-1] + (Y,)))
    return out  # [B, H, C, Y]


def grouped_matmul_t(a: Tensor, b: Tensor, *, kv_heads: int) -> Tensor:
    """``a^T @ b`` summed over each group of heads: ``[B, H, C, X]^T x [B, H, C, Y] -> [B, Hkv, X, Y]``.

    The gradient of :func:`grouped_matmul`'s ``b``: each key/value head collects
    the contributions of its ``H / Hkv`` query heads.
    """
    B, H, C, X = a.shape
    if kv_heads == H:
        return a.transpose(-2, -1) @ b  # [B, H, X, C] x [B, H, C, Y] -> [B, H, X, Y]
    a = a.reshape(B, kv_heads, (H // kv_heads) * C, X)  # [B, Hkv, G * C, X]
    b = b.reshape(B, kv_heads, (H // kv_heads) * C, b.shape[-1])  # [B, Hkv, G * C, Y]
    return a.transpose(-2, -1) @ b  # [B, Hkv, X, G * C] x [B, Hkv, G * C, Y] -> [B, Hkv, X, Y]


def _window(t: Tensor | None, *, rows: slice | None, n_keys: int, full_keys: int) -> Tensor | None:
    """The chunk's part of a mask or bias broadcastable to ``[B, H, T, S]``: rows ``rows``, first ``n_keys`` keys."""
    if t is None:
        return None
    if rows is not None and t.dim() >= 2:
        t = t[..., rows, :]  # [.., C, S]
    if t.dim() >= 1 and t.shape[-1] == full_keys and n_keys < full_keys:
        t = t[..., :n_keys]  # [.., C, n]
    return t


@dataclass
class ChunkPlan:
    """How ``chunked_attend`` cuts one call into chunks of query rows (module docstring).

    Attributes:
        position: the scheme (it must be honest about offsets).
        n_heads: ``H``; n_queries: ``T``; n_keys: ``S``.
        q_offset: position of the first query; the keys sit at ``0 .. S - 1``.
        rows: queries per chunk ``C``.
        scale: multiplier of ``q @ k^T``.
        is_causal: the bottom-right causal mask.
        mask: the user's boolean mask (True = may attend), broadcastable to ``[B, H, T, S]``, or None.
        bias: the user's additive term, broadcastable to ``[B, H, T, S]``, or None.
        q_pos: the queries' per-row positions ``[B|1, T]`` (or ``[T]``), replacing ``q_offset``; None: the indices.
        k_pos: the keys' ``[B|1, S]`` (or ``[S]``), with ``q_pos``.
    """

    position: PositionScheme
    n_heads: int
    n_queries: int
    n_keys: int
    q_offset: int
    rows: int
    scale: float
    is_causal: bool
    mask: Tensor | None
    bias: Tensor | None
    q_pos: Tensor | None = None
    k_pos: Tensor | None = None

    @property
    def adds_value(self) -> bool:
        """True when the scheme adds a value term computed from the weights (Shaw's ``w^V``)."""
        return bool(self.position.adds_value)

    @property
    def by_distance(self) -> bool:
        """True when the scheme's term is gathered from a table per distance (module docstring).

        Not at per-row positions: a row's distances are not those of the indices.
        """
        return self.position.by_distance and self.q_pos is None

    def workspace(self, batch: int, dtype: torch.dtype, device: torch.device) -> Workspace:
        """Buffers for the chunks' ``[B, H, C, n]`` tensors, each sized once for the largest chunk."""
        return Workspace(batch * self.n_heads * self.rows * self.n_keys, dtype=dtype, device=device)

    def chunks(self) -> Iterator[tuple[int, int, int]]:
        """``(start, stop, n)`` for each chunk: rows ``start .. stop - 1`` and the first ``n`` keys they can see."""
        T, S = self.n_queries, self.n_keys
        cut_keys = self.is_causal and not self.position.reads_keys
        for start in range(0, T, self.rows):
            stop = min(T, start + self.rows)
            # Under the causal mask the chunk's last row sees keys <= S - T + stop - 1; at least
            # one key is kept so that rows seeing none still follow the empty-row rule.
            yield start, stop, min(S, max(1, S - T + stop)) if cut_keys else S

    def table(self, query: Tensor) -> Tensor | None:
        """The scheme's bias at every distance of the call, ``[H, T + S - 1]``, for a distance scheme; else None."""
        if not self.by_distance:
            return None
        return distance_table(self.position, query, self.n_keys, q_offset=self.q_offset)

    def table_index(self, start: int, stop: int, n: int, device: torch.device) -> Tensor:
        """Where rows ``start .. stop - 1`` and keys ``0 .. n - 1`` read :meth:`table`: ``j - i + T - 1``, flat."""
        keys = torch.arange(n, device=device)
        queries = torch.arange(start, stop, device=device)
        return (keys[None, :] - queries[:, None] + (self.n_queries - 1)).flatten()  # [C, n] -> [C * n]

    def scheme_rows(self, q_c: Tensor, key: Tensor, start: int, n: int, *, table: Tensor | None,
                    out: Tensor | None = None) -> Tensor | None:
        """The scheme's term for the chunk: ``[B|1, H, C, n]`` in :func:`bias_dtype` of ``q_c``, or None.

        Args:
            q_c: the chunk's queries ``[B, H, C, Dh]``.
            key: all the keys ``[B, Hkv, S, Dh]`` (a scheme that reads keys gets them, one per query head).
            start: index of the chunk's first query.
            n: keys the chunk sees.
            table: :meth:`table`, for a distance scheme (None otherwise).
            out: a buffer ``[H, C * n]`` of the table's dtype that a distance scheme's rows are gathered into.
        """
        C = q_c.shape[-2]
        if table is not None:
            index = self.table_index(start, start + C, n, q_c.device)
            if out is None:
                rows = table.index_select(1, index)  # [H, C * n]
            else:
                rows = torch.index_select(table, 1, index, out=out)
            return rows.view(1, table.shape[0], C, n)  # [H, C * n] -> [1, H, C, n]
        keys = repeat_kv_heads(key[..., :n, :], self.n_heads) if self.position.reads_keys else None
        mask = self.mask_rows(start, start + C, n, q_c.device) if self.position.reads_mask else None
        if self.q_pos is not None and self.k_pos is not None:
            return self.position.bias(q_c, n, k=keys, position_ids=self.q_pos[..., start : start + C],
                                      key_position_ids=self.k_pos[..., :n], mask=mask)  # [B|1, H, C, n] or None
        # Without position ids, the call a scheme written before them takes (a mask only if it reads one).
        extra = {"mask": mask} if self.position.reads_mask else {}
        return self.position.bias(q_c, n, q_offset=self.q_offset + start, k_offset=0, k=keys, **extra)

    def value_rows(self, weights: Tensor, start: int) -> Tensor | None:
        """The scheme's value term of a chunk's ``weights [B, H, C, n]`` (rows from ``start``): ``[B, H, C, Dv]``."""
        if self.q_pos is not None and self.k_pos is not None:
            C, n = weights.shape[-2], weights.shape[-1]
            return self.position.value_term(weights, position_ids=self.q_pos[..., start : start + C],
                                            key_position_ids=self.k_pos[..., :n])
        return self.position.value_term(weights, q_offset=self.q_offset + start, k_offset=0)

    def user_rows(self, start: int, stop: int, n: int) -> Tensor | None:
        """The user's ``bias`` at the chunk: broadcastable to ``[B, H, C, n]``, or None."""
        return None if self.bias is None else self.user_rows_of(self.bias, start, stop, n)

    def user_rows_of(self, t: Tensor, start: int, stop: int, n: int) -> Tensor:
        """The chunk's window (a view) of ``t``, shaped like the user's ``bias`` (or its gradient).

        ``t`` broadcasts to ``[B, H, T, S]``; the window to ``[B, H, C, n]``.
        """
        window = _window(t, rows=self._rows(t, start, stop), n_keys=n, full_keys=self.n_keys)
        assert window is not None
        return window

    def _rows(self, t: Tensor | None, start: int, stop: int) -> slice | None:
        """Rows ``start:stop`` when ``t`` has one row per query, None when it broadcasts over the queries."""
        if t is None or t.dim() < 2 or t.shape[-2] != self.n_queries or self.n_queries == 1:
            return None
        return slice(start, stop)

    def mask_rows(self, start: int, stop: int, n: int, device: torch.device, *, first: int = 0) -> Tensor | None:
        """The user's mask and the causal mask at the chunk's keys ``first .. n - 1``.

        Returns:
            Boolean, broadcastable to ``[B, H, C, n - first]``, True = may attend; or None.
        """
        m = _window(self.mask, rows=self._rows(self.mask, start, stop), n_keys=n, full_keys=self.n_keys)
        if m is not None:
            m = m.to(device)[..., first:]
        if self.is_causal:
            # Bottom-right alignment of the whole call: query t sees keys <= S - T + t.
            last = torch.arange(start, stop, device=device) + (self.n_keys - self.n_queries)  # [C]
            causal = torch.arange(first, n, device=device)[None, :] <= last[:, None]  # [C, n - first]
            m = causal if m is None else m & causal
        return m

    def first_masked_key(self, start: int, n: int) -> int:
        """The first of the chunk's keys that some row may not see: every row sees the keys before it.

        With only the causal mask, row ``start`` already sees keys ``0 .. S - T + start``,
        so the mask need only cover the ``[C, C]`` block at the diagonal; with a
        user mask, any key may be hidden (0).
        """
        if self.mask is not None or not self.is_causal:
            return 0
        return min(n, max(0, self.n_keys - self.n_queries + start + 1))

    def scores(self, q_c: Tensor, k_n: Tensor, term: Tensor | None, start: int,
               out: Tensor) -> tuple[Tensor, ChunkMask]:
        """The chunk's scores ``q k^T * scale + term + bias`` and which of them each row may see.

        Args:
            q_c: ``[B, H, C, Dh]`` in the compute dtype.
            k_n: the keys the chunk sees, ``[B, Hkv, n, Dh]``, in the compute dtype.
            term: :meth:`scheme_rows` (without autograd history), or None.
            start: index of the chunk's first query.
            out: where the scores are written, ``[B, H, C, n]`` (a :class:`Workspace` buffer).

        Returns:
            ``scores [B, H, C, n]`` (``out``; not masked: :func:`softmax_rows` and
            :func:`weights_at` take the mask) and the :class:`ChunkMask`.
        """
        stop, n = start + q_c.shape[-2], k_n.shape[-2]
        # The scale on the C x Dh queries rather than the C x n scores: one pass fewer over the chunk.
        scores = grouped_matmul(q_c * self.scale, k_n.transpose(-2, -1), out=out)  # [B, H, C, n]
        if term is not None:
            scores += term.to(scores.dtype)
        user = self.user_rows(start, stop, n)
        if user is not None:
            scores += user.to(device=scores.device, dtype=scores.dtype)
        first = self.first_masked_key(start, n)
        keep = self.mask_rows(start, stop, n, scores.device, first=first)
        empty = None
        if keep is not None and first == 0:  # with first > 0 every row sees a key
            empty = ~keep.any(dim=-1, keepdim=True)  # [B|1, H|1, C, 1]
            # As attend: asking whether a row is empty is free on the CPU and a device sync elsewhere.
            if scores.device.type == "cpu" and not bool(empty.any()):
                empty = None
            else:
                keep = keep | empty  # an empty row attends everywhere; its output is zeroed by the caller
        return scores, ChunkMask(keep, first, empty)


class ChunkMask(NamedTuple):
    """Which of a chunk's scores ``[B, H, C, n]`` each row may see.

    Attributes:
        keep: boolean, broadcastable to ``[B, H, C, n - first]``: True = may attend,
            for keys ``first ..``; the keys before ``first`` are seen by every row. None: no mask.
        first: the first key ``keep`` covers.
        empty: ``[B|1, H|1, C, 1]``, True where a row may attend to nothing (it is let
            see every key instead, and the caller zeroes its output); None when no row is empty.
    """

    keep: Tensor | None
    first: int
    empty: Tensor | None

    def hide(self, t: Tensor, value: float) -> None:
        """Set ``t [B, H, C, n]`` to ``value`` where a row may not attend, in place."""
        if self.keep is not None:
            t[..., self.first :].masked_fill_(~self.keep, value)


class Workspace:
    """Flat buffers reused by every chunk of one call, one per name.

    The chunks' ``[B, H, C, n]`` tensors differ in size from chunk to chunk (``n``
    grows under the causal mask). Allocated afresh each time, they fragmented
    glibc's heap: the peak memory of one call varied fourfold from run to run.
    Views of buffers allocated once do not.
    """

    def __init__(self, numel: int, *, dtype: torch.dtype, device: torch.device) -> None:
        self.numel, self.dtype, self.device = numel, dtype, device
        self._flat: dict[str, Tensor] = {}

    def get(self, name: str, *shape: int, dtype: torch.dtype | None = None) -> Tensor:
        """A contiguous tensor of ``shape`` over buffer ``name`` (its contents are whatever was left there)."""
        dtype = self.dtype if dtype is None else dtype
        flat = self._flat.get(name)
        if flat is None or flat.dtype != dtype:
            flat = self._flat[name] = torch.empty(self.numel, dtype=dtype, device=self.device)
        return flat[: math.prod(shape)].view(shape)


def _underflow(dtype: torch.dtype) -> float:
    """The log of the smallest normal number of ``dtype``, plus one: ``exp`` below it is not worth computing.

    ``exp`` of a very negative number is subnormal or zero, and the vectorised
    CPU ``exp`` takes a slow path for those, 10-30x slower than for ordinary
    inputs (ALiBi's scores far from the diagonal are thousands below the row's
    maximum). Such a weight is below ``1e-34`` of its row's largest (float32),
    so it is computed as ``exp`` of this bound instead: a change far below the
    dtype's rounding of the row's sum, and never for a masked key (those are zeroed).
    """
    return math.log(torch.finfo(dtype).tiny) + 1.0


def softmax_rows(scores: Tensor, mask: ChunkMask) -> tuple[Tensor, Tensor]:
    """Softmax over the last dim, in place of ``scores``, and the log of each row's denominator.

    Args:
        scores: ``[B, H, C, n]``, overwritten by the weights.
        mask: which scores each row may see (every row sees at least one).

    Returns:
        ``weights [B, H, C, n]`` (the same storage; exactly 0 where masked) and ``lse [B, H, C, 1]``.
    """
    mask.hide(scores, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)  # [B, H, C, 1], finite: every row sees a key
    weights = scores.sub_(row_max).clamp_(min=_underflow(scores.dtype)).exp_()
    mask.hide(weights, 0.0)
    total = weights.sum(dim=-1, keepdim=True)  # [B, H, C, 1], >= 1
    return weights.div_(total), row_max + total.log()


def weights_at(scores: Tensor, lse: Tensor, mask: ChunkMask) -> Tensor:
    """The weights again from the scores and :func:`softmax_rows`'s ``lse [B, H, C, 1]``, in place of ``scores``."""
    weights = scores.sub_(lse).clamp_(min=_underflow(scores.dtype)).exp_()  # [B, H, C, n]
    mask.hide(weights, 0.0)
    return weights


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of scores and softmax: float32 for half-precision inputs (as the dense path), else the input's."""
    return bias_dtype(dtype)


def default_scale(head_dim: int, scale: float | None) -> float:
    """``scale``, or ``1 / sqrt(Dh)``."""
    return 1.0 / math.sqrt(head_dim) if scale is None else scale
