"""The d2l chapter's attention classes, with d2l's signatures, names and values.

For code copied from the d2l book (d2l-ai/d2l-en, ``d2l/torch.py``)::

    import attnlab.compat.d2l as d2l

    attention = d2l.MultiHeadAttention(num_hiddens, num_heads, 0.5)
    pos_encoding = d2l.PositionalEncoding(encoding_dim, 0)

What is kept from d2l, so that its code runs unchanged and its ``state_dict``
loads both ways: the positional arguments; the submodule and parameter names
(``W_q``, ``W_k``, ``W_v``, ``W_o`` as lazy linears without bias by default,
``attention``, ``dropout``); ``P`` as a ``[1, max_len, D]`` table outside the
``state_dict``; ``attention_weights`` kept on the ``DotProductAttention``
(``[B*H, T, S]`` inside ``MultiHeadAttention``, before dropout); ``valid_lens``
of shape ``[B]`` or ``[B, T]``, integer or float (d2l's BERT passes float32
lengths); a row with valid length 0 attending uniformly to every key (d2l
fills masked scores with -1e6, so such a row is a softmax of equal numbers).

What attnlab does instead: ``P`` is computed in float64 and cast once (d2l's
float32 angles are off by up to 6e-5 at position 1000); masked scores become
``-inf`` rather than -1e6 (the same weights for every score above -1e5, and no
weight leaks to a masked key when the real scores are below -1e6); the input
of ``masked_softmax`` is not overwritten (d2l's writes -1e6 into it); bad
arguments raise ``ValueError`` / ``TypeError`` naming them.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L``
positions, ``D`` model width (d2l's ``num_hiddens``), ``Dh`` query/key width,
``Dv`` value width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool, check_int, check_probability
from attnlab.attention.functional import attend
from attnlab.encodings.sinusoidal import sinusoidal

__all__ = ["DotProductAttention", "MultiHeadAttention", "PositionalEncoding", "check_shape", "masked_softmax"]


def check_shape(a: Tensor, shape: Sequence[int]) -> None:
    """d2l's ``check_shape``: raise unless tensor ``a`` (any shape) has exactly ``shape``.

    d2l asserts (and so checks nothing under ``python -O``); this always checks.

    Raises:
        ValueError: naming both shapes, if they differ.

    Example:
        >>> check_shape(torch.zeros(2, 3), (2, 3))
    """
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"tensor's shape {tuple(a.shape)} != expected shape {tuple(shape)}")


def _check_sequences(**tensors: Tensor) -> None:
    """Raise unless every tensor is a floating ``[B, L, F]`` with one ``B`` and one dtype (messages use d2l's names)."""
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape [B, L, F] (3 dims), got {list(t.shape)}")
    shapes = {name: list(t.shape) for name, t in tensors.items()}
    if len({t.shape[0] for t in tensors.values()}) > 1:
        raise ValueError(f"batch sizes B differ: {shapes}")
    if len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(f"dtypes differ: { {name: t.dtype for name, t in tensors.items()} }")


def _check_valid_lens(valid_lens: Tensor, batch: int, n_queries: int) -> Tensor:
    """Return ``valid_lens`` if it is a ``[B]`` or ``[B, T]`` tensor of non-negative lengths."""
    if not isinstance(valid_lens, Tensor):
        raise TypeError(f"valid_lens must be a tensor of lengths, [B] or [B, T], got {type(valid_lens).__name__}")
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        # A boolean mask passed here would be read as lengths 0 and 1.
        raise TypeError(f"valid_lens must hold integer or float lengths, got dtype {valid_lens.dtype}")
    if tuple(valid_lens.shape) not in ((batch,), (batch, n_queries)):
        raise ValueError(
            f"valid_lens must have shape [B] = [{batch}] or [B, T] = [{batch}, {n_queries}], "
            f"got {list(valid_lens.shape)}"
        )
    if bool((valid_lens < 0).any()) or (valid_lens.is_floating_point() and bool(valid_lens.isnan().any())):
        raise ValueError(f"valid_lens must be >= 0, got {valid_lens.tolist()}")
    return valid_lens


def _key_mask(valid_lens: Tensor, n_queries: int, n_keys: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(mask [B, T, S], empty [B, T])``: True where key ``s < valid_lens``, and rows with no such key.

    Built here rather than with ``attention.masks.padding_mask_from_lengths``, which
    takes integer ``[B]`` lengths: d2l's are ``[B]`` or ``[B, T]``, integer or float.
    """
    lens = valid_lens.to(device)
    if lens.dim() == 1:
        lens = lens[:, None].expand(-1, n_queries)  # [B, T]: every query of a sequence has its length
    keys = torch.arange(n_keys, device=device)  # [S]
    mask = keys < lens[..., None]  # [B, T, S]; d2l's rule, fractional lengths included
    return mask, ~mask.any(dim=-1)


def masked_softmax(X: Tensor, valid_lens: Tensor | None) -> Tensor:
    """d2l's ``masked_softmax``: softmax over the last axis, keeping the first ``valid_lens`` keys of each row.

    Args:
        X: scores ``[B, T, S]`` (any shape when ``valid_lens`` is None).
        valid_lens: ``[B]`` (one length per sequence) or ``[B, T]`` (one per
            query), integer or float; None keeps every key.

    Returns:
        weights of ``X``'s shape. A row whose valid length is 0 is uniform, ``1 / S``
        on every key, as in d2l. ``X`` is left as it was (d2l overwrites it).

    Raises:
        TypeError: if ``X`` is not a floating tensor, or ``valid_lens`` not a tensor
            of numbers.
        ValueError: if ``X`` is not 3-D while ``valid_lens`` is given, or
            ``valid_lens`` has a wrong shape or negative lengths.

    Example:
        >>> masked_softmax(torch.zeros(1, 2, 3), torch.tensor([2])).round(decimals=4)
        tensor([[[0.5000, 0.5000, 0.0000],
                 [0.5000, 0.5000, 0.0000]]])
    """
    if not isinstance(X, Tensor) or not X.is_floating_point():
        raise TypeError(f"X must be a floating-point tensor, got {getattr(X, 'dtype', type(X).__name__)}")
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    if X.dim() != 3:
        raise ValueError(f"X must have shape [B, T, S] when valid_lens is given, got {list(X.shape)}")
    B, T, S = X.shape
    mask, empty = _key_mask(_check_valid_lens(valid_lens, B, T), T, S, X.device)
    # d2l's -1e6 makes an empty row a softmax of equal scores: 0 everywhere does the same.
    scores = X.masked_fill(empty[..., None], 0.0).masked_fill(~(mask | empty[..., None]), float("-inf"))
    return torch.softmax(scores, dim=-1)  # [B, T, S]


class DotProductAttention(nn.Module):
    """d2l's scaled dot-product attention, through attnlab's :func:`attnlab.attention.attend`.

    Args:
        dropout: dropout probability on the attention weights (in train mode).

    Attributes:
        attention_weights: ``[B, T, S]`` of the last call, before dropout (None until then).

    Shapes:
        ``forward(queries [B, T, Dh], keys [B, S, Dh], values [B, S, Dv], valid_lens [B] | [B, T] | None)
        -> [B, T, Dv]``.

    Raises:
        TypeError / ValueError: for a dropout outside [0, 1), and (in ``forward``)
            for inputs of wrong shapes or dtypes.
    """

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        """``softmax(queries @ keys^T / sqrt(Dh), masked) @ values``; weights kept in ``attention_weights``.

        Args:
            queries: ``[B, T, Dh]``.
            keys: ``[B, S, Dh]``.
            values: ``[B, S, Dv]``.
            valid_lens: ``[B]`` or ``[B, T]``: each query sees its first ``valid_lens``
                keys (all of them, uniformly weighted, when that is 0); None: every key.

        Returns:
            ``[B, T, Dv]``.

        Raises:
            TypeError: for non-tensor or non-floating inputs, differing dtypes, or
                ``valid_lens`` that does not hold numbers.
            ValueError: for wrong ranks, mismatched sizes, or ``valid_lens`` of a wrong
                shape or with negative lengths.
        """
        _check_sequences(queries=queries, keys=keys, values=values)
        if queries.shape[-1] != keys.shape[-1] or keys.shape[1] != values.shape[1]:
            raise ValueError(
                f"queries [B, T, Dh], keys [B, S, Dh] and values [B, S, Dv] disagree: {list(queries.shape)}, "
                f"{list(keys.shape)}, {list(values.shape)}"
            )
        B, T, _ = queries.shape
        mask = None
        if valid_lens is not None:
            lens = _check_valid_lens(valid_lens, B, T)
            allowed, empty = _key_mask(lens, T, keys.shape[1], queries.device)  # [B, T, S], [B, T]
            # attend gives a row with no key zeros; d2l gives it 1/S on every key. A zeroed
            # query scores exactly 0 against every key, so letting that row see all keys
            # yields d2l's uniform row exactly (and, as in d2l, no gradient through it).
            queries = queries.masked_fill(empty[..., None], 0.0)
            mask = (allowed | empty[..., None])[:, None]  # [B, 1, T, S]
        _, weights = attend(queries[:, None], keys[:, None], values[:, None], mask=mask, need_weights=True)
        assert weights is not None
        self.attention_weights = weights[:, 0]  # [B, 1, T, S] -> [B, T, S]
        # Dropout the d2l way, not attend's dropout_p: d2l drops out its kept weights through
        # its own `dropout` module (which code copied from d2l may read or replace), and
        # drawing the mask on the same [B, T, S] weights keeps the random draws d2l makes.
        return torch.bmm(self.dropout(self.attention_weights), values)  # [B, T, S] x [B, S, Dv] -> [B, T, Dv]


class MultiHeadAttention(nn.Module):
    """d2l's multi-head attention: lazy projections, heads folded into the batch.

    Args:
        num_hiddens: ``D``, the width of every projection and of the output.
        num_heads: ``H``; must divide ``num_hiddens``.
        dropout: dropout probability on the attention weights.
        bias: whether the four projections have a bias (d2l: no).

    Attributes:
        W_q, W_k, W_v, W_o: ``nn.LazyLinear(D)``, whose input widths are set by the
            first call or by loading a ``state_dict`` (d2l's own or this class's).
        attention: the :class:`DotProductAttention`; after a call its
            ``attention_weights`` are ``[B*H, T, S]`` (sequence-major, head-minor).

    Shapes:
        ``forward(queries [B, T, Dq], keys [B, S, Dk], values [B, S, Dv], valid_lens [B] | [B, T] | None)
        -> [B, T, D]``.

    Raises:
        TypeError / ValueError: for a non-positive ``num_hiddens`` or ``num_heads``,
            ``num_heads`` not dividing ``num_hiddens``, a dropout outside [0, 1), and
            (in ``forward``) inputs of wrong shapes or dtypes.

    Example:
        >>> attention = MultiHeadAttention(8, 2, 0.0)
        >>> attention(torch.ones(2, 3, 8), torch.ones(2, 5, 8), torch.ones(2, 5, 8), torch.tensor([4, 0])).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float, bias: bool = False) -> None:
        super().__init__()
        num_hiddens = check_int("num_hiddens", num_hiddens, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        if num_hiddens % self.num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide num_hiddens ({num_hiddens})")
        bias = check_bool("bias", bias)
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_k = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_v = nn.LazyLinear(num_hiddens, bias=bias)
        self.W_o = nn.LazyLinear(num_hiddens, bias=bias)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor | None) -> Tensor:
        """Project, attend per head, concatenate the heads, project again.

        Args:
            queries: ``[B, T, Dq]``.
            keys: ``[B, S, Dk]``.
            values: ``[B, S, Dv]``.
            valid_lens: ``[B]`` or ``[B, T]`` (see :class:`DotProductAttention`), or None.

        Returns:
            ``[B, T, D]``.

        Raises:
            TypeError: for non-tensor or non-floating inputs, differing dtypes, or
                ``valid_lens`` that does not hold numbers.
            ValueError: for wrong ranks, mismatched sizes, or ``valid_lens`` of a wrong
                shape or with negative lengths.
        """
        _check_sequences(queries=queries, keys=keys, values=values)
        if keys.shape[1] != values.shape[1]:
            raise ValueError(f"keys and values must have the same length S, got {list(keys.shape)} and "
                             f"{list(values.shape)}")
        # Checked against B here, where the message can name the caller's sizes (not B*H).
        lens = None if valid_lens is None else _check_valid_lens(valid_lens, queries.shape[0], queries.shape[1])
        queries = self.transpose_qkv(self.W_q(queries))  # [B*H, T, D/H]
        keys = self.transpose_qkv(self.W_k(keys))  # [B*H, S, D/H]
        values = self.transpose_qkv(self.W_v(values))  # [B*H, S, D/H]
        if lens is not None:
            # Each sequence's lengths once per head, in the order transpose_qkv folds heads.
            lens = torch.repeat_interleave(lens, repeats=self.num_heads, dim=0)  # [B*H] or [B*H, T]
        output = self.attention(queries, keys, values, lens)  # [B*H, T, D/H]
        return self.W_o(self.transpose_output(output))  # [B, T, D]

    def transpose_qkv(self, X: Tensor) -> Tensor:
        """d2l's head split: ``[B, L, D]`` to ``[B*H, L, D/H]``, heads of a sequence adjacent."""
        X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)  # [B, L, H, D/H]
        X = X.permute(0, 2, 1, 3)  # [B, H, L, D/H]
        return X.reshape(-1, X.shape[2], X.shape[3])  # [B*H, L, D/H]

    def transpose_output(self, X: Tensor) -> Tensor:
        """d2l's head merge, the inverse of :meth:`transpose_qkv`: ``[B*H, L, D/H]`` to ``[B, L, D]``."""
        X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])  # [B, H, L, D/H]
        X = X.permute(0, 2, 1, 3)  # [B, L, H, D/H]
        return X.reshape(X.shape[0], X.shape[1], -1)  # [B, L, D]


class PositionalEncoding(nn.Module):
    """d2l's sinusoidal positional encoding: ``dropout(X + P[:, :L])``, no scaling of ``X``.

    ``P[0, i, 2j] = sin(i / 10000^(2j/D))`` and ``P[0, i, 2j+1] = cos(i / 10000^(2j/D))``
    (sines in the even columns, as d2l), from attnlab's float64 table cast once to
    float32. Odd ``D`` works (d2l's raises): the last column is a sine.

    Args:
        num_hiddens: ``D``.
        dropout: dropout probability after the addition.
        max_len: rows of ``P``, the longest sequence accepted.

    Attributes:
        P: float32 ``[1, max_len, D]``: a non-persistent buffer, so it moves with
            ``.to(device)`` but stays out of the ``state_dict``, like d2l's plain attribute.

    Shapes:
        ``forward(X [B, L, D]) -> [B, L, D]``.

    Raises:
        TypeError / ValueError: for a non-positive ``num_hiddens`` or ``max_len``, a
            dropout outside [0, 1), and (in ``forward``) an ``X`` that is not a floating
            ``[B, L, D]`` with ``L <= max_len``.

    Example:
        >>> PositionalEncoding(4, 0).P[0, 1].round(decimals=4)
        tensor([0.8415, 0.5403, 0.0100, 1.0000])
    """

    P: Tensor

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000) -> None:
        super().__init__()
        num_hiddens = check_int("num_hiddens", num_hiddens, minimum=1)
        max_len = check_int("max_len", max_len, minimum=1)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        table = sinusoidal(max_len, num_hiddens, layout="interleaved", rates="vaswani")  # [max_len, D]
        self.register_buffer("P", table.unsqueeze(0), persistent=False)  # [1, max_len, D]

    def forward(self, X: Tensor) -> Tensor:
        """Add the first ``L`` rows of ``P`` to ``X``, then dropout.

        Args:
            X: ``[B, L, D]``.

        Returns:
            ``[B, L, D]``.

        Raises:
            TypeError: if ``X`` is not a floating-point tensor.
            ValueError: if ``X`` is not ``[B, L, D]`` or ``L`` exceeds ``max_len``.
        """
        if not isinstance(X, Tensor) or not X.is_floating_point():
            raise TypeError(f"X must be a floating-point tensor, got {getattr(X, 'dtype', type(X).__name__)}")
        max_len, num_hiddens = self.P.shape[1], self.P.shape[2]
        if X.dim() != 3 or X.shape[-1] != num_hiddens:
            raise ValueError(f"X must have shape [B, L, {num_hiddens}], got {list(X.shape)}")
        if X.shape[1] > max_len:
            raise ValueError(f"X has {X.shape[1]} positions, more than max_len={max_len}")
        X = X + self.P[:, : X.shape[1], :].to(X.device)  # [B, L, D]
        return self.dropout(X)
