"""The noisy squares walked further as a task of the length lab: :class:`SquaresTask`.

The corners after the given ones, real values (:func:`attnlab.data.squares.walks.squares_task`:
corner ``k + 4`` is corner ``k`` again, with fresh noise), decoded one after another and
scored by their mean squared error.

Shape notation: ``B`` batch, ``N`` walks, ``T`` corners to predict.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_choice
from attnlab.catalog import TOKEN_TASKS
from attnlab.data.squares.walks import BYTES_PER_CORNER, SquaresBatch, squares_task
from attnlab.data.tasks.metrics import mean_squared_error
from attnlab.data.tasks.spec import TaskSets, TaskSpec
from attnlab.data.tasks.task import ARCHITECTURES, Task
from attnlab.data.tasks.tokens import TaskBatch

__all__ = ["SquaresTask"]


class SquaresTask(Task):
    """The noisy squares walked further: the corners after the given ones, scored by their mean squared error."""

    name = "squares"
    metrics = ("mean_squared_error",)
    # The corners are decoded one after another: no slots to fill in one pass.
    architectures = ("decoder-only", "encoder-decoder")
    shortest = 3  # 2 corners given, at least 1 to predict
    variable_lengths = False  # every training walk has train_len corners

    def check_architecture(self, architecture: str) -> str:
        """``architecture`` if it decodes the corners one after another.

        Raises:
            ValueError: for ``"encoder-only"`` (and an unknown architecture).
        """
        check_choice("architecture", architecture, ARCHITECTURES)
        if architecture not in self.architectures:
            raise ValueError(f"architecture {architecture!r} takes the token tasks ({', '.join(TOKEN_TASKS)}): "
                             "the squares are decoded corner by corner")
        return architecture

    def describe(self, architecture: str) -> str:
        """``"squares"``: the corners are a walk, whatever reads them."""
        return self.name

    def check_symbols(self, n_symbols: int | None) -> int | None:
        """None: the corners are real values, with no alphabet to size.

        Raises:
            ValueError: naming ``n_symbols`` and its value, for any size.
        """
        if n_symbols is not None:
            raise ValueError(f"n_symbols {n_symbols!r}: the squares task has no vocabulary to size (its corners are "
                             f"real values); n_symbols sizes the alphabet of {', '.join(TOKEN_TASKS)} only")
        return None

    def data_bytes(self, n: int, length: int) -> int:
        """The bytes ``n`` walks of ``length`` corners keep: float32 ``(x, y)`` corners, an int64 direction a walk."""
        return n * (length * 2 * 4 + 8)

    def draw_bytes(self, n: int, length: int) -> int:
        """At most the bytes drawing ``n`` walks of ``length`` corners holds at once (:data:`BYTES_PER_CORNER`)."""
        return n * length * BYTES_PER_CORNER

    def sets(self, spec: TaskSpec) -> TaskSets:
        """``n_train`` walks of ``train_len`` corners, and the same ``n_test`` test walks taken to each length.

        Raises:
            ValueError: what :meth:`~attnlab.data.tasks.task.Task.check_sets` raises, before any walk is drawn.
        """
        self.check_sets(spec)
        tests: dict[int, TaskBatch | SquaresBatch] = {}
        train = squares_task(spec.n_train, spec.train_len, seed=spec.train_seed)
        for length in sorted(spec.test_lens):
            tests[length] = squares_task(spec.n_test, length, seed=spec.test_seed)
        return TaskSets(train, tests, spec)

    def model_io(self, n_symbols: int | None = None) -> dict[str, int | None]:
        """Corners ``(x, y)`` in and out.

        Raises:
            ValueError: for an ``n_symbols``: the corners are real values, not symbols.
        """
        self.check_symbols(n_symbols)
        return {"vocab_size": None, "n_features": 2}

    def sequence_length(self, length: int, architecture: str) -> int:
        """The corners of the walk."""
        return length

    def loss(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """MSE on the corners after the given ones (the walk continues itself, or teacher forcing)."""
        if architecture == "decoder-only":
            n_given = batch.source.shape[1]
            pred = model(batch.full[:, :-1])[:, n_given - 1:]  # [B, T, 2]
            return F.mse_loss(pred, batch.target)
        # Decoder inputs: the target shifted right, starting from the last given corner.
        target_in = torch.cat([batch.source[:, -1:], batch.target[:, :-1]], dim=1)  # [B, T, 2]
        return F.mse_loss(model(batch.source, target_in), batch.target)

    def predict(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """``[N, T, 2]`` corners, decoded one after another."""
        generate = cast(Any, model).generate
        if architecture == "decoder-only":
            return cast(Tensor, generate(batch.source, batch.target.shape[1]))
        return cast(Tensor, generate(batch.source, batch.target.shape[1], start=batch.source[:, -1:]))

    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """The mean squared error of the predicted corners ``pred [N, T, 2]``."""
        return {"mean_squared_error": mean_squared_error(pred, batch.target)}
