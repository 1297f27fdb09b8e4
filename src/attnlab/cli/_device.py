"""``--device``, checked against this machine when a verb runs (this module imports torch).

The option itself is :func:`attnlab.cli._common.add_device_option`, torch-free like every parser.
"""

from __future__ import annotations

import torch

from attnlab.cli._common import UsageError
from attnlab.training import default_device

__all__ = ["parse_device"]


def parse_device(text: str | None) -> torch.device:
    """The device ``--device TEXT`` asks for, checked against this machine; None: the default device.

    Raises:
        UsageError: one line naming ``--device``, for a name that is not cpu, cuda,
            cuda:N or mps, CUDA or MPS that this machine (or this torch build) does not
            have, or a CUDA index beyond its GPUs.
    """
    if text is None:
        return default_device()
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(f"--device {text!r} is not a device; give cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return torch.device("cpu")  # "cpu:0" is the one CPU device too
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU was found"
            raise UsageError(f"--device {text}: CUDA is not available on this machine ({why}); use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(f"--device {text}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
        return device
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise UsageError(f"--device {text}: MPS (Apple GPUs) is not available on this machine; use --device cpu")
        return device
    raise UsageError(f"--device {text!r}: attnlab trains on cpu, cuda, cuda:N or mps, not {device.type}")
