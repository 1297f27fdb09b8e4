"""``LearnedPositionalEncoding``: a trained table, one vector per position.

The d2l chapter's exercise 2 ("can you design a learnable positional encoding?"), as
BERT, GPT-2 and ViT do it: the table is an ``nn.Parameter`` ``[1, max_len, D]``
trained with the model. Vaswani et al. found it "nearly identical" to the
sinusoids at the training length; unlike them it has no row for a position it
never saw, so asking past ``max_len`` is an error, not a silent extrapolation.

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` model dimension.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab._limits import check_tensor
from attnlab._validate import check_bool, check_choice, check_finite_float, check_int, check_probability
from attnlab.encodings.positional import check_sequence_input
from attnlab.encodings.positions import check_position_ids
from attnlab.encodings.scheme import ModelSizes
from attnlab.encodings.sinusoidal import sinusoidal

__all__ = ["LearnedPositionalEncoding"]

INITS = ("normal", "sinusoidal")


def init_table(pe: Tensor, *, init: str, std: float) -> None:
    """Fill a table ``pe [1, max_len, D]`` in place: N(0, ``std``) for ``"normal"``, else the sinusoids.

    ``init`` and ``std`` are checked by the table's constructor.
    """
    with torch.no_grad():
        if init == "normal":
            nn.init.normal_(pe, mean=0.0, std=std)
        else:
            pe.copy_(sinusoidal(pe.shape[1], pe.shape[2]).unsqueeze(0))


#: a model's learned table's initial standard deviation: the tokens' (LearnedPositionalEncoding.for_model).
MODEL_TABLE_STD = 1.0


class LearnedPositionalEncoding(nn.Module):
    """Add a learned position table to the input, then dropout.

    Args:
        max_len: number of positions the table holds; longer inputs are refused.
        d_model: model dimension ``D``.
        dropout: dropout probability applied after the addition.
        scale_input: multiply the input by ``sqrt(D)`` first, as
            :class:`PositionalEncoding` does (off by default: a learned table
            learns its own scale).
        init: ``"normal"`` draws N(0, ``std``) (BERT, GPT-2 use 0.02);
            ``"sinusoidal"`` starts from the fixed table and lets training move it.
        std: standard deviation for ``init="normal"``.

    Attributes:
        pe: ``nn.Parameter`` ``[1, max_len, D]``.

    Shapes:
        ``forward(x [B, L, D], *, offset=0, position_ids=None) -> [B, L, D]`` with
        ``offset + L <= max_len`` (every position id below ``max_len``).

    Raises:
        TypeError / ValueError: for bad sizes, an unknown ``init``, or (in
            ``forward``) a sequence that runs past ``max_len`` or bad ``position_ids``.
    """

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> LearnedPositionalEncoding:
        """The table a model adds to its embeddings (``"learned"``), started on the tokens' scale.

        Learned tables start on the scale of what they are added to (nn.Embedding's N(0, 1) tokens):
        at std 0.02 a table 50 times smaller than the tokens was ignored, and the length lab's models
        learned nothing from it in 1,024 steps (reverse, encoder-only: 59% in distribution, NoPE's
        60%; at std 1, 99.5%).

        Raises:
            ValueError: without ``sizes.max_len`` (a learned table has a row per position).
        """
        if sizes.max_len is None:
            raise ValueError("a learned table has a row per position: give max_len")
        return cls(sizes.max_len, sizes.d_model, std=MODEL_TABLE_STD)

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        dropout: float = 0.0,
        scale_input: bool = False,
        init: str = "normal",
        std: float = 0.02,
    ) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.scale_input = check_bool("scale_input", scale_input)
        self.init = check_choice("init", init, INITS)
        self.std = check_finite_float("std", std, positive=True)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        check_tensor({"max_len": self.max_len, "d_model": self.d_model}, "the learned table")
        self.pe = nn.Parameter(torch.empty(1, self.max_len, self.d_model))  # [1, max_len, D]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the table according to ``init`` (uses torch's global RNG for "normal")."""
        init_table(self.pe, init=self.init, std=self.std)

    def forward(self, x: Tensor, *, offset: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Encode ``x [B, L, D]`` at positions ``offset .. offset + L - 1``; returns ``[B, L, D]``.

        ``position_ids [B, L]`` (or ``[1, L]``) give each element's position instead of ``offset``.

        Raises:
            TypeError / ValueError: for an ``x`` that is not ``[B, L, D]``, ``position_ids`` that are
                not non-negative integers ``[B, L]``, or a position at or past ``max_len``: a
                learned table has no row there.
        """
        check_sequence_input(x, self.d_model, type(self).__name__)
        if position_ids is not None:
            ids = check_position_ids(position_ids, batch=x.shape[0], length=x.shape[1])  # [B|1, L]
            if torch.compiler.is_compiling():
                # Traced (torch.compile, torch.export), the ids cannot be read back: checked inside the graph.
                torch._assert_async((ids < self.max_len).all(), f"position_ids reach past LearnedPositionalEncoding's "
                                    f"max_len={self.max_len}: a learned table has no rows past it")
            else:
                top = int(ids.max()) if ids.numel() else -1
                if top >= self.max_len:
                    raise ValueError(f"position_ids reach position {top} but LearnedPositionalEncoding has "
                                     f"max_len={self.max_len}: a learned table has no rows past it")
            if self.scale_input:
                x = x * math.sqrt(self.d_model)
            return self.dropout(x + self.pe[0, ids.to(self.pe.device)].to(x.dtype))  # [B, L, D] + [B|1, L, D]
        offset = check_int("offset", offset, minimum=0)
        end = offset + x.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"sequence reaches position {end - 1} (length {x.shape[1]}, offset {offset}) but "
                f"LearnedPositionalEncoding has max_len={self.max_len}: a learned table has no "
                "rows past it; use a longer max_len, or a sinusoidal or relative encoding"
            )
        if self.scale_input:
            x = x * math.sqrt(self.d_model)
        return self.dropout(x + self.pe[:, offset:end].to(x.dtype))

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, init={self.init!r}"
