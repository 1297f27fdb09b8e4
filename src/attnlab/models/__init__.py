"""Sequence-to-sequence models built on attnlab's attention and positional encodings.

* :mod:`attnlab.models.rnn_seq2seq` (the attention lab): :class:`Encoder`, :class:`Decoder`,
  :class:`EncoderDecoder`, :class:`DecoderAttn`, :class:`EncoderDecoderAttn`:
  GRUs, teacher forcing, and a decoder that attends over the encoder's states.
* :mod:`attnlab.models.selfattn_seq2seq` (the positional-encoding lab): :class:`EncoderSelfAttn`,
  :class:`DecoderSelfAttn`, :class:`EncoderPe`, :class:`DecoderPe`,
  :class:`EncoderDecoderSelfAttn`: self-attention and positional encoding,
  causal-masked training and greedy prediction.
* :mod:`attnlab.models.transformer`, :mod:`attnlab.models.decoder_only` and
  :mod:`attnlab.models.encoder_only`: the length-generalisation lab's
  :class:`Transformer` (encoder-decoder), :class:`DecoderOnlyTransformer` and
  :class:`EncoderOnlyTransformer`, taking ``position=`` any of :data:`ENCODINGS` (the names
  :mod:`attnlab.catalog` lists) or a scheme of one's own.
* :mod:`attnlab.models.squares_transformer`: :class:`EncoderDecoderTransformer`, the
  squares models' interface on a :class:`Transformer` (the book's fix for the
  positional-encoding lab's model: residuals, layer norm, features projected up).
* :mod:`attnlab.models.builders`: the sequence models by architecture, sizes as keyword
  arguments (the squares lab's models by name, and running them for a prediction, are the
  lab's own: :mod:`attnlab.labs.squares.models`, :mod:`attnlab.labs.squares.inference`).

The classes keep the labs' names, signatures, attributes and parameter order,
so after ``torch.manual_seed(k)`` they reproduce the labs' numbers (their
layers are in :mod:`attnlab.models.rnn_parts` and :mod:`attnlab.models.selfattn_parts`).
Attention weights, ``[B, H, T, S]`` per layer, come from
``with attnlab.attention.record_attention():``, running the model, and
``attnlab.attention.collect_attention(model)`` inside the same block.

Threads: ``predict`` and ``generate`` keep their state (hidden states, keys,
caches, recorded weights) in the call, so several threads can use one model at
once. The labs' stateful interface (``init_keys``, ``init_hidden``, ``hidden``,
``alphas``, ``attn_weights`` read after a call) keeps the state on the modules:
one caller at a time.
"""

from attnlab.catalog import ENCODINGS
from attnlab.models.decoder_only import DecoderOnlyTransformer
from attnlab.models.encoder_only import EncoderOnlyTransformer
from attnlab.models.rnn_seq2seq import Decoder, DecoderAttn, Encoder, EncoderDecoder, EncoderDecoderAttn
from attnlab.models.selfattn_seq2seq import (
    DecoderPe,
    DecoderSelfAttn,
    EncoderDecoderSelfAttn,
    EncoderPe,
    EncoderSelfAttn,
)
from attnlab.models.squares_transformer import EncoderDecoderTransformer
from attnlab.models.transformer import Transformer, TransformerDecoderLayer, TransformerEncoderLayer

__all__ = [
    "Decoder",
    "DecoderAttn",
    "DecoderOnlyTransformer",
    "EncoderOnlyTransformer",
    "DecoderPe",
    "DecoderSelfAttn",
    "ENCODINGS",
    "Encoder",
    "EncoderDecoder",
    "EncoderDecoderAttn",
    "EncoderDecoderSelfAttn",
    "EncoderDecoderTransformer",
    "EncoderPe",
    "EncoderSelfAttn",
    "Transformer",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
]
