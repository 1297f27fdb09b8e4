"""Rotary on a quarter of each head's features: the rotary of Kazemnejad et al. 2023.

GPT-NeoX turns only the first ``rotary_pct`` of each head's features (0.25 by default)
and passes the rest through; Kazemnejad et al. 2023 ("The Impact of Positional Encoding
on Length Generalization in Transformers", code McGill-NLP/length-generalization) take
that rotary, so their "rotary" is this one, not the full rotation of :class:`Rotary`
(Su et al.). The two can differ beyond the training length: the unturned three quarters
carry no position at all.
"""

from __future__ import annotations

from attnlab.encodings.rotary import Rotary
from attnlab.encodings.scheme import ModelSizes

__all__ = ["QuarterRotary"]


class QuarterRotary(Rotary):
    """:class:`Rotary` turning the first quarter of each head's features (at least one pair), base 10000.

    Example:
        >>> from attnlab.encodings.scheme import ModelSizes
        >>> QuarterRotary.for_model(ModelSizes(n_heads=4, head_dim=16, d_model=64, causal=True)).rotary_dim
        4
    """

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> QuarterRotary:
        """A quarter of ``head_dim`` rounded down to an even count, at least 2."""
        return cls(sizes.head_dim, rotary_dim=max(2, sizes.head_dim // 4 // 2 * 2))
