"""Law `equivalent`: kwargs that select an implementation (foreach, fused, a tensor lr for a
float one) do not change the run: params and state agree step by step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...harness.compare import listed, max_movement, snapshot_differences
from ...harness.isolation import isolated_case
from ...harness.snapshot import OptimizerSnapshot, rebuilt
from ...harness.law_runs import law_grads, law_params, law_trajectory, schedule_in_words
from ...harness.ladder import MOVES
from ..base import Check, Vacuous, Verdict
from .section import SECTION_KEY, Laws, HORIZON_TRIED, law_horizon, law_tolerance, laws_of, require_own_params, validate_laws


def check_equivalent(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "equivalent")
    laws, tol = laws_of(case), law_tolerance(case)
    compared: list[str] = []
    evidence: dict[str, Any] = {}
    with isolated_case(case):
        params = law_params(case, laws.min_ndim, laws.empty)
        longest = 0
        for name, variants in laws.equivalent.items():
            steps, _ = law_horizon(case, params, tol, overrides=variants[0], scheduled=True)
            longest = max(longest, steps)
            grads = law_grads(case, steps, params)
            variant_runs = [law_trajectory(case, params, grads, kwargs) for kwargs in variants]
            for run in variant_runs:
                if run.unstored:
                    raise Vacuous(f"{case.id}: vacuous: law equivalent[{name}]: {run.optimizer} accepted "
                                  f"{', '.join(run.unstored)} and kept it nowhere (not in its defaults, param groups or "
                                  "attributes), so the variants cannot run differently; drop the law, or store the kwarg")
            varied = {key for kwargs in variants for key in kwargs}
            for step in range(1, steps + 1):
                reference = _without(variant_runs[0].snapshots[step], varied)
                for kwargs, run in zip(variants[1:], variant_runs[1:]):
                    problems = snapshot_differences(*_shared_attributes(reference, _without(run.snapshots[step], varied)),
                                                    tol, (_shown(variants[0]), _shown(kwargs)))
                    if problems:
                        raise AssertionError(
                            f"{case.id}: law equivalent[{name}] broken: {_shown(kwargs)} must run like {_shown(variants[0])} "
                            f"(params and state, {schedule_in_words()}); they differ after step {step} of {steps}:"
                            + listed(problems) + _rewritten(varied, (variants[0], variant_runs[0]), (kwargs, run), step))
            moved = max_movement(variant_runs[0].initial, variant_runs[0].final, tol)
            if moved < case.min_movement:
                raise Vacuous(f"{case.id}: vacuous: under {_shown(variants[0])} the params moved at most "
                              f"{moved:.3g} tolerances in {steps} steps ({HORIZON_TRIED}); equal runs that did nothing prove nothing")
            compared.append(f"{name} ({len(variants)} variants, {steps} steps)")
            evidence[name] = {"variants": len(variants), "reached_optimizer": sorted(varied), "moved_tolerances": round(moved, 3), "steps": steps}
    return Verdict(f"{', '.join(compared)} agree step by step, state included", {"steps_compared": longest, **evidence})


def _rewritten(keys: set[str], reference: tuple[dict[str, Any], Any], variant: tuple[dict[str, Any], Any], step: int) -> str:
    """Why the variants differ where one's group values of the varied keys took another course than the other's up to
    `step` (fairseq's Adamax: `step_size = group["lr"]; step_size /= bias_correction` divides a tensor lr in place,
    and leaves a float one as it was), else ''."""
    for key in sorted(keys):
        for index in range(len(reference[1].snapshots[0].groups)):
            courses = [[_number(snap.groups[index].get(key)) for snap in run.snapshots[:step + 1]] for _, run in (reference, variant)]
            if None in courses[0] + courses[1] or torch.allclose(torch.tensor(courses[0]), torch.tensor(courses[1]), rtol=1e-5):
                continue
            shown = [", ".join(f"{v:.4g}" for v in course) for course in courses]
            return (f"\ndiagnosis: group {index}'s {key} took another course under {_shown(variant[0])} ({shown[1]}, from "
                    f"construction to step {step}) than under {_shown(reference[0])} ({shown[0]}): the step writes it, a "
                    f"tensor in place (`x = group['{key}']; x /= ...` divides the group's own tensor, and rebinds a float): "
                    "the optimizer's doing")
    return ""


def _number(value: Any) -> float | None:
    """A group value as the comparison reads it (_numbers), where it is one number; else None."""
    number = _numbers(value)
    return float(number) if isinstance(number, torch.Tensor) and number.dtype == torch.float64 and number.dim() == 0 else None


def _without(snap: OptimizerSnapshot, keys: set[str]) -> OptimizerSnapshot:
    """The snapshot less the group entries and attributes the variants set differently by design,
    and with every number, one-element tensors included, as a float64 scalar tensor compared within
    tolerance: a tensor lr, and what the optimizer derives from it (a base_lr, a weight sum),
    equals the float it stands for, up to float32 rounding."""
    return replace(snap, groups=[{k: _numbers(v) for k, v in g.items() if k not in keys} for g in snap.groups],
                   attrs={k: _numbers(v) for k, v in snap.attrs.items() if k not in keys}, state=_numbers(snap.state))


def _shared_attributes(one: OptimizerSnapshot, other: OptimizerSnapshot) -> tuple[OptimizerSnapshot, OptimizerSnapshot]:
    """Both snapshots less the attributes only one of them has: what a variant's own code path keeps (Gefen
    caches a tensor lr's value), whose effect, if any, shows in params and state."""
    shared = one.attrs.keys() & other.attrs.keys()
    return (replace(one, attrs={k: v for k, v in one.attrs.items() if k in shared}),
            replace(other, attrs={k: v for k, v in other.attrs.items() if k in shared}))


def _numbers(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return torch.tensor(float(value.item()), dtype=torch.float64)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, torch.Size):  # a shape the state keeps (QUTEN's): ints that stay ints
        return value
    if isinstance(value, (list, tuple)):
        return rebuilt(value, (_numbers(v) for v in value))
    return value


def _shown(kwargs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in kwargs.items()) + "}"


LAW_EQUIVALENT = Check("law_equivalent", check_equivalent, "kwargs that pick an implementation do not change the run",
                       "primary", section=Laws, section_key=SECTION_KEY, validate=validate_laws,
                       declared=lambda laws: bool(laws and laws.equivalent), rungs=MOVES,
                       proves=("Each declared kwargs variant (foreach, fused, a tensor lr) runs like the first, params and state, step by step; the "
                               "kwarg must be stored in `defaults` or the groups (else vacuous: the constructor swallowed it). Evidence: variants, "
                               "steps, moved tolerances."),
                       red="An implementation path computing another update (eager and compiled share it, so parity passes it): the optimizer's.")
