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
  distance alone (``by_distance``: ALiBi, T5's buckets, KERPLE) is evaluated once
  per distance for the whole call, a table ``[H, T + S - 1]``: T5's logarithm then
  runs ``T + S`` times, not ``T * S``. Row ``i``, key ``j`` reads entry
  ``j - i + T - 1``. Taken last row first (``c = stop - 1 - i``), that is
  ``T - stop + c + j``: both strides +1, so the chunk's ``[H, C, n]`` rows are a
  strided view of the table (:func:`~.chunk_kernels.hankel_rows`) copied straight
  into the scores buffer, with no gather by a ``[C * n]`` index building a
  tensor to add (torch has no negative strides, so rows in their own order could
  not be a view). Such a chunk's queries, mask rows, outputs and gradients are
  flipped (``[C, Dh]`` tensors, small) by :meth:`ChunkPlan.rows_of` and
  :meth:`ChunkPlan.put_rows`. Any other scheme, and any scheme at per-row
  positions (``position_ids``: the distances are not those of the indices), is
  asked for its rows (``q_offset`` = the chunk's first position, or the chunk's
  rows of the position ids), in their own order;
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

import torch
from torch import Tensor

from attnlab.attention.backends.chunk_kernels import (
    ChunkMask,
    Workspace,
    causal_table,
    grouped_addmm_,
    hankel_add_,
    hankel_rows,
)
from attnlab.attention.functional import repeat_kv_heads
from attnlab.encodings.scheme import PositionScheme, bias_dtype, distance_table

__all__ = ["ChunkPlan", "compute_dtype", "default_scale"]


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
    reverse: bool = True
    table_masks: bool = False  # set by score_table: the table carries the causal mask
    floored: bool = False  # set by score_table: the table keeps every weight a normal number

    @property
    def reversed_rows(self) -> bool:
        """True when each chunk's rows run last to first (module docstring): a distance scheme's rows as a view.

        Only for a scheme read from its table alone (no value term, keys or mask read),
        and only where the plan's user asked for it (``reverse``; the dropout path does not).
        """
        p = self.position
        return self.reverse and self.by_distance and not (p.adds_value or p.reads_keys or p.reads_mask)

    def rows_of(self, t: Tensor, start: int, stop: int) -> Tensor:
        """Rows ``start .. stop - 1`` of ``t [.., T, X]`` in the chunk's order (reversed: a copy; else a view)."""
        rows = t[..., start:stop, :]
        return rows.flip(-2) if self.reversed_rows else rows

    def put_rows(self, target: Tensor, start: int, stop: int, rows: Tensor) -> None:
        """Write a chunk's ``rows [.., C, X]`` (in the chunk's order) into rows ``start .. stop - 1``
        of ``target [.., T, X]``."""
        target[..., start:stop, :] = rows.flip(-2) if self.reversed_rows else rows

    @property
    def adds_value(self) -> bool:
        """True when the scheme adds a value term computed from the weights (Shaw's ``w^V``)."""
        return bool(self.position.adds_value)

    @property
    def by_distance(self) -> bool:
        """True when the scheme's term is read from a table per distance (module docstring).

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
        # Contiguous along the distances (T5's comes transposed): read as a strided view.
        return distance_table(self.position, query, self.n_keys, q_offset=self.q_offset).contiguous()

    def score_table(self, table: Tensor, query: Tensor, key: Tensor) -> Tensor:
        """The table the chunks' scores read (no history): the causal mask and a floor built in where they can be.

        For reversed rows of a causal call with no other mask or bias and ``S >= T``
        (:func:`~.chunk_kernels.causal_table`); sets :attr:`table_masks` and :attr:`floored`.
        ``query [B, H, T, Dh]`` and ``key [B, Hkv, S, Dh]`` give the bound of ``|q . k| * scale``.
        """
        table = table.detach()
        self.table_masks = (self.reversed_rows and self.is_causal and self.mask is None and self.bias is None
                            and self.n_keys >= self.n_queries)
        self.floored = False
        if not self.table_masks:
            return table
        norms = [float(torch.linalg.vector_norm(t.detach(), dim=-1, dtype=bias_dtype(t.dtype)).amax())
                 for t in (query, key)]
        bound = self.scale * norms[0] * norms[1]  # Cauchy-Schwarz
        table, self.floored = causal_table(table, n_keys=self.n_keys, bound=bound)
        return table

    def table_index(self, start: int, stop: int, n: int, device: torch.device) -> Tensor:
        """Where rows ``start .. stop - 1`` and keys ``0 .. n - 1`` read :meth:`table`: ``j - i + T - 1``, flat."""
        keys = torch.arange(n, device=device)
        queries = torch.arange(start, stop, device=device)
        return (keys[None, :] - queries[:, None] + (self.n_queries - 1)).flatten()  # [C, n] -> [C * n]

    def table_rows(self, table: Tensor, start: int, stop: int, n: int) -> Tensor:
        """The chunk's ``[1, H, C, n]`` entries of :meth:`table`, in the chunk's row order.

        Reversed rows: a view (:func:`~.chunk_kernels.hankel_rows`); else a gather.
        """
        C = stop - start
        if self.reversed_rows:
            return hankel_rows(table, first=self.n_queries - stop, rows=C, n=n)
        rows = table.index_select(1, self.table_index(start, stop, n, table.device))  # [H, C * n]
        return rows.view(1, table.shape[0], C, n)

    def add_table_rows(self, d_table: Tensor, ds: Tensor, start: int, stop: int, *,
                       scratch: Tensor | None = None) -> None:
        """Add a chunk's ``ds [B, H, C, n]`` (chunk's row order) into the table's gradient ``[H, T + S - 1]``."""
        rows = ds.sum(dim=0) if ds.shape[0] > 1 else ds[0]  # [H, C, n]
        if self.reversed_rows:
            hankel_add_(d_table, rows, first=self.n_queries - stop, scratch=scratch)
            return
        index = self.table_index(start, stop, rows.shape[-1], ds.device)
        d_table.index_add_(1, index, rows.flatten(1).to(d_table.dtype))  # [H, C, n] -> [H, C * n]

    def scheme_rows(self, q_c: Tensor, key: Tensor, start: int, n: int, *, table: Tensor | None) -> Tensor | None:
        """The scheme's term for the chunk: ``[B|1, H, C, n]`` in :func:`bias_dtype` of ``q_c``, or None.

        Args:
            q_c: the chunk's queries ``[B, H, C, Dh]`` (in the chunk's row order).
            key: all the keys ``[B, Hkv, S, Dh]`` (a scheme that reads keys gets them, one per query head).
            start: index of the chunk's first query.
            n: keys the chunk sees.
            table: :meth:`table`, for a distance scheme (None otherwise).
        """
        C = q_c.shape[-2]
        if table is not None:
            return self.table_rows(table, start, start + C, n)
        keys = repeat_kv_heads(key[..., :n, :], self.n_heads) if self.position.reads_keys else None
        mask = self.mask_rows(start, start + C, n, q_c.device) if self.position.reads_mask else None
        if self.q_pos is not None and self.k_pos is not None:
            return self.position.bias(q_c, n, k=keys, position_ids=self.q_pos[..., start : start + C],
                                      key_position_ids=self.k_pos[..., :n], mask=mask)  # [B|1, H, C, n] or None
        # Without position ids: the offsets call every scheme takes (a mask only if it reads one).
        extra = {"mask": mask} if self.position.reads_mask else {}
        return self.position.bias(q_c, n, q_offset=self.q_offset + start, k_offset=0, k=keys, **extra)

    def value_rows(self, weights: Tensor, start: int, *, value_width: int) -> Tensor | None:
        """The scheme's value term of a chunk's ``weights [B, H, C, n]`` (rows from ``start``): ``[B, H, C, Dv]``.

        ``value_width``: the values' ``Dv``, which the term must have.
        """
        if self.q_pos is not None and self.k_pos is not None:
            C, n = weights.shape[-2], weights.shape[-1]
            return self.position.value_term(weights, position_ids=self.q_pos[..., start : start + C],
                                            key_position_ids=self.k_pos[..., :n], value_width=value_width)
        return self.position.value_term(weights, q_offset=self.q_offset + start, k_offset=0, value_width=value_width)

    def user_rows(self, start: int, stop: int, n: int) -> Tensor | None:
        """The user's ``bias`` at the chunk, in the chunk's row order: broadcastable to ``[B, H, C, n]``, or None."""
        if self.bias is None:
            return None
        rows = self.user_rows_of(self.bias, start, stop, n)
        return rows.flip(-2) if self.reversed_rows and self._rows(self.bias, start, stop) else rows

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
            Boolean, broadcastable to ``[B, H, C, n - first]`` (the chunk's row order), True = may attend; or None.
        """
        rows = self._rows(self.mask, start, stop)
        m = _window(self.mask, rows=rows, n_keys=n, full_keys=self.n_keys)
        if m is not None:
            m = m.to(device)[..., first:]
            if self.reversed_rows and rows is not None:
                m = m.flip(-2)
        if self.is_causal:
            # Bottom-right alignment of the whole call: query t sees keys <= S - T + t.
            queries = torch.arange(stop - 1, start - 1, -1, device=device) if self.reversed_rows else \
                torch.arange(start, stop, device=device)
            last = queries + (self.n_keys - self.n_queries)  # [C]
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

    def scores(self, q_c: Tensor, k_n: Tensor, term: Tensor | None, start: int, out: Tensor, *,
               lse: Tensor | None = None) -> tuple[Tensor, ChunkMask]:
        """The chunk's scores ``q k^T * scale + term + bias`` (``- lse`` when given) and which each row may see.

        The term (or ``-lse``) is written into ``out`` first and the matmul adds to it
        (:func:`~.chunk_kernels.grouped_addmm_`, the scale as its ``alpha``): no pass over
        the scores of its own for the term, the scale or ``lse``.

        Args:
            q_c: ``[B, H, C, Dh]`` in the compute dtype (the chunk's row order).
            k_n: the keys the chunk sees, ``[B|1, Hkv, n, Dh]``, in the compute dtype.
            term: :meth:`scheme_rows` (without autograd history), or None.
            start: index of the chunk's first query.
            out: where the scores are written, ``[B, H, C, n]`` (a :class:`~.chunk_kernels.Workspace` buffer).
            lse: ``[B, H, C, 1]``, the forward pass's log-denominators, subtracted (the backward pass).

        Returns:
            ``scores [B, H, C, n]`` (``out``; not masked: :func:`~.chunk_kernels.softmax_rows` and
            :func:`~.chunk_kernels.weights_at` take the mask) and the :class:`ChunkMask`.
        """
        stop, n = start + q_c.shape[-2], k_n.shape[-2]
        beta = 1.0
        if term is not None and lse is not None:
            torch.sub(term, lse, out=out)  # [B|1, H, C, n] - [B, H, C, 1]
        elif term is not None:
            out.copy_(term)  # broadcast over the batch
        elif lse is not None:
            out.copy_(lse.neg().expand_as(out))
        else:
            beta = 0.0  # out's contents are ignored
        scores = grouped_addmm_(out, q_c, k_n.transpose(-2, -1), alpha=self.scale, beta=beta)  # [B, H, C, n]
        user = self.user_rows(start, stop, n)
        if user is not None:
            scores += user.to(device=scores.device, dtype=scores.dtype)
        if self.table_masks and term is not None:
            return scores, ChunkMask(None, n, None)  # the -inf entries of the table are the causal mask
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


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of scores and softmax: float32 for half-precision inputs (as the dense path), else the input's."""
    return bias_dtype(dtype)


def default_scale(head_dim: int, scale: float | None) -> float:
    """``scale``, or ``1 / sqrt(Dh)``."""
    return 1.0 / math.sqrt(head_dim) if scale is None else scale
