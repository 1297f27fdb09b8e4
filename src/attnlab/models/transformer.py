"""A small encoder-decoder Transformer on attnlab's layers, with the positional encoding as a choice.

The architecture of Vaswani et al. 2017 (arXiv:1706.03762) with pre-layer
normalisation (Xiong et al. 2020, arXiv:2002.04745: it trains without warm-up,
which matters for a lab that trains many small models quickly)::

    source -> embed (+ absolute PE) -> [norm -> self-attn -> + -> norm -> FFN -> +] x N -> norm -> memory
    target -> embed (+ absolute PE) -> [norm -> causal self-attn -> + -> norm -> cross-attn(memory) -> +
                                        -> norm -> FFN -> +] x N -> norm -> head -> logits / values

Where position enters depends on the encoding (``ENCODINGS``):

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

Shape notation: ``B`` batch, ``S`` source length, ``T`` target length, ``D``
model dim, ``H`` heads, ``V`` vocabulary, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._validate import check_choice, check_input_dtype, check_int, check_probability
from attnlab.attention import DecodingCache, KVCache, MultiHeadAttention
from attnlab.attention.backends.choose import BACKENDS
from attnlab.encodings.registry import ENCODINGS, Position, attention_position, input_position, resolve, spec_name
from attnlab.encodings.scheme import PositionScheme

__all__ = [
    "ENCODINGS", "SequenceModel", "Transformer", "TransformerDecoderLayer", "TransformerEncoderLayer",
]

def _ffn(d_model: int, ff_units: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff_units, d_model))


class TransformerEncoderLayer(nn.Module):
    """Pre-norm encoder layer: ``x + SelfAttn(LN(x))``, then ``x + FFN(LN(x))``.

    Args:
        d_model: ``D``.
        n_heads: ``H`` (must divide ``D``).
        ff_units: hidden width of the feed-forward network.
        dropout: on the attention weights and on each residual branch.
        position: a scheme for the self-attention (see
            :func:`attnlab.encodings.scheme`).
        head_dim: ``Dh``, each head's width; None derives it as ``D // H``.

    Shapes:
        ``forward(x [B, S, D], mask [B, 1, S] = None, *, is_causal = False, cache = None) -> [B, S, D]``.

    With ``is_causal=True`` (and optionally a :class:`attnlab.attention.KVCache`)
    the same layer is a GPT-style decoder block: a decoder-only model is a stack
    of encoder layers whose self-attention is causal.
    """

    def __init__(
        self, d_model: int, n_heads: int, ff_units: int, *, dropout: float = 0.0,
        position: PositionScheme | None = None, head_dim: int | None = None, backend: str = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout, position=position,
                                            backend=backend)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = _ffn(d_model, ff_units, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, is_causal: bool = False, cache: KVCache | None = None
    ) -> Tensor:
        """Encode ``x [B, S, D]`` (``mask`` boolean ``[B, 1, S]``, True = may attend).

        ``is_causal``: each position sees itself and the ones before it (aligned
        bottom-right, so with a ``cache`` the new steps also see every cached one).
        """
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, mask=mask, is_causal=is_causal, cache=cache))  # [B, S, D]
        return x + self.dropout(self.ffn(self.norm2(x)))  # [B, S, D]


class TransformerDecoderLayer(nn.Module):
    """Pre-norm decoder layer: causal self-attention, cross-attention to the memory, FFN.

    Args:
        d_model, n_heads, ff_units, dropout, head_dim, backend: as :class:`TransformerEncoderLayer`.
        position: a scheme for the (causal) self-attention.

    Shapes:
        ``forward(y [B, T, D], memory [B, S, D], source_mask [B, 1, S] = None, *,
        cache = None, name = "") -> [B, T, D]``.
    """

    def __init__(
        self, d_model: int, n_heads: int, ff_units: int, *, dropout: float = 0.0,
        position: PositionScheme | None = None, head_dim: int | None = None, backend: str = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout, position=position,
                                            backend=backend)
        self.norm2 = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(n_heads, d_model, head_dim=head_dim, dropout=dropout)
        self.norm3 = nn.LayerNorm(d_model)
        self.ffn = _ffn(d_model, ff_units, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        source_mask: Tensor | None = None,
        *,
        cache: DecodingCache | None = None,
        name: str = "",
    ) -> Tensor:
        """Decode ``y [B, T, D]`` against ``memory [B, S, D]``.

        With a ``cache``, ``y`` holds only the new step(s); this layer's keys live
        in the cache's ``f"{name}self_attn"`` and ``f"{name}cross_attn"`` entries.
        """
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache.layer(f"{name}self_attn"), cache.layer(f"{name}cross_attn")
        h = self.norm1(y)
        y = y + self.dropout(self.self_attn(h, is_causal=True, cache=self_cache))  # [B, T, D]
        h = self.norm2(y)
        y = y + self.dropout(self.cross_attn(h, memory, mask=source_mask, cache=cross_cache))  # [B, T, D]
        return y + self.dropout(self.ffn(self.norm3(y)))  # [B, T, D]


class SequenceModel(nn.Module):
    """What every model of the lab shares: tokens or values in and out, the absolute encoding, checks.

    Not used on its own: :class:`Transformer` (encoder-decoder) and
    :class:`attnlab.models.DecoderOnlyTransformer` take its constructor (the one
    signature of both) and add their layers in ``_build_layers``. It
    holds the input ``embed`` (an ``nn.Embedding`` for tokens, an ``nn.Linear``
    for values), the output ``head``, the absolute ``input_position`` table (for
    ``"sinusoidal"`` / ``"learned"``; None otherwise) and the validated sizes.
    See :class:`Transformer` for the arguments.

    Raises:
        TypeError / ValueError: naming the argument, for bad sizes, an unknown
            encoding, or neither / both of ``vocab_size`` and ``n_features``.
    """

    def __init__(
        self,
        *,
        vocab_size: int | None = None,
        n_features: int | None = None,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        ff_units: int | None = None,
        dropout: float = 0.0,
        encoding: Position = "sinusoidal",
        max_len: int = 128,
        max_relative_position: int = 16,
        pad_id: int = 0,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        if (vocab_size is None) == (n_features is None):
            raise ValueError(
                f"give exactly one of vocab_size (tokens) and n_features (real values), "
                f"got vocab_size={vocab_size!r}, n_features={n_features!r}"
            )
        self.vocab_size = None if vocab_size is None else check_int("vocab_size", vocab_size, minimum=2)
        self.n_features = None if n_features is None else check_int("n_features", n_features, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.head_dim = self.d_model // self.n_heads  # Dh, derived here once: the layers are given it
        self.n_layers = check_int("n_layers", n_layers, minimum=1)
        self.ff_units = 4 * self.d_model if ff_units is None else check_int("ff_units", ff_units, minimum=1)
        self.dropout = check_probability("dropout", dropout)
        resolve(encoding)  # an unknown name, a module that does not import: refused before anything is built
        self.encoding = encoding
        self.backend = check_choice("backend", backend, BACKENDS)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.max_relative_position = check_int("max_relative_position", max_relative_position, minimum=1)
        self.pad_id = check_int("pad_id", pad_id, minimum=0)

        if self.vocab_size is not None:
            self.embed: nn.Module = nn.Embedding(self.vocab_size, self.d_model)
            self.head = nn.Linear(self.d_model, self.vocab_size)
        else:
            assert self.n_features is not None
            self.embed = nn.Linear(self.n_features, self.d_model)
            self.head = nn.Linear(self.d_model, self.n_features)
        # Absolute encodings are added to the embeddings; one table serves every input.
        self.input_position: nn.Module | None = input_position(self.encoding, d_model=self.d_model,
                                                               max_len=self.max_len)
        self.input_dropout = nn.Dropout(self.dropout)
        # The subclass's layers, after the shared parts: the parameter creation order
        # (and so the weights a seed gives) is embed, head, tables, then the layers.
        self._build_layers()

    def _build_layers(self) -> None:
        """Create the model's layers (each subclass its own); called once, at the end of ``__init__``."""
        raise NotImplementedError(f"{type(self).__name__} must define _build_layers")

    def _attention_position(self, causal: bool) -> PositionScheme | None:
        """A new scheme for one self-attention (None for the absolute encodings)."""
        return attention_position(self.encoding, n_heads=self.n_heads, head_dim=self.head_dim, d_model=self.d_model,
                                  causal=causal, max_relative_position=self.max_relative_position,
                                  max_len=self.max_len)

    def _layer(self, cls: type[nn.Module], causal: bool) -> nn.Module:
        return cls(self.d_model, self.n_heads, self.ff_units, dropout=self.dropout,
                   position=self._attention_position(causal), head_dim=self.head_dim, backend=self.backend)

    @property
    def encoding_name(self) -> str:
        """The encoding as a name another process can rebuild it from (``"alibi"``, ``"pkg.mod:Class"``)."""
        return spec_name(self.encoding)

    # -- pieces ------------------------------------------------------------------------

    def _check(self, name: str, x: Any) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if self.vocab_size is not None:
            if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{name} must be token ids [B, L] (int64), got {x.dtype} {list(x.shape)}")
            if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.vocab_size):
                raise ValueError(
                    f"{name} holds ids from {int(x.min())} to {int(x.max())}; "
                    f"the vocabulary is 0..{self.vocab_size - 1}"
                )
        elif x.dim() != 3 or x.shape[-1] != self.n_features:
            raise ValueError(f"{name} must be floating [B, L, {self.n_features}], got {x.dtype} {list(x.shape)}")
        else:
            check_input_dtype(name, x, self.head.weight.dtype)  # integers too: a TypeError naming both dtypes
        if x.shape[1] == 0:
            raise ValueError(f"{name} is empty (length 0)")

    def _embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Tokens ``[B, L]`` or values ``[B, L, F]`` -> ``[B, L, D]``, with the absolute encoding if any."""
        h = self.embed(x)  # [B, L, D]
        if self.input_position is not None:
            h = self.input_position(h, offset=offset)  # [B, L, D]
        return self.input_dropout(h)

    def _greedy(
        self, first: Tensor, steps: int, run: Callable[[Tensor, DecodingCache | None], Tensor], use_cache: bool
    ) -> Tensor:
        """Greedy decoding: feed ``first`` (one step, or a whole prompt), then each output back, ``steps`` times.

        ``run(inputs, cache)`` gives the outputs for ``inputs`` (the new steps with
        a cache, the whole prefix without one). Returns ``[B, steps]`` tokens or
        ``[B, steps, F]`` values.
        """
        outputs = []
        # Randomized positions are drawn anew at every call: cached keys would hold other draws
        # than the new step's, so such a model re-runs the whole sequence at each step.
        if use_cache and not all(getattr(m, "caches", True) for m in self.modules()):
            use_cache = False
        if use_cache:
            cache = DecodingCache(capacity=first.shape[1] + steps)
            step = first
            for _ in range(steps):
                out = run(step, cache)[:, -1:]  # [B, 1, V] or [B, 1, F]
                cache.advance(step.shape[1])
                step = out.argmax(-1) if self.vocab_size is not None else out  # [B, 1] or [B, 1, F]
                outputs.append(step)
        else:
            inputs = first
            for _ in range(steps):
                out = run(inputs, None)[:, -1:]  # the newest step
                step = out.argmax(-1) if self.vocab_size is not None else out
                outputs.append(step)
                inputs = torch.cat([inputs, step], dim=1)
        return torch.cat(outputs, dim=1)  # [B, steps] or [B, steps, F]

    def extra_repr(self) -> str:
        kind = f"vocab_size={self.vocab_size}" if self.vocab_size is not None else f"n_features={self.n_features}"
        encoding = self.encoding if isinstance(self.encoding, str) else getattr(self.encoding, "__name__", "factory")
        return (f"{kind}, encoding={encoding!r}, d_model={self.d_model}, n_heads={self.n_heads}, "
                f"n_layers={self.n_layers}")


class Transformer(SequenceModel):
    """Encoder-decoder Transformer for token or real-valued sequences, with any of :data:`ENCODINGS`.

    Args:
        vocab_size: ``V`` for token sequences (ids ``0 .. V-1``; ``pad_id`` is padding).
        n_features: ``F`` for real-valued sequences (give exactly one of the two).
        d_model: ``D``.
        n_heads: ``H`` (must divide ``D``).
        n_layers: encoder layers and decoder layers (each).
        ff_units: feed-forward width; default ``4 * D``.
        dropout: dropout probability everywhere.
        encoding: the positional encoding: a name (one of :data:`ENCODINGS`, or one
            :func:`attnlab.encodings.register` added), ``"module:Class"``, a scheme class
            (:class:`attnlab.encodings.PositionScheme` subclass, or an input table class),
            or a factory ``f(sizes: ModelSizes) -> PositionScheme`` called per self-attention.
        max_len: rows of the absolute tables: the sinusoidal one extends past it,
            the learned one refuses longer sequences (with an error naming it); the
            randomized encodings draw their positions from ``[0, max_len)``.
        max_relative_position: Shaw's clipping distance ``k`` (``encoding="relative"``).
        pad_id: padding token (token sequences): masked in the source.
        backend: the path every self-attention with a scheme takes: ``"auto"`` (default),
            ``"dense"``, ``"flex"`` or ``"chunked"`` (:mod:`attnlab.attention.backends.choose`).

    Shapes:
        ``forward(source [B, S] or [B, S, F], target_in [B, T] or [B, T, F]) ->
        logits [B, T, V]`` or values ``[B, T, F]`` (teacher forcing: ``target_in`` is
        the target shifted right, starting with BOS or the start vector).
        ``generate(source, steps, start) -> [B, steps]`` tokens or ``[B, steps, F]``.

    Raises:
        TypeError / ValueError: naming the argument, for bad sizes, an unknown
            encoding, or neither / both of ``vocab_size`` and ``n_features``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(vocab_size=13, d_model=32, n_heads=4, encoding="rotary").eval()
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

    def encode(self, source: Tensor, source_mask: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``source [B, S]`` or ``[B, S, F]`` -> ``(memory [B, S, D], source_mask [B, 1, S] or None)``.

        The mask is the padding tokens' (token sources), and the given boolean
        ``source_mask [B, 1, S]`` (True = a real step) on top of it.
        """
        self._check("source", source)
        mask = self.source_mask(source)
        if source_mask is not None:
            mask = source_mask if mask is None else mask & source_mask
        h = self._embed(source)  # [B, S, D]
        for layer in self.encoder_layers:
            h = layer(h, mask)  # [B, S, D]
        return self.encoder_norm(h), mask

    def decode(
        self, target_in: Tensor, memory: Tensor, source_mask: Tensor | None = None,
        *, cache: DecodingCache | None = None,
    ) -> Tensor:
        """Decoder outputs (logits ``[B, T, V]`` or values ``[B, T, F]``) for ``target_in``.

        With a ``cache``, ``target_in`` holds the steps from ``cache.position`` on.
        """
        offset = 0 if cache is None else cache.position
        h = self._embed(target_in, offset)  # [B, T, D]
        for i, layer in enumerate(self.decoder_layers):
            h = layer(h, memory, source_mask, cache=cache, name=f"layers.{i}.")  # [B, T, D]
        return self.head(self.decoder_norm(h))  # [B, T, V] or [B, T, F]

    # -- use ---------------------------------------------------------------------------

    def forward(self, source: Tensor, target_in: Tensor, *, source_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced outputs for ``target_in`` (the target shifted right); see the class doc.

        Args:
            source: ``[B, S]`` tokens or ``[B, S, F]`` values.
            target_in: ``[B, T]`` tokens or ``[B, T, F]`` values, starting with BOS or the start vector.
            source_mask: bool ``[B, 1, S]``, True on the real source steps (padded
                real-valued sources); token sources are masked at ``pad_id`` anyway.

        Returns:
            Logits ``[B, T, V]`` or values ``[B, T, F]``.
        """
        self._check("target_in", target_in)
        memory, mask = self.encode(source, source_mask)
        return self.decode(target_in, memory, mask)

    def generate(
        self, source: Tensor, steps: int, start: int | Tensor, *, use_cache: bool = True,
        source_mask: Tensor | None = None,
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
        with torch.no_grad():
            memory, mask = self.encode(source, source_mask)
            return self._greedy(first, steps, lambda x, cache: self.decode(x, memory, mask, cache=cache), use_cache)
