"""FIRE: a learned function of the relative position, progressively interpolated.

Li, You, Guruganesh, Ainslie, Ontanon, Zaheer, Sanghai, Yang, Kumar and
Bhojanapalli 2024, "Functional Interpolation for Relative Positions Improves
Long Context Transformers" (ICLR, arXiv:2310.04418), §3. Head ``h`` adds to the
score of query ``i`` and key ``j``::

    b_h(i, j) = f_theta( psi(i - j) / psi(max(L, i)) )_h,    psi(x) = log(c x + 1)

* ``f_theta`` is a small MLP ``1 -> hidden -> H`` (one output per head), shared
  by every pair of positions: the bias is a *function* of the distance, not a
  table, so it is defined at any length.
* dividing by ``psi(i)`` ("progressive interpolation") maps every distance a
  query can see, ``0 <= i - j <= i``, into ``[0, 1]``, whatever the length: a
  longer sequence is an interpolation of what the MLP saw, not an extrapolation.
* the threshold ``L`` keeps short sequences from being stretched to ``[0, 1]``:
  while ``i <= L`` the normaliser is the constant ``psi(L)``, so there the bias
  depends on ``i - j`` only.
* ``psi`` (log with a learnable scale ``c``) spreads the nearby distances apart,
  where most of the attention goes.

The details follow the paper's PyTorch listing (Appendix; the same code as
mcleish7/arithmetic's ``FIRE``): ``hidden = 32`` with ReLU, PyTorch's default
``nn.Linear`` initialisation, ``c`` initialised to 0.1, ``L = |m * L0|`` with
``L0 = 512`` fixed and a learnable multiplier ``m`` starting at 1 (so that an
optimiser step moves ``L`` by a fraction of itself, not by a few units of 512),
positivity by absolute values (``|c|`` and ``|m L0|``: a sign flip is harmless,
where a clamp would stop the gradient), and ``eps = 1e-6`` added to the
normaliser so that ``c -> 0`` cannot divide by zero.

Causal or not. The paper trains causal language models only, where ``j <= i``.
The listing computes ``psi(|i - j|)`` on every pair, so the masked half
``j > i`` gets a finite value that the mask then discards; ``causal=True`` does
the same. ``causal=False`` (a bidirectional encoder) is our extension, not the
paper's: keys after the query get their own ``H`` MLP outputs (the MLP has
``2H``), on the same ``psi(|i - j|) / psi(max(L, i))``. Keys before (and at) the
query keep the paper's bias exactly; keys after are told apart by direction and
still depend on the two positions only (a normaliser built from the last key
would make a sample's bias depend on the padding of its batch).

Relative, shift invariant, cached. The bias depends on the positions only, never
on ``T`` or ``S``, so a query at position ``p`` decoded alone against cached keys
``0 .. p`` gets exactly row ``p`` of the full pass, and randomized positions
(Ruoss et al. 2023) go through :meth:`FIRE.bias_at`. It is *not* shift
invariant once a query sits beyond ``L``: ``max(L, i)`` is the query's absolute
position there. That is the method, not a defect: ``audit_position`` passes
while every audited position is below ``L`` and reports ``offset_only`` and
``shift_invariant`` failing past it.

Precision. Distances are taken in int64 and the log ratio in float64 (one
``[T, S]`` array, next to the MLP's ``[T, S, hidden]``: free). The reference
builds positions in float32, where integers stop being exact at 2**24: from
position 16,777,216 on, neighbouring keys collide and distance 1 becomes 0. The
ratio, in ``[0, 1]`` for visible keys, is then cast once to the MLP's dtype.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_finite_float, check_float32, check_int
from attnlab.encodings.positions import pair_distances
from attnlab.encodings.scheme import ModelSizes, PositionScheme, ScoreMod, bias_dtype, check_heads, check_positions
from attnlab.encodings.score_mods import fire_score_mod

__all__ = ["FIRE"]


class FIRE(PositionScheme):
    """FIRE (Li et al. 2024): ``b_h(i, j) = MLP(psi(|i - j|) / psi(max(L, i)))_h``.

    ``bias(q, S)[0, h, i, j]`` for query position ``q_offset + i`` and key
    position ``k_offset + j``, or any positions through :meth:`bias_at` (module
    docstring for the formula, the choices and where it is relative). Any length
    (``max_len`` None); differentiable with respect to the MLP, ``c`` and ``L``.

    Memory: the MLP's hidden layer is a ``[T, S, hidden]`` tensor per call.

    Args:
        n_heads: number of heads ``H``.
        causal: True (the paper's setting, a decoder with a causal mask): one
            output per head for every pair. False (an encoder): a second set of
            ``H`` outputs for keys after the query (module docstring).
        hidden: width of the MLP's hidden layer (32 in the paper).
        init_c: initial ``c`` of ``psi(x) = log(c x + 1)`` (0.1 in the paper).
        init_threshold: ``L0``, the initial threshold ``L`` (512 in the paper);
            ``L = |m * L0|`` with the multiplier ``m`` learned from 1.
        eps: added to the normaliser ``psi(max(L, i))`` (1e-6 in the paper's code).

    Attributes:
        mlp: ``nn.Sequential(Linear(1, hidden), ReLU(), Linear(hidden, H or 2H))``.
        c: the learned ``c`` (used as ``|c|``), a scalar parameter.
        threshold_multiplier: the learned ``m`` of ``L = |m * L0|``, a scalar parameter.

    Raises:
        TypeError: for a non-integer size, non-bool ``causal`` or non-number init values.
        ValueError: for ``n_heads < 1``, ``hidden < 1``, or a non-positive or
            non-finite ``init_c``, ``init_threshold`` or ``eps``.

    Example:
        >>> fire = FIRE(4)
        >>> fire.bias(torch.zeros(2, 4, 3, 8), 5, q_offset=2).shape
        torch.Size([1, 4, 3, 5])
        >>> fire.normalized_distance(torch.tensor([600]), torch.tensor([0, 300, 600]))  # past L = 512
        tensor([[1.0000, 0.8353, 0.0000]], dtype=torch.float64, grad_fn=<DivBackward0>)
    """

    adds_score = True
    has_score_mod = True
    batched_positions = True

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> FIRE:
        """One FIRE per self-attention (a second set of outputs for keys after the query when bidirectional)."""
        return cls(sizes.n_heads, causal=sizes.causal)

    def __init__(
        self,
        n_heads: int,
        *,
        causal: bool = True,
        hidden: int = 32,
        init_c: float = 0.1,
        init_threshold: float = 512.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.causal = check_bool("causal", causal)
        self.hidden = check_int("hidden", hidden, minimum=1)
        self.init_c = check_float32("init_c", init_c, positive=True)
        self.init_threshold = check_float32("init_threshold", init_threshold, positive=True)
        self.eps = check_finite_float("eps", eps, positive=True)
        n_out = self.n_heads if self.causal else 2 * self.n_heads
        self.mlp = nn.Sequential(nn.Linear(1, self.hidden), nn.ReLU(), nn.Linear(self.hidden, n_out))
        self.c = nn.Parameter(torch.empty(()))
        self.threshold_multiplier = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw the MLP (PyTorch's default ``nn.Linear`` init), set ``c = init_c`` and ``m = 1``."""
        for layer in (self.mlp[0], self.mlp[2]):
            layer.reset_parameters()  # type: ignore[operator]
        with torch.no_grad():
            self.c.fill_(self.init_c)
            self.threshold_multiplier.fill_(1.0)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"n_heads={self.n_heads}, causal={self.causal}, hidden={self.hidden}, init_c={self.init_c}, "
                f"init_threshold={self.init_threshold}, eps={self.eps}")

    @property
    def threshold(self) -> Tensor:
        """The threshold ``L = |m * L0|``, a float64 scalar (differentiable with respect to ``m``)."""
        return (self.threshold_multiplier.to(torch.float64) * self.init_threshold).abs()

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The MLP's input ``psi(|i - j|) / (psi(max(L, i)) + eps)``, float64 ``[T, S]`` (or ``[B, T, S]``).

        In ``[0, 1]`` for keys at or before the query (``j <= i``) at positions
        ``>= 0``; differentiable with respect to ``c`` and ``L``.

        Args:
            q_pos: query positions ``i``, integer ``[T]``, or per row ``[B, T]``.
            k_pos: key positions ``j``, integer ``[S]`` or ``[B, S]``.

        Returns:
            float64 ``[T, S]`` (``[B, T, S]`` when either is per row) on the parameters' device.

        Raises:
            TypeError: if a position tensor is not an integer tensor.
            ValueError: if a position tensor is neither 1-d nor 2-d.
        """
        check_positions("q_pos", q_pos)
        check_positions("k_pos", k_pos)
        return self._normalized_distance(q_pos, k_pos)

    def _normalized_distance(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """:meth:`normalized_distance` of checked positions ``[T]|[B, T]``, ``[S]|[B, S]`` -> float64 ``[*R]``.

        ``[*R]`` is ``[T, S]``, or ``[B, T, S]`` when either is per row.
        """
        device = self.c.device
        q_pos, k_pos = q_pos.to(device=device, dtype=torch.int64), k_pos.to(device=device, dtype=torch.int64)
        # Subtract as integers: exact at any position (float32 is not beyond 2**24).
        distance = pair_distances(q_pos, k_pos).abs().to(torch.float64)  # [*R]
        return self.psi(distance) / self.normaliser(q_pos)[..., :, None]  # [*R] / [(B,) T, 1]

    def psi(self, x: Tensor) -> Tensor:
        """``psi(x) = log(|c| x + 1)`` in float64, for distances ``x >= 0`` of any shape (on ``c``'s device)."""
        # log1p(c x) is log(c x + 1) without the rounding of c x + 1 for small c x.
        return torch.log1p(self.c.to(torch.float64).abs() * x.to(device=self.c.device, dtype=torch.float64))

    def normaliser(self, q_pos: Tensor) -> Tensor:
        """``psi(max(L, i)) + eps`` in float64 for query positions ``q_pos [T]`` (any shape): what FIRE divides by."""
        q_pos = q_pos.to(device=self.c.device, dtype=torch.float64)
        return self.psi(torch.maximum(q_pos, self.threshold.to(torch.float64))) + self.eps  # [T]

    def score_mod(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
                  position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> ScoreMod | None:
        """:meth:`bias` as a FlexAttention score_mod, the MLP run per score (no ``[T, S]`` tensor).

        Args:
            q: queries ``[B, H, T, Dh]``; only ``T``, dtype and device are used.
            n_keys: number of keys ``S``.
            q_offset: position of the first query.
            k_offset: position of the first key.
            position_ids: per-row query positions ``[B, T]``: no score_mod (None), as the base's.
            key_position_ids: per-row key positions ``[B, S]``: likewise.

        Returns:
            The score_mod of :func:`attnlab.encodings.score_mods.fire_score_mod`; None for per-row positions.
        """
        if position_ids is not None or key_position_ids is not None:
            return None
        return fire_score_mod(self, q, n_keys, q_offset=q_offset, k_offset=k_offset)

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor:
        """The FIRE bias for queries at ``q_pos`` and keys at ``k_pos``.

        Args:
            q: queries ``[B, H, T, Dh]``; only ``T``, dtype and device are used.
            q_pos: query positions, integer ``[T]`` (e.g. a sorted random subset
                of ``[0, L_max)`` for randomized positions), or per row ``[B, T]``.
            k_pos: key positions, integer ``[S]`` or ``[B, S]``.
            k: unused (FIRE does not read the keys).

        Returns:
            ``[1, H, T, S]`` (``[B, H, T, S]`` for per-row positions), float32 for half-precision
            ``q``, else ``q.dtype``; differentiable with respect to the MLP, ``c`` and the threshold.

        Raises:
            TypeError: for a non-floating ``q`` or non-integer positions.
            ValueError: if ``q`` is not ``[B, H, T, Dh]`` with ``H = n_heads``, or
                the positions are not 1-d with ``T`` query positions.
        """
        check_heads("q", q, n_heads=self.n_heads)
        check_positions("q_pos", q_pos, q.shape[2])
        check_positions("k_pos", k_pos)
        ratio = self._normalized_distance(q_pos, k_pos)  # [*R] float64: [T, S] or [B, T, S]
        mlp_dtype = next(self.mlp.parameters()).dtype
        out = self.mlp(ratio.to(mlp_dtype).unsqueeze(-1))  # [*R, 1] -> [*R, H] (2H when bidirectional)
        if not self.causal:
            H = self.n_heads
            after = (pair_distances(q_pos.to(ratio.device), k_pos.to(ratio.device)) > 0).unsqueeze(-1)  # [*R, 1]
            out = torch.where(after, out[..., H:], out[..., :H])  # [*R, H]: keys after the query, own outputs
        term = out.movedim(-1, -3).to(device=q.device, dtype=bias_dtype(q.dtype))  # [(B,) H, T, S]
        return term if term.ndim == 4 else term[None]  # [B|1, H, T, S]
