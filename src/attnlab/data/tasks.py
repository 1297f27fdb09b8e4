"""Synthetic tasks for length generalisation: copy, reverse, duplicate and sort tokens, and the squares walked on.

A length-generalisation lab trains a model at one length and tests it at longer
ones. Every task here draws its data at any length, from a generator of its own:

* ``copy``, ``reverse``, ``duplicate``, ``sort``: sequence-to-sequence token
  tasks. The source is ``L`` content tokens drawn uniformly (with replacement)
  from ``n_symbols`` symbols (2 for the binary strings of Ruoss et al. 2023); the
  target is the source itself, the source backwards, the source twice (``ww``,
  length ``2L``: Ruoss et al.'s "duplicate string"), or the source in ascending
  order (duplicates allowed, so it is a sorted multiset, not a permutation of
  distinct items). Example with ``L = 4``, ids as in :class:`Vocab`::

      source      [ 7,  3,  9,  7]
      copy        [ 7,  3,  9,  7]     target_in  [BOS, 7, 3, 9, 7]
      reverse     [ 7,  9,  3,  7]     target_out [7, 3, 9, 7, EOS]   (copy)
      duplicate   [ 7,  3,  9,  7,  7,  3,  9,  7]
      sort        [ 3,  7,  7,  9]

  The decoder is teacher-forced with ``target_in = BOS + target`` and learns
  ``target_out = target + EOS``; the source carries neither (an encoder sees it
  whole, and the padding mask tells it where it ends).
* ``squares``: the labs' noisy squares (:mod:`attnlab.data.squares`), walked
  round and round: corner ``k + 4`` is corner ``k`` again with fresh noise. The
  model sees the first 2 corners and predicts the rest, float points, so it is
  scored by mean squared error, not accuracy.

:func:`attnlab.data.task.make_task_sets` builds a training set at ``train_len`` and one test set
per test length, from different seeds; :func:`attnlab.data.task_loader.task_loader` batches any of them.
Nothing here reads or changes a global random state.

How a task becomes the input of each architecture (one causal sequence, or the
input followed by empty output slots) is :mod:`attnlab.data.layouts`.

Shape notation: ``N`` sequences (``B`` in a batch), ``S`` source length, ``T``
target length (``S + 1`` for the token tasks, ``2S + 1`` for ``duplicate``), ``F = 2`` coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from attnlab._validate import check_int
from attnlab.catalog import STRING_TASKS
from attnlab.data.square_walks import SquaresBatch, squares_task
from attnlab.data.squares import check_seed

__all__ = [
    "BOS", "EOS", "FIRST_SYMBOL", "PAD", "TASKS", "TOKEN_TASKS",
    "SquaresBatch", "TaskBatch", "TaskSets", "TaskSpec", "Vocab",
    "make_task_batch", "squares_task", "target_length",
]

PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3  # content tokens are FIRST_SYMBOL .. FIRST_SYMBOL + n_symbols - 1
TOKEN_TASKS = ("copy", "reverse", "duplicate", "sort")
TASKS = (*TOKEN_TASKS, "squares", "scan", *STRING_TASKS)  # the benchmark string tasks: attnlab.data.symbol_task


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
            trained on but not scored: :mod:`attnlab.data.symbol_task`).
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


def target_length(task: str, length: int) -> int:
    """The target's length for a source of ``length`` tokens (EOS not counted): ``2 * length`` for duplicate.

    Raises:
        ValueError: for an unknown token task.
    """
    return 2 * length if _check_task(task, TOKEN_TASKS) == "duplicate" else length


def _check_task(task: Any, known: tuple[str, ...] = TASKS) -> str:
    if not isinstance(task, str) or task not in known:
        hint = ""
        if task == "squares":
            hint = " (the squares are float points, not tokens: use squares_task)"
        raise ValueError(f"task {task!r} is not one of {', '.join(known)}{hint}")
    return task


def _as_generator(generator: Any) -> torch.Generator:
    """A ``torch.Generator`` as it is, or a new one seeded with an integer."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, (int, np.integer)):
        raise TypeError(f"generator must be a torch.Generator or an integer seed, got {generator!r} "
                        f"({type(generator).__name__}); the data must come from a seeded generator of its own")
    seed = check_int("generator", int(generator), minimum=0)
    return torch.Generator().manual_seed(seed)


def make_task_batch(
    task: str,
    n: int,
    length: int,
    *,
    n_symbols: int = 10,
    min_len: int | None = None,
    generator: torch.Generator | int,
) -> TaskBatch:
    """``n`` sequences of a token task: source ``[N, S]``, decoder input and output ``[N, T]``, ``T = S + 1``.

    (``T = 2S + 1`` for ``duplicate``, whose target is the source twice.)

    Every sequence has ``length`` tokens, or, with ``min_len``, a length drawn
    uniformly from ``min_len`` to ``length`` (training on mixed lengths makes a
    model less tied to one), right-padded with ``PAD`` to ``S = length``. The
    draws come from ``generator`` on its device, in this order: the tokens
    ``[N, S]`` (padded positions included), then the lengths; so the same
    generator state gives the same tokens with or without ``min_len``.

    Args:
        task: ``"copy"``, ``"reverse"``, ``"duplicate"`` (``ww``) or ``"sort"`` (ascending, duplicates kept).
        n: how many sequences, ``N >= 1``.
        length: ``S``, the (longest) source length, at least 1.
        n_symbols: content tokens, ids ``3 .. 2 + n_symbols`` (see :class:`Vocab`).
        min_len: shortest length when lengths vary, ``1 <= min_len <= length``;
            None for every sequence at ``length``.
        generator: a ``torch.Generator`` (advanced by the draws) or an integer
            seed for a new one; never torch's global generator.

    Returns:
        A :class:`TaskBatch` on the generator's device.

    Raises:
        TypeError: naming the argument, for a non-integer count or length, or a
            ``generator`` that is neither a Generator nor an integer.
        ValueError: naming the argument and value, for an unknown task, ``n``
            or ``length`` below 1, ``n_symbols`` below 2, or ``min_len`` outside 1..length.

    Example:
        >>> b = make_task_batch("reverse", 2, 4, generator=0)
        >>> b.source.shape, b.target_in.shape, b.target_out.shape
        (torch.Size([2, 4]), torch.Size([2, 5]), torch.Size([2, 5]))
        >>> torch.equal(b.target_out[:, :4], b.source.flip(1)), b.target_out[:, 4].tolist()
        (True, [2, 2])
    """
    task = _check_task(task, TOKEN_TASKS)
    n = check_int("n", n, minimum=1)
    length = check_int("length", length, minimum=1)
    n_symbols = check_int("n_symbols", n_symbols, minimum=2)
    if min_len is not None:
        min_len = check_int("min_len", min_len, minimum=1)
        if min_len > length:
            raise ValueError(f"min_len ({min_len}) must not exceed length ({length})")
    g = _as_generator(generator)

    tokens = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + n_symbols, (n, length), generator=g,
                           device=g.device)  # [N, S]
    if min_len is None:
        lengths = torch.full((n,), length, dtype=torch.int64, device=g.device)  # [N]
    else:
        lengths = torch.randint(min_len, length + 1, (n,), generator=g, device=g.device)  # [N]
    steps = torch.arange(length, device=g.device)  # [S]
    real = steps < lengths[:, None]  # [N, S]
    source = tokens.masked_fill(~real, PAD)  # [N, S]

    if task == "copy":
        target = source.clone()
    elif task == "reverse":
        # Position j of a sequence of length L_i takes source position L_i - 1 - j; padding stays put.
        back = (lengths[:, None] - 1 - steps).clamp(min=0)  # [N, S]
        target = source.gather(1, back).masked_fill(~real, PAD)  # [N, S]
    elif task == "duplicate":
        # Position j < 2 L_i of row i takes source position j mod L_i: the string, then the string again.
        wide = torch.arange(2 * length, device=g.device)  # [2S]
        twice = wide[None, :] < 2 * lengths[:, None]  # [N, 2S]
        target = source.gather(1, wide[None, :] % lengths[:, None]).masked_fill(~twice, PAD)  # [N, 2S]
    else:
        # Padding sorts last (past every symbol), then is written back as PAD.
        target = source.masked_fill(~real, FIRST_SYMBOL + n_symbols).sort(dim=1).values.masked_fill(~real, PAD)

    target_lengths = 2 * lengths if task == "duplicate" else lengths  # [N]
    pad_col = torch.full((n, 1), PAD, dtype=torch.int64, device=g.device)  # [N, 1]
    bos_col = torch.full((n, 1), BOS, dtype=torch.int64, device=g.device)  # [N, 1]
    target_out = torch.cat([target, pad_col], dim=1).scatter(1, target_lengths[:, None], EOS)  # [N, T]
    target_in = torch.cat([bos_col, target], dim=1)  # [N, T]
    target_steps = torch.arange(target_in.shape[1], device=g.device)  # [T]
    target_real = target_steps[None, :] <= target_lengths[:, None]  # [N, T]: the target and EOS (or BOS and it)
    return TaskBatch(source, target_in, target_out, real.unsqueeze(1), target_real.unsqueeze(1), lengths,
                     target_real)


@dataclass(frozen=True)
class TaskSpec:
    """What a length-generalisation run trains and tests on.

    Args:
        task: one of ``copy``, ``reverse``, ``sort``, ``squares``.
        train_len: training length: the source length ``S`` of a token task
            (the longest, with ``min_train_len``), or the corners per walk ``K`` of ``squares``.
        test_lens: a test set at each of these lengths (usually ``train_len``
            and longer ones); distinct, each at least 1 (3 for ``squares``).
        n_train: training sequences.
        n_test: sequences per test set.
        n_symbols: content tokens of the token tasks (ignored by ``squares``).
        min_train_len: train on lengths ``min_train_len .. train_len`` (token
            tasks only); None for one length. Test sets always have one length.
        train_seed: seed of the training set (the generator seed of
            :func:`make_task_batch`, or ``squares_task``'s seed).
        test_seed: seed of the test sets, different from ``train_seed``.

    Raises:
        TypeError / ValueError: naming the field and value, for any bad field.
    """

    task: str = "copy"
    train_len: int = 8
    test_lens: tuple[int, ...] = (8, 12, 16, 24, 32)
    n_train: int = 4096
    n_test: int = 256
    n_symbols: int = 10
    min_train_len: int | None = None
    train_seed: int = 13
    test_seed: int = 19

    def __post_init__(self) -> None:
        _check_task(self.task)
        shortest = 3 if self.task == "squares" else 1  # squares: 2 corners given, at least 1 to predict
        check_int("train_len", self.train_len, minimum=shortest)
        if isinstance(self.test_lens, (str, bytes)) or not hasattr(self.test_lens, "__iter__"):
            raise TypeError(f"test_lens must be a sequence of lengths, got {self.test_lens!r}")
        lens = tuple(check_int("test_lens", v, minimum=shortest) for v in self.test_lens)
        if not lens or len(set(lens)) != len(lens):
            raise ValueError(f"test_lens must be a non-empty list of distinct lengths, got {list(self.test_lens)}")
        object.__setattr__(self, "test_lens", lens)  # a list becomes a tuple: the spec stays hashable
        check_int("n_train", self.n_train, minimum=1)
        check_int("n_test", self.n_test, minimum=1)
        Vocab(self.n_symbols)
        if self.min_train_len is not None:
            if self.task == "squares":
                raise ValueError(f"min_train_len must be None for the squares task, got {self.min_train_len}")
            check_int("min_train_len", self.min_train_len, minimum=1)
            if self.min_train_len > self.train_len:
                raise ValueError(f"min_train_len ({self.min_train_len}) must not exceed train_len "
                                 f"({self.train_len})")
        for name in ("train_seed", "test_seed"):
            value = getattr(self, name)
            if value is None:
                raise TypeError(f"{name} must be an integer, got None (the sets would not be repeatable)")
            check_seed(value, name)
        if self.train_seed == self.test_seed:
            raise ValueError(f"test_seed ({self.test_seed}) must differ from train_seed ({self.train_seed}): "
                             "the test data would repeat the training data")

    @property
    def vocab(self) -> Vocab:
        """The token vocabulary (``vocab.size`` rows of embedding)."""
        return Vocab(self.n_symbols)


class TaskSets(NamedTuple):
    """The sets :func:`attnlab.data.task.make_task_sets` builds: ``train`` and ``tests[length]``, and the spec.

    ``train`` is None where a protocol draws fresh strings at every step instead of a set.
    """

    train: TaskBatch | SquaresBatch | None
    tests: dict[int, TaskBatch | SquaresBatch]
    spec: TaskSpec
