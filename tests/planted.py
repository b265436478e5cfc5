"""Optimizers with planted faults, each caught by a check in the test suite.

They build on `PlainSGD` rather than torch.optim.SGD: calling the decorated
torch.optim step from a subclass inserts a graph break under fullgraph=True.
"""

from __future__ import annotations

import torch


class PlainSGD(torch.optim.Optimizer):
    """SGD written the simple way a third-party optimizer is."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._update()
        return loss


class CompiledOnlyDrift(PlainSGD):
    """Matches SGD eagerly; under torch.compile nudges the last parameter."""

    def _update(self) -> None:
        super()._update()
        if torch.compiler.is_compiling():
            self.param_groups[0]["params"][-1].add_(1e-3)


class EagerOnlyCounter(PlainSGD):
    """Writes an attribute only eagerly: the shape of dynamo dropping an attribute write."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.calls = 0

    def _update(self) -> None:
        if not torch.compiler.is_compiling():
            self.calls += 1
        super()._update()


class NeverCompiled(PlainSGD):
    """Its step is excluded from dynamo: without fullgraph, a 'compiled' step that silently runs eagerly."""

    step = torch.compiler.disable(PlainSGD.step)


class NoisySGD(PlainSGD):
    """SGD plus gaussian noise: draws random numbers inside step."""

    def _update(self) -> None:
        super()._update()
        for p in self.param_groups[0]["params"]:
            p.add_(torch.randn_like(p), alpha=0.01)


class SharedCountSGD(PlainSGD):
    """Its step size decays with a count shared by every instance: per-parameter
    optimizers in backward advance it several times per step."""

    steps_taken = 0  # class attribute: the planted fault

    def _update(self) -> None:
        type(self).steps_taken += 1
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.param_groups[0]["lr"] / type(self).steps_taken)


class NeedsClosure(PlainSGD):
    """Like LBFGS: step takes a required closure."""

    def step(self, closure):
        return super().step(closure)
