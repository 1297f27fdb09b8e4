"""The encodings by name: what ``encoding="rotary"`` (or ``--encodings rotary``) builds.

A model that takes its positional encoding by name (:class:`attnlab.models.Transformer`,
:class:`attnlab.models.DecoderOnlyTransformer`, the length-generalisation lab) asks
this module what the name means. Two kinds:

* absolute (:data:`ADDED_TO_INPUT`): ``"sinusoidal"`` and ``"learned"``, a table added
  to the embeddings before the first layer (the model builds it, since it owns the
  embeddings);
* inside attention (:data:`INSIDE_ATTENTION`): ``"relative"`` (Shaw et al. 2018),
  ``"t5"`` (Raffel et al. 2020), ``"rotary"`` (Su et al. 2021), ``"alibi"`` (Press et
  al. 2022) and ``"none"`` (NoPE, Kazemnejad et al. 2023): one
  :class:`~attnlab.encodings.AttentionPosition` per self-attention, from
  :func:`attention_position`.
"""

from __future__ import annotations

from attnlab._validate import check_choice
from attnlab.encodings.alibi import ALiBi
from attnlab.encodings.attention_position import AttentionPosition, NoPosition
from attnlab.encodings.relative import ShawRelative
from attnlab.encodings.rotary import Rotary
from attnlab.encodings.t5 import T5RelativeBias

__all__ = ["ADDED_TO_INPUT", "DEFAULT_ENCODINGS", "ENCODINGS", "INSIDE_ATTENTION", "RANDOMIZED", "attention_position"]

#: the absolute encodings, added to the embeddings.
ADDED_TO_INPUT = ("sinusoidal", "learned")
#: the schemes that act inside self-attention.
INSIDE_ATTENTION = ("relative", "t5", "rotary", "alibi", "none")
#: every encoding a model can take by name.
ENCODINGS = ADDED_TO_INPUT + INSIDE_ATTENTION
#: the randomized schemes (Ruoss et al. 2023): positions drawn from [0, max_len) at every call.
RANDOMIZED: tuple[str, ...] = ()
#: what ``attnlab compare`` compares unless told: the classic seven.
DEFAULT_ENCODINGS = ("sinusoidal", "learned", "relative", "t5", "rotary", "alibi", "none")


def attention_position(
    encoding: str, *, n_heads: int, head_dim: int, causal: bool, max_relative_position: int = 16
) -> AttentionPosition | None:
    """The scheme an ``encoding`` puts inside one self-attention (None for the absolute ones).

    Args:
        encoding: one of :data:`ENCODINGS`.
        n_heads: ``H`` (T5 and ALiBi have a value per head).
        head_dim: ``Dh`` (rotary and Shaw work on it).
        causal: the attention is causal (T5 then buckets one direction only, ALiBi
            penalises one side only).
        max_relative_position: Shaw's clipping distance ``k``.

    Returns:
        A new :class:`~attnlab.encodings.AttentionPosition`, or None for
        ``"sinusoidal"`` / ``"learned"``.

    Raises:
        ValueError: for an unknown encoding (naming the known ones), and what the
            scheme raises for its sizes (e.g. an odd ``head_dim`` for rotary).
    """
    check_choice("encoding", encoding, ENCODINGS)
    if encoding == "relative":
        return ShawRelative(head_dim, max_relative_position=max_relative_position)
    if encoding == "t5":
        return T5RelativeBias(n_heads, bidirectional=not causal)
    if encoding == "rotary":
        return Rotary(head_dim)
    if encoding == "alibi":
        return ALiBi(n_heads, causal=causal)
    if encoding == "none":
        return NoPosition()
    return None
