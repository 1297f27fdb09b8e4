"""Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in Transformers".

Their tasks as string generators (code: McGill-NLP/length-generalization), each with the
reference's prompt words around its input (:mod:`attnlab.data.tasks.prompts`):

* :mod:`.primitive`: copy and reverse in the eight variants of the paper, and
  :class:`KazemnejadTask`, what every one of their tasks shares;
* :mod:`.mathematical`: addition, sorting and summation without scratchpad;
* :mod:`.splits`: the generators by name (:data:`KAZEMNEJAD_TASKS`) and the split the paper
  ran for each task, its lengths and sizes with their sources (:data:`KAZEMNEJAD_DATA`).

SCAN, their fifth kind of task, is a fixed set of commands: :mod:`attnlab.data.scan`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.kazemnejad.mathematical import Addition, SortTokens, Summation
    from attnlab.data.kazemnejad.primitive import (
        CopyRandom,
        CopyRandom2x,
        CopyRepeat,
        CopyRepeat2x,
        CopyRepeatChange,
        KazemnejadTask,
        ReverseCopy,
        ReverseRandom,
        ReverseRandom2x,
    )
    from attnlab.data.kazemnejad.splits import KAZEMNEJAD_DATA, KAZEMNEJAD_TASKS, KazemnejadSplit

__all__ = ["Addition", "CopyRandom", "CopyRandom2x", "CopyRepeat", "CopyRepeat2x", "CopyRepeatChange",
           "KAZEMNEJAD_DATA", "KAZEMNEJAD_TASKS", "KazemnejadSplit", "KazemnejadTask", "ReverseCopy", "ReverseRandom",
           "ReverseRandom2x", "SortTokens", "Summation"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "CopyRandom": "primitive", "CopyRandom2x": "primitive", "CopyRepeat": "primitive", "CopyRepeat2x": "primitive",
    "CopyRepeatChange": "primitive", "KazemnejadTask": "primitive", "ReverseCopy": "primitive",
    "ReverseRandom": "primitive", "ReverseRandom2x": "primitive",
    "Addition": "mathematical", "SortTokens": "mathematical", "Summation": "mathematical",
    "KAZEMNEJAD_DATA": "splits", "KAZEMNEJAD_TASKS": "splits", "KazemnejadSplit": "splits",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
