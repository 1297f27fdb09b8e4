"""``PositionalEncoding``: add a sinusoidal table to a batch of sequences.

The module of the positional-encoding lab (and of the d2l chapter and the PE walkthrough,
with ``scale_input=False``)::

    out = dropout(x * sqrt(D) + PE[:L])        # x: [B, L, D]

Why ``sqrt(D)``: inputs that are standardised, or embeddings, mostly lie in
[-1, 1], the same range as the table, so the table "crowds out" the signal.
Multiplying by ``sqrt(D)`` undoes the standardisation (``raw = sqrt(D) * std``)
before the table is added (Vaswani §3.4 does the same to its embeddings).

What it does better than the labs: the table is computed in float64 and
cast once; odd ``D`` works; a sequence longer than ``max_len`` gets the rows it
needs computed on the spot (a sinusoid is defined at every position) instead of
a broadcast error; the result is cast to the input's dtype; ``offset`` encodes
positions that do not start at 0 (a decoding step with a cache), and
``position_ids [B, L]`` any positions per sequence (left padding, Abacus indices).
``load_state_dict`` also takes the PE walkthrough's checkpoints, whose buffer
``positional_encoding`` (``[1, max_len, D]``, the layout of ``pe``) is the same table.

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_finite_float, check_int, check_probability
from attnlab.encodings.positions import check_position_ids
from attnlab.encodings.scheme import ModelSizes
from attnlab.encodings.sinusoidal import sinusoidal, sinusoidal_at

__all__ = ["PositionalEncoding", "check_sequence_input"]

#: rows past ``2 * max_len`` beyond which a request starting there is computed alone, not as a grown table
_FAR_ROWS = 2**16


def check_sequence_input(x: Tensor, d_model: int, owner: str) -> None:
    """Check that ``x`` is a ``[B, L, D]`` floating tensor with ``D == d_model``.

    Raises:
        TypeError: if ``x`` is not a floating-point tensor.
        ValueError: if its rank or last dimension is wrong.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{owner} expects a tensor x, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{owner} expects a floating-point x, got dtype {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(
            f"{owner} expects x of shape [B, L, {d_model}], got {list(x.shape)}"
        )


def _walkthrough_buffer(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    """Load pre-hook: the PE walkthrough's buffer ``positional_encoding`` is ``pe``.

    Its layout is ``pe``'s, ``[1, max_len, D]``; a bare ``[max_len, D]`` table (the
    walkthrough's before its ``unsqueeze(0)``) gets the leading 1. Only when the
    state dict has no ``pe`` of its own; a different ``max_len`` or ``D`` gets torch's
    size-mismatch error for ``pe``.
    """
    theirs = state_dict.get(prefix + "positional_encoding")
    if prefix + "pe" in state_dict or not isinstance(theirs, Tensor):
        return
    del state_dict[prefix + "positional_encoding"]
    state_dict[prefix + "pe"] = theirs.unsqueeze(0) if theirs.dim() == 2 else theirs  # [1, max_len, D]


class PositionalEncoding(nn.Module):
    """Scale the input and add the sinusoidal positional encoding, then dropout.

    Args:
        max_len: positions precomputed into the ``pe`` buffer. Longer sequences
            still work: their rows are computed when first needed.
        d_model: model dimension ``D`` (odd works).
        dropout: dropout probability applied after the addition (the d2l chapter,
            the PE walkthrough).
        scale_input: multiply the input by ``sqrt(D)`` first (the positional-encoding
            lab). Set it to False to reproduce the d2l chapter and the PE walkthrough,
            which add the table as is.
        base, layout, rates: the table's variant; see
            :func:`attnlab.encodings.sinusoidal`.

    Attributes:
        pe: buffer ``[1, max_len, D]`` (in ``state_dict``, never trained). ``load_state_dict``
            also takes it under the PE walkthrough's name, ``positional_encoding``.

    Shapes:
        ``forward(x [B, L, D], *, offset=0, position_ids=None) -> [B, L, D]``.

    Raises:
        TypeError / ValueError: for a non-positive ``max_len`` or ``d_model``, a
            dropout outside [0, 1), an unknown layout, or (in ``forward``) an
            input that is not ``[B, L, D]`` or bad ``position_ids``.

    Example:
        >>> import torch
        >>> posenc = PositionalEncoding(2, 2)
        >>> posenc(torch.tensor([[[-1.0, -1.0], [-1.0, 1.0]]])).round(decimals=4)
        tensor([[[-1.4142, -0.4142],
                 [-0.5727,  1.9545]]])
    """

    pe: Tensor

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> PositionalEncoding:
        """The table a model adds to its embeddings (``"sinusoidal"``): unscaled input, extends past ``max_len``."""
        return cls(sizes.max_len or 1, sizes.d_model, scale_input=False)

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        dropout: float = 0.0,
        scale_input: bool = True,
        base: float = 10000.0,
        layout: str = "interleaved",
        rates: str | None = None,
    ) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        if isinstance(d_model, float) and 0 <= d_model < 1:  # code written for the PE walkthrough's class
            raise TypeError(f"d_model must be an integer, got {d_model!r} (float): this module takes "
                            "(max_len, d_model); the PE walkthrough's PositionalEncoding(encoding_size, "
                            "dropout_prob) is attnlab.compat.walkthrough.PositionalEncoding")
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.scale_input = check_bool("scale_input", scale_input)
        self.base = check_finite_float("base", base, positive=True)
        self.layout = layout
        self.rates = rates
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        table = sinusoidal(max_len, d_model, base=base, layout=layout, rates=rates)
        self.register_buffer("pe", table.unsqueeze(0))  # [1, max_len, D]
        # Rows past max_len, grown on demand. Not persistent: a checkpoint keeps the
        # shape of `pe` whatever lengths the model has seen.
        self._extended: Tensor | None = None
        self.register_load_state_dict_pre_hook(_walkthrough_buffer)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[no-untyped-def]
        """``.to()`` / ``.double()`` / ``.half()``: a new dtype gets a table computed in float64 again.

        Casting the float32 buffer would round every entry twice: a float64 module
        kept float32 values (errors of 3e-8, while the rows past ``max_len``, computed
        on demand, were exact), and float16 could be an ulp off the correctly rounded
        value.
        """
        before = (self.pe.dtype, self.pe.device)
        super()._apply(fn, recurse)
        after = (self.pe.dtype, self.pe.device)
        if after != before:
            if self.pe.is_floating_point() and after[0] != before[0]:
                table = sinusoidal(self.max_len, self.d_model, base=self.base, layout=self.layout,
                                   rates=self.rates, dtype=self.pe.dtype, device=self.pe.device)
                self.pe = table.unsqueeze(0)  # [1, max_len, D]
            self._extended = None  # rebuilt in the new dtype and device when next needed
        return self

    def table(self, length: int, *, offset: int = 0) -> Tensor:
        """Rows ``offset .. offset + length - 1`` of the table, ``[1, length, D]``.

        Rows past ``max_len`` are computed once (float64, like ``pe``) and kept
        until a longer request; a learned table could not do this. Rows that start
        far past it (:data:`_FAR_ROWS`) are computed alone, in ``O(length)``.
        """
        end = offset + length
        if end <= self.max_len:
            return self.pe[:, offset:end]
        if offset >= 2 * self.max_len + _FAR_ROWS:
            # Far past the table (a step at position 10**9): these rows alone, not every row before them.
            return sinusoidal(length, self.d_model, base=self.base, layout=self.layout, rates=self.rates,
                              start=offset, dtype=self.pe.dtype, device=self.pe.device).unsqueeze(0)
        if self._extended is None or self._extended.shape[1] < end:
            # Grow geometrically so a decoding loop does not rebuild every step.
            n = max(end, 2 * self.max_len)
            grown = sinusoidal(
                n, self.d_model, base=self.base, layout=self.layout, rates=self.rates,
                dtype=self.pe.dtype, device=self.pe.device,
            )
            self._extended = grown.unsqueeze(0)  # [1, n, D]
        return self._extended[:, offset:end].to(self.pe.device)

    def rows(self, position_ids: Tensor) -> Tensor:
        """The table's rows at ``position_ids [B, L]`` (non-negative integers, checked by the caller): ``[B, L, D]``.

        Ids within reach of the table (:meth:`table`'s rule) read it, grown as needed; an id far
        past it has only the rows asked computed (:func:`attnlab.encodings.sinusoidal_at`), so that
        two tokens at position 10**7 cost two rows, not a table of ten million. Traced (torch.compile,
        torch.export), the ids must be below ``max_len`` (a RuntimeError otherwise).
        """
        if torch.compiler.is_compiling():
            # Traced (torch.compile, torch.export), the table cannot grow by the ids' values (a size read back
            # from the data): they must be within it, checked inside the graph.
            torch._assert_async((position_ids < self.max_len).all(), f"position_ids reach past "
                                f"{type(self).__name__}'s max_len={self.max_len}, which a compiled model cannot "
                                "extend: build it with a larger max_len")
            return self.pe[0][position_ids.to(self.pe.device)]  # [B, L, D]
        n = int(position_ids.max()) + 1 if position_ids.numel() else 0
        if n > 2 * self.max_len + _FAR_ROWS:
            asked, where = torch.unique(position_ids, return_inverse=True)  # [U], [B, L]
            rows = sinusoidal_at(asked.to(self.pe.device), self.d_model, base=self.base, layout=self.layout,
                                 rates=self.rates, dtype=self.pe.dtype)  # [U, D]
            return rows[where.to(rows.device)]  # [B, L, D]
        table = self.table(n)[0]  # [n, D]
        return table[position_ids.to(table.device)]  # [B, L, D]

    def forward(self, x: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Encode ``x [B, L, D]`` at positions ``offset .. offset + L - 1``; returns ``[B, L, D]``.

        ``position_ids [B, L]`` (or ``[1, L]``) give each element's position instead of ``offset``.

        Raises:
            TypeError / ValueError: for an ``x`` that is not ``[B, L, D]``, a negative ``offset``, or
                ``position_ids`` that are not non-negative integers ``[B, L]``.
        """
        check_sequence_input(x, self.d_model, type(self).__name__)
        if position_ids is not None:
            pe = self.rows(check_position_ids(position_ids, batch=x.shape[0], length=x.shape[1]))  # [B|1, L, D]
        else:
            if type(offset) is not int or offset < 0:
                offset = check_int("offset", offset, minimum=0)
            pe = self.table(x.shape[1], offset=offset)  # [1, L, D]
        if self.scale_input:
            x = x * math.sqrt(self.d_model)
        out = x + (pe if pe.dtype == x.dtype else pe.to(x.dtype))  # [B, L, D]
        # Dropout only when it drops something: the module call costs more than the
        # addition at the labs' sizes.
        return self.dropout(out) if self.training and self.dropout.p > 0 else out

    def extra_repr(self) -> str:
        return (
            f"max_len={self.max_len}, d_model={self.d_model}, "
            f"scale_input={self.scale_input}, layout={self.layout!r}"
        )
