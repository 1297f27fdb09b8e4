"""The noisy squares as a torch Dataset, and the train/test loaders of the main job.

The positional-encoding lab and the attention lab build their loaders from
:func:`generate_sequences`: 128 training squares (seed 13), batches of 16
shuffled by a ``torch.Generator`` of the loader's own, and a test set that is
meant to be the seed-19 squares but is built from the *training* points
(``full_test = torch.as_tensor(points)``), so their validation loss measures the
training set. :func:`make_loaders` builds the
same training loader and a real test loader from the seed-19 squares.

The squares come from their own ``numpy.random.RandomState`` and the training
loader has its own ``torch.Generator`` (``loader.generator``, which is also
``loader.sampler.generator``), so a trainer can save and restore its state for an
exact resume. Iterating even an unshuffled DataLoader draws a number from its
generator, or from torch's global one when it has none; by default the test loader
has none, as the labs' unseeded one: the attention lab's GRU models flip their
teacher-forcing coin with torch's global generator, so that one draw per validation
pass moves every later coin, and a run that is to match the lab's epoch by epoch
must make it too. ``test_draws_global=False`` gives the test loader a generator of
its own, and nothing here then touches a global random state.

Shape notation: ``N`` squares, ``B`` batch, ``S`` source (input) points, ``T``
target points (``S + T = 4``), ``F = 2`` coordinates.
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, SequentialSampler

from attnlab._validate import check_bool, check_choice, check_int
from attnlab.data.squares.sequences import check_seed, generate_sequences, squares_tensor
from attnlab.data.squares.square_prefixes import SquarePrefixes

__all__ = ["SquareLoaders", "SquareSequences", "make_loaders"]

_CORNERS = 4


class SquareSequences(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Noisy squares (:func:`generate_sequences`) as ``(inputs, target)`` pairs.

    Item ``i`` is ``(full[i], target[i])`` with ``inputs="full"``: in training the
    labs' models read the whole square (the source, then the target they are
    teacher-forced with). With ``inputs="source"`` it is ``(source[i],
    target[i])``: what a model is evaluated on.

    Args:
        n: how many squares, ``N >= 1``.
        seed: the generator's seed (see :func:`generate_sequences`).
        input_len: ``S``, the points given; the other ``4 - S`` are the target.
        inputs: ``"full"`` or ``"source"``, what each item's first element is.

    Attributes:
        full: float32 ``[N, 4, 2]``, the squares.
        directions: int64 ``[N]``, 1 = clockwise, 0 = counter-clockwise.
        input_len: ``S``.
        inputs: ``"full"`` or ``"source"``.

    Raises:
        TypeError / ValueError: naming the argument, for a bad ``n``, ``seed``,
            ``input_len`` (1 to 3) or ``inputs``.

    Example:
        >>> test = SquareSequences(128, seed=19, inputs="source")
        >>> [x.shape for x in test[0]], test.directions[:5].tolist()
        ([torch.Size([2, 2]), torch.Size([2, 2])], [1, 0, 1, 1, 1])
    """

    def __init__(self, n: int = 128, seed: int | None = 13, *, input_len: int = 2,
                 inputs: str = "full") -> None:
        self.input_len = check_int("input_len", input_len, minimum=1)
        if self.input_len >= _CORNERS:
            raise ValueError(f"input_len must be 1 to {_CORNERS - 1} (the rest of the 4 corners is the "
                             f"target), got {input_len}")
        self.inputs = check_choice("inputs", inputs, ("full", "source"))
        points, directions = generate_sequences(n, seed=seed)
        self.full = squares_tensor(points)  # [N, 4, 2]
        self.directions = torch.from_numpy(directions).long()  # [N]

    @property
    def source(self) -> torch.Tensor:
        """The given points ``[N, S, 2]``."""
        return self.full[:, : self.input_len]

    @property
    def target(self) -> torch.Tensor:
        """The points to predict ``[N, T, 2]``."""
        return self.full[:, self.input_len :]

    def __len__(self) -> int:
        return self.full.shape[0]

    def __getitem__(self, index: int | list[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One square ``(inputs [L, 2], target [T, 2])``, or a batch of them for a list of indices
        (``[B, L, 2]``, ``[B, T, 2]``): one gather instead of ``B`` Python calls and a stack."""
        square = self.full[index]  # [4, 2] or [B, 4, 2]
        inputs = square if self.inputs == "full" else square[..., : self.input_len, :]
        return inputs, square[..., self.input_len :, :]


class SquareLoaders(NamedTuple):
    """The ``(train_loader, test_loader)`` pair :func:`make_loaders` returns, with shortcuts.

    It unpacks as a pair; the properties reach into ``test.dataset`` (a
    :class:`SquareSequences`, or with ``variable_len`` a :class:`attnlab.data.SquarePrefixes`)
    for what the figures need. A batch's first element is a tensor, or with
    ``variable_len`` a dict of the model's keyword arguments.
    """

    train: DataLoader[tuple[Any, torch.Tensor]]
    test: DataLoader[tuple[Any, torch.Tensor]]

    @property
    def full_test(self) -> torch.Tensor:
        """The test squares ``[N, 4, 2]`` (for :func:`attnlab.compat.chapter9.sequence_pred`); with ``variable_len``,
        ``[N, 6, 2]``: the right-padded given corners, then the two that follow."""
        return cast(SquareSequences, self.test.dataset).full

    @property
    def test_directions(self) -> torch.Tensor:
        """The test squares' directions ``[N]``, 1 = clockwise."""
        return cast(SquareSequences, self.test.dataset).directions


def make_loaders(
    n_train: int = 128,
    n_test: int = 128,
    batch_size: int = 16,
    *,
    train_seed: int = 13,
    test_seed: int = 19,
    shuffle_seed: int = 0,
    input_len: int = 2,
    eval_batch_size: int | None = None,
    test_draws_global: bool = True,
    variable_len: bool = False,
    shard: tuple[int, int] | None = None,
) -> SquareLoaders:
    """The labs' loaders, with a test set that really is the seed-19 squares.

    The training loader yields ``(full [B, 4, 2], target [B, T, 2])``, shuffled
    every epoch by its own ``torch.Generator`` seeded with ``shuffle_seed``
    (``train_loader.generator``; save its ``get_state()`` to resume exactly).
    The test loader yields ``(source [B, S, 2], target [B, T, 2])`` in order.
    The defaults are the labs' procedure: iterating the test loader draws one number
    from torch's global generator, as the labs' does (``test_draws_global=False``: it
    then neither reads nor changes torch's or numpy's global random state).

    Args:
        n_train: training squares (the labs: 128).
        n_test: test squares (the labs: 128).
        batch_size: squares per batch (the labs: 16); the last batch may be smaller.
        train_seed: :func:`generate_sequences` seed of the training squares.
        test_seed: seed of the test squares; must differ from ``train_seed``.
        shuffle_seed: seed of the training loader's generator.
        input_len: ``S``, the points a model is given (``T = 4 - S``).
        eval_batch_size: squares per test batch; defaults to ``batch_size``.
            Evaluation keeps no graph, so a larger batch only saves time: the
            trainer's loss is the batch-size-weighted mean either way.
        test_draws_global: give the test loader no generator of its own (the default),
            so that iterating it draws its base seed from torch's global generator, as
            the labs' ``DataLoader(test_data, batch_size=16)`` does: one draw per pass.
            False gives it a generator of its own, seeded with ``shuffle_seed``.
        variable_len: squares of 2 to 4 given corners, right-padded and masked,
            and the two corners that follow them (:class:`attnlab.data.SquarePrefixes`):
            batches are then ``({"X": ..., "source_mask": [B, 1, 4]}, target [B, 2, 2])``,
            for ``model(**inputs)``. ``input_len`` must stay 2 (the given corners are drawn).
        shard: ``(rank, world_size)`` of a data-parallel run (``torchrun``), or None.
            The training loader then yields this rank's share of each global batch of
            ``batch_size`` squares, ``batch_size / world_size`` of them: a
            ``DistributedSampler(seed=shuffle_seed)`` draws one permutation per epoch
            from ``shuffle_seed + epoch`` (the training loop calls its ``set_epoch``) and
            rank ``r`` takes its positions ``r::world_size``, so the ranks' batches ``k``
            together are batch ``k`` of the same sampler with one replica. When
            ``world_size`` does not divide ``n_train`` the sampler repeats a few squares
            so every rank gets as many (torch's rule). The test loader is not sharded.

    Returns:
        ``(train_loader, test_loader)`` as a :class:`SquareLoaders`; the test
        squares and their directions are ``.full_test`` and ``.test_directions``
        (also ``test_loader.dataset.full`` / ``.directions``).

    Raises:
        TypeError / ValueError: naming the argument, for counts or sizes below 1,
            bad seeds, equal train and test seeds, ``input_len`` outside 1 to 3
            (or other than 2 with ``variable_len``), a ``shard`` that is not
            ``(rank, world_size)`` with ``0 <= rank < world_size``, or a ``batch_size``
            that ``world_size`` does not divide.

    Example:
        >>> train_loader, test_loader = make_loaders()
        >>> [t.shape for t in next(iter(train_loader))], [t.shape for t in next(iter(test_loader))]
        ([torch.Size([16, 4, 2]), torch.Size([16, 2, 2])], [torch.Size([16, 2, 2]), torch.Size([16, 2, 2])])
    """
    n_train = check_int("n_train", n_train, minimum=1)
    n_test = check_int("n_test", n_test, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if eval_batch_size is None:
        eval_batch_size = batch_size
    eval_batch_size = check_int("eval_batch_size", eval_batch_size, minimum=1)
    shuffle_seed = check_int("shuffle_seed", shuffle_seed, minimum=0)
    test_draws_global = check_bool("test_draws_global", test_draws_global)
    if check_bool("variable_len", variable_len) and input_len != 2:
        raise ValueError(f"input_len must stay 2 with variable_len (2 to 4 corners are drawn per square), "
                         f"got {input_len!r}")
    for name, value in (("train_seed", train_seed), ("test_seed", test_seed)):
        if value is None:
            raise TypeError(f"{name} must be an integer, got None (the run would not be repeatable)")
        check_seed(value, name)
    if train_seed == test_seed:
        raise ValueError(f"test_seed ({test_seed}) must differ from train_seed ({train_seed}): "
                         "the test squares would be the training squares")
    if shard is not None:
        rank, world_size = _check_shard(shard)
        if batch_size % world_size:
            raise ValueError(f"batch_size {batch_size} is not divisible by the {world_size} processes training "
                             "together: each takes an equal share of every batch")

    train: Dataset[tuple[Any, torch.Tensor]]
    test: Dataset[tuple[Any, torch.Tensor]]
    if variable_len:
        train = SquarePrefixes(n_train, train_seed, inputs="full")
        test = SquarePrefixes(n_test, test_seed, inputs="source")
    else:
        train = SquareSequences(n_train, train_seed, input_len=input_len, inputs="full")
        test = SquareSequences(n_test, test_seed, input_len=input_len, inputs="source")
    # Whole batches are fetched with one index list (batch_size=None + a BatchSampler):
    # the same batches, in the same order, as DataLoader(shuffle=True, generator=g), whose
    # random draws (the iterator's base seed, then the permutation) come from the same g.
    g = torch.Generator().manual_seed(shuffle_seed)
    if shard is None:
        order: Any = RandomSampler(train, generator=g)
    else:
        # g then only gives the iterator's base seed; the order comes from shuffle_seed + epoch, on every rank alike.
        order = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=shuffle_seed)
        batch_size //= world_size
    train_loader = DataLoader(train, batch_size=None, generator=g,
                              sampler=BatchSampler(order, batch_size, drop_last=False))
    # Unshuffled, but iterating it still draws a base seed: from this generator, or (as the labs') torch's global one.
    test_g = None if test_draws_global else torch.Generator().manual_seed(shuffle_seed)
    test_loader = DataLoader(test, batch_size=None, generator=test_g,
                             sampler=BatchSampler(SequentialSampler(test), eval_batch_size, drop_last=False))
    return SquareLoaders(train_loader, test_loader)


def _check_shard(shard: Any) -> tuple[int, int]:
    """``shard`` as ``(rank, world_size)``, checked."""
    if not isinstance(shard, tuple) or len(shard) != 2:
        raise TypeError(f"shard must be a (rank, world_size) pair, got {shard!r}")
    world_size = check_int("shard world_size", shard[1], minimum=1)
    rank = check_int("shard rank", shard[0], minimum=0, maximum=world_size - 1)
    return rank, world_size
