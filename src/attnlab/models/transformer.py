"""A small encoder-decoder Transformer on attnlab's layers, with the positional encoding as a choice.

The architecture of Vaswani et al. 2017 (arXiv:1706.03762) with pre-layer
normalisation (Xiong et al. 2020, arXiv:2002.04745: it trains without warm-up,
which matters for a lab that trains many small models quickly)::

    source -> embed (+ absolute PE) -> [norm -> self-attn -> + -> norm -> FFN -> +] x N -> norm -> memory
    target -> embed (+ absolute PE) -> [norm -> causal self-attn -> + -> norm -> cross-attn(memory) -> +
                                        -> norm -> FFN -> +] x N -> norm -> head -> logits / values

Where position enters depends on ``position=`` (one of :data:`attnlab.catalog.ENCODINGS`, or a scheme
of one's own):

* ``"sinusoidal"`` / ``"learned"``: added to the embeddings (absolute);
* ``"relative"`` (Shaw et al. 2018), ``"t5"`` (Raffel et al. 2020), ``"rotary"``
  (Su et al. 2021), ``"alibi"`` (Press et al. 2022): inside every self-attention,
  composed into :class:`attnlab.attention.MultiHeadAttention` as its
  ``position``; cross-attention has none (source and target positions are not
  comparable);
* ``"none"``: nothing at all (NoPE; the decoder still knows order through its
  causal mask, Kazemnejad et al. 2023; the encoder does not).

Two kinds of data: tokens (``vocab_size``: embedding table, logits out) or
real vectors (``n_features``: linear in, linear out, as the noisy squares).

Decoding is greedy, with a key/value cache (:class:`attnlab.attention.DecodingCache`)
by default; ``use_cache=False`` re-runs the decoder on the whole prefix every
step and gives the same result (to float rounding).

Positions from the data: ``source_position_ids [B, S]`` and ``target_position_ids
[B, T]`` place the source's and the target's elements (default: the indices). A
source padded on the left (``pad_id`` first) with ``source_position_ids`` from
:func:`attnlab.encodings.positions.positions_from_mask` encodes, and decodes, as
the unpadded source does: the padding is masked and each real token sits where
it would unpadded.

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length, ``D``
model dim, ``H`` heads, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from attnlab._validate import check_device, check_int
from attnlab.models.sequence_model import SequenceModel
from attnlab.models.transformer_layers import TransformerDecoderLayer, TransformerEncoderLayer

if TYPE_CHECKING:  # annotations only: the cache's module is imported where decoding makes one
    from attnlab.attention import DecodingCache

__all__ = ["Transformer", "TransformerDecoderLayer", "TransformerEncoderLayer"]


class Transformer(SequenceModel):
    """Encoder-decoder Transformer for token or real-valued sequences, with any positional scheme.

    Args:
        vocab_size: ``V`` for token sequences (ids ``0 .. V-1``; ``pad_id`` is padding).
        n_features: ``F`` for real-valued sequences (give exactly one of the two).
        d_model: ``D``.
        n_heads: ``H`` (must divide ``D``).
        n_layers: encoder layers and decoder layers (each).
        ff_units: feed-forward width; default ``4 * D``.
        dropout: dropout probability everywhere.
        position: the positional encoding: a name (one of :data:`attnlab.catalog.ENCODINGS`, or one
            :func:`attnlab.encodings.register` added), ``"module:Class"``, a scheme class
            (:class:`attnlab.encodings.PositionScheme` subclass, or an input table class),
            or a factory ``f(sizes: ModelSizes) -> PositionScheme`` called per self-attention;
            resolved once per model.
        max_len: rows of the absolute tables: the sinusoidal one extends past it,
            the learned one refuses longer sequences (with an error naming it); the
            randomized encodings draw their positions from ``[0, max_len)``.
        max_relative_position: Shaw's clipping distance ``k`` (``position="relative"``).
        pad_id: padding token (token sequences): masked in the source.
        backend: the path every self-attention with a scheme takes: ``"auto"`` (default),
            ``"dense"``, ``"flex"`` or ``"chunked"`` (:mod:`attnlab.attention.backends.choose`).

    Shapes:
        ``forward(source [B, S] or [B, S, F], target_in [B, T] or [B, T, F], *,
        source_mask [B, 1, S] = None, source_position_ids [B, S] = None, target_position_ids
        [B, T] = None) -> logits [B, T, V]`` or values ``[B, T, F]`` (teacher forcing:
        ``target_in`` is the target shifted right, starting with BOS or the start vector).
        ``generate(source, steps, start, *, source_position_ids [B, S] = None) -> [B, steps]``
        tokens or ``[B, steps, F]``.

    Raises:
        TypeError / ValueError: naming the argument, for bad sizes, an unknown
            ``position``, or neither / both of ``vocab_size`` and ``n_features``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(vocab_size=13, d_model=32, n_heads=4, position="rotary").eval()
        >>> source = torch.randint(3, 13, (2, 6))
        >>> model(source, torch.ones(2, 7, dtype=torch.long)).shape
        torch.Size([2, 7, 13])
        >>> model.generate(source, steps=7, start=1).shape
        torch.Size([2, 7])
    """

    def _build_layers(self) -> None:
        self.encoder_layers = nn.ModuleList(
            self._layer(TransformerEncoderLayer, causal=False) for _ in range(self.n_layers))
        self.decoder_layers = nn.ModuleList(
            self._layer(TransformerDecoderLayer, causal=True) for _ in range(self.n_layers))
        self.encoder_norm = nn.LayerNorm(self.d_model)
        self.decoder_norm = nn.LayerNorm(self.d_model)

    def source_mask(self, source: Tensor) -> Tensor | None:
        """Padding mask ``[B, 1, S]`` (True = a real token) for token sources; None for real values."""
        if self.vocab_size is None:
            return None
        return (source != self.pad_id).unsqueeze(1)  # [B, 1, S]

    def encode(self, source: Tensor, source_mask: Tensor | None = None, *,
               position_ids: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``source [B, S]`` or ``[B, S, F]`` -> ``(memory [B, S, D], source_mask [B, 1, S] or None)``.

        The mask is the padding tokens' (token sources), and the given boolean
        ``source_mask [B, 1, S]`` (True = a real step) on top of it. ``position_ids [B, S]``
        place the source's elements (None: the indices).

        Raises:
            TypeError / ValueError: naming ``source`` or ``source_position_ids`` when they are bad.
        """
        self._check("source", source)
        position_ids = self._position_ids("source_position_ids", position_ids, source)  # [B, S] or None
        mask = self.source_mask(source)
        if source_mask is not None:
            check_device("source_mask", source_mask, source.device)
            mask = source_mask if mask is None else mask & source_mask
        h = self._embed(source, position_ids=position_ids)  # [B, S, D]
        for layer in self.encoder_layers:
            h = layer(h, mask, position_ids=position_ids)  # [B, S, D]
        return self.encoder_norm(h), mask

    def decode(
        self, target_in: Tensor, memory: Tensor, source_mask: Tensor | None = None,
        *, cache: DecodingCache | None = None, position_ids: Tensor | None = None,
    ) -> Tensor:
        """Decoder outputs (logits ``[B, T, V]`` or values ``[B, T, F]``) for ``target_in``.

        With a ``cache``, ``target_in`` holds the steps from ``cache.position`` on.
        ``position_ids [B, T]`` place the target's elements (None: the indices, or with a
        cache that has positions from earlier calls, each row after its own last).

        Raises:
            TypeError / ValueError: naming ``target_position_ids`` when they are bad.
        """
        position_ids = self._position_ids("target_position_ids", position_ids, target_in)  # [B, T] or None
        if cache is not None and position_ids is None:
            position_ids = cache.next_positions(target_in.shape[1])
        offset = 0 if cache is None else cache.position
        h = self._embed(target_in, offset, position_ids=position_ids)  # [B, T, D]
        for i, layer in enumerate(self.decoder_layers):
            h = layer(h, memory, source_mask, cache=cache, name=f"layers.{i}.",
                      position_ids=position_ids)  # [B, T, D]
        if cache is not None and position_ids is not None:
            cache.note_positions(position_ids)
        return self.head(self.decoder_norm(h))  # [B, T, V] or [B, T, F]

    # -- use ---------------------------------------------------------------------------

    def forward(self, source: Tensor, target_in: Tensor, *, source_mask: Tensor | None = None,
                source_position_ids: Tensor | None = None, target_position_ids: Tensor | None = None) -> Tensor:
        """Teacher-forced outputs for ``target_in`` (the target shifted right); see the class doc.

        Args:
            source: ``[B, S]`` tokens or ``[B, S, F]`` values.
            target_in: ``[B, T]`` tokens or ``[B, T, F]`` values, starting with BOS or the start vector.
            source_mask: bool ``[B, 1, S]``, True on the real source steps (padded
                real-valued sources); token sources are masked at ``pad_id`` anyway.
            source_position_ids: the source's positions ``[B, S]`` (non-negative integers;
                None: the indices), e.g. a left-padded source's, counted over its real tokens.
            target_position_ids: the target's positions ``[B, T]`` (None: the indices).

        Returns:
            Logits ``[B, T, V]`` or values ``[B, T, F]``.

        Raises:
            TypeError / ValueError: naming the argument that is bad.
        """
        self._check("target_in", target_in)
        memory, mask = self.encode(source, source_mask, position_ids=source_position_ids)
        return self.decode(target_in, memory, mask, position_ids=target_position_ids)

    def generate(
        self, source: Tensor, steps: int, start: int | Tensor, *, use_cache: bool = True,
        source_mask: Tensor | None = None, source_position_ids: Tensor | None = None,
    ) -> Tensor:
        """Greedy decoding of ``steps`` outputs, each fed back as the next input (no grad).

        Args:
            source: ``[B, S]`` tokens or ``[B, S, F]`` values.
            steps: outputs to generate (a fixed count: the lab compares
                sequences position by position, EOS included).
            start: the first decoder input: a token id (BOS), or values
                ``[B, 1, F]`` / ``[B, F]``.
            use_cache: decode with a :class:`attnlab.attention.DecodingCache`;
                False re-decodes the whole prefix each step (same outputs).
            source_mask: bool ``[B, 1, S]``, True on the real source steps (as :meth:`forward`).
            source_position_ids: the source's positions ``[B, S]`` (as :meth:`forward`); the
                target's are its indices, every row starting at ``start``.

        Returns:
            Tokens ``[B, steps]`` (argmax) or values ``[B, steps, F]``.

        Raises:
            TypeError / ValueError: naming the argument, for a bad ``steps`` or
                ``source`` (its dtype included), or a ``start`` that is not a token
                id (token model) or a tensor (real-valued model).

        Thread-safe: the encoder's states and the cache belong to the call.
        """
        steps = check_int("steps", steps, minimum=1)
        B = source.shape[0] if isinstance(source, Tensor) else 0
        if self.vocab_size is not None:
            if isinstance(start, Tensor) or not isinstance(start, int):
                raise TypeError(f"start must be a token id (int) for a token model, got {type(start).__name__}")
            check_int("start", start, minimum=0)
            first = torch.full((B, 1), start, dtype=torch.long, device=source.device)  # [B, 1]
        else:
            if not isinstance(start, Tensor):
                raise TypeError(f"start must be a tensor [B, 1, F] for a real-valued model, got {type(start).__name__}")
            first = start.reshape(B, 1, -1).to(source.dtype)  # [B, 1, F]
        self._check_decoding(batch=B, prompt=1, steps=steps, use_cache=use_cache)
        def run(x: Tensor, cache: DecodingCache | None, pos: Tensor | None, m: Tensor | None) -> Tensor:
            return self.decode(x, memory, mask, cache=cache)  # the target has no padding and starts at 0

        with torch.no_grad():
            memory, mask = self.encode(source, source_mask, position_ids=source_position_ids)
            return self._greedy(first, steps, run, use_cache)
