"""SCAN's length split as a task of the length lab: :class:`ScanTask`.

SCAN (Lake & Baroni 2018; :mod:`attnlab.data.scan`) is a fixed set of 20,910
commands, not a generator of strings at any length: its "length" is the number of
actions in the answer. The training set is every command whose answer has at most
``train_len`` actions (25: Kazemnejad et al. 2023's split; 22: SCAN's own), and the
test set at length ``L`` holds the commands of exactly ``L`` actions (up to ``n_test``
of them, drawn with the spec's test seed), so a test length must be one SCAN has
(26, 27, 28, 30, 32, 33, 36, 40 and 48 beyond 25).

Token ids: ``PAD``, ``BOS``, ``EOS``, then the 13 command words and the 6 actions, one
shared vocabulary (the decoder-only model reads ``command + BOS + actions``); the
commands differ in length within a set, so a test set is decoded a command length
at a time (:meth:`attnlab.data.task.TokenTask.predict`).

Shape notation: ``N`` commands, ``S`` the longest command (9 words), ``T`` the longest answer and EOS.
"""

from __future__ import annotations

from typing import Any

import torch

from attnlab.data.scan import ACTIONS, COMMANDS, length_split, scan_pairs
from attnlab.data.square_walks import SquaresBatch
from attnlab.data.task import TokenTask
from attnlab.data.tasks import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch, TaskSets, TaskSpec

__all__ = ["LONGEST_COMMAND", "ScanTask", "scan_batch"]

#: the most words a SCAN command has ("jump around left thrice after walk opposite right twice").
LONGEST_COMMAND = 9
_IDS = {word: FIRST_SYMBOL + i for i, word in enumerate((*COMMANDS, *ACTIONS))}


def scan_batch(pairs: list[tuple[tuple[str, ...], tuple[str, ...]]]) -> TaskBatch:
    """Commands and their actions as a right-padded :class:`TaskBatch` (``source [N, S]``, targets ``[N, T]``).

    Raises:
        ValueError: for an empty list.

    Example:
        >>> b = scan_batch([(("jump", "twice"), ("I_JUMP", "I_JUMP"))])
        >>> b.source.tolist(), b.target_out.tolist()
        ([[6, 12]], [[19, 19, 2]])
    """
    if not pairs:
        raise ValueError("pairs is empty: a batch needs at least one command")
    n = len(pairs)
    S = max(len(c) for c, _ in pairs)
    T = max(len(a) for _, a in pairs) + 1
    source = torch.full((n, S), PAD, dtype=torch.int64)  # [N, S]
    target_in = torch.full((n, T), PAD, dtype=torch.int64)  # [N, T]
    target_out = torch.full((n, T), PAD, dtype=torch.int64)  # [N, T]
    for i, (command, actions) in enumerate(pairs):
        source[i, : len(command)] = torch.tensor([_IDS[w] for w in command])
        ids = torch.tensor([_IDS[a] for a in actions])
        target_in[i, 0], target_in[i, 1: len(actions) + 1] = BOS, ids
        target_out[i, : len(actions)], target_out[i, len(actions)] = ids, EOS
    lengths = torch.tensor([len(c) for c, _ in pairs])  # [N]
    source_mask = (torch.arange(S) < lengths[:, None]).unsqueeze(1)  # [N, 1, S]
    real = target_out != PAD  # [N, T]: the actions and EOS
    return TaskBatch(source, target_in, target_out, source_mask, real.unsqueeze(1), lengths, real)


class ScanTask(TokenTask):
    """SCAN's length split: commands in, actions out, the length being the answer's actions.

    Example:
        >>> task = ScanTask()
        >>> sets = task.sets(TaskSpec(task="scan", train_len=25, test_lens=(26, 48), n_train=10**6, n_test=8))
        >>> sets.train.source.shape[0], {n: b.target_out.shape for n, b in sets.tests.items()}
        (17774, {26: torch.Size([8, 27]), 48: torch.Size([8, 49])})
    """

    name = "scan"
    draws_fresh = False  # a fixed set of commands
    variable_lengths = False  # the training set is the split's, every command up to train_len actions

    def __init__(self) -> None:  # one task, no name to choose
        pass

    def sets(self, spec: TaskSpec) -> TaskSets:
        """Every command of at most ``train_len`` actions (``n_train`` of them, drawn, if fewer), and per test length
        up to ``n_test`` commands of exactly that many actions.

        Raises:
            ValueError: naming the test lengths SCAN has no command of.
        """
        train, _ = length_split(max_train_actions=spec.train_len)
        by_length: dict[int, list[Any]] = {}
        for pair in scan_pairs():
            by_length.setdefault(len(pair[1]), []).append(pair)
        missing = [n for n in spec.test_lens if n not in by_length]
        if missing:
            raise ValueError(f"test_lens {missing}: SCAN has no command of that many actions (it has "
                             f"{', '.join(map(str, sorted(by_length)))})")
        g = torch.Generator().manual_seed(spec.train_seed)
        if spec.n_train < len(train):
            train = tuple(train[i] for i in sorted(torch.randperm(len(train), generator=g)[: spec.n_train].tolist()))
        tests: dict[int, TaskBatch | SquaresBatch] = {}
        for n in sorted(spec.test_lens):
            pool = by_length[n]
            g = torch.Generator().manual_seed(spec.test_seed * 1000 + n)
            chosen = sorted(torch.randperm(len(pool), generator=g)[: spec.n_test].tolist())
            tests[n] = scan_batch([pool[i] for i in chosen])
        return TaskSets(scan_batch(list(train)), tests, spec)

    def draw(self, n: int, length: int, *, generator: torch.Generator | int, min_len: int | None = None,
             n_symbols: int = 10) -> TaskBatch:
        """Refused: SCAN is a fixed set of commands, not a generator.

        Raises:
            ValueError: always (use a protocol that trains on a fixed set).
        """
        raise ValueError("the scan task is a fixed set of commands: it cannot draw fresh strings "
                         "(use --protocol fixed or kazemnejad2023)")

    def model_io(self, n_symbols: int) -> dict[str, int | None]:
        """The 13 command words and 6 actions after the special tokens (``n_symbols`` is not used)."""
        return {"vocab_size": FIRST_SYMBOL + len(COMMANDS) + len(ACTIONS), "n_features": None}

    def target_length(self, length: int) -> int:
        """The answer's actions: the length itself."""
        return length

    def sequence_length(self, length: int, architecture: str) -> int:
        """The longest command (9 words), BOS and ``length`` actions and EOS, as each architecture lays them out."""
        if architecture == "decoder-only":
            return LONGEST_COMMAND + length + 1
        if architecture == "encoder-only":
            return LONGEST_COMMAND + length
        return max(LONGEST_COMMAND, length + 1)

    def chance(self, metric: str, *, n_symbols: int, length: int) -> float | None:
        """Guessing each action uniformly among the 6: ``1/6`` per token, that to the length per answer.

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        return super().chance(metric, n_symbols=len(ACTIONS), length=length)
