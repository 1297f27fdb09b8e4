"""A learned table read at the task's position ids, shifted at random in training: what Abacus and coupling share.

Abacus embeddings (:mod:`attnlab.encodings.abacus`) and position coupling
(:mod:`attnlab.encodings.coupling`) are both an ``nn.Embedding``-like table added to the
token embeddings at positions the task gives (``position_ids [B, L]``: a digit's place by
its significance, 0 for tokens that are no digit), every id above 0 moved by a random
per-row shift in training so that rows past the training lengths are trained too. They
differ only in how the shift is drawn: :meth:`ShiftedPositionTable.shift`.

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._limits import check_tensor
from attnlab._validate import check_finite_float, check_int
from attnlab.encodings.positional import check_sequence_input

__all__ = ["DEFAULT_MAX_POSITION", "ShiftedPositionTable", "check_generator", "check_position_ids", "check_rows"]

#: the authors' table rows (``max_seq_length``), for a model that does not say how long it reads.
DEFAULT_MAX_POSITION = 1024


def check_position_ids(h: Tensor, position_ids: object, owner: str) -> Tensor:
    """``position_ids`` as int64 ``[B, L]`` if they fit ``h [B, L, D]`` and are not negative.

    Raises:
        ValueError: for missing ids (``None``: the task's positions are needed), a shape
            other than ``h``'s ``[B, L]``, or a negative id.
        TypeError: for ids that are not an integer tensor.
    """
    if position_ids is None:
        raise ValueError(
            f"{owner} needs position_ids [B, L]: its positions are the task's (each digit's place in its "
            f"number), not the tokens' order; compute them from the symbols "
            f"(attnlab.data.arithmetic.numbering.digit_positions / coupled_positions) and pass position_ids="
        )
    if not isinstance(position_ids, Tensor) or position_ids.is_floating_point() or position_ids.is_complex() \
            or position_ids.dtype == torch.bool:
        what = position_ids.dtype if isinstance(position_ids, Tensor) else type(position_ids).__name__
        raise TypeError(f"{owner} needs integer position_ids [B, L], got {what}")
    if tuple(position_ids.shape) != tuple(h.shape[:2]):
        raise ValueError(f"{owner} needs position_ids of shape [B, L] = {list(h.shape[:2])} (the input's), "
                         f"got {list(position_ids.shape)}")
    if position_ids.numel() and torch.compiler.is_compiling():
        # Traced (torch.compile, torch.export), the ids cannot be read back: checked inside the graph.
        torch._assert_async((position_ids >= 0).all(), f"{owner}: position_ids must be >= 0")
    elif position_ids.numel() and int(position_ids.min()) < 0:
        raise ValueError(f"{owner}: position_ids must be >= 0, got {int(position_ids.min())}")
    return position_ids.to(device=h.device, dtype=torch.int64)


def check_rows(ids: Tensor, max_position: int, owner: str, why: str) -> None:
    """Refuse ids (int, any shape) past the table of ``max_position`` rows.

    Raises:
        ValueError: naming ``max_position`` and the largest id when ``ids`` reach past it.
    """
    if ids.numel() and torch.compiler.is_compiling():
        # Traced (torch.compile, torch.export), the ids cannot be read back: checked inside the graph.
        torch._assert_async((ids < max_position).all(), f"{owner}(max_position={max_position}) has no row for "
                            f"some position{why}; build it with max_position above the largest position it will see")
    elif ids.numel() and int(ids.max()) >= max_position:
        raise ValueError(f"{owner}(max_position={max_position}) has no row for position {int(ids.max())}{why}; "
                         f"build it with max_position above the largest position it will see")


def check_generator(generator: object) -> torch.Generator | None:
    """``generator`` if it is None or a CPU ``torch.Generator`` (training offsets are drawn on the CPU).

    Raises:
        TypeError: for anything else; ValueError: for a generator on another device.
    """
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU generator (offsets are drawn on the CPU), got one on "
                         f"{generator.device}")
    return generator


class ShiftedPositionTable(nn.Module):
    """Add ``table[position_ids + k]`` to the embeddings, ``k`` drawn per row in training by :meth:`shift`.

    Args:
        d_model: model dimension ``D``.
        max_position: table rows.
        std: standard deviation of the table's N(0, std) start.
        generator: a CPU ``torch.Generator`` the shifts are drawn from; None draws from
            torch's global generator.

    Attributes:
        pe: ``nn.Parameter`` ``[max_position, D]``.
        last_offsets: the shifts of the latest call, int64 ``[B]`` (None before the first
            call and after an evaluation call); for inspection only.

    Raises:
        TypeError / ValueError: for a bad size, ``std`` or ``generator``.
    """

    def __init__(self, *, d_model: int, max_position: int, std: float, generator: torch.Generator | None) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.max_position = check_int("max_position", max_position, minimum=2)
        self.std = check_finite_float("std", std, positive=True)
        self.generator = check_generator(generator)
        check_tensor({"max_position": self.max_position, "d_model": self.d_model}, "the learned table")
        self.pe = nn.Parameter(torch.empty(self.max_position, self.d_model))  # [max_position, D]
        self.last_offsets: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the table from N(0, ``std``) (torch's global generator, as every weight)."""
        with torch.no_grad():
            nn.init.normal_(self.pe, mean=0.0, std=self.std)

    @property
    def caches(self) -> bool:
        """Whether decoding may continue from a cache: in evaluation only (a training call draws new shifts)."""
        return not self.training

    def shift(self, ids: Tensor) -> Tensor:
        """The ids ``[B, L]`` of a training call, shifted (and checked against the table); sets ``last_offsets``.

        Raises:
            NotImplementedError: in the base class (each table draws its own shifts).
        """
        raise NotImplementedError

    def forward(self, h: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Add the rows at ``position_ids`` (shifted by this call's draws in training) to ``h [B, L, D]``.

        Args:
            h: token embeddings ``[B, L, D]``.
            offset: where ``h`` starts in the sequence (a decoding step after cached ones);
                not used: ``position_ids`` already say where each token is.
            position_ids: the task's ids, int ``[B, L]``
                (:mod:`attnlab.data.arithmetic.numbering`), 0 for a token that is no digit.

        Returns:
            ``[B, L, D]``, in ``h``'s dtype.

        Raises:
            TypeError / ValueError: for ``h`` that is not floating ``[B, L, D]``, a negative
                ``offset``, ``position_ids`` missing, of another shape or negative, or an
                id (shifted, in training) past ``max_position``.
        """
        name = type(self).__name__
        check_sequence_input(h, self.d_model, name)
        check_int("offset", offset, minimum=0)
        ids = check_position_ids(h, position_ids, name)  # [B, L]
        self.last_offsets = None
        if self.training:
            ids = self.shift(ids)  # [B, L]
        else:
            check_rows(ids, self.max_position, name, "")
        return h + self.pe[ids].to(h.dtype)  # [B, L, D] + [B, L, D]
