"""Law `descent`: on a small convex problem (least squares), N steps with a closure lower the
loss from where it started, and raise it under `maximize`, with a contiguous and a
non-contiguous (transposed) param."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import torch

from ...harness.builder import make_optimizer, param_dtype
from ...harness.devices import seed_all
from ...harness.isolation import isolated_case
from ...spec.values import resolve
from ..base import Check
from .section import SECTION_KEY, Laws, laws_of, require_own_params


def check_descent(case: Any, runs: Any) -> str:
    require_own_params(case, "descent")
    steps = max(laws_of(case).descent_steps or 0, case.steps)
    said = []
    with isolated_case(case):
        directions = [False] + ([True] if _names_maximize(resolve(case.optimizer)) else [])
        for maximize in directions:
            losses = _losses(replace(case, kwargs={**case.kwargs, "maximize": True}) if maximize else case, steps)
            start, end = losses[0], losses[-1]
            if not (end > start if maximize else end < start):
                trend = ", ".join(f"{x:.4g}" for x in losses[:: max(1, len(losses) // 8)])
                raise AssertionError(
                    f"{case.id}: law descent broken: {steps} closure steps on a convex least-squares problem must "
                    f"{'raise' if maximize else 'lower'} its loss{' under maximize' if maximize else ''}; it went from "
                    f"{start:.6g} to {end:.6g} (losses: {trend})")
            said.append(f"{'ascent under maximize' if maximize else 'descent'} {start:.4g} -> {end:.4g}")
    return f"{steps} closure steps: " + "; ".join(said)


def _names_maximize(optimizer_cls: type) -> bool:
    """A `maximize` parameter by name: **kwargs alone may reject it (heavyball's do)."""
    return "maximize" in inspect.signature(optimizer_cls).parameters


def _losses(case: Any, steps: int) -> list[float]:
    """The problem's loss before each step and after the last."""
    seed_all(case.seed)
    at = {"device": case.device, "dtype": param_dtype(case)}
    a, b = torch.randn(8, 4).to(**at), torch.randn(8, 3).to(**at)
    target = torch.randn(4, 5).to(**at)
    contiguous = torch.nn.Parameter(torch.zeros(4, 3, **at))
    transposed = torch.nn.Parameter(torch.zeros(5, 4, **at).t())  # non-contiguous
    optimizer = make_optimizer(case, [("contiguous", contiguous), ("transposed", transposed)])

    def loss_fn() -> torch.Tensor:
        return (a @ contiguous - b).pow(2).mean() + (transposed - target).pow(2).mean()

    def closure() -> torch.Tensor:
        with torch.enable_grad():
            optimizer.zero_grad()
            loss = loss_fn()
            loss.backward()
        return loss

    takes_closure = "closure" in inspect.signature(optimizer.step).parameters
    losses = []
    for step in range(steps):
        seed_all(case.seed + 1 + step)
        if takes_closure:
            losses.append(float(_step_with(optimizer, closure)))
        else:
            losses.append(float(closure()))
            with torch.no_grad():
                optimizer.step()
    with torch.no_grad():
        losses.append(float(loss_fn()))
    return losses


def _step_with(optimizer: torch.optim.Optimizer, closure: Any) -> torch.Tensor:
    """The loss the closure computed before the update (a step may return something else, or nothing)."""
    seen: list[torch.Tensor] = []

    def recording() -> torch.Tensor:
        loss = closure()
        seen.append(loss.detach())
        return loss

    with torch.no_grad():  # the closure enables grad for itself, as the harness's closures do
        optimizer.step(recording)  # type: ignore[arg-type]  # torch types closures as returning float
    return seen[0] if seen else closure().detach()


LAW_DESCENT = Check("law_descent", check_descent, "steps on a convex problem lower the loss (raise it under maximize)",
                    "primary", section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.descent))
