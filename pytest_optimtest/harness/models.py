"""Models and data the checks train on."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..models import IN_FEATURES


def make_data(kind: str, device: str, batch: int = 10) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """(input, loss_fn). 'random': seeded randn and a squared loss, so every weight gets a
    full-rank gradient; 'ones': PyTorch's torch.ones input and sum loss (rank-1 gradients)."""
    if kind == "ones":
        return torch.ones(batch, IN_FEATURES, device=device), lambda out: out.sum()
    return torch.randn(batch, IN_FEATURES, device=device), lambda out: out.pow(2).sum()
