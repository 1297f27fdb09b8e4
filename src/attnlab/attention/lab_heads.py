"""The labs' multi-head attention: attnlab's module, read as the labs read theirs after every call.

The labs' code reads ``layer.self_attn_heads.alphas`` straight after a forward,
and passes masks of 0/1 floats (``mask == 0`` is masked). attnlab's own
:class:`~attnlab.attention.MultiHeadAttention` computes weights only on request
(the fused kernel never forms them), so :class:`LabMultiHeadAttention`, which the
labs' layers (``EncoderSelfAttn``, ``DecoderSelfAttn``) use, keeps what the weights
need instead: each call's projected queries and keys, detached, from which
``alphas`` are computed on first access. The forward still runs the fused kernel.

Those kept tensors are the labs' stateful interface: one caller at a time.
attnlab's thread-safe prediction paths run inside ``keeping_alphas(False)`` and
leave nothing on the modules.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``H`` heads, ``Dh`` head dim.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab._validate import check_bool
from attnlab.attention.cache import KVCache
from attnlab.attention.functional import attend_unchecked
from attnlab.attention.masks import as_bool_mask
from attnlab.attention.multihead import MultiHeadAttention

__all__ = ["LabMultiHeadAttention", "keeping_alphas"]

# Whether LabMultiHeadAttention modules keep their alphas in this context (thread, task); see keeping_alphas.
_KEEPING: contextvars.ContextVar[bool] = contextvars.ContextVar("attnlab_keep_lab_alphas", default=True)


@contextmanager
def keeping_alphas(enabled: bool) -> Iterator[None]:
    """Within this block (in this thread only), :class:`LabMultiHeadAttention` keeps, or not, what ``alphas`` needs.

    attnlab's thread-safe prediction paths (e.g. ``EncoderDecoderSelfAttn.predict``)
    run inside ``keeping_alphas(False)``, so that they leave nothing on the modules;
    the labs' own entry points (``forward``) keep them, as the labs do.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    token = _KEEPING.set(check_bool("enabled", enabled))
    try:
        yield
    finally:
        _KEEPING.reset(token)


def _same_rows(mask: Tensor | None, previous: Tensor | None) -> bool:
    """Both None, or the same mask ``[B|1, 1, 1, S]`` for every query (a source mask across decoding steps)."""
    if mask is None or previous is None:
        return mask is None and previous is None
    return mask.shape[-2] == 1 and mask.shape == previous.shape and torch.equal(mask, previous)


@dataclass(slots=True)
class _Kept:
    """What one call of a :class:`LabMultiHeadAttention` keeps for its ``alphas``; the weights are made on first access.

    ``query [B, H, T, Dh]`` and ``keys [B, H, S, Dh]`` (detached), the boolean mask,
    bias and causal flag of the call, and the cache it used (to tell a decoding
    step of the same generation, whose queries are appended, from a new one).
    """

    query: Tensor
    keys: Tensor
    mask: Tensor | None
    bias: Tensor | None
    is_causal: bool
    cache: KVCache | None
    weights: Tensor | None

    def get(self) -> Tensor:
        """The weights ``[B, H, T, S]``: computed once, by the same explicit path as ``need_weights``."""
        if self.weights is None:
            _, self.weights = attend_unchecked(
                self.query, self.keys, self.keys, mask=self.mask, bias=self.bias, dropout_p=0.0,
                scale=None, need_weights=True, is_causal=self.is_causal,
            )  # values are not needed for the weights: the keys stand in
        assert self.weights is not None
        return self.weights


class LabMultiHeadAttention(MultiHeadAttention):
    """:class:`~attnlab.attention.MultiHeadAttention` that reads like the labs' module after every call.

    Same arguments, parameters and outputs; in addition ``alphas`` are there after
    every call, without ``record_attention()``, and masks of 0/1 floats are taken as
    well as booleans. (The labs' layers also register
    :func:`attnlab.models.lab_layout.fuse_lab_heads`, so that ``load_state_dict``
    takes the labs' per-head checkpoints.)

    Attributes:
        alphas: the labs' ``[H, B, T, S]``: the last call's (for a cached decoding step,
            every step of that generation so far, as the labs' re-decoding of the whole
            prefix gives), computed on first access; None before any call.

    Raises:
        ValueError / TypeError: as :class:`~attnlab.attention.MultiHeadAttention`.
    """

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
        super().__init__(n_heads, d_model, input_dim, proj_values, head_dim=head_dim, dropout=dropout)
        self.__dict__["_kept"] = None  # a _Kept after each call

    def _mask(self, mask: Tensor) -> Tensor:
        """The labs' 0/1 float masks as booleans (``mask == 0`` is masked); booleans as they are."""
        if isinstance(mask, Tensor) and mask.dtype != torch.bool:
            return as_bool_mask(mask)
        return mask

    def _attended(
        self, q: Tensor, keys: Tensor, mask: Tensor | None, bias: Tensor | None, is_causal: bool,
        cache: KVCache | None, past: int | None, weights: Tensor | None,
    ) -> None:
        """Keep ``q [B, H, T, Dh]`` and ``keys [B, H, S, Dh]`` (detached) for ``alphas`` (unless keeping_alphas(False)).

        A decoding step with the same ``cache`` as the previous call appends its
        queries to that call's: the labs decode by re-running the whole prefix, so
        after their ``predict`` the weights are those of every step (``past`` is the
        number of cached steps before a self-attention call; None for cross-attention).
        """
        if not _KEEPING.get():
            return
        previous: _Kept | None = self.__dict__.get("_kept")
        kept = _Kept(
            q.detach(), keys.detach(), mask, None if bias is None else bias.detach(), is_causal, cache,
            None if weights is None else weights.detach(),
        )
        if (
            previous is not None and cache is not None and previous.cache is cache and bias is None
            and previous.query.shape[0] == q.shape[0]
            # self-attention: this step follows the kept ones; cross-attention: the same source mask
            and (previous.query.shape[2] == past and mask is None if past is not None
                 else _same_rows(mask, previous.mask))
        ):
            kept.query = torch.cat([previous.query, kept.query], dim=2)  # [B, H, steps so far, Dh]
            # Self-attention: each step saw the keys up to its own (causal); cross-attention: every key.
            kept.is_causal, kept.weights = past is not None, None
        self.__dict__["_kept"] = kept  # plain attribute: nn.Module.__setattr__ costs more than the call here

    @property
    def alphas(self) -> Tensor | None:
        """The last call's weights in the labs' layout ``[H, B, T, S]``, detached (None before any call)."""
        kept = self.__dict__.get("_kept")
        return None if kept is None else kept.get().transpose(0, 1)  # [B, H, T, S] -> [H, B, T, S]
