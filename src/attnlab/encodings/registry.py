"""The encodings by name: what ``encoding="rotary"`` (or ``--encodings rotary``) builds.

A model that takes its positional encoding by name (:class:`attnlab.models.Transformer`,
:class:`attnlab.models.DecoderOnlyTransformer`, :class:`attnlab.models.EncoderOnlyTransformer`,
the length-generalisation lab) asks this module what the name means. Two kinds:

* absolute (:data:`ADDED_TO_INPUT`): ``"sinusoidal"`` and ``"learned"``, and their
  randomized versions, a table added to the embeddings before the first layer (the
  model builds it, since it owns the embeddings: :func:`input_position`);
* inside attention (:data:`INSIDE_ATTENTION`): ``"relative"`` (Shaw et al. 2018),
  ``"t5"`` (Raffel et al. 2020), ``"rotary"`` (Su et al. 2021), ``"alibi"`` (Press et
  al. 2022), ``"none"`` (NoPE, Kazemnejad et al. 2023), ``"fire"`` (Li et al. 2023),
  ``"kerple"`` (Chi et al. 2022, logarithmic), ``"xpos"`` (Sun et al. 2022) and
  ``"cope"`` (Golovneva et al. 2024): one :class:`~attnlab.encodings.AttentionPosition`
  per self-attention, from :func:`attention_position`.

:data:`RANDOMIZED` are Ruoss et al. 2023's randomized versions of every scheme that
takes positions (``random-sinusoidal``, ``random-learned``, ``random-relative``,
``random-t5``, ``random-rotary``, ``random-alibi``, ``random-fire``): positions (or
distances) drawn from ``[0, max_len)`` at every call, in training and at test time,
as the paper's code does (:mod:`attnlab.encodings.randomized`). :data:`CAUSAL_ONLY`
schemes (xPos, CoPE) are defined for causal attention only and are refused in a
bidirectional one.
"""

from __future__ import annotations

from functools import partial

from torch import nn

from attnlab._validate import check_choice, check_int
from attnlab.encodings.alibi import ALiBi
from attnlab.encodings.attention_position import AttentionPosition, NoPosition
from attnlab.encodings.cope import CoPE
from attnlab.encodings.fire import FIRE
from attnlab.encodings.kerple import KERPLE
from attnlab.encodings.learned import LearnedPositionalEncoding
from attnlab.encodings.position_scheme import PositionScheme
from attnlab.encodings.positional import PositionalEncoding
from attnlab.encodings.randomized import RandomizedPositions
from attnlab.encodings.randomized_tables import RandomizedLearned, RandomizedSinusoidal
from attnlab.encodings.relative import ShawRelative
from attnlab.encodings.rotary import Rotary
from attnlab.encodings.t5 import T5RelativeBias
from attnlab.encodings.xpos import XPos

__all__ = ["ADDED_TO_INPUT", "CAUSAL_ONLY", "DEFAULT_ENCODINGS", "ENCODINGS", "INSIDE_ATTENTION", "RANDOMIZED",
           "attention_position", "input_position"]

#: the absolute encodings, added to the embeddings.
ADDED_TO_INPUT = ("sinusoidal", "learned", "random-sinusoidal", "random-learned")
#: the schemes that act inside self-attention.
INSIDE_ATTENTION = ("relative", "t5", "rotary", "alibi", "none", "fire", "kerple", "xpos", "cope",
                    "random-relative", "random-t5", "random-rotary", "random-alibi", "random-fire")
#: the randomized schemes (Ruoss et al. 2023): positions drawn from [0, max_len) at every call.
RANDOMIZED = ("random-sinusoidal", "random-learned", "random-relative", "random-t5", "random-rotary",
              "random-alibi", "random-fire")
#: schemes defined for causal attention only.
CAUSAL_ONLY = ("xpos", "cope")
#: every encoding a model can take by name: the classic seven, the newer schemes, the randomized ones.
ENCODINGS = ("sinusoidal", "learned", "relative", "t5", "rotary", "alibi", "none",
             "fire", "kerple", "xpos", "cope", *RANDOMIZED)
#: what ``attnlab compare`` compares unless told: the classic seven.
DEFAULT_ENCODINGS = ENCODINGS[:7]

_TABLE_STD = 1.0  # a learned table's initial standard deviation (see input_position)

# Ruoss et al.'s code draws distances, not positions, for ALiBi and the relative encoding (randomized.py).
_DRAWS_DISTANCES = ("random-relative", "random-alibi")


def _check_max_len(encoding: str, max_len: int | None) -> int:
    if max_len is None:
        raise ValueError(f"encoding {encoding!r} draws positions from [0, max_len): give max_len")
    return check_int("max_len", max_len, minimum=1)


def _scheme(name: str, *, n_heads: int, head_dim: int, causal: bool, max_relative_position: int,
            max_len: int | None) -> AttentionPosition | None:
    """The (non-randomized) scheme ``name`` for one self-attention."""
    if name in CAUSAL_ONLY and not causal:
        raise ValueError(f"encoding {name!r} is defined for causal attention only; this attention is bidirectional "
                         "(an encoder-only model, or an encoder-decoder's encoder): use a decoder-only model")
    if name == "relative":
        return ShawRelative(head_dim, max_relative_position=max_relative_position)
    if name == "t5":
        return T5RelativeBias(n_heads, bidirectional=not causal)
    if name == "rotary":
        return Rotary(head_dim)
    if name == "alibi":
        # Bidirectional: keys on the left get half a step less penalty, so left and right differ (Ruoss et al.'s
        # code; symmetric ALiBi cannot tell them apart).
        return ALiBi(n_heads, causal=causal, left_offset=0.0 if causal else 0.5)
    if name == "fire":
        return FIRE(n_heads, causal=causal)
    if name == "kerple":
        return KERPLE(n_heads, causal=causal)
    if name == "xpos":
        return XPos(head_dim)
    if name == "cope":
        # CoPE counts positions up to npos_max - 1: room for the longest sequence the model reads.
        return CoPE(head_dim, npos_max=max(2, max_len or 64))
    if name == "none":
        return NoPosition()
    return None


def attention_position(
    encoding: str, *, n_heads: int, head_dim: int, causal: bool, max_relative_position: int = 16,
    max_len: int | None = None,
) -> AttentionPosition | None:
    """The scheme an ``encoding`` puts inside one self-attention (None for the absolute ones).

    Args:
        encoding: one of :data:`ENCODINGS`.
        n_heads: ``H`` (T5, ALiBi, FIRE and KERPLE have a value per head).
        head_dim: ``Dh`` (rotary, xPos, CoPE and Shaw work on it).
        causal: the attention is causal (T5 then buckets one direction only, ALiBi
            penalises one side only; xPos and CoPE require it).
        max_relative_position: Shaw's clipping distance ``k``.
        max_len: the randomized schemes draw from ``[0, max_len)`` (required for them);
            CoPE counts positions up to it.

    Returns:
        A new :class:`~attnlab.encodings.AttentionPosition`, or None for the absolute encodings.

    Raises:
        ValueError: for an unknown encoding (naming the known ones), a causal-only
            scheme in a bidirectional attention, a randomized one without ``max_len``,
            and what the scheme raises for its sizes (e.g. an odd ``head_dim`` for rotary).
    """
    check_choice("encoding", encoding, ENCODINGS)
    if encoding in ADDED_TO_INPUT:
        return None
    scheme = partial(_scheme, n_heads=n_heads, head_dim=head_dim, causal=causal,
                     max_relative_position=max_relative_position, max_len=max_len)
    if encoding not in RANDOMIZED:
        return scheme(encoding)
    max_len = _check_max_len(encoding, max_len)
    inner = scheme(encoding.removeprefix("random-"))
    assert isinstance(inner, PositionScheme)  # every scheme that takes positions is written at given positions
    return RandomizedPositions(inner, max_len=max_len,
                               sample="distances" if encoding in _DRAWS_DISTANCES else "positions")


def input_position(encoding: str, *, d_model: int, max_len: int) -> nn.Module | None:
    """The table an absolute ``encoding`` adds to the embeddings (None for the schemes inside attention).

    Called as ``table(h [B, L, D], offset=0) -> [B, L, D]``: ``"sinusoidal"`` extends past
    ``max_len``, ``"learned"`` refuses longer sequences, the randomized ones add the rows
    of a sorted random subset of ``[0, max_len)`` at every call.

    Raises:
        ValueError: for an unknown encoding, and what the table raises for its sizes.
    """
    check_choice("encoding", encoding, ENCODINGS)
    if encoding == "sinusoidal":
        return PositionalEncoding(max_len, d_model, scale_input=False)
    # Learned tables start on the scale of what they are added to (nn.Embedding's N(0, 1) tokens): at
    # std 0.02 a table 50 times smaller than the tokens was ignored, and the length lab's models learned
    # nothing from it in 1,024 steps (reverse, encoder-only: 59% in distribution, NoPE's 60%; at std 1, 99.5%).
    if encoding == "learned":
        return LearnedPositionalEncoding(max_len, d_model, std=_TABLE_STD)
    if encoding == "random-sinusoidal":
        return RandomizedSinusoidal(max_len, d_model)
    if encoding == "random-learned":
        return RandomizedLearned(max_len, d_model, std=_TABLE_STD)
    return None
