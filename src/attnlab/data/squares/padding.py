"""Sequences of different lengths in one batch: right padding and the mask that goes with it.

:func:`pad_sequences` turns ``N`` sequences ``[L_i, F]`` into one tensor
``[N, L, F]`` padded on the right, and a boolean mask ``[N, 1, L]``, True on the
real steps. That mask is what attnlab's models and ``MultiHeadAttention`` take
as a source mask (True = may attend), so padded steps are never attended to; for
the functional :func:`attnlab.attention.attend`, ``mask.unsqueeze(1)`` makes it
``[N, 1, 1, L]``. It equals ``padding_mask_from_lengths(lengths)``.
:func:`collate_padded` does the same for a DataLoader whose items are
``(source, target)`` pairs of different lengths.

Shape notation: ``N`` (or ``B``) sequences, ``L`` padded length, ``S`` source
and ``T`` target length, ``F`` features.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from attnlab._validate import check_int

__all__ = ["PaddedBatch", "collate_padded", "pad_sequences"]


def _as_steps(value: Any, name: str) -> np.ndarray:
    """One sequence as a float32 array ``[L, F]``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array or tensor of numbers [L, F], "
                        f"got {type(value).__name__}") from exc
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a sequence of steps [L, F], got shape {list(arr.shape)}")
    return arr


def pad_sequences(
    points: Sequence[Any] | np.ndarray | torch.Tensor,
    max_len: int | None = None,
    *,
    pad_value: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad sequences of different lengths on the right into one tensor, with their mask.

    Args:
        points: ``N >= 1`` sequences ``[L_i, F]`` (arrays or tensors, the same
            ``F``), e.g. ``generate_sequences(variable_len=True)[0]``; an array or
            tensor ``[N, L, F]`` is taken as ``N`` sequences of length ``L``.
        max_len: the padded length ``L``; the longest sequence's length when
            None. Never truncates: a shorter ``max_len`` is an error.
        pad_value: the value written on the padded steps.

    Returns:
        ``(padded, mask)``: float32 ``[N, L, F]`` with sequence ``i`` in
        ``padded[i, :L_i]``, and bool ``[N, 1, L]``, True on the real steps
        (the source-mask convention of attnlab's models). Both on the CPU.

    Raises:
        TypeError: if ``points`` is not a sequence of numeric arrays, or
            ``max_len``/``pad_value`` is not a number of the right kind.
        ValueError: if ``points`` is empty, a sequence is not ``[L, F]``, the
            feature counts differ, or ``max_len`` is shorter than the longest sequence.

    Example:
        >>> padded, mask = pad_sequences([[[1.0, 1.0], [2.0, 2.0]], [[3.0, 3.0]]])
        >>> padded.shape, mask.tolist()
        (torch.Size([2, 2, 2]), [[[True, True]], [[True, False]]])
    """
    if isinstance(points, (str, bytes)) or not isinstance(points, (Sequence, np.ndarray, torch.Tensor)):
        raise TypeError(f"points must be a list of [L, F] sequences, got {type(points).__name__}")
    if len(points) == 0:
        raise ValueError("points is empty; need at least one sequence")
    if isinstance(pad_value, (bool, np.bool_)) or not isinstance(pad_value, numbers.Real):
        raise TypeError(f"pad_value must be a number, got {pad_value!r} ({type(pad_value).__name__})")
    arrays = [_as_steps(p, f"points[{i}]") for i, p in enumerate(points)]
    n_features = {a.shape[1] for a in arrays}
    if len(n_features) > 1:
        raise ValueError(f"points must all have the same number of features F, got {sorted(n_features)}")
    lengths = np.array([a.shape[0] for a in arrays])
    longest = int(lengths.max())
    if max_len is None:
        max_len = longest
    else:
        max_len = check_int("max_len", max_len, minimum=0)
        if max_len < longest:
            raise ValueError(f"max_len ({max_len}) is shorter than the longest sequence ({longest}); "
                             "pad_sequences never truncates")

    padded = np.full((len(arrays), max_len, n_features.pop()), float(pad_value), dtype=np.float32)
    for i, a in enumerate(arrays):
        padded[i, : a.shape[0]] = a
    mask = np.arange(max_len)[None, :] < lengths[:, None]  # [N, L]
    return torch.from_numpy(padded), torch.from_numpy(mask).unsqueeze(1)  # [N, L, F], [N, 1, L]


class PaddedBatch(NamedTuple):
    """A batch of ``(source, target)`` pairs as :func:`collate_padded` returns it.

    Attributes:
        source: float32 ``[B, S, F]``, right-padded.
        source_mask: bool ``[B, 1, S]``, True on the real steps: pass it as the
            model's ``source_mask``.
        target: float32 ``[B, T, F]``, right-padded, when the targets are
            sequences ``[T_i, F]``; otherwise the targets stacked as they are
            (e.g. labels ``[B]``).
        target_mask: bool ``[B, 1, T]``, True on the real target steps (to leave
            the padding out of the loss); None when the targets are not sequences.
    """

    source: torch.Tensor
    source_mask: torch.Tensor
    target: torch.Tensor
    target_mask: torch.Tensor | None


def collate_padded(batch: Sequence[Any], *, pad_value: float = 0.0) -> PaddedBatch:
    """A DataLoader ``collate_fn`` for ``(source, target)`` pairs of different lengths.

    Sources ``[S_i, F]`` are padded with :func:`pad_sequences`, and so are
    targets ``[T_i, F]`` (2-D). Targets of any other shape (a label, a vector of
    fixed size) are stacked as they are, and must then all have the same shape.
    Use ``functools.partial(collate_padded, pad_value=...)`` for another padding value.

    Args:
        batch: the list of ``(source, target)`` items the DataLoader fetched.
        pad_value: the value written on the padded steps.

    Returns:
        A :class:`PaddedBatch` ``(source, source_mask, target, target_mask)``.

    Raises:
        TypeError: if an item is not a ``(source, target)`` pair.
        ValueError: if ``batch`` is empty or the shapes do not fit together.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> from attnlab.data import generate_sequences
        >>> points, directions = generate_sequences(n=8, variable_len=True)
        >>> pairs = [(p[:1], p[1:]) for p in points]   # first point -> the rest
        >>> batch = next(iter(DataLoader(pairs, batch_size=4, collate_fn=collate_padded)))
        >>> batch.source.shape, batch.target.shape, batch.target_mask.sum(-1).ravel().tolist()
        (torch.Size([4, 1, 2]), torch.Size([4, 3, 2]), [1, 3, 3, 1])
    """
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence) or len(batch) == 0:
        raise ValueError(f"batch must be a non-empty list of (source, target) pairs, got {batch!r}")
    for i, item in enumerate(batch):
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise TypeError(f"batch[{i}] must be a (source, target) pair, got {type(item).__name__}")
    source, source_mask = pad_sequences([item[0] for item in batch], pad_value=pad_value)
    targets = [item[1] for item in batch]
    first = targets[0]
    if np.ndim(first.detach().cpu() if isinstance(first, torch.Tensor) else first) == 2:
        target, target_mask = pad_sequences(targets, pad_value=pad_value)
        return PaddedBatch(source, source_mask, target, target_mask)
    stacked = [t if isinstance(t, torch.Tensor) else torch.as_tensor(np.asarray(t)) for t in targets]
    shapes = {tuple(t.shape) for t in stacked}
    if len(shapes) > 1:
        raise ValueError(f"targets that are not sequences [T, F] must share one shape, got {sorted(shapes)}")
    return PaddedBatch(source, source_mask, torch.stack(stacked), None)
