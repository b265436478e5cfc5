"""Model factories a spec can name in `model:`; each is called as factory(device=...)."""

from __future__ import annotations

import torch

IN_FEATURES = 10


def two_linear(device: str = "cpu") -> torch.nn.Module:
    """PyTorch's compiled-optimizer model: two Linear(10, 10) layers with biases."""
    return torch.nn.Sequential(*[torch.nn.Linear(IN_FEATURES, IN_FEATURES, device=device) for _ in range(2)])


def two_linear_no_bias(device: str = "cpu") -> torch.nn.Module:
    """Two Linear(10, 10) layers without biases: only 2-D params (Muon's requirement)."""
    return torch.nn.Sequential(
        *[torch.nn.Linear(IN_FEATURES, IN_FEATURES, bias=False, device=device) for _ in range(2)]
    )
