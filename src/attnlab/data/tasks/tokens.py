"""The token ids of the length lab, and a token task's batch in them: :class:`Vocab` and :class:`TaskBatch`.

Every token task speaks one vocabulary: ``PAD = 0``, ``BOS = 1``, ``EOS = 2``, then
the task's symbols from :data:`FIRST_SYMBOL` on. A string generator
(:mod:`attnlab.data.tasks.strings`) writes symbols ``0, 1, ...`` in alphabets of its
own; symbol ``s`` becomes id ``FIRST_SYMBOL + s``, inputs and outputs alike (one shared
range: the model's logits run over all of it). :func:`strings_batch` does that for
strings of one length, :func:`padded_batch` for strings of several lengths drawn at
once, and :func:`cat_batches` puts batches of different lengths together.

A :class:`TaskBatch` holds the source and the target, right-padded with ``PAD``; the
decoder is teacher-forced with ``target_in = BOS + target`` and learns
``target_out = target + EOS``. Example with ``L = 4``, the source copied::

    source      [ 7,  3,  9,  7]
    target_in   [BOS, 7, 3, 9, 7]
    target_out  [7, 3, 9, 7, EOS]

Shape notation: ``N`` sequences, ``S`` source length, ``T`` target width (the answer and its
EOS), ``M`` answer length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.tasks.strings import PaddedStrings, Strings

__all__ = ["BOS", "EOS", "FIRST_SYMBOL", "PAD", "TaskBatch", "Vocab", "cat_batches", "padded_batch",
           "strings_batch"]

#: padding: never attended to, never scored
PAD = 0
#: the beginning of an answer (the decoder's first input; the encoder-only layout's empty slot)
BOS = 1
#: the end of an answer
EOS = 2
#: the first content token: a task's symbols are ``FIRST_SYMBOL .. FIRST_SYMBOL + n_symbols - 1``
FIRST_SYMBOL = 3


@dataclass(frozen=True)
class Vocab:
    """The token vocabulary: ``PAD = 0``, ``BOS = 1``, ``EOS = 2``, then ``n_symbols`` content tokens.

    With the default 10 symbols the content ids are 3 to 12 and a model needs
    an embedding table of ``size = 13`` rows (``padding_idx=PAD``).

    Args:
        n_symbols: how many content tokens, at least 2 (with one symbol copy,
            reverse and sort would all be the same task).

    Raises:
        TypeError / ValueError: naming ``n_symbols`` if it is not an integer >= 2.
    """

    n_symbols: int = 10

    def __post_init__(self) -> None:
        check_int("n_symbols", self.n_symbols, minimum=2)

    @property
    def size(self) -> int:
        """Number of token ids, special ones included: ``3 + n_symbols``."""
        return FIRST_SYMBOL + self.n_symbols

    @property
    def symbols(self) -> range:
        """The content token ids."""
        return range(FIRST_SYMBOL, self.size)

    def format(self, ids: Any) -> str:
        """Token ids ``[L]`` as text, special tokens by name: ``'<bos> 7 3 9 <eos> <pad>'``."""
        names = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>"}
        return " ".join(names.get(int(i), str(int(i))) for i in torch.as_tensor(ids).reshape(-1).tolist())


class TaskBatch(NamedTuple):
    """A token task's sequences, right-padded with ``PAD``.

    Attributes:
        source: int64 ``[N, S]``, the content tokens (no BOS/EOS), ``PAD`` after each length.
        target_in: int64 ``[N, T]``, ``T = S + 1`` (``2S + 1`` for duplicate): ``BOS`` then the target.
        target_out: int64 ``[N, T]``: the target then ``EOS`` (what the decoder must predict).
        source_mask: bool ``[N, 1, S]``, True on real tokens: the models' source mask.
        target_mask: bool ``[N, 1, T]``, True on the real positions of both ``target_in``
            and ``target_out`` (EOS included); ``target_out != PAD`` says the same.
        lengths: int64 ``[N]``, each sequence's length ``L_i <= S``.
        scored: bool ``[N, T]``, the target positions the accuracies count, or None for
            every real one (a benchmark task's answer may end in padding symbols that are
            trained on but not scored: :attr:`attnlab.data.tasks.strings.Strings.scored`).
    """

    source: torch.Tensor
    target_in: torch.Tensor
    target_out: torch.Tensor
    source_mask: torch.Tensor
    target_mask: torch.Tensor
    lengths: torch.Tensor
    scored: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> TaskBatch:
        """The same batch with every tensor on ``device``."""
        return TaskBatch(*(None if t is None else t.to(device) for t in self))  # type: ignore[arg-type]


def strings_batch(strings: Strings) -> TaskBatch:
    """One length's strings as a :class:`TaskBatch`: ids shifted past the special tokens, EOS after the answer.

    Args:
        strings: inputs ``[N, S]`` and outputs ``[N, M]`` in the task's alphabets.

    Returns:
        A :class:`TaskBatch`: ``source [N, S]``, ``target_in`` / ``target_out [N, M + 1]``;
        its ``scored`` marks the output positions the accuracies count (EOS always counts).
    """
    inputs, outputs, scored = strings
    n, S = inputs.shape
    M = outputs.shape[1]
    device = inputs.device
    source = inputs + FIRST_SYMBOL  # [N, S]
    target = outputs + FIRST_SYMBOL  # [N, M]
    target_out = torch.cat([target, torch.full((n, 1), EOS, dtype=torch.int64, device=device)], dim=1)  # [N, M + 1]
    target_in = torch.cat([torch.full((n, 1), BOS, dtype=torch.int64, device=device), target], dim=1)  # [N, M + 1]
    ones = torch.ones(n, M + 1, dtype=torch.bool, device=device)  # [N, M + 1]
    counted = ones if scored is None else torch.cat([scored, ones[:, :1]], dim=1)  # [N, M + 1]: EOS counts
    return TaskBatch(source, target_in, target_out, torch.ones(n, 1, S, dtype=torch.bool, device=device),
                     ones.unsqueeze(1), torch.full((n,), S, dtype=torch.int64, device=device), counted)


def padded_batch(strings: PaddedStrings) -> TaskBatch:
    """Strings of several lengths as a :class:`TaskBatch`: ids past the special tokens, ``PAD`` after each row.

    Row ``i`` keeps its first ``lengths[i]`` input symbols and ``output_lengths[i]``
    answer symbols; ``EOS`` follows its answer; every real target position is scored.

    Args:
        strings: :class:`~attnlab.data.tasks.strings.PaddedStrings`, inputs ``[N, S]``,
            outputs ``[N, M]``.

    Returns:
        A :class:`TaskBatch`: ``source [N, S]``, ``target_in`` / ``target_out [N, M + 1]``.
    """
    inputs, outputs, lengths, output_lengths = strings
    n, S = inputs.shape
    M = outputs.shape[1]
    device = inputs.device
    real = torch.arange(S, device=device) < lengths[:, None]  # [N, S]
    source = (inputs + FIRST_SYMBOL).masked_fill(~real, PAD)  # [N, S]
    answer = torch.arange(M, device=device) < output_lengths[:, None]  # [N, M]
    target = (outputs + FIRST_SYMBOL).masked_fill(~answer, PAD)  # [N, M]
    pad_col = torch.full((n, 1), PAD, dtype=torch.int64, device=device)  # [N, 1]
    bos_col = torch.full((n, 1), BOS, dtype=torch.int64, device=device)  # [N, 1]
    target_out = torch.cat([target, pad_col], dim=1).scatter(1, output_lengths[:, None], EOS)  # [N, M + 1]
    target_in = torch.cat([bos_col, target], dim=1)  # [N, M + 1]
    target_real = torch.arange(M + 1, device=device) <= output_lengths[:, None]  # [N, M + 1]: the answer and EOS
    return TaskBatch(source, target_in, target_out, real.unsqueeze(1), target_real.unsqueeze(1), lengths,
                     target_real)


def cat_batches(batches: list[TaskBatch], index: Tensor) -> TaskBatch:
    """Batches of different lengths as one, right-padded with ``PAD`` (masks with False), rows put back at ``index``.

    Args:
        batches: the batches, row ``k`` of their concatenation being row ``index[k]`` of the result.
        index: int64 ``[N]``, a permutation of ``0 .. N - 1``.

    Returns:
        A :class:`TaskBatch` of ``N`` rows: ``source [N, S]`` and targets ``[N, T]``, ``S`` and ``T``
        the widest of the batches'.
    """
    S = max(b.source.shape[1] for b in batches)
    T = max(b.target_out.shape[1] for b in batches)

    def pad(t: Tensor, width: int, value: Any) -> Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=value)

    fields = [
        torch.cat([pad(b.source, S, PAD) for b in batches]),
        torch.cat([pad(b.target_in, T, PAD) for b in batches]),
        torch.cat([pad(b.target_out, T, PAD) for b in batches]),
        torch.cat([pad(b.source_mask, S, False) for b in batches]),
        torch.cat([pad(b.target_mask, T, False) for b in batches]),
        torch.cat([b.lengths for b in batches]),
    ]
    fields.append(torch.cat([pad(b.target_mask[:, 0] if b.scored is None else b.scored, T, False) for b in batches]))
    order = torch.empty_like(index)
    order[index] = torch.arange(index.numel(), device=index.device)  # row i of the result is row order[i] here
    return TaskBatch(*(f[order] for f in fields))
