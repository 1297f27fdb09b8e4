"""The labs' multi-head attention, ``LabMultiHeadAttention``: their module, their conventions, attnlab's kernel.

The labs (the positional-encoding lab's ``MultiHeadAttention``) build multi-head
attention as a list of single-head modules, every head ``d_model`` wide, and use
it statefully::

    mha = MultiHeadAttention(n_heads, d_model, input_dim=None, proj_values=True)
    mha.init_keys(keys)              # keys (and values) projected once, kept on the module
    out = mha(query, mask)           # mask of 0/1 floats: mask == 0 is hidden
    mha.alphas                       # [H, B, T, S], there after every call

:class:`LabMultiHeadAttention` is that module: the same constructor, calls and
attributes, and after the same ``torch.manual_seed`` the same parameters (drawn in
the labs' order: ``linear_out``, then each head's query, key and value), outputs and
``alphas``. Inside it is attnlab's :class:`~attnlab.attention.MultiHeadAttention`
with ``head_dim=d_model``: one packed projection and one fused attention call
instead of the loop over heads. It loads the labs' per-head checkpoints
(:mod:`attnlab.attention.lab.checkpoint`).

The labs' calls keep state on the module (the keys, the alphas): one caller at a
time. attnlab's own layers (:mod:`attnlab.models.labs.selfattn_seq2seq`) call
:meth:`LabMultiHeadAttention.attend` instead, ``MultiHeadAttention``'s stateless
convention (self-attention without ``key``, caches); their thread-safe prediction
paths run inside ``keeping_alphas(False)`` and leave nothing on the modules.

``alphas`` are not computed by the fused kernel: each call keeps its projected
queries and keys, detached, and the weights are computed from them on first access.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``F`` input features,
``D`` model dim, ``H`` heads, ``Dh`` head dim (``D`` here).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_bool, check_int
from attnlab.attention.cache import KVCache
from attnlab.attention.functional import attend_unchecked
from attnlab.attention.lab.checkpoint import fuse_lab_heads
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


#: keywords the labs' module took before it became the labs' alone, and where each is now
_REMOVED = {
    "head_dim": "every head of the labs' module is d_model wide, as in the labs; for heads of another width use "
                "attnlab.attention.MultiHeadAttention(n_heads, d_model, head_dim=...)",
    "dropout": "the labs' module has no attention dropout; use attnlab.attention.MultiHeadAttention(..., dropout=...)",
}


def _removed_arguments(given: dict[str, Any]) -> str:
    """The message for keywords :class:`LabMultiHeadAttention` does not take, naming what replaced each."""
    name = next(iter(given))
    if name in _REMOVED:
        return f"LabMultiHeadAttention() takes no {name}= any more: {_REMOVED[name]}"
    return f"LabMultiHeadAttention() got an unexpected keyword argument {name!r}"


class LabMultiHeadAttention(MultiHeadAttention):
    """The labs' ``MultiHeadAttention``: every head ``d_model`` wide, ``init_keys``, ``mha(query, mask)``, ``alphas``.

    Args:
        n_heads: ``H``.
        d_model: ``D``: the width of every head (``Dh = D``, so ``H`` need not divide
            it) and of the output.
        input_dim: ``F``, width of the queries and keys fed in; defaults to ``D``.
        proj_values: project the values (the labs' multi-head default); False uses the
            keys themselves as every head's values, which needs ``F == D``.

    Attributes:
        linear_out: ``nn.Linear(H * D, D)``, drawn first, as the labs draw it.
        in_proj: the heads' query, key and value ``nn.Linear(F, D)``, drawn in the labs'
            order and packed (``3 * H * D`` rows, :class:`attnlab.attention.projections.HeadLayout`).
        alphas: the labs' ``[H, B, T, S]``: the last call's (for a cached decoding step,
            every step of that generation so far, as the labs' re-decoding of the whole
            prefix gives), computed on first access; None before any call.

    Shapes:
        ``init_keys(keys [B, S, F])``; ``forward(query [B, T, F], mask = None) -> [B, T, D]``
        with ``mask`` ``[B|1, T|1, S]`` (or ``[T, S]``): boolean True = may attend, or the
        labs' 0/1 numbers (``mask == 0`` is hidden).

    Raises:
        ValueError / TypeError: as :class:`~attnlab.attention.MultiHeadAttention`, naming the
            argument (non-positive sizes; ``proj_values=False`` with ``input_dim != d_model``).

    Example (the positional-encoding lab's call):
        >>> _ = torch.manual_seed(0)
        >>> mha = LabMultiHeadAttention(2, 4, input_dim=5)
        >>> sum(p.numel() for p in mha.parameters())       # the lab's 180: two heads 4 wide
        180
        >>> x = torch.randn(3, 6, 5)
        >>> mha.init_keys(x)
        >>> mha(x, torch.ones(3, 1, 6)).shape, mha.alphas.shape
        (torch.Size([3, 6, 4]), torch.Size([2, 3, 6, 6]))
    """

    def __init__(
        self,
        n_heads: int,
        d_model: int,
        input_dim: int | None = None,
        proj_values: bool = True,
        **removed: Any,
    ) -> None:
        if removed:
            raise TypeError(_removed_arguments(removed))
        super().__init__(n_heads, d_model, input_dim, proj_values, head_dim=check_int("d_model", d_model, minimum=1))
        # The labs' checkpoints keep each head's linear_query/key/value: fused on load.
        self.register_load_state_dict_pre_hook(fuse_lab_heads)
        self._keys: Tensor | None = None  # [B, H, S, D] after init_keys
        self._values: Tensor | None = None  # [B, H, S, D] (or F: proj_values=False)
        self.__dict__["_kept"] = None  # a _Kept after each call

    def init_keys(self, keys: Tensor) -> None:
        """Project ``keys [B, S, F]`` (and the values) once and keep them, for later ``forward(query, mask)``.

        The labs' stateful use: the keys live on the module, so one caller at a time
        (concurrent callers use :meth:`attend`). Self-attention, the labs' way, is
        ``init_keys(x)`` then ``mha(x, mask)``.

        Raises:
            TypeError / ValueError: for ``keys`` not a tensor ``[B, S, F]`` of the weights' dtype.
        """
        self._check_input("keys", keys)
        self._keys, self._values = self.layout.project_keys_values(self.in_proj, keys, None,
                                                                   proj_values=self.proj_values)

    def __getstate__(self) -> dict[str, object]:
        """The module's state for ``copy.deepcopy`` and pickling, the kept keys detached.

        ``init_keys`` keeps the projected keys with their autograd history (a loss backpropagates
        through them into ``in_proj``), and torch copies no tensor that has a history. A copy is
        another module with parameters of its own: it computes with the same keys, and its
        gradients could not reach the original's projection anyway.
        """
        state = dict(super().__getstate__())
        for name in ("_keys", "_values"):
            kept = state.get(name)
            if isinstance(kept, Tensor):
                state[name] = kept.detach()
        return state

    # The labs' signature, on purpose (hence the ignore): this module is called as the labs call theirs;
    # MultiHeadAttention's call is attend().
    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """The labs' call: attend from ``query [B, T, F]`` to the keys of :meth:`init_keys`; returns ``[B, T, D]``.

        Args:
            query: ``[B, T, F]``.
            mask: ``[B|1, T|1, S]`` or ``[T, S]``: boolean, True = may attend, or the labs'
                0/1 numbers (``mask == 0`` is hidden; converted here, once).

        Raises:
            RuntimeError: before :meth:`init_keys`.
            TypeError / ValueError: for a query or mask of the wrong type, dtype or shape
                (a mask of other values than 0 and 1 included), or a query batch other
                than the keys'.
        """
        self._check_input("query", query)
        if self._keys is None or self._values is None:
            raise RuntimeError("no keys: call init_keys(keys) first (the labs' way), or attend(query, key) "
                               "(attnlab's stateless call; attend(query) is self-attention)")
        q = self.layout.project_queries(self.in_proj, query)  # [B, H, T, D]
        out, _ = self._attend(q, self._keys, self._values, mask=_lab_mask(mask), bias=None, is_causal=False,
                              cache=None, cached=None, need_weights=False)
        return out

    def attend(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        """attnlab's stateless call: :meth:`MultiHeadAttention.forward`'s convention, with the labs' masks and alphas.

        ``attend(x)`` is self-attention (the labs' ``init_keys(x)`` then ``mha(x, mask)``,
        same numbers); ``attend(x, memory)`` attends to ``memory`` (``init_keys(memory)``
        then ``mha(x, mask)``). Nothing but ``alphas`` is kept on the module (and not
        even they inside ``keeping_alphas(False)``), so any number of threads can call
        it. It is a method, not a module call: forward hooks do not see it.

        Args:
            query: ``[B, T, F]``.
            key: ``[B, S, F]``, or None for self-attention.
            value: ``[B, S, F]``; defaults to ``key``.
            mask: as :meth:`forward` (boolean or the labs' 0/1 numbers).
            is_causal: the causal mask, bottom-right aligned (see ``MultiHeadAttention``).
            cache: a :class:`attnlab.attention.KVCache` (see ``MultiHeadAttention.forward``).

        Returns:
            ``[B, T, D]``.

        Raises:
            TypeError / ValueError: as :meth:`MultiHeadAttention.forward`.
        """
        out = super().forward(query, key, value, mask=_lab_mask(mask), is_causal=is_causal, cache=cache)
        assert isinstance(out, Tensor)  # need_weights=False: the output alone
        return out

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
        if torch.compiler.is_compiling():
            # A compiled graph keeps no Python state per call (and dynamo cannot read the context variable):
            # nothing is kept, and nothing stale either; ``alphas`` are the uncompiled model's.
            self.__dict__["_kept"] = None
            return
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

    def extra_repr(self) -> str:
        return (f"n_heads={self.n_heads}, d_model={self.d_model}, input_dim={self.input_dim}, "
                f"proj_values={self.proj_values}")


def _lab_mask(mask: Tensor | None) -> Tensor | None:
    """The labs' 0/1 numbers as booleans (``mask == 0`` is hidden); booleans and None as they are."""
    return None if mask is None else as_bool_mask(mask)
