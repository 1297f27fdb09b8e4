"""The progress bar: one tqdm bar over the epochs of a ``train`` call, showing the latest losses.

``progress=None`` (the default) means automatic: a bar when stderr is a
terminal, none when it is redirected to a file, a pipe or a test's capture, so
logs are not filled with carriage returns. ``True`` and ``False`` force it.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

__all__ = ["check_progress", "epoch_bar", "progress_enabled"]


def check_progress(progress: Any) -> bool | None:
    """``progress`` if it is None, True or False.

    Raises:
        TypeError: for anything else.
    """
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None (automatic), True or False, got {progress!r}")
    return progress


def progress_enabled(progress: bool | None) -> bool:
    """Whether to draw the bar: ``progress`` itself, or (None) whether stderr is a terminal."""
    if progress is not None:
        return progress
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


def epoch_bar(n_epochs: int, *, enabled: bool, first_epoch: int = 0) -> tqdm:
    """A bar over ``n_epochs`` epochs on stderr (disabled bars print nothing).

    Args:
        n_epochs: epochs this call will run.
        enabled: draw it at all.
        first_epoch: epochs already done before this call, shown in the description.
    """
    desc = "train" if first_epoch == 0 else f"train (from epoch {first_epoch + 1})"
    return tqdm(total=n_epochs, desc=desc, unit="epoch", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=True)
