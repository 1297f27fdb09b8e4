"""Guards of attention against numbers it cannot use: a scale beyond the dtype, values in keys no query sees.

:func:`attnlab.attention.attend` and the long-context paths (chunked, FlexAttention) call them
first, so that every path gives the same answer: a key the mask hides from every query has no
effect whatever it holds, and a scale the kernels would turn into inf is refused by name.
(Scores too large to form are the other guard, :func:`attnlab._finite.bounded_pair`.)

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T`` queries,
``S`` keys, ``Dh`` head dim, ``Dv`` value width.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_scale_range", "drop_unseen_keys"]


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
    if key.device.type == "cpu" and not bool(unseen.any()):
        return key, value
    return key.masked_fill(unseen, 0.0), value.masked_fill(unseen, 0.0)
