"""The noisy-squares task of the labs: sequences of the corners of a square, walked either way.

Each sequence starts at a random corner of the square with corners
``A = (-1, -1)``, ``B = (-1, 1)``, ``C = (1, 1)``, ``D = (1, -1)`` and visits the
corners in order, clockwise (``A -> B -> C -> D``, direction 1) or
counter-clockwise (direction 0), each point jittered by Gaussian noise of
standard deviation 0.1. A model sees the first two corners and predicts the
other two; the direction is only implied by those two points and their start.

:func:`generate_sequences` reproduces the book's generator
(``data_generation/square_sequences.py`` in dvgodoy/PyTorchStepByStep, used by
the positional-encoding lab and the attention lab) number for number, without its
side effect: it draws from its own ``numpy.random.RandomState``, so numpy's
global random state is left alone. :func:`squares_tensor` stacks the sequences
into one tensor, without the slow ``torch.as_tensor(list_of_arrays)`` of the labs.

Shape notation: ``N`` sequences, ``L`` points per sequence, ``F`` features (2).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["CORNERS", "Walks", "draw_walks", "generate_sequences", "squares_tensor", "walk_corners"]

# A, B, C, D: walking them in this order goes round the square clockwise.
CORNERS = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])
_NOISE_STD = 0.1
_MAX_SEED = 2**32 - 1  # what numpy.random.RandomState accepts


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """``seed`` as an int in ``[0, 2**32 - 1]`` (what numpy accepts) or None; errors name ``name``."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an integer or None, got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) <= _MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**32 - 1], got {seed}")
    return int(seed)


def generate_sequences(
    n: int = 128, variable_len: bool = False, seed: int | None = 13
) -> tuple[list[np.ndarray], np.ndarray]:
    """Noisy squares, exactly the labs' (and the book's) for the same ``seed``.

    The random draws come in the book's order, from ``RandomState(seed)``, whose
    stream is the one ``np.random.seed(seed)`` gives the ``np.random`` functions:

    1. the starting corners, ``randint(4, size=n)``;
    2. only if ``variable_len``: the lengths, ``randint(3, size=n) + 2`` (2 to 4);
    3. the directions, ``randint(2, size=n)``, 1 = clockwise;
    4. the noise, ``randn(l, 2) * 0.1``, sequence after sequence.

    Because of that order, ``variable_len=True`` also changes the directions
    drawn for a given seed. A clockwise sequence starting at corner ``b`` visits
    ``b, b+1, b+2, b+3`` (mod 4); a counter-clockwise one is the reverse,
    ``b+3, b+2, b+1, b``.

    Unlike the book, numpy's global random state is neither read nor changed.

    Args:
        n: how many sequences, ``N >= 1``.
        variable_len: draw a length of 2, 3 or 4 points per sequence (the first
            points of its square); otherwise every sequence has all 4 corners.
        seed: an integer in ``[0, 2**32 - 1]``, the same number the book passes
            to ``np.random.seed``; or None for fresh, unrepeatable randomness
            from the operating system (as ``np.random.seed(None)``).

    Returns:
        ``(points, directions)``: a list of ``N`` float64 arrays ``[L, 2]``
        (``L = 4``, or 2 to 4 with ``variable_len``), and an integer array ``[N]``
        of 0 (counter-clockwise) and 1 (clockwise).

    Raises:
        TypeError: if ``n`` or ``seed`` is not an integer, or ``variable_len`` not a bool.
        ValueError: if ``n < 1`` or ``seed`` is out of range.

    Example:
        >>> points, directions = generate_sequences(n=256, seed=13)
        >>> len(points), points[0].shape, directions[:10].tolist()
        (256, (4, 2), [0, 1, 1, 1, 0, 1, 1, 1, 0, 1])
        >>> points[0].round(4)  # starts at B, counter-clockwise: B, A, D, C
        array([[-0.9708,  0.961 ],
               [-0.9525, -1.0072],
               [ 1.1269, -0.9743],
               [ 0.8336,  0.9878]])
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an integer, got {n!r} ({type(n).__name__})")
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    if not isinstance(variable_len, (bool, np.bool_)):
        raise TypeError(f"variable_len must be a bool, got {variable_len!r} ({type(variable_len).__name__})")
    n = int(n)
    rng = np.random.RandomState(check_seed(seed))
    walks = draw_walks(rng, n, variable_len=bool(variable_len))
    return walks.points, walks.directions


class Walks(NamedTuple):
    """The book's draws for ``N`` sequences (:func:`draw_walks`).

    Attributes:
        bases: int ``[N]``, the starting corner (an index into :data:`CORNERS`).
        lengths: int ``[N]``, the points drawn per sequence.
        directions: int ``[N]``, 1 = clockwise, 0 = counter-clockwise.
        points: ``N`` float64 arrays ``[L_i, 2]``, the noisy corners.
    """

    bases: np.ndarray
    lengths: np.ndarray
    directions: np.ndarray
    points: list[np.ndarray]


def walk_corners(bases: np.ndarray, directions: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The corner indices ``[N, K]`` visited at walk ``steps`` (``[K]``, or ``[N, K]`` per walk; 0 = the start,
    and past step 3 the walk goes on round).

    Clockwise from corner ``b`` the walk visits ``b, b+1, b+2, ...`` (mod 4); counter-clockwise
    the book reverses the four corners, ``b+3, b+2, b+1, b``, so step ``i`` is ``b + 3 - i`` (mod 4).
    """
    clockwise = (bases[:, None] + steps) % 4  # [N, K]
    counter = (bases[:, None] + 3 - steps) % 4  # [N, K]
    return np.where(directions[:, None] == 1, clockwise, counter)


def draw_walks(rng: np.random.RandomState, n: int, *, variable_len: bool) -> Walks:
    """Draw ``n`` noisy walks from ``rng`` in the book's order (see :func:`generate_sequences`).

    ``rng`` is left just after the book's draws, so a caller can draw more from it
    (:func:`attnlab.data.generate_prefixes` draws the corners that follow).
    """
    bases = rng.randint(4, size=n)
    lengths = rng.randint(3, size=n) + 2 if variable_len else np.full(n, 4)
    directions = rng.randint(2, size=n)
    # One draw for all the noise: the legacy Gaussian stream does not depend on
    # how it is split into calls, so this equals the book's randn(l, 2) per sequence.
    noise = rng.randn(int(lengths.sum()), 2) * _NOISE_STD
    order = walk_corners(bases, directions, np.arange(4))  # [N, 4]
    ends = np.cumsum(lengths)
    points = [CORNERS[order[i, :length]] + noise[end - length : end]
              for i, (length, end) in enumerate(zip(lengths, ends, strict=True))]
    return Walks(bases, lengths, directions, points)


def squares_tensor(points: Sequence[Any] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """Sequences of equal length as one float32 tensor ``[N, L, F]``.

    The labs' ``torch.as_tensor(points).float()``, without the slow
    element-by-element conversion (and its warning): the arrays are stacked by
    numpy first.

    Args:
        points: a list of ``N`` arrays or tensors ``[L, F]`` of the same shape
            (as :func:`generate_sequences` returns), or an array/tensor ``[N, L, F]``.

    Returns:
        A float32 CPU tensor ``[N, L, F]``.

    Raises:
        TypeError: if ``points`` holds something that is not numbers.
        ValueError: if ``points`` is empty, a sequence is not ``[L, F]``, or the
            lengths differ (pad them with :func:`attnlab.data.pad_sequences`).

    Example:
        >>> points, _ = generate_sequences(n=5)
        >>> squares_tensor(points).shape
        torch.Size([5, 4, 2])
    """
    if isinstance(points, torch.Tensor):
        arrays: Any = points.detach().cpu().numpy()
    elif isinstance(points, np.ndarray):
        arrays = points
    else:
        if isinstance(points, (str, bytes)) or not isinstance(points, Sequence):
            raise TypeError(f"points must be a list of [L, F] arrays or an [N, L, F] array, "
                            f"got {type(points).__name__}")
        arrays = [p.detach().cpu().numpy() if isinstance(p, torch.Tensor) else p for p in points]
        if len(arrays) == 0:
            raise ValueError("points is empty; need at least one sequence")
        try:
            arrays = [np.asarray(p, dtype=np.float32) for p in arrays]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"points must hold arrays of numbers: {exc}") from exc
        shapes = {a.shape for a in arrays}
        for i, a in enumerate(arrays):
            if a.ndim != 2:
                raise ValueError(f"points[{i}] must be [L, F], got shape {list(a.shape)}")
        if len(shapes) > 1:
            lengths = sorted({a.shape[0] for a in arrays})
            raise ValueError(
                f"points have different shapes {sorted(shapes)} (lengths {lengths}); "
                "pad them with attnlab.data.pad_sequences(points), which also returns the mask"
            )
        arrays = np.stack(arrays)
    try:
        stacked = np.asarray(arrays, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"points must hold numbers: {exc}") from exc
    if stacked.ndim != 3 or stacked.shape[0] == 0:
        raise ValueError(f"points must be N >= 1 sequences [L, F], i.e. [N, L, F], got shape "
                         f"{list(stacked.shape)}")
    return torch.from_numpy(np.ascontiguousarray(stacked))
