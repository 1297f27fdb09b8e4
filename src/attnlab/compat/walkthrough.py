"""The PE walkthrough's ``PositionalEncoding(encoding_size, dropout_prob, max_len=5000)``.

The walkthrough's module adds the table to its input as is (no ``sqrt(D)``
scaling), applies dropout after the addition, and keeps the table in a buffer
``positional_encoding`` ``[1, max_len, D]``::

    from attnlab.compat.walkthrough import PositionalEncoding

    layer = PositionalEncoding(encoding_size=16, dropout_prob=0.2)
    out = layer(torch.arange(128.0).reshape(2, 4, 16))   # [B, L, D] -> [B, L, D]

This is :class:`attnlab.encodings.PositionalEncoding` with ``scale_input=False``
under the walkthrough's signature and buffer name: its code runs unchanged and
state dicts load both ways. It differs on purpose: the table is computed in
float64 and cast once (the float32 formula drifts far out), an odd
``encoding_size`` works, and rows past ``max_len`` are computed instead of
failing to broadcast.

Shape notation: ``B`` batch, ``L`` sequence length, ``D`` = ``encoding_size``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from attnlab._validate import check_int, check_probability
from attnlab.encodings.positional import PositionalEncoding as _PositionalEncoding

__all__ = ["PositionalEncoding"]


def _their_buffer_name(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """State-dict post-hook: save ``pe`` as the walkthrough's ``positional_encoding``."""
    state_dict[prefix + "positional_encoding"] = state_dict.pop(prefix + "pe")


class PositionalEncoding(_PositionalEncoding):
    """The PE walkthrough's module: ``dropout(input + positional_encoding[:, :L])``.

    Args:
        encoding_size: ``D``, the size of each position's vector (the walkthrough's name for ``d_model``).
        dropout_prob: dropout probability after the addition.
        max_len: positions precomputed into the buffer (the walkthrough's 5000); longer
            sequences still work, their rows computed when first needed.

    Attributes:
        positional_encoding: the table ``[1, max_len, D]``, float32 (a buffer: saved, never trained).

    Shapes:
        ``forward(input [B, L, D]) -> [B, L, D]``.

    Raises:
        TypeError / ValueError: naming the argument, for an ``encoding_size`` or
            ``max_len`` that is not an integer >= 1, a ``dropout_prob`` outside [0, 1),
            and (in ``forward``) an input that is not a floating ``[B, L, D]``.

    Example:
        >>> import torch
        >>> layer = PositionalEncoding(encoding_size=4, dropout_prob=0.0)
        >>> layer(torch.zeros(1, 2, 4)).round(decimals=4)
        tensor([[[0.0000, 1.0000, 0.0000, 1.0000],
                 [0.8415, 0.5403, 0.0100, 1.0000]]])
    """

    def __init__(self, encoding_size: int, dropout_prob: float, max_len: int = 5000) -> None:
        # Checked under the walkthrough's names (the base class would name d_model and dropout).
        encoding_size = check_int("encoding_size", encoding_size, minimum=1)
        dropout_prob = check_probability("dropout_prob", dropout_prob)
        super().__init__(max_len, encoding_size, dropout=dropout_prob, scale_input=False)
        self.register_state_dict_post_hook(_their_buffer_name)

    @property
    def positional_encoding(self) -> Tensor:
        """The table ``[1, max_len, D]`` under the walkthrough's name (the same tensor as ``pe``)."""
        return self.pe
