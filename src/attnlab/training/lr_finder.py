"""The learning-rate range test: train briefly with a rising learning rate and watch the loss.

Smith (2017), "Cyclical Learning Rates for Training Neural Networks",
arXiv:1506.01186, section 3.3; the book's ``StepByStep.lr_range_test``. The
learning rate rises from the optimizer's current one to ``end_lr`` over
``num_iter`` mini-batches, either geometrically (``step_mode="exp"``) or
linearly (``"linear"``), and the loss is smoothed with an exponentially
weighted average. A good learning rate sits where the loss falls fastest,
well before it blows up.

Fixed relative to the book: ``step_mode="linear"`` really ramps linearly (the
book always ramped exponentially and only changed the axis); nothing leaks into
the training that follows: model and optimizer states, the train/eval mode of
every module and every random stream (torch, CUDA, Python, the loader's
generator) are restored, and no gradient is left in ``.grad``; an empty loader
raises instead of looping forever.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from attnlab._eval_mode import preserved_modes
from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.training.batches import unpack_batch
from attnlab.training.rng import preserved_rng

__all__ = ["STEP_MODES", "lr_range_test", "make_lr_fn"]

STEP_MODES = ("exp", "linear")


def make_lr_fn(start_lr: float, end_lr: float, num_iter: int,
               step_mode: str = "exp") -> Callable[[int], float]:
    """The book's multiplicative factor ``lr(i) / start_lr`` for iteration ``i`` of the ramp.

    ``"exp"``: ``(end_lr / start_lr) ** (i / num_iter)``; ``"linear"``:
    ``1 + i * (end_lr / start_lr - 1) / num_iter``. Both are 1 at ``i = 0`` and
    ``end_lr / start_lr`` at ``i = num_iter``.

    Raises:
        ValueError: if ``start_lr`` or ``end_lr`` is not positive, ``num_iter`` < 1,
            or ``step_mode`` is unknown.

    Example:
        >>> fn = make_lr_fn(0.01, 1.0, 2, "linear")
        >>> [round(0.01 * fn(i), 3) for i in range(3)]
        [0.01, 0.505, 1.0]
    """
    start_lr = check_finite_float("start_lr", start_lr, positive=True)
    end_lr = check_finite_float("end_lr", end_lr, positive=True)
    num_iter = check_int("num_iter", num_iter, minimum=1)
    step_mode = check_choice("step_mode", step_mode, STEP_MODES)
    ratio = end_lr / start_lr
    if step_mode == "linear":
        return lambda iteration: 1.0 + iteration * (ratio - 1.0) / num_iter
    return lambda iteration: math.exp(math.log(ratio) * iteration / num_iter)


def _plot(tracking: dict[str, list[float]], step_mode: str, ax: Any) -> Any:
    # matplotlib is imported here only: training must not pull in plotting at import time.
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    fig: Any
    if ax is None:
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
    elif not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    else:
        fig = ax.figure
    ax.plot(tracking["lr"], tracking["loss"])
    if step_mode == "exp":
        ax.set_xscale("log")
    ax.set_xlabel("Learning Rate")
    ax.set_ylabel("Loss (smoothed)")
    return fig


def lr_range_test(
    model: nn.Module,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    optimizer: Optimizer,
    data_loader: Any,
    end_lr: float,
    num_iter: int = 100,
    step_mode: str = "exp",
    alpha: float = 0.05,
    ax: Any = None,
    *,
    device: torch.device | str = "cpu",
) -> tuple[dict[str, list[float]], Any]:
    """Run the range test, then put everything back as it was.

    The loader is cycled if it has fewer than ``num_iter`` batches. Each
    parameter group's learning rate is scaled by the same factor, from its
    current value; the ramp's end is set for the first group.

    Args:
        model: the model; trained in train mode during the test.
        loss_fn: ``loss_fn(model(x), y)`` returns a scalar tensor.
        optimizer: the optimizer over ``model``'s parameters.
        data_loader: iterable of ``(x, y)`` batches.
        end_lr: the last learning rate tried; above the optimizer's current one.
        num_iter: number of mini-batches (and learning rates) tried.
        step_mode: ``"exp"`` (geometric ramp, log x-axis) or ``"linear"``.
        alpha: weight of the newest loss in the moving average, in (0, 1].
        ax: matplotlib Axes to draw into; a new figure when None.
        device: where batches are moved.

    Returns:
        ``(tracking, fig)``: ``tracking = {"lr": [...], "loss": [...]}`` with
        ``num_iter`` Python floats each (the learning rate used at each step and
        the smoothed loss), and the matplotlib Figure of loss against learning rate.

    Raises:
        ValueError: for a bad ``end_lr``, ``num_iter``, ``step_mode`` or ``alpha``,
            or an empty ``data_loader``.
        TypeError: for arguments of the wrong type.
    """
    end_lr = check_finite_float("end_lr", end_lr, positive=True)
    num_iter = check_int("num_iter", num_iter, minimum=1)
    step_mode = check_choice("step_mode", step_mode, STEP_MODES)
    alpha = check_finite_float("alpha", alpha)
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if data_loader is None:
        raise ValueError("data_loader is None; give the loader to test on")
    start_lr = float(optimizer.param_groups[0]["lr"])
    if not end_lr > start_lr:
        raise ValueError(f"end_lr must exceed the optimizer's current learning rate {start_lr}, got {end_lr}")
    lr_fn = make_lr_fn(start_lr, end_lr, num_iter, step_mode)
    base_lrs = [float(group["lr"]) for group in optimizer.param_groups]

    tracking: dict[str, list[float]] = {"lr": [], "loss": []}
    saved_model = copy.deepcopy(model.state_dict())
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    device = torch.device(device)
    with preserved_rng({"data": data_loader}), preserved_modes(model):
        model.train()
        try:
            while len(tracking["lr"]) < num_iter:
                batches = 0
                for batch in data_loader:
                    batches += 1
                    iteration = len(tracking["lr"])
                    # The learning rate is set directly rather than through LambdaLR, which would
                    # start from a previous scheduler's 'initial_lr' instead of the current rate.
                    factor = lr_fn(iteration)
                    for group, base in zip(optimizer.param_groups, base_lrs, strict=True):
                        group["lr"] = base * factor
                    x, y = unpack_batch(batch, device)
                    optimizer.zero_grad(set_to_none=True)
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    optimizer.step()
                    value = float(loss.item())
                    previous = tracking["loss"][-1] if tracking["loss"] else value
                    tracking["lr"].append(base_lrs[0] * factor)
                    tracking["loss"].append(alpha * value + (1 - alpha) * previous)
                    if len(tracking["lr"]) == num_iter:
                        break
                if batches == 0:
                    raise ValueError("data_loader yielded no batches")
        finally:
            optimizer.load_state_dict(saved_optimizer)
            model.load_state_dict(saved_model)
            # Restoring state dicts leaves .grad alone; the book's next training step then
            # accumulated onto the test's last gradients.
            optimizer.zero_grad(set_to_none=True)
            model.zero_grad(set_to_none=True)
    return tracking, _plot(tracking, step_mode, ax)
