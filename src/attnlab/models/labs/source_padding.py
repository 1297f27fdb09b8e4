"""Padded sources for the squares models: the mask checked once, and the last real step found.

A batch of sources of different lengths is right-padded to one length ``S`` and
comes with a source mask ``[B, 1, S]``, True on the real steps (what
:func:`attnlab.data.pad_sequences` and :class:`attnlab.data.SquarePrefixes` give).
A squares model uses it three ways: attention never looks at a padded step, the
decoder starts from the last *real* source point (not from the padding at step
``S - 1``), and a GRU encoder hands over its state after that last real step.
This module holds what every model needs for that: :func:`check_source_mask`,
which every squares model calls once, where a mask comes in; :func:`zero_padding`,
which sets the padded steps to 0 so that their values (NaN included) cannot reach
an output through a zero weight; and :func:`last_steps`, which picks each row's
last real step.

Shape notation: ``B`` batch, ``S`` source length, ``F`` features, ``D`` any width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.attention.masks import as_bool_mask

__all__ = ["check_source_mask", "last_steps", "zero_padding"]


def check_source_mask(source_mask: Any, source: Tensor, *, right_padded: bool = False) -> Tensor | None:
    """``source_mask`` as a boolean ``[B, 1, S]`` mask that fits ``source [B, S, F]``, checked once.

    Args:
        source_mask: None (every step is real), or ``[B, 1, S]`` / ``[1, 1, S]``:
            boolean, True = a real step, or the labs' 0/1 floats (``mask == 0`` is padding).
        source: the sources ``[B, S, F]`` it masks.
        right_padded: also require each row to be real steps then padding
            (``True ... True False ... False``), as a recurrent encoder reading the
            steps in order needs.

    Returns:
        None, or bool ``[B, 1, S]`` (a ``[1, 1, S]`` mask expanded, not copied).

    Raises:
        TypeError: if ``source_mask`` is not a tensor, or a non-boolean one of a complex dtype.
        ValueError: naming ``source_mask`` and its shape or the first bad row, for a
            shape that does not fit ``source``, values other than 0 and 1, a row with
            no real step (nothing to attend to or to decode from), or, with
            ``right_padded``, a real step after padding.
    """
    if source_mask is None:
        return None
    if not isinstance(source_mask, Tensor):
        raise TypeError(f"source_mask must be a tensor [B, 1, S] (True = a real step), "
                        f"got {type(source_mask).__name__}")
    B, S = source.shape[0], source.shape[1]
    if source_mask.dim() != 3 or source_mask.shape[1] != 1 or source_mask.shape[2] != S \
            or source_mask.shape[0] not in (1, B):
        raise ValueError(f"source_mask must have shape [B, 1, S] = [{B}, 1, {S}] (or [1, 1, {S}]) for a source "
                         f"of shape {list(source.shape)}, got {list(source_mask.shape)}")
    try:
        mask = as_bool_mask(source_mask).expand(B, 1, S)  # [B, 1, S]
    except (TypeError, ValueError) as err:
        raise type(err)(f"source_mask: {err}") from None
    kept = mask[:, 0]  # [B, S]
    empty = ~kept.any(dim=-1)  # [B]
    if bool(empty.any()):
        row = int(empty.nonzero()[0, 0])
        raise ValueError(f"source_mask row {row} marks no step as real: a source needs at least one step")
    if right_padded:
        after_padding = kept[:, 1:] & ~kept[:, :-1]  # [B, S - 1]: a real step right after a padded one
        if bool(after_padding.any()):
            row = int(after_padding.any(dim=-1).nonzero()[0, 0])
            raise ValueError(f"source_mask row {row} is {kept[row].int().tolist()}: this model reads a right-padded "
                             "source (real steps first, then padding)")
    return mask


def last_steps(seq: Tensor, source_mask: Tensor | None) -> Tensor:
    """Each row's last real step of ``seq [B, S, D]``: ``[B, 1, D]`` (the last step when ``source_mask`` is None).

    Args:
        seq: the source, or anything laid out along its steps (a GRU's states).
        source_mask: a mask :func:`check_source_mask` returned, bool ``[B, 1, S]``, or None.

    Returns:
        ``[B, 1, D]``: ``seq[b, s_b]`` with ``s_b`` the last True of row ``b``.
    """
    if source_mask is None:
        return seq[:, -1:]  # [B, 1, D]
    S = seq.shape[1]
    # The last True is the first True of the reversed row: argmax returns the first maximum.
    last = S - 1 - source_mask.flip(-1).to(torch.uint8).argmax(dim=-1, keepdim=True)  # [B, 1, 1]
    return seq.gather(1, last.expand(-1, 1, seq.shape[-1]))  # [B, 1, D]


def zero_padding(source: Tensor, source_mask: Tensor | None) -> Tensor:
    """``source [B, S, F]`` with its padded steps set to 0 (unchanged when ``source_mask`` is None).

    Attention gives a padded step weight 0, but ``0 * NaN`` is NaN and ``0 * inf``
    too, in the forward pass and in the gradients: padding marked with NaN would
    poison every output. Zeroed, what the padding held changes nothing.

    Args:
        source: ``[B, S, F]``.
        source_mask: a mask :func:`check_source_mask` returned, bool ``[B, 1, S]``, or None.

    Returns:
        ``[B, S, F]``, a new tensor when masked.
    """
    if source_mask is None:
        return source
    return source.masked_fill(~source_mask.transpose(1, 2), 0.0)  # [B, S, 1] broadcast over F
