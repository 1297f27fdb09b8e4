"""Abacus embeddings: a learned vector per digit index within a number, shifted at random in training.

McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings"
(arXiv:2405.17399). A transformer adding long numbers must line up the digits of
equal significance, and a position counted over the whole sequence does not tell it
which those are. The Abacus embedding numbers each digit from the start of its own
number: with numbers written least significant digit first, the ``i``-th digit of
every number (operands and answer) gets the same learned vector. Those indices are
the data's, not the sequence's: the task computes them
(:func:`attnlab.data.arithmetic_positions.digit_positions`: ``1, 2, ...`` along a number, 0 for
every other token) and the model passes them as ``position_ids``.

Training shifts every digit's index by a random offset ``k``, so that the rows past
the longest training number are trained too and a longer test number finds trained
rows: ``k`` is uniform over ``0 .. max_offset`` and tokens at 0 (not digits) are not
shifted. That is the authors' code (``Abacus.forward`` in
``cramming/architectures/embeddings.py`` of github.com/mcleish7/arithmetic:
``k = random.randint(0, self.max_k)``, both ends included, added to the indices that
are > 0), with ``max_k`` = ``arch.embedding.max_abacus_len`` = 100 in their training
configuration (``cramming/config/arch/*.yaml``, ``components.py``; the standalone
``abacus.py`` defaults to 99): the first digit of a number sits at ``1 .. 101`` in
training, at 1 in evaluation. Their code draws one ``k`` per batch; here each row
draws its own by default (``per_row=True``, as position coupling draws its start per
sample), ``per_row=False`` gives theirs. Evaluation adds no offset.

The table is ``nn.Embedding``-like, ``max_position`` rows initialised N(0, 1) (the
authors' ``torch.nn.Embedding(max_seq_length, embedding_dim)``, 1024 rows). It is
added to the token embeddings, where a model adds an absolute table
(``h = input_position(h, offset=offset, position_ids=position_ids)``); the authors'
runs pair it with no scheme inside attention, or with FIRE or RoPE there
(``shells/addition_ff.sh``).

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_finite_float, check_int
from attnlab.encodings.positional import check_sequence_input
from attnlab.encodings.scheme import ModelSizes

__all__ = ["AbacusEmbedding", "check_generator", "check_position_ids", "check_rows"]

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
            f"(attnlab.data.arithmetic_positions.digit_positions / coupled_positions) and pass position_ids="
        )
    if not isinstance(position_ids, Tensor) or position_ids.is_floating_point() or position_ids.is_complex() \
            or position_ids.dtype == torch.bool:
        what = position_ids.dtype if isinstance(position_ids, Tensor) else type(position_ids).__name__
        raise TypeError(f"{owner} needs integer position_ids [B, L], got {what}")
    if tuple(position_ids.shape) != tuple(h.shape[:2]):
        raise ValueError(f"{owner} needs position_ids of shape [B, L] = {list(h.shape[:2])} (the input's), "
                         f"got {list(position_ids.shape)}")
    if position_ids.numel() and int(position_ids.min()) < 0:
        raise ValueError(f"{owner}: position_ids must be >= 0, got {int(position_ids.min())}")
    return position_ids.to(device=h.device, dtype=torch.int64)


def check_rows(ids: Tensor, max_position: int, owner: str, why: str) -> None:
    """Refuse ids (int, any shape) past the table of ``max_position`` rows.

    Raises:
        ValueError: naming ``max_position`` and the largest id when ``ids`` reach past it.
    """
    if ids.numel() and int(ids.max()) >= max_position:
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


class AbacusEmbedding(nn.Module):
    """Add a learned row per digit index, ``table[position_ids + k]``, with a random ``k`` in training.

    ``forward(h, position_ids=p)[b, l] = h[b, l] + pe[p[b, l] + k_b]`` where ``p[b, l] > 0``
    (digits) and ``h[b, l] + pe[0]`` elsewhere; ``k_b`` uniform over ``0 .. max_offset``
    in training (one per row, or one per call with ``per_row=False``), 0 in evaluation.

    Args:
        d_model: model dimension ``D``.
        max_position: table rows; the largest index plus ``max_offset`` must stay below it.
        max_offset: the largest training offset, both ends drawn (100: the authors'
            ``max_abacus_len``); 0 draws none.
        per_row: each row draws its own offset (default), or one serves the call (the
            authors' code).
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
        >>> from attnlab.data.arithmetic_positions import digit_positions
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
        per_row: bool = True,
        std: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.max_position = check_int("max_position", max_position, minimum=2)
        self.max_offset = check_int("max_offset", max_offset, minimum=0, maximum=self.max_position - 2)
        self.per_row = check_bool("per_row", per_row)
        self.std = check_finite_float("std", std, positive=True)
        self.generator = check_generator(generator)
        self.pe = nn.Parameter(torch.empty(self.max_position, self.d_model))  # [max_position, D]
        self.last_offsets: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the table from N(0, ``std``) (torch's global generator, as every weight)."""
        with torch.no_grad():
            nn.init.normal_(self.pe, mean=0.0, std=self.std)

    @property
    def caches(self) -> bool:
        """Whether decoding may continue from a cache: in evaluation only (a training call draws new offsets)."""
        return not self.training

    def draw_offsets(self, batch: int) -> Tensor:
        """The offsets of one training call, int64 ``[B]``: uniform over ``0 .. max_offset``.

        Drawn on the CPU from ``generator`` (or torch's global one), so a seed gives the
        same offsets on every device; one value repeated with ``per_row=False``.

        Raises:
            TypeError / ValueError: for a ``batch`` that is not an integer >= 0.
        """
        batch = check_int("batch", batch, minimum=0)
        draws = torch.randint(0, self.max_offset + 1, (batch if self.per_row else 1,), generator=self.generator)
        return draws if self.per_row else draws.expand(batch).clone()  # [B]

    def forward(self, h: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Add the rows at ``position_ids`` (shifted by this call's offsets in training) to ``h [B, L, D]``.

        Args:
            h: token embeddings ``[B, L, D]``.
            offset: where ``h`` starts in the sequence (a decoding step after cached ones);
                not used: ``position_ids`` already say where each token is.
            position_ids: the task's digit indices, int ``[B, L]``
                (:func:`attnlab.data.arithmetic_positions.digit_positions`), 0 for a token that is no digit.

        Returns:
            ``[B, L, D]``, in ``h``'s dtype.

        Raises:
            TypeError / ValueError: for ``h`` that is not floating ``[B, L, D]``, a negative
                ``offset``, ``position_ids`` missing, of another shape or negative, or an
                index (plus offset) past ``max_position``.
        """
        name = type(self).__name__
        check_sequence_input(h, self.d_model, name)
        check_int("offset", offset, minimum=0)
        ids = check_position_ids(h, position_ids, name)  # [B, L]
        why = ""
        self.last_offsets = None
        if self.training:
            k = self.draw_offsets(h.shape[0])  # [B], on the CPU
            self.last_offsets = k
            ids = torch.where(ids > 0, ids + k.to(ids.device)[:, None], ids)  # [B, L]: digits move, others stay
            why = f" (index plus a training offset up to {self.max_offset})"
        check_rows(ids, self.max_position, name, why)
        return h + self.pe[ids].to(h.dtype)  # [B, L, D] + [B, L, D]

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"d_model={self.d_model}, max_position={self.max_position}, max_offset={self.max_offset}, "
                f"per_row={self.per_row}")
