"""A run's memory, bounded before anything is built: its costs, the one check of them, the parameter formula.

A lab counts what a run allocates from its settings alone (the length lab:
:func:`attnlab.labs.lengths.costs.costs`; the squares lab bounds its model's parameters
with :func:`transformer_parameters`), so a run that cannot fit is refused in milliseconds,
at the memory of the import, and before anything is written. When the bound refuses, the
message opens with the setting that costs the most (the command line turns ``n_symbols``
into ``--symbols``): that is the flag that makes the run too large.

The memory it is compared with is what the machine has available
(:func:`attnlab._limits.available_memory`), or ``ATTNLAB_MEMORY_BUDGET`` where that is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab._limits import check_memory, format_bytes

__all__ = ["Cost", "check_costs", "transformer_parameters"]

_FLOAT = 4  # bytes of a float32
_ADAM = 4  # copies of every parameter while training: the value, its gradient, Adam's two moments


@dataclass(frozen=True)
class Cost:
    """Bytes one part of a run allocates, and the setting that sets its size.

    Attributes:
        setting: the config field (``"n_symbols"``, ``"test_lens"``, ``"l_max"``, ...).
        value: its value, as the message shows it.
        what: what the bytes are, for the message.
        n_bytes: the estimate.
        transient: True when it lives during one phase only (a training step, the test
            decoding): the phases' largest is added to what lives throughout.
    """

    setting: str
    value: Any
    what: str
    n_bytes: int
    transient: bool = False


def transformer_parameters(*, d_model: int, n_heads: int, head_dim: int, n_layers: int, ff_units: int,
                           stacks: int = 2) -> int:
    """At most how many parameters ``stacks`` stacks of ``n_layers`` Transformer layers hold.

    Each layer has at most three attentions (self, cross and the lab's extra) of ``H``
    heads ``Dh`` wide, projections in and out (``4 H Dh D`` each, biases within the
    ``16 D``), a feed-forward network ``D -> F -> D`` and its norms. ``Dh = D / H`` for
    attnlab's Transformers; ``Dh = D`` for the labs' wide heads.

    Example:
        >>> transformer_parameters(d_model=64, n_heads=4, head_dim=16, n_layers=2, ff_units=256)
        331776
    """
    per_layer = 12 * n_heads * head_dim * d_model + 2 * d_model * ff_units + 16 * d_model
    return stacks * n_layers * per_layer


def parameter_bytes(n_parameters: int) -> int:
    """Bytes of ``n_parameters`` float32 parameters while Adam trains them (value, gradient, two moments)."""
    return n_parameters * _FLOAT * _ADAM


def check_costs(costs: Sequence[Cost]) -> None:
    """Refuse a run whose costs exceed the memory available, naming the setting that costs the most.

    What lives throughout (the parameters, the data) is added to the largest of the
    transient costs (a training step or the test decoding: they do not overlap).

    Raises:
        ValueError: ``"{setting} {value}: {what} would need ..., more than the ... available"``.
    """
    if not costs:
        return
    lasting = sum(c.n_bytes for c in costs if not c.transient)
    phase = max((c.n_bytes for c in costs if c.transient), default=0)
    total = lasting + phase
    worst = max(costs, key=lambda c: c.n_bytes)
    rest = total - worst.n_bytes
    tail = f" (and {format_bytes(rest)} for the rest of the run)" if rest > worst.n_bytes // 100 else ""
    check_memory(f"{worst.setting} {worst.value}: {worst.what}{tail}", total)
