"""Inductor's generated kernel count for the compiled step, against the spec's expectation."""

from __future__ import annotations

from typing import Any

from ..harness.guards import require_compiled
from .base import NotApplicable
from .parity import parity_metrics


def check_kernel_count(case, runs) -> str:
    run = runs.compiled(case)
    expected = case.kernels
    require_compiled(case.id, run.graph_count, "there are no kernels to count")
    if expected is None or expected.count is None:
        where = expected.where if expected else case.spec_path
        raise NotApplicable(
            f"{case.id}: no expected kernel count for torch {expected.torch_version if expected else '?'} on {case.device}: "
            f"observed {run.kernel_count}; {where}"
        )
    if run.kernel_count != expected.count:
        raise AssertionError(
            f"{case.id}: expected {expected.count} generated kernels, observed {run.kernel_count}. "
            f"If the change is intended, set {expected.where} to {run.kernel_count} "
            f"(or a case-id pattern entry for this case)."
        )
    return f"{run.kernel_count} kernels"


def kernel_count_metrics(case: Any, runs: Any) -> dict[str, Any]:
    """The compiled run's numbers, and the expectation that applied (update mode rewrites it)."""
    metrics = parity_metrics(case, runs)
    k = getattr(case, "kernels", None)
    if k is not None:
        metrics["expected"] = table_entry(k, case.device)
        run = runs.peek("compiled", case.id)
        if run is not None and run.graph_count:  # a step that compiled nothing has no kernel count to write
            metrics["kernel_tables"] = [table_entry(k, case.device, observed=metrics["kernels"])]
    return metrics


def table_entry(expectation: Any, device: str, **observed: int) -> dict[str, Any]:
    """A kernel-table entry as the report and update mode read it (`kernel_tables`)."""
    return {"count": expectation.count, "table": list(expectation.table), "version": expectation.torch_version,
            "device": device, "pattern": expectation.pattern, **observed}
