"""The one guard every comparing check calls first: a comparison that did not happen (nothing
compiled, nothing moved, the run diverged) fails as such instead of passing."""

from __future__ import annotations

import torch

from ..spec.schema import Tolerance
from .compare import max_movement, non_finite


class NotApplicable(Exception):
    """The check cannot say anything about this case; the reason is reported as a skip."""


def require_compiled(case_id: str, graph_count: int, consequence: str) -> None:
    """Fail when torch.compile captured no graph: the step ran eagerly or traced to no tensor op."""
    if graph_count == 0:
        raise AssertionError(f"{case_id}: not compiled: torch.compile captured no graph (the step ran eagerly or "
                             f"traced to no tensor operation), so {consequence}")


def require_moved(case_id: str, initial: dict[str, torch.Tensor], params: dict[str, torch.Tensor], tol: Tolerance,
                  min_movement: float, over: str, hint: str = "") -> float:
    """The params' largest movement in tolerances; fail when the reference diverged (NaN equals
    NaN vacuously) or moved less than `min_movement` (a step that did nothing would match)."""
    diverged = non_finite(params)
    if diverged:
        raise AssertionError(f"{case_id}: reference params {diverged} became NaN/inf {over}: the run diverged, "
                             "so equality means nothing; lower lr")
    moved = max_movement(initial, params, tol)
    if moved < min_movement:
        raise AssertionError(f"{case_id}: vacuous comparison: {over} the params moved at most {moved:.3g} tolerances "
                             f"(need {min_movement:g}); a step that did nothing would pass{hint}")
    return moved
