"""Sequence-to-sequence models built on attnlab's attention and positional encodings.

* :mod:`attnlab.models.transformer`, :mod:`attnlab.models.decoder_only` and
  :mod:`attnlab.models.encoder_only`: the length-generalisation lab's
  :class:`Transformer` (encoder-decoder), :class:`DecoderOnlyTransformer` and
  :class:`EncoderOnlyTransformer`, taking ``position=`` any of :data:`ENCODINGS` (the names
  :mod:`attnlab.catalog` lists) or a scheme of one's own; by architecture,
  :func:`sequence_model_class`.
* :mod:`attnlab.models.grouped`: many models of one shape run as one batched computation.
* :mod:`attnlab.models.labs`, the labs' models, kept apart:
  :mod:`~attnlab.models.labs.gru_seq2seq` (the attention lab): :class:`Encoder`, :class:`Decoder`,
  :class:`EncoderDecoder`, :class:`DecoderAttn`, :class:`EncoderDecoderAttn`: GRUs, teacher
  forcing, and a decoder that attends over the encoder's states;
  :mod:`~attnlab.models.labs.selfattn_seq2seq` (the positional-encoding lab):
  :class:`EncoderSelfAttn`, :class:`DecoderSelfAttn`, :class:`EncoderPe`, :class:`DecoderPe`,
  :class:`EncoderDecoderSelfAttn`: self-attention and positional encoding, causal-masked
  training and greedy prediction; :mod:`~attnlab.models.labs.squares_transformer`:
  :class:`EncoderDecoderTransformer`, the squares models' interface on a :class:`Transformer`
  (the book's fix for the positional-encoding lab's model: residuals, layer norm, features
  projected up). The squares lab's models by name, and running them for a prediction, are the
  lab's own: :mod:`attnlab.labs.squares.models`, :mod:`attnlab.labs.squares.inference`.

The labs' classes keep the labs' names, signatures, attributes and parameter order,
so after ``torch.manual_seed(k)`` they reproduce the labs' numbers.
Attention weights, ``[B, H, T, S]`` per layer, come from
``with attnlab.attention.record_attention():``, running the model, and
``attnlab.attention.collect_attention(model)`` inside the same block.

Threads: ``predict`` and ``generate`` keep their state (hidden states, keys,
caches, recorded weights) in the call, so several threads can use one model at
once. The labs' stateful interface (``init_keys``, ``init_hidden``, ``hidden``,
``alphas``, ``attn_weights`` read after a call) keeps the state on the modules:
one caller at a time.

Every name is imported from its module the first time it is asked for (PEP 562), so
importing one model does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names
from attnlab.catalog import ENCODINGS

if TYPE_CHECKING:
    from attnlab.models.decoder_only import DecoderOnlyTransformer
    from attnlab.models.encoder_only import EncoderOnlyTransformer
    from attnlab.models.labs.gru_seq2seq import Decoder, DecoderAttn, Encoder, EncoderDecoder, EncoderDecoderAttn
    from attnlab.models.labs.selfattn_seq2seq import (
        DecoderPe,
        DecoderSelfAttn,
        EncoderDecoderSelfAttn,
        EncoderPe,
        EncoderSelfAttn,
    )
    from attnlab.models.labs.squares_transformer import EncoderDecoderTransformer
    from attnlab.models.sequence_model import sequence_model_class
    from attnlab.models.transformer import Transformer, TransformerDecoderLayer, TransformerEncoderLayer

__all__ = ["ENCODINGS", "Decoder", "DecoderAttn", "DecoderOnlyTransformer", "DecoderPe", "DecoderSelfAttn", "Encoder",
           "EncoderDecoder", "EncoderDecoderAttn", "EncoderDecoderSelfAttn", "EncoderDecoderTransformer",
           "EncoderOnlyTransformer", "EncoderPe", "EncoderSelfAttn", "Transformer", "TransformerDecoderLayer",
           "TransformerEncoderLayer", "sequence_model_class"]

#: each module of the package and the names it gives this one
_NAMES = {
    "transformer": ("Transformer", "TransformerDecoderLayer", "TransformerEncoderLayer"),
    "decoder_only": ("DecoderOnlyTransformer",),
    "encoder_only": ("EncoderOnlyTransformer",),
    "sequence_model": ("sequence_model_class",),
    "labs.gru_seq2seq": ("Decoder", "DecoderAttn", "Encoder", "EncoderDecoder", "EncoderDecoderAttn"),
    "labs.selfattn_seq2seq": ("DecoderPe", "DecoderSelfAttn", "EncoderDecoderSelfAttn", "EncoderPe",
                              "EncoderSelfAttn"),
    "labs.squares_transformer": ("EncoderDecoderTransformer",),
}
#: where each name lives, imported when first asked for
_HOMES = {name: module for module, names in _NAMES.items() for name in names}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
