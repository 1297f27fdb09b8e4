"""``attend``: the one attention function every attnlab module calls.

Scaled dot-product attention (Vaswani et al. 2017, §3.2.1, arXiv:1706.03762)::

    weights = softmax(q @ k^T * scale + bias, masked)     # [B, H, T, S]
    out     = weights @ v                                  # [B, H, T, Dv]

Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245): ``key`` and
``value`` may have fewer heads ``Hkv`` than ``query``'s ``H`` (``Hkv`` dividing
``H``); query head ``h`` then reads key/value head ``h // (H / Hkv)`` (HF's
``repeat_kv`` layout), without the keys ever being copied ``H / Hkv`` times: the
fused path passes ``enable_gqa=True`` to SDPA (torch >= 2.5), the explicit path
stacks each group's queries against its one key/value head.

Two paths, one result (they agree to 1e-6 in float32):

* without weights, torch's fused ``F.scaled_dot_product_attention`` (flash /
  memory-efficient kernels: memory linear in the length, no ``[T, S]`` matrix
  kept for backward on kernels that support it);
* with ``need_weights=True``, an explicit softmax that returns the weights too,
  for plots and for the labs' ``alphas``.

Conventions (DESIGN.md): ``mask`` is boolean, **True = may attend**,
broadcastable to ``[B, H, T, S]`` (SDPA's convention; ``nn.MultiheadAttention``
uses the opposite, see :mod:`attnlab.attention.masks`). Masked scores become
``-inf``, never ``-1e9`` (which overflows float16). A query row with no key it
may attend to gets an output of zeros and zero gradients, never NaN, on every
device and kernel. Half-precision scores are softmaxed in float32.

Guards against numbers attention cannot use, which :func:`attend` and the long-context
paths (chunked, FlexAttention) apply first, so that every path gives the same answer:
:func:`drop_unseen_keys` (a key the mask hides from every query has no effect whatever
it holds) and :func:`check_scale_range` (a scale the kernels would turn into inf is
refused by name). Scores too large to form are the third, :func:`attnlab._finite.bounded_pair`.

Shape notation: ``B`` batch, ``H`` heads, ``Hkv`` key/value heads, ``T`` queries,
``S`` keys, ``Dh`` query/key width, ``Dv`` value width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab._finite import bounded_pair
from attnlab._validate import check_bool, check_device, check_finite_float, check_probability

__all__ = ["attend", "attend_unchecked", "check_bias", "check_mask", "check_scale_range", "drop_unseen_keys",
           "repeat_kv_heads"]

# SDPA's enable_gqa (torch >= 2.5); on an older torch the fused path repeats the key/value heads.
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def _check_inputs(query: Tensor, key: Tensor, value: Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape [B, H, L, D] (4 dims), got {list(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same width Dh, got query {list(query.shape)} "
            f"and key {list(key.shape)}"
        )
    if query.shape[-1] == 0:
        raise ValueError(f"query and key have width Dh = 0 (query {list(query.shape)}): attention needs Dh >= 1")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length S, got key {list(key.shape)} "
            f"and value {list(value.shape)}"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if len({query.shape[0], key.shape[0], value.shape[0]} - {1}) > 1:
        raise ValueError(
            f"query, key and value disagree on batch B: {list(query.shape)}, {list(key.shape)}, {list(value.shape)}"
        )
    H, Hk, Hv = query.shape[1], key.shape[1], value.shape[1]
    if Hk != Hv and 1 not in (Hk, Hv):
        raise ValueError(f"key and value disagree on heads Hkv: {list(key.shape)}, {list(value.shape)}")
    Hkv = max(Hk, Hv)
    if H != 1 and Hkv != 1 and H % Hkv:
        raise ValueError(
            f"query has H = {H} heads, which is not a multiple of the key/value heads Hkv = {Hkv} "
            "(grouped-query attention: each key/value head serves H / Hkv query heads)"
        )


def repeat_kv_heads(x: Tensor, n_heads: int) -> Tensor:
    """Key/value heads ``[B, Hkv, L, D]`` repeated to ``[B, H, L, D]``: head ``h`` is head ``h // (H / Hkv)``.

    What grouped-query attention means (HF's ``repeat_kv``, equal to
    ``x.repeat_interleave(H // Hkv, dim=1)``), for code that needs one key per query
    head (e.g. a positional scheme that scores ``q . k`` itself); :func:`attend` never
    materialises it. ``Hkv`` must divide ``H`` (checked by the callers).

    Args:
        x: ``[B, Hkv, L, D]``.
        n_heads: ``H``.

    Returns:
        ``[B, H, L, D]`` (``x`` itself when ``Hkv == H``).

    Example:
        >>> repeat_kv_heads(torch.tensor([1., 2.]).view(1, 2, 1, 1), 4).flatten().tolist()
        [1.0, 1.0, 2.0, 2.0]
    """
    B, Hkv, L, D = x.shape
    if Hkv == n_heads:
        return x
    expanded = x[:, :, None].expand(B, Hkv, n_heads // Hkv, L, D)  # [B, Hkv, H / Hkv, L, D], a view
    return expanded.reshape(B, n_heads, L, D)  # [B, H, L, D]


def _broadcast_check(name: str, t: Tensor, target: tuple[int, int, int, int]) -> None:
    """Raise unless ``t`` broadcasts to ``target`` without growing it.

    Written out rather than with ``torch.broadcast_shapes``, whose Python
    implementation costs more than the attention itself at the labs' sizes.
    """
    shape = tuple(t.shape)
    ok = len(shape) <= 4 and all(s in (1, n) for s, n in zip(reversed(shape), reversed(target), strict=False))
    if not ok:
        raise ValueError(f"{name} of shape {list(shape)} does not broadcast to [B, H, T, S] = {list(target)}")


def check_mask(mask: Tensor, target: tuple[int, int, int, int]) -> None:
    """Raise unless ``mask`` is a boolean tensor broadcastable to ``target`` ``[B, H, T, S]``.

    Raises:
        TypeError: if ``mask`` is not a boolean tensor.
        ValueError: if its shape does not broadcast to ``target``.
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(
            f"mask must be a boolean tensor (True = may attend), got {got}; "
            "for an additive float mask pass it as bias="
        )
    _broadcast_check("mask", mask, target)


def check_bias(bias: Tensor, target: tuple[int, int, int, int]) -> None:
    """Raise unless ``bias`` is a floating tensor broadcastable to ``target`` ``[B, H, T, S]``.

    Raises:
        TypeError: if ``bias`` is not a floating-point tensor.
        ValueError: if its shape does not broadcast to ``target``.
    """
    if not isinstance(bias, Tensor) or not bias.is_floating_point():
        got = bias.dtype if isinstance(bias, Tensor) else type(bias).__name__
        raise TypeError(f"bias must be a floating-point tensor of additive scores, got {got}")
    _broadcast_check("bias", bias, target)


# -- guards: numbers attention cannot use ------------------------------------------------------------

def check_scale_range(scale: float, dtype: torch.dtype) -> None:
    """Raise unless ``scale`` is finite in ``dtype``, the dtype the kernels multiply it in.

    ``1e308`` is a finite Python float but inf in float32: every score would be inf or NaN.

    Raises:
        ValueError: naming ``scale``, its value and the dtype's range.
    """
    largest = torch.finfo(dtype).max
    if not abs(scale) <= largest:
        raise ValueError(f"scale must be finite in the queries' dtype {dtype} (|scale| <= {largest:.3g}), "
                         f"got {scale:g}")


def drop_unseen_keys(key: Tensor, value: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``key [B, Hkv, S, Dh]`` and ``value [B, Hkv, S, Dv]`` with zeros at the keys no query may attend to.

    A masked key must have no effect whatever it holds: its weight is 0, but ``0 * inf`` and
    ``0 * NaN`` are NaN, in the scores and in ``weights @ value`` alike, on every kernel. A key
    that ``mask`` (boolean, True = may attend, broadcastable to ``[B, H, T, S]``) hides from every
    query of its row is replaced by zeros, which is exactly attention without that key. A key
    some query may see keeps its values (those queries read them). On the CPU nothing is
    copied unless some key is hidden; elsewhere asking would sync the device, so the fill runs.

    Returns:
        ``(key, value)``, the inputs themselves when no key is hidden (on the CPU).
    """
    if mask.dim() == 0:
        return key, value
    seen = mask.any(dim=-2) if mask.dim() >= 2 else mask  # [..., S]: some query may attend to the key
    seen = seen.reshape((1,) * (3 - seen.dim()) + tuple(seen.shape))  # [B|1, H|1, S]
    Hkv = max(key.shape[1], value.shape[1])
    if seen.shape[1] not in (1, Hkv):  # query heads H > Hkv: a key/value head serves H / Hkv of them
        seen = seen.reshape(seen.shape[0], Hkv, -1, seen.shape[-1]).any(dim=2)  # [B|1, Hkv, S]
    unseen = ~seen.to(key.device)[..., None]  # [B|1, Hkv|1, S, 1]
    # Traced (torch.compile, torch.export), asking would break the graph: the fill runs, as on an accelerator.
    if key.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(unseen.any()):
        return key, value
    return key.masked_fill(unseen, 0.0), value.masked_fill(unseen, 0.0)


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention with a boolean mask and an additive bias.

    Args:
        query: ``[B, H, T, Dh]``.
        key: ``[B, Hkv, S, Dh]``: ``Hkv == H``, or fewer heads ``Hkv`` dividing ``H``
            (grouped-query attention; 1: multi-query), or 1 to broadcast.
        value: ``[B, Hkv, S, Dv]``, the heads of ``key``.
        mask: boolean, True where query ``t`` may attend to key ``s``;
            broadcastable to ``[B, H, T, S]`` (e.g. ``[B, 1, 1, S]`` for padding,
            ``[T, S]`` for causal). None lets every query see every key.
        bias: additive float scores, ``[H, T, S]`` or ``[B, H, T, S]`` (or
            anything broadcastable): the hook for relative encodings and ALiBi.
        dropout_p: dropout on the attention weights; pass 0.0 in eval (this
            function does not know the module's mode).
        scale: multiplier of ``q @ k^T``; defaults to ``1 / sqrt(Dh)``.
        need_weights: also return the attention weights (the explicit path).
        is_causal: query ``t`` sees keys ``<= S - T + t``: the causal mask aligned
            to the **bottom right**, so the ``T`` newest queries of a cached decoder
            see every earlier key (SDPA's own ``is_causal`` is aligned top-left,
            which is wrong as soon as ``T != S``). Combined with ``mask`` by "and".

    Returns:
        ``(out [B, H, T, Dv], weights [B, H, T, S] or None)``. The weights are
        those before dropout (the distribution the model computed); ``out`` uses
        the dropped-out ones. Rows with no key to attend to are all zeros in both.

    Raises:
        TypeError: for non-tensor or non-floating inputs, a non-boolean mask
            (for an additive float mask use ``bias``), or mismatched dtypes.
        ValueError: for a width ``Dh`` of 0, a ``scale`` that is not finite in the queries'
            dtype, wrong ranks, mismatched sizes (key/value heads ``Hkv`` that
            do not divide the query's ``H``), or a mask / bias that does not
            broadcast to ``[B, H, T, S]``.

    Note:
        The guarantees (both paths agree, empty rows are zeros, no NaN) assume
        finite inputs; they are not checked, which would cost a pass over every
        tensor. A key that ``mask`` hides from every query has no effect whatever it
        holds (NaN, inf: it is replaced by zeros, :func:`drop_unseen_keys`); a NaN or
        inf in a key or value some query sees reaches that query's output. With a
        ``bias`` or ``need_weights``, queries and keys too large for their scores to be
        formed are scaled down first (:func:`attnlab._finite.bounded_pair`), so large
        finite inputs give finite outputs; without, the fused kernel forms them as it
        does (an overflowing score gives NaN there). Only ``mask`` marks a
        row empty: a ``bias`` that is ``-inf`` across a whole row (an additive
        mask) gives NaN on the explicit path, so pass masks as ``mask=``. With
        half-precision queries the bias is added in float32 on the CPU; on other
        devices the fused path rounds it to the queries' dtype first (CUDA's
        memory-efficient kernel requires it), the explicit path never does.

    Example:
        >>> q = torch.tensor([.55, .95]).view(1, 1, 1, 2)
        >>> k = torch.tensor([[.65, .2], [.85, -.4], [-.95, -.75]]).view(1, 1, 3, 2)
        >>> out, w = attend(q, k, k, scale=1.0, need_weights=True)
        >>> w.round(decimals=4)
        tensor([[[[0.5557, 0.3508, 0.0935]]]])
    """
    _check_inputs(query, key, value)
    dropout_p = check_probability("dropout_p", dropout_p)
    if scale is not None:
        scale = check_finite_float("scale", scale)
    target = (
        max(query.shape[0], key.shape[0], value.shape[0]),
        max(query.shape[1], key.shape[1], value.shape[1]),
        query.shape[-2],
        key.shape[-2],
    )  # [B, H, T, S]
    if mask is not None:
        check_mask(mask, target)
        check_device("mask", mask, query.device, of="query, key and value")
    if bias is not None:
        check_bias(bias, target)
        check_device("bias", bias, query.device, of="query, key and value")
    return attend_unchecked(
        query, key, value, mask=mask, bias=bias, dropout_p=dropout_p, scale=scale,
        need_weights=check_bool("need_weights", need_weights), is_causal=check_bool("is_causal", is_causal),
    )


def attend_unchecked(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    dropout_p: float,
    scale: float | None,
    need_weights: bool,
    is_causal: bool,
    guarded: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """:func:`attend` without re-validating its arguments.

    For attnlab's own modules, which build ``query``/``key``/``value`` themselves and
    validate the user's mask once: at the labs' sizes the checks cost as much as
    the attention. Same arguments and results as :func:`attend`: ``query [B, H, T, Dh]``,
    ``key [B, Hkv, S, Dh]``, ``value [B, Hkv, S, Dv]`` (``Hkv`` dividing ``H``) give
    ``out [B, H, T, Dv]`` and ``weights [B, H, T, S]`` (or None).

    ``guarded=True``: the caller has already replaced the keys ``mask`` hides by zeros and
    bounded ``query`` and ``key`` for ``scale`` (``attend_with_position`` does both before
    the scheme reads them), so neither runs twice: both are idempotent, and on a padded batch
    the second pass cost a masked fill and a copy of the keys and values, and their backward,
    per call (in a profile of random-ALiBi on padded batches of 64, about 8% of a step).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    check_scale_range(scale, query.dtype)
    if mask is not None and not guarded:
        key, value = drop_unseen_keys(key, value, mask)
    if (bias is not None or need_weights) and not guarded:
        # Where scores meet a term (or are formed here), they must not overflow first (attnlab._finite).
        query, key = bounded_pair(query, key, scale)
    T, S = query.shape[-2], key.shape[-2]
    H, Hkv = query.shape[1], max(key.shape[1], value.shape[1])
    grouped = 1 < Hkv < H  # grouped-query attention: query head h reads key/value head h // (H / Hkv)
    if grouped and key.shape[1] != value.shape[1]:
        key, value = key.expand(-1, Hkv, -1, -1), value.expand(-1, Hkv, -1, -1)  # the one with 1 head: a view
    if is_causal and T == 1 and S >= 1:
        is_causal = False  # bottom-right: the newest query sees every key
    if is_causal and (T != S or mask is not None or bias is not None or need_weights):
        # SDPA's flag is top-left aligned and exclusive of attn_mask: build the mask.
        causal = torch.ones(T, S, dtype=torch.bool, device=query.device).tril(S - T)  # [T, S]
        mask = causal if mask is None else mask.to(query.device) & causal
        is_causal = False

    empty_rows: Tensor | None = None  # [B|1, H|1, T, 1] True where a query may attend to nothing
    if mask is not None:
        mask = mask.to(query.device)
        # Rows with nothing to attend to attend everywhere instead (a finite softmax
        # and finite gradients on every kernel), and their output is zeroed below.
        # On an accelerator this is done unconditionally (asking whether any row is
        # empty would sync the device every call); on the CPU asking is free, and
        # skipping the guard when no row is empty saves two ops and a backward node. Traced (torch.compile,
        # torch.export), asking would break the graph: the guard is applied, as on an accelerator.
        empty_rows = ~mask.any(dim=-1, keepdim=True)
        if query.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(empty_rows.any()):
            empty_rows = None
        else:
            mask = mask | empty_rows
    if bias is not None:
        bias = bias.to(device=query.device)

    if need_weights:
        out, weights = _explicit(query, key, value, mask, bias, dropout_p, scale)
    else:
        gqa: dict[str, bool] = {}
        if grouped:
            if _SDPA_GQA:
                gqa["enable_gqa"] = True
            else:
                key, value = repeat_kv_heads(key, H), repeat_kv_heads(value, H)  # [B, H, S, Dh], [B, H, S, Dv]
        attn_mask: Tensor | None = mask
        if bias is not None:
            # SDPA takes one mask: fold the boolean mask into the additive bias. For
            # half-precision queries on the CPU the bias stays float32 (SDPA accepts a
            # float32 mask there): rounding it to bfloat16 would lose a positional bias's
            # small differences (ALiBi's -slope * 3000 + 0.1). CUDA's memory-efficient
            # kernel insists on the query's dtype, so elsewhere it is cast.
            mask_dtype = query.dtype
            if query.dtype in (torch.float16, torch.bfloat16) and query.device.type == "cpu":
                mask_dtype = torch.float32
            attn_mask = bias.to(mask_dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        if attn_mask is not None and attn_mask.dim() < 2:
            # SDPA indexes the mask's dim -2: a key-padding mask [S] (or a scalar)
            # broadcasts to [B, H, T, S] but raised IndexError there.
            attn_mask = attn_mask.reshape((1,) * (2 - attn_mask.dim()) + tuple(attn_mask.shape))  # [1, S] or [1, 1]
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale, is_causal=is_causal, **gqa
        )  # [B, H, T, Dv]
        weights = None
    if empty_rows is not None:
        out = out.masked_fill(empty_rows, 0.0)
        if weights is not None:
            weights = weights.masked_fill(empty_rows, 0.0)
    return out, weights


def _explicit(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    bias: Tensor | None,
    dropout_p: float,
    scale: float,
) -> tuple[Tensor, Tensor]:
    """The textbook path, returning the weights: ``softmax(q k^T * scale + bias) v``.

    With grouped-query attention (``key``/``value`` with ``Hkv < H`` heads) the ``H / Hkv``
    query heads of a group are stacked along the queries and meet their one key/value
    head in one matmul, so no ``[B, H, S, Dh]`` copy of the keys is made.
    """
    # Half precision: scores and softmax in float32 so large logits neither
    # overflow nor lose the small differences softmax depends on.
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q, k = query.to(compute), key.to(compute)
    H, T, S, Hkv = q.shape[1], q.shape[2], k.shape[2], k.shape[1]
    groups = H // Hkv if 1 < Hkv < H else 1
    if groups > 1:
        q = q.reshape(q.shape[0], Hkv, groups * T, q.shape[3])  # [B, H, T, Dh] -> [B, Hkv, G * T, Dh]
    scores = (q @ k.transpose(-2, -1)) * scale  # [B, H, T, Dh] x [B, H, Dh, S] -> [B, H, T, S] (G * T rows if grouped)
    if groups > 1:
        scores = scores.view(scores.shape[0], H, T, S)  # [B, Hkv, G * T, S] -> [B, H, T, S]
    if bias is not None:
        scores = scores + bias.to(compute)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # [B, H, T, S]
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    dropped = dropped.to(value.dtype)
    if groups > 1:
        stacked = dropped.reshape(dropped.shape[0], Hkv, groups * T, S)  # [B, H, T, S] -> [B, Hkv, G * T, S]
        out = stacked @ value  # [B, Hkv, G * T, S] x [B, Hkv, S, Dv] -> [B, Hkv, G * T, Dv]
        out = out.view(out.shape[0], H, T, out.shape[3])  # [B, H, T, Dv]
    else:
        out = dropped @ value  # [B, H, T, S] x [B, H, S, Dv] -> [B, H, T, Dv]
    return out, weights.to(query.dtype)
