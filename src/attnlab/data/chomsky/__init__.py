"""The 15 tasks of Delétang et al. 2023, "Neural Networks and the Chomsky Hierarchy", as Ruoss et al. 2023 run them.

Each task is a :class:`~attnlab.data.strings.StringGenerator` (alphabets, output
length, ``sample``, ``chance``) with a ``level`` and an ``answer(inputs)`` that
computes the outputs of any input, hand-written ones included. Definitions,
alphabets, output lengths, accuracy masks, short-length special cases and
parameters (modulus 5, a cycle of 5 states, binary strings, 5 symbols to sort)
follow google-deepmind/randomized_positional_encodings (tasks/, and
experiments/constants.py for the parameters).

    >>> import torch
    >>> task = CHOMSKY_TASKS["parity-check"]()
    >>> strings = task.sample(4, 10, generator=torch.Generator().manual_seed(0))
    >>> tuple(strings.inputs.shape), tuple(strings.outputs.shape)
    ((4, 10), (4, 1))
"""

from __future__ import annotations

from attnlab.data.chomsky.base import ChomskyTask, decode, encode
from attnlab.data.chomsky.binary import BinaryAddition, BinaryMultiplication, ComputeSqrt
from attnlab.data.chomsky.brackets import ModularArithmeticBrackets, SolveEquation
from attnlab.data.chomsky.cs import BucketSort, DuplicateString, MissingDuplicate, OddsFirst
from attnlab.data.chomsky.dcf import ReverseString, StackManipulation
from attnlab.data.chomsky.regular import CycleNavigation, EvenPairs, ModularArithmetic, ParityCheck

__all__ = [
    "CHOMSKY_TASKS", "LEVELS",
    "BinaryAddition", "BinaryMultiplication", "BucketSort", "ChomskyTask", "ComputeSqrt", "CycleNavigation",
    "DuplicateString", "EvenPairs", "MissingDuplicate", "ModularArithmetic", "ModularArithmeticBrackets",
    "OddsFirst", "ParityCheck", "ReverseString", "SolveEquation", "StackManipulation",
    "decode", "encode",
]

#: name -> task class, regular first, then deterministic context-free, then context-sensitive (the papers' order).
CHOMSKY_TASKS: dict[str, type[ChomskyTask]] = {
    task.name: task
    for task in (
        EvenPairs, ModularArithmetic, ParityCheck, CycleNavigation,
        StackManipulation, ReverseString, ModularArithmeticBrackets, SolveEquation,
        DuplicateString, MissingDuplicate, OddsFirst, BinaryAddition, BinaryMultiplication, ComputeSqrt, BucketSort,
    )
}

#: level -> the names of its tasks, in the order of :data:`CHOMSKY_TASKS`.
LEVELS: dict[str, tuple[str, ...]] = {
    level: tuple(name for name, task in CHOMSKY_TASKS.items() if task.level == level)
    for level in ("regular", "dcf", "cs")
}
