"""Position coupling: a learned absolute table read at the task's coupled position ids, from a random start.

Cho et al. 2024, "Position Coupling: Improving Length Generalization of Arithmetic
Transformers Using Task Structure" (NeurIPS, arXiv:2405.20671). Tokens the task
relates share a position id: in addition, the digits of equal significance in both
operands and in the answer. The ids are the data's
(:func:`attnlab.data.arithmetic.numbering.coupled_positions`: an operator 1, the
digit of significance ``i`` ``i + 2``, BOS/EOS/padding 0), passed as
``position_ids``; this module is the learned table they index.

Training shifts every id > 0 of row ``b`` by ``k_b``, uniform over
``0 .. max_position - 1 - m_b`` (``m_b`` the row's largest id): every shift that
keeps the row in the table, so every row is trained and a longer test answer reads
trained rows. The authors' rule (``AdditionDatasetWithCoupledPositions.__getitem__``,
``src/data/addition.py`` of github.com/HanseulJo/position-coupling) is the same:
``start`` uniform over ``1 .. max_position - len(answer)`` per sample, operators at
``start``, digits from ``start + 1``, a table of ``max_position + 1`` rows
(``n_positions``), added tokens at 0. Evaluation shifts nothing (their ``start = 1``).

The table starts N(0, 1) (their ``wpe``: ``nn.Embedding`` filled with
``normal_(0, initializer_factor * 1.0)``, factor 1) and is added to the token
embeddings where a model adds an absolute table
(``h = input_position(h, offset=offset, position_ids=position_ids)``).

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.encodings.scheme import ModelSizes
from attnlab.encodings.shifted_table import DEFAULT_MAX_POSITION, ShiftedPositionTable, check_rows

__all__ = ["CoupledPositions"]


class CoupledPositions(ShiftedPositionTable):
    """Add ``table[position_ids + k]``: coupled ids, started at a random place per row in training.

    ``forward(h, position_ids=p)[b, l] = h[b, l] + pe[p[b, l] + k_b]`` where ``p[b, l] > 0``
    and ``h[b, l] + pe[0]`` elsewhere; in training ``k_b`` is uniform over
    ``0 .. max_position - 1 - max_l p[b, l]`` (every start that keeps the row in the
    table), in evaluation 0.

    Args:
        d_model: model dimension ``D``.
        max_position: table rows (the authors' ``n_positions``, their ``max_position + 1``);
            above the largest id a test sequence holds, which is what makes its rows trained.
        std: standard deviation of the table's N(0, std) start.
        generator: a CPU ``torch.Generator`` the starts are drawn from; None draws from
            torch's global generator.

    Attributes:
        pe: ``nn.Parameter`` ``[max_position, D]``.
        last_offsets: the starts of the latest call, int64 ``[B]`` (None before the first
            call and after an evaluation call); for inspection only.

    Raises:
        TypeError / ValueError: for a bad size, ``std`` or ``generator``.

    Example:
        >>> from attnlab.data.arithmetic import encode
        >>> from attnlab.data.arithmetic import coupled_positions
        >>> p = coupled_positions(encode("75+86=521")[None])  # 57 + 68 = 125, reversed
        >>> p
        tensor([[2, 3, 1, 2, 3, 1, 2, 3, 4]])
        >>> coupling = CoupledPositions(d_model=4, max_position=8, generator=torch.Generator().manual_seed(0))
        >>> _ = coupling(torch.zeros(1, 9, 4), position_ids=p)  # training: a start in 0 .. 8 - 1 - 4
        >>> 0 <= int(coupling.last_offsets[0]) <= 3
        True
    """

    #: the rule by which a task gives this encoding its positions (``Task.positions``): the model reads it,
    #: the length lab asks the task for ``position_ids`` by it.
    task_positions = "coupling"

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> CoupledPositions:
        """The table a model adds to its embeddings: a row per id its longest sequence can hold.

        Ids count the digits of one number from 2, so a sequence of ``max_len`` tokens holds
        ids below ``max_len + 2``; training then starts rows anywhere in that range, and
        every row a test sequence reads is trained (1024 rows without ``max_len``).
        """
        rows = DEFAULT_MAX_POSITION if sizes.max_len is None else sizes.max_len + 2
        return cls(d_model=sizes.d_model, max_position=rows)

    def __init__(
        self,
        *,
        d_model: int,
        max_position: int = DEFAULT_MAX_POSITION,
        std: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(d_model=d_model, max_position=max_position, std=std, generator=generator)

    def draw_offsets(self, largest: Tensor) -> Tensor:
        """One start per row, int64 ``[B]``: uniform over ``0 .. max_position - 1 - largest[b]``.

        Drawn on the CPU from ``generator`` (or torch's global one).

        Args:
            largest: each row's largest id, int64 ``[B]``, below ``max_position``.

        Raises:
            ValueError: if a row's largest id is not below ``max_position``.
        """
        largest = largest.to("cpu", torch.int64)
        check_rows(largest, self.max_position, type(self).__name__, "")
        choices = self.max_position - largest  # [B]: how many starts keep the row in the table
        if self.generator is None:  # not generator=None, which torch.compile refuses with a batch of dynamic size
            u = torch.rand(largest.shape, dtype=torch.float64)  # [B]
        else:
            u = torch.rand(largest.shape, generator=self.generator, dtype=torch.float64)
        return torch.minimum((u * choices).long(), choices - 1)  # [B]

    def shift(self, ids: Tensor) -> Tensor:
        """Every id > 0 of a row of ``ids [B, L]`` moved by that row's start; the tokenizer's tokens stay at 0.

        Raises:
            ValueError: if an id is past ``max_position`` before any shift.
        """
        check_rows(ids, self.max_position, type(self).__name__, "")
        largest = ids.amax(dim=1) if ids.shape[1] else ids.new_zeros(ids.shape[0])  # [B]
        k = self.draw_offsets(largest)  # [B], on the CPU
        self.last_offsets = k
        return torch.where(ids > 0, ids + k.to(ids.device)[:, None], ids)  # [B, L]

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"d_model={self.d_model}, max_position={self.max_position}"
