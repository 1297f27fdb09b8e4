"""Drawing randomized positions: a sorted random subset of ``[0, L_max)``, and the check that a sequence fits.

What Ruoss et al. 2023's randomized encodings draw at every call
(:mod:`attnlab.encodings.randomized` for the schemes inside attention,
:mod:`attnlab.encodings.randomized_tables` for the tables added to the input).

A draw costs ``O(L log L)`` in the sequence length ``L``, whatever ``L_max``: the range
``[0, L_max)`` is never materialised past :data:`PERMUTE_UP_TO` positions (a
permutation of ``[0, 10**8)`` takes a gigabyte and a minute, at every call), so
``L_max`` can be as large as a position can be (:data:`MAX_RANGE`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._validate import check_int

__all__ = ["MAX_RANGE", "PERMUTE_UP_TO", "check_fits", "draw_bytes", "sample_positions"]

#: Up to this range a draw is the first ``n`` of ``torch.randperm(max_len)``, sorted: the
#: reference's choice-then-sort, and the draws of earlier versions for the same seed (the labs'
#: ranges are a few thousand). Past it the range is sampled without being materialised.
PERMUTE_UP_TO = 2**16

#: the largest ``max_len``: positions are int64, and drawn from 62 random bits
MAX_RANGE = 2**62


def sample_positions(
    n: int,
    max_len: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """A sorted random subset of ``n`` distinct positions of ``[0, max_len)``, uniform over subsets.

    Every subset of size ``n`` is equally likely, as with the reference's
    ``jax.random.choice(..., replace=False)`` followed by ``jnp.sort``. For
    ``max_len <= PERMUTE_UP_TO`` it is the first ``n`` entries of a uniform random
    permutation, sorted; past it, positions are drawn uniformly with replacement until
    ``n`` distinct ones are in hand, and ``n`` of those are kept at random
    (:func:`_subset`), in ``O(n log n)`` time and ``O(n)`` memory. Drawn on the CPU,
    from torch's global generator or ``generator``, and then moved to ``device``: the
    same seed gives the same positions on every device.

    Args:
        n: how many positions ``L``.
        max_len: the range ``L_max``; positions are ``0 .. max_len - 1``; at most :data:`MAX_RANGE`.
        generator: a CPU ``torch.Generator`` (default: the global one).
        device: where the result lives.

    Returns:
        int64 ``[n]``, strictly increasing.

    Raises:
        TypeError: for a non-integer ``n``/``max_len`` or a ``generator`` that is
            not a ``torch.Generator``.
        ValueError: if ``max_len < 1`` or above :data:`MAX_RANGE`, ``n < 0``, ``n > max_len``
            (naming both), or ``generator`` is not on the CPU.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> draw = sample_positions(4, 10)
        >>> draw.shape, bool((draw[1:] > draw[:-1]).all()), 0 <= int(draw.min()), int(draw.max()) < 10
        (torch.Size([4]), True, True, True)
        >>> sample_positions(3, 3)  # the whole range: nothing left to choose
        tensor([0, 1, 2])
        >>> int(sample_positions(5, 10**15).max()) < 10**15  # as fast as a draw from [0, 10)
        True
    """
    max_len = check_int("max_len", max_len, minimum=1, maximum=MAX_RANGE)
    n = check_int("n", n, minimum=0)
    if torch.compiler.is_compiling():
        torch._check_value(n <= max_len, lambda: f"cannot draw more than max_len={max_len} distinct positions")
    elif n > max_len:
        raise ValueError(f"cannot draw n={n} distinct positions from [0, max_len={max_len}): "
                         f"max_len must be at least n")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if generator.device.type != "cpu":
            raise ValueError(f"generator must be a CPU generator (draws are made on the CPU), "
                             f"got one on {generator.device}")
    if max_len <= PERMUTE_UP_TO:
        draw = torch.randperm(max_len, generator=generator)[:n].sort().values  # [n]
    else:
        draw = _subset(n, max_len, generator)  # [n]
    return draw if device is None else draw.to(device)


def _subset(n: int, max_len: int, generator: torch.Generator | None) -> Tensor:
    """``n`` sorted distinct positions of ``[0, max_len)``, uniform over subsets, in ``O(n log n)``.

    At most half the range: :func:`_sparse`. More: the positions left out are a sparse draw
    (a uniform subset's complement is a uniform subset), and the range, then at most ``2 n``
    long, is masked.
    """
    if 2 * n <= max_len:
        return _sparse(n, max_len, generator)  # [n]
    kept = torch.ones(max_len, dtype=torch.bool)  # [max_len], at most 2n
    kept[_sparse(max_len - n, max_len, generator)] = False
    return kept.nonzero().squeeze(1)  # [n], increasing


def _sparse(n: int, max_len: int, generator: torch.Generator | None) -> Tensor:
    """``n`` sorted distinct positions of ``[0, max_len)``, uniform over subsets, for ``2 n <= max_len``.

    Uniform draws with replacement (62 random bits each, the few above the largest multiple
    of ``max_len`` rejected, so every position is exactly as likely) are collected until at
    least ``n`` distinct positions are in hand; ``n`` of them are then kept, uniformly at
    random. Nothing in this depends on which positions were drawn, only on how many, so every
    ``n``-subset of the range is equally likely. With ``n <= max_len / 2`` the first batch
    (the expected number of draws, and a margin) almost always suffices.
    """
    limit = (MAX_RANGE // max_len) * max_len  # draws below it are uniform modulo max_len
    accept = limit / MAX_RANGE  # at least 1/2
    distinct = torch.zeros(0, dtype=torch.long)
    while distinct.numel() < n:
        need = n - distinct.numel()
        # Draws for `need` new positions when `have` are taken: max_len * ln((max_len - have) / (max_len - n)).
        expected = max_len * (math.log1p(-distinct.numel() / max_len) - math.log1p(-n / max_len))
        batch = math.ceil((expected + 4 * math.sqrt(expected) + 16) / accept)
        raw = torch.randint(0, MAX_RANGE, (max(batch, need),), generator=generator)  # [batch]
        distinct = torch.unique(torch.cat([distinct, raw[raw < limit] % max_len]))  # sorted
    keep = torch.randperm(distinct.numel(), generator=generator)[:n].sort().values  # [n]
    return distinct[keep]


def draw_bytes(n: int, max_len: int) -> int:
    """At most how many bytes :func:`sample_positions` allocates for ``n`` positions of ``[0, max_len)``.

    A permutation of the range up to :data:`PERMUTE_UP_TO`; past it, a few int64 arrays of
    about ``3 n`` entries (the draws with replacement, their distinct values, the kept ones)
    and, for ``n > max_len / 2``, a mask of the range, which is then at most ``2 n`` long.
    """
    if max_len <= PERMUTE_UP_TO:
        return 3 * 8 * max_len
    return 8 * (16 * n + 256) + (max_len if 2 * n > max_len else 0)


def check_fits(length: int, max_len: int, owner: str) -> None:
    """Refuse a sequence longer than the range its positions are drawn from.

    Raises:
        ValueError: naming ``max_len`` and ``L`` when ``length > max_len``.
    """
    if torch.compiler.is_compiling():
        # Traced (torch.compile, torch.export), a length read from position ids is a size not known while
        # tracing: asserted, so that the draw below may take it.
        torch._check_value(length <= max_len, lambda: f"{owner}(max_len={max_len}) cannot place a sequence longer "
                           "than max_len: build it with max_len at least the longest sequence it will see")
    elif length > max_len:
        raise ValueError(
            f"{owner}(max_len={max_len}) cannot place a sequence of length L={length}: it draws L distinct "
            f"positions from [0, max_len); build it with max_len at least the longest sequence it will see"
        )
