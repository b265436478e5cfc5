"""Optimizer applied in backward (_apply_optimizer_in_backward) vs the same optimizer stepped normally."""

from __future__ import annotations

import contextlib
import fnmatch
from typing import Any

from ..harness import torch_api
from ..harness.blame import one_line, recompile_limit_diagnosis
from ..harness.compare import max_movement, value_differences
from ..harness.diagnosis import ordered_draws
from ..harness.law_runs import coupling, lr_scaled
from ..harness.vacuity import Blocked, require_moved
from .laws.section import laws_of
from .laws.untouched import moves_gradless_params
from .step_properties import raises_without_grads
from ..spec.param_groups import model_param_shapes
from ..harness.in_backward_run import (SECTION_KEY, CannotApply, InBackwardRun, InBackwardSpec, double_step_diagnosis,
                                       in_backward_section, matches_per_param_reference, require_param_list,
                                       run_without_hook)
from ..spec.context import SpecContext
from ..harness.ladder import MOVES
from .base import Check, NotApplicable, Vacuous, Verdict


def validate_groups(section: InBackwardSpec, spec: SpecContext) -> None:
    """Group kwargs are well-formed values; each group's names and globs select a param of the spec's
    model (when it can be built here), since a group that selects nothing compares nothing. The
    default groups (weights, biases) are not the user's words: one that selects nothing is left out."""
    declared = getattr(spec.spec, SECTION_KEY, None) is not None
    shapes = model_param_shapes(spec.spec.model) if declared else None
    names = [name for name, _ in shapes or ()]
    for i, group in enumerate(section.groups):
        spec.check_values(group.kwargs, ("in_backward", "groups", i, "kwargs"))
        for j, pattern in enumerate(group.params if shapes is not None else ()):
            if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
                raise spec.error(("in_backward", "groups", i, "params", j),
                                 f"{pattern!r} matches none of the model's params {names}")


class InBackwardDifference(AssertionError):
    """In-backward params differ from the reference's (not an error a step raised)."""


def compare_in_backward(case: Any, run: InBackwardRun, require_movement: bool = True) -> float:
    """The in-backward run's movement in tolerances; AssertionError at the first step whose params
    differ from the reference's, and on a vacuous comparison unless `require_movement` is False
    (the caller judges it); the step's own error where one raised before any difference."""
    tol, ref = case.tolerance, run.initial
    for step, ref, got in run.steps():
        require_moved(case.id, run.initial, ref, tol, 0.0, f"at step {step + 1}")
        problems = value_differences("param", ref, got, tol, ("reference", "in-backward"))
        if problems:
            raised = f" (step {len(run.reference) + 1} then raised {one_line(run.failure)})" if run.failure else ""
            raise InBackwardDifference(f"{case.id}: in-backward params differ from the reference after step {step + 1}"
                                       f"{_reference_note(case)}{raised}:\n  " + "\n  ".join(problems))
    if run.failure is not None:
        raise run.failure
    return require_moved(case.id, run.initial, ref, tol, case.min_movement if require_movement else 0.0,
                         f"over {in_backward_section(case).steps} steps")


def compared(case: Any, runs: Any, tied: bool = False, copies: int = 1) -> float:
    """compare_in_backward over the case's shared run; where it differs from one optimizer a group but
    equals one optimizer per param in hook order, the comparison proves nothing: vacuous (counted, and
    strict mode fails it until the spec declares `per_parameter`). An optimizer drawing from torch's RNG
    matches that reference too; the session says why for it."""
    try:
        return compare_in_backward(case, in_backward_run(case, runs, tied, copies))
    except InBackwardDifference as exc:
        ladder = runs.ladder(case)
        ladder.first_failure(MOVES)  # climbed, so that its draws are known (a session has climbed it already)
        if ordered_draws(ladder.draws) or not matches_per_param_reference(case, tied, copies):
            raise  # an optimizer drawing from torch's RNG: the session's not-comparable verdict says so
        coupled = coupling(case, laws_of(case).min_ndim)
        why = (coupled.evidence if coupled is not None and coupled.couples else
               "the optimizer couples params (a norm or statistic over all of them), by design")
        raise Vacuous(
            f"{case.id}: vacuous: not comparable with one optimizer a group: in-backward differs from it ({str(exc).splitlines()[1].strip()}), "
            "and equals one optimizer per param stepped in hook order at every step, which is what "
            f"_apply_optimizer_in_backward builds: {why}; declare `in_backward: {{per_parameter: \"<why>\"}}` in "
            f"{case.location} to compare with that reference") from None
    except Exception as exc:  # noqa: BLE001  # the step's own error; one that in-backward's many optimizers explain is said so
        if not torch_api.is_recompile_limit_error(exc):
            raise
        raise AssertionError(f"{case.id}: the step raised {one_line(exc)}\n  diagnosis: "
                             + recompile_limit_diagnosis(None, IN_BACKWARD_RECOMPILES)) from exc


IN_BACKWARD_RECOMPILES = "each optimizer _apply_optimizer_in_backward builds (one a param, and a copy)"


def in_backward_run(case: Any, runs: Any, tied: bool = False, copies: int = 1) -> InBackwardRun:
    """The case's shared in-backward run; NotApplicable where the case has none."""
    try:
        return runs.in_backward(case, tied, copies)
    except CannotApply as exc:
        raise NotApplicable(f"{case.id}: {exc}") from None


def _reference_note(case) -> str:
    reason = in_backward_section(case).per_parameter
    return f" (reference: one optimizer per param in hook order, because {reason})" if reason else ""


def check_in_backward(case: Any, runs: Any) -> Verdict:
    moved = compared(case, runs)
    run = in_backward_run(case, runs)
    if not run.found_are_stored or run.found != run.stored:
        raise AssertionError(f"{case.id}: _get_in_backward_optimizers returned {run.found} optimizers, the params hold {run.stored}")
    if run.found != run.covered:
        raise AssertionError(f"{case.id}: expected one in-backward optimizer per param ({run.covered}), got {run.found}")
    steps = in_backward_section(case).steps
    return Verdict(f"{steps} steps equal{_reference_note(case)}; {run.found} optimizers found; moved {moved:.3g} tol",
                   {"steps_compared": steps, "optimizers_found": run.found, "moved_tolerances": round(moved, 3)})


def check_in_backward_tied(case: Any, runs: Any) -> Verdict:
    moved = compared(case, runs, tied=True)
    steps = in_backward_section(case).steps
    return Verdict(f"tied {in_backward_section(case).tie}: {steps} steps equal; moved {moved:.3g} tol",
                   {"steps_compared": steps, "tied": str(in_backward_section(case).tie), "moved_tolerances": round(moved, 3)})


def check_in_backward_two_optimizers(case: Any, runs: Any) -> Verdict:
    try:
        moved = compared(case, runs, copies=2)
    except NotApplicable:
        raise
    except Exception as exc:  # the optimizer's error or the check's verdict: either gets torch's part named
        # (a recompile limit hit is said already: the optimizers' number, not their double step, raised it)
        diagnosis = None if torch_api.is_recompile_limit_error(exc.__cause__ or exc) else double_step_diagnosis(case)
        if diagnosis is None:
            raise
        gradless = moves_gradless_params(case, runs) if isinstance(exc, AssertionError) else None
        if gradless is not None:  # torch's extra step() calls come with grad None: harmless to one that keeps the law
            raise Blocked(f"{case.id}: blocked by law_untouched: its step moves params whose grad is None, and each "
                          f"optimizer's step() runs again with grad None in one backward ({gradless})") from exc
        if (not isinstance(exc, AssertionError) and "none_grads" in case.checks
                and raises_without_grads(case, runs) == one_line(exc)):
            raise  # ClippedSSTM's IndexError where a grad is None: as it is, the same error as none_grads' (one red)
        shown = str(exc) if isinstance(exc, AssertionError) else f"{case.id}: the step raised {one_line(exc)}"
        raise AssertionError(f"{shown}\n  diagnosis: {diagnosis}") from exc
    steps = in_backward_section(case).steps
    return Verdict(f"two optimizers per param: {steps} steps equal; moved {moved:.3g} tol",
                   {"steps_compared": steps, "optimizers_per_param": 2, "moved_tolerances": round(moved, 3)})


# Probe lrs, as multiples of the case's, for in_backward_no_hook: its property (backward without the hook
# steps nothing) holds at any lr, and at bf16 a first step at the case's lr can round away entirely.
NO_HOOK_LR_FACTORS = (1.0, 10.0, 100.0)


def check_in_backward_no_hook(case: Any, runs: Any) -> Verdict:
    """register_hook=False leaves params untouched by backward; the hooked twin moves. Where one
    ordinary step moves nothing at the case's lr, a larger probe lr is tried before calling it vacuous."""
    try:
        require_param_list(case)
    except CannotApply as exc:
        raise NotApplicable(f"{case.id}: {exc}") from None
    probes = [(factor, scaled) for factor in NO_HOOK_LR_FACTORS if (scaled := lr_scaled(case, factor)) is not None]
    for factor, probe in probes[:-1]:  # the last one's Vacuous is the verdict
        with contextlib.suppress(Vacuous):
            return _no_hook_verdict(probe, factor)
    return _no_hook_verdict(probes[-1][1], probes[-1][0])


def _no_hook_verdict(probe: Any, factor: float) -> Verdict:
    params, hooked_moved = _no_hook(probe)
    said = f" (probe lr {factor:g}x the case's: at the case's lr one step rounds away)" if factor != 1.0 else ""
    return Verdict(f"unhooked params untouched, hooked params moved {hooked_moved:.3g} tol{said}",
                   {"params": params, "hooked_moved_tolerances": round(hooked_moved, 3), "unhooked_moved_tolerances": 0.0,
                    "lr_factor": factor})


def _no_hook(case: Any) -> tuple[int, float]:
    """(params, how far the hooked twin moved in tolerances); AssertionError where backward
    without the hook changed a param, Vacuous where one ordinary step moves nothing either."""
    run = run_without_hook(case)
    start = run.initial
    changed = value_differences("param", start, run.unhooked, case.tolerance, ("before backward", "after backward, unhooked"))
    if changed:
        raise AssertionError(f"{case.id}: register_hook=False, yet backward changed params:\n  " + "\n  ".join(changed))
    still = [n for n, p in run.hooked.items() if not value_differences(n, start[n], p, case.tolerance)]
    if still:
        unmoved = [n for n in still if not value_differences(n, start[n], run.stepped_once[n], case.tolerance)]
        if unmoved:
            raise Vacuous(f"{case.id}: vacuous: one ordinary step leaves {unmoved} unchanged too (the optimizer "
                          "does not move params on its first step), so register_hook=False cannot be told apart")
        raise AssertionError(f"{case.id}: with the hook registered, backward left {still} unchanged, "
                             "while one ordinary step moves them")
    return len(start), max_movement(start, run.hooked, case.tolerance)


IN_BACKWARD = Check("in_backward", check_in_backward, "optimizer applied in backward equals normal stepping", "plain",
                    section=InBackwardSpec, section_key=SECTION_KEY, validate=validate_groups, rungs=MOVES,
                    proves=("A model whose optimizer is applied in backward (`_apply_optimizer_in_backward`, one optimizer per `in_backward.groups` "
                            "group) equals a twin stepped normally, after every one of `in_backward.steps` steps; `_get_in_backward_optimizers` "
                            "returns the optimizers on the params. Evidence: steps compared, moved tolerances."),
                    red=("The per-param step differs: the optimizer couples params (a global norm: declare `per_parameter`), or torch's in-backward "
                         "hooks fire unlike expected. An optimizer drawing from torch's RNG is not comparable (vacuous), not red."))
TIED = Check("in_backward_tied", check_in_backward_tied, "the same, with tied (shared) params", "plain",
             prerequisites=("in_backward",), section=InBackwardSpec, section_key=SECTION_KEY, rungs=MOVES,
             proves="The same with the params of `in_backward.tie` shared (tied weights). Evidence: the tie, steps compared.",
             red="A tied param updated twice (both aliases handed to the in-backward optimizer) or once too few.")
TWO_OPTIMIZERS = Check("in_backward_two_optimizers", check_in_backward_two_optimizers, "the same, two optimizers per param",
                       "plain", prerequisites=("in_backward",), section=InBackwardSpec, section_key=SECTION_KEY,
                       rungs=MOVES,
                       proves="The same with two optimizers applied to every param, on both sides. Evidence: steps compared.",
                       red="The second optimizer's hook interferes with the first (shared state, a grad cleared early).")
NO_HOOK = Check("in_backward_no_hook", check_in_backward_no_hook, "register_hook=False leaves params untouched", "plain",
                section=InBackwardSpec, section_key=SECTION_KEY,
                proves=("With `register_hook=False` backward leaves the params untouched while the hooked twin moves (a 10x and a 100x probe lr are "
                        "tried where one step rounds away). Evidence: unhooked and hooked movement in tolerances."),
                red="Params moved without the hook: something steps them outside the optimizer; or the hooked twin never moved (vacuous).")
