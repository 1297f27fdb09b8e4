"""Scoring functions: how well each key matches each query, before the softmax.

Attention turns scores into weights (``alphas``) with a softmax over the keys,
then averages the values with those weights into a context vector. The attention
lab builds the score up in steps, and every step is here:

* :func:`uniform_scores`: every key scores the same, so the weights are the plain
  average ``1 / S`` (the lab's first ``calc_alphas``);
* :func:`dot_scores`: ``q . k = |q| |k| cos(theta)``, large when the vectors point
  the same way (Luong et al. 2015, "dot");
* :func:`scaled_dot_scores`: the dot product divided by ``sqrt(D)``, so the
  scores do not grow with the width and saturate the softmax (Vaswani et al. 2017;
  :func:`dot_product_variance` shows why);
* :class:`AdditiveScore`: ``v^T tanh(W_q q + W_k k)`` (Bahdanau et al. 2015);
* :class:`GeneralScore`: ``q^T W k`` (Luong et al. 2015, "general").

:func:`alphas_from_scores` is the masked softmax and :func:`context_vector` the
weighted average. The modules in :mod:`attnlab.attention` fuse these steps
(:func:`attnlab.attention.attend`); these functions spell them out.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``D`` query/key width,
``Dq``/``Dk`` query/key widths when they differ, ``Dv`` value width, ``Dh`` hidden width.

Example (the attention lab's query and three keys):
    >>> q = torch.tensor([[[.55, .95]]])                                 # [1, 1, 2]
    >>> k = torch.tensor([[[.65, .2], [.85, -.4], [-.95, -.75]]])       # [1, 3, 2]
    >>> dot_scores(q, k)
    tensor([[[ 0.5475,  0.0875, -1.2350]]])
    >>> alphas = alphas_from_scores(dot_scores(q, k))
    >>> alphas
    tensor([[[0.5557, 0.3508, 0.0935]]])
    >>> context_vector(alphas, k)
    tensor([[[ 0.5706, -0.0993]]])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_input_dtype, check_int

__all__ = [
    "AdditiveScore",
    "GeneralScore",
    "alphas_from_scores",
    "context_vector",
    "dot_product_variance",
    "dot_scores",
    "scaled_dot_scores",
    "uniform_scores",
]

# dot_product_variance's default seed: reproducible without touching torch's global RNG.
_VARIANCE_SEED = 0


# -- argument checks ---------------------------------------------------------------


def _check_3d(name: str, x: object, layout: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a tensor {layout}, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"{name} must have shape {layout} (3 dims), got {list(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be floating point, got dtype {x.dtype}")
    return x


def _check_query_keys(query: object, keys: object, *, same_width: bool) -> tuple[Tensor, Tensor]:
    q = _check_3d("query", query, "[B, T, D]")
    k = _check_3d("keys", keys, "[B, S, D]")
    shapes = f"{list(q.shape)} and {list(k.shape)}"
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"query and keys must have the same batch B, got {shapes}")
    if same_width and q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query and keys must have the same width D, got {shapes}")
    if q.dtype != k.dtype:
        raise TypeError(f"query and keys must share a dtype, got {q.dtype} and {k.dtype}")
    return q, k


# -- score functions ---------------------------------------------------------------


def uniform_scores(query: Tensor, keys: Tensor) -> Tensor:
    """Equal scores for every key: the softmax of zeros is the plain average ``1 / S``.

    The attention lab's first ``calc_alphas`` (``ones / L``): attention that ignores both the
    query and the keys, so the context vector is the mean of the values.

    Args:
        query: ``[B, T, Dq]`` (only its shape is used).
        keys: ``[B, S, Dk]`` (only its shape is used).

    Returns:
        Zeros ``[B, T, S]`` in the query's dtype and device.

    Raises:
        TypeError, ValueError: if the inputs are not 3-D floating tensors with the same batch.
    """
    q, k = _check_query_keys(query, keys, same_width=False)
    return q.new_zeros(q.shape[0], q.shape[1], k.shape[1])  # [B, T, S]


def dot_scores(query: Tensor, keys: Tensor) -> Tensor:
    """Dot products ``q . k = |q| |k| cos(theta)`` (Luong et al. 2015, "dot", arXiv:1508.04025).

    Args:
        query: ``[B, T, D]``.
        keys: ``[B, S, D]``.

    Returns:
        Scores ``[B, T, S]``.

    Raises:
        TypeError, ValueError: naming ``query``/``keys`` for non-tensors, wrong
            dims, or mismatched batch, width or dtype.
    """
    q, k = _check_query_keys(query, keys, same_width=True)
    return torch.bmm(q, k.transpose(1, 2))  # [B, T, D] x [B, D, S] -> [B, T, S]


def scaled_dot_scores(query: Tensor, keys: Tensor) -> Tensor:
    """Dot products divided by ``sqrt(D)`` (Vaswani et al. 2017, §3.2.1, arXiv:1706.03762).

    For query and key entries of unit variance, ``q . k`` has variance ``D``
    (:func:`dot_product_variance`); dividing by ``sqrt(D)`` brings it back to 1,
    so a wide model's softmax does not collapse onto one key.

    Args:
        query: ``[B, T, D]``.
        keys: ``[B, S, D]``.

    Returns:
        Scores ``[B, T, S]``; their softmax equals :func:`attnlab.attention.attend`'s weights.

    Raises:
        TypeError, ValueError: as :func:`dot_scores`; ValueError for a width ``D`` of 0
            (``0 / sqrt(0)`` would make every score NaN).
    """
    scores = dot_scores(query, keys)  # [B, T, S]
    if query.shape[-1] == 0:
        raise ValueError(f"query and keys have width D=0 (shapes {list(query.shape)} and {list(keys.shape)}); "
                         "scaled dot products need D >= 1")
    return scores / math.sqrt(query.shape[-1])  # [B, T, S]


class AdditiveScore(nn.Module):
    """Additive ("concat") scores ``v^T tanh(W_q q + W_k k)`` (Bahdanau et al. 2015, arXiv:1409.0473).

    A one-hidden-layer network scores every (query, key) pair, so the query and
    the keys may have different widths. No biases, as in the paper's ``v_a^T
    tanh(W_a s + U_a h)``.

    Args:
        query_dim: ``Dq``, the width of the queries.
        key_dim: ``Dk``, the width of the keys.
        hidden_dim: ``Dh``, the width of the hidden layer.

    Attributes:
        linear_query: ``W_q``, ``nn.Linear(Dq, Dh, bias=False)``.
        linear_key: ``W_k``, ``nn.Linear(Dk, Dh, bias=False)``.
        v: ``nn.Linear(Dh, 1, bias=False)``.

    Shapes:
        ``forward(query [B, T, Dq], keys [B, S, Dk]) -> scores [B, T, S]``.
        The hidden activations are ``[B, T, S, Dh]``: memory grows with ``T * S * Dh``.

    Raises:
        TypeError, ValueError: for non-integer or non-positive sizes (naming them),
            and in ``forward`` for inputs of the wrong shape or dtype.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_dim = check_int("query_dim", query_dim, minimum=1)
        self.key_dim = check_int("key_dim", key_dim, minimum=1)
        self.hidden_dim = check_int("hidden_dim", hidden_dim, minimum=1)
        self.linear_query = nn.Linear(self.query_dim, self.hidden_dim, bias=False)
        self.linear_key = nn.Linear(self.key_dim, self.hidden_dim, bias=False)
        self.v = nn.Linear(self.hidden_dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """Scores ``[B, T, S]`` of ``query [B, T, Dq]`` against ``keys [B, S, Dk]``."""
        q, k = _check_query_keys(query, keys, same_width=False)
        _check_width("query", q, self.query_dim)
        _check_width("keys", k, self.key_dim)
        check_input_dtype("query", q, self.linear_query.weight.dtype, owner="module")  # keys share its dtype
        pq = self.linear_query(q)  # [B, T, Dh]
        pk = self.linear_key(k)  # [B, S, Dh]
        # [B, T, 1, Dh] + [B, 1, S, Dh] -> [B, T, S, Dh]: every (query, key) pair
        hidden = torch.tanh(pq.unsqueeze(2) + pk.unsqueeze(1))
        return self.v(hidden).squeeze(-1)  # [B, T, S, 1] -> [B, T, S]

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, hidden_dim={self.hidden_dim}"


class GeneralScore(nn.Module):
    """Bilinear ("general") scores ``q^T W k`` (Luong et al. 2015, arXiv:1508.04025).

    A learned ``W [Dq, Dk]`` between query and key: the dot product with a
    learned metric, and it lets the widths differ.

    Args:
        query_dim: ``Dq``, the width of the queries.
        key_dim: ``Dk``, the width of the keys.

    Attributes:
        linear: ``nn.Linear(Dk, Dq, bias=False)``; its weight ``[Dq, Dk]`` is ``W``
            (the keys are projected once: ``q . (W k)``).

    Shapes:
        ``forward(query [B, T, Dq], keys [B, S, Dk]) -> scores [B, T, S]``.

    Raises:
        TypeError, ValueError: for non-integer or non-positive sizes (naming them),
            and in ``forward`` for inputs of the wrong shape or dtype.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim = check_int("query_dim", query_dim, minimum=1)
        self.key_dim = check_int("key_dim", key_dim, minimum=1)
        self.linear = nn.Linear(self.key_dim, self.query_dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """Scores ``[B, T, S]`` of ``query [B, T, Dq]`` against ``keys [B, S, Dk]``."""
        q, k = _check_query_keys(query, keys, same_width=False)
        _check_width("query", q, self.query_dim)
        _check_width("keys", k, self.key_dim)
        check_input_dtype("query", q, self.linear.weight.dtype, owner="module")  # keys share its dtype
        wk = self.linear(k)  # [B, S, Dk] -> [B, S, Dq]
        return torch.bmm(q, wk.transpose(1, 2))  # [B, T, Dq] x [B, Dq, S] -> [B, T, S]

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}"


def _check_width(name: str, x: Tensor, width: int) -> None:
    if x.shape[-1] != width:
        raise ValueError(f"{name} must have width {width}, got shape {list(x.shape)}")


# -- from scores to context --------------------------------------------------------


def alphas_from_scores(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention weights: the softmax of the scores over the keys, where the mask allows.

    Masked scores are left out of the softmax (filled with ``-inf``, never
    ``-1e9``); a query whose keys are all masked gets weights of zeros, never NaN,
    and no NaN gradient. Half-precision scores are softmaxed in float32.

    Args:
        scores: ``[B, T, S]`` (any leading dims work; the softmax is over the last).
        mask: boolean, True = may attend, broadcastable to ``scores`` (e.g. ``[B, 1, S]``
            for padding, ``[T, S]`` for causal); None attends everywhere.

    Returns:
        ``alphas`` with the shape and dtype of ``scores``; each row sums to 1, or is
        all zeros when fully masked.

    Raises:
        TypeError: if ``scores`` is not a floating tensor or ``mask`` not a boolean tensor.
        ValueError: if ``mask`` does not broadcast to the shape of ``scores``.
    """
    if not isinstance(scores, Tensor) or not scores.is_floating_point():
        got = scores.dtype if isinstance(scores, Tensor) else type(scores).__name__
        raise TypeError(f"scores must be a floating-point tensor [B, T, S], got {got}")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension (the keys), got a scalar")
    work = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    if mask is None:
        return F.softmax(work, dim=-1).to(scores.dtype)
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got {got}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores.shape)
    except RuntimeError:
        shape = None
    if shape != scores.shape:
        raise ValueError(
            f"mask of shape {list(mask.shape)} does not broadcast to scores {list(scores.shape)}"
        )
    mask = mask.to(scores.device).expand(scores.shape)
    any_key = mask.any(dim=-1, keepdim=True)  # [..., T, 1]: rows with something to attend to
    filled = work.masked_fill(~mask, float("-inf"))
    # A fully masked row would be softmax(-inf, ..., -inf) = NaN: give it finite scores, then zero it.
    filled = filled.masked_fill(~any_key, 0.0)
    alphas = F.softmax(filled, dim=-1).masked_fill(~mask, 0.0)
    return alphas.to(scores.dtype)


def context_vector(alphas: Tensor, values: Tensor) -> Tensor:
    """The weighted average of the values: ``alphas @ values``.

    Args:
        alphas: attention weights ``[B, T, S]``.
        values: ``[B, S, Dv]``.

    Returns:
        Context vectors ``[B, T, Dv]``.

    Raises:
        TypeError, ValueError: naming ``alphas``/``values`` for non-tensors, wrong dims,
            or mismatched batch, length ``S`` or dtype.
    """
    a = _check_3d("alphas", alphas, "[B, T, S]")
    v = _check_3d("values", values, "[B, S, Dv]")
    if a.shape[0] != v.shape[0] or a.shape[2] != v.shape[1]:
        raise ValueError(
            f"alphas [B, T, S] and values [B, S, Dv] disagree on B or S: {list(a.shape)} and {list(v.shape)}"
        )
    if a.dtype != v.dtype:
        raise TypeError(f"alphas and values must share a dtype, got {a.dtype} and {v.dtype}")
    return torch.bmm(a, v)  # [B, T, S] x [B, S, Dv] -> [B, T, Dv]


def dot_product_variance(d: int, n: int = 10000, *, generator: torch.Generator | None = None) -> float:
    """The sample variance of ``q . k`` for ``n`` pairs of standard normal vectors of width ``d``.

    The attention lab's argument for scaling: each product ``q_i k_i`` has mean 0 and
    variance 1, so their sum over ``d`` dimensions has variance ``d`` and standard
    deviation ``sqrt(d)`` (Vaswani et al. 2017, §3.2.1, footnote 4). Unscaled scores
    spread further apart as models get wider, and the softmax saturates.

    Torch's global random state is never touched: the draws come from
    ``generator``, or from a private generator with a fixed seed (so the result is
    the same on every call).

    Args:
        d: width of the vectors (at least 1).
        n: number of (q, k) pairs (at least 2).
        generator: a CPU ``torch.Generator`` to draw from; a fresh one seeded with 0 when None.

    Returns:
        The unbiased sample variance of the ``n`` dot products (close to ``d``).

    Raises:
        TypeError: if ``d`` or ``n`` is not an integer or ``generator`` not a ``torch.Generator``.
        ValueError: if ``d < 1`` or ``n < 2``.

    Example:
        >>> round(dot_product_variance(10) / 10, 1)
        1.0
    """
    d = check_int("d", d, minimum=1)
    n = check_int("n", n, minimum=2)
    if generator is None:
        generator = torch.Generator().manual_seed(_VARIANCE_SEED)
    elif not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    q = torch.randn(n, d, generator=generator, dtype=torch.float64, device=generator.device)  # [n, d]
    k = torch.randn(n, d, generator=generator, dtype=torch.float64, device=generator.device)  # [n, d]
    return float((q * k).sum(dim=-1).var())  # variance of the n dot products
