"""The positional-encoding lab's self-attention encoder-decoder: its layers, with positional encoding, and the model.

No recurrence: the encoder is one multi-head self-attention layer and a
feed-forward network; the decoder is masked self-attention over the (shifted)
target, cross-attention over the encoder's outputs, and a feed-forward network
(Vaswani et al. 2017, arXiv:1706.03762, without the residuals and layer norms)::

    source [B, S, F] -> PE -> self-attn -> FFN -> states [B, S, D]
                                                    |  keys and values
    shifted target [B, T, F] -> PE -> masked self-attn -> cross-attn -> FFN -> [B, T, F]

Attention is order-blind, so :class:`EncoderPe` and :class:`DecoderPe` add the
sinusoidal positional encoding (``x * sqrt(F) + PE``) before their layer.

The decoder layer takes the encoder's states two ways: the lab's, stateful
(``init_keys(states)``, then ``forward(query)``: the keys live on the module, one
caller at a time), or in the call (``forward(query, memory=states)``, and
``cache=`` for step-by-step decoding), which any number of threads can use at once.
The layers' own attention calls are stateless (:meth:`LabMultiHeadAttention.attend`:
self-attention without the lab's ``init_keys(query)``), with the lab's numbers.

Training sees the whole target at once: the decoder's input is the target shifted
right by one (starting from the last source point; the last real one of a padded
source, given its ``source_mask``), and the causal
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
attention layers are :class:`attnlab.attention.LabMultiHeadAttention`, the lab's
module (every head ``D`` wide) on attnlab's fused kernel instead of a Python loop
over heads. They have the lab's interface: after every
call their ``alphas`` ``[H, B, T, S]`` are there to read, as in the lab (the call keeps
its projected queries and keys; the weights are computed when first read, so the
forward runs the fused kernel). After an eval-mode ``forward`` the decoder's are those
of every step, the full ``T x T`` and ``T x S`` the lab's last re-decoding gives, cache
or not. :meth:`EncoderDecoderSelfAttn.predict`, attnlab's thread-safe path, keeps none.
Inside :func:`attnlab.attention.record_attention` every call's weights ``[B, H, T, S]``
are recorded as well, for :func:`attnlab.attention.collect_attention`. Masks may be
the lab's 0/1 floats (``mask == 0`` is masked): they are converted once, on the way
in, to attnlab's booleans. ``load_state_dict`` takes the lab's checkpoints, whose
heads are separate modules (:mod:`attnlab.attention.lab.checkpoint`).

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length,
``F`` features, ``D`` model dim, ``H`` heads.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab._validate import check_input_dtype, check_int
from attnlab.attention import DecodingCache, is_recording, subsequent_mask
from attnlab.attention.lab.heads import LabMultiHeadAttention, keeping_alphas
from attnlab.attention.masks import as_bool_mask
from attnlab.encodings import PositionalEncoding
from attnlab.models.labs.source_padding import check_source_mask, last_steps, zero_padding

__all__ = ["DecoderPe", "DecoderSelfAttn", "EncoderDecoderSelfAttn", "EncoderPe", "EncoderSelfAttn"]


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
        """Encode ``source_seq [B, S, F]`` and hand the states ``[B, S, D]`` to the decoder as keys.

        The lab's stateful use (with :meth:`decode`): the keys live on the decoder,
        so one caller at a time; :meth:`predict` keeps them in the call.
        ``source_mask [B, 1, S]``: boolean, True = may attend, or the lab's 0/1 floats.

        Raises:
            TypeError / ValueError: naming ``mask``, for a mask neither boolean nor of 0/1 values.
        """
        source_mask = _bool_mask(source_mask)
        encoder_states = self.encoder(source_seq, source_mask)  # [B, S, D]
        self.decoder.init_keys(encoder_states)

    def decode(
        self, shifted_target_seq: Tensor, source_mask: Tensor | None = None, target_mask: Tensor | None = None
    ) -> Tensor:
        """Decode ``shifted_target_seq [B, T, F]`` against the encoded source; returns ``[B, T, F]``.

        ``source_mask [B, 1, S]`` and ``target_mask [1, T, T]``: boolean, True = may
        attend, or the lab's 0/1 floats.

        Raises:
            TypeError / ValueError: naming ``mask``, for a mask neither boolean nor of 0/1 values.
        """
        return self.decoder(
            shifted_target_seq, source_mask=_bool_mask(source_mask), target_mask=_bool_mask(target_mask)
        )

    def predict(
        self, source_seq: Tensor, source_mask: Tensor | None = None, *, use_cache: bool | None = None
    ) -> Tensor:
        """Greedy generation of ``T`` points, each step fed the previous predictions.

        Starts from the last source point (the last real one, under a ``source_mask``).
        With the cache (the default), step ``i`` decodes only its newest input, at position ``i``, against the keys
        and values cached by the earlier steps and the encoder's keys projected
        once; without it, step ``i`` re-decodes all ``i + 1`` inputs under a causal
        mask (the labs' way). Both give the same points (to float rounding).
        Encodes ``source_seq`` itself (the positional-encoding lab's ``predict``
        relied on an earlier :meth:`encode`) and runs without autograd: what is
        fed back, and returned, never carries a graph.

        Args:
            source_seq: ``[B, S, F]``.
            source_mask: ``[B, 1, S]``: boolean, True = a real step (attended to), or the lab's
                0/1 floats; padded steps are never attended to, and decoding starts from
                each row's last real step.
            use_cache: decode with a :class:`attnlab.attention.DecodingCache`.
                Default: yes, unless attention is being recorded (the figures want
                the last step's whole ``T x T`` matrix) or the decoder does not
                support it (no ``supports_cache``).

        Returns:
            The predictions ``[B, T, F]`` (no grad).

        Raises:
            TypeError / ValueError: naming ``source_seq``, for a non-tensor, another
                shape than ``[B, S, F]``, or another dtype than the weights'; naming
                ``mask``, for a mask neither boolean nor of 0/1 values.

        Thread-safe: the encoder's states and the caches stay in the call (not with
        the lab's own decoder, which takes its keys through ``init_keys``), and the
        attention modules keep no ``alphas``: the eval-mode :meth:`forward`, the lab's
        entry point, computes the same points and keeps them, as the lab does.
        """
        self._check_source(source_seq)
        source_mask = check_source_mask(source_mask, source_seq)
        source_seq = zero_padding(source_seq, source_mask)  # [B, S, F]
        with keeping_alphas(False):  # nothing left on the modules: eval-mode forward keeps the lab's alphas
            return self._predict(source_seq, source_mask, use_cache=use_cache)

    def _check_source(self, source_seq: Any) -> None:
        """A floating ``[B, S, F]`` tensor of the weights' dtype (checked once, at the model's entry)."""
        if not isinstance(source_seq, Tensor):
            raise TypeError(f"source_seq must be a tensor [B, S, F], got {type(source_seq).__name__}")
        if source_seq.dim() != 3:
            raise ValueError(f"source_seq must have shape [B, S, F] (3 dims), got {list(source_seq.shape)}")
        weights = next(self.parameters(), None)
        if weights is not None:
            check_input_dtype("source_seq", source_seq, weights.dtype)

    def _predict(self, source_seq: Tensor, source_mask: Tensor | None, *, use_cache: bool | None) -> Tensor:
        """:meth:`predict` of a checked ``source_seq [B, S, F]``."""
        stateless = getattr(self.decoder, "supports_cache", False)
        if use_cache is None:
            use_cache = stateless and not is_recording()
        with torch.no_grad():
            if not use_cache:
                # The encoder's states stay in the call (memory=); only a decoder without
                # memory= (the lab's own) is handed them the lab's way, through init_keys.
                memory = self.encoder(source_seq, source_mask) if stateless else None  # [B, S, D]
                if memory is None:
                    self.encode(source_seq, source_mask)
                inputs = last_steps(source_seq, source_mask).detach()  # [B, 1, F]
                for i in range(self.target_len):
                    mask = self._target_mask(i + 1, source_seq.device)  # [1, i + 1, i + 1]
                    if memory is None:
                        out = self.decode(inputs, source_mask, mask)  # [B, i + 1, F]
                    else:
                        out = self.decoder(inputs, source_mask, mask, memory=memory)  # [B, i + 1, F]
                    inputs = torch.cat([inputs, out[:, -1:]], dim=1)  # [B, i + 2, F]
                return inputs[:, 1:]  # [B, T, F]
            memory = self.encoder(source_seq, source_mask)  # [B, S, D]
            cache = DecodingCache(capacity=self.target_len)
            step = last_steps(source_seq, source_mask).detach()  # [B, 1, F]
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
            source_mask: ``[B, 1, S]``: boolean, True = a real step, or the lab's 0/1 floats.
                Padded steps are never attended to, and the decoder starts from each row's
                last real step (the lab always starts from step ``S - 1``: the same with
                any mask that keeps it, as the lab's do).

        Returns:
            ``[B, T, F]``.

        Raises:
            TypeError: if ``X`` is not a floating-point tensor.
            ValueError: if ``X`` is not ``[B, L, F]`` or not of the length the mode needs,
                or ``source_mask`` is not ``[B, 1, S]`` of 0/1 values keeping a step in every row.
        """
        if not isinstance(X, Tensor) or not X.is_floating_point():
            got = f"{X.dtype} {list(X.shape)}" if isinstance(X, Tensor) else type(X).__name__
            raise TypeError(f"X must be a floating-point tensor [B, L, F], got {got}")
        weights = next(self.parameters(), None)
        if weights is not None:
            check_input_dtype("X", X, weights.dtype)
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
        source_mask = check_source_mask(source_mask, source_seq)
        source_seq = zero_padding(source_seq, source_mask)  # [B, S, F]
        if not self.training:
            return self._predict(source_seq, source_mask, use_cache=None)
        # Inputs are the target shifted right by one, starting from the last (real) source point.
        if source_mask is None:
            shifted_target_seq = X[:, self.input_len - 1 : -1]  # [B, T, F]
        else:
            shifted_target_seq = torch.cat([last_steps(source_seq, source_mask), X[:, self.input_len : -1]], dim=1)
        if getattr(self.decoder, "supports_cache", False):
            # Stateless, with the causal flag: the same result as the positional-encoding lab's
            # encode + decode(mask), without building or checking a mask.
            memory = self.encoder(source_seq, source_mask)  # [B, S, D]
            return self.decoder(shifted_target_seq, source_mask, memory=memory, is_causal=True)  # [B, T, F]
        self.encode(source_seq, source_mask)
        mask = self._target_mask(self.target_len, X.device)  # [1, T, T]
        return self.decode(shifted_target_seq, source_mask, mask)


def _bool_mask(mask: Tensor | None) -> Tensor | None:
    """``mask`` as booleans (the lab's 0/1 floats converted), converted once for the encoder and decoder."""
    return None if mask is None else as_bool_mask(mask)
