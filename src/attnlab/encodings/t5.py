"""T5's relative position bias: one learned scalar per head and distance bucket.

Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer" (JMLR, arXiv:1910.10683), §2.1. Each head adds a
learned scalar to the score of query ``i`` and key ``j``, chosen by a bucket of
the relative position ``j - i``. Buckets are exact for short distances and
logarithmically wider for long ones, and every distance beyond ``max_distance``
shares the last bucket, so the bias is defined at any length.

The bucketing is mesh-tensorflow's ``_relative_position_bucket``, which HF
``T5Attention._relative_position_bucket`` reproduces; :func:`t5_bucket` follows
them step by step so that T5 checkpoints load with the same buckets:

* ``relative_position = memory_position - query_position`` (key minus query);
* bidirectional: half the buckets for keys after the query (``n > 0``), half
  for the rest, by ``|n|``; causal: only ``max(-n, 0)`` (keys before the query);
* of the ``N`` buckets left, the first ``N / 2`` hold distances ``0 .. N/2 - 1``
  exactly; distance ``r >= N/2`` goes to
  ``N/2 + floor(log(r / (N/2)) / log(max_distance / (N/2)) * (N - N/2))``,
  clamped to ``N - 1``.

One table per model. T5 creates the table in the first layer of each stack only and
hands that layer's bias to every later layer (mesh-tensorflow; HF's
``has_relative_attention_bias=bool(i == 0)``; Kazemnejad et al. 2023's decoder-only T5,
McGill-NLP/length-generalization ``src/models/custom_t5_decoder_only.py``, likewise).
:class:`T5RelativeBias` (``"t5"``) is one table per layer; :class:`SharedT5RelativeBias`
(``"t5-shared"``) declares :attr:`~attnlab.encodings.PositionScheme.shared_across_layers`,
so a model builds it once per stack and gives every layer the same module.

Positions. :class:`T5RelativeBias` is a :class:`PositionScheme` that depends on
the positions only through ``j - i``: the same buckets serve the offsets of
ordinary and cached attention (:meth:`~T5RelativeBias.bias`), any positions
(:meth:`~T5RelativeBias.bias_at`, what randomized positions use) and any matrix
of signed distances (:meth:`~T5RelativeBias.bias_rel`).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.encodings.scheme import ModelSizes, PositionScheme, bias_dtype, check_heads, check_rel

__all__ = ["SharedT5RelativeBias", "T5RelativeBias", "t5_bucket"]

# Standard deviation of the initial bias table; see T5RelativeBias.
_INIT_STD = 0.02


def _check_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> tuple[int, int]:
    """Validate the bucketing arguments; return them as ints."""
    if not isinstance(bidirectional, bool):
        raise TypeError(f"bidirectional must be a bool, got {bidirectional!r} ({type(bidirectional).__name__})")
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    max_distance = check_int("max_distance", max_distance, minimum=1)
    if bidirectional and num_buckets % 2:
        raise ValueError(
            f"num_buckets must be even when bidirectional (half per direction), got num_buckets={num_buckets}"
        )
    per_side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_side // 2
    if max_exact < 1:
        need = 4 if bidirectional else 2
        raise ValueError(
            f"num_buckets must be at least {need} ({'bidirectional' if bidirectional else 'causal'}: "
            f"at least one exact bucket), got num_buckets={num_buckets}"
        )
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must exceed the {max_exact} exactly-bucketed distances (the log buckets span "
            f"{max_exact} .. max_distance), got max_distance={max_distance} with num_buckets={num_buckets}"
        )
    return num_buckets, max_distance


def t5_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """T5's bucket of each relative position (mesh-tensorflow / HF ``_relative_position_bucket``).

    Args:
        relative_position: key position minus query position, any shape, integer
            (e.g. :func:`~attnlab.encodings.scheme.relative_positions`).
        bidirectional: True for an encoder (keys on both sides); False for a
            causal decoder, where every key after the query lands in bucket 0.
        num_buckets: number of buckets (32 in T5); even when bidirectional.
        max_distance: distances from here on share the last bucket (128 in T5).

    Returns:
        int64 tensor of the same shape, values in ``0 .. num_buckets - 1``.

    Raises:
        TypeError: if ``relative_position`` is not an integer tensor, or a bad argument type.
        ValueError: for an odd ``num_buckets`` when bidirectional, too few
            buckets for one exact bucket, or ``max_distance`` not above the exact range.

    Example:
        >>> t5_bucket(torch.tensor([-200, -9, -1, 0, 1, 9, 200]))
        tensor([15,  8,  1,  0, 17, 24, 31])
        >>> t5_bucket(torch.tensor([-200, -9, -1, 0, 1, 9, 200]), bidirectional=False)
        tensor([31,  9,  1,  0,  0,  0,  0])
    """
    num_buckets, max_distance = _check_buckets(num_buckets, max_distance, bidirectional)
    if not isinstance(relative_position, Tensor):
        raise TypeError(f"relative_position must be an integer tensor, got {type(relative_position).__name__}")
    if relative_position.is_floating_point() or relative_position.is_complex() or relative_position.dtype == torch.bool:
        raise TypeError(f"relative_position must be an integer tensor, got dtype {relative_position.dtype}")
    n = relative_position.long()
    bucket = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n > 0).long() * num_buckets  # keys after the query: upper half
        n = n.abs()
    else:
        n = (-n).clamp(min=0)  # keys after the query all count as distance 0
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # float32 log, as mesh-tensorflow (tf.to_float) and HF (.float()) compute it:
    # identical buckets to a float64 evaluation for the standard settings (tests
    # check this), and the published float32 formula wins if they ever disagreed.
    # clamp(min=1) only keeps log() finite where is_small discards the result.
    ratio = n.clamp(min=1).float() / max_exact
    log_bucket = torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = (max_exact + log_bucket.long()).clamp(max=num_buckets - 1)  # .long() truncates, as tf.to_int32
    return bucket + torch.where(is_small, n, large)


class T5RelativeBias(PositionScheme):
    """T5's learned, bucketed relative position bias (Raffel et al. 2020).

    ``bias(q, S)[0, h, i, j] = table[t5_bucket((k_offset + j) - (q_offset + i)), h]``
    with ``table`` an ``nn.Embedding(num_buckets, n_heads)``. Any length
    (``max_len`` None): distances past ``max_distance`` share the last bucket.

    T5 itself does not scale its scores by ``1 / sqrt(Dh)`` (the scale is folded
    into the initialisation of ``W_q``). This bias is simply added to whatever
    scores attention computes (scaled ones in attnlab); it is not rescaled by
    ``sqrt(Dh)`` as x-transformers does, so a T5 checkpoint's table matches here
    only if its attention is run unscaled.

    Initialisation: normal with standard deviation 0.02 (nn.Embedding's default
    N(0, 1) would start the biases as large as the scores themselves; HF T5 uses
    ``d_model ** -0.5``, 0.044 for 512). Call :meth:`reset_parameters` to redraw.

    Args:
        n_heads: number of heads ``H``; T5 shares one table across layers by
            creating it in the first layer only (share the module to do that).
        num_buckets: number of buckets (32 in T5); even when bidirectional.
        max_distance: distance from which all keys share the last bucket (128).
        bidirectional: True for encoder self-attention, False for a causal decoder.

    Raises:
        TypeError: for a non-integer size or non-bool ``bidirectional``.
        ValueError: for ``n_heads < 1`` and the bucketing errors of :func:`t5_bucket`.

    Example:
        >>> t5 = T5RelativeBias(4)
        >>> t5.bias(torch.zeros(2, 4, 5, 8), 7).shape
        torch.Size([1, 4, 5, 7])
    """

    adds_score = True
    relative = True
    by_distance = True
    has_score_mod = True
    batched_positions = True

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> T5RelativeBias:
        """One table per self-attention; a causal decoder buckets one direction only."""
        return cls(sizes.n_heads, bidirectional=not sizes.causal)

    def __init__(
        self,
        n_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.num_buckets, self.max_distance = _check_buckets(num_buckets, max_distance, bidirectional)
        self.bidirectional = bidirectional
        self.table = nn.Embedding(self.num_buckets, self.n_heads)  # [num_buckets, H]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the bias table from N(0, 0.02**2) (class docstring)."""
        nn.init.normal_(self.table.weight, std=_INIT_STD)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
                f"bidirectional={self.bidirectional}")

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor:
        """The learned bias at signed key-minus-query distances ``rel [T, S]`` (or ``[B, T, S]``): their buckets.

        Args:
            q: queries ``[B, H, T, Dh]``; only ``T``, dtype and device are used.
            rel: int64 ``[T, S]``, or per row ``[B, T, S]``.
            k: the keys ``[B, H, S, Dh]`` of the protocol; unused.

        Returns:
            ``[1, H, T, S]`` (``[B, H, T, S]`` for per-row ``rel``), float32 for half-precision ``q``, else ``q.dtype``;
            differentiable with respect to the table.

        Raises:
            TypeError / ValueError: for ``q`` that is not ``[B, H, T, Dh]`` with
                ``H = n_heads``, or ``rel`` that is not an integer ``[T, S]``.
        """
        check_heads("q", q, n_heads=self.n_heads)
        check_rel(rel, q.shape[2])
        buckets = t5_bucket(rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                            max_distance=self.max_distance)  # [*R] = [T, S] or [B, T, S]
        values = self.table(buckets.to(self.table.weight.device))  # [*R, H]
        term = values.to(device=q.device, dtype=bias_dtype(q.dtype)).movedim(-1, -3)  # [(B,) H, T, S]
        return term if term.ndim == 4 else term[None]  # [B|1, H, T, S]


class SharedT5RelativeBias(T5RelativeBias):
    """T5's bias as T5 has it: one table for all the layers of a stack (Raffel et al. 2020).

    The same numbers as :class:`T5RelativeBias`; what differs is how a model builds it.
    It declares :attr:`~attnlab.encodings.PositionScheme.shared_across_layers`, so
    :class:`attnlab.models.sequence_model.SequenceModel` builds one instance per stack (an
    encoder, a decoder) when it builds the stack's first layer, before that layer's own
    weights, and gives the same module to every layer of the stack: the table is one
    parameter, listed once by ``parameters()``, trained by the gradients of every layer.
    ``state_dict()`` holds it under each layer's name, as torch holds tied weights
    (``torch.save`` writes the shared tensor once).

    Every layer evaluates the same bias again; T5 evaluates it once and passes it on. The
    numbers are the same, and the cost is a lookup per layer.

    Args:
        n_heads, num_buckets, max_distance, bidirectional: as :class:`T5RelativeBias`.

    Example:
        >>> from attnlab.models import DecoderOnlyTransformer
        >>> model = DecoderOnlyTransformer(vocab_size=8, d_model=16, n_heads=2, n_layers=3, position="t5-shared")
        >>> model.layers[0].self_attn.position is model.layers[2].self_attn.position
        True
    """

    shared_across_layers = True
