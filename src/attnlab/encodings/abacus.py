"""Abacus embeddings: a learned vector per digit index within a number, shifted at random in training.

McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings"
(arXiv:2405.17399). To add long numbers a model must line up digits of equal
significance, which a position over the whole sequence does not give. Abacus
numbers each digit from the start of its own number (least significant first), so
the ``i``-th digit of every operand and of the answer shares a learned vector. The
indices are the data's (:func:`attnlab.data.arithmetic.numbering.digit_positions`:
``1, 2, ...`` along a number, 0 for other tokens), passed as ``position_ids``.

Training adds a random offset ``k``, uniform over ``0 .. max_offset``, to every
index > 0, so rows past the longest training number are trained too. That is the
authors' code (``Abacus.forward`` in ``cramming/architectures/embeddings.py`` of
github.com/mcleish7/arithmetic: ``k = random.randint(0, self.max_k)``, both ends
included), with ``max_k`` = ``arch.embedding.max_abacus_len`` = 100 in their
training configuration (``cramming/config/arch/*.yaml``, ``components.py``; the
standalone ``abacus.py`` defaults to 99). They draw one ``k`` per forward pass,
shared by the whole (micro-)batch (embeddings.py line 531; abacus.py line 62): the
default here (``per_row=False``); ``per_row=True`` draws one per row, as position
coupling does. Evaluation adds no offset.

The table has ``max_position`` rows initialised N(0, 1) (theirs:
``torch.nn.Embedding(max_seq_length, embedding_dim)``, 1024 rows) and is added to
the token embeddings where a model adds an absolute table
(``h = input_position(h, offset=offset, position_ids=position_ids)``); the authors
pair it with no scheme in attention, or with FIRE or RoPE (``shells/addition_ff.sh``).

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_bool, check_int
from attnlab.encodings.scheme import ModelSizes
from attnlab.encodings.shifted_table import DEFAULT_MAX_POSITION, ShiftedPositionTable, check_rows

__all__ = ["AbacusEmbedding"]


class AbacusEmbedding(ShiftedPositionTable):
    """Add a learned row per digit index, ``table[position_ids + k]``, with a random ``k`` in training.

    ``forward(h, position_ids=p)[b, l] = h[b, l] + pe[p[b, l] + k_b]`` where ``p[b, l] > 0``
    (digits) and ``h[b, l] + pe[0]`` elsewhere; ``k_b`` uniform over ``0 .. max_offset``
    in training (one per call, the authors' rule, or one per row with ``per_row=True``), 0 in evaluation.

    Args:
        d_model: model dimension ``D``.
        max_position: table rows; the largest index plus ``max_offset`` must stay below it.
        max_offset: the largest training offset, both ends drawn (100: the authors'
            ``max_abacus_len``); 0 draws none.
        per_row: False (default): one offset serves the whole call, every row of the batch
            (the authors' code); True: each row draws its own.
        std: standard deviation of the table's N(0, std) start (1: ``nn.Embedding``'s).
        generator: a CPU ``torch.Generator`` the offsets are drawn from; None draws from
            torch's global generator (as the randomized tables do).

    Attributes:
        pe: ``nn.Parameter`` ``[max_position, D]``.
        last_offsets: the offsets of the latest call, int64 ``[B]`` (None before the first
            call and after an evaluation call); for inspection only.

    Raises:
        TypeError / ValueError: for a bad size, ``std``, ``per_row`` or ``generator``.

    Example:
        >>> from attnlab.data.arithmetic import encode
        >>> from attnlab.data.arithmetic import digit_positions
        >>> seq = encode("75+86=521")[None]  # 57 + 68 = 125, reversed
        >>> p = digit_positions(seq)
        >>> p
        tensor([[1, 2, 0, 1, 2, 0, 1, 2, 3]])
        >>> abacus = AbacusEmbedding(d_model=4, max_position=110).eval()
        >>> out = abacus(torch.zeros(1, 9, 4), position_ids=p)
        >>> torch.equal(out[0, 0], out[0, 3]) and torch.equal(out[0, 0], out[0, 6])  # every units digit
        True
    """

    #: the rule by which a task gives this encoding its positions (``Task.positions``): the model reads it,
    #: the length lab asks the task for ``position_ids`` by it.
    task_positions = "abacus"

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> AbacusEmbedding:
        """The table a model adds to its embeddings: a row per index it can read, plus the offsets.

        A number in a sequence of ``max_len`` tokens has fewer than ``max_len`` digits, so
        ``max_len + max_offset + 1`` rows hold every index training and evaluation reach
        (1024 + 101 rows without ``max_len``).
        """
        longest = DEFAULT_MAX_POSITION if sizes.max_len is None else sizes.max_len
        return cls(d_model=sizes.d_model, max_position=longest + 101, max_offset=100)

    def __init__(
        self,
        *,
        d_model: int,
        max_position: int = DEFAULT_MAX_POSITION,
        max_offset: int = 100,
        per_row: bool = False,
        std: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(d_model=d_model, max_position=max_position, std=std, generator=generator)
        self.max_offset = check_int("max_offset", max_offset, minimum=0, maximum=self.max_position - 2)
        self.per_row = check_bool("per_row", per_row)

    def draw_offsets(self, batch: int) -> Tensor:
        """The offsets of one training call, int64 ``[B]``: uniform over ``0 .. max_offset``.

        Drawn on the CPU from ``generator`` (or torch's global one), so a seed gives the
        same offsets on every device; one value repeated with ``per_row=False``.

        Raises:
            TypeError / ValueError: for a ``batch`` that is not an integer >= 0.
        """
        batch = check_int("batch", batch, minimum=0)
        size = (batch if self.per_row else 1,)
        if self.generator is None:  # not generator=None, which torch.compile refuses with a batch of dynamic size
            draws = torch.randint(0, self.max_offset + 1, size)
        else:
            draws = torch.randint(0, self.max_offset + 1, size, generator=self.generator)
        return draws if self.per_row else draws.expand(batch).clone()  # [B]

    def shift(self, ids: Tensor) -> Tensor:
        """Every digit's index in ``ids [B, L]`` (ids > 0) moved by the row's offset, checked against the table.

        Raises:
            ValueError: if an index plus its offset is past ``max_position``.
        """
        k = self.draw_offsets(ids.shape[0])  # [B], on the CPU
        self.last_offsets = k
        ids = torch.where(ids > 0, ids + k.to(ids.device)[:, None], ids)  # [B, L]: digits move, others stay
        check_rows(ids, self.max_position, type(self).__name__,
                   f" (index plus a training offset up to {self.max_offset})")
        return ids

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"d_model={self.d_model}, max_position={self.max_position}, max_offset={self.max_offset}, "
                f"per_row={self.per_row}")
