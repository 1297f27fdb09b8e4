"""The noisy squares walked round and round: corner ``k + 4`` is corner ``k`` again, with fresh noise.

The length-generalisation lab's real-valued task (``--task squares``): a model is
given the first corners of a walk and predicts the rest, scored by mean squared
error. :func:`squares_task` draws the walks so that their first four corners are
the labs' squares (:func:`attnlab.data.generate_sequences`) number for number, and
so that a longer walk continues a shorter one exactly.

Shape notation: ``N`` walks, ``K`` corners, ``S`` given, ``T = K - S`` to predict, ``F = 2`` coordinates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from attnlab._limits import check_tensor
from attnlab._validate import check_int
from attnlab.data.squares.sequences import _NOISE_STD, CORNERS, check_seed, walk_corners

__all__ = ["BYTES_PER_CORNER", "SquaresBatch", "squares_task"]

#: at most the bytes one corner of a walk takes while the walks are drawn (numpy's float64 noise and corners, the
#: walk's indices, the float32 tensor): measured 60 to 80, rounded up
BYTES_PER_CORNER = 128


class SquaresBatch(NamedTuple):
    """Noisy squares walked for ``K`` corners: float32 points, no padding.

    Attributes:
        full: float32 ``[N, K, 2]``, the whole walk (what the labs' models are
            teacher-forced with in training).
        source: float32 ``[N, S, 2]``, the corners given (``full[:, :S]``).
        target: float32 ``[N, T, 2]``, the corners to predict, ``T = K - S``.
        directions: int64 ``[N]``, 1 = clockwise, 0 = counter-clockwise.
    """

    full: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    directions: torch.Tensor

    def to(self, device: torch.device | str) -> SquaresBatch:
        """The same batch with every tensor on ``device``."""
        return SquaresBatch(*(t.to(device) for t in self))


def squares_task(n: int, n_corners: int = 4, *, n_given: int = 2, seed: int = 13) -> SquaresBatch:
    """Noisy squares walked for ``n_corners`` corners: the first ``n_given`` given, the rest to predict.

    A walk visits the square's corners in its direction and goes on round:
    corner ``k + 4`` is corner ``k`` again, with fresh Gaussian noise (std 0.1).
    The draws replay :func:`attnlab.data.generate_sequences`'s order on one
    ``numpy.random.RandomState(seed)`` (starting corners, directions, the noise
    of 4 corners per square) and then continue the same stream with the noise
    of corners 5, 6, ..., corner after corner (every square's 5th, then every
    square's 6th, ...). So:

    * the first ``min(K, 4)`` corners equal ``generate_sequences(n, seed=seed)``'s
      number for number (with ``seed=13``, the labs' training squares);
    * for one seed, a longer walk continues the shorter one: test sets at
      several lengths hold the same squares, walked further.

    Args:
        n: how many squares, ``N >= 1``.
        n_corners: ``K``, corners per walk, at least ``n_given + 1``.
        n_given: ``S``, the corners a model is given (the labs: 2), at least 1.
        seed: an integer in ``[0, 2**32 - 1]``; None is refused, the set must be repeatable.

    Returns:
        A :class:`SquaresBatch`: ``full [N, K, 2]``, ``source [N, S, 2]``,
        ``target [N, K - S, 2]`` (float32, CPU) and ``directions [N]``.

    Raises:
        TypeError / ValueError: naming the argument and value, for a bad count,
            ``n_corners <= n_given``, ``n_given < 1`` or a bad or missing seed; naming ``n`` and
            ``n_corners`` and the memory they would need, for walks that cannot fit.
    """
    n = check_int("n", n, minimum=1)
    n_given = check_int("n_given", n_given, minimum=1)
    n_corners = check_int("n_corners", n_corners, minimum=1)
    if n_corners <= n_given:
        raise ValueError(f"n_corners ({n_corners}) must exceed n_given ({n_given}): nothing would be left to predict")
    if seed is None:
        raise TypeError("seed must be an integer, got None (the set would not be repeatable)")
    rng_seed = check_seed(seed)
    check_tensor({"n": n, "n_corners": n_corners}, "the walks", itemsize=BYTES_PER_CORNER)
    rng = np.random.RandomState(rng_seed)

    # generate_sequences(n, seed=seed)'s draws, in its order, then the later corners' noise.
    bases = rng.randint(4, size=n)  # [N]
    directions = rng.randint(2, size=n)  # [N]
    noise = rng.randn(4 * n, 2).reshape(n, 4, 2) * _NOISE_STD  # [N, 4, 2]
    if n_corners > 4:
        # Corner-major (every square's 5th corner, then every 6th, ...): the draws for the first
        # K corners do not depend on K, so a longer walk continues a shorter one exactly.
        more = rng.randn(n_corners - 4, n, 2).transpose(1, 0, 2) * _NOISE_STD  # [K - 4, N, 2] -> [N, K - 4, 2]
        noise = np.concatenate([noise, more], axis=1)  # [N, K, 2]
    order = walk_corners(bases, directions, np.arange(n_corners))  # [N, K]: the walk goes on round past corner 4
    full = torch.from_numpy((CORNERS[order] + noise[:, :n_corners]).astype(np.float32))  # [N, K, 2]
    return SquaresBatch(full, full[:, :n_given], full[:, n_given:], torch.from_numpy(directions).long())
