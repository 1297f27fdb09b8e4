"""CoPE: contextual position encoding, positions counted by gates on the content.

Golovneva, Wang, Weston and Sukhbaatar 2024, "Contextual Position Encoding:
Learning to Count What's Important" (arXiv:2405.18719), §3 and the PyTorch code
of its appendix. Other schemes measure the distance from query ``i`` to key
``j`` in tokens; CoPE measures it in the tokens the query *counts*. Each key
``t`` gets a gate from the query::

    g[i, t] = sigmoid(q_i . k_t / sqrt(Dh))                     (0 for t > i)
    p[i, j] = sum_{t = j .. i} g[i, t]                          a fractional position
    e[i, j] = (p - floor p) * z_i[ceil p] + (1 - p + floor p) * z_i[floor p]
    z_i     = q_i @ pos_emb                                     [npos_max] logits

with ``p`` clamped to ``npos_max - 1`` and ``pos_emb [Dh, npos_max]`` learned
(zeros at first, as in the paper). ``e[i, j]`` is added to the attention logits
before the softmax: it is :meth:`CoPE.bias`. Instead of looking up
``q_i . pos_emb[:, p]`` at a fractional ``p``, the code computes the ``npos_max``
integer logits once per query and interpolates between them (the paper's
appendix; x-transformers does the same).

The reference code, followed here:

* the gates use the scaled logits ``q . k / sqrt(Dh)`` (the paper's appendix
  passes ``attn_logits`` after the division), and masked keys get gate 0;
* the term ``q @ pos_emb`` is **not** divided by ``sqrt(Dh)``: the appendix adds
  it to logits that already are. The authors' training code
  (facebookresearch/RAM, ``projects/cope``) divides both by default and has a
  ``--cope-nodiv`` flag for the appendix's form; ``divide_bias=True`` gives that
  default. Since ``pos_emb`` is learned the two differ only by a factor
  ``sqrt(Dh)`` in its scale (which matters for initialisation and loading weights);
* one ``pos_emb`` per layer, shared by its heads (the reference applies one
  module to every head); ``n_heads=H`` gives each head its own table instead.

Causal only. The count runs over keys between the key and the query, so keys
after the query have no position: their gates are 0 and their term is that of
position 0, which the causal mask then hides. Visibility comes from the
positions (a key at a position after the query's is not counted), so a query
at position ``p`` given the cached keys ``0 .. p`` gets exactly the full causal
pass's row. Always use CoPE with ``is_causal=True`` or a causal mask.

Padding. A key the query may not attend to is not counted: attention passes
its mask (:attr:`~attnlab.encodings.PositionScheme.reads_mask`) and a masked
key's gate is 0, as in the reference code. So a left-padded row counts what it
would count unpadded; called without a mask (``bias(q, S, k=k)``), every key
up to the query's position is counted.

Cost. The bias needs ``q . k`` of every visible pair, so scores are computed
twice (here and in attention), plus ``[B, H, T, S]`` gates and positions:
``O(B H T S Dh)`` more work per layer, and no fused kernel can skip the
materialised bias.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head
dim, ``P`` = ``npos_max``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab._finite import bounded_pair
from attnlab._validate import check_bool, check_int
from attnlab.encodings.positions import pair_distances
from attnlab.encodings.scheme import ModelSizes, PositionScheme, bias_dtype, check_heads

__all__ = ["CoPE"]


def _check_finite(name: str, x: Tensor) -> None:
    """Refuse a NaN or inf in ``x``: CoPE's positions are counts of gates, and a non-finite gate has none.

    The positions index the table of position logits, so a NaN would become an index out of
    bounds. (Attention hands CoPE no key that every query is masked from: those are zeros.)
    """
    if torch.compiler.is_compiling():
        # Traced (torch.compile, torch.export), reading the answer back would break the graph: the check
        # runs inside it, a RuntimeError.
        torch._assert_async(torch.isfinite(x).all(), f"CoPE's {name} holds NaN or inf: its positions count gates "
                            "sigmoid(q . k), which must be finite; check the inputs for non-finite values")
    elif not bool(torch.isfinite(x).all()):
        raise ValueError(f"CoPE's {name} holds NaN or inf ({name} of shape {list(x.shape)}): its positions count "
                         "gates sigmoid(q . k), which must be finite; check the inputs for non-finite values")


class CoPE(PositionScheme):
    """CoPE (Golovneva et al. 2024): a bias from content-counted positions.

    ``bias(q, S, q_offset=.., k_offset=.., k=keys)[b, h, i, j]`` is the
    interpolated ``q_i @ pos_emb`` at the position ``p[i, j]`` (module docstring);
    attention passes the keys because :attr:`reads_keys` is True. Learned
    (``pos_emb``), any sequence length (positions are clamped to ``npos_max - 1``,
    so ``max_len`` is None), causal only.

    Args:
        head_dim: features per head ``Dh``.
        npos_max: number ``P`` of integer positions with an embedding; counted
            positions are clamped to ``P - 1``. At least 2. The paper's counting
            and copying tasks use small values (a counted position rarely gets far).
        n_heads: None (default): one table ``pos_emb [Dh, P]`` shared by all heads,
            as in the reference. An integer ``H``: one table per head,
            ``pos_emb [H, Dh, P]``, and queries must then have ``H`` heads.
        divide_bias: divide the position logits by ``sqrt(Dh)`` like the content
            logits (the authors' training code's default); False (default) adds
            them unscaled, as the paper's appendix and x-transformers do.

    Attributes:
        pos_emb: the learned position embeddings, ``[Dh, P]`` or ``[H, Dh, P]``;
            zeros at construction (the paper's initialisation), so a new CoPE adds
            nothing until it is trained.

    Raises:
        TypeError: for a non-integer size or a non-bool ``divide_bias``.
        ValueError: for a non-positive ``head_dim``/``n_heads`` or ``npos_max < 2``.

    Example:
        >>> cope = CoPE(2, npos_max=4)
        >>> with torch.no_grad():
        ...     _ = cope.pos_emb.copy_(torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]]))
        >>> q = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)  # [B=1, H=1, L=3, Dh=2]
        >>> k = torch.zeros(1, 1, 3, 2)  # every gate sigmoid(0) = 1/2: positions 0.5, 1.0, 1.5 back
        >>> cope.bias(q, 3, k=k)[0, 0].detach()  # q @ pos_emb = [0, 1, 2, 3]: the bias is the position
        tensor([[0.5000, 0.0000, 0.0000],
                [1.0000, 0.5000, 0.0000],
                [1.5000, 1.0000, 0.5000]])
    """

    adds_score = True
    reads_keys = True
    reads_mask = True  # masked keys (padding) are not counted
    batched_positions = True
    causal_only = True  # a key is counted by the queries after it

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> CoPE:
        """One shared table per self-attention, counting up to the longest sequence the model reads."""
        return cls(sizes.head_dim, npos_max=max(2, sizes.max_len or 64))

    def __init__(self, head_dim: int, *, npos_max: int = 64, n_heads: int | None = None,
                 divide_bias: bool = False) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.npos_max = check_int("npos_max", npos_max, minimum=2)
        self.n_heads = None if n_heads is None else check_int("n_heads", n_heads, minimum=1)
        self.divide_bias = check_bool("divide_bias", divide_bias)
        shape = (self.head_dim, self.npos_max) if self.n_heads is None else (self.n_heads, self.head_dim, self.npos_max)
        self.pos_emb = nn.Parameter(torch.zeros(shape))

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"head_dim={self.head_dim}, npos_max={self.npos_max}, n_heads={self.n_heads}, "
                f"divide_bias={self.divide_bias}")

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None,
                mask: Tensor | None = None) -> Tensor:
        """The CoPE term of the attention logits for queries at ``q_pos`` and keys at ``k_pos``.

        Args:
            q: queries ``[B, H, T, Dh]`` (rotated if another scheme rotated them).
            q_pos: int64 positions of the queries ``[T]``, or per row ``[B, T]``.
            k_pos: int64 positions of the keys ``[S]`` or ``[B, S]``; key ``j`` is counted by
                query ``i`` when ``k_pos[j] <= q_pos[i]`` and the mask lets ``i`` attend to ``j``.
            k: the keys ``[B, H, S, Dh]``, as attention scores them. Required.
            mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``, or None:
                a masked key's gate is 0.

        Returns:
            ``[B, H, T, S]`` in :func:`bias_dtype` of ``q.dtype`` (float32 for half
            precision), to be added to the scaled scores ``q . k / sqrt(Dh)``.
            Entries of keys after their query hold the position-0 term; the
            causal mask must hide them.

        Raises:
            TypeError: if ``k`` is missing, or ``q``/``k`` is not a floating tensor.
            ValueError: if ``q`` or ``k`` is not ``[B, H, L, Dh]`` with ``Dh =
                head_dim`` (and ``H = n_heads`` when set), if ``k`` does not hold
                ``S`` keys, if its batch and heads differ from ``q``'s, or if ``q`` or ``k``
                holds a NaN or inf (large finite values are fine: the gates are formed
                without overflow).
        """
        check_heads("q", q, head_dim=self.head_dim, n_heads=self.n_heads)
        if k is None:
            raise TypeError(
                "CoPE counts positions with gates sigmoid(q . k): bias() needs the keys, "
                "k=<keys [B, H, S, Dh]> (MultiHeadAttention passes them because reads_keys is True), got k=None"
            )
        check_heads("k", k, head_dim=self.head_dim, n_heads=self.n_heads)
        S = k_pos.shape[-1]
        if k.shape[2] != S:
            raise ValueError(f"k must hold n_keys = {S} keys (dim 2), got shape {list(k.shape)}")
        if k.shape[:2] != q.shape[:2]:
            raise ValueError(
                f"k must have q's batch and heads {list(q.shape[:2])} (dims 0, 1), got shape {list(k.shape)}"
            )
        dtype = bias_dtype(q.dtype)  # float32 sums for half inputs
        qw, kw = q.to(dtype), k.to(dtype)
        _check_finite("q", qw)
        _check_finite("k", kw)
        # The gates' logits from queries and keys brought within range: large finite inputs would
        # overflow q . k to NaN, and a NaN gate makes every position before it NaN (attnlab._finite).
        qg, kg = bounded_pair(qw, kw, 1.0 / math.sqrt(self.head_dim))
        logits = qg @ kg.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, H, T, Dh] x [B, H, Dh, S] -> [B, H, T, S]
        visible = (pair_distances(q_pos, k_pos) <= 0).to(q.device)  # [T, S] or [B, T, S]: keys up to the query
        if visible.ndim == 3:
            visible = visible.unsqueeze(1)  # [B, 1, T, S]: the same for every head
        if mask is not None:
            visible = visible & mask.to(q.device)  # broadcast to [B, H, T, S]: the keys it may attend to
        gates = torch.sigmoid(logits).masked_fill(~visible, 0.0)  # [B, H, T, S]
        # p[i, j] = sum of the gates of keys j..i: a cumulative sum from the right.
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.npos_max - 1)  # [B, H, T, S]
        emb = self.pos_emb.to(dtype)
        if self.n_heads is not None:
            emb = emb[None]  # [1, H, Dh, P]: each head its own table
        logits_int = qw @ emb  # [B, H, T, Dh] x [(1, H,) Dh, P] -> [B, H, T, P]
        floor = pos.floor()
        # The weight of the upper neighbour carries the gradient to the gates; floor/ceil are steps.
        w = pos - floor  # [B, H, T, S]
        low = logits_int.gather(-1, floor.long())  # [B, H, T, S]
        high = logits_int.gather(-1, pos.ceil().long())  # [B, H, T, S]
        bias = high * w + low * (1 - w)  # [B, H, T, S]
        if self.divide_bias:
            bias = bias / math.sqrt(self.head_dim)
        return bias
