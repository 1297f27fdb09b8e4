"""Key/value caches for autoregressive decoding.

Greedy decoding generates one step at a time. Without a cache, step ``t``
re-runs the decoder on all ``t`` inputs so far (the labs' ``predict``), so a
step costs more the longer the output, and ``T`` steps cost ``O(T^2)`` layer
passes. With a cache, each attention layer keeps the keys and values it has
already projected; a step projects only the newest input and attends to the
cached keys (Pope et al. 2022, "Efficiently Scaling Transformer Inference",
§2; torchtune's ``KVCache`` and HF's ``DynamicCache`` are the same idea):

* self-attention appends the new step's keys and values (:meth:`KVCache.append`);
* cross-attention projects the encoder's states once, on the first step, and
  reuses them (:meth:`KVCache.store`). The module is passed the encoder's states
  at every step (``mha(x, memory, cache=...)``: a ``key`` always means
  cross-attention) and the cache remembers which states it projected, so a step
  with other states raises instead of attending to stale keys.

Positions from the data. A key keeps the position it was turned or biased at:
when self-attention is given ``position_ids`` (a left-padded batch, Abacus
indices), each layer's cache keeps its keys' positions ``[B, S]``
(:attr:`KVCache.positions`), and a step given none continues each row from its
own last position (:meth:`KVCache.next_positions`). Without position ids nothing
is kept: the cached steps sit at ``0 .. S - 1``.

With grouped-query attention the cache holds the ``Hkv`` key/value heads, not
the ``H`` query heads: ``H / Hkv`` times less memory, the point of GQA
(Ainslie et al. 2023, arXiv:2305.13245).

The caches of one whole generation, one per layer, are gathered by
:class:`~attnlab.attention.decoding_cache.DecodingCache`.

Shape notation: ``B`` batch, ``H`` heads (the key/value heads ``Hkv`` under
grouped-query attention), ``S`` cached steps, ``Dh`` key width, ``Dv`` value width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_device, check_int
from attnlab.encodings.positions import check_position_ids, continue_positions

__all__ = ["KVCache", "step_positions"]


class KVCache:
    """The projected keys ``[B, H, S, Dh]`` and values ``[B, H, S, Dv]`` of one attention layer.

    Appending grows a buffer geometrically (doubling its capacity), so a step
    writes only its own keys instead of copying the whole cache as a
    ``torch.cat`` would; :attr:`keys` and :attr:`values` are views of its first
    ``S`` steps. ``capacity`` reserves room for that many steps at the first
    append, when the caller knows how long it will decode. When autograd
    records (a cache used under ``torch.enable_grad`` with inputs that need
    gradients), appending concatenates instead: an in-place write would
    invalidate the views earlier steps saved for backward.

    Example:
        >>> cache = KVCache()
        >>> k = torch.zeros(2, 4, 1, 8)             # [B, H, 1, Dh]: one new step
        >>> keys, values = cache.append(k, k)
        >>> keys, values = cache.append(k, k)
        >>> len(cache), list(cache.keys.shape)
        (2, [2, 4, 2, 8])
        >>> cache.reset(); len(cache)
        0
    """

    def __init__(self, capacity: int = 0) -> None:
        self._reserve = check_int("capacity", capacity, minimum=0)
        self._keys: Tensor | None = None  # [B, H, capacity, Dh]
        self._values: Tensor | None = None  # [B, H, capacity, Dv]
        self._length = 0
        self._stored = False  # filled by store() (cross-attention), not append()
        self._source: Tensor | None = None  # the key [B, S, F] store() was given (cross-attention)
        self._positions: Tensor | None = None  # [B, S] int64, each key's position; None: 0 .. S - 1

    def __len__(self) -> int:
        """``S``, the number of cached steps."""
        return self._length

    @property
    def keys(self) -> Tensor | None:
        """The cached keys ``[B, H, S, Dh]`` (None while empty)."""
        return None if self._keys is None else self._keys[:, :, : self._length]

    @property
    def values(self) -> Tensor | None:
        """The cached values ``[B, H, S, Dv]`` (None while empty)."""
        return None if self._values is None else self._values[:, :, : self._length]

    @property
    def positions(self) -> Tensor | None:
        """Each cached key's position ``[B, S]`` (int64), or None while they are ``0 .. S - 1``."""
        return self._positions

    def next_positions(self, n: int) -> Tensor | None:
        """The positions ``[B, n]`` of ``n`` new steps: each row's last position + 1 ..; None without :attr:`positions`.

        Raises:
            TypeError / ValueError: for an ``n`` that is not a non-negative integer.
        """
        n = check_int("n", n, minimum=0)
        if self._positions is None:
            return None
        last = self._positions[:, -1] if self._positions.shape[1] else self._positions.new_full(
            (self._positions.shape[0],), -1)  # [B]
        return continue_positions(last, n)  # [B, n]

    def _joined_positions(self, positions: Tensor | None, keys: Tensor) -> Tensor | None:
        """The positions ``[B, S + n]`` after appending ``keys [B, H, n, Dh]`` at ``positions [B|1, n]`` (or None)."""
        if positions is None and self._positions is None:
            return None
        B, n = keys.shape[0], keys.shape[2]
        if positions is None:
            new = self.next_positions(n)
            assert new is not None
        else:
            new = check_position_ids(positions, batch=B, length=n, name="positions", values=False)
            new = new.to(keys.device).expand(B, n)  # [B, n]
        old = self._positions
        if old is None:  # cached so far at 0 .. S - 1
            old = torch.arange(self._length, device=keys.device).expand(B, self._length)  # [B, S]
        return torch.cat([old.to(new.device), new], dim=1)  # [B, S + n]

    @property
    def stored(self) -> bool:
        """True when the cache holds keys set by :meth:`store` (an encoder's, for cross-attention).

        ``MultiHeadAttention`` reads this to refuse a cache of the other kind: self-attention
        (no ``key``) appends and must not find cross-attention keys, cross-attention must
        not find self-attention steps.
        """
        return self._stored and self._length > 0

    @property
    def capacity(self) -> int:
        """Steps the current buffers hold before they grow."""
        return 0 if self._keys is None else self._keys.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (capacity included)."""
        return sum(t.numel() * t.element_size() for t in (self._keys, self._values) if t is not None)

    def _check(self, keys: Tensor, values: Tensor) -> None:
        for name, t in (("keys", keys), ("values", values)):
            if not isinstance(t, Tensor) or t.dim() != 4:
                got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(f"{name} must be a tensor [B, H, S, D], got {got}")
        if keys.shape[:3] != values.shape[:3]:
            raise ValueError(f"keys {list(keys.shape)} and values {list(values.shape)} disagree on [B, H, S]")
        if self._keys is None or self._values is None:
            return
        for name, t, held in (("keys", keys, self._keys), ("values", values, self._values)):
            if t.dtype != held.dtype:
                # Writing into the buffer would cast the new steps without a word.
                raise TypeError(f"{name} have dtype {t.dtype} but the cache holds {held.dtype}: "
                                "reset() it before decoding with a model of another dtype")
        if (
            keys.shape[:2] != self._keys.shape[:2]
            or keys.shape[3] != self._keys.shape[3]
            or values.shape[3] != self._values.shape[3]
        ):
            raise ValueError(
                f"keys {list(keys.shape)} do not continue the cache's {list(self._keys.shape[:2])} + "
                f"[S, {self._keys.shape[3]}]: reset() it before decoding another batch"
            )

    def append(self, keys: Tensor, values: Tensor, *, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Add the newest steps' ``keys [B, H, n, Dh]``, ``values [B, H, n, Dv]``; return all cached.

        ``positions [B, n]``: the new steps' positions, kept in :attr:`positions` (the
        steps cached before without any sit at ``0 .. S - 1``). Without them, a cache that
        keeps positions continues each row (:meth:`next_positions`).

        Returns:
            ``(keys [B, H, S + n, Dh], values [B, H, S + n, Dv])``.

        Raises:
            ValueError: if the shapes do not continue the cache (another batch size,
                head count or width), or ``positions`` are not ``[B, n]``.
            TypeError: if the dtypes are not those already cached (naming both), or
                ``positions`` are not integers.
        """
        self._check(keys, values)
        joined = self._joined_positions(positions, keys)
        n = keys.shape[2]
        recording = torch.is_grad_enabled() and (
            keys.requires_grad or values.requires_grad or (self._keys is not None and self._keys.requires_grad)
        )
        if self._keys is None or self._values is None:
            if recording or n >= self._reserve:
                # Kept as given (never written into: the buffer is replaced when it grows).
                self._keys, self._values, self._length = keys, values, n
                self._stored, self._source, self._positions = False, None, joined
                return keys, values
            self._keys = keys.new_empty(*keys.shape[:2], self._reserve, keys.shape[3])  # [B, H, capacity, Dh]
            self._values = values.new_empty(*values.shape[:2], self._reserve, values.shape[3])
        end = self._length + n
        if recording:
            self._keys = torch.cat([self._keys[:, :, : self._length], keys], dim=2)  # [B, H, S + n, Dh]
            self._values = torch.cat([self._values[:, :, : self._length], values], dim=2)  # [B, H, S + n, Dv]
        else:
            if end > self.capacity:
                self._keys = self._grow(self._keys, end)
                self._values = self._grow(self._values, end)
            self._keys[:, :, self._length : end] = keys
            self._values[:, :, self._length : end] = values
        self._length = end
        self._stored, self._source, self._positions = False, None, joined
        keys_out, values_out = self.keys, self.values
        assert keys_out is not None and values_out is not None
        return keys_out, values_out

    def _grow(self, buffer: Tensor, needed: int) -> Tensor:
        """A buffer of at least twice the capacity, holding the first ``S`` cached steps."""
        B, H, _, D = buffer.shape
        grown = buffer.new_empty(B, H, max(needed, 2 * buffer.shape[2]), D)  # [B, H, capacity', D]
        grown[:, :, : self._length] = buffer[:, :, : self._length]
        return grown

    def store(self, keys: Tensor, values: Tensor, *, source: Tensor | None = None) -> None:
        """Set the whole cache at once to ``keys [B, H, S, Dh]`` and ``values [B, H, S, Dv]``.

        For cross-attention: the encoder's keys and values, projected once.
        ``source``: the tensor they were projected from (the module's ``key``
        ``[B, S, F]``), kept so that :meth:`holds` can tell it from another.
        """
        self._check(keys, values)
        self._keys, self._values, self._length = keys, values, keys.shape[2]
        self._stored = True
        self._source = source
        self._positions = None

    def holds(self, source: Tensor) -> bool:
        """Whether the stored keys were projected from ``source [B, S, F]`` (the same tensor, or a view of its data).

        A cross-attention step passes the encoder's states again; other states (a new
        batch, or a query passed as its own key by mistake) would otherwise meet stale
        keys without a word. Compared by identity and storage, never by value: the check
        costs nothing and never synchronises a GPU. True when ``store`` was given no source.
        """
        held = self._source
        if held is None or source is held:
            return True
        return (
            isinstance(source, Tensor) and source.device == held.device and source.shape == held.shape
            and source.stride() == held.stride() and source.data_ptr() == held.data_ptr()
        )

    def reset(self) -> None:
        """Forget every cached step (and the buffers)."""
        self._keys = self._values = self._source = self._positions = None
        self._length = 0
        self._stored = False

    def __repr__(self) -> str:
        if self._keys is None or self._values is None:
            return "KVCache(empty)"
        B, H, _, Dh = self._keys.shape
        width = self._values.shape[3]
        return f"KVCache(length={self._length}, keys=[{B}, {H}, {self._length}, {Dh}], values_width={width})"


def step_positions(position_ids: Tensor | None, cache: KVCache | None, *, batch: int, length: int,
                   device: torch.device) -> Tensor | None:
    """The positions ``[B, T]`` of a self-attention call's ``T`` new steps; None for the indices (the default).

    ``position_ids [B|1, T]`` when given (checked: integers of that shape; expanded to the
    batch), else each row after its own last when the ``cache`` keeps positions.

    Raises:
        TypeError / ValueError: for ``position_ids`` that are not integers ``[B, T]`` / ``[1, T]``, or not on
            ``device`` (the queries').
    """
    if position_ids is not None:
        check_device("position_ids", position_ids, device)
        ids = check_position_ids(position_ids, batch=batch, length=length, values=False)
        return ids.expand(batch, length)  # [B, T]
    return None if cache is None else cache.next_positions(length)
