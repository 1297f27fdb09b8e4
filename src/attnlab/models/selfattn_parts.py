"""The positional-encoding lab's layers: :class:`EncoderSelfAttn`, :class:`DecoderSelfAttn`, with PE.

The encoder layer is multi-head self-attention and a feed-forward network; the
decoder layer is masked self-attention over the (shifted) target,
cross-attention over the encoder's states, and a feed-forward network (Vaswani
et al. 2017, arXiv:1706.03762, without the residuals and layer norms).
:class:`EncoderPe` and :class:`DecoderPe` add the sinusoidal positional
encoding (``x * sqrt(F) + PE``) first, since attention is order-blind.
:mod:`attnlab.models.selfattn_seq2seq` puts them together.

The decoder takes the encoder's states two ways: the lab's, stateful
(``init_keys(states)``, then ``forward(query)``: the keys live on the module, one
caller at a time), or in the call (``forward(query, memory=states)``, and
``cache=`` for step-by-step decoding), which any number of threads can use at once.
The layers' own attention calls are stateless (:meth:`LabMultiHeadAttention.attend`:
self-attention without the lab's ``init_keys(query)``), with the lab's numbers.

Lab fidelity: names, constructor signatures, attributes and parameter creation
order are the positional-encoding lab's (see :mod:`attnlab.models.selfattn_seq2seq`).
Their attention modules are the lab's own :class:`attnlab.attention.LabMultiHeadAttention`:
``alphas`` ``[H, B, T, S]`` after every call, masks of the lab's 0/1 floats as well as
booleans, and ``load_state_dict`` of the lab's per-head checkpoints.

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length,
``F`` features, ``D`` model dim, ``H`` heads.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.attention import DecodingCache
from attnlab.attention.lab_heads import LabMultiHeadAttention
from attnlab.encodings import PositionalEncoding

__all__ = ["DecoderPe", "DecoderSelfAttn", "EncoderPe", "EncoderSelfAttn"]


def _check_sizes(n_heads: int, d_model: int, ff_units: int, n_features: int | None) -> int | None:
    """Validate the constructor sizes shared by the encoder and decoder; returns ``n_features``."""
    check_int("n_heads", n_heads, minimum=1)
    check_int("d_model", d_model, minimum=1)
    check_int("ff_units", ff_units, minimum=1)
    return None if n_features is None else check_int("n_features", n_features, minimum=1)


def _ffn(d_model: int, ff_units: int, out_dim: int) -> nn.Sequential:
    """Position-wise feed-forward network ``D -> ff_units -> out_dim`` (ReLU)."""
    return nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, out_dim))


class EncoderSelfAttn(nn.Module):
    """Encoder layer: multi-head self-attention, then a feed-forward network.

    Args:
        n_heads: ``H``.
        d_model: ``D``, the width of every head and of the output.
        ff_units: hidden units of the feed-forward network.
        n_features: ``F``, input features; defaults to ``D``.

    Attributes:
        self_attn_heads: ``LabMultiHeadAttention(H, D, input_dim=F)``.
        ffn: ``Linear(D, ff_units) -> ReLU -> Linear(ff_units, D)``.
        n_heads, d_model, ff_units, n_features: the arguments (``n_features`` may be None, as in the
            positional-encoding lab).

    Shapes:
        ``forward(query [B, S, F], mask [B, 1, S] = None) -> [B, S, D]``.

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.
    """

    def __init__(self, n_heads: int, d_model: int, ff_units: int, n_features: int | None = None) -> None:
        super().__init__()
        self.n_features = _check_sizes(n_heads, d_model, ff_units, n_features)
        self.n_heads, self.d_model, self.ff_units = int(n_heads), int(d_model), int(ff_units)
        self.self_attn_heads = LabMultiHeadAttention(self.n_heads, self.d_model, input_dim=self.n_features)
        self.ffn = _ffn(self.d_model, self.ff_units, self.d_model)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """Encode ``query [B, S, F]``; ``mask [B, 1, S]``: boolean, True = may attend, or the lab's 0/1 floats.

        Returns ``[B, S, D]``.

        Self-attention runs statelessly (one fused projection of q, k and v); the
        positional-encoding lab's ``init_keys(query)`` + ``self_attn_heads(query, mask)`` gives the same result.
        """
        att = self.self_attn_heads.attend(query, mask=mask)  # [B, S, D]
        return self.ffn(att)  # [B, S, D]


class DecoderSelfAttn(nn.Module):
    """Decoder layer: masked self-attention, cross-attention to the encoder, feed-forward.

    Args:
        n_heads: ``H``.
        d_model: ``D``, the width of every head (and of the encoder's states).
        ff_units: hidden units of the feed-forward network.
        n_features: ``F``, input and output features; defaults to ``D``.

    Attributes:
        self_attn_heads: ``LabMultiHeadAttention(H, D, input_dim=F)`` over the target.
        cross_attn_heads: ``LabMultiHeadAttention(H, D)`` over the encoder's states.
        ffn: ``Linear(D, ff_units) -> ReLU -> Linear(ff_units, F)``.
        n_heads, d_model, ff_units, n_features: the arguments (``n_features`` resolved to ``D``).

    Shapes:
        ``init_keys(states [B, S, D])``; then ``forward(query [B, T, F],
        source_mask [B, 1, S] = None, target_mask [1, T, T] = None) -> [B, T, F]``.
        Or statelessly, ``forward(query, source_mask, memory=states)``; and one
        step at a time with ``cache=`` (see :meth:`forward`).

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.
    """

    #: forward() takes ``memory=``, ``cache=`` and ``is_causal=`` (cached decoding).
    supports_cache = True

    def __init__(self, n_heads: int, d_model: int, ff_units: int, n_features: int | None = None) -> None:
        super().__init__()
        n_features = _check_sizes(n_heads, d_model, ff_units, n_features)
        self.n_heads, self.d_model, self.ff_units = int(n_heads), int(d_model), int(ff_units)
        self.n_features = self.d_model if n_features is None else n_features
        self.self_attn_heads = LabMultiHeadAttention(self.n_heads, self.d_model, input_dim=self.n_features)
        self.cross_attn_heads = LabMultiHeadAttention(self.n_heads, self.d_model)
        self.ffn = _ffn(self.d_model, self.ff_units, self.n_features)

    def init_keys(self, states: Tensor) -> None:
        """Set the encoder's states ``[B, S, D]`` as the cross-attention's keys and values.

        The lab's stateful use: one caller at a time; concurrent callers pass ``memory=`` to :meth:`forward`.
        """
        self.cross_attn_heads.init_keys(states)

    def forward(
        self,
        query: Tensor,
        source_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        *,
        memory: Tensor | None = None,
        cache: DecodingCache | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        """Decode ``query [B, T, F]`` (the shifted target); returns ``[B, T, F]``.

        Args:
            query: ``[B, T, F]``: the whole shifted target, or with ``cache`` the
                newest step(s) only.
            source_mask: ``[B, 1, S]``, True = may attend to that source position (boolean,
                or the lab's 0/1 floats, ``mask == 0`` masked).
            target_mask: ``[1, T, T]`` (or ``[T, T]``), usually causal; boolean or 0/1 floats.
            memory: the encoder's states ``[B, S, D]``; None uses those of
                :meth:`init_keys` (the positional-encoding lab's stateful use).
            cache: a :class:`attnlab.attention.DecodingCache` (with ``memory``); its layers
                ``"self_attn"`` (the target's keys so far) and ``"cross_attn"`` (the
                encoder's keys, projected on the first step) are read and filled.
            is_causal: the causal mask without building it (bottom-right aligned,
                so with a cache the new step sees every earlier one).

        Raises:
            ValueError: for a ``cache`` without ``memory`` (the cache holds the projection of
                the states it is given), and what the attention modules raise.
        """
        self_cache = cross_cache = None
        if cache is not None:
            if memory is None:
                raise ValueError("cache= needs memory= (the encoder's states [B, S, D], passed at every step)")
            self_cache, cross_cache = cache.layer("self_attn"), cache.layer("cross_attn")
        att1 = self.self_attn_heads.attend(query, mask=target_mask, is_causal=is_causal, cache=self_cache)  # [B, T, D]
        if memory is None:
            att2 = self.cross_attn_heads(att1, source_mask)  # [B, T, D]: the lab's call, keys of init_keys
        else:
            att2 = self.cross_attn_heads.attend(att1, memory, mask=source_mask, cache=cross_cache)  # [B, T, D]
        return self.ffn(att2)  # [B, T, F]


def _pe_dim(d_model: int, n_features: int | None) -> int:
    return d_model if n_features is None else n_features


class EncoderPe(nn.Module):
    """Positional encoding, then an :class:`EncoderSelfAttn` layer.

    Args:
        n_heads, d_model, ff_units, n_features: as :class:`EncoderSelfAttn`.
        max_len: positions precomputed by the encoding (longer inputs still work).

    Attributes:
        pe: ``PositionalEncoding(max_len, F)`` (the input is scaled by ``sqrt(F)``).
        layer: the :class:`EncoderSelfAttn`.

    Shapes:
        ``forward(query [B, S, F], mask [B, 1, S] = None) -> [B, S, D]``.

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.
    """

    def __init__(
        self, n_heads: int, d_model: int, ff_units: int, n_features: int | None = None, max_len: int = 100
    ) -> None:
        super().__init__()
        n_features = _check_sizes(n_heads, d_model, ff_units, n_features)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.pe = PositionalEncoding(self.max_len, _pe_dim(d_model, n_features))
        self.layer = EncoderSelfAttn(n_heads, d_model, ff_units, n_features)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """Encode ``query [B, S, F]`` (``mask [B, 1, S]``, boolean or the lab's 0/1 floats); returns ``[B, S, D]``."""
        return self.layer(self.pe(query), mask)  # [B, S, F] -> [B, S, D]


class DecoderPe(nn.Module):
    """Positional encoding, then a :class:`DecoderSelfAttn` layer.

    Args:
        n_heads, d_model, ff_units, n_features: as :class:`DecoderSelfAttn`.
        max_len: positions precomputed by the encoding (longer inputs still work).

    Attributes:
        pe: ``PositionalEncoding(max_len, F)``.
        layer: the :class:`DecoderSelfAttn`.

    Shapes:
        ``init_keys(states [B, S, D])``; ``forward(query [B, T, F], source_mask
        [B, 1, S] = None, target_mask [1, T, T] = None) -> [B, T, F]``.

    Raises:
        TypeError / ValueError: naming the argument, for non-integer or non-positive sizes.
    """

    supports_cache = True

    def __init__(
        self, n_heads: int, d_model: int, ff_units: int, n_features: int | None = None, max_len: int = 100
    ) -> None:
        super().__init__()
        n_features = _check_sizes(n_heads, d_model, ff_units, n_features)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.pe = PositionalEncoding(self.max_len, _pe_dim(d_model, n_features))
        self.layer = DecoderSelfAttn(n_heads, d_model, ff_units, n_features)

    def init_keys(self, states: Tensor) -> None:
        """Set the encoder's states ``[B, S, D]`` as the cross-attention's keys and values.

        The lab's stateful use: one caller at a time; concurrent callers pass ``memory=`` to :meth:`forward`.
        """
        self.layer.init_keys(states)

    def forward(
        self,
        query: Tensor,
        source_mask: Tensor | None = None,
        target_mask: Tensor | None = None,
        *,
        memory: Tensor | None = None,
        cache: DecodingCache | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        """Decode ``query [B, T, F]``; returns ``[B, T, F]``.

        With a ``cache``, ``query`` holds the steps from ``cache.position`` on, and
        is encoded at those positions. Other arguments: as :meth:`DecoderSelfAttn.forward`.
        """
        offset = 0 if cache is None else cache.position
        encoded = self.pe(query, offset=offset)  # [B, T, F]
        return self.layer(
            encoded, source_mask, target_mask, memory=memory, cache=cache, is_causal=is_causal
        )  # [B, T, F]
