"""The names attnlab offers, without importing torch.

The command line lists these in its ``--help`` and must start at once, before (and
without) importing torch; the library reads the same tables, so a name is written once.

* :data:`SCHEMES`: the built-in position encodings, name -> ``"module:Class"``. The
  registry (:mod:`attnlab.encodings.registry`) imports a class the first time its name
  is used. Adding a built-in scheme is its own module plus one row here.
* :data:`RANDOMIZED`: the randomized schemes attnlab lists (Ruoss et al. 2023). Any
  ``"random-NAME"`` works where NAME is a scheme that takes positions, a user's included.
* :data:`DEFAULT_ENCODINGS`: what ``attnlab compare`` compares unless told.
"""

from __future__ import annotations

#: the built-in position encodings: name -> "module:Class" (the registry loads the class on first use).
SCHEMES: dict[str, str] = {
    "sinusoidal": "attnlab.encodings.positional:PositionalEncoding",
    "learned": "attnlab.encodings.learned:LearnedPositionalEncoding",
    "relative": "attnlab.encodings.relative:ShawRelative",
    "t5": "attnlab.encodings.t5:T5RelativeBias",
    "rotary": "attnlab.encodings.rotary:Rotary",
    "alibi": "attnlab.encodings.alibi:ALiBi",
    "none": "attnlab.encodings.scheme:NoPosition",
    "fire": "attnlab.encodings.fire:FIRE",
    "kerple": "attnlab.encodings.kerple:KERPLE",
    "xpos": "attnlab.encodings.xpos:XPos",
    "cope": "attnlab.encodings.cope:CoPE",
    "random-sinusoidal": "attnlab.encodings.randomized_tables:RandomizedSinusoidal",
    "random-learned": "attnlab.encodings.randomized_tables:RandomizedLearned",
}

#: the randomized schemes inside attention that attnlab lists; "random-" before any scheme's name works.
RANDOMIZED: tuple[str, ...] = ("random-relative", "random-t5", "random-rotary", "random-alibi", "random-fire")

#: what `attnlab compare` compares unless told (explicit, never a slice of SCHEMES).
DEFAULT_ENCODINGS: tuple[str, ...] = ("sinusoidal", "learned", "relative", "t5", "rotary", "alibi", "none")

#: the paths attention takes with a position scheme (attnlab.attention.backends.choose).
BACKENDS: tuple[str, ...] = ("auto", "dense", "flex", "chunked")

#: the entry-point group through which an installed package adds its schemes.
ENTRY_POINT_GROUP = "attnlab.schemes"
