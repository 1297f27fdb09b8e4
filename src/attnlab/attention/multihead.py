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
``D`` model dim, ``H`` heads, ``Hkv`` key/value heads, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import (
    check_bool,
    check_choice,
    check_finite_float,
    check_input_dtype,
    check_int,
    check_probability,
)
from attnlab.attention.backends.choose import BACKENDS, attend_with_position
from attnlab.attention.cache import KVCache
from attnlab.attention.functional import check_bias
from attnlab.attention.interop import from_torch_module
from attnlab.attention.masks import attention_mask
from attnlab.attention.projections import HeadLayout
from attnlab.attention.recording import is_recording, record

# encodings never import attention (DESIGN.md: encodings -> attention -> models), so no cycle; a real
# import, not a TYPE_CHECKING one, so that typing.get_type_hints (the docstring audit) resolves it.
from attnlab.encodings.scheme import AttentionPosition

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
        position: a scheme acting inside attention (:class:`attnlab.encodings.AttentionPosition`:
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

    Self-attention is ``mha(x)`` or ``mha(x, x, x)``, or declared with ``self_attention=True``
    (rule: :meth:`forward`). The labs' stateful use: ``mha.init_keys(keys)`` projects the
    keys (and values) once; then ``mha(query, mask=mask)`` (or ``mha(query, mask)``) attends to them.

    Raises:
        ValueError: naming both when ``d_model`` is not divisible by ``n_heads``
            (and no ``head_dim``) or ``n_kv_heads`` does not divide ``n_heads``, for
            non-positive sizes or ``scale``, a dropout outside [0, 1), or
            ``proj_values=False`` with ``input_dim != head_dim``.
        TypeError: for a ``position`` that is not an ``AttentionPosition``.
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
        if position is not None and not all(
            callable(getattr(position, name, None)) for name in ("rotate", "bias", "value_term")
        ):
            raise TypeError(
                "position must be an attnlab.encodings.AttentionPosition (rotate, bias, value_term), "
                f"got {type(position).__name__}"
            )
        # A submodule, so its parameters (T5 buckets, Shaw's vectors) train and are saved.
        self.position: AttentionPosition | None = position
        self._keys: Tensor | None = None  # [B, Hkv, S, Dh] after init_keys
        self._values: Tensor | None = None  # [B, Hkv, S, Dh or F]
        self.attn_weights = None

    def init_keys(self, keys: Tensor) -> None:
        """Project ``keys [B, S, F]`` (also the values) once, for later ``forward(query, mask=...)``.

        The labs' stateful use: the keys live on the module, so one caller at a time.
        Concurrent callers pass ``key`` to :meth:`forward` (or a cross-attention ``cache``).
        """
        self._check_input("keys", keys)
        self._keys, self._values = self.layout.project_keys_values(self.in_proj, keys, None,
                                                                   proj_values=self.proj_values)

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
        bias: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
        cache: KVCache | None = None,
        self_attention: bool | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query [B, T, F]`` to ``key``/``value``, to the query itself, or to the ``init_keys``.

        Args:
            query: ``[B, T, F]``.
            key: ``[B, S, F]``. None: the query itself (self-attention) unless there are
                keys from elsewhere: those of :meth:`init_keys`, or of a ``cache`` filled
                by cross-attention (see ``self_attention``).
            value: ``[B, S, F]``; defaults to ``key``.
            mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``; 3-d is
                ``[B|1, T|1, S]`` for every head, 2-d is ``[T, S]`` for every sequence
                (:func:`attnlab.attention.masks.attention_mask`).
            bias: additive float scores broadcastable to ``[B, H, T, S]`` (``[H, T, S]``
                as :func:`attnlab.attention.attend`: a 3-d bias is per head, unlike a
                3-d mask), added to the position scheme's bias.
            key_padding_mask: boolean ``[B, S]`` in torch's polarity, **True = padding**
                (ignored), as ``nn.MultiheadAttention`` takes it; combined with ``mask``
                by "and".
            need_weights: also return the weights ``[B, H, T, S]``.
            is_causal: causal mask aligned bottom-right (see :func:`attend`); with a
                self-attention ``cache`` the new queries see every cached step.
            cache: a :class:`attnlab.attention.KVCache` for step-by-step decoding
                (it holds ``Hkv`` heads). In self-attention the new steps' keys and
                values are appended to it and the queries attend to all of them;
                otherwise (cross-attention) it is filled from ``key``/``value`` on the
                first call (``cache.stored``) and reused, ``key`` ignored, afterwards.
            self_attention: True: queries, keys and values are steps of one sequence,
                so the position scheme applies and a cache is appended to; ``key`` and
                ``value`` (default: the query) may be other tensors of that sequence
                (a clone, a slice), of the query's ``[B, T]``. False: cross-attention,
                even for ``mha(x, x, x)``. None (default): self-attention when ``key is
                query`` (``value`` None or ``query``), or when ``key`` and ``value`` are
                None and neither :meth:`init_keys` keys nor a ``cache.stored`` exist;
                else cross-attention. A cross-attention layer should say False: a
                forgotten ``init_keys`` then raises instead of attending to the query.

        Returns:
            ``out [B, T, D]``, or ``(out, weights [B, H, T, S])`` with ``need_weights``.

        Raises:
            TypeError / ValueError: for inputs of the wrong type or shape, masks or a bias
                of the wrong dtype or shape, a position scheme in cross-attention, or
                self-attention with a ``key`` that is not of the query's sequence.
            RuntimeError: for cross-attention (``self_attention=False``) without
                ``key``, before :meth:`init_keys`.
        """
        if isinstance(key, Tensor) and key.dtype == torch.bool and value is None and mask is None:
            # The labs call mha(query, mask) positionally; keys are never boolean.
            key, mask = None, key
        self._check_input("query", query)
        if key is None and value is not None:
            raise ValueError("value given without key: pass both, or neither (self-attention, or after init_keys())")
        if self_attention is None:
            self_attention = (
                key is query and (value is None or value is query) if key is not None
                else self._keys is None and not (cache is not None and cache.stored)
            )
        position = self.position
        past = 0  # self-attention: position of the first query (steps already cached)
        self_attention = check_bool("self_attention", self_attention)
        if self_attention:
            if cache is not None and cache.stored:
                raise ValueError("self-attention with a cache holding cross-attention keys (filled by "
                                 "store()): give each attention layer a cache of its own")
            q, keys, values = self._project_self(query, key, value)  # [B, H, T, Dh], [B, Hkv, T, Dh] x 2
            if cache is not None:
                past = len(cache)
            if position is not None:
                # Rotary turns q and k by their positions; keys are cached turned.
                q, keys = position.rotate(q, keys, q_offset=past, k_offset=past)
            if cache is not None:
                keys, values = cache.append(keys, values)  # [B, Hkv, S, Dh]: every step so far
        elif position is not None:
            raise ValueError(
                f"this MultiHeadAttention has a position scheme ({type(position).__name__}), which applies to "
                "self-attention only: call it as mha(x), or mha(x, k, v, self_attention=True)"
            )
        else:
            q, keys, values = self._project_cross(query, key, value, cache)
        B, H, T, _ = q.shape
        S = keys.shape[2]
        if keys.shape[0] != B:
            raise ValueError(
                f"query has batch {B} but the keys (given, from init_keys() or cached) have batch {keys.shape[0]}"
            )
        mask = attention_mask(None if mask is None else self._mask(mask), key_padding_mask, target=(B, H, T, S))
        if bias is not None:
            check_bias(bias, (B, H, T, S))

        recording = is_recording()
        out, weights = attend_with_position(
            q, keys, values, position=position, backend=self.backend, q_offset=past, mask=mask, bias=bias,
            is_causal=is_causal, scale=self.scale, dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights or recording,
        )  # out [B, H, T, Dv], weights [B, H, T, S] or None
        # Outside recording, forget old weights: collect_attention must not report a stale run.
        # (Assigned only when it changes: nn.Module.__setattr__ costs more than the check.)
        recorded = weights.detach() if recording and weights is not None else None
        if recorded is not None:
            record(self, recorded)  # this context's block: what collect_attention reads inside it
        if recorded is not None or self.attn_weights is not None:
            self.attn_weights = recorded
        self._attended(q, keys, mask, bias, is_causal, cache, past if self_attention else None, weights)
        Dv = out.shape[3]
        context = out.transpose(1, 2).reshape(B, T, H * Dv)  # [B, T, H * Dv], heads side by side
        result = self.linear_out(context)  # [B, T, D]
        if need_weights:
            assert weights is not None
            return result, weights
        return result

    def _project_self(self, query: Tensor, key: Tensor | None, value: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's ``q [B, H, T, Dh]``, ``keys [B, Hkv, T, Dh]``, ``values`` (one matmul if all are query)."""
        key = query if key is None else key
        value = key if value is None else value
        for name, t in (("key", key), ("value", value)):
            if t is not query:
                self._check_input(name, t)
                if t.shape[:2] != query.shape[:2]:
                    raise ValueError(
                        f"self-attention: {name} must hold the query's sequence, [B, T] = {list(query.shape[:2])}, "
                        f"got {list(t.shape)}; for another sequence pass self_attention=False"
                    )
        return self.layout.project(self.in_proj, query, key, value, proj_values=self.proj_values)

    def _project_cross(
        self, query: Tensor, key: Tensor | None, value: Tensor | None, cache: KVCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Cross-attention's ``q [B, H, T, Dh]``, keys/values ``[B, Hkv, S, Dh]``: cached, init_keys', or given."""
        if cache is not None and len(cache):
            # Later steps: the encoder's keys were projected on the first.
            keys, values = cache.keys, cache.values
            assert keys is not None and values is not None
        elif key is None:
            if self._keys is None or self._values is None:
                raise RuntimeError("no keys: call init_keys(keys) first, or pass key (and value), for cross-attention")
            keys, values = self._keys, self._values
        else:
            self._check_input("key", key)
            if value is not None:
                self._check_input("value", value)
            q, keys, values = self.layout.project(self.in_proj, query, key, value, proj_values=self.proj_values)
            if cache is not None:
                cache.store(keys, values)
            return q, keys, values
        return self.layout.project_queries(self.in_proj, query), keys, values

    # -- what a subclass may add (LabMultiHeadAttention keeps the labs' alphas) ----------

    def _mask(self, mask: Tensor) -> Tensor:
        """The user's mask, as given: attnlab's modules take booleans only (``check_mask`` says so)."""
        return mask

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
        masks with True = may attend (convert with :func:`attnlab.attention.masks.from_torch_mask`),
        or torch's key-padding mask as it is (``key_padding_mask=``). A bias-free
        ``mha`` (``bias=False``) gives a bias-free copy.

        Raises:
            TypeError: if ``mha`` is not an ``nn.MultiheadAttention``.
            ValueError: for features attnlab does not model (``kdim``/``vdim`` different
                from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``).
        """
        return from_torch_module(cls, mha)

    def extra_repr(self) -> str:
        extra = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extra += "" if self.proj_bias else ", bias=False"
        extra += "" if self.scale is None else f", scale={self.scale}"
        return (
            f"n_heads={self.n_heads}, d_model={self.d_model}, input_dim={self.input_dim}, "
            f"head_dim={self.head_dim}, proj_values={self.proj_values}, dropout={self.dropout}{extra}"
        )
