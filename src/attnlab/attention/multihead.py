"""``MultiHeadAttention``: every head in one fused projection and one ``attend`` call.

Vaswani et al. 2017, §3.2.2: each head ``h`` projects queries, keys and values
with its own ``W_q^h, W_k^h, W_v^h`` (width ``Dh``), attends, and the heads'
contexts are concatenated and projected back to ``D`` by ``W_o``.

The seeds build this as a Python list of single-head modules and loop over it.
Here the heads' projections are stacked into one ``[3 * H * Dh, F]`` matrix
(torch's ``in_proj_weight`` layout), so self-attention is one matmul for q, k
and v of all heads, then a single :func:`attnlab.attention.attend`.

Two widths, one class:

* narrow heads (``head_dim = d_model // n_heads``, the default): the Transformer,
  ``nn.MultiheadAttention`` (see :meth:`MultiHeadAttention.from_torch`);
* the seeds' wide heads (``head_dim = d_model``): every head is ``d_model`` wide
  and ``W_o`` maps ``H * d_model`` back to ``d_model``.

Seed fidelity: the parameters are drawn in the seeds' order (``linear_out``
first, then each head's query, key and value ``nn.Linear``) and packed, so after
``torch.manual_seed(k)`` the weights equal those of the seeds' per-head modules.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``F`` input features,
``D`` model dim, ``H`` heads, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_int, check_probability
from attnlab.attention.functional import attend
from attnlab.attention.recording import is_recording

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(nn.Module):
    """Multi-head attention with one fused projection for all heads.

    Args:
        n_heads: ``H``.
        d_model: ``D``, the output width (and the input width unless ``input_dim``).
        input_dim: ``F``, width of the queries, keys and values fed in (seed:
            ``n_features``); defaults to ``d_model``.
        proj_values: project the values (True, as the seeds' multi-head default);
            False uses the raw values for every head, which needs ``F == Dh``.
        head_dim: ``Dh``; defaults to ``d_model // n_heads`` (which must divide).
            The seeds' wide heads are ``head_dim=d_model``.
        dropout: dropout on the attention weights while training.

    Attributes:
        in_proj: ``nn.Linear(F, 3 * H * Dh)``, rows ordered q | k | v, heads contiguous.
        linear_out: ``nn.Linear(H * Dh, D)`` (``H * F`` when ``proj_values=False``).
        attn_weights: the weights ``[B, H, T, S]`` of the last call if it ran inside
            ``record_attention()`` (else None).

    Shapes:
        ``forward(query [B, T, F], key [B, S, F] = None, value [B, S, F] = None,
        *, mask = None, need_weights = False) -> out [B, T, D]`` (and weights
        ``[B, H, T, S]`` as a second result when ``need_weights``). ``mask`` is
        boolean, True = may attend: ``[B, 1, S]`` (padding), ``[1, T, S]`` or
        ``[T, S]`` (causal), or anything broadcastable to ``[B, H, T, S]``.

    Stateful use, as the seeds: ``mha.init_keys(keys)`` projects the keys (and
    values) once; then ``mha(query, mask=mask)`` (or the seeds' positional
    ``mha(query, mask)``) attends to them.

    Raises:
        ValueError: naming both when ``d_model`` is not divisible by ``n_heads``
            (and no ``head_dim``), for non-positive sizes, a dropout outside
            [0, 1), or ``proj_values=False`` with ``input_dim != head_dim``.
    """

    attn_weights: Tensor | None

    def __init__(
        self,
        n_heads: int,
        d_model: int,
        input_dim: int | None = None,
        proj_values: bool = True,
        *,
        head_dim: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.input_dim = self.d_model if input_dim is None else check_int("input_dim", input_dim, minimum=1)
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), "
                    "or give head_dim (the seeds' wide heads are head_dim=d_model)"
                )
            head_dim = d_model // n_heads
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.proj_values = bool(proj_values)
        if not self.proj_values and self.input_dim != self.head_dim:
            raise ValueError(
                f"proj_values=False uses the raw values in every head, so input_dim ({self.input_dim}) "
                f"must equal head_dim ({self.head_dim})"
            )
        self.dropout = check_probability("dropout", dropout)
        inner = self.n_heads * self.head_dim

        # Draw parameters in the seeds' order: linear_out, then q, k, v per head.
        self.linear_out = nn.Linear(inner, self.d_model)
        per_head = [[nn.Linear(self.input_dim, self.head_dim) for _ in range(3)] for _ in range(self.n_heads)]
        # skip_init: the packed projection must not draw from the RNG itself, or every
        # module created after this one would start from different weights than the seeds'.
        self.in_proj = nn.utils.skip_init(nn.Linear, self.input_dim, 3 * inner)
        with torch.no_grad():
            # rows: [q_head0 .. q_headH-1 | k_head0 .. | v_head0 ..]
            self.in_proj.weight.copy_(torch.cat([h[j].weight for j in range(3) for h in per_head]))
            self.in_proj.bias.copy_(torch.cat([h[j].bias for j in range(3) for h in per_head]))
        self._keys: Tensor | None = None  # [B, H, S, Dh] after init_keys
        self._values: Tensor | None = None  # [B, H, S, Dh or F]
        self.attn_weights = None

    # -- projections ---------------------------------------------------------------

    def _split_heads(self, x: Tensor) -> Tensor:
        """``[B, L, H * Dh] -> [B, H, L, Dh]``."""
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, -1).transpose(1, 2)  # [B, H, L, Dh]

    def _project_keys_values(self, key: Tensor, value: Tensor | None) -> tuple[Tensor, Tensor]:
        inner = self.n_heads * self.head_dim
        w, b = self.in_proj.weight, self.in_proj.bias
        if value is None or value is key:
            rows = 2 * inner if self.proj_values else inner
            kv = F.linear(key, w[inner: inner + rows], b[inner: inner + rows])  # [B, S, 2 * H * Dh]
            k = kv[..., :inner]
            v = kv[..., inner:] if self.proj_values else None
            value = key
        else:
            k = F.linear(key, w[inner: 2 * inner], b[inner: 2 * inner])  # [B, S, H * Dh]
            v = F.linear(value, w[2 * inner:], b[2 * inner:]) if self.proj_values else None
        keys = self._split_heads(k)  # [B, H, S, Dh]
        if v is not None:
            values = self._split_heads(v)  # [B, H, S, Dh]
        else:
            values = value.unsqueeze(1).expand(-1, self.n_heads, -1, -1)  # [B, H, S, F]
        return keys, values

    def _project_queries(self, query: Tensor) -> Tensor:
        inner = self.n_heads * self.head_dim
        return self._split_heads(F.linear(query, self.in_proj.weight[:inner], self.in_proj.bias[:inner]))

    def init_keys(self, keys: Tensor) -> None:
        """Project ``keys [B, S, F]`` (also the values) once, for later ``forward(query, mask=...)``."""
        self._check_input("keys", keys)
        self._keys, self._values = self._project_keys_values(keys, None)

    def _check_input(self, name: str, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a tensor [B, L, {self.input_dim}], got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.input_dim:
            raise ValueError(f"{name} must have shape [B, L, {self.input_dim}], got {list(x.shape)}")

    # -- forward -------------------------------------------------------------------

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query [B, T, F]`` to ``key``/``value`` (or to the keys of ``init_keys``).

        Returns ``out [B, T, D]``, or ``(out, weights [B, H, T, S])`` with ``need_weights``.
        """
        if isinstance(key, Tensor) and key.dtype == torch.bool and value is None and mask is None:
            # The seeds call mha(query, mask) positionally; keys are never boolean.
            key, mask = None, key
        self._check_input("query", query)
        if key is None:
            if value is not None:
                raise ValueError("value given without key: pass both, or neither after init_keys()")
            if self._keys is None or self._values is None:
                raise RuntimeError("no keys: call init_keys(keys) first, or pass key (and value)")
            keys, values = self._keys, self._values
            if keys.shape[0] != query.shape[0]:
                raise ValueError(
                    f"query has batch {query.shape[0]} but init_keys() was given batch {keys.shape[0]}"
                )
            q = self._project_queries(query)
        elif key is query and (value is None or value is query) and self.proj_values:
            # Self-attention: q, k and v of every head in one matmul.
            qkv = self.in_proj(query)  # [B, T, 3 * H * Dh]
            q, k, v = (self._split_heads(t) for t in qkv.chunk(3, dim=-1))  # each [B, H, T, Dh]
            keys, values = k, v
        else:
            self._check_input("key", key)
            if value is not None:
                self._check_input("value", value)
            keys, values = self._project_keys_values(key, value)
            q = self._project_queries(query)

        if mask is not None and isinstance(mask, Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # [B|1, T|1, S] -> [B|1, 1, T|1, S]: same mask for every head
        record = is_recording()
        out, weights = attend(
            q, keys, values, mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights or record,
        )  # out [B, H, T, Dv], weights [B, H, T, S] or None
        # Outside recording, forget old weights: collect_attention must not report a stale run.
        # (Assigned only when it changes: nn.Module.__setattr__ costs more than the check.)
        recorded = weights.detach() if record and weights is not None else None
        if recorded is not None or self.attn_weights is not None:
            self.attn_weights = recorded
        B, H, T, Dv = out.shape
        context = out.transpose(1, 2).reshape(B, T, H * Dv)  # [B, T, H * Dv], heads side by side
        result = self.linear_out(context)  # [B, T, D]
        if need_weights:
            assert weights is not None
            return result, weights
        return result

    @property
    def alphas(self) -> Tensor | None:
        """The seeds' layout of the recorded weights, ``[H, B, T, S]`` (None until recorded)."""
        if self.attn_weights is None:
            return None
        return self.attn_weights.transpose(0, 1)  # [B, H, T, S] -> [H, B, T, S]

    # -- interop -------------------------------------------------------------------

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``nn.MultiheadAttention``'s weights; same outputs (to 1e-5), masks included.

        attnlab's module is batch-first whatever ``mha.batch_first`` says, and takes
        masks with True = may attend (convert with :func:`attnlab.attention.masks.from_torch_mask`).

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
        E = mha.embed_dim
        ours = cls(mha.num_heads, E, dropout=mha.dropout)
        ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
        with torch.no_grad():
            ours.in_proj.weight.copy_(mha.in_proj_weight)
            ours.in_proj.bias.copy_(mha.in_proj_bias if mha.in_proj_bias is not None else torch.zeros(3 * E))
            ours.linear_out.weight.copy_(mha.out_proj.weight)
            if mha.out_proj.bias is not None:
                ours.linear_out.bias.copy_(mha.out_proj.bias)
            else:
                ours.linear_out.bias.zero_()
        return ours

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, d_model={self.d_model}, input_dim={self.input_dim}, "
            f"head_dim={self.head_dim}, proj_values={self.proj_values}, dropout={self.dropout}"
        )
