"""Eager vs compiled `optimizer.step`: params, state, param_groups and optimizer attributes."""

from __future__ import annotations

from ..harness.compare import dynamo_group_keys, listed, max_movement, non_finite, snapshot_differences
from ..harness.compiled_run import CompiledRun


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
    e = run.eager
    problems = snapshot_differences(e, run.compiled, tol)
    if problems:
        raise AssertionError(f"{case.id}: compiled step differs from eager after {case.steps} steps:" + listed(problems))
    added = dynamo_group_keys(e, run.compiled)
    note = (f"; torch's dynamo added {', '.join(added)} = True to the compiled optimizer's groups "
            "(OptimizerVariable._set_capturable), not compared") if added else ""
    return f"{len(e.params)} params, {sum(len(s) for s in e.state.values())} state entries equal; moved {moved:.3g} tol{note}"
