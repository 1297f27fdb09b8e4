"""Self-attention sequence-to-sequence models with positional encoding: the positional-encoding lab's model.

No recurrence: the encoder is one multi-head self-attention layer and a
feed-forward network; the decoder is masked self-attention over the (shifted)
target, cross-attention over the encoder's outputs, and a feed-forward network
(Vaswani et al. 2017, arXiv:1706.03762, without the residuals and layer norms)::

    source [B, S, F] -> PE -> self-attn -> FFN -> states [B, S, D]
                                                    |  keys and values
    shifted target [B, T, F] -> PE -> masked self-attn -> cross-attn -> FFN -> [B, T, F]

Attention is order-blind, so :class:`EncoderPe` and :class:`DecoderPe` add the
sinusoidal positional encoding (``x * sqrt(F) + PE``) before their layer.

Training sees the whole target at once: the decoder's input is the target shifted
right by one (starting from the last source point), and the causal
("subsequent") mask keeps step ``t`` from seeing inputs after ``t``. In eval mode
:meth:`EncoderDecoderSelfAttn.predict` generates greedily, one point at a time,
feeding back its own (detached) predictions. The labs re-run the decoder on the
whole prefix at every step; attnlab decodes with a key/value cache
(:class:`attnlab.attention.DecodingCache`): each step projects only its newest
input, so a step costs the same at step 256 as at step 2.

Lab fidelity: names, constructor signatures, attributes (``self_attn_heads``,
``cross_attn_heads``, ``ffn``, ``layer``, ``pe``, ``trg_masks``, ...) and parameter
creation order are the positional-encoding lab's, so after ``torch.manual_seed(k)``
the weights, and therefore the outputs and the training, are the lab's. The
attention layers are attnlab's fused :class:`attnlab.attention.MultiHeadAttention`
with the lab's wide heads (``head_dim=d_model``: every head is ``D`` wide)
instead of a Python loop over heads. Their weights, ``[B, H, T, S]``, are kept
when run inside :func:`attnlab.attention.record_attention` (the lab's ``alphas``,
``[H, B, T, S]``, then work too); after ``predict`` the decoder's are those of
the last step, the full ``T x T`` (``predict`` decodes without the cache while
recording, so that the last step sees the whole matrix, as the lab draws it).

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length,
``F`` features, ``D`` model dim, ``H`` heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.attention import DecodingCache, MultiHeadAttention, is_recording, subsequent_mask
from attnlab.encodings import PositionalEncoding

__all__ = ["DecoderPe", "DecoderSelfAttn", "EncoderDecoderSelfAttn", "EncoderPe", "EncoderSelfAttn"]


def _check_sizes(n_heads: int, d_model: int, ff_units: int, n_features: int | None) -> int | None:
    """Validate the constructor sizes shared by the encoder and decoder; returns ``n_features``."""
    check_int("n_heads", n_heads, minimum=1)
    check_int("d_model", d_model, minimum=1)
    check_int("ff_units", ff_units, minimum=1)
    return None if n_features is None else check_int("n_features", n_features, minimum=1)


def _wide_heads(n_heads: int, d_model: int, input_dim: int | None) -> MultiHeadAttention:
    """The labs' wide multi-head attention: every head ``d_model`` wide (``head_dim=d_model``).

    ``MultiHeadAttention`` draws its weights in the labs' order (``linear_out``,
    then query, key and value per head) and nothing else, so the modules created
    after it start from the labs' weights too.
    """
    return MultiHeadAttention(n_heads, d_model, input_dim, head_dim=d_model)


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
        self_attn_heads: ``MultiHeadAttention(H, D, input_dim=F, head_dim=D)``.
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
        self.self_attn_heads = _wide_heads(self.n_heads, self.d_model, self.n_features)
        self.ffn = _ffn(self.d_model, self.ff_units, self.d_model)

    def forward(self, query: Tensor, mask: Tensor | None = None) -> Tensor:
        """Encode ``query [B, S, F]``; ``mask`` is boolean ``[B, 1, S]``, True = may attend.

        Returns ``[B, S, D]``.

        Self-attention runs statelessly (one fused projection of q, k and v); the
        positional-encoding lab's ``init_keys`` + call gives the same result.
        """
        att = self.self_attn_heads(query, query, query, mask=mask)  # [B, S, D]
        return self.ffn(att)  # [B, S, D]


class DecoderSelfAttn(nn.Module):
    """Decoder layer: masked self-attention, cross-attention to the encoder, feed-forward.

    Args:
        n_heads: ``H``.
        d_model: ``D``, the width of every head (and of the encoder's states).
        ff_units: hidden units of the feed-forward network.
        n_features: ``F``, input and output features; defaults to ``D``.

    Attributes:
        self_attn_heads: ``MultiHeadAttention(H, D, input_dim=F, head_dim=D)`` over the target.
        cross_attn_heads: ``MultiHeadAttention(H, D, head_dim=D)`` over the encoder's states.
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
        self.self_attn_heads = _wide_heads(self.n_heads, self.d_model, self.n_features)
        self.cross_attn_heads = _wide_heads(self.n_heads, self.d_model, None)
        self.ffn = _ffn(self.d_model, self.ff_units, self.n_features)

    def init_keys(self, states: Tensor) -> None:
        """Set the encoder's states ``[B, S, D]`` as the cross-attention's keys and values."""
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
            source_mask: boolean ``[B, 1, S]``, True = may attend to that source position.
            target_mask: boolean ``[1, T, T]`` (or ``[T, T]``), usually causal.
            memory: the encoder's states ``[B, S, D]``; None uses those of
                :meth:`init_keys` (the positional-encoding lab's stateful use).
            cache: a :class:`attnlab.attention.DecodingCache`; its layers
                ``"self_attn"`` (the target's keys so far) and ``"cross_attn"`` (the
                encoder's keys, projected on the first step) are read and filled.
            is_causal: the causal mask without building it (bottom-right aligned,
                so with a cache the new step sees every earlier one).
        """
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache.layer("self_attn"), cache.layer("cross_attn")
        att1 = self.self_attn_heads(
            query, query, query, mask=target_mask, is_causal=is_causal, cache=self_cache
        )  # [B, T, D]
        att2 = self.cross_attn_heads(att1, memory, mask=source_mask, cache=cross_cache)  # [B, T, D]
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
        """Encode ``query [B, S, F]`` (``mask`` boolean ``[B, 1, S]``); returns ``[B, S, D]``."""
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
        """Set the encoder's states ``[B, S, D]`` as the cross-attention's keys and values."""
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


class EncoderDecoderSelfAttn(nn.Module):
    """Self-attention encoder-decoder: teacher-forced with a causal mask in training, greedy in eval.

    Args:
        encoder: an :class:`EncoderPe` or :class:`EncoderSelfAttn` (``forward(source, mask)``).
        decoder: a :class:`DecoderPe` or :class:`DecoderSelfAttn` (``init_keys``, ``forward``).
        input_len: ``S``, source steps at the start of ``X``.
        target_len: ``T``, steps to generate.

    Attributes:
        trg_masks: the causal mask ``[1, T, T]`` (bool, True = may attend; a buffer
            that follows the model's device, not saved in ``state_dict``).

    Shapes:
        ``forward(X, source_mask [B, 1, S] = None) -> [B, T, F]``, with ``X [B, S + T, F]``
        in training and ``[B, S, F]`` (or longer; only the source is read) in eval.

    Raises:
        TypeError / ValueError: naming the argument, for modules that are not
            ``nn.Module`` or non-positive lengths.

    Example (the positional-encoding lab's configuration):
        >>> _ = torch.manual_seed(43)
        >>> encoder = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        >>> decoder = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        >>> model = EncoderDecoderSelfAttn(encoder, decoder, input_len=2, target_len=2)
        >>> model(torch.randn(5, 4, 2)).shape          # training: [B, T, F]
        torch.Size([5, 2, 2])
        >>> model.eval()(torch.randn(5, 2, 2)).shape   # eval: predicted from the source
        torch.Size([5, 2, 2])
    """

    trg_masks: Tensor

    def __init__(self, encoder: nn.Module, decoder: nn.Module, input_len: int, target_len: int) -> None:
        super().__init__()
        for name, module in (("encoder", encoder), ("decoder", decoder)):
            if not isinstance(module, nn.Module):
                raise TypeError(f"{name} must be an nn.Module, got {type(module).__name__}")
        # Typed Any: the positional-encoding lab's duck-typed interface (forward(source, mask); init_keys).
        self.encoder: Any = encoder
        self.decoder: Any = decoder
        self.input_len = check_int("input_len", input_len, minimum=1)
        self.target_len = check_int("target_len", target_len, minimum=1)
        self.register_buffer("trg_masks", self.subsequent_mask(self.target_len), persistent=False)

    @staticmethod
    def subsequent_mask(size: int) -> Tensor:
        """Causal mask ``[1, size, size]``, bool, True = may attend (lower triangle)."""
        return subsequent_mask(size)

    def _target_mask(self, length: int, device: torch.device) -> Tensor:
        """Causal mask ``[1, length, length]`` on ``device`` (a slice of ``trg_masks`` when it fits)."""
        if length <= self.trg_masks.shape[-1]:
            return self.trg_masks[:, :length, :length].to(device)
        return self.subsequent_mask(length).to(device)

    def encode(self, source_seq: Tensor, source_mask: Tensor | None = None) -> None:
        """Encode ``source_seq [B, S, F]`` and hand the states ``[B, S, D]`` to the decoder as keys."""
        encoder_states = self.encoder(source_seq, source_mask)  # [B, S, D]
        self.decoder.init_keys(encoder_states)

    def decode(
        self, shifted_target_seq: Tensor, source_mask: Tensor | None = None, target_mask: Tensor | None = None
    ) -> Tensor:
        """Decode ``shifted_target_seq [B, T, F]`` against the encoded source; returns ``[B, T, F]``."""
        return self.decoder(shifted_target_seq, source_mask=source_mask, target_mask=target_mask)

    def predict(
        self, source_seq: Tensor, source_mask: Tensor | None = None, *, use_cache: bool | None = None
    ) -> Tensor:
        """Greedy generation of ``T`` points, each step fed the previous predictions.

        Starts from the last source point. With the cache (the default), step
        ``i`` decodes only its newest input, at position ``i``, against the keys
        and values cached by the earlier steps and the encoder's keys projected
        once; without it, step ``i`` re-decodes all ``i + 1`` inputs under a causal
        mask (the labs' way). Both give the same points (to float rounding).
        Encodes ``source_seq`` itself (the positional-encoding lab's ``predict``
        relied on an earlier :meth:`encode`) and runs without autograd: what is
        fed back, and returned, never carries a graph.

        Args:
            source_seq: ``[B, S, F]``.
            source_mask: boolean ``[B, 1, S]``, True = may attend.
            use_cache: decode with a :class:`attnlab.attention.DecodingCache`.
                Default: yes, unless attention is being recorded (the figures want
                the last step's whole ``T x T`` matrix) or the decoder does not
                support it (no ``supports_cache``).

        Returns:
            The predictions ``[B, T, F]`` (no grad).
        """
        if use_cache is None:
            use_cache = getattr(self.decoder, "supports_cache", False) and not is_recording()
        with torch.no_grad():
            if not use_cache:
                self.encode(source_seq, source_mask)
                inputs = source_seq[:, -1:].detach()  # [B, 1, F]
                for i in range(self.target_len):
                    mask = self._target_mask(i + 1, source_seq.device)  # [1, i + 1, i + 1]
                    out = self.decode(inputs, source_mask, mask)  # [B, i + 1, F]
                    inputs = torch.cat([inputs, out[:, -1:]], dim=1)  # [B, i + 2, F]
                return inputs[:, 1:]  # [B, T, F]
            memory = self.encoder(source_seq, source_mask)  # [B, S, D]
            cache = DecodingCache(capacity=self.target_len)
            step = source_seq[:, -1:].detach()  # [B, 1, F]
            outputs = []
            for _ in range(self.target_len):
                step = self.decoder(step, source_mask, memory=memory, cache=cache)  # [B, 1, F]
                cache.advance(1)
                outputs.append(step)
        return torch.cat(outputs, dim=1)  # [B, T, F]

    def forward(self, X: Tensor, source_mask: Tensor | None = None) -> Tensor:
        """Training: decode the shifted target with the causal mask. Eval: :meth:`predict`.

        Args:
            X: ``[B, S + T, F]`` in training; in eval ``[B, S, F]`` or longer (only
                the first ``S`` steps are read).
            source_mask: boolean ``[B, 1, S]``, True = may attend.

        Returns:
            ``[B, T, F]``.

        Raises:
            TypeError: if ``X`` is not a floating-point tensor.
            ValueError: if ``X`` is not ``[B, L, F]`` or not of the length the mode needs.
        """
        if not isinstance(X, Tensor) or not X.is_floating_point():
            got = f"{X.dtype} {list(X.shape)}" if isinstance(X, Tensor) else type(X).__name__
            raise TypeError(f"X must be a floating-point tensor [B, L, F], got {got}")
        if X.dim() != 3:
            raise ValueError(f"X must have shape [B, L, F] (3 dims), got {list(X.shape)}")
        needed = self.input_len + (self.target_len if self.training else 0)
        if X.shape[1] < needed or (self.training and X.shape[1] != needed):
            mode = "training (source then target)" if self.training else "eval (at least the source)"
            raise ValueError(
                f"X has {X.shape[1]} steps; {mode} needs {needed} "
                f"(input_len={self.input_len}, target_len={self.target_len})"
            )
        source_seq = X[:, : self.input_len]  # [B, S, F]
        if not self.training:
            return self.predict(source_seq, source_mask)
        # Inputs are the target shifted right by one, starting from the last source point.
        shifted_target_seq = X[:, self.input_len - 1 : -1]  # [B, T, F]
        if getattr(self.decoder, "supports_cache", False):
            # Stateless, with the causal flag: the same result as the positional-encoding lab's
            # encode + decode(mask), without building or checking a mask.
            memory = self.encoder(source_seq, source_mask)  # [B, S, D]
            return self.decoder(shifted_target_seq, source_mask, memory=memory, is_causal=True)  # [B, T, F]
        self.encode(source_seq, source_mask)
        mask = self._target_mask(self.target_len, X.device)  # [1, T, T]
        return self.decode(shifted_target_seq, source_mask, mask)
