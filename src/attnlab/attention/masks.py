"""Boolean attention masks: True = may attend.

attnlab's masks follow ``F.scaled_dot_product_attention`` (and the labs, whose
``mask == 0`` means "hidden"): True where a query may look at a key.
``nn.MultiheadAttention`` uses the opposite polarity (True = ignore); convert at
that boundary only, with :func:`to_torch_mask` / :func:`from_torch_mask`.

A causal mask is ``[T, S]``. When ``T == S`` it is the lower triangle. When
there are fewer queries than keys (decoding with a cache: the last ``T`` of
``S`` positions are being computed) it is aligned to the **bottom right**:
query ``t`` sits at position ``S - T + t`` and sees keys up to that position.
(SDPA's ``is_causal`` aligns top-left, which is wrong there: pytorch#108108.)

Example masks (1 = may attend)::

    causal_mask(3)        causal_mask(2, 4)       padding from lengths [3, 1]
    1 0 0                 1 1 1 0                 1 1 1
    1 1 0                 1 1 1 1                 1 0 0
    1 1 1

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``F`` features.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._limits import check_tensor
from attnlab._validate import check_int
from attnlab.attention.functional import check_mask

__all__ = [
    "as_bool_mask",
    "attention_mask",
    "causal_mask",
    "from_key_padding_mask",
    "from_torch_mask",
    "padding_mask",
    "padding_mask_from_lengths",
    "subsequent_mask",
    "to_torch_mask",
]


def as_bool_mask(mask: Tensor) -> Tensor:
    """The labs' 0/1 mask as attnlab's boolean one: ``mask == 0`` is masked, so True = may attend.

    The labs build masks as floats (``1 - torch.triu(...)``, ``(x != 0)``) and test
    ``mask == 0``; attnlab's modules take booleans. A boolean mask is returned as is,
    so callers convert once, where the mask first comes in, and pass booleans on.

    Args:
        mask: any shape (e.g. ``[B, 1, S]`` or ``[1, T, T]``), boolean or of a real
            dtype (float or integer) holding only 0 and 1.

    Returns:
        bool, the same shape: True where ``mask`` is non-zero.

    Raises:
        TypeError: if ``mask`` is not a tensor, or is complex.
        ValueError: if a non-boolean ``mask`` holds values other than 0 and 1 (an
            additive mask of 0 / -inf is not a 0/1 mask: pass it as ``bias=`` to ``attend``).

    Example:
        >>> as_bool_mask(torch.tensor([[[1., 0.]]]))
        tensor([[[ True, False]]])
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a tensor (True / 1 = may attend), got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise TypeError(f"mask must be boolean or hold real 0/1 values, got dtype {mask.dtype}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        bad = mask[(mask != 0) & (mask != 1)].flatten()[:3].tolist()
        raise ValueError(
            f"mask of dtype {mask.dtype} must hold only 0 (masked) and 1 (may attend), got values such as {bad}; "
            "an additive mask (0 / -inf) goes to attend() as bias="
        )
    return mask != 0


def padding_mask(x: Tensor) -> Tensor:
    """Mask out padding, where padding is a step whose features are all zero (the attention lab).

    Args:
        x: ``[B, S, F]`` padded sequences.

    Returns:
        bool ``[B, 1, S]``: True for real steps. Unsqueeze once more (``[B, 1, 1, S]``)
        to broadcast over heads and queries in :func:`attnlab.attention.attend`.

    Raises:
        ValueError: if ``x`` is not 3-D.

    Example:
        >>> padding_mask(torch.tensor([[[-1., 1.], [0., 0.]]]))
        tensor([[[ True, False]]])
    """
    if not isinstance(x, Tensor) or x.dim() != 3:
        shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [B, S, F], got {shape}")
    # "any feature non-zero" is a real step; the attention lab writes (x != 0).all(axis=2), which
    # also hides a real point that has one coordinate exactly 0.
    return (x != 0).any(dim=-1).unsqueeze(1)  # [B, 1, S]


def padding_mask_from_lengths(lengths: Tensor | list[int], max_len: int | None = None) -> Tensor:
    """Mask from valid lengths (the d2l chapter's ``valid_lens``): True for the first ``lengths[b]`` steps.

    Args:
        lengths: ``[B]`` integer lengths.
        max_len: ``S``; defaults to ``max(lengths)``.

    Returns:
        bool ``[B, 1, S]``.

    Raises:
        ValueError: for negative lengths, lengths above ``max_len``, not 1-D, or a mask
            that cannot fit in memory (naming ``max_len``).
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point():
        raise ValueError(
            f"lengths must be a 1-D tensor of integers, got {lengths.dtype} {list(lengths.shape)}"
        )
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    max_len = check_int("max_len", max_len, minimum=0)
    if longest > max_len:
        raise ValueError(f"a length ({longest}) exceeds max_len={max_len}")
    # The steps (int64) and the [B, S] comparison (bool).
    check_tensor({"max_len": max_len}, f"the mask of {lengths.numel()} lengths", itemsize=8 + lengths.numel(),
                 device=lengths.device)
    steps = torch.arange(max_len, device=lengths.device)
    return (steps[None, :] < lengths[:, None]).unsqueeze(1)  # [B, 1, S]


def causal_mask(
    n_queries: int, n_keys: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Causal mask aligned to the bottom right: query ``t`` sees keys ``<= S - T + t``.

    Args:
        n_queries: ``T``.
        n_keys: ``S`` (>= ``T``); defaults to ``T``.
        device: where to build it.

    Returns:
        bool ``[T, S]``.

    Raises:
        ValueError: if ``T < 1`` or ``S < T``, or for a mask that cannot fit in memory
            (naming ``n_queries`` and ``n_keys``), before anything is allocated.
    """
    n_queries = check_int("n_queries", n_queries, minimum=1)
    n_keys = n_queries if n_keys is None else check_int("n_keys", n_keys, minimum=1)
    if n_keys < n_queries:
        raise ValueError(f"n_keys ({n_keys}) must be >= n_queries ({n_queries}) for a causal mask")
    check_tensor({"n_queries": n_queries, "n_keys": n_keys}, "the bool mask", itemsize=1, copies=2, device=device)
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=n_keys - n_queries)  # [T, S]


def subsequent_mask(size: int) -> Tensor:
    """The labs' ``subsequent_mask``: a causal mask ``[1, size, size]``, as booleans.

    Example:
        >>> subsequent_mask(2)
        tensor([[[ True, False],
                 [ True,  True]]])
    """
    return causal_mask(size).unsqueeze(0)  # [1, L, L]


def to_torch_mask(mask: Tensor) -> Tensor:
    """attnlab's mask (True = may attend) to ``nn.MultiheadAttention``'s (True = ignore).

    Works for ``attn_mask [T, S]`` and for a key-padding mask: pass ``[B, S]``
    (squeeze the ``[B, 1, S]`` of :func:`padding_mask` first).

    Raises:
        TypeError: if ``mask`` is not a boolean tensor.
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    return ~mask


def from_torch_mask(mask: Tensor) -> Tensor:
    """``nn.MultiheadAttention``'s mask (True = ignore, or a float mask of 0 / -inf) to attnlab's.

    ``attn_mask [T, S]`` or ``key_padding_mask [B, S]`` give a mask of the same shape.

    Raises:
        TypeError: if ``mask`` is not a tensor, or is a float mask holding values
            other than 0 and -inf (an additive mask: pass it to ``attend`` as
            ``bias`` instead).
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        hidden = torch.isneginf(mask)
        if not torch.all(hidden | (mask == 0)):
            raise TypeError("a float mask with values other than 0 and -inf is additive: pass it as bias=")
        return ~hidden
    return mask == 0  # byte masks: non-zero = ignore


def from_key_padding_mask(key_padding_mask: Tensor, *, batch: int, n_keys: int) -> Tensor:
    """torch's ``key_padding_mask [B, S]`` (True = padding, ignored) as attnlab's ``[B, 1, 1, S]`` (True = may attend).

    The argument ``nn.MultiheadAttention`` and ``nn.Transformer*`` take, checked
    against the call's sizes: exactly ``[B, S]``, boolean. It is kept apart from
    ``mask`` (the other polarity) because a ``[B, S]`` tensor passed where a
    ``[T, S]`` mask is expected broadcasts without a word whenever ``B == T``.

    Args:
        key_padding_mask: boolean ``[B, S]``, True where key ``s`` of sequence ``b`` is padding.
        batch: ``B``, the batch of the call.
        n_keys: ``S``, the number of keys of the call.

    Returns:
        bool ``[B, 1, 1, S]``, True where the key may be attended to: broadcasts over
        heads and queries, to combine with a mask by "and".

    Raises:
        TypeError: if ``key_padding_mask`` is not a boolean tensor (a float 0 / -inf
            padding mask: convert it with ``from_torch_mask`` and pass it as ``mask=``).
        ValueError: if its shape is not ``[B, S]`` (naming the shape and the expected one).

    Example:
        >>> from_key_padding_mask(torch.tensor([[False, True]]), batch=1, n_keys=2)
        tensor([[[[ True, False]]]])
    """
    if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
        got = key_padding_mask.dtype if isinstance(key_padding_mask, Tensor) else type(key_padding_mask).__name__
        raise TypeError(
            f"key_padding_mask must be a boolean tensor [B, S], True = padding (torch's polarity), got {got}; "
            "for a float 0 / -inf mask use mask=from_torch_mask(m)[:, None, None, :]"
        )
    if tuple(key_padding_mask.shape) != (batch, n_keys):
        raise ValueError(
            f"key_padding_mask must have shape [B, S] = {[batch, n_keys]}, got {list(key_padding_mask.shape)}"
        )
    return (~key_padding_mask)[:, None, None, :]  # [B, S] -> [B, 1, 1, S], True = may attend


def attention_mask(mask: Tensor | None, *, target: tuple[int, int, int, int]) -> Tensor | None:
    """A module's ``mask`` checked, and laid out to broadcast to ``[B, H, T, S]``.

    ``MultiHeadAttention``'s rule for its ``mask``: a 3-d mask ``[B|1, T|1, S]`` is
    the same for every head; a 2-d mask is ``[T, S]``, the same for every sequence
    (torch's ``attn_mask`` shape and SDPA's broadcasting). A 2-d mask whose first
    size is neither ``T`` nor 1 cannot be ``[T, S]``: it is refused, and the message
    points at torch's key-padding mask, the likely intent. (When ``B == T`` a
    ``[B, S]`` key-padding mask *is* a valid ``[T, S]`` shape and cannot be told
    apart: hence torch's mask goes through :func:`from_key_padding_mask`, at the
    one boundary that takes torch's call, :func:`attnlab.attention.interop.forward_like_torch`.)

    Args:
        mask: boolean, True = may attend, broadcastable to ``target`` (after the 3-d
            rule above), or None.
        target: ``[B, H, T, S]`` of the call.

    Returns:
        None for None; else a boolean mask broadcastable to ``[B, H, T, S]``, True
        where query ``t`` may attend to key ``s``.

    Raises:
        TypeError: for a non-boolean ``mask``.
        ValueError: for a ``mask`` that does not broadcast to ``target`` (a 2-d one
            that cannot be ``[T, S]`` says so).

    Example:
        >>> attention_mask(causal_mask(3)[None], target=(1, 2, 3, 3)).shape
        torch.Size([1, 1, 3, 3])
    """
    if mask is None:
        return None
    _, _, T, S = target
    if isinstance(mask, Tensor) and mask.dim() == 3:
        mask = mask.unsqueeze(1)  # [B|1, T|1, S] -> [B|1, 1, T|1, S]: same mask for every head
    elif isinstance(mask, Tensor) and mask.dim() == 2 and mask.shape[0] not in (1, T):
        raise ValueError(
            f"a 2-d mask is [T, S] = [{T}, {S}] (the same for every sequence), got {list(mask.shape)}; "
            "a key-padding mask [B, S] goes to key_padding_mask= of attnlab.attention.interop.forward_like_torch "
            "(True = padding, torch's polarity), or to mask= as m[:, None, :] ([B, 1, S], True = may attend)"
        )
    check_mask(mask, target)
    return mask
