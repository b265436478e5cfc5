"""Kernel-count tables (`kernel_counts`, and each perturbation's): torch version -> device ->
case-id pattern -> count, and the entry that applies to a case."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .schema import check_torch_version

if TYPE_CHECKING:
    from .loader import Locator

Device = Literal["cpu", "cuda", "mps"]
KernelTable = dict[str, dict[Device, dict[str, int]]]


def kernel_table_shorthand(counts: Any) -> Any:
    """Validate torch-version keys and expand the `device: N` shorthand to `device: {'*': N}`."""
    if not isinstance(counts, dict):
        return counts
    for version, per_device in counts.items():
        check_torch_version(version, "kernel_counts keys are torch versions")
        if isinstance(per_device, dict):
            counts[version] = {d: {"*": n} if isinstance(n, int) else n for d, n in per_device.items()}
    return counts


@dataclass(frozen=True, eq=False)
class KernelExpectation:
    count: int | None
    where: str  # "specs/adam.yaml:12 kernel_counts['2.13'].cpu['*']", or where to add one
    torch_version: str
    table: tuple = ("kernel_counts",)  # key path of the table in the spec
    pattern: str | None = None  # the entry that applied (exact id, glob or '*'); None: no entry


def kernel_expectation(counts: dict, at: tuple, locator: Locator, case_id: str, device: str,
                       version: str) -> KernelExpectation:
    """The entry of a kernel table that applies: exact id, then globs in order, then '*'."""
    table = counts.get(version, {}).get(device, {})
    exact = [p for p in table if p == case_id]
    globs = [p for p in table if p != "*" and p not in exact and fnmatch.fnmatchcase(case_id, p)]
    name = ".".join(str(part) if isinstance(part, str) else f"[{part}]" for part in at).replace(".[", "[")
    for pattern in exact + globs + (["*"] if "*" in table else []):
        line = locator.line((*at, version, device, pattern)) or locator.line((*at, version, device))
        where = f"{locator.path}:{line} {name}['{version}'].{device}['{pattern}']"
        return KernelExpectation(table[pattern], where, version, tuple(at), pattern)
    return KernelExpectation(None, f"{locator.path}: add {name}['{version}'].{device}", version, tuple(at))


def table_entry(expectation: KernelExpectation, device: str, **observed: int) -> dict[str, Any]:
    """A kernel-table entry as the report and update mode read it (`kernel_tables` metrics)."""
    return {"count": expectation.count, "table": list(expectation.table), "version": expectation.torch_version,
            "device": device, "pattern": expectation.pattern, **observed}
