"""The 15 Chomsky-hierarchy tasks by name, and by level: regular, deterministic context-free, context-sensitive.

    >>> import torch
    >>> task = CHOMSKY_TASKS["parity-check"]()
    >>> strings = task.sample(4, 10, generator=torch.Generator().manual_seed(0))
    >>> tuple(strings.inputs.shape), tuple(strings.outputs.shape)
    ((4, 10), (4, 1))
    >>> LEVELS["dcf"]
    ('stack-manipulation', 'reverse-string', 'modular-arithmetic-brackets', 'solve-equation')
"""

from __future__ import annotations

from attnlab.data.chomsky.base import ChomskyTask
from attnlab.data.chomsky.binary import BinaryAddition, BinaryMultiplication, ComputeSqrt
from attnlab.data.chomsky.brackets import ModularArithmeticBrackets, SolveEquation
from attnlab.data.chomsky.cs import BucketSort, DuplicateString, MissingDuplicate, OddsFirst
from attnlab.data.chomsky.dcf import ReverseString, StackManipulation
from attnlab.data.chomsky.regular import CycleNavigation, EvenPairs, ModularArithmetic, ParityCheck

__all__ = ["CHOMSKY_TASKS", "LEVELS"]

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
