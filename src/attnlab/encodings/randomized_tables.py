"""Randomized absolute tables: the rows at a random sorted subset of positions, added to the input.

Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization of
Transformers" (ACL, arXiv:2305.16843), their ``NOISY_SIN_COS`` and ``NOISY_LEARNT``
(google-deepmind/randomized_positional_encodings, ``models/transformer.py``,
``TransformerEmbedder.add_positional_encodings``): a table of ``L_max`` rows, of
which a sequence of length ``L`` gets the rows at a sorted random subset of ``L``
distinct positions of ``[0, L_max)``, drawn anew at every call (training and
evaluation alike), one draw for the whole batch. See
:mod:`attnlab.encodings.randomized` for the schemes that act inside attention.

Both modules plug in where a model adds an absolute table,
``h = input_position(h, offset=offset)`` (``SequenceModel._embed`` in
:mod:`attnlab.models.sequence_model`): they take ``h [B, L, D]`` and return
``h + table[draw]``, with no scaling and no dropout (the model does both). They
set ``caches = False`` and refuse ``offset != 0``: a decoding step cannot be
placed after cached steps drawn at other positions, so the model re-runs the
whole sequence at each step.

With ``position_ids [B, L]`` (left padding, Abacus indices) the rule is that of
:mod:`attnlab.encodings.randomized`: one draw for the batch, of
``n = max(L, p_max + 1)`` sorted positions (``p_max`` the largest id), and
position id ``p`` gets the table's row at the draw's entry ``p``; with ids
``0 .. L - 1`` that is the draw without them.

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._limits import check_tensor
from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.encodings.draws import check_fits, sample_positions
from attnlab.encodings.learned import INITS, MODEL_TABLE_STD, init_table
from attnlab.encodings.positional import check_sequence_input
from attnlab.encodings.positions import check_position_ids
from attnlab.encodings.scheme import ModelSizes
from attnlab.encodings.sinusoidal import LAYOUTS, sinusoidal

__all__ = ["RandomizedLearned", "RandomizedSinusoidal"]


def _draw(table: RandomizedSinusoidal | RandomizedLearned, h: Tensor, offset: int,
          position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Check ``h [B, L, D]``, ``offset`` and ``position_ids``; return a fresh draw ``[n]`` and the rows to read.

    The rows are ``[L]`` (the draw itself, ``n = L``) without ``position_ids``, and the
    draw's entries at ``position_ids`` ``[B, L]`` with them (module docstring). A decoding
    step cannot be placed after cached steps drawn at other positions, so any ``offset``
    but 0 is refused.
    """
    name = type(table).__name__
    check_sequence_input(h, table.d_model, name)
    offset = check_int("offset", offset, minimum=0)
    if offset:
        raise ValueError(
            f"{name} draws new positions at every call, so it cannot encode a step after cached ones "
            f"(got offset={offset}); decode without a cache, re-running the whole sequence"
        )
    if position_ids is None:
        check_fits(h.shape[1], table.max_len, name)
        draw = sample_positions(h.shape[1], table.max_len, device=h.device)  # [L]
        return draw, draw
    ids = check_position_ids(position_ids, batch=h.shape[0], length=h.shape[1]).to(h.device)  # [B|1, L]
    top = int(ids.max()) if ids.numel() else -1
    if top >= table.max_len:  # named by the ids, which set the draw's length here
        raise ValueError(f"position_ids reach position {top}, so {name}(max_len={table.max_len}) would draw "
                         f"{top + 1} distinct positions from [0, max_len): build it with max_len above the largest "
                         "position id it will see")
    n = max(h.shape[1], top + 1)
    check_fits(n, table.max_len, name)
    draw = sample_positions(n, table.max_len, device=h.device)  # [n]
    return draw, draw[ids]  # [n], [B|1, L]



def _table_rows(sizes: ModelSizes) -> int:
    """A randomized table's ``L_max`` rows: the model's ``max_len``, which it must give."""
    if sizes.max_len is None:
        raise ValueError("a randomized table draws positions from [0, max_len): give max_len")
    return sizes.max_len


class RandomizedSinusoidal(nn.Module):
    """The sinusoidal table of ``max_len`` rows, added at a random sorted subset of positions.

    ``forward(h)[b, l] = h[b, l] + sinusoidal(max_len, D)[p_l]`` with ``p`` a fresh
    :func:`~attnlab.encodings.randomized.sample_positions` draw of ``L`` positions.
    The table is computed in float64 and cast once (:func:`attnlab.encodings.sinusoidal`),
    and again from float64 when the module changes dtype. With ``max_len == L`` the
    draw is ``0 .. L - 1`` and the module adds what
    ``PositionalEncoding(L, D, scale_input=False)`` adds.

    Args:
        max_len: the range ``L_max`` of positions; at least the longest sequence.
        d_model: model dimension ``D``.
        base: wavelength scale, 10000 in the paper.
        layout: the column layout (:func:`attnlab.encodings.sinusoidal`):
            ``"interleaved"`` (default, as attnlab's ``"sinusoidal"`` encoding), or
            ``"concat"`` (``[sin | cos]``, the layout of Ruoss et al.'s code).

    Attributes:
        pe: buffer ``[max_len, D]``, not saved in ``state_dict`` (it is a function
            of the arguments).
        caches: False (module docstring).
        last_draw: the most recent draw, int64 ``[L]`` (None before the first call).

    Raises:
        TypeError / ValueError: for a bad size, ``base`` or ``layout``.

    Example:
        >>> pe = RandomizedSinusoidal(100, 4)
        >>> _ = torch.manual_seed(0)
        >>> out = pe(torch.zeros(2, 3, 4))  # [B, L, D]
        >>> torch.equal(out[0], pe.pe[pe.last_draw]) and torch.equal(out[0], out[1])  # one draw per batch
        True
    """

    caches = False
    draws_positions = True  # declared as the schemes inside attention declare it (encodings.scheme)
    pe: Tensor

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> RandomizedSinusoidal:
        """The table a model adds to its embeddings (``"random-sinusoidal"``): ``max_len`` rows to draw from.

        Raises:
            ValueError: without ``sizes.max_len``.
        """
        return cls(_table_rows(sizes), sizes.d_model)

    def __init__(self, max_len: int, d_model: int, *, base: float = 10000.0, layout: str = "interleaved") -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.base = check_finite_float("base", base, positive=True)
        self.layout = check_choice("layout", layout, LAYOUTS)
        table = sinusoidal(self.max_len, self.d_model, base=self.base, layout=self.layout)  # [max_len, D]
        self.register_buffer("pe", table, persistent=False)
        self.last_draw: Tensor | None = None

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        """``.to()`` / ``.double()`` / ``.half()``: a new dtype gets the table computed in float64 again.

        Casting the float32 buffer would round it twice (PositionalEncoding does the same).
        """
        before = self.pe.dtype
        super()._apply(fn, recurse)
        if self.pe.dtype != before and self.pe.is_floating_point():
            self.pe = sinusoidal(self.max_len, self.d_model, base=self.base, layout=self.layout,
                                 dtype=self.pe.dtype, device=self.pe.device)  # [max_len, D]
        return self

    def forward(self, h: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Add the table's rows at a fresh draw of ``L`` positions to ``h [B, L, D]``; returns ``[B, L, D]``.

        ``position_ids [B, L]`` index the draw (module docstring).

        Raises:
            TypeError / ValueError: for ``h`` that is not a floating ``[B, L, D]``,
                ``offset != 0``, bad ``position_ids``, or a draw longer than ``max_len`` (naming both).
        """
        self.last_draw, rows = _draw(self, h, offset, position_ids)  # [n], [L] or [B, L]
        return h + self.pe[rows].to(h.dtype)  # [B, L, D] + [(B,) L, D]

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"max_len={self.max_len}, d_model={self.d_model}, layout={self.layout!r}"


class RandomizedLearned(nn.Module):
    """A learned table of ``max_len`` rows, added at a random sorted subset of positions.

    ``forward(h)[b, l] = h[b, l] + pe[0, p_l]`` with ``p`` a fresh draw of ``L``
    positions of ``[0, max_len)``. Only the drawn rows take part in a call, so
    only they get a gradient; over many calls every row is trained, which is the
    point: a test sequence longer than any training one still gets trained rows.
    Initialised as :class:`attnlab.encodings.LearnedPositionalEncoding`.

    Args:
        max_len: the range ``L_max`` of positions (rows); at least the longest sequence.
        d_model: model dimension ``D``.
        init: ``"normal"`` draws N(0, ``std``) (BERT, GPT-2 use 0.02);
            ``"sinusoidal"`` starts from the fixed table.
        std: standard deviation for ``init="normal"``.

    Attributes:
        pe: ``nn.Parameter`` ``[1, max_len, D]``.
        caches: False (module docstring).
        last_draw: the most recent draw, int64 ``[L]`` (None before the first call).

    Raises:
        TypeError / ValueError: for a bad size, ``init`` or ``std``.

    Example:
        >>> pe = RandomizedLearned(100, 4)
        >>> out = pe(torch.zeros(2, 3, 4))  # [B, L, D]
        >>> out.shape, torch.equal(out[0], pe.pe[0, pe.last_draw])
        (torch.Size([2, 3, 4]), True)
    """

    caches = False
    draws_positions = True  # declared as the schemes inside attention declare it (encodings.scheme)

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> RandomizedLearned:
        """The table a model adds to its embeddings (``"random-learned"``), started on the tokens' scale.

        Raises:
            ValueError: without ``sizes.max_len``.
        """
        return cls(_table_rows(sizes), sizes.d_model, std=MODEL_TABLE_STD)

    def __init__(self, max_len: int, d_model: int, *, init: str = "normal", std: float = 0.02) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.init = check_choice("init", init, INITS)
        self.std = check_finite_float("std", std, positive=True)
        check_tensor({"max_len": self.max_len, "d_model": self.d_model}, "the learned table")
        self.pe = nn.Parameter(torch.empty(1, self.max_len, self.d_model))  # [1, max_len, D]
        self.last_draw: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the table according to ``init`` (uses torch's global RNG for "normal")."""
        init_table(self.pe, init=self.init, std=self.std)

    def forward(self, h: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Add the table's rows at a fresh draw of ``L`` positions to ``h [B, L, D]``; returns ``[B, L, D]``.

        ``position_ids [B, L]`` index the draw (module docstring).

        Raises:
            TypeError / ValueError: for ``h`` that is not a floating ``[B, L, D]``,
                ``offset != 0``, bad ``position_ids``, or a draw longer than ``max_len`` (naming both).
        """
        self.last_draw, rows = _draw(self, h, offset, position_ids)  # [n], [L] or [B, L]
        return h + self.pe[0, rows].to(h.dtype)  # [B, L, D] + [(B,) L, D]

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"max_len={self.max_len}, d_model={self.d_model}, init={self.init!r}"
