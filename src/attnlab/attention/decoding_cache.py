"""The caches of one autoregressive generation: a :class:`~attnlab.attention.cache.KVCache` per attention layer.

A :class:`DecodingCache` gathers the per-layer caches of one generation, the
position reached (positional encodings need it) and, for a batch whose positions
come from the data, each row's last position and which steps are padding (the
model's own bookkeeping, shared by its layers). It belongs to the call that
decodes: modules take it as an argument and never keep it, so two generations
can never see each other's keys, and a user can inspect or reset it.

Shape notation: ``B`` batch, ``S`` cached steps.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.attention.cache import KVCache
from attnlab.encodings.positions import continue_positions

__all__ = ["DecodingCache"]


class DecodingCache:
    """The caches of one autoregressive generation: a :class:`KVCache` per attention layer.

    Layers are named by the module that decodes (``"self_attn"``,
    ``"cross_attn"``, or ``"layers.0.self_attn"`` in a stack); a layer's cache is
    created the first time it is asked for. :attr:`position` is the number of
    steps decoded so far: the position of the next input, which positional
    encodings and rotary embeddings need. The model that runs the decoding loop
    calls :meth:`advance` once per step. ``capacity``: steps to reserve in every
    layer's buffers (see :class:`KVCache`; they grow past it if needed).

    Example:
        >>> cache = DecodingCache()
        >>> _ = cache.layer("self_attn").append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
        >>> cache.advance(1)
        >>> cache
        DecodingCache(position=1, layers={'self_attn': KVCache(length=1, keys=[1, 2, 1, 4], values_width=4)})
    """

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = check_int("capacity", capacity, minimum=0)
        self._layers: dict[str, KVCache] = {}
        self.position = 0
        self.last_position: Tensor | None = None  # [B]: each row's newest position (None: position - 1)
        self.mask: Tensor | None = None  # [B, position]: True on real steps (None: every step is)

    def next_positions(self, n: int) -> Tensor | None:
        """The positions ``[B, n]`` of the next ``n`` steps, each row after its own last; None on the default path.

        None while no positions were noted (:meth:`note_positions`): the next steps then sit at
        ``position .. position + n - 1``, as a model places them by default.

        Raises:
            TypeError / ValueError: for an ``n`` that is not a non-negative integer.
        """
        n = check_int("n", n, minimum=0)
        return None if self.last_position is None else continue_positions(self.last_position, n)

    def note_positions(self, position_ids: Tensor) -> None:
        """Remember each row's newest position from the positions ``[B, n]`` of the steps being decoded."""
        if position_ids.shape[1]:
            self.last_position = position_ids[:, -1]  # [B]

    def key_mask(self, mask: Tensor | None, n: int) -> Tensor | None:
        """The padding mask ``[B, S]`` of every step, the cached ones and ``n`` new ones, and remember it.

        Args:
            mask: boolean ``[B, n]`` of the new steps, True = a real step (False: padding, never
                attended to), or None (all real).
            n: the new steps.

        Returns:
            Boolean ``[B, position + n]``, True = a real step; None while no step is padding.
        """
        n = check_int("n", n, minimum=0)
        if mask is None and self.mask is None:
            return None
        old = self.mask
        if old is None:
            assert mask is not None
            old = torch.ones(mask.shape[0], self.position, dtype=torch.bool, device=mask.device)  # [B, S]
        new = mask if mask is not None else torch.ones(old.shape[0], n, dtype=torch.bool, device=old.device)
        self.mask = torch.cat([old, new.to(old.device)], dim=1)  # [B, S + n]
        return self.mask

    def layer(self, name: str) -> KVCache:
        """The cache of the layer called ``name`` (created empty on first use).

        Raises:
            TypeError: if ``name`` is not a non-empty string.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"a cache layer name must be a non-empty string, got {name!r}")
        cache = self._layers.get(name)
        if cache is None:
            cache = self._layers[name] = KVCache(self.capacity)
        return cache

    def __getitem__(self, name: str) -> KVCache:
        return self.layer(name)

    def __contains__(self, name: object) -> bool:
        return name in self._layers

    def __iter__(self) -> Iterator[str]:
        return iter(self._layers)

    def __len__(self) -> int:
        """The number of layers cached."""
        return len(self._layers)

    def items(self) -> Iterator[tuple[str, KVCache]]:
        """``(name, KVCache)`` pairs, in the order the layers were first used."""
        return iter(self._layers.items())

    def advance(self, steps: int = 1) -> None:
        """Move :attr:`position` on by ``steps`` (after a step has been decoded)."""
        self.position += check_int("steps", steps, minimum=0)

    @property
    def nbytes(self) -> int:
        """Bytes held by every layer's buffers."""
        return sum(c.nbytes for c in self._layers.values())

    def reset(self) -> None:
        """Empty every layer's cache and go back to position 0."""
        for cache in self._layers.values():
            cache.reset()
        self.position = 0
        self.last_position = self.mask = None

    def __repr__(self) -> str:
        layers = ", ".join(f"{name!r}: {cache!r}" for name, cache in self._layers.items())
        return f"DecodingCache(position={self.position}, layers={{{layers}}})"
