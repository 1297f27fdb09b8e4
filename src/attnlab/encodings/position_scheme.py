"""``PositionScheme``: a scheme inside attention written at any positions, and its position checks.

The offsets of :class:`attnlab.encodings.AttentionPosition` say "query ``i`` sits at
``q_offset + i``". A :class:`PositionScheme` is written instead for any increasing
integer positions, ``q_pos [T]`` and ``k_pos [S]``, which is what lets one formula
serve the ordinary positions, cached decoding and the randomized positions of Ruoss
et al. 2023 (:mod:`attnlab.encodings.randomized`).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.encodings.attention_position import AttentionPosition

__all__ = ["PositionScheme", "check_positions", "check_rel", "positions"]


def positions(start: int, length: int, device: torch.device | str | None = None) -> Tensor:
    """The integer positions ``start .. start + length - 1`` of a call's queries or keys, int64 ``[length]``.

    Raises:
        TypeError: if an argument is not an integer.
        ValueError: if ``length`` is negative.

    Example:
        >>> positions(3, 4)
        tensor([3, 4, 5, 6])
    """
    start = check_int("start", start)
    length = check_int("length", length, minimum=0)
    return torch.arange(start, start + length, device=device)  # [length]


def check_positions(name: str, pos: Tensor, length: int | None = None) -> None:
    """Refuse anything but a 1-D integer tensor of ``length`` positions (``q_pos [T]`` / ``k_pos [S]``).

    Only the metadata is checked (no device sync): that the positions increase
    is the caller's promise, not verified.

    Args:
        name: the argument's name, for messages.
        pos: the positions, int64 ``[L]``.
        length: the number of queries or keys ``L`` they must match (None: any).

    Raises:
        TypeError: if ``pos`` is not an integer tensor.
        ValueError: if it is not 1-D of length ``length``.

    Example:
        >>> check_positions("q_pos", torch.tensor([0, 3, 7]), 3)  # passes silently
    """
    if not isinstance(pos, Tensor):
        raise TypeError(f"{name} must be an integer tensor [L], got {type(pos).__name__}")
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor [L], got dtype {pos.dtype}")
    if pos.ndim != 1 or (length is not None and pos.shape[0] != length):
        want = "L" if length is None else length
        raise ValueError(f"{name} must be [{want}] (one position per row), got shape {list(pos.shape)}")


def check_rel(rel: Tensor, T: int, S: int | None = None) -> None:
    """Refuse anything but an integer ``[T, S]`` matrix of signed key-minus-query distances.

    Args:
        rel: the distances, int64 ``[T, S]``.
        T: the number of queries it must have rows for.
        S: the number of keys, when known (None: any).

    Raises:
        TypeError: if ``rel`` is not an integer tensor.
        ValueError: if it is not ``[T, S]``.
    """
    if not isinstance(rel, Tensor) or rel.is_floating_point() or rel.is_complex() or rel.dtype == torch.bool:
        raise TypeError(f"rel must be an integer tensor [T, S], got {getattr(rel, 'dtype', type(rel).__name__)}")
    if rel.ndim != 2 or rel.shape[0] != T or (S is not None and rel.shape[1] != S):
        want = f"[{T}, {S}]" if S is not None else f"[{T}, S]"
        raise ValueError(f"rel must be [T, S] = {want} (queries x keys), got shape {list(rel.shape)}")


class PositionScheme(AttentionPosition):
    r"""A scheme that is a function of the tokens' positions, given as tensors.

    The protocol's offsets say "query ``i`` sits at ``q_offset + i``". A scheme
    that subclasses this one is written instead for any increasing positions,
    ``q_pos [T]`` and ``k_pos [S]`` (int64): :meth:`rotate`, :meth:`bias` and
    :meth:`value_term` turn the offsets into ``arange``\ s and call
    :meth:`rotate_at`, :meth:`bias_at` and :meth:`value_term_at`. That is what
    lets one formula serve both the ordinary positions and the randomized ones
    of Ruoss et al. 2023 (:class:`attnlab.encodings.RandomizedPositions` draws a
    sorted subset of ``[0, L_max)`` and hands it to the same ``*_at`` methods).

    Subclasses override any of the three ``*_at`` methods (each default does
    nothing); the positions are on the device of ``q`` (or ``weights``).

    Signed distances instead of positions. Ruoss et al.'s randomized ALiBi and
    relative encodings do not draw positions but distances: offset ``+k`` becomes
    ``+d_k`` and ``-k`` becomes ``-d_k`` for sorted random ``d_1 < d_2 < ...``, a
    matrix ``rel [T, S]`` that is not ``k_pos - q_pos`` for any positions. A scheme
    that depends on the positions only through ``k_pos - q_pos`` sets
    :attr:`relative` and can then be evaluated at such a matrix by
    :meth:`bias_rel` and :meth:`value_term_rel`; their defaults call the ``*_at``
    methods one query row at a time (exact, since row ``i`` of ``rel`` is
    increasing and a relative scheme sees only differences), and ALiBi, T5 and
    Shaw override them with one vectorised call.

    Attributes:
        relative: True when :meth:`bias_at` and :meth:`value_term_at` depend on
            the positions only through ``k_pos - q_pos`` (ALiBi, T5, Shaw);
            False (the default) when they read absolute positions (FIRE
            normalises by the query's position) or the scheme rotates.
    """

    relative: bool = False

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """:meth:`rotate_at` of ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` at the offsets' positions."""
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.rotate_at(q, k, q_pos=positions(q_offset, q.shape[-2], q.device),
                              k_pos=positions(k_offset, k.shape[-2], k.device))

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
             k: Tensor | None = None) -> Tensor | None:
        """:meth:`bias_at` at positions ``q_offset + arange(T)`` and ``k_offset + arange(n_keys)``.

        ``k`` (the keys ``[B, H, S, Dh]``) is passed on to schemes that set ``needs_keys``.
        """
        n_keys = check_int("n_keys", n_keys, minimum=0)
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.bias_at(q, q_pos=positions(q_offset, q.shape[-2], q.device),
                            k_pos=positions(k_offset, n_keys, q.device), k=k)

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
        """:meth:`value_term_at` of ``weights [B, H, T, S]`` at ``q_offset + arange(T)``, ``k_offset + arange(S)``."""
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.value_term_at(weights, q_pos=positions(q_offset, weights.shape[-2], weights.device),
                                  k_pos=positions(k_offset, weights.shape[-1], weights.device))

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Turn ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` by ``q_pos [T]`` and ``k_pos [S]`` (default: unchanged)."""
        return q, k

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term for queries at ``q_pos [T]`` and keys at ``k_pos [S]`` (default: None).

        Returns what :meth:`AttentionPosition.bias` returns: None or a tensor
        broadcastable to ``[B, H, T, S]`` in :func:`bias_dtype` of ``q.dtype``.
        """
        return None

    def value_term_at(self, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The output term from ``weights [B, H, T, S]`` at positions ``q_pos``, ``k_pos`` (default: None)."""
        return None

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term at signed key-minus-query distances ``rel [T, S]`` (see the class docstring).

        The default evaluates :meth:`bias_at` for each query row ``i`` with the
        query at position 0 and the keys at ``rel[i]``; a scheme with a faster
        way overrides it.

        Args:
            q: queries ``[B, H, T, Dh]``.
            rel: int64 ``[T, S]``, each row increasing (entry ``[i, j]`` stands for
                ``k_pos[j] - q_pos[i]``), on ``q``'s device.
            k: keys ``[B, H, S, Dh]`` for schemes that set ``needs_keys``.

        Returns:
            What :meth:`bias_at` returns: None or a tensor broadcastable to ``[B, H, T, S]``.

        Raises:
            NotImplementedError: for a scheme that is not :attr:`relative`.
            TypeError / ValueError: for ``rel`` that is not an integer ``[T, S]``.
        """
        if not self.relative:
            raise NotImplementedError(
                f"{type(self).__name__} reads absolute positions (relative=False): it cannot be "
                "evaluated at a matrix of distances; give it positions (bias_at)"
            )
        check_rel(rel, q.shape[-2])
        T, S = rel.shape
        if T == 0:
            return self.bias_at(q, q_pos=rel.new_zeros(0), k_pos=torch.arange(S, device=rel.device), k=k)
        zero = rel.new_zeros(1)  # [1]: the query at position 0, the keys at their distances
        rows = [self.bias_at(q[..., i : i + 1, :], q_pos=zero, k_pos=rel[i], k=k) for i in range(T)]
        present = [row for row in rows if row is not None]
        return torch.cat(present, dim=-2) if present else None  # T x [B|1, H, 1, S] -> [B|1, H, T, S]

    def value_term_rel(self, weights: Tensor, *, rel: Tensor) -> Tensor | None:
        """The output term from ``weights [B, H, T, S]`` at signed distances ``rel [T, S]``.

        The default evaluates :meth:`value_term_at` one query row at a time, as
        :meth:`bias_rel` does.

        Args:
            weights: post-softmax weights ``[B, H, T, S]``.
            rel: int64 ``[T, S]``, each row increasing, on ``weights``' device.

        Returns:
            None, or ``[B, H, T, Dh]`` in ``weights.dtype``.

        Raises:
            NotImplementedError: for a scheme that is not :attr:`relative`.
            TypeError / ValueError: for ``rel`` that is not an integer ``[T, S]``.
        """
        if not self.relative:
            raise NotImplementedError(
                f"{type(self).__name__} reads absolute positions (relative=False): it cannot be "
                "evaluated at a matrix of distances; give it positions (value_term_at)"
            )
        check_rel(rel, weights.shape[-2], weights.shape[-1])
        T, S = rel.shape
        if T == 0:
            return self.value_term_at(weights, q_pos=rel.new_zeros(0), k_pos=torch.arange(S, device=rel.device))
        zero = rel.new_zeros(1)  # [1]
        rows = [self.value_term_at(weights[..., i : i + 1, :], q_pos=zero, k_pos=rel[i]) for i in range(T)]
        present = [row for row in rows if row is not None]
        return torch.cat(present, dim=-2) if present else None  # T x [B, H, 1, Dh] -> [B, H, T, Dh]
