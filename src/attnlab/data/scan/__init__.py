"""SCAN (Lake & Baroni 2018): commands to action sequences, generated in process from its grammar.

* :mod:`.grammar`: every command and its actions (:func:`scan_pairs`), the meaning of any
  command (:func:`interpret`), and the length split (:func:`length_split`);
* :mod:`.scan_task`: :class:`ScanTask`, the length split as a task of the length lab, in
  Kazemnejad et al. 2023's format (``Solve : command BOS actions EOS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.scan.grammar import (
        ACTIONS,
        COMMANDS,
        KAZEMNEJAD_ACTION_WORDS,
        interpret,
        length_split,
        scan_pairs,
    )
    from attnlab.data.scan.scan_task import LONGEST_COMMAND, SCAN_PROMPT, ScanCommands, ScanTask, scan_batch

__all__ = ["ACTIONS", "COMMANDS", "KAZEMNEJAD_ACTION_WORDS", "LONGEST_COMMAND", "SCAN_PROMPT", "ScanCommands",
           "ScanTask", "interpret", "length_split", "scan_batch", "scan_pairs"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "ACTIONS": "grammar", "COMMANDS": "grammar", "interpret": "grammar", "KAZEMNEJAD_ACTION_WORDS": "grammar",
    "length_split": "grammar", "scan_pairs": "grammar",
    "LONGEST_COMMAND": "scan_task", "scan_batch": "scan_task", "SCAN_PROMPT": "scan_task",
    "ScanCommands": "scan_task", "ScanTask": "scan_task",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
