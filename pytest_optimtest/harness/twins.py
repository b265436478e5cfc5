"""An eager optimizer and a compiled twin over identical models: the setup of the
once-per-optimizer checks (None grads, closure graph break, state_dict round trip)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..spec.case import Case
from .compiled_run import compile_step
from .models import copy_with_grads, make_optimizer, model_with_grads
from .snapshot import OptimizerSnapshot, snapshot


@dataclass
class Twins:
    eager_model: torch.nn.Module
    eager_opt: torch.optim.Optimizer
    compiled_model: torch.nn.Module
    compiled_opt: torch.optim.Optimizer
    inputs: torch.Tensor
    loss_fn: Callable[[torch.Tensor], torch.Tensor]

    def initial(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.eager_model.named_parameters()}

    def snapshots(self) -> tuple[OptimizerSnapshot, OptimizerSnapshot]:
        """(eager, compiled) snapshots, params named as in the model."""
        return (
            snapshot(self.eager_opt, {p: n for n, p in self.eager_model.named_parameters()}),
            snapshot(self.compiled_opt, {p: n for n, p in self.compiled_model.named_parameters()}),
        )

    def compile(self, closure: Any = None, fullgraph: bool = False) -> Callable[[], None]:
        return compile_step(self.compiled_opt, closure, fullgraph)


def make_twins(case: Case) -> Twins:
    """Two identical models with grads, each with the case's optimizer."""
    model, inputs, loss_fn = model_with_grads(case)
    twin = copy_with_grads(model)
    return Twins(model, make_optimizer(case, model.parameters()), twin, make_optimizer(case, twin.parameters()), inputs, loss_fn)
