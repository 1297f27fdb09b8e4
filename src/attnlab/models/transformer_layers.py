"""The pre-norm Transformer layers attnlab's sequence models are stacks of (Xiong et al. 2020, arXiv:2002.04745).

:class:`TransformerEncoderLayer` (self-attention, then a feed-forward network; causal, it is a
GPT-style block) and :class:`TransformerDecoderLayer` (causal self-attention, cross-attention to
the memory, a feed-forward network). A position scheme sits in the self-attentions only.

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length, ``D`` model dim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor, nn

from attnlab.attention import MultiHeadAttention
from attnlab.encodings.scheme import PositionScheme

if TYPE_CHECKING:  # annotations only: the cache's module is imported where decoding makes one
    from attnlab.attention import DecodingCache, KVCache

__all__ = ["TransformerDecoderLayer", "TransformerEncoderLayer"]


def _ffn(d_model: int, ff_units: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff_units, d_model))


class TransformerEncoderLayer(nn.Module):
    """Pre-norm encoder layer: ``x + SelfAttn(LN(x))``, then ``x + FFN(LN(x))``.

    Args:
        d_model: ``D``.
        n_heads: ``H`` (must divide ``D``).
        ff_units: hidden width of the feed-forward network.
        dropout: on the attention weights and on each residual branch.
        position: a scheme for the self-attention (see
            :func:`attnlab.encodings.scheme`).
        head_dim: ``Dh``, each head's width; None derives it as ``D // H``.

    Shapes:
        ``forward(x [B, S, D], mask [B, 1, S] = None, *, is_causal = False, cache = None,
        position_ids [B, S] = None) -> [B, S, D]``.

    With ``is_causal=True`` (and optionally a :class:`attnlab.attention.KVCache`)
    the same layer is a GPT-style decoder block: a decoder-only model is a stack
    of encoder layers whose self-attention is causal.
    """

    def __init__(
        self, d_model: int, n_heads: int, ff_units: int, *, dropout: float = 0.0,
        position: PositionScheme | None = None, head_dim: int | None = None, backend: str = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout, position=position,
                                            backend=backend)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = _ffn(d_model, ff_units, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, is_causal: bool = False, cache: KVCache | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Encode ``x [B, S, D]`` (``mask`` boolean ``[B, 1, S]``, True = may attend).

        ``is_causal``: each position sees itself and the ones before it (aligned
        bottom-right, so with a ``cache`` the new steps also see every cached one).
        ``position_ids [B, S]``: the elements' positions for the self-attention's scheme.
        """
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, mask=mask, is_causal=is_causal, cache=cache,
                                            position_ids=position_ids))  # [B, S, D]
        return x + self.dropout(self.ffn(self.norm2(x)))  # [B, S, D]


class TransformerDecoderLayer(nn.Module):
    """Pre-norm decoder layer: causal self-attention, cross-attention to the memory, FFN.

    Args:
        d_model, n_heads, ff_units, dropout, head_dim, backend: as :class:`TransformerEncoderLayer`.
        position: a scheme for the (causal) self-attention.

    Shapes:
        ``forward(y [B, T, D], memory [B, S, D], source_mask [B, 1, S] = None, *,
        cache = None, name = "", position_ids [B, T] = None) -> [B, T, D]``.
    """

    def __init__(
        self, d_model: int, n_heads: int, ff_units: int, *, dropout: float = 0.0,
        position: PositionScheme | None = None, head_dim: int | None = None, backend: str = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout, position=position,
                                            backend=backend)
        self.norm2 = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout)
        self.norm3 = nn.LayerNorm(d_model)
        self.ffn = _ffn(d_model, ff_units, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        source_mask: Tensor | None = None,
        *,
        cache: DecodingCache | None = None,
        name: str = "",
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Decode ``y [B, T, D]`` against ``memory [B, S, D]``.

        With a ``cache``, ``y`` holds only the new step(s); this layer's keys live
        in the cache's ``f"{name}self_attn"`` and ``f"{name}cross_attn"`` entries.
        ``position_ids [B, T]``: the steps' positions for the self-attention's scheme.
        """
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache.layer(f"{name}self_attn"), cache.layer(f"{name}cross_attn")
        h = self.norm1(y)
        y = y + self.dropout(self.self_attn(h, is_causal=True, cache=self_cache, position_ids=position_ids))
        h = self.norm2(y)
        y = y + self.dropout(self.cross_attn(h, memory, mask=source_mask, cache=cross_cache))  # [B, T, D]
        return y + self.dropout(self.ffn(self.norm3(y)))  # [B, T, D]
