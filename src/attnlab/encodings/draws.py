"""Drawing randomized positions: a sorted random subset of ``[0, L_max)``, and the check that a sequence fits.

What Ruoss et al. 2023's randomized encodings draw at every call
(:mod:`attnlab.encodings.randomized` for the schemes inside attention,
:mod:`attnlab.encodings.randomized_tables` for the tables added to the input).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_int

__all__ = ["check_fits", "sample_positions"]


def sample_positions(
    n: int,
    max_len: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """A sorted random subset of ``n`` distinct positions of ``[0, max_len)``, uniform over subsets.

    The first ``n`` entries of a uniform random permutation, sorted: every subset
    of size ``n`` is equally likely, as the reference's
    ``jax.random.choice(..., replace=False)`` followed by ``jnp.sort``. Drawn on
    the CPU, from torch's global generator or ``generator``, and then moved to
    ``device``: the same seed gives the same positions on every device.

    Args:
        n: how many positions ``L``.
        max_len: the range ``L_max``; positions are ``0 .. max_len - 1``.
        generator: a CPU ``torch.Generator`` (default: the global one).
        device: where the result lives.

    Returns:
        int64 ``[n]``, strictly increasing.

    Raises:
        TypeError: for a non-integer ``n``/``max_len`` or a ``generator`` that is
            not a ``torch.Generator``.
        ValueError: if ``max_len < 1``, ``n < 0``, ``n > max_len`` (naming both),
            or ``generator`` is not on the CPU.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> draw = sample_positions(4, 10)
        >>> draw.shape, bool((draw[1:] > draw[:-1]).all()), 0 <= int(draw.min()), int(draw.max()) < 10
        (torch.Size([4]), True, True, True)
        >>> sample_positions(3, 3)  # the whole range: nothing left to choose
        tensor([0, 1, 2])
    """
    max_len = check_int("max_len", max_len, minimum=1)
    n = check_int("n", n, minimum=0)
    if n > max_len:
        raise ValueError(f"cannot draw n={n} distinct positions from [0, max_len={max_len}): "
                         f"max_len must be at least n")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if generator.device.type != "cpu":
            raise ValueError(f"generator must be a CPU generator (draws are made on the CPU), "
                             f"got one on {generator.device}")
    perm = torch.randperm(max_len, generator=generator)  # [max_len], on the CPU
    draw = perm[:n].sort().values  # [n]
    return draw if device is None else draw.to(device)


def check_fits(length: int, max_len: int, owner: str) -> None:
    """Refuse a sequence longer than the range its positions are drawn from.

    Raises:
        ValueError: naming ``max_len`` and ``L`` when ``length > max_len``.
    """
    if length > max_len:
        raise ValueError(
            f"{owner}(max_len={max_len}) cannot place a sequence of length L={length}: it draws L distinct "
            f"positions from [0, max_len); build it with max_len at least the longest sequence it will see"
        )
