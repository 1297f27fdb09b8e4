"""The noisy squares of the labs: the sequences, walks further, prefixes, loaders and padding.

* :mod:`.sequences`: :func:`generate_sequences`, the book's generator number for number
  (without touching numpy's global random state), and :func:`squares_tensor`, which stacks
  its output into ``[N, 4, 2]``;
* :mod:`.walks`: :func:`squares_task`, the squares walked round and round (the length
  lab's real-valued task), as a :class:`SquaresBatch`;
* :mod:`.square_prefixes`: :func:`generate_prefixes` and :class:`SquarePrefixes`, the book's
  variable-length squares (2 to 4 corners, padded and masked) and the two corners that follow each;
* :mod:`.loaders`: :class:`SquareSequences` (a Dataset) and :func:`make_loaders`, the labs'
  train/test loaders with a real test set and a shuffle of their own;
* :mod:`.padding`: :func:`pad_sequences` for sequences of different lengths (right padding,
  mask True = real step) and :func:`collate_padded`, a DataLoader ``collate_fn`` for such
  ``(source, target)`` pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.squares.loaders import SquareLoaders, SquareSequences, make_loaders
    from attnlab.data.squares.padding import PaddedBatch, collate_padded, pad_sequences
    from attnlab.data.squares.sequences import CORNERS, generate_sequences, squares_tensor
    from attnlab.data.squares.square_prefixes import Prefixes, SquarePrefixes, generate_prefixes
    from attnlab.data.squares.walks import SquaresBatch, squares_task

__all__ = ["CORNERS", "PaddedBatch", "Prefixes", "SquareLoaders", "SquarePrefixes", "SquareSequences", "SquaresBatch",
           "collate_padded", "generate_prefixes", "generate_sequences", "make_loaders", "pad_sequences",
           "squares_task", "squares_tensor"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "CORNERS": "sequences", "generate_sequences": "sequences", "squares_tensor": "sequences",
    "squares_task": "walks", "SquaresBatch": "walks",
    "generate_prefixes": "square_prefixes", "Prefixes": "square_prefixes", "SquarePrefixes": "square_prefixes",
    "make_loaders": "loaders", "SquareLoaders": "loaders", "SquareSequences": "loaders",
    "collate_padded": "padding", "pad_sequences": "padding", "PaddedBatch": "padding",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
