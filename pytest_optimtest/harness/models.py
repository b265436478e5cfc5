"""Models and data the checks train on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..models import IN_FEATURES


def make_data(kind: str, device: str, batch: int = 10,
              features: int = IN_FEATURES) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """(input, loss_fn). 'random': seeded randn and a squared loss, so every weight gets a
    full-rank gradient; 'ones': PyTorch's torch.ones input and sum loss (rank-1 gradients)."""
    if kind == "ones":
        return torch.ones(batch, features, device=device), loss_for(kind)
    return torch.randn(batch, features, device=device), loss_for(kind)


def loss_for(kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The loss of a data kind: a sum over the batch, so shards' losses add up to the whole batch's."""
    if kind == "ones":
        return lambda out: out.sum()
    return lambda out: out.pow(2).sum()


def model_factory(case: Any) -> Callable[..., torch.nn.Module]:
    """The case's model factory: an import path, or a callable (a strategies.MLP blueprint)."""
    from ..spec.values import resolve

    return case.model if callable(case.model) else resolve(case.model)


def model_with_grads(case: Any) -> tuple[torch.nn.Module, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """The case's model, seeded, with grads from one backward; and its (input, loss_fn)."""
    from .devices import seed_all

    seed_all(case.seed)
    model = model_factory(case)(device=case.device)
    inputs, loss_fn = make_data(case.data, case.device)
    loss_fn(model(inputs)).backward()
    return model, inputs, loss_fn


def make_optimizer(case: Any, params: Any) -> torch.optim.Optimizer:
    """The case's optimizer over `params`, with kwargs built afresh."""
    from ..spec.values import build_kwargs, resolve

    return resolve(case.optimizer)(params, **build_kwargs(case.kwargs, case.device))


def copy_with_grads(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy that keeps .grad (deepcopy drops it)."""
    from copy import deepcopy

    twin = deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters()):
        q.grad = None if p.grad is None else p.grad.detach().clone()
    return twin
