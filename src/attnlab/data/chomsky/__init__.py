"""The 15 tasks of Delétang et al. 2023, "Neural Networks and the Chomsky Hierarchy", as Ruoss et al. 2023 run them.

Each task is a :class:`~attnlab.data.tasks.strings.StringGenerator` (alphabets, output
length, ``sample``, ``chance``) with a ``level`` and an ``answer(inputs)`` that
computes the outputs of any input, hand-written ones included. Definitions,
alphabets, output lengths, accuracy masks, short-length special cases and
parameters (modulus 5, a cycle of 5 states, binary strings, 5 symbols to sort)
follow google-deepmind/randomized_positional_encodings (tasks/, and
experiments/constants.py for the parameters).

:mod:`.base` holds what they share (:class:`ChomskyTask`, :func:`encode`, :func:`decode`),
:mod:`.regular`, :mod:`.dcf`, :mod:`.brackets`, :mod:`.cs` and :mod:`.binary` the tasks,
:mod:`.levels` the tasks by name (:data:`CHOMSKY_TASKS`) and by level (:data:`LEVELS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.chomsky.base import ChomskyTask, decode, encode
    from attnlab.data.chomsky.binary import BinaryAddition, BinaryMultiplication, ComputeSqrt
    from attnlab.data.chomsky.brackets import ModularArithmeticBrackets, SolveEquation
    from attnlab.data.chomsky.cs import BucketSort, DuplicateString, MissingDuplicate, OddsFirst
    from attnlab.data.chomsky.dcf import ReverseString, StackManipulation
    from attnlab.data.chomsky.levels import CHOMSKY_TASKS, LEVELS
    from attnlab.data.chomsky.regular import CycleNavigation, EvenPairs, ModularArithmetic, ParityCheck

__all__ = ["BinaryAddition", "BinaryMultiplication", "BucketSort", "CHOMSKY_TASKS", "ChomskyTask", "ComputeSqrt",
           "CycleNavigation", "DuplicateString", "EvenPairs", "LEVELS", "MissingDuplicate", "ModularArithmetic",
           "ModularArithmeticBrackets", "OddsFirst", "ParityCheck", "ReverseString", "SolveEquation",
           "StackManipulation", "decode", "encode"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "ChomskyTask": "base", "decode": "base", "encode": "base",
    "BinaryAddition": "binary", "BinaryMultiplication": "binary", "ComputeSqrt": "binary",
    "ModularArithmeticBrackets": "brackets", "SolveEquation": "brackets",
    "BucketSort": "cs", "DuplicateString": "cs", "MissingDuplicate": "cs", "OddsFirst": "cs",
    "ReverseString": "dcf", "StackManipulation": "dcf",
    "CycleNavigation": "regular", "EvenPairs": "regular", "ModularArithmetic": "regular", "ParityCheck": "regular",
    "CHOMSKY_TASKS": "levels", "LEVELS": "levels",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
