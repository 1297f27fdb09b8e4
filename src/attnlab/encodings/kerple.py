"""KERPLE: a learned, conditionally positive definite kernel of the distance as a bias.

Chi, Fan, Ramadge and Rudnicky 2022, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation" (NeurIPS, arXiv:2205.09921), §4. Shift-
invariant kernels ``k(m, n) = k(|m - n|)`` that are conditionally positive
definite (CPD) can be added to the scores like a positive definite one, because
softmax ignores a constant per row. Two families, with per-head parameters
``r1, r2 > 0`` learned with the model::

    logarithmic:  b_h(i, j) = -r1_h * log(1 + r2_h * |i - j|)
    power:        b_h(i, j) = -r1_h * |i - j| ** r2_h,      0 < r2_h <= 2

ALiBi is the power kernel with ``r2 = 1`` and a fixed ``r1``; the paper finds the
logarithmic one extrapolates best, and it is the default here.

Parameters follow the authors' code (chijames/KERPLE, ``ParallelKerpleLog`` and
``ParallelKerplePower`` in ``megatron/mpu/layers.py``):

* initialisation, per head: logarithmic ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power
  ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)`` (their ``bias_p`` / ``bias_a``, with the
  roles swapped between the two classes; ``init_r1`` / ``init_r2`` set one value
  for every head instead);
* positivity: every use clamps to ``r >= eps = 1e-2`` (and ``r2 <= 2`` for the
  power kernel). They write the clamped value back into the parameter before
  each forward pass (a projected gradient step); here the clamp is applied to
  the value used, with the gradient passed straight through it, so the forward
  values and the gradients of a step are theirs without a forward pass that
  writes into its own parameters. What differs: a parameter a step pushed below
  ``eps`` stays below (and is used as ``eps``) until the gradient brings it back,
  where theirs restarts from ``eps``.

Causal or not. Their causal code uses ``tril(i - j)``, 0 above the diagonal; the
bias here is the symmetric ``|i - j|`` everywhere (as :class:`ALiBi`): equal on
the visible half of a causal mask, and a usable bidirectional variant without
one. ``causal`` records the intent; the bias is the same.

Precision. Distances are taken in int64 (exact at any position), then cast to
the bias dtype. Both kernels are well conditioned in the distance (relative
condition number at most 1 for the log, ``r2 <= 2`` for the power), so a float32
distance, exact below 2**24 and off by one part in 2**24 above, gives a bias
good to a few float32 units: float64 would buy nothing.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_choice, check_finite_float, check_float32, check_int
from attnlab.encodings.positions import pair_distances
from attnlab.encodings.scheme import ModelSizes, PositionScheme, bias_dtype, check_heads, check_positions

__all__ = ["KERNELS", "KERPLE"]

#: the kernel families of Chi et al. 2022 offered here.
KERNELS = ("log", "power")

# (upper bound of r1's initial U(0, b), of r2's), from the authors' get_parameter(scale, 'uniform').
_INIT_SCALE = {"log": (2.0, 1.0), "power": (1.0, 2.0)}
# The power kernel's exponent is at most 2: beyond, |i - j| ** r2 is no longer CPD (paper, §4).
_MAX_POWER = 2.0


def _clamp_straight_through(x: Tensor, low: float, high: float | None) -> Tensor:
    """``x.clamp(low, high)`` in value, identity in gradient (module docstring)."""
    # clamp(x) + 0 in value, exactly; d/dx = 1 (the detached clamp carries no gradient).
    return x.detach().clamp(min=low, max=high) + (x - x.detach())


class KERPLE(PositionScheme):
    """KERPLE (Chi et al. 2022): ``-r1_h log(1 + r2_h |i - j|)`` or ``-r1_h |i - j| ** r2_h``.

    ``bias(q, S)[0, h, i, j]`` for query position ``q_offset + i`` and key
    position ``k_offset + j``, or any positions through :meth:`bias_at`. Purely
    relative (a function of ``|i - j|``), any length (``max_len`` None).
    Parameters, initialisation and positivity as the module docstring says.

    Args:
        n_heads: number of heads ``H``.
        kernel: ``"log"`` (the paper's best, the default) or ``"power"``.
        causal: the use the scheme is meant for; the bias is the same either way
            (module docstring), as for :class:`~attnlab.encodings.ALiBi`.
        init_r1: one initial ``r1`` for every head, > 0; None draws the authors'
            uniform initialisation.
        init_r2: likewise for ``r2`` (at most 2 for the power kernel).
        eps: the smallest ``r1`` and ``r2`` used (1e-2 in the authors' code).

    Attributes:
        r1: the per-head scale ``r1``, parameter ``[H]`` (used clamped to ``>= eps``).
        r2: the per-head ``r2``, parameter ``[H]`` (used clamped to ``>= eps``,
            and ``<= 2`` for the power kernel).

    Raises:
        TypeError: for a non-integer ``n_heads``, non-bool ``causal`` or non-number values.
        ValueError: for ``n_heads < 1``, an unknown ``kernel``, a non-positive or
            non-finite ``eps``, ``init_r1`` or ``init_r2``, an initial value below
            ``eps``, or ``init_r2 > 2`` for the power kernel.

    Example:
        >>> kerple = KERPLE(2, init_r1=1.0, init_r2=1.0)  # -log(1 + |i - j|)
        >>> kerple.bias(torch.zeros(1, 2, 1, 8), 4, q_offset=3)[0, 0]
        tensor([[-1.3863, -1.0986, -0.6931,  0.0000]], grad_fn=<SelectBackward0>)
    """

    adds_score = True
    by_distance = True
    has_score_mod = True
    batched_positions = True

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> KERPLE:
        """One logarithmic KERPLE per self-attention."""
        return cls(sizes.n_heads, causal=sizes.causal)

    def __init__(
        self,
        n_heads: int,
        *,
        kernel: str = "log",
        causal: bool = True,
        init_r1: float | None = None,
        init_r2: float | None = None,
        eps: float = 1e-2,
    ) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.kernel = check_choice("kernel", kernel, KERNELS)
        self.causal = check_bool("causal", causal)
        self.eps = check_finite_float("eps", eps, positive=True)
        self._max_r2 = _MAX_POWER if self.kernel == "power" else None
        self.init_r1 = self._check_init("init_r1", init_r1, None)
        self.init_r2 = self._check_init("init_r2", init_r2, self._max_r2)
        self.r1 = nn.Parameter(torch.empty(self.n_heads))
        self.r2 = nn.Parameter(torch.empty(self.n_heads))
        self.reset_parameters()

    def _check_init(self, name: str, value: float | None, maximum: float | None) -> float | None:
        """``value`` as a float in ``[eps, maximum]``, or None."""
        if value is None:
            return None
        value = check_float32(name, value, positive=True)
        if value < self.eps:
            raise ValueError(f"{name} must be at least eps = {self.eps} (smaller values are used as eps), "
                             f"got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{name} must be at most {maximum} for the {self.kernel} kernel, got {value}")
        return value

    def reset_parameters(self) -> None:
        """Set ``r1``, ``r2`` to ``init_r1``, ``init_r2``, or draw them as the authors do (module docstring)."""
        with torch.no_grad():
            for param, init, scale in zip((self.r1, self.r2), (self.init_r1, self.init_r2),
                                          _INIT_SCALE[self.kernel], strict=True):
                if init is None:
                    param.uniform_(0.0, scale)
                else:
                    param.fill_(init)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"n_heads={self.n_heads}, kernel={self.kernel!r}, causal={self.causal}, eps={self.eps}"

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor:
        """The kernel bias for queries at ``q_pos`` and keys at ``k_pos``.

        Args:
            q: queries ``[B, H, T, Dh]``; only ``T``, dtype and device are used.
            q_pos: query positions, integer ``[T]``, or per row ``[B, T]``.
            k_pos: key positions, integer ``[S]`` or ``[B, S]``.
            k: unused (KERPLE does not read the keys).

        Returns:
            ``[1, H, T, S]`` (``[B, H, T, S]`` for per-row positions), float32 for half-precision
            ``q``, else ``q.dtype``; differentiable with respect to ``r1`` and ``r2``.

        Raises:
            TypeError: for a non-floating ``q`` or non-integer positions.
            ValueError: if ``q`` is not ``[B, H, T, Dh]`` with ``H = n_heads``, or
                the positions are not 1-d with ``T`` query positions.
        """
        check_heads("q", q, n_heads=self.n_heads)
        check_positions("q_pos", q_pos, q.shape[2])
        check_positions("k_pos", k_pos)
        dtype = bias_dtype(q.dtype)
        q_pos, k_pos = q_pos.to(device=q.device, dtype=torch.int64), k_pos.to(device=q.device, dtype=torch.int64)
        # Subtracted exactly as integers; [T, S], or [B, 1, T, S] for per-row positions (one per head below).
        distance = pair_distances(q_pos, k_pos).abs().to(dtype)
        if distance.ndim == 3:
            distance = distance.unsqueeze(1)  # [B, T, S] -> [B, 1, T, S]
        r1 = _clamp_straight_through(self.r1, self.eps, None).to(device=q.device, dtype=dtype)[:, None, None]
        r2 = _clamp_straight_through(self.r2, self.eps, self._max_r2).to(device=q.device, dtype=dtype)[:, None, None]
        if self.kernel == "log":
            kernel = r1 * torch.log1p(r2 * distance)  # [H, 1, 1] * [(B, 1,) T, S] -> [(B,) H, T, S]
        else:
            # 0 ** r2 = 0, and torch gives its derivative in r2 as 0 (not 0 * log 0 = nan).
            kernel = r1 * distance.pow(r2)  # [H, 1, 1] * [(B, 1,) T, S] -> [(B,) H, T, S]
        # 0 - kernel rather than -kernel: distance 0 gives +0.0, not -0.0.
        term = 0.0 - kernel
        return term if term.ndim == 4 else term[None]  # [B|1, H, T, S]
