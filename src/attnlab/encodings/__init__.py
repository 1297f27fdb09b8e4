"""Positional encodings: tables and the modules that add them.

``sinusoidal`` / ``angle_rates`` / ``shift_matrix`` (every layout of the paper's
sinusoids), ``fixed_base`` (the positional-encoding lab's dials), ``PositionalEncoding``
(the labs' module, fixed) and ``LearnedPositionalEncoding`` (the d2l chapter's exercise):
these are added to the inputs. For images and video: ``sinusoidal_2d`` / ``sinusoidal_3d``
and ``PositionalEncoding2D`` / ``PositionalEncoding3D``.

Schemes that act inside attention (:class:`PositionScheme`, the one protocol,
:mod:`.scheme`; passed to ``MultiHeadAttention(position=...)``): ``Rotary`` (RoFormer), ``ALiBi``,
``T5RelativeBias``, ``ShawRelative`` (Shaw et al. 2018), ``FIRE`` (Li et al. 2023),
``KERPLE`` (Chi et al. 2022), ``XPos`` (Sun et al. 2022), ``CoPE`` (Golovneva et al.
2024), ``AxialRotary`` (rotary over the rows and columns of an image) and
``NoPosition``. Those written at any positions (:class:`PositionScheme`) also come
randomized (Ruoss et al. 2023): ``RandomizedPositions`` around a scheme,
``RandomizedSinusoidal`` and ``RandomizedLearned`` for the tables.

Positions from the data (:mod:`.positions`): every scheme and table takes per-row
``position_ids [B, L]`` (a left-padded batch, ``positions_from_mask``; Abacus indices),
checked by ``check_position_ids``.

By name, class or factory (:mod:`.registry`): ``ENCODINGS``, ``register(name, cls)`` for a
user's own scheme, ``resolve`` and ``attention_position(position, ...)``, what a model's
``position=`` argument builds.

Every name is imported from its module the first time it is asked for (PEP 562), so that
importing one module of the package (a scheme's, the registry) loads only what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

# Imported now, not on first use: these functions have their module's name, and importing the module
# (anyone's `from attnlab.encodings.sinusoidal import ...`) would set the package's attribute to the module.
from attnlab.encodings.fixed_base import fixed_base
from attnlab.encodings.sinusoidal import sinusoidal

if TYPE_CHECKING:
    from attnlab.encodings.alibi import ALiBi, alibi_slopes
    from attnlab.encodings.axial_rotary import AxialRotary, axial_rotary_angles
    from attnlab.encodings.cope import CoPE
    from attnlab.encodings.draws import sample_positions
    from attnlab.encodings.fire import FIRE
    from attnlab.encodings.kerple import KERPLE
    from attnlab.encodings.learned import LearnedPositionalEncoding
    from attnlab.encodings.positional import PositionalEncoding
    from attnlab.encodings.positions import check_position_ids, positions_from_mask
    from attnlab.encodings.randomized import RandomizedPositions
    from attnlab.encodings.randomized_tables import RandomizedLearned, RandomizedSinusoidal
    from attnlab.encodings.registry import ENCODINGS, Randomized, attention_position, register, resolve, spec_name
    from attnlab.encodings.relative import ShawRelative
    from attnlab.encodings.rope_scaling import ROPE_TYPES, rope_frequencies
    from attnlab.encodings.rotary import CONVENTIONS as ROTARY_CONVENTIONS
    from attnlab.encodings.rotary import QuarterRotary, Rotary, apply_rotary, interleaved_to_half_permutation
    from attnlab.encodings.scheme import ModelSizes, NoPosition, PositionScheme, relative_positions
    from attnlab.encodings.sinusoidal import LAYOUTS, RATES, angle_rates, shift_matrix, sinusoidal_at
    from attnlab.encodings.sinusoidal_nd import (
        PositionalEncoding2D,
        PositionalEncoding3D,
        axis_pairs,
        sinusoidal_2d,
        sinusoidal_3d,
    )
    from attnlab.encodings.t5 import T5RelativeBias, t5_bucket
    from attnlab.encodings.xpos import XPos, xpos_zeta

__all__ = ["ALiBi", "AxialRotary", "CoPE", "ENCODINGS", "FIRE", "KERPLE", "LAYOUTS",
           "LearnedPositionalEncoding", "ModelSizes", "NoPosition", "PositionScheme", "PositionalEncoding",
           "PositionalEncoding2D", "PositionalEncoding3D", "QuarterRotary", "RATES", "ROPE_TYPES", "ROTARY_CONVENTIONS",
           "Randomized",
           "RandomizedLearned", "RandomizedPositions", "RandomizedSinusoidal", "Rotary", "ShawRelative",
           "T5RelativeBias", "XPos", "alibi_slopes", "angle_rates", "apply_rotary", "attention_position",
           "axial_rotary_angles", "axis_pairs", "check_position_ids", "fixed_base", "interleaved_to_half_permutation",
           "positions_from_mask", "register", "relative_positions", "resolve", "rope_frequencies", "sample_positions",
           "shift_matrix", "sinusoidal", "sinusoidal_2d", "sinusoidal_3d", "sinusoidal_at", "spec_name", "t5_bucket",
           "xpos_zeta"]

#: each module of the package and the names it gives this one
_NAMES = {
    "alibi": ("ALiBi", "alibi_slopes"),
    "axial_rotary": ("AxialRotary", "axial_rotary_angles"),
    "cope": ("CoPE",),
    "draws": ("sample_positions",),
    "fire": ("FIRE",),
    "kerple": ("KERPLE",),
    "learned": ("LearnedPositionalEncoding",),
    "positional": ("PositionalEncoding",),
    "positions": ("check_position_ids", "positions_from_mask"),
    "randomized": ("RandomizedPositions",),
    "randomized_tables": ("RandomizedLearned", "RandomizedSinusoidal"),
    "registry": ("ENCODINGS", "Randomized", "attention_position", "register", "resolve", "spec_name"),
    "relative": ("ShawRelative",),
    "rope_scaling": ("ROPE_TYPES", "rope_frequencies"),
    "rotary": ("QuarterRotary", "ROTARY_CONVENTIONS", "Rotary", "apply_rotary", "interleaved_to_half_permutation"),
    "scheme": ("ModelSizes", "NoPosition", "PositionScheme", "relative_positions"),
    "sinusoidal": ("LAYOUTS", "RATES", "angle_rates", "shift_matrix", "sinusoidal_at"),
    "sinusoidal_nd": ("PositionalEncoding2D", "PositionalEncoding3D", "axis_pairs", "sinusoidal_2d", "sinusoidal_3d"),
    "t5": ("T5RelativeBias", "t5_bucket"),
    "xpos": ("XPos", "xpos_zeta"),
}
#: where each name lives, imported when first asked for
_HOMES = {name: module for module, names in _NAMES.items() for name in names}
#: names this package gives a value under another name than its module's
_RENAMED = {"ROTARY_CONVENTIONS": "CONVENTIONS"}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__, renamed=_RENAMED)
