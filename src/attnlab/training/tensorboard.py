"""TensorBoard logging, imported only when asked for.

The ``tensorboard`` package is optional: attnlab does not depend on it, and
``torch.utils.tensorboard`` cannot be imported without it. It is imported the
first time :meth:`Trainer.set_tensorboard` needs a writer, and its absence is
reported as an ``ImportError`` that says what to install.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

__all__ = ["make_summary_writer"]


def make_summary_writer(name: str, folder: str | os.PathLike[str] = "runs") -> Any:
    """A ``SummaryWriter`` logging to ``{folder}/{name}_{YYYYmmddHHMMSS}``, as the book names runs.

    Raises:
        TypeError: if ``name`` is not a non-empty string.
        ImportError: if the ``tensorboard`` package is not installed.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(
            "set_tensorboard needs the 'tensorboard' package, which is not installed "
            "(pip install tensorboard), or pass writer= an object with add_scalars/flush/close"
        ) from exc
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    return SummaryWriter(os.path.join(os.fspath(folder), f"{name}_{stamp}"))
