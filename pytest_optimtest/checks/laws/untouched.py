"""Laws `untouched` and `zero_grads`: a step leaves alone what has no gradient. A param whose
grad is None does not move and gets no state (weight decay applied to a missing grad, or a
None grad taken as zero, breaks it); and, declared for optimizers without decay, zero grads
from fresh state move nothing."""

from __future__ import annotations

from typing import Any

import torch

from ...harness.isolation import isolated_case
from ...harness.law_runs import has_grad, law_grads, law_params, law_trajectory
from ..base import Check, Vacuous, Verdict
from ...harness.compare import max_movement
from ...spec.schema import Tolerance
from .section import SECTION_KEY, Laws, HORIZON_TRIED, law_horizon, law_tolerance, laws_of, require_own_params


def check_untouched(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "untouched")
    laws, tol = laws_of(case), law_tolerance(case)
    said: list[str] = []
    with isolated_case(case):
        params = law_params(case, laws.min_ndim, laws.empty)
        # how far params move with a grad at every step: a step that moves nothing leaves everything alone
        steps, active = law_horizon(case, params, tol)
        evidence: dict[str, Any] = {"steps": steps}
        evidence["moved_with_grads_tolerances"] = round(active, 3)
        if active < case.min_movement:
            raise Vacuous(f"{case.id}: vacuous: law untouched: params with a grad moved at most {active:.3g} tolerances "
                          f"in {steps} steps (need {case.min_movement:g}; {HORIZON_TRIED}), so params without one staying put proves nothing")
        if laws.untouched:
            _without_grads(case, params, law_grads(case, steps, params), steps, tol)
            said.append(f"params without a grad stayed within tolerance and got no state over {steps} steps")
            evidence["untouched"] = True
        if laws.zero_grads:
            _zero_grads(case, params, steps, tol)
            said.append(f"zero grads moved nothing over {steps} steps")
            evidence["zero_grads"] = True
    return Verdict("; ".join(said) + f"; with grads they moved {active:.3g} tol", evidence)


def moves_gradless_params(case: Any, runs: Any) -> str | None:
    """Law untouched's red, first line, where the case declares the law and its step moves a param whose grad
    is None: the root cause of a later joiner's or a grad-None step's difference (late_joiners, two optimizers
    in backward). None where the law holds, is not declared, or is not judged."""
    if not laws_of(case).untouched:
        return None
    try:
        check_untouched(case, runs)
    except AssertionError as exc:
        return str(exc).splitlines()[0]
    except Exception:  # noqa: BLE001  # vacuous, not applicable, or raised: no difference of that cause
        return None
    return None


def _without_grads(case: Any, params: dict[str, torch.nn.Parameter], grads: list, steps: int, tol: Tolerance) -> None:
    run = law_trajectory(case, params, grads)
    for step in range(steps):
        before, after = run.params_after(step), run.params_after(step + 1)
        for name in params:
            if has_grad(name, step):
                continue
            moved = max_movement({name: before[name]}, {name: after[name]}, tol)
            if moved > 1:
                raise AssertionError(f"{case.id}: law untouched broken: a param whose grad is None must not move; "
                                     f"{name!r} (grad None at step {step + 1}) moved {moved:.3g} tolerances in that step "
                                     "(weight decay or momentum applied without a grad?)")
            new = run.state_keys(step + 1, name) - run.state_keys(0, name)  # beyond what the constructor made
            if new and not any(has_grad(name, s) for s in range(step + 1)):
                raise AssertionError(f"{case.id}: law untouched broken: a param that has had no grad yet must get no new "
                                     f"state; {name!r} got {sorted(new)} by step {step + 1}")


def _zero_grads(case: Any, params: dict[str, torch.nn.Parameter], steps: int, tol: Tolerance) -> None:
    zeros: dict[str, torch.Tensor | None] = {name: torch.zeros_like(p) for name, p in params.items()}
    run = law_trajectory(case, params, [zeros] * steps)
    for step in range(1, steps + 1):
        after = run.params_after(step)
        moved = [name for name in params if max_movement({name: run.initial[name]}, {name: after[name]}, tol) > 1]
        if moved:
            raise AssertionError(f"{case.id}: law zero_grads broken: with every grad zero from fresh state, no param may "
                                 f"move; {moved} moved at step {step} (a decay or a floor on the step moves them: "
                                 "then do not declare zero_grads)")


LAW_UNTOUCHED = Check("law_untouched", check_untouched, "what has no gradient is left alone", "primary",
                      section=Laws, section_key=SECTION_KEY,
                      declared=lambda laws: bool(laws and (laws.untouched or laws.zero_grads)),
                      proves=("A param whose grad is None does not move and gets no state (with `zero_grads`: all-zero grads move nothing). Evidence:"
                              " the params with and without grads, and how far the former moved."),
                      red="Weight decay or momentum applied to a param without a grad, or state created for it: the optimizer's.")
