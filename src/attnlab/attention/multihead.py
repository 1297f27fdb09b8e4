"""``MultiHeadAttention``: every head in one fused projection and one ``attend`` call.

Vaswani et al. 2017, §3.2.2: each head ``h`` projects queries, keys and values
with its own ``W_q^h, W_k^h, W_v^h`` (width ``Dh``), attends, and the heads'
contexts are concatenated and projected back to ``D`` by ``W_o``.

The labs build this as a Python list of single-head modules and loop over it.
Here the heads' projections are stacked into one matrix (torch's
``in_proj_weight`` layout, :mod:`attnlab.attention.projections`), so
self-attention is one matmul for q, k and v of all heads, then a single
:func:`attnlab.attention.attend`. Fewer key/value heads than query heads
(``n_kv_heads``) give grouped-query attention (GQA; 1: multi-query), whose
caches hold only the key/value heads.

One calling convention: ``mha(x)`` is self-attention, ``mha(x, memory)``
cross-attention; one boolean ``mask``, True = may attend. Self-attention's
positions are the indices (after the cached steps), or ``position_ids [B, T]``
from the data (a left-padded batch, Abacus indices); a cache keeps each key's. torch's call (its
``key_padding_mask`` with True = padding) goes through
:func:`attnlab.attention.interop.forward_like_torch`; the labs' call (``init_keys``,
``mha(query, mask)`` with 0/1 float masks, ``alphas`` after every call, every head
``d_model`` wide) is :class:`attnlab.attention.lab.heads.LabMultiHeadAttention`.

Lab fidelity: the parameters are drawn in the labs' order (``linear_out``
first, then each head's query, key and value ``nn.Linear``) and packed, so after
``torch.manual_seed(k)`` the weights equal those of the labs' per-head modules
of the same width.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``F`` input features,
``D`` model dim, ``H`` heads, ``Hkv`` key/value heads, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import (
    check_bool,
    check_choice,
    check_device,
    check_finite_float,
    check_input_dtype,
    check_int,
    check_probability,
)
from attnlab.attention.backends.choose import BACKENDS, attend_with_position
from attnlab.attention.cache import KVCache, step_positions
from attnlab.attention.functional import check_bias
from attnlab.attention.masks import attention_mask
from attnlab.attention.projections import HeadLayout, check_torch_module, copy_torch_weights
from attnlab.attention.recording import is_recording, record

# encodings never import attention (DESIGN.md: encodings -> attention -> models), so no cycle; a real
# import, not a TYPE_CHECKING one, so that typing.get_type_hints (the docstring audit) resolves it.
from attnlab.encodings.scheme import PositionScheme, check_scheme

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
        position: a scheme acting inside attention (:class:`attnlab.encodings.PositionScheme`:
            rotary, ALiBi, T5 or Shaw relative, NoPE), for self-attention only (queries and keys
            of one sequence; with a cache the new queries follow the cached steps). Its bias is
            added as the scheme defines it, whatever ``scale``.
        n_kv_heads: ``Hkv`` key/value heads, dividing ``H`` (None: ``H``): grouped-query attention
            (Ainslie et al. 2023, arXiv:2305.13245; HF's ``num_key_value_heads``), query head ``h``
            sharing key/value head ``h // (H / Hkv)``; 1 is multi-query attention (Shazeer 2019).
        bias: biases in ``in_proj`` and ``linear_out`` (False: none, as T5, d2l and
            x-transformers by default).
        scale: the multiplier of ``q . k``; None is ``1 / sqrt(Dh)`` (Vaswani et al.);
            T5 uses 1.0 (Raffel et al. 2020 fold it into the initialisation).
        backend: how a ``position`` that adds terms (ALiBi, T5, Shaw, FIRE, KERPLE, CoPE) is
            computed: ``"auto"`` (dense up to ``T * S = 2**20``, then FlexAttention on CUDA or
            query chunks, O(L) memory; :mod:`attnlab.attention.backends.choose` states the rule),
            ``"dense"``, ``"flex"`` or ``"chunked"``. Weights on request take the dense path.

    Attributes:
        in_proj: ``nn.Linear(F, (H + 2 Hkv) * Dh)``, rows ordered q | k | v, heads
            contiguous (:class:`attnlab.attention.projections.HeadLayout`).
        linear_out: ``nn.Linear(H * Dh, D)`` (``H * F`` when ``proj_values=False``).
        layout: the :class:`~attnlab.attention.projections.HeadLayout` of ``in_proj``.
        n_kv_heads, proj_bias, scale, backend: the arguments ``n_kv_heads`` (resolved), ``bias``,
            ``scale``, ``backend`` (settable).
        alphas: the labs' layout ``[H, B, T, S]`` of ``attn_weights``.
        attn_weights: the weights ``[B, H, T, S]`` of the last call if it ran inside
            ``record_attention()`` (else None): the labs' stateful way, the last caller's,
            whichever thread. Concurrent callers read theirs with
            :func:`attnlab.attention.collect_attention` inside their ``record_attention()``.

    Shapes:
        ``forward(query [B, T, F], key [B, S, F] = None, value [B, S, F] = None, *,
        mask = None, ...) -> out [B, T, D]`` (and weights ``[B, H, T, S]`` with
        ``need_weights``). ``mask``: boolean, True = may attend, e.g. ``[B, 1, S]``, ``[T, S]``.
        Self-attention is ``mha(x)`` (no ``key``); ``mha(x, memory)`` is cross-attention.

    Raises:
        ValueError: naming both when ``d_model`` is not divisible by ``n_heads``
            (and no ``head_dim``) or ``n_kv_heads`` does not divide ``n_heads``, for
            non-positive sizes or ``scale``, a dropout outside [0, 1), or
            ``proj_values=False`` with ``input_dim != head_dim``.
        TypeError: for a ``position`` that is not a ``PositionScheme``.
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
        position: PositionScheme | None = None,
        n_kv_heads: int | None = None,
        bias: bool = True,
        scale: float | None = None,
        backend: str = "auto",
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
        self.n_kv_heads = self.n_heads if n_kv_heads is None else check_int("n_kv_heads", n_kv_heads, minimum=1)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}): each key/value head "
                "serves n_heads / n_kv_heads query heads"
            )
        self.proj_values = bool(proj_values)
        if not self.proj_values and self.input_dim != self.head_dim:
            raise ValueError(
                f"proj_values=False uses the raw values in every head, so input_dim ({self.input_dim}) "
                f"must equal head_dim ({self.head_dim})"
            )
        self.dropout = check_probability("dropout", dropout)
        self.proj_bias = check_bool("bias", bias)  # not `bias`: code that inits modules reads m.bias as a tensor
        self.scale = None if scale is None else check_finite_float("scale", scale, positive=True)
        self.backend = check_choice("backend", backend, BACKENDS)
        self.layout = HeadLayout(self.n_heads, self.n_kv_heads, self.head_dim)

        # Draw parameters in the labs' order: linear_out, then q, k, v per head (projections.py).
        self.linear_out = nn.Linear(self.layout.q_rows, self.d_model, bias=self.proj_bias)
        # On the heads' device: under `with torch.device(...)` (meta, cuda) it is where they are.
        device = self.linear_out.weight.device
        self.in_proj = self.layout.draw_in_proj(self.input_dim, bias=self.proj_bias, device=device)
        check_scheme("position", position)
        # A submodule, so its parameters (T5 buckets, Shaw's vectors) train and are saved.
        self.position: PositionScheme | None = position
        self.attn_weights = None

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
        is_causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
        bias: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention over ``query [B, T, F]`` (``key`` None), or cross-attention to ``key``/``value``.

        One rule: **self-attention is** ``mha(x)``, with no ``key``; then the position
        scheme applies and a ``cache`` is appended to. Any ``key``, even the query
        itself, is cross-attention (another sequence: no position scheme).

        Args:
            query: ``[B, T, F]``.
            key: ``[B, S, F]``, the sequence to attend to (cross-attention); None: the query's own.
            value: ``[B, S, F]``; defaults to ``key`` (only with ``key``).
            mask: boolean, **True = may attend**, broadcastable to ``[B, H, T, S]``; 3-d is
                ``[B|1, T|1, S]`` for every head, 2-d is ``[T, S]`` for every sequence
                (:func:`attnlab.attention.masks.attention_mask`). torch's key-padding
                mask (True = padding) is converted at one place:
                :func:`attnlab.attention.interop.forward_like_torch`.
            is_causal: causal mask aligned bottom-right (see :func:`attend`); with a
                self-attention ``cache`` the new queries see every cached step.
            cache: a :class:`attnlab.attention.KVCache` for step-by-step decoding (it holds
                ``Hkv`` heads). Self-attention appends the new steps' keys and values and
                attends to all of them. Cross-attention projects ``key``/``value`` on the
                first call and stores them (the cache remembers ``key``); later calls pass the
                same ``key`` again and reuse the stored projection (the design of HF's
                cross-attention caches: the memory is passed every step, projected once).
            need_weights: also return the weights ``[B, H, T, S]``.
            bias: additive float scores broadcastable to ``[B, H, T, S]`` (``[H, T, S]``
                as :func:`attnlab.attention.attend`: a 3-d bias is per head, unlike a
                3-d mask), added to the position scheme's terms.
            position_ids: self-attention's query positions ``[B, T]`` (or ``[1, T]``), integers;
                the new keys sit there too, and a ``cache`` keeps them (:attr:`KVCache.positions`).
                None: the indices after the cached steps, or each row after its own last when the
                cache keeps positions. Negative ones are not refused here (models check theirs).

        Returns:
            ``out [B, T, D]``, or ``(out, weights [B, H, T, S])`` with ``need_weights``.

        Raises:
            TypeError / ValueError: for inputs of the wrong type, dtype or shape, masks or a
                bias of the wrong dtype or shape, ``value`` without ``key``, a position scheme
                with a ``key`` (cross-attention), or a ``cache`` of the other kind (holding
                cross-attention keys in self-attention, or self-attention steps in
                cross-attention) or holding another ``key``'s projection, and ``position_ids``
                that are not integers ``[B, T]`` or given to cross-attention.
        """
        self._check_input("query", query)
        past: int | None = None  # self-attention: steps cached before this call (the first query's position)
        q_pos = k_pos = None  # self-attention's per-row positions, [B, T] and [B, S] (None: the indices)
        if key is None:
            if value is not None:
                raise ValueError("value given without key: self-attention is mha(query); cross-attention "
                                 "is mha(query, key, value)")
            q, keys, values, past, q_pos, k_pos = self._project_self(query, cache, position_ids)
        elif position_ids is not None:
            raise ValueError("position_ids place self-attention's queries and keys (mha(x)); cross-attention "
                             "(key given) has no position scheme")
        elif self.position is not None:
            raise ValueError(
                f"this MultiHeadAttention has a position scheme ({type(self.position).__name__}), which applies "
                "to self-attention only: call it as mha(x), without key"
            )
        else:
            q, keys, values = self._project_cross(query, key, value, cache)
        out, weights = self._attend(q, keys, values, mask=mask, bias=bias, is_causal=is_causal, cache=cache,
                                    cached=past, need_weights=need_weights, q_pos=q_pos, k_pos=k_pos)
        if need_weights:
            assert weights is not None
            return out, weights
        return out

    def _project_self(
        self, query: Tensor, cache: KVCache | None, position_ids: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, int, Tensor | None, Tensor | None]:
        """``q [B, H, T, Dh]``, ``keys``/``values [B, Hkv, S, Dh]`` (``S``: cached + new steps), cached steps before,
        and the per-row positions of the queries ``[B, T]`` and keys ``[B, S]`` (None, None: the indices)."""
        if cache is not None and cache.stored:
            raise ValueError("self-attention with a cache holding cross-attention keys (filled by store(); "
                             "self-attention is the call without key): give each attention layer a cache of its own")
        q_pos = step_positions(position_ids, cache, batch=query.shape[0], length=query.shape[1],
                               device=query.device)  # [B, T] or None: the indices
        q, keys, values = self.layout.project(self.in_proj, query, query, None, proj_values=self.proj_values)
        past = 0 if cache is None else len(cache)
        position = self.position
        if position is not None:
            # Rotary turns q and k by their positions; keys are cached turned.
            if q_pos is None:
                q, keys = position.rotate(q, keys, q_offset=past, k_offset=past)
            else:
                q, keys = position.rotate(q, keys, position_ids=q_pos)  # the new keys sit where the queries do
        k_pos = q_pos  # [B, S]
        if cache is not None:
            keys, values = cache.append(keys, values, positions=q_pos)  # [B, Hkv, S, Dh]: every step so far
            k_pos = cache.positions
        return q, keys, values, past, q_pos, k_pos

    def _project_cross(
        self, query: Tensor, key: Tensor, value: Tensor | None, cache: KVCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Cross-attention's ``q [B, H, T, Dh]`` and keys/values ``[B, Hkv, S, Dh]``: from the cache, or projected."""
        if cache is not None and len(cache):
            if not cache.stored:
                raise ValueError("cross-attention (key given) with a cache holding self-attention steps: give "
                                 "each attention layer a cache of its own; self-attention is mha(query, cache=...)")
            if not cache.holds(key):
                raise ValueError(
                    "this cache holds the projection of another key (cross-attention caches project the "
                    "memory once and expect the same tensor at every step): reset() it for a new memory; "
                    "self-attention is mha(query, cache=...), without key"
                )
            keys, values = cache.keys, cache.values  # the memory's keys, projected on the first step
            assert keys is not None and values is not None
            return self.layout.project_queries(self.in_proj, query), keys, values
        if isinstance(key, Tensor) and key.dtype == torch.bool:
            raise TypeError("key is a boolean tensor: a mask goes to mask= (mha(query, mask=mask)); the labs' "
                            "positional mha(query, mask) is LabMultiHeadAttention's call")
        self._check_input("key", key)
        if value is not None:
            self._check_input("value", value)
        q, keys, values = self.layout.project(self.in_proj, query, key, value, proj_values=self.proj_values)
        if cache is not None:
            cache.store(keys, values, source=key)
        return q, keys, values

    def _attend(
        self, q: Tensor, keys: Tensor, values: Tensor, *, mask: Tensor | None, bias: Tensor | None,
        is_causal: bool, cache: KVCache | None, cached: int | None, need_weights: bool,
        q_pos: Tensor | None = None, k_pos: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend with projected ``q [B, H, T, Dh]``, ``keys [B, Hkv, S, Dh]``, ``values [B, Hkv, S, Dv]``.

        ``cached``: steps cached before a self-attention call (the position scheme's query
        offset), None for cross-attention (no scheme there). ``q_pos [B, T]``, ``k_pos [B, S]``:
        self-attention's per-row positions, which replace the offsets (None: the indices).
        Returns ``(out [B, T, D], weights [B, H, T, S] or None)``.
        """
        position = None if cached is None else self.position
        past = 0 if cached is None else cached
        B, H, T, _ = q.shape
        S = keys.shape[2]
        if keys.shape[0] != B:
            raise ValueError(f"query has batch {B} but the keys (given, cached, or of init_keys()) "
                             f"have batch {keys.shape[0]}")
        check_device("mask", mask, q.device)
        check_device("bias", bias, q.device)
        mask = attention_mask(mask, target=(B, H, T, S))
        if bias is not None:
            check_bias(bias, (B, H, T, S))
        recording = is_recording()
        # Recording is asking for the weights a figure draws, which only the dense path forms.
        backend = "dense" if recording else self.backend
        out, weights = attend_with_position(
            q, keys, values, position=position, backend=backend, q_offset=past, mask=mask, bias=bias,
            is_causal=is_causal, scale=self.scale, dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights or recording, position_ids=q_pos, key_position_ids=k_pos,
        )  # out [B, H, T, Dv], weights [B, H, T, S] or None
        # Outside recording, forget old weights: collect_attention must not report a stale run.
        # (Assigned only when it changes: nn.Module.__setattr__ costs more than the check.)
        recorded = weights.detach() if recording and weights is not None else None
        if recorded is not None:
            record(self, recorded)  # this context's block: what collect_attention reads inside it
        if recorded is not None or self.attn_weights is not None:
            self.attn_weights = recorded
        self._attended(q, keys, mask, bias, is_causal, cache, cached, weights)
        Dv = out.shape[3]
        context = out.transpose(1, 2).reshape(B, T, H * Dv)  # [B, T, H * Dv], heads side by side
        return self.linear_out(context), weights  # [B, T, D]

    # -- what a subclass may add (LabMultiHeadAttention keeps the labs' alphas) ----------

    def _attended(
        self, q: Tensor, keys: Tensor, mask: Tensor | None, bias: Tensor | None, is_causal: bool,
        cache: KVCache | None, past: int | None, weights: Tensor | None,
    ) -> None:
        """Called after every attention with ``q [B, H, T, Dh]``, ``keys [B, Hkv, S, Dh]`` and what the call
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
        masks with True = may attend (convert with :func:`attnlab.attention.masks.from_torch_mask`);
        to call it as torch's is called (``key_padding_mask``, ``attn_mask``, True = ignored),
        use :func:`attnlab.attention.interop.forward_like_torch`. A bias-free
        ``mha`` (``bias=False``) gives a bias-free copy.

        Raises:
            TypeError: if ``mha`` is not an ``nn.MultiheadAttention``.
            ValueError: for features attnlab does not model (``kdim``/``vdim`` different
                from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``).
        """
        has_bias = check_torch_module(mha)
        ours = cls(mha.num_heads, mha.embed_dim, dropout=mha.dropout, bias=has_bias)
        ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
        copy_torch_weights(mha, ours.in_proj, ours.linear_out)
        return ours

    def extra_repr(self) -> str:
        extra = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extra += "" if self.proj_bias else ", bias=False"
        extra += "" if self.scale is None else f", scale={self.scale}"
        return (
            f"n_heads={self.n_heads}, d_model={self.d_model}, input_dim={self.input_dim}, "
            f"head_dim={self.head_dim}, proj_values={self.proj_values}, dropout={self.dropout}{extra}"
        )
