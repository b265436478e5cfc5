"""Eager vs compiled `optimizer.step`: params, state, param_groups and optimizer attributes."""

from __future__ import annotations

from ..harness.compare import max_movement, non_finite, value_differences
from ..harness.compiled_run import CompiledRun

MAX_LISTED = 8


def check_parity(case, runs) -> str:
    return assert_parity(runs.compiled(case))


def assert_parity(run: CompiledRun) -> str:
    """Raise AssertionError naming every difference; refuse vacuous comparisons."""
    case, tol = run.case, run.case.tolerance
    if run.graph_count == 0:
        raise AssertionError(
            f"{case.id}: not compiled: torch.compile captured no graph (the step ran eagerly or traced to "
            f"no tensor operation), so matching eager proves nothing; graph breaks: {run.graph_breaks or 'none'}"
        )
    diverged = non_finite(run.eager.params)
    if diverged:
        raise AssertionError(f"{case.id}: eager params {diverged} became NaN/inf: the run diverged, so equality means nothing; lower lr")
    moved = max_movement(run.initial_params, run.eager.params, tol)
    if moved < case.min_movement:
        raise AssertionError(
            f"{case.id}: vacuous comparison: over {case.steps} steps the params moved at most {moved:.3g} "
            f"tolerances (need {case.min_movement:g}); a compiled step that did nothing would pass. "
            f"Raise lr or steps in {case.location}, or loosen min_movement."
        )
    e, c = run.eager, run.compiled
    problems = value_differences("param", e.params, c.params, tol)
    problems += value_differences("state", e.state, c.state, tol)
    problems += value_differences("param_groups", e.groups, c.groups, tol)
    problems += value_differences("optimizer attribute", e.attrs, c.attrs, tol)
    if problems:
        shown = problems[:MAX_LISTED] + ([f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else [])
        raise AssertionError(f"{case.id}: compiled step differs from eager after {case.steps} steps:\n  " + "\n  ".join(shown))
    return f"{len(e.params)} params, {sum(len(s) for s in e.state.values())} state entries equal; moved {moved:.3g} tol"
