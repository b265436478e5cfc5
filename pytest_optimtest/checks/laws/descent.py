"""Law `descent`: on a small convex problem (least squares), N steps with a closure lower the
loss from where it started, and raise it under `maximize`, with a contiguous and a
non-contiguous (transposed) param (a second contiguous one where the laws say `views: false`)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

from ...harness.blame import refused_on_purpose, told
from ...harness.ladder import MOVES
from ...harness.law_runs import descent_losses, views
from ...spec.values import resolve
from ..base import Check, Verdict
from .section import SECTION_KEY, Laws, laws_of, require_own_params


def check_descent(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "descent")
    steps = max(laws_of(case).descent_steps or 0, case.steps)
    said: list[str] = []
    evidence: dict[str, Any] = {"steps": steps, "views": views(case)}
    directions = [False] + ([True] if _names_maximize(resolve(case.optimizer)) else [])
    for maximize in directions:
        losses, closure = _losses(replace(case, kwargs={**case.kwargs, "maximize": True}) if maximize else case, steps)
        stepped = f"{steps} {'closure steps' if closure else 'steps without a closure'}"
        start, end = losses[0], losses[-1]
        if not (end > start if maximize else end < start):
            trend = ", ".join(f"{x:.4g}" for x in losses[:: max(1, len(losses) // 8)])
            raise AssertionError(
                f"{case.id}: law descent broken: {stepped} on a convex least-squares problem must "
                f"{'raise' if maximize else 'lower'} its loss{' under maximize' if maximize else ''}; it went from "
                f"{start:.6g} to {end:.6g} (losses: {trend})")
        said.append(f"{'ascent under maximize' if maximize else 'descent'} {start:.4g} -> {end:.4g}")
        evidence["maximize" if maximize else "minimize"] = {"loss_start": start, "loss_end": end}
    params = "" if views(case) else " (contiguous params only: views: false)"
    return Verdict(f"{stepped}{params}: " + "; ".join(said), evidence)


def _losses(case: Any, steps: int) -> tuple[list[float], bool]:
    """descent_losses, where an error that only the non-contiguous param brings on says so: rerun with
    both params contiguous, it steps (Distributed Shampoo's `.view` of each param in its constructor)."""
    try:
        return descent_losses(case, steps)
    except Exception as exc:  # noqa: BLE001  # re-raised unless the views alone bring it on
        if not views(case):
            raise
        try:
            descent_losses(case, steps, contiguous_only=True)
        except Exception:  # noqa: BLE001  # it raises without views too: its own error stands
            raise exc from None
        refusal = refused_on_purpose(exc)
        why = (f"it refuses them on purpose (at {refusal}): declare `laws: {{views: false}}` in {case.spec_path}" if refusal else
               "a param handled as if contiguous (`.view` where `.reshape` works, a raw pointer): the optimizer's doing; "
               "`laws: {views: false}` if it refuses views on purpose")
        raise AssertionError(f"{case.id}: law descent broken: the optimizer raised over the law's non-contiguous "
                             f"(transposed) param, and steps with both params contiguous: {told(exc)}\n  {why}") from exc


def _names_maximize(optimizer_cls: type) -> bool:
    """A `maximize` parameter by name: **kwargs alone may reject it (heavyball's do)."""
    return "maximize" in inspect.signature(optimizer_cls).parameters


LAW_DESCENT = Check("law_descent", check_descent, "steps on a convex problem lower the loss (raise it under maximize)",
                    "primary", section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.descent),
                    rungs=MOVES,  # a step that moves nothing fails descent too: the eager_moves rung's one red
                    proves=("Closure steps on a convex least-squares problem lower the loss (raise it under maximize), contiguous and not. Evidence: "
                            "the first and last loss."),
                    red="A sign error, a diverging update, a non-contiguous param mishandled: the optimizer's.")
