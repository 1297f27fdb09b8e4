"""Squares of 2 to 4 given corners, padded and masked, and the two corners that follow them.

The book's generator has a ``variable_len`` option (``generate_sequences(n,
variable_len=True)``): each sequence holds the first 2, 3 or 4 corners of its
noisy square. :func:`generate_prefixes` turns those into a task of the labs' kind
for sequences of different lengths: given the corners walked so far, predict the
next two round the square. After 2 corners those are corners 3 and 4 (the labs'
task); after 3, corner 4 and corner 1 again; after all 4, corners 1 and 2 again,
each with noise of its own.

:class:`SquarePrefixes` holds them as a Dataset: the given corners right-padded
to 4 steps, with the mask that says which steps are real (True; the source-mask
convention of attnlab's models, ``[B, 1, S]``), so a model neither attends to the
padding nor starts decoding from it. Its items are ``(inputs, target)`` pairs
whose ``inputs`` is a dict, ``{"X": ..., "source_mask": ...}``: the training loop
calls ``model(**inputs)``.

Shape notation: ``N`` squares, ``B`` batch, ``S = 4`` padded source steps, ``T``
corners to predict (2), ``F = 2`` coordinates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from attnlab._validate import check_choice, check_int
from attnlab.data.squares.sequences import _NOISE_STD, CORNERS, check_seed, draw_walks, walk_corners

__all__ = ["Prefixes", "SquarePrefixes", "generate_prefixes"]

_MAX_GIVEN = 4  # generate_sequences(variable_len=True) draws 2 to 4 corners


class Prefixes(NamedTuple):
    """What :func:`generate_prefixes` returns.

    Attributes:
        points: ``N`` float64 arrays ``[L_i, 2]``, the given corners (``L_i`` 2 to 4):
            exactly ``generate_sequences(n, variable_len=True, seed=seed)[0]``.
        next_corners: float64 ``[N, T, 2]``, the ``T`` noisy corners that follow each walk.
        directions: int ``[N]``, 1 = clockwise, 0 = counter-clockwise (``generate_sequences``' too).
    """

    points: list[np.ndarray]
    next_corners: np.ndarray
    directions: np.ndarray


def generate_prefixes(n: int = 128, seed: int = 13, *, n_next: int = 2) -> Prefixes:
    """The book's variable-length squares, and the ``n_next`` corners that follow each one round the square.

    The given corners are ``generate_sequences(n, variable_len=True, seed=seed)``'s,
    number for number: the same ``RandomState(seed)`` draws in the same order. The
    noise of the following corners is drawn after them from the same stream, as
    ``randn(N, n_next, 2) * 0.1``.

    Args:
        n: how many squares, ``N >= 1``.
        seed: an integer in ``[0, 2**32 - 1]``; None is refused (the set must be repeatable).
        n_next: ``T >= 1``, corners to continue each walk by.

    Returns:
        A :class:`Prefixes` ``(points, next_corners [N, T, 2], directions [N])``.

    Raises:
        TypeError / ValueError: naming the argument and its value, for a bad count or seed.

    Example:
        >>> points, following, directions = generate_prefixes(n=3, seed=13)
        >>> [len(p) for p in points], following.shape
        ([2, 4, 4], (3, 2, 2))
    """
    n = check_int("n", n, minimum=1)
    n_next = check_int("n_next", n_next, minimum=1)
    if seed is None:
        raise TypeError("seed must be an integer, got None (the set would not be repeatable)")
    rng = np.random.RandomState(check_seed(seed))
    walks = draw_walks(rng, n, variable_len=True)
    steps = walks.lengths[:, None] + np.arange(n_next)[None, :]  # [N, T]: walk steps after the last given
    order = walk_corners(walks.bases, walks.directions, steps)  # [N, T]
    following = CORNERS[order] + rng.randn(n, n_next, 2) * _NOISE_STD  # [N, T, 2]
    return Prefixes(walks.points, following, walks.directions)


class SquarePrefixes(Dataset[tuple[dict[str, torch.Tensor], torch.Tensor]]):
    """Variable-length noisy squares (:func:`generate_prefixes`) as padded, masked ``(inputs, target)`` pairs.

    Item ``i`` is ``({"X": full[i], "source_mask": source_mask[i]}, target[i])``
    with ``inputs="full"`` (training: the padded source, then the target the
    model is teacher-forced with), and ``{"X": source[i], ...}`` with
    ``inputs="source"`` (what a model is evaluated on). A list of indices fetches
    a whole batch in one gather.

    Args:
        n: how many squares, ``N >= 1``.
        seed: the generator's seed (see :func:`generate_prefixes`).
        inputs: ``"full"`` or ``"source"``, what each item's ``X`` is.
        target_len: ``T``, the corners to predict after the given ones.

    Attributes:
        source: float32 ``[N, 4, 2]``, the given corners, right-padded with zeros.
        source_mask: bool ``[N, 1, 4]``, True on the given corners.
        lengths: int64 ``[N]``, how many corners are given (2 to 4).
        target: float32 ``[N, T, 2]``, the corners that follow.
        full: float32 ``[N, 4 + T, 2]``, ``source`` then ``target``.
        directions: int64 ``[N]``, 1 = clockwise.
        input_len: ``S = 4``, the padded source length (what a model is built with).

    Raises:
        TypeError / ValueError: naming the argument, for a bad ``n``, ``seed``,
            ``inputs`` or ``target_len``.

    Example:
        >>> train = SquarePrefixes(8, seed=13)
        >>> inputs, target = train[[0, 1]]
        >>> inputs["X"].shape, inputs["source_mask"].tolist(), target.shape
        (torch.Size([2, 6, 2]), [[[True, True, False, False]], [[True, True, True, True]]], torch.Size([2, 2, 2]))
    """

    input_len = _MAX_GIVEN

    def __init__(self, n: int = 128, seed: int = 13, *, inputs: str = "full", target_len: int = 2) -> None:
        self.inputs = check_choice("inputs", inputs, ("full", "source"))
        target_len = check_int("target_len", target_len, minimum=1)
        points, following, directions = generate_prefixes(n, seed, n_next=target_len)
        self.lengths = torch.tensor([len(p) for p in points], dtype=torch.long)  # [N]
        padded = np.zeros((len(points), _MAX_GIVEN, 2), dtype=np.float32)
        for i, p in enumerate(points):
            padded[i, : len(p)] = p
        self.source = torch.from_numpy(padded)  # [N, 4, 2]
        self.source_mask = (torch.arange(_MAX_GIVEN) < self.lengths[:, None]).unsqueeze(1)  # [N, 1, 4]
        self.target = torch.from_numpy(following.astype(np.float32))  # [N, T, 2]
        self.full = torch.cat([self.source, self.target], dim=1)  # [N, 4 + T, 2]
        self.directions = torch.from_numpy(directions).long()  # [N]

    def __len__(self) -> int:
        return self.source.shape[0]

    def __getitem__(self, index: int | list[int] | torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``({"X": [L, 2], "source_mask": [1, 4]}, target [T, 2])``, batched (``[B, ...]``) for a list of indices."""
        X = self.full[index] if self.inputs == "full" else self.source[index]
        return {"X": X, "source_mask": self.source_mask[index]}, self.target[index]
