"""ALiBi: attention with linear biases, a fixed per-head penalty on distance.

Press, Smith and Lewis 2022, "Train Short, Test Long: Attention with Linear
Biases Enables Input Length Extrapolation" (ICLR, arXiv:2108.12409), §3. No
encoding is added to the tokens; head ``h`` adds ``-m_h * distance`` to every
score. For ``n`` heads, ``n`` a power of two, ``m_h = 2 ** (-8 h / n)``,
``h = 1 .. n`` (8 heads: 1/2, 1/4, ..., 1/256). For other ``n`` the authors'
``get_slopes`` (ofirpress/attention_with_linear_biases) takes the ``p`` slopes of
the closest power of two ``p < n``, then the odd-numbered slopes of the
``2p``-head sequence until there are ``n``. BLOOM and MPT give the same slopes
(anchors §4.4, §9).

Causal or not. The paper adds ``-m * (i - j)`` to a causal decoder's visible
scores; this module adds the symmetric ``-m * |j - i|`` everywhere
(x-transformers' form), equal on the visible half, the masked half being the
mask's job. Without a causal mask that is a bidirectional variant the paper did
not validate, and it cannot tell left from right: ``left_offset`` breaks the tie,
keys before the query getting ``-m * (|j - i| - left_offset)``. Ruoss et al. 2023
("Randomized Positional Encodings Boost Length Generalization of Transformers",
ACL, arXiv:2305.16843) use 0.5 in their encoder
(google-deepmind/randomized_positional_encodings, ``models/positional_encodings.py``,
``compute_alibi_encodings_biases``: "add a constant factor of 0.5 to the lower
triangle, to (arbitrarily) break the symmetry").

:class:`ALiBi` is a :class:`PositionScheme`: one formula for offsets
(:meth:`ALiBi.bias`), any positions (:meth:`ALiBi.bias_at`) and any signed
distances (:meth:`ALiBi.bias_rel`, which randomized ALiBi draws).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_finite_float, check_int
from attnlab.encodings.scheme import ModelSizes, PositionScheme, bias_dtype, check_heads, check_rel, static_for_compile

__all__ = ["ALiBi", "alibi_slopes"]


def _slope_exponents(n_heads: int) -> list[float]:
    """``e_h`` with slope ``m_h = 2 ** -e_h``, following the paper's ``get_slopes`` recursion."""
    p = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    # For a power of two p the slopes are (2 ** (-8/p)) ** h, h = 1..p.
    exponents = [8.0 * h / p for h in range(1, p + 1)]
    if p < n_heads:
        # get_slopes(2p)[0::2]: slopes 1, 3, 5, ... of the 2p-head sequence.
        extra = [8.0 * h / (2 * p) for h in range(1, 2 * p + 1, 2)]
        exponents += extra[: n_heads - p]
    return exponents


def alibi_slopes(n_heads: int) -> Tensor:
    """The ALiBi head slopes ``m_h`` of Press et al. 2022, computed in float64.

    Args:
        n_heads: number of heads ``H`` (any positive count; powers of two are the
            paper's case, others follow its ``get_slopes`` recipe).

    Returns:
        float32 tensor ``[H]``, each slope in (0, 1).

    Raises:
        TypeError: if ``n_heads`` is not an integer.
        ValueError: if ``n_heads < 1``.

    Example:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
        >>> alibi_slopes(6)[4:]  # every other slope of the 8-head sequence
        tensor([0.5000, 0.1250])
    """
    n_heads = check_int("n_heads", n_heads, minimum=1)
    exponents = torch.tensor(_slope_exponents(n_heads), dtype=torch.float64)  # [H]
    # 2 ** -e in float64, not start * ratio ** h: every slope rounded once.
    return torch.pow(2.0, -exponents).to(torch.float32)


@static_for_compile  # its float64 tensors are constants of a compiled graph
class ALiBi(PositionScheme):
    """ALiBi (Press et al. 2022) as an attention position scheme: bias ``-m_h * |j - i|``.

    ``bias(q, S)[0, h, i, j] = -m_h * |(k_offset + j) - (q_offset + i)|`` with
    :func:`alibi_slopes`, plus ``m_h * left_offset`` for keys before the query
    (``j < i``). Fixed (no parameters), any length (``max_len`` None), so it
    extrapolates: the paper's point. The bias is added to the scaled scores
    ``q . k / sqrt(Dh)`` as the paper does.

    Args:
        n_heads: number of heads ``H``.
        causal: the use the scheme is meant for. The bias is the same either way
            (module docstring): the flag records the intent, so that attention
            can check a causal mask comes with it, and ``causal=False`` states
            that the bidirectional variant is wanted on purpose.
        left_offset: keys before the query get ``-m * (|j - i| - left_offset)``,
            so that a bidirectional ALiBi can tell left from right; 0 (the
            default) is the symmetric bias, 0.5 is Ruoss et al. 2023's encoder
            (module docstring). Any finite number.

    Raises:
        TypeError: if ``n_heads`` is not an integer, ``causal`` not a bool or
            ``left_offset`` not a number.
        ValueError: if ``n_heads < 1`` or ``left_offset`` is not finite.

    Example:
        >>> alibi = ALiBi(2)
        >>> alibi.bias(torch.zeros(1, 2, 3, 4), 3)[0, 0]  # slope 1/16, distance |j - i|
        tensor([[ 0.0000, -0.0625, -0.1250],
                [-0.0625,  0.0000, -0.0625],
                [-0.1250, -0.0625,  0.0000]])
        >>> ALiBi(2, causal=False, left_offset=0.5).bias(torch.zeros(1, 2, 3, 4), 3)[0, 0]
        tensor([[ 0.0000, -0.0625, -0.1250],
                [-0.0312,  0.0000, -0.0625],
                [-0.0938, -0.0312,  0.0000]])
    """

    adds_score = True
    relative = True
    by_distance = True
    has_score_mod = True
    batched_positions = True
    randomize_by = "distances"  # Ruoss et al.'s randomized ALiBi draws distances, not positions

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> ALiBi:
        """One ALiBi per self-attention: bidirectional, keys on the left get half a step less penalty.

        Ruoss et al.'s encoder: symmetric ALiBi cannot tell left from right.
        """
        return cls(sizes.n_heads, causal=sizes.causal, left_offset=0.0 if sizes.causal else 0.5)

    def __init__(self, n_heads: int, *, causal: bool = True, left_offset: float = 0.0) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r} ({type(causal).__name__})")
        self.causal = causal
        self.left_offset = check_finite_float("left_offset", left_offset)
        # A plain float64 tensor rather than a buffer: `module.half()` must not
        # round the slopes (they are powers of two only for power-of-two H).
        self._slopes64 = torch.pow(2.0, -torch.tensor(_slope_exponents(self.n_heads), dtype=torch.float64))

    @property
    def slopes(self) -> Tensor:
        """The head slopes ``m_h``, float32 ``[H]`` (as :func:`alibi_slopes`)."""
        return self._slopes64.to(torch.float32)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        extra = f", left_offset={self.left_offset:g}" if self.left_offset else ""
        return f"n_heads={self.n_heads}, causal={self.causal}{extra}"

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor:
        """The penalty at signed key-minus-query distances ``rel [T, S]`` (or per row ``[B, T, S]``).

        Args:
            q: queries ``[B, H, T, Dh]``; only ``T``, dtype and device are used.
            rel: int64 ``[T, S]`` or ``[B, T, S]``; negative entries are keys before the
                query and get ``left_offset``.
            k: the keys ``[B, H, S, Dh]`` of the protocol; unused.

        Returns:
            ``[1, H, T, S]`` (``[B, H, T, S]`` for per-row ``rel``): ``-m_h * (|rel| - left_offset [rel < 0])``,
            float32 for half-precision ``q``, else ``q.dtype``.

        Raises:
            TypeError / ValueError: for ``q`` that is not ``[B, H, T, Dh]`` with
                ``H = n_heads``, or ``rel`` that is not an integer ``[T, S]`` / ``[B, T, S]``.
        """
        check_heads("q", q, n_heads=self.n_heads)
        check_rel(rel, q.shape[2])
        dtype = bias_dtype(q.dtype)
        # Distances are exact integers in float32 up to 2**24; one rounding in the product.
        # Negated as integers, so that distance 0 gives +0.0 and not -0.0.
        neg_distance = (-rel.abs()).to(dtype)  # [*R] = [T, S] or [B, T, S]
        if self.left_offset:
            # Keys before the query (rel < 0) are moved left_offset closer (Ruoss et al.'s +0.5).
            neg_distance = neg_distance + (rel < 0).to(dtype) * self.left_offset  # [*R]
        slopes = self._slopes64.to(device=q.device, dtype=dtype)  # [H]
        term = slopes[:, None, None] * neg_distance.unsqueeze(-3)  # [H, 1, 1] * [(B,) 1, T, S] -> [(B,) H, T, S]
        return term if term.ndim == 4 else term[None]  # [B|1, H, T, S]
