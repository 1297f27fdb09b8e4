"""The torch operations one chunk of chunked attention is made of, each a single pass where torch allows.

On the CPU a chunk's cost is its passes over the ``[B, H, C, n]`` scores, and on a
shared machine also the number of operations: each parallel operation is a barrier
of the intra-op threads, and a thread the system has descheduled holds up every
barrier (with two threads on a loaded machine that, not arithmetic, is most of the
time). So the operations here fold what they can:

* :func:`grouped_addmm_`: the scores as one ``baddbmm`` into a buffer that already
  holds the term (and ``-lse`` in the backward pass), the scale as its ``alpha``:
  the term's add and the scale cost no pass of their own; likewise the gradients
  of the keys and values accumulate inside the matmul (``beta = 1``) instead of
  a ``[n, Dh]`` product added afterwards;
* :func:`hankel_rows`: a distance scheme's rows as a strided view of its
  per-distance table, no index tensor and no gather (:mod:`.chunk_plan` explains
  why the chunk's rows then run in reverse order); :func:`hankel_add_` sums a
  gradient back into the table along the same anti-diagonals;
* :func:`softmax_rows`: torch's own softmax kernel in place (one pass over memory:
  each row fits the cache), after a floor that keeps every weight a normal number.

Why the floor. ALiBi's scores far from the diagonal are thousands below the row's
maximum; their weights, ``exp`` of that over the row's sum, are subnormal or zero,
and the CPU takes a microcode assist for every subnormal operand: the chunk's
``weights @ V`` takes 10-60x the time of the rest of the call (BENCHMARKS.md,
"The floor on attention weights"). So ``s - max`` is raised to :func:`weight_floor` first: each such
weight becomes ``>= e^20 * tiny`` instead of ``~0``, below ``1e-25`` of its row's
largest in float32 (``1e-300`` in float64), far below the dtype's rounding of the
row's sum; a masked key stays exactly 0.

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``C``
rows of the chunk, ``n`` keys it sees, ``N`` distances of the table.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["ChunkMask", "Workspace", "causal_table", "grouped_addmm_", "grouped_addmm_t_", "grouped_matmul",
           "hankel_add_", "hankel_rows", "softmax_rows", "weight_floor", "weights_at"]


def grouped_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` where ``b`` has ``Hkv`` heads shared by groups of ``a``'s ``H``: ``[B, H, C, X] x [B, Hkv, X, Y]``.

    Query head ``h`` meets key/value head ``h // (H / Hkv)``. The group's rows are
    stacked, so no ``[B, H, X, Y]`` copy of ``b`` is made. Returns ``[B, H, C, Y]``.
    """
    B, H, C, X = a.shape
    Hkv, Y = b.shape[1], b.shape[-1]
    if Hkv != H:
        a = a.reshape(B, Hkv, (H // Hkv) * C, X)  # [B, H, C, X] -> [B, Hkv, G * C, X]
    return (a @ b).view(B, H, C, Y)  # [B, Hkv, G * C, Y] -> [B, H, C, Y]


def _batched(t: Tensor, batch: int) -> Tensor:
    """``t [B|1, Hkv, X, Y]`` as ``[B * Hkv, X, Y]`` (a view when ``t`` has the batch)."""
    if t.shape[0] != batch:
        t = t.expand(batch, *t.shape[1:])
    return t.reshape(batch * t.shape[1], t.shape[2], t.shape[3])


def grouped_addmm_(out: Tensor, a: Tensor, b: Tensor, *, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """``out = beta * out + alpha * (a @ b)`` in place, ``b``'s heads shared by groups of ``a``'s (as above).

    Args:
        out: contiguous ``[B, H, C, Y]`` (with ``beta = 0`` its contents are ignored, NaN included).
        a: ``[B, H, C, X]``; b: ``[B|1, Hkv, X, Y]``.
    """
    B, H, C, X = a.shape
    Hkv = b.shape[1]
    a3 = a.reshape(B * Hkv, (H // Hkv) * C, X)  # the group's rows stacked
    out.view(B * Hkv, (H // Hkv) * C, out.shape[-1]).baddbmm_(a3, _batched(b, B), beta=beta, alpha=alpha)
    return out


def grouped_addmm_t_(out: Tensor, a: Tensor, b: Tensor, *, alpha: float = 1.0) -> Tensor:
    """``out += alpha * a^T @ b`` summed over each group of heads, in place: a key/value head's gradient.

    Args:
        out: ``[B, Hkv, X, Y]``, a view whose last two dims are BLAS-strided (``dk[..., :n, :]``).
        a: ``[B, H, C, X]``; b: ``[B, H, C, Y]``.
    """
    B, H, C, X = a.shape
    Hkv = out.shape[1]
    a3 = a.reshape(B * Hkv, (H // Hkv) * C, X).transpose(1, 2)  # [B * Hkv, X, G * C]
    b3 = b.reshape(B * Hkv, (H // Hkv) * C, b.shape[-1])  # [B * Hkv, G * C, Y]
    target = out.view(B * Hkv, X, out.shape[-1])
    target.baddbmm_(a3, b3, alpha=alpha)
    return out


def hankel_rows(table: Tensor, *, first: int, rows: int, n: int) -> Tensor:
    """``[1, H, rows, n]`` with entry ``[0, h, c, j] = table[h, first + c + j]``: a view, nothing copied.

    ``table [H, N]`` must be contiguous along the distances. Reading the same memory
    for every row (each row is the previous one moved by one distance) is what a
    gather by an index ``[rows * n]`` did, without the index or the copy.

    Raises:
        ValueError: if ``table`` is not contiguous along the distances, or the rows
            ``first .. first + rows + n - 2`` are outside its ``N`` distances.
    """
    H, N = table.shape
    if table.stride(1) != 1 and N > 1:
        raise ValueError(f"table must be contiguous along the distances, got stride {table.stride()}")
    if first < 0 or first + rows + n - 2 >= N:
        raise ValueError(f"rows {first} .. {first + rows + n - 2} are outside the table's {N} distances")
    return table.as_strided((1, H, rows, n), (H * table.stride(0), table.stride(0), 1, 1),
                            table.storage_offset() + first)


def hankel_add_(target: Tensor, values: Tensor, *, first: int, scratch: Tensor | None = None) -> Tensor:
    """``target[h, first + c + j] += values[h, c, j]`` for all ``c, j``: :func:`hankel_rows`'s gradient.

    Each row of ``values [H, C, n]`` is written into a zeroed ``[H, C, n + C - 1]``
    buffer shifted by its index (a strided copy: rows ``n + C`` apart in a buffer of
    rows ``n + C - 1``), then the buffer's columns are summed: the anti-diagonals,
    in two passes instead of a scatter of ``C * n`` indices.

    Args:
        target: ``[H, N]``, added to in place.
        values: ``[H, C, n]``.
        first: the table entry of ``values[:, 0, 0]``.
        scratch: a buffer of at least ``H * C * (n + C - 1)`` numbers of ``values``' dtype, or None.
    """
    H, C, n = values.shape
    width = n + C - 1
    size = H * C * width
    flat = torch.zeros(size, dtype=values.dtype, device=values.device) if scratch is None else scratch[:size].zero_()
    flat.view(H, C * width).as_strided((H, C, n), (C * width, width + 1, 1)).copy_(values)
    target[:, first : first + width] += flat.view(H, C, width).sum(dim=1).to(target.dtype)
    return target


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
        size = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.dtype != dtype or flat.numel() < size:
            flat = self._flat[name] = torch.empty(max(self.numel, size), dtype=dtype, device=self.device)
        return flat[:size].view(shape)


def causal_table(table: Tensor, *, n_keys: int, bound: float) -> tuple[Tensor, bool]:
    """A causal call's table as the scores read it: the mask built in, and floored where that is safe.

    Row ``i`` sees key ``j`` iff ``j <= i + S - T``, i.e. iff it reads table entry
    ``j - i + T - 1 <= S - 1`` (every row sees its diagonal, entry ``S - 1``, when
    ``S >= T``). So the entries past ``S - 1`` are set to ``-inf``: the strided rows
    then carry the causal mask, and no chunk builds or applies one.

    The floor. With ``|q . k| * scale <= bound`` (``M``), a row's largest score is at
    least ``d_h - M`` (``d_h``: head ``h``'s entry at the diagonal) and at most
    ``b_h + M`` (``b_h``: its largest entry). Entries below ``d_h - 2M - K`` are raised
    to it: their weights were below ``e^-K`` of the row's largest and stay so,
    ``K = -log(eps) + 10`` (26 in float32: ``1e-12``, far below the dtype's rounding).
    Every weight is then at least ``exp(d_h - b_h - 4M - K) / S``; where that is a
    normal number for every head, softmax needs no floor pass of its own
    (:func:`softmax_rows`'s ``floored``), and the table is floored. Where it is not
    (a large ``M``), the table is left as it is and the floor pass runs.

    Args:
        table: ``[H, T + S - 1]`` without autograd history.
        n_keys: ``S`` (``>= T``).
        bound: ``M``, an upper bound of ``|q . k| * scale`` over the call.

    Returns:
        ``(table [H, T + S - 1], floored)``: a new tensor, and whether it was floored.
    """
    S = n_keys
    out = table.clone()
    past = out[:, :S]  # the entries a row can see
    diagonal, largest = past[:, S - 1], past.amax(dim=1)  # [H], [H]
    finfo = torch.finfo(table.dtype)
    margin = -math.log(finfo.eps) + 10.0
    least = diagonal - largest - 4.0 * bound - margin  # the least log-weight, before the sum
    floored = bool((least >= math.log(finfo.tiny) + math.log(S) + 1.0).all())
    if floored:
        torch.maximum(past, (diagonal - 2.0 * bound - margin)[:, None], out=past)
    out[:, S:] = float("-inf")
    return out, floored


def weight_floor(dtype: torch.dtype, n: int) -> float:
    """The least ``s - max`` a score is given, for rows of ``n`` keys: every weight stays a normal number.

    ``exp(floor) / sum >= e^20 * tiny`` with ``sum <= n`` (module docstring): in float32
    ``log(tiny) + log(n) + 20``, about -58 at ``n = 16384``.
    """
    return math.log(torch.finfo(dtype).tiny) + math.log(max(n, 1)) + 20.0


def softmax_rows(scores: Tensor, mask: ChunkMask, *, want_lse: bool,
                 floored: bool = False) -> tuple[Tensor, Tensor | None]:
    """Softmax over the last dim, in place of ``scores``, and the log of each row's denominator.

    Args:
        scores: ``[B, H, C, n]``, overwritten by the weights.
        mask: which scores each row may see (every row sees at least one).
        want_lse: return ``lse`` (the backward pass needs it; inference does not).
        floored: the scores already keep every weight a normal number (:func:`causal_table`):
            no floor pass.

    Returns:
        ``weights [B, H, C, n]`` (the same storage; exactly 0 where masked) and
        ``lse [B, H, C, 1]`` or None.
    """
    mask.hide(scores, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True) if want_lse or not floored else None  # [B, H, C, 1]
    if not floored:
        assert row_max is not None  # finite: every row sees a key
        torch.maximum(scores, row_max + weight_floor(scores.dtype, scores.shape[-1]), out=scores)
        mask.hide(scores, float("-inf"))  # the floor raised the masked keys too
    # torch's softmax kernel walks a row at a time (in cache): max, exp and sum, scale. In place:
    # it reads each block of a row before writing it.
    weights = torch.ops.aten._softmax.out(scores, -1, False, out=scores)
    if row_max is None or not want_lse:
        return weights, None
    # The row's largest weight is exp(0) / sum: log(sum) = -log of it, without another pass of exp.
    return weights, row_max - weights.amax(dim=-1, keepdim=True).log()


def weights_at(shifted: Tensor, mask: ChunkMask, *, floored: bool = False) -> Tensor:
    """The weights again, ``exp(s - lse)``, from the shifted scores ``s - lse [B, H, C, n]``, in place.

    The floor (:func:`weight_floor` with ``n = 1``: ``s - lse <= s - max``) keeps them
    normal numbers, as in :func:`softmax_rows`; ``floored`` scores need none.
    """
    weights = shifted if floored else shifted.clamp_(min=weight_floor(shifted.dtype, 1))
    weights = weights.exp_()  # [B, H, C, n]
    mask.hide(weights, 0.0)
    return weights
