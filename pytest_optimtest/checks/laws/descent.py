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
from ..base import Check, Verdict
from .section import SECTION_KEY, Laws, laws_of, require_own_params


def check_descent(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "descent")
    steps = max(laws_of(case).descent_steps or 0, case.steps)
    said: list[str] = []
    evidence: dict[str, Any] = {"steps": steps}
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
            evidence["maximize" if maximize else "minimize"] = {"loss_start": start, "loss_end": end}
    return Verdict(f"{steps} closure steps: " + "; ".join(said), evidence)


def _names_maximize(optimizer_cls: type) -> bool:
    """A `maximize` parameter by name: **kwargs alone may reject it (heavyball's do)."""
    return "maximize" in inspect.signature(optimizer_cls).parameters


def _losses(case: Any, steps: int) -> list[float]:
    """The problem's loss before each step and after the last, measured in float64 (a bf16 loss
    cannot show the small steps a bf16 optimizer takes)."""
    seed_all(case.seed)
    at = {"device": case.device, "dtype": param_dtype(case)}
    a, b = torch.randn(8, 4).to(**at), torch.randn(8, 3).to(**at)
    target = torch.randn(4, 5).to(**at)
    contiguous = torch.nn.Parameter(torch.zeros(4, 3, **at))
    transposed = torch.nn.Parameter(torch.zeros(5, 4, **at).t())  # non-contiguous
    optimizer = make_optimizer(case, [("contiguous", contiguous), ("transposed", transposed)])

    def loss_fn(*tensors: torch.Tensor) -> torch.Tensor:
        a, b, target, contiguous, transposed = tensors
        return (a @ contiguous - b).pow(2).mean() + (transposed - target).pow(2).mean()

    def measured() -> float:
        with torch.no_grad():
            return float(loss_fn(*(t.double() for t in (a, b, target, contiguous, transposed))))

    def closure() -> torch.Tensor:
        with torch.enable_grad():
            optimizer.zero_grad()
            loss = loss_fn(a, b, target, contiguous, transposed)
            loss.backward()
        return loss

    takes_closure = "closure" in inspect.signature(optimizer.step).parameters
    losses = []
    for step in range(steps):
        seed_all(case.seed + 1 + step)
        losses.append(measured())
        if not takes_closure:
            closure()
        with torch.no_grad():  # the closure enables grad for itself, as the harness's closures do
            optimizer.step(closure) if takes_closure else optimizer.step()  # type: ignore[arg-type]
    losses.append(measured())
    return losses


LAW_DESCENT = Check("law_descent", check_descent, "steps on a convex problem lower the loss (raise it under maximize)",
                    "primary", section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.descent))
