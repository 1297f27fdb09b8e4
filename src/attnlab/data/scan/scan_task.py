"""SCAN's length split as a task of the length lab: :class:`ScanTask`.

SCAN (Lake & Baroni 2018; :mod:`attnlab.data.scan.grammar`) is a fixed set of 20,910
commands, not a generator of strings at any length: its "length" is the number of
actions in the answer. The training set is every command whose answer has at most
``train_len`` actions (25: Kazemnejad et al. 2023's split; 22: SCAN's own), and the
test set at length ``L`` holds the commands of exactly ``L`` actions (up to ``n_test``
of them, drawn with the spec's test seed), so a test length must be one SCAN has
(26, 27, 28, 30, 32, 33, 36, 40 and 48 beyond 25).

Token ids: ``PAD``, ``BOS``, ``EOS``, then the 13 command words, the 6 actions and the
prompt's two words ``Solve`` and ``:``, one shared vocabulary. Kazemnejad et al.'s
``scan_bos`` processor (the one of their ``mdlen_`` splits) writes every command as
``f"Solve: {command}"`` (src/data/data_instance_processor/scan_instance_processor.py,
line 44) and the model reads it, ``"[SEP] "`` (configs/data/scan.jsonnet) and the
actions; so by default the source is ``Solve : command`` and the decoder-only model
reads ``Solve : command BOS actions EOS``, ``BOS`` standing where they have ``[SEP]``
(:mod:`attnlab.data.tasks.prompts` says how the words become tokens). ``ScanTask(prompt=False)``
gives the bare ``command + BOS + actions``. The commands differ in length within a
set, so a test set is decoded a command length at a time
(:meth:`attnlab.data.tasks.token_task.TokenTask.predict`).

:class:`ScanTask` is the lab's one token task with SCAN's sets: what its strings are
(alphabets, widths, chance) is :class:`ScanCommands`, which draws nothing, and the sets
come from the split.

Shape notation: ``N`` commands, ``S`` the longest source (the prompt and up to 9 words), ``T`` the longest
answer and EOS.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from attnlab._validate import check_bool, check_int
from attnlab.data.scan.grammar import ACTIONS, COMMANDS, length_split, scan_pairs
from attnlab.data.squares.walks import SquaresBatch
from attnlab.data.tasks.prompts import Prompt
from attnlab.data.tasks.spec import TaskSets, TaskSpec
from attnlab.data.tasks.strings import Strings
from attnlab.data.tasks.token_task import TokenTask
from attnlab.data.tasks.tokens import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch

__all__ = ["LONGEST_COMMAND", "SCAN_PROMPT", "ScanCommands", "ScanTask", "scan_batch"]

#: the most words a SCAN command has ("jump around left thrice after walk opposite right twice").
LONGEST_COMMAND = 9
#: Kazemnejad et al.'s prompt: ``f"Solve: {command}"`` (their ``scan_bos`` processor).
SCAN_PROMPT = Prompt("Solve: {x}", source="src/data/data_instance_processor/scan_instance_processor.py:44")
_IDS = {word: FIRST_SYMBOL + i for i, word in enumerate((*COMMANDS, *ACTIONS))}
_FIRST_WORD = len(COMMANDS) + len(ACTIONS)  # the prompt's words follow the actions


def scan_batch(pairs: list[tuple[tuple[str, ...], tuple[str, ...]]], *, prompt: bool = True) -> TaskBatch:
    """Commands and their actions as a right-padded :class:`TaskBatch` (``source [N, S]``, targets ``[N, T]``).

    Args:
        pairs: ``(command words, actions)`` pairs, as :func:`attnlab.data.scan.grammar.scan_pairs` gives them.
        prompt: the source is ``Solve : command`` (Kazemnejad et al.'s), or the bare command.

    Raises:
        ValueError: for an empty list.

    Example:
        >>> b = scan_batch([(("jump", "twice"), ("I_JUMP", "I_JUMP"))])
        >>> b.source.tolist(), b.target_out.tolist()  # Solve (22), : (23), jump (6), twice (12)
        ([[22, 23, 6, 12]], [[19, 19, 2]])
    """
    if not pairs:
        raise ValueError("pairs is empty: a batch needs at least one command")
    prompt = check_bool("prompt", prompt)
    n = len(pairs)
    words = SCAN_PROMPT.fixed if prompt else 0  # the prompt's tokens before every command
    S = words + max(len(c) for c, _ in pairs)
    T = max(len(a) for _, a in pairs) + 1
    source = torch.full((n, S), PAD, dtype=torch.int64)  # [N, S]
    target_in = torch.full((n, T), PAD, dtype=torch.int64)  # [N, T]
    target_out = torch.full((n, T), PAD, dtype=torch.int64)  # [N, T]
    for i, (command, actions) in enumerate(pairs):
        ids = torch.tensor([[_IDS[w] for w in command]])  # [1, len(command)]
        if prompt:
            ids = SCAN_PROMPT.frame(ids, first_word=FIRST_SYMBOL + _FIRST_WORD)  # [1, words + len(command)]
        source[i, : ids.shape[1]] = ids[0]
        ids = torch.tensor([_IDS[a] for a in actions])
        target_in[i, 0], target_in[i, 1: len(actions) + 1] = BOS, ids
        target_out[i, : len(actions)], target_out[i, len(actions)] = ids, EOS
    lengths = torch.tensor([words + len(c) for c, _ in pairs])  # [N]
    source_mask = (torch.arange(S) < lengths[:, None]).unsqueeze(1)  # [N, 1, S]
    real = target_out != PAD  # [N, T]: the actions and EOS
    return TaskBatch(source, target_in, target_out, source_mask, real.unsqueeze(1), lengths, real)


@lru_cache(maxsize=1)
def _by_length() -> dict[int, tuple[Any, ...]]:
    """SCAN's commands by their answer's number of actions (the lengths it has: 1 to 48, some missing)."""
    by_length: dict[int, list[Any]] = {}
    for pair in scan_pairs():
        by_length.setdefault(len(pair[1]), []).append(pair)
    return {n: tuple(pairs) for n, pairs in sorted(by_length.items())}


class ScanCommands:
    """SCAN as the token task reads its strings: one alphabet of command words, actions and prompt words.

    What :class:`~attnlab.data.tasks.token_task.TokenTask` asks of a string generator
    (alphabets, widths, chance), for a fixed set: the sets come from the split
    (:meth:`ScanTask.sets`), so :meth:`sample` draws nothing.

    Args:
        prompt: the commands carry the prompt ``Solve :`` (Kazemnejad et al.'s).

    Attributes:
        name: ``"scan"``.
        input_size: 13 command words, 6 actions and, with the prompt, its 2 words (one shared alphabet).
        output_size: the same.
        shortest: 1.
        prompt: as given.

    Raises:
        TypeError: for a ``prompt`` that is not a bool.
    """

    name = "scan"
    shortest = 1

    def __init__(self, *, prompt: bool = True) -> None:
        self.prompt = check_bool("prompt", prompt)
        self.input_size = self.output_size = _FIRST_WORD + (len(SCAN_PROMPT.words) if self.prompt else 0)

    def __repr__(self) -> str:
        return "ScanCommands()" if self.prompt else "ScanCommands(prompt=False)"

    def input_length(self, length: int) -> int:
        """The widest source: the prompt and the longest command (2 + 9 tokens), whatever the answer's ``length``."""
        return (SCAN_PROMPT.fixed if self.prompt else 0) + LONGEST_COMMAND

    def output_length(self, length: int) -> int:
        """The answer's actions: ``length`` itself."""
        return check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """``1/6``: one of the 6 actions guessed uniformly."""
        return 1 / len(ACTIONS)

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """Refused: SCAN is a fixed set of commands, not a generator.

        Raises:
            ValueError: always (use a protocol that trains on a fixed set).
        """
        raise ValueError("the scan task is a fixed set of commands: it cannot draw fresh strings "
                         "(use --protocol fixed or kazemnejad2023)")


class ScanTask(TokenTask):
    """SCAN's length split: commands in, actions out, the length being the answer's actions.

    The one token task of the lab, with SCAN's sets (:meth:`sets`) instead of drawn ones.

    Args:
        prompt: every source is ``Solve : command``, Kazemnejad et al.'s (default); False: the
            bare command.

    Raises:
        TypeError: for a ``prompt`` that is not a bool.

    Example:
        >>> task = ScanTask()
        >>> sets = task.sets(TaskSpec(task="scan", train_len=25, test_lens=(26, 48), n_train=10**6, n_test=8))
        >>> sets.train.source.shape[0], {n: b.target_out.shape for n, b in sets.tests.items()}
        (17774, {26: torch.Size([8, 27]), 48: torch.Size([8, 49])})
    """

    draws_fresh = False  # a fixed set of commands
    variable_lengths = False  # the training set is the split's, every command up to train_len actions

    def __init__(self, *, prompt: bool = True) -> None:
        commands = ScanCommands(prompt=prompt)
        super().__init__(commands)
        self.prompt = commands.prompt

    def __repr__(self) -> str:
        return "ScanTask()" if self.prompt else "ScanTask(prompt=False)"

    @property
    def prompt_length(self) -> int:
        """The prompt's tokens before every command: 2 (``Solve :``), 0 without it."""
        return SCAN_PROMPT.fixed if self.prompt else 0

    def check_spec(self, spec: TaskSpec) -> None:
        """What every task checks (:meth:`~attnlab.data.tasks.task.Task.check_spec`), and that SCAN has commands of
        each test length's number of actions.

        Raises:
            ValueError: naming the test lengths SCAN has no command of, and the lengths it has.
        """
        super().check_spec(spec)
        missing = [n for n in spec.test_lens if n not in _by_length()]
        if missing:
            spans: list[list[int]] = []  # the lengths SCAN has; a run of three or more is written "a to b"
            for n in sorted(_by_length()):
                if spans and spans[-1][1] == n - 1:
                    spans[-1][1] = n
                else:
                    spans.append([n, n])
            has = ", ".join(f"{a} to {b}" if b > a + 1 else ", ".join(map(str, range(a, b + 1))) for a, b in spans)
            raise ValueError(f"test_lens {missing}: SCAN has no command of that many actions; its commands have "
                             f"{has} actions")

    def data_bytes(self, n: int, length: int) -> int:
        """At most the bytes of ``n`` commands of up to ``length`` actions: no more than SCAN has, whatever ``n``."""
        return super().data_bytes(min(n, len(scan_pairs())), length)

    def draw_bytes(self, n: int, length: int) -> int:
        """What the batch keeps (:meth:`data_bytes`): SCAN's commands are made a batch directly, nothing is drawn."""
        return self.data_bytes(n, length)

    def sets(self, spec: TaskSpec) -> TaskSets:
        """Every command of at most ``train_len`` actions (``n_train`` of them, drawn, if fewer), and per test length
        up to ``n_test`` commands of exactly that many actions.

        Raises:
            ValueError: what :meth:`check_spec` raises (a test length SCAN has no command of), before any set is made.
        """
        self.check_sets(spec)
        train, _ = length_split(max_train_actions=spec.train_len)
        by_length = _by_length()
        g = torch.Generator().manual_seed(spec.train_seed)
        if spec.n_train < len(train):
            train = tuple(train[i] for i in sorted(torch.randperm(len(train), generator=g)[: spec.n_train].tolist()))
        tests: dict[int, TaskBatch | SquaresBatch] = {}
        for n in sorted(spec.test_lens):
            pool = by_length[n]
            g = torch.Generator().manual_seed(spec.test_seed * 1000 + n)
            chosen = sorted(torch.randperm(len(pool), generator=g)[: spec.n_test].tolist())
            tests[n] = scan_batch([pool[i] for i in chosen], prompt=self.prompt)
        return TaskSets(scan_batch(list(train), prompt=self.prompt), tests, spec)
