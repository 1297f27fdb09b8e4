"""Shared by the Transformer tests (tests/models/ and tests/models/labs/)."""

import torch
from torch import nn


def perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    """``model`` in eval mode with larger random weights.

    Freshly initialised layers barely react to position, which would hide bugs in
    how an encoding is applied or cached.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()
