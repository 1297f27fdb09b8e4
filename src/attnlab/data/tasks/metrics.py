"""Scoring predictions against targets: token and sequence accuracy, and mean squared error.

The token tasks of :mod:`attnlab.data.tasks` are scored on their decoder output
``target_out [N, T]`` (the target then ``EOS``, right-padded with ``PAD``):

* :func:`token_accuracy`: the fraction of real target tokens predicted right,
  pooled over the whole set (a long sequence weighs more than a short one);
* :func:`sequence_accuracy`: the fraction of sequences whose every real token,
  ``EOS`` included, is right: one wrong token, or a missing end, fails it.

Positions where the target is ``PAD`` are never scored, so what a model writes
after the end does not count. The ``squares`` task predicts float points and is
scored with :func:`mean_squared_error`.

Shape notation: ``N`` sequences, ``T`` target length, ``F`` features.
"""

from __future__ import annotations

from typing import Any

import torch

from attnlab._validate import check_int
from attnlab.data.tasks.tokens import PAD

__all__ = ["mean_squared_error", "sequence_accuracy", "token_accuracy"]


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a tensor or array, got {type(value).__name__}") from exc


def _token_ids(value: Any, name: str) -> torch.Tensor:
    ids = _as_tensor(value, name)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        hint = " (for logits [N, T, V], pass logits.argmax(-1))" if ids.is_floating_point() else ""
        raise TypeError(f"{name} must hold token ids (an integer tensor), got dtype {ids.dtype}{hint}")
    if ids.ndim != 2:
        raise ValueError(f"{name} must be token ids [N, T], got shape {list(ids.shape)}")
    return ids


def _scored(pred: Any, target: Any, pad: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hit [N, T], scored [N, T])``: right predictions, and the target positions that count."""
    pred = _token_ids(pred, "pred")
    target = _token_ids(target, "target")
    if pred.shape != target.shape:
        raise ValueError(f"pred has shape {list(pred.shape)} but target has {list(target.shape)}: "
                         "cut or pad the predictions to the target's length")
    if pad is not None:
        pad = check_int("pad", pad)
    pred = pred.to(target.device)
    scored = torch.ones_like(target, dtype=torch.bool) if pad is None else target != pad  # [N, T]
    if not scored.any():
        raise ValueError(f"target has no token other than pad={pad} (shape {list(target.shape)}): "
                         "the accuracy of nothing is undefined")
    return pred == target, scored


def token_accuracy(pred: Any, target: Any, *, pad: int | None = PAD) -> float:
    """The fraction of target tokens that ``pred`` gets right, padding left out.

    Args:
        pred: predicted token ids ``[N, T]`` (integer tensor or array).
        target: the target ids ``[N, T]``, e.g. a :class:`~attnlab.data.TaskBatch`'s ``target_out``.
        pad: the padding id; target positions holding it are not scored.
            None scores every position.

    Returns:
        ``(right tokens) / (non-pad target tokens)``, in ``[0, 1]``.

    Raises:
        TypeError: if an input is not integer ids (logits must be ``argmax``-ed first).
        ValueError: if an input is not 2-D, the shapes differ, or ``target`` is all padding.

    Example:
        >>> token_accuracy([[3, 4, 2, 0]], [[3, 5, 2, 0]])  # 2 of the 3 real tokens
        0.6666666666666666
    """
    hit, scored = _scored(pred, target, pad)
    return float((hit & scored).sum()) / float(scored.sum())


def sequence_accuracy(pred: Any, target: Any, *, pad: int | None = PAD) -> float:
    """The fraction of sequences ``pred`` gets entirely right (every non-pad target token, EOS included).

    Rows whose target is all padding are not sequences and are left out of the count.

    Args:
        pred: predicted token ids ``[N, T]``.
        target: the target ids ``[N, T]``.
        pad: the padding id, never scored; None scores every position.

    Returns:
        ``(right sequences) / (sequences with a non-pad token)``, in ``[0, 1]``.

    Raises:
        TypeError: if an input is not integer ids.
        ValueError: if an input is not 2-D, the shapes differ, or ``target`` is all padding.

    Example:
        >>> sequence_accuracy([[3, 4, 2, 0], [3, 4, 2, 9]], [[3, 5, 2, 0], [3, 4, 2, 0]])
        0.5
    """
    hit, scored = _scored(pred, target, pad)
    rows = scored.any(dim=1)  # [N]: rows with something to score
    right = (hit | ~scored).all(dim=1) & rows  # [N]
    return float(right.sum()) / float(rows.sum())


def mean_squared_error(pred: Any, target: Any) -> float:
    """The mean of ``(pred - target) ** 2`` over every element (the squares task's metric).

    Args:
        pred: predicted points ``[N, T, F]`` (any shape, floating point).
        target: the true points, the same shape.

    Returns:
        The mean squared error, computed in float64.

    Raises:
        TypeError: if an input is not floating point.
        ValueError: if the shapes differ or the inputs are empty.
    """
    pred, target = _as_tensor(pred, "pred"), _as_tensor(target, "target")
    for name, value in (("pred", pred), ("target", target)):
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    if pred.shape != target.shape:
        raise ValueError(f"pred has shape {list(pred.shape)} but target has {list(target.shape)}")
    if target.numel() == 0:
        raise ValueError(f"target is empty (shape {list(target.shape)}): the error of nothing is undefined")
    diff = pred.to(target.device, torch.float64) - target.double()
    return float(diff.square().mean())
