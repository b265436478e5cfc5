"""What a check is, and how it says 'this comparison did not happen'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..spec.case import Variant


class NotApplicable(Exception):
    """The check cannot say anything about this case; the reason is reported as a skip."""


@dataclass(frozen=True)
class Check:
    """A named property of a case. `run(case, runs)` returns a one-line summary or raises
    AssertionError (failed) or NotApplicable (nothing to compare).

    A check may own a spec section (`section`: a pydantic model; the spec file's top-level key
    of the check's name is validated by it, and the check reads it as `case.sections[name]`,
    its defaults when the file has none) and report metrics (`metrics(case, runs)`, read from
    `runs.peek(...)`, written to the JSON report). Metrics keys the plugin reads: `gate`
    (--optim-baseline), `updates` and `kernel_tables` (--optim-update-expected)."""

    name: str
    run: Callable
    description: str
    scope: Literal["all", "no_closure", "plain", "primary", "distributed", "hook_order", "fuzz"] = "all"
    devices: tuple[str, ...] | None = None
    prerequisites: tuple[str, ...] = ()  # must pass on the same case first, else this check is skipped
    apply_after: tuple[str, ...] = ()  # run after these when both are selected (ordering only)
    section: type | None = None  # a pydantic model: the spec's top-level key named after the check
    metrics: Callable | None = None  # (case, runs) -> JSON-able numbers for the report; must run nothing

    def applies_to(self, variant: Variant) -> bool:
        """Scopes: all variants; no_closure (needs a fullgraph compile); plain (no closure and no
        scheduler: those variants would repeat it); primary (once per optimizer and device: the
        first case's plain variant); distributed (cases the spec's `distributed` section names, with their
        scheduler variants, without closures); hook_order checks belong to hook-order specs, not to optimizer cases."""
        if self.scope in ("hook_order", "fuzz"):  # their own spec kinds and sections, not optimizer variants
            return False
        if self.devices is not None and variant.device not in self.devices:
            return False
        if self.scope == "no_closure":
            return not variant.closure
        if self.scope == "plain":
            return variant.plain
        if self.scope == "primary":
            return variant.plain and variant.primary
        if self.scope == "distributed":
            return variant.distributed and not variant.closure
        return True
