"""``MultiHeadAttention``: every head in one fused projection and one ``attend`` call.

Vaswani et al. 2017, §3.2.2: each head ``h`` projects queries, keys and values
with its own ``W_q^h, W_k^h, W_v^h`` (width ``Dh``), attends, and the heads'
contexts are concatenated and projected back to ``D`` by ``W_o``.

The labs build this as a Python list of single-head modules and loop over it.
Here the heads' projections are stacked into one ``[3 * H * Dh, F]`` matrix
(torch's ``in_proj_weight`` layout), so self-attention is one matmul for q, k
and v of all heads, then a single :func:`attnlab.attention.attend`.

Two widths, one class:

* narrow heads (``head_dim = d_model // n_heads``, the default): the Transformer,
  ``nn.MultiheadAttention`` (see :meth:`MultiHeadAttention.from_torch`);
* the labs' wide heads (``head_dim = d_model``): every head is ``d_model`` wide
  and ``W_o`` maps ``H * d_model`` back to ``d_model``.

Lab fidelity: the parameters are drawn in the labs' order (``linear_out``
first, then each head's query, key and value ``nn.Linear``) and packed, so after
``torch.manual_seed(k)`` the weights equal those of the labs' per-head modules.
:class:`attnlab.attention.lab_heads.LabMultiHeadAttention`, which the labs' layers
use, also reads like the labs' module after every call (``alphas`` without asking,
0/1 float masks); this one computes weights only on request.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``F`` input features,
``D`` model dim, ``H`` heads, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_input_dtype, check_int, check_probability
from attnlab.attention.cache import KVCache
from attnlab.attention.functional import attend_unchecked, check_mask
from attnlab.attention.recording import is_recording, record

# encodings never import attention (DESIGN.md: encodings -> attention -> models), so no cycle; a real
# import, not a TYPE_CHECKING one, so that typing.get_type_hints (the docstring audit) resolves it.
from attnlab.encodings.attention_position import AttentionPosition

__all__ = ["MultiHeadAttention"]

class MultiHeadAttention(nn.Module):
    """Multi-head attention with one fused projection for all heads.

    Args:
        n_heads: ``H``.
        d_model: ``D``, the output width (and the input width unless ``input_dim``).
        input_dim: ``F``, width of the queries, keys and values fed in (the labs'
            ``n_features``); defaults to ``d_model``.
        proj_values: project the values (True, as the labs' multi-head default);
            False uses the raw values for every head, which needs ``F == Dh``.
        head_dim: ``Dh``; defaults to ``d_model // n_heads`` (which must divide).
            The labs' wide heads are ``head_dim=d_model``.
        dropout: dropout on the attention weights while training.
        position: a positional scheme that acts inside attention
            (:class:`attnlab.encodings.AttentionPosition`: rotary, ALiBi, T5 or
            Shaw relative, NoPE), composed in rather than switched on by a flag.
            It applies to self-attention, where queries and keys are positions
            of one sequence; with a cache the new queries sit at the positions
            after the cached ones.

    Attributes:
        in_proj: ``nn.Linear(F, 3 * H * Dh)``, rows ordered q | k | v, heads contiguous.
        linear_out: ``nn.Linear(H * Dh, D)`` (``H * F`` when ``proj_values=False``).
        alphas: the labs' layout ``[H, B, T, S]`` of ``attn_weights``.
        attn_weights: the weights ``[B, H, T, S]`` of the last call if it ran inside
            ``record_attention()`` (else None). The labs' stateful way, like
            :meth:`init_keys`: the last caller's, whichever thread it was. Concurrent
            callers pass ``key`` (and a ``cache`` of their own) and read their weights
            with :func:`attnlab.attention.collect_attention` inside their
            ``record_attention()`` block.

    Shapes:
        ``forward(query [B, T, F], key [B, S, F] = None, value [B, S, F] = None,
        *, mask = None, need_weights = False) -> out [B, T, D]`` (and weights
        ``[B, H, T, S]`` as a second result when ``need_weights``). ``mask`` is
        boolean, True = may attend: ``[B, 1, S]`` (padding), ``[1, T, S]`` or
        ``[T, S]`` (causal), or anything broadcastable to ``[B, H, T, S]``.

    Stateful use, as in the labs: ``mha.init_keys(keys)`` projects the keys (and
    values) once; then ``mha(query, mask=mask)`` (or the labs' positional
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
        position: AttentionPosition | None = None,
    ) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.input_dim = self.d_model if input_dim is None else check_int("input_dim", input_dim, minimum=1)
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), "
                    "or give head_dim (the labs' wide heads are head_dim=d_model)"
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

        # Draw parameters in the labs' order: linear_out, then q, k, v per head.
        self.linear_out = nn.Linear(inner, self.d_model)
        per_head = [[nn.Linear(self.input_dim, self.head_dim) for _ in range(3)] for _ in range(self.n_heads)]
        # skip_init: the packed projection must not draw from the RNG itself, or every
        # module created after this one would start from different weights than the labs'.
        # On the heads' device: under `with torch.device(...)` (meta, cuda) it is where they are.
        self.in_proj = nn.utils.skip_init(nn.Linear, self.input_dim, 3 * inner, device=self.linear_out.weight.device)
        with torch.no_grad():
            # rows: [q_head0 .. q_headH-1 | k_head0 .. | v_head0 ..]
            self.in_proj.weight.copy_(torch.cat([h[j].weight for j in range(3) for h in per_head]))
            self.in_proj.bias.copy_(torch.cat([h[j].bias for j in range(3) for h in per_head]))
        if position is not None and not all(
            callable(getattr(position, name, None)) for name in ("rotate", "bias", "value_term")
        ):
            raise TypeError(
                "position must be an attnlab.encodings.AttentionPosition (rotate, bias, value_term), "
                f"got {type(position).__name__}"
            )
        # A submodule, so its parameters (T5 buckets, Shaw's vectors) train and are saved.
        self.position: AttentionPosition | None = position
        self._keys: Tensor | None = None  # [B, H, S, Dh] after init_keys
        self._values: Tensor | None = None  # [B, H, S, Dh or F]
        self.attn_weights = None

    # -- projections ---------------------------------------------------------------
    # F.linear on slices of in_proj rather than calls of the nn.Linear: at the labs'
    # sizes a module call costs more than the matmul, and the slices are views.

    def _project_queries(self, query: Tensor) -> Tensor:
        """``query [B, T, F] -> q [B, H, T, Dh]``."""
        B, T, _ = query.shape
        inner = self.n_heads * self.head_dim
        q = F.linear(query, self.in_proj.weight[:inner], self.in_proj.bias[:inner])  # [B, T, H * Dh]
        return q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, Dh]

    def _project_keys_values(self, key: Tensor, value: Tensor | None) -> tuple[Tensor, Tensor]:
        """``key [B, S, F]`` (and ``value``, default ``key``) -> ``keys [B, H, S, Dh]``, ``values``."""
        B, S, _ = key.shape
        H, Dh = self.n_heads, self.head_dim
        inner = H * Dh
        w, b = self.in_proj.weight, self.in_proj.bias
        if not self.proj_values:
            keys = F.linear(key, w[inner : 2 * inner], b[inner : 2 * inner]).view(B, S, H, Dh).transpose(1, 2)
            raw = key if value is None else value
            return keys, raw.unsqueeze(1).expand(-1, H, -1, -1)  # values [B, H, S, F], shared by the heads
        if value is None or value is key:
            kv = F.linear(key, w[inner:], b[inner:])  # [B, S, 2 * H * Dh], rows k | v
            keys, values = kv.view(B, S, 2, H, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, S, Dh]
            return keys, values
        keys = F.linear(key, w[inner : 2 * inner], b[inner : 2 * inner])  # [B, S, H * Dh]
        values = F.linear(value, w[2 * inner :], b[2 * inner :])  # [B, S, H * Dh]
        return (
            keys.view(B, S, H, Dh).transpose(1, 2),  # [B, H, S, Dh]
            values.view(B, value.shape[1], H, Dh).transpose(1, 2),  # [B, H, S, Dh]
        )

    def _project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: q, k and v of every head in one matmul, ``x [B, T, F]`` -> 3 x ``[B, H, T, Dh]``."""
        B, T, _ = x.shape
        qkv = F.linear(x, self.in_proj.weight, self.in_proj.bias)  # [B, T, 3 * H * Dh], rows q | k | v
        q, k, v = qkv.view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v  # each [B, H, T, Dh]

    def init_keys(self, keys: Tensor) -> None:
        """Project ``keys [B, S, F]`` (also the values) once, for later ``forward(query, mask=...)``.

        The labs' stateful use: the keys live on the module, so one caller at a time.
        Concurrent callers pass ``key`` to :meth:`forward` (or a cross-attention ``cache``).
        """
        self._check_input("keys", keys)
        self._keys, self._values = self._project_keys_values(keys, None)

    def _check_input(self, name: str, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a tensor [B, L, {self.input_dim}], got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.input_dim:
            raise ValueError(f"{name} must have shape [B, L, {self.input_dim}], got {list(x.shape)}")
        check_input_dtype(name, x, self.in_proj.weight.dtype, owner="module")

    # -- forward -------------------------------------------------------------------

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query [B, T, F]`` to ``key``/``value`` (or to the keys of ``init_keys``).

        Args:
            query: ``[B, T, F]``.
            key: ``[B, S, F]``; ``key is query`` (and ``value`` None or ``query``)
                is self-attention, one matmul for q, k and v. None: the keys of
                :meth:`init_keys` (or of a filled cross-attention ``cache``).
            value: ``[B, S, F]``; defaults to ``key``.
            mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``;
                a 3-d mask ``[B|1, T|1, S]`` applies to every head.
            need_weights: also return the weights ``[B, H, T, S]``.
            is_causal: causal mask aligned bottom-right (see :func:`attend`); with a
                self-attention ``cache`` the new queries see every cached step.
            cache: a :class:`attnlab.attention.KVCache` for step-by-step decoding.
                In self-attention the new steps' keys and values are appended to it
                and the queries attend to all of them; otherwise (cross-attention)
                it is filled from ``key``/``value`` on the first call and reused,
                ``key`` ignored, afterwards.

        Returns:
            ``out [B, T, D]``, or ``(out, weights [B, H, T, S])`` with ``need_weights``.

        Raises:
            TypeError / ValueError: for inputs of the wrong type or shape, or a
                mask that is not boolean or does not broadcast.
            RuntimeError: without ``key``, before :meth:`init_keys`.
        """
        if isinstance(key, Tensor) and key.dtype == torch.bool and value is None and mask is None:
            # The labs call mha(query, mask) positionally; keys are never boolean.
            key, mask = None, key
        self._check_input("query", query)
        position = self.position
        past = 0  # position of the first query (steps already cached)
        self_attention = key is query and (value is None or value is query) and self.proj_values
        if self_attention:
            q, keys, values = self._project_self(query)  # each [B, H, T, Dh]
            if cache is not None:
                past = len(cache)
            if position is not None:
                # Rotary turns q and k by their positions; keys are cached turned.
                q, keys = position.rotate(q, keys, q_offset=past, k_offset=past)
            if cache is not None:
                keys, values = cache.append(keys, values)  # [B, H, S, Dh]: every step so far
        elif position is not None:
            raise ValueError(
                f"this MultiHeadAttention has a position scheme ({type(position).__name__}), which applies to "
                "self-attention only: call it as mha(x, x, x)"
            )
        elif cache is not None and len(cache):
            # Cross-attention, later steps: the encoder's keys were projected on the first.
            keys, values = cache.keys, cache.values  # type: ignore[assignment]
            q = self._project_queries(query)
        elif key is None:
            if value is not None:
                raise ValueError("value given without key: pass both, or neither after init_keys()")
            if self._keys is None or self._values is None:
                raise RuntimeError("no keys: call init_keys(keys) first, or pass key (and value)")
            keys, values = self._keys, self._values
            q = self._project_queries(query)
        else:
            self._check_input("key", key)
            if value is not None:
                self._check_input("value", value)
            keys, values = self._project_keys_values(key, value)
            if cache is not None:
                cache.store(keys, values)
            q = self._project_queries(query)
        if keys.shape[0] != q.shape[0]:
            raise ValueError(
                f"query has batch {q.shape[0]} but the keys (given, from init_keys() or cached) "
                f"have batch {keys.shape[0]}"
            )

        if mask is not None:
            mask = self._mask(mask)
            if isinstance(mask, Tensor) and mask.dim() == 3:
                mask = mask.unsqueeze(1)  # [B|1, T|1, S] -> [B|1, 1, T|1, S]: same mask for every head
            check_mask(mask, (q.shape[0], self.n_heads, q.shape[2], keys.shape[2]))
        recording = is_recording()
        bias = None
        value_term = False
        if position is not None:
            if getattr(position, "needs_keys", False):  # CoPE: positions counted from q . k
                bias = position.bias(q, keys.shape[2], q_offset=past, k_offset=0, k=keys)  # type: ignore[call-arg]
            else:
                bias = position.bias(q, keys.shape[2], q_offset=past, k_offset=0)  # [B|1, H|1, T, S] or None
            value_term = bool(getattr(position, "needs_weights", False))
        out, weights = attend_unchecked(
            q, keys, values, mask=mask, bias=bias, scale=None,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights or recording or value_term, is_causal=is_causal,
        )  # out [B, H, T, Dv], weights [B, H, T, S] or None
        if value_term and weights is not None and position is not None:
            extra = position.value_term(weights, q_offset=past, k_offset=0)  # [B, H, T, Dv] (Shaw's values)
            if extra is not None:
                out = out + extra.to(out.dtype)
        # Outside recording, forget old weights: collect_attention must not report a stale run.
        # (Assigned only when it changes: nn.Module.__setattr__ costs more than the check.)
        recorded = weights.detach() if recording and weights is not None else None
        if recorded is not None:
            record(self, recorded)  # this context's block: what collect_attention reads inside it
        if recorded is not None or self.attn_weights is not None:
            self.attn_weights = recorded
        self._attended(q, keys, mask, bias, is_causal, cache, past if self_attention else None, weights)
        B, H, T, Dv = out.shape
        context = out.transpose(1, 2).reshape(B, T, H * Dv)  # [B, T, H * Dv], heads side by side
        result = self.linear_out(context)  # [B, T, D]
        if need_weights:
            assert weights is not None
            return result, weights
        return result

    # -- what a subclass may add (LabMultiHeadAttention keeps the labs' alphas) ----------

    def _mask(self, mask: Tensor) -> Tensor:
        """The user's mask, as given: attnlab's modules take booleans only (``check_mask`` says so)."""
        return mask

    def _attended(
        self, q: Tensor, keys: Tensor, mask: Tensor | None, bias: Tensor | None, is_causal: bool,
        cache: KVCache | None, past: int | None, weights: Tensor | None,
    ) -> None:
        """Called after every attention with ``q [B, H, T, Dh]``, ``keys [B, H, S, Dh]`` and what the call
        used (``past``: cached steps before a self-attention call, None for cross-attention); keeps nothing."""

    @property
    def alphas(self) -> Tensor | None:
        """The labs' layout of the recorded weights, ``[H, B, T, S]``, detached (None until recorded
        inside ``record_attention()``)."""
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
