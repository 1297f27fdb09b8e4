"""Positional encodings: tables and the modules that add them.

``sinusoidal`` / ``angle_rates`` / ``shift_matrix`` (every layout of the paper's
sinusoids), ``fixed_base`` (seed 000's dials), ``PositionalEncoding`` (the seeds'
module, fixed) and ``LearnedPositionalEncoding`` (seed 002's exercise).
"""

from attnlab.encodings.fixed_base import fixed_base
from attnlab.encodings.learned import LearnedPositionalEncoding
from attnlab.encodings.positional import PositionalEncoding
from attnlab.encodings.sinusoidal import LAYOUTS, RATES, angle_rates, shift_matrix, sinusoidal

__all__ = [
    "LAYOUTS",
    "RATES",
    "LearnedPositionalEncoding",
    "PositionalEncoding",
    "angle_rates",
    "fixed_base",
    "shift_matrix",
    "sinusoidal",
]
