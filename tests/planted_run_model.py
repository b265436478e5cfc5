"""Optimizers for the run model's mechanisms (issues 32 and 38): each wrong in one way, or right
in a way that naive checks mistake for wrong (a diverging lr) or take as proof (a closure's graphs)."""

from __future__ import annotations

import torch

from planted import PlainSGD


class TypoSGD(PlainSGD):
    """A typo in the step: every step raises KeyError, so every check of every case would be red."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["momentun"])


class IdleSGD(PlainSGD):
    """Forgets to apply its update: the step runs and moves nothing."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad.mul(group["lr"])


class ExplodingSGD(PlainSGD):
    """Correct arithmetic at an lr that makes the run blow up: params grow 1e4 times a step."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.mul_(1e4).add_(p.grad, alpha=-group["lr"])


def _eager_step(self, closure=None):
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    with torch.no_grad():
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
    return loss


class UntracedStepSGD(PlainSGD):
    """A step dynamo does not trace (its own frame runs eagerly), while the frames it calls, the
    closure's among them, still compile: a closure case shows graphs that are not the step's."""

    step = torch._dynamo.disable(_eager_step, recursive=False)


class SwallowingSGD(PlainSGD):
    """Accepts any keyword (foreach, maximize, ...) and never stores or reads it."""

    def __init__(self, params, lr=0.1, **kwargs):
        super().__init__(params, lr)
