"""Mini-batches of a task's set (token tasks or squares), fetched with one indexing op each.

Shape notation: ``N`` rows in a set, ``B`` in a mini-batch.
"""

from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from attnlab._validate import check_int
from attnlab.data.squares.walks import SquaresBatch
from attnlab.data.tasks.tokens import TaskBatch

__all__ = ["TaskDataset", "task_loader"]


class TaskDataset(Dataset[TaskBatch | SquaresBatch]):
    """A :class:`TaskBatch` or :class:`SquaresBatch` as a Dataset of its rows.

    Indexing with a list of rows returns the batch of those rows (every field
    indexed at once), which is how :func:`task_loader` fetches a mini-batch.

    Args:
        batch: the set, ``N`` rows.

    Raises:
        TypeError: if ``batch`` is not a :class:`TaskBatch` or :class:`SquaresBatch`.
    """

    def __init__(self, batch: TaskBatch | SquaresBatch) -> None:
        if not isinstance(batch, (TaskBatch, SquaresBatch)):
            raise TypeError(f"batch must be a TaskBatch or SquaresBatch, got {type(batch).__name__}")
        self.batch = batch

    def __len__(self) -> int:
        return self.batch[0].shape[0]

    def __getitem__(self, index: int | list[int] | torch.Tensor) -> TaskBatch | SquaresBatch:
        index = torch.as_tensor(index, dtype=torch.int64, device=self.batch[0].device)
        return type(self.batch)(*(None if t is None else t[index] for t in self.batch))  # type: ignore[arg-type]


def task_loader(
    batch: TaskBatch | SquaresBatch,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> DataLoader[TaskBatch | SquaresBatch]:
    """Mini-batches of a task's set, fetched with one indexing op each.

    The data is moved to ``device`` once; every mini-batch is then one gather
    there, yielded as a :class:`TaskBatch` (or :class:`SquaresBatch`) of ``B``
    rows. Shuffling uses the loader's own ``torch.Generator`` (``loader.generator``,
    seeded with ``seed``), the house pattern of :func:`attnlab.data.make_loaders`.

    Args:
        batch: the set, e.g. ``make_task_sets(spec).train``.
        batch_size: rows per mini-batch, ``B >= 1``; the last one may be smaller.
        shuffle: a new order every epoch (training); in order when False (testing).
        seed: the loader generator's seed.
        device: where the mini-batches live; the set's device when None.

    Returns:
        A DataLoader yielding batches of the same type as ``batch``.

    Raises:
        TypeError / ValueError: naming the argument, for a bad set, ``batch_size``,
            ``shuffle`` or ``seed``.
    """
    dataset = TaskDataset(batch if device is None else batch.to(device))
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if not isinstance(shuffle, bool):
        raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    # Even an unshuffled loader draws a base seed per epoch: from g, not torch's global generator.
    order = RandomSampler(dataset, generator=g) if shuffle else SequentialSampler(dataset)
    return DataLoader(dataset, batch_size=None, generator=g,
                      sampler=BatchSampler(order, batch_size, drop_last=False))
