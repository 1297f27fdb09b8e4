"""Positions as tensors: ranges, distances, positions from the data, and their checks.

A position scheme is evaluated at integer positions. By default they are the
indices, ``offset .. offset + L - 1``, one ``[L]`` tensor for every sequence of
the batch (:func:`positions`). When the positions come from the data they are
per row, ``position_ids [B, L]``:

* **left padding** (transformers #22161): a batch of prompts of different
  lengths is padded on the left so that every row ends at the last column and
  generation appends to every row at once. Row ``b``'s real tokens must then
  sit at ``0, 1, ..`` as they would unpadded: :func:`positions_from_mask`
  counts them, ``cumsum(mask) - 1`` (padding gets 0: it is masked out of
  attention, so its position is never read by a real token);
* a task whose positions come from its structure (Abacus digit indices,
  position coupling) gives them for every element, the answer slots included.

Cached decoding continues each row from its own last position
(:func:`continue_positions`). Signed distances ``k_pos - q_pos`` are
:func:`pair_distances`, ``[T, S]`` for ``[T]`` / ``[S]`` positions and
``[B, T, S]`` when either is per row.

The checks here are on metadata only (dtype and shape, never a device sync),
except :func:`check_position_ids` with ``values=True``, which also refuses
negative positions (one reduction, and a sync on an accelerator): models call
it once, where the positions come in.

Shape notation: ``B`` batch, ``L`` length, ``T`` queries, ``S`` keys.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_int

__all__ = ["call_positions", "check_position_ids", "check_positions", "check_rel", "continue_positions",
           "pair_distances", "positions", "positions_from_mask", "relative_positions", "squeeze_rows"]


def positions(start: int, length: int, device: torch.device | str | None = None) -> Tensor:
    """The integer positions ``start .. start + length - 1``, int64 ``[length]``.

    Example:
        >>> positions(3, 4)
        tensor([3, 4, 5, 6])
    """
    start = check_int("start", start)
    length = check_int("length", length, minimum=0)
    return torch.arange(start, start + length, device=device)  # [length]


def relative_positions(T: int, S: int, *, q_offset: int = 0, k_offset: int = 0,
                       device: torch.device | str | None = None) -> Tensor:
    """Key position minus query position for every (query, key) pair, int64 ``[T, S]``.

    Entry ``[i, j]`` is ``(k_offset + j) - (q_offset + i)``: positive when the key comes
    after the query (T5's ``memory_position - query_position``, Shaw et al.'s ``j - i``).

    Raises:
        TypeError: if an argument is not an integer.
        ValueError: if ``T`` or ``S`` is negative.

    Example:
        >>> relative_positions(2, 4, q_offset=2)
        tensor([[-2, -1,  0,  1],
                [-3, -2, -1,  0]])
    """
    T = check_int("T", T, minimum=0)
    S = check_int("S", S, minimum=0)
    q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
    return pair_distances(positions(q_offset, T, device), positions(k_offset, S, device))  # [T, S]


def pair_distances(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """``k_pos - q_pos`` for every (query, key) pair: ``[T, S]``, or ``[B, T, S]`` when either is per row.

    Args:
        q_pos: the queries' positions, ``[T]`` or ``[B|1, T]``.
        k_pos: the keys' positions, ``[S]`` or ``[B|1, S]``.

    Example:
        >>> pair_distances(torch.tensor([[0, 1], [5, 6]]), torch.tensor([[0, 1], [5, 6]]))[1]
        tensor([[ 0,  1],
                [-1,  0]])
    """
    return k_pos[..., None, :] - q_pos[..., :, None]  # [T, S] or [B, T, S]


def _is_integer(t: Any) -> bool:
    return isinstance(t, Tensor) and not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def check_positions(name: str, pos: Tensor, length: int | None = None) -> None:
    """Refuse anything but integer positions ``pos [L]`` or per row ``[B, L]`` (metadata only: no device sync).

    Raises:
        TypeError: for a non-integer tensor.
        ValueError: for a shape other than ``[length]`` or ``[B, length]``.

    Example:
        >>> check_positions("q_pos", torch.tensor([0, 3, 7]), 3)  # passes silently
        >>> check_positions("q_pos", torch.tensor([[0, 1, 2], [4, 5, 6]]), 3)  # per row: passes too
    """
    if not isinstance(pos, Tensor):
        raise TypeError(f"{name} must be an integer tensor [L], got {type(pos).__name__}")
    if not _is_integer(pos):
        raise TypeError(f"{name} must be an integer tensor [L], got dtype {pos.dtype}")
    if pos.ndim not in (1, 2) or (length is not None and pos.shape[-1] != length):
        want = "L" if length is None else length
        raise ValueError(f"{name} must be [{want}] (one position per row) or [B, {want}] (per sequence), "
                         f"got shape {list(pos.shape)}")


def check_rel(rel: Tensor, T: int, S: int | None = None) -> None:
    """Refuse anything but integer signed key-minus-query distances ``[T, S]`` or per row ``[B, T, S]``.

    Raises:
        TypeError: for a non-integer tensor.
        ValueError: for a shape other than ``[T, S]`` / ``[B, T, S]``.
    """
    if not _is_integer(rel):
        raise TypeError(f"rel must be an integer tensor [T, S], got {getattr(rel, 'dtype', type(rel).__name__)}")
    if rel.ndim not in (2, 3) or rel.shape[-2] != T or (S is not None and rel.shape[-1] != S):
        want = f"[{T}, {S}]" if S is not None else f"[{T}, S]"
        raise ValueError(f"rel must be [T, S] = {want} (queries x keys) or [B, T, S], got shape {list(rel.shape)}")


def check_position_ids(position_ids: Any, *, batch: int | None, length: int, name: str = "position_ids",
                       values: bool = True) -> Tensor:
    """``position_ids`` checked as integer positions ``[B|1, L]``, returned as int64.

    Args:
        position_ids: one position per element of each sequence, ``[B, L]`` (or ``[1, L]``
            for every sequence).
        batch: ``B`` (None: any).
        length: ``L``.
        name: the argument's name in the messages.
        values: also refuse negative positions (one reduction: a device sync on an accelerator).

    Returns:
        int64 ``[B|1, L]`` (the tensor itself when it is int64).

    Raises:
        TypeError: for a non-tensor, or a floating, complex or boolean tensor.
        ValueError: for another shape, or (``values``) a negative position.

    Example:
        >>> check_position_ids(torch.tensor([[0, 0, 1], [0, 1, 2]]), batch=2, length=3).shape
        torch.Size([2, 3])
    """
    if not isinstance(position_ids, Tensor):
        raise TypeError(f"{name} must be an integer tensor [B, L], got {type(position_ids).__name__}")
    if not _is_integer(position_ids):
        raise TypeError(f"{name} must be an integer tensor [B, L] (int64), got dtype {position_ids.dtype}")
    shape = list(position_ids.shape)
    if position_ids.ndim != 2 or shape[1] != length or (batch is not None and shape[0] not in (1, batch)):
        want = f"[{'B' if batch is None else batch}, {length}]"
        raise ValueError(f"{name} must be {want} (one position per element of each sequence), got shape {shape}")
    if values and position_ids.numel() and torch.compiler.is_compiling():
        # Traced (torch.compile, torch.export), the value cannot be read back: checked inside the graph.
        torch._assert_async((position_ids >= 0).all(), f"{name} must be positions >= 0")
    elif values and position_ids.numel():
        low = int(position_ids.min())
        if low < 0:
            raise ValueError(f"{name} must be positions >= 0, got {low}")
    return position_ids.long()


def squeeze_rows(pos: Tensor) -> Tensor:
    """Positions shared by every sequence, ``[1, L]``, as ``[L]`` (the 1-d fast path); others unchanged.

    Example:
        >>> squeeze_rows(torch.tensor([[0, 1, 2]])), squeeze_rows(torch.tensor([[0, 1], [1, 2]])).shape
        (tensor([0, 1, 2]), torch.Size([2, 2]))
    """
    return pos[0] if pos.ndim == 2 and pos.shape[0] == 1 else pos


def positions_from_mask(mask: Tensor) -> Tensor:
    """Each row's positions counted over its real elements: ``cumsum(mask) - 1``, padding at 0; int64 ``[B, L]``.

    A left-padded row ``[pad, pad, a, b]`` gets ``[0, 0, 0, 1]``: ``a`` and ``b`` sit
    where they would unpadded. Padding gets position 0 (not -1): it is masked out of
    attention, and a table must still have a row for it.

    Args:
        mask: boolean ``[B, L]``, True on the real elements.

    Raises:
        TypeError: for a non-boolean ``mask``.
        ValueError: for a ``mask`` that is not 2-d.

    Example:
        >>> positions_from_mask(torch.tensor([[False, False, True, True], [True, True, True, True]]))
        tensor([[0, 0, 0, 1],
                [0, 1, 2, 3]])
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor [B, L] (True = a real element), "
                        f"got {getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.ndim != 2:
        raise ValueError(f"mask must be [B, L], got shape {list(mask.shape)}")
    return (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # [B, L]


def continue_positions(last: Tensor, steps: int) -> Tensor:
    """The positions of ``steps`` new elements after each row's ``last [B]``: ``last + 1 .. last + steps``.

    Returns int64 ``[B, steps]``.

    Example:
        >>> continue_positions(torch.tensor([3, 7]), 2)
        tensor([[4, 5],
                [8, 9]])
    """
    steps = check_int("steps", steps, minimum=0)
    return last[:, None] + torch.arange(1, steps + 1, device=last.device)  # [B, 1] + [steps] -> [B, steps]


def call_positions(batch: int, T: int, S: int, device: torch.device, *, q_offset: int = 0, k_offset: int = 0,
                   position_ids: Tensor | None = None,
                   key_position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The positions of one call's ``T`` queries and ``S`` keys: the ids given, else the offsets'.

    Args:
        batch: ``B``.
        T: queries; S: keys.
        device: where the positions live.
        q_offset: the first query's position (without ``position_ids``).
        k_offset: the first key's position (without ``key_position_ids`` or ``position_ids``).
        position_ids: the queries' positions ``[B|1, T]``, integers.
        key_position_ids: the keys' positions ``[B|1, S]``; by default the queries' own when
            ``position_ids`` is given and ``S == T`` (self-attention without a cache).

    Returns:
        ``(q_pos, k_pos)``: ``[T]`` / ``[S]`` from the offsets or ids shared by the batch,
        ``[B, T]`` / ``[B, S]`` for per-row ids; the same tensor twice for self-attention.

    Raises:
        TypeError / ValueError: for non-integer offsets or ids, ids of the wrong shape, or
            ``position_ids`` with ``S != T`` keys and no ``key_position_ids``.
    """
    if position_ids is None and key_position_ids is None:
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return positions(q_offset, T, device), positions(k_offset, S, device)  # [T], [S]
    q_pos = positions(check_int("q_offset", q_offset), T, device) if position_ids is None else squeeze_rows(
        check_position_ids(position_ids, batch=batch, length=T, values=False).to(device))  # [T] or [B, T]
    if key_position_ids is not None:
        k_pos = squeeze_rows(check_position_ids(key_position_ids, batch=batch, length=S, name="key_position_ids",
                                                values=False).to(device))  # [S] or [B, S]
    elif position_ids is None:
        k_pos = positions(check_int("k_offset", k_offset), S, device)
    elif S == T:
        k_pos = q_pos  # self-attention: the keys are the queries
    else:
        raise ValueError(f"position_ids give the {T} queries' positions; the {S} keys' need key_position_ids "
                         f"[B, {S}] (a cache holds them for self-attention)")
    return q_pos, k_pos
