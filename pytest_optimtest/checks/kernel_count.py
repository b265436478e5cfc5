"""Inductor's generated kernel count for the compiled step, against the spec's `kernel_counts`."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel, field_validator

from ..harness.vacuity import require_compiled
from ..spec.context import CaseContext
from ..spec.kernel_table import KernelExpectation, KernelTable, kernel_table_shorthand, table_entry
from ..harness.ladder import COMPILED
from .base import Check, NotApplicable, Verdict
from .parity import parity_metrics


class KernelCounts(RootModel[KernelTable]):
    """torch major.minor -> device -> {case-id glob or '*': generated kernel count}; `device: N` is `{'*': N}`."""

    root: KernelTable = {}

    @field_validator("root", mode="before")
    @classmethod
    def _shorthand(cls, counts: Any) -> Any:
        return kernel_table_shorthand(counts)


def expected_kernels(section: KernelCounts, case: CaseContext) -> KernelExpectation:
    """The entry that applies to the case: exact id, then globs in file order, then '*'."""
    return case.spec.kernels(section.root, ("kernel_counts",), case.id, case.device)


def check_kernel_count(case: Any, runs: Any) -> Verdict:
    run = runs.compiled(case)
    expected = case.expected.get("kernel_count")
    require_compiled(case.id, run.step_graph_count, "there are no kernels to count")
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
    return Verdict(f"{run.kernel_count} kernels", {**run.evidence(), "expected_kernels": expected.count})


def kernel_count_metrics(case: Any, runs: Any) -> dict[str, Any]:
    """The compiled run's numbers, and the expectation that applied (update mode rewrites it)."""
    metrics = parity_metrics(case, runs)
    k = case.expected.get("kernel_count")
    if k is not None:
        metrics["expected"] = table_entry(k, case.device)
        run = runs.peek("compiled", case)
        if run is not None and run.graph_count:  # a step that compiled nothing has no kernel count to write
            metrics["kernel_tables"] = [table_entry(k, case.device, observed=metrics["kernels"])]
    return metrics


CHECK = Check("kernel_count", check_kernel_count, "inductor's generated kernel count equals the spec's", "no_closure",
              apply_after=("parity",), section=KernelCounts, section_key="kernel_counts", expect=expected_kernels,
              metrics=kernel_count_metrics, rungs=COMPILED,
              proves=("Inductor generated exactly the spec's `kernel_counts` entry for this torch release and device over the warm-up. Evidence: the "
                      "observed `kernels` and the table entry that applied."),
              red=("A different count: the optimizer's step (or torch's fusion) changed. The message names the spec line to change; `--optim-update-"
                   "expected` writes it. Neither side is wrong by itself: it is a performance regression to look at."))
