"""The packed input projection of ``MultiHeadAttention``: its row layout, how it is drawn, how it is applied.

Every head's query, key and value projection lives in one ``nn.Linear``,
``in_proj``, whose rows are stacked ``q | k | v`` (torch's ``in_proj_weight``
layout), heads contiguous inside each block::

    rows [0, H * Dh)                       q of heads 0 .. H - 1
    rows [H * Dh, (H + Hkv) * Dh)          k of key/value heads 0 .. Hkv - 1
    rows [(H + Hkv) * Dh, (H + 2 Hkv) * Dh) v of key/value heads 0 .. Hkv - 1

With ``Hkv == H`` this is multi-head attention (Vaswani et al. 2017, §3.2.2).
With fewer key/value heads it is grouped-query attention (Ainslie et al. 2023,
"GQA", arXiv:2305.13245): the ``H / Hkv`` query heads of group ``g`` (heads
``g * H / Hkv .. (g + 1) * H / Hkv - 1``, the layout of HF's ``repeat_kv``) share
key/value head ``g``; ``Hkv == 1`` is multi-query attention (Shazeer 2019,
arXiv:1911.02150). Only ``Hkv`` heads of keys and values are ever projected or
cached.

The projections are ``F.linear`` on slices of ``in_proj``, not calls of the
module: at the labs' sizes a module call costs more than the matmul, and the
slices are views.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``L`` any length, ``F``
input features, ``H`` heads, ``Hkv`` key/value heads, ``Dh`` head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["HeadLayout", "check_torch_module", "copy_torch_weights"]


def _rows(bias: Tensor | None, start: int, stop: int | None = None) -> Tensor | None:
    """``bias[start:stop]``, or None for a bias-free projection."""
    return None if bias is None else bias[start:stop]


@dataclass(frozen=True, slots=True)
class HeadLayout:
    """The heads of one ``MultiHeadAttention`` and the rows of its packed ``in_proj``.

    Args:
        n_heads: ``H``, query heads.
        n_kv_heads: ``Hkv``, key/value heads; divides ``H`` (the caller checks it).
        head_dim: ``Dh``.

    Example:
        >>> layout = HeadLayout(n_heads=8, n_kv_heads=2, head_dim=4)
        >>> layout.q_rows, layout.kv_rows, layout.rows, layout.groups
        (32, 8, 48, 4)
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def q_rows(self) -> int:
        """``H * Dh``: the rows (and output width) of the query block."""
        return self.n_heads * self.head_dim

    @property
    def kv_rows(self) -> int:
        """``Hkv * Dh``: the rows of the key block, and of the value block."""
        return self.n_kv_heads * self.head_dim

    @property
    def rows(self) -> int:
        """``(H + 2 Hkv) * Dh``: all rows of ``in_proj``."""
        return self.q_rows + 2 * self.kv_rows

    @property
    def groups(self) -> int:
        """``H / Hkv``: query heads per key/value head (1 for multi-head attention)."""
        return self.n_heads // self.n_kv_heads

    def draw_in_proj(self, input_dim: int, *, bias: bool, device: torch.device) -> nn.Linear:
        """Draw the per-head projections in the labs' order and pack them into one ``nn.Linear(F, rows)``.

        The labs create, for each head, its query, key and value ``nn.Linear(F, Dh)``
        (after ``linear_out``, which the caller draws first). Here head ``h`` draws
        its query projection, then its key and value projections if ``h < Hkv``: with
        ``Hkv == H`` exactly the labs' draws, so after ``torch.manual_seed(k)`` the
        weights are the labs'. The packed module itself draws nothing (``skip_init``),
        or every module created after this one would start from other weights.

        Args:
            input_dim: ``F``.
            bias: give the projections biases (``bias=False``: none drawn, none kept).
            device: where the packed module lives (that of the per-head draws).

        Returns:
            ``nn.Linear(F, (H + 2 Hkv) * Dh)``, weight rows ``q | k | v`` (module docstring).
        """
        heads = [
            [nn.Linear(input_dim, self.head_dim, bias=bias) for _ in range(3 if h < self.n_kv_heads else 1)]
            for h in range(self.n_heads)
        ]
        in_proj = nn.utils.skip_init(nn.Linear, input_dim, self.rows, bias=bias, device=device)
        blocks = [[h[0] for h in heads], [h[1] for h in heads if len(h) == 3], [h[2] for h in heads if len(h) == 3]]
        with torch.no_grad():
            in_proj.weight.copy_(torch.cat([lin.weight for block in blocks for lin in block]))  # [rows, F]
            if bias:
                in_proj.bias.copy_(torch.cat([lin.bias for block in blocks for lin in block]))  # [rows]
        return in_proj

    def project_queries(self, in_proj: nn.Linear, query: Tensor) -> Tensor:
        """``query [B, T, F] -> q [B, H, T, Dh]`` with the query rows of ``in_proj``."""
        B, T, _ = query.shape
        q = F.linear(query, in_proj.weight[: self.q_rows], _rows(in_proj.bias, 0, self.q_rows))  # [B, T, H * Dh]
        return q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, Dh]

    def project_keys_values(
        self, in_proj: nn.Linear, key: Tensor, value: Tensor | None, *, proj_values: bool
    ) -> tuple[Tensor, Tensor]:
        """``key [B, S, F]`` (and ``value [B, S, F]``, default ``key``) -> ``keys [B, Hkv, S, Dh]``, ``values``.

        Args:
            in_proj: the packed projection.
            key: ``[B, S, F]``.
            value: ``[B, S, F]``, or None for ``key``.
            proj_values: project the values (``values [B, Hkv, S, Dh]``); False
                shares the raw values by every head (``values [B, Hkv, S, F]``, a view).

        Returns:
            ``(keys [B, Hkv, S, Dh], values [B, Hkv, S, Dh or F])``.
        """
        B, S, _ = key.shape
        Hkv, Dh = self.n_kv_heads, self.head_dim
        start, mid = self.q_rows, self.q_rows + self.kv_rows
        w, b = in_proj.weight, in_proj.bias
        if not proj_values:
            keys = F.linear(key, w[start:mid], _rows(b, start, mid))  # [B, S, Hkv * Dh]
            raw = key if value is None else value
            return (
                keys.view(B, S, Hkv, Dh).transpose(1, 2),  # [B, Hkv, S, Dh]
                raw.unsqueeze(1).expand(-1, Hkv, -1, -1),  # [B, Hkv, S, F], shared by the heads
            )
        if value is None or value is key:
            kv = F.linear(key, w[start:], _rows(b, start))  # [B, S, 2 * Hkv * Dh], rows k | v
            keys, values = kv.view(B, S, 2, Hkv, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, Hkv, S, Dh]
            return keys, values
        keys = F.linear(key, w[start:mid], _rows(b, start, mid))  # [B, S, Hkv * Dh]
        values = F.linear(value, w[mid:], _rows(b, mid))  # [B, S, Hkv * Dh]
        return (
            keys.view(B, S, Hkv, Dh).transpose(1, 2),  # [B, Hkv, S, Dh]
            values.view(B, value.shape[1], Hkv, Dh).transpose(1, 2),  # [B, Hkv, S, Dh]
        )

    def project_self(self, in_proj: nn.Linear, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: q, k and v of every head in one matmul.

        Args:
            in_proj: the packed projection.
            x: ``[B, L, F]``.

        Returns:
            ``(q [B, H, L, Dh], k [B, Hkv, L, Dh], v [B, Hkv, L, Dh])``.
        """
        B, L, _ = x.shape
        Hkv, Dh = self.n_kv_heads, self.head_dim
        qkv = F.linear(x, in_proj.weight, in_proj.bias)  # [B, L, (H + 2 Hkv) * Dh], rows q | k | v
        q = qkv[..., : self.q_rows].view(B, L, self.n_heads, Dh).transpose(1, 2)  # [B, H, L, Dh]
        k, v = qkv[..., self.q_rows :].view(B, L, 2, Hkv, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # [B, Hkv, L, Dh]
        return q, k, v

    def project(
        self, in_proj: nn.Linear, query: Tensor, key: Tensor, value: Tensor | None, *, proj_values: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries from ``query``, keys and values from ``key``/``value``: one matmul when all three are one tensor.

        Args:
            in_proj: the packed projection.
            query: ``[B, T, F]``.
            key: ``[B, S, F]``.
            value: ``[B, S, F]``, or None for ``key``.
            proj_values: as :meth:`project_keys_values`.

        Returns:
            ``(q [B, H, T, Dh], keys [B, Hkv, S, Dh], values [B, Hkv, S, Dh or F])``.
        """
        if key is query and (value is None or value is query) and proj_values:
            return self.project_self(in_proj, query)
        keys, values = self.project_keys_values(in_proj, key, value, proj_values=proj_values)
        return self.project_queries(in_proj, query), keys, values


def check_torch_module(mha: nn.MultiheadAttention) -> bool:
    """Refuse an ``nn.MultiheadAttention`` attnlab cannot copy; return whether it has biases.

    Raises:
        TypeError: if ``mha`` is not an ``nn.MultiheadAttention``.
        ValueError: for features attnlab does not model (``kdim``/``vdim`` different
            from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``).
    """
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"from_torch expects an nn.MultiheadAttention, got {type(mha).__name__}")
    if not mha._qkv_same_embed_dim:
        raise ValueError(f"kdim/vdim ({mha.kdim}, {mha.vdim}) different from embed_dim ({mha.embed_dim})")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn are not supported")
    return mha.in_proj_bias is not None or mha.out_proj.bias is not None


def copy_torch_weights(mha: nn.MultiheadAttention, in_proj: nn.Linear, linear_out: nn.Linear) -> None:
    """Copy ``mha``'s projections into ``in_proj`` and ``linear_out`` (torch's layout is ours, row for row)."""
    # torch's in_proj_weight [3 D, D] has rows q | k | v, heads contiguous: in_proj's layout, row for row.
    with torch.no_grad():
        for mine, weight, bias in ((in_proj, mha.in_proj_weight, mha.in_proj_bias),
                                   (linear_out, mha.out_proj.weight, mha.out_proj.bias)):
            mine.weight.copy_(weight)
            if mine.bias is not None:  # torch keeps both biases or neither; a missing one is zero
                mine.bias.copy_(bias if bias is not None else torch.zeros_like(mine.bias))
