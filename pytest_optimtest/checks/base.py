"""What a check is, and how it says 'this comparison did not happen'."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..harness.vacuity import NotApplicable as NotApplicable  # raised by checks; defined where the harness raises it too
from ..harness.vacuity import Vacuous as Vacuous
from ..harness.vacuity import Blocked as Blocked
from ..harness.ladder import EAGER
from ..spec.case import Variant

if TYPE_CHECKING:  # annotations only: the run cache imports the harness, which imports torch
    from ..harness.run_cache import RunCache
    from ..spec.context import CaseContext, SpecContext


class CheckedCase(Protocol):
    """What every case a check receives has: `Case`, `FuzzCase` and `HookOrderCase` all do."""

    id: str
    spec_path: str
    device: str
    checks: tuple[str, ...]
    skip: dict[str, str]
    xfail: dict[str, str]

    @property
    def key(self) -> tuple[str, str]: ...

    @property
    def location(self) -> str: ...


class Verdict(str):
    """A pass and what it proved: the one-line summary (-v, -rP, the report's reason; it is that
    string) and `evidence`, the same as data (the JSON report's `evidence`): the graphs the step
    itself captured, the steps compared, how far the runs moved in tolerances, that a law's
    perturbation reached the optimizer. A built-in check passes only with evidence; where what it
    compares did not happen, it raises Vacuous (or fails) instead."""

    evidence: dict[str, Any]

    def __new__(cls, summary: str, evidence: dict[str, Any] | None = None) -> Verdict:
        verdict = super().__new__(cls, summary)
        verdict.evidence = evidence or {}
        return verdict


Run = Callable[[Any, "RunCache"], "Verdict | str | None"]  # (case, runs) -> the verdict, or a one-line summary
Metrics = Callable[[Any, "RunCache"], "dict[str, Any]"]  # (case, runs) -> JSON-able numbers; runs nothing
ValidateSection = Callable[[Any, "SpecContext"], None]  # (section, spec) -> None, or raise ctx.error(...)
ExpectOfCase = Callable[[Any, "CaseContext"], Any]  # (section, case) -> what the check expects of that case

Scope = Literal["all", "no_closure", "plain", "primary", "distributed", "hook_order", "fuzz"]
SharedRunPhase = Literal["perturbations"]


@dataclass(frozen=True)
class Check:
    """A named property of a case, declared whole in its own module.

    `run(case, runs)` returns a `Verdict` (a summary and its evidence; a third-party check may
    return a bare summary) or raises AssertionError (failed), NotApplicable (nothing to compare)
    or Vacuous (compared, and it proved nothing). The rest is optional:

    - `section`: a pydantic model (a `RootModel` for a bare number or bool) of the check's own
      top-level spec key, `section_key` (default: the check's name). Several checks may share
      one key with one model. The check reads it as `case.sections[key]`: the file's value, else
      the model's defaults, else None when the model has required fields.
    - `validate(section, spec)`: cross-checks against the rest of the spec, once per file,
      raising `spec.error(key_path, message)` (a SpecError naming file and line).
    - `expect(section, case)`: what the check expects of one case (e.g. the kernel-table entry
      that applies to its id), stored as `case.expected[name]`.
    - `metrics(case, runs)`: numbers for the JSON report, read with `runs.peek(kind, case)`.
      Keys the plugin reads: `gate` (--optim-baseline), `updates` and `kernel_tables`
      (--optim-update-expected).
    - `needs`: phases of the shared runs that only this check reads (`perturbations`: the
      compiled run's recompile phase), run only where a selected item needs them.
    - `declared(section)`: for a claim the spec's author makes (a law): whether the section
      declares it. A check that is not declared makes no items for the spec.
    - `case_names(section, names)`: the spec cases (of all their `names`) it applies to, for a
      check that costs too much to run on every case (it names them in its section).
    - `proves`, `red`: the check's reference entry (docs/reference/checks.md): what a pass
      requires and records, and what a red means and whose doing it usually is.
    - `rungs`: the rungs of the case's prerequisite ladder (harness/ladder.py) it stands on; when
      one fails, the check is skipped as blocked by it and one item of the case is red with the
      cause. Default: the optimizer constructs and its eager step runs (none for hook-order and
      fuzz checks, whose cases are not one optimizer's).
    """

    name: str
    run: Run
    description: str
    scope: Scope = "all"
    devices: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None  # the param dtypes it says something at (None: every one)
    prerequisites: tuple[str, ...] = ()  # must pass on the same case first, else this check is skipped
    apply_after: tuple[str, ...] = ()  # run after these when both are selected (ordering only)
    section: type | None = None
    section_key: str | None = None
    validate: ValidateSection | None = None
    expect: ExpectOfCase | None = None
    metrics: Metrics | None = None
    needs: tuple[SharedRunPhase, ...] = ()
    declared: Callable[[Any], bool] | None = None
    case_names: Callable[[Any, list[str]], Collection[str]] | None = None
    rungs: tuple[str, ...] | None = None
    proves: str = ""  # what a pass requires and the evidence it records (the reference prints it)
    red: str = ""  # what a red means and whose doing it usually is

    @property
    def ladder(self) -> tuple[str, ...]:
        """The rungs this check needs (see `rungs`)."""
        if self.rungs is not None:
            return self.rungs
        return () if self.scope in ("hook_order", "fuzz") else EAGER

    @property
    def key(self) -> str:
        """The top-level spec key of this check's section."""
        return self.section_key or self.name

    def applies_to(self, variant: Variant) -> bool:
        """Scopes: all variants; no_closure (needs a fullgraph compile); plain (no closure and no
        scheduler: those variants would repeat it); primary (once per optimizer, device and dtype:
        the first case there, its plain variant, or its closure variant where it has no other);
        distributed (cases the spec's `distributed` section names, with their scheduler variants,
        without closures); hook_order checks belong to hook-order specs, not to optimizer cases."""
        if self.scope in ("hook_order", "fuzz"):  # their own spec kinds and sections, not optimizer variants
            return False
        if self.devices is not None and variant.device not in self.devices:
            return False
        if self.dtypes is not None and variant.dtype not in self.dtypes:
            return False
        if self.scope == "no_closure":
            return not variant.closure
        if self.scope == "plain":
            return variant.plain
        if self.scope == "primary":
            return variant.primary
        if self.scope == "distributed":
            return variant.distributed and not variant.closure
        return True
