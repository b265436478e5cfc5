"""The registry of checks: built-in and third-party checks, their prerequisites and order, the
spec sections they own, and the one way to load and expand a spec for them.

Seed 002's pass-ordering idea: a check names `prerequisites` (checks that must pass on the
same case first; when one fails, this check is skipped with that reason) and `apply_after`
(checks that must run first when both are selected). Third parties add checks with the
`pytest_optimtest_checks` hook or the `pytest_optimtest.checks` entry-point group.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..spec import Case, Spec, SpecError, did_you_mean, expand, load_spec
from ..spec.case import FuzzCase, HookOrderCase
from ..spec.loader import Locator
from ..spec.ordering import missing_prerequisites, order
from ..spec.schema import SectionModels, json_schema
from .base import Check

AnyCase = Case | HookOrderCase | FuzzCase
ENTRY_POINT_GROUP = "pytest_optimtest.checks"


class RegistryError(Exception):
    """A check cannot be registered: a duplicate name, an unknown dependency, a cycle, or a section clash."""


class Registry(Mapping[str, Check]):
    """Checks by name, in registration order; read-only once made (`with_checks` makes a new one)."""

    def __init__(self, checks: Iterable[Check] = ()) -> None:
        self._checks: dict[str, Check] = {}
        for check in checks:
            self._register(check)
        self._sections: SectionModels = tuple(sorted({c.key: c.section for c in self._checks.values()
                                                      if c.section is not None}.items()))

    def with_checks(self, checks: Iterable[Check]) -> Registry:
        """This registry plus `checks` (RegistryError on a bad one)."""
        return Registry([*self._checks.values(), *checks])

    def __getitem__(self, name: str) -> Check:
        return self._checks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._checks)

    def __len__(self) -> int:
        return len(self._checks)

    @property
    def sections(self) -> SectionModels:
        """(spec key, model) of every check-owned section."""
        return self._sections

    def load_spec(self, path: str | Path) -> tuple[Any, Locator]:
        """Parse and validate a spec file, these checks' sections included (SpecError on bad input)."""
        return load_spec(path, self._sections)

    def expand(self, spec: Any, locator: Locator, torch_version: str | None = None) -> list[AnyCase]:
        """Every case of a loaded spec, for these checks."""
        return expand(spec, locator, self, torch_version)

    def cases(self, path: str | Path, torch_version: str | None = None) -> list[AnyCase]:
        """Load and expand the spec at `path`."""
        return self.expand(*self.load_spec(path), torch_version=torch_version)

    def optimizer_cases(self, path: str | Path) -> list[Case]:
        """The optimizer cases of the spec at `path` (SpecError for a hook-order spec)."""
        spec, locator = self.load_spec(path)
        if not isinstance(spec, Spec):
            raise SpecError(str(path), None, "kind", "not an optimizer spec (it has no cases)")
        return [c for c in self.expand(spec, locator) if isinstance(c, Case)]

    def case(self, path: str | Path, case_id: str) -> Case:
        """The case `case_id` of the spec at `path` (KeyError naming the closest ids)."""
        cases = {c.id: c for c in self.optimizer_cases(path)}
        if case_id not in cases:
            raise KeyError(f"{path}: no case {case_id!r}{did_you_mean(case_id, list(cases))}")
        return cases[case_id]

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of spec files with these checks' sections."""
        return json_schema(self._sections)

    def _register(self, check: Check) -> None:
        if not isinstance(check, Check):
            raise RegistryError(f"{check!r} is not a pytest_optimtest.Check")
        if check.name in self._checks:
            raise RegistryError(f"a check named {check.name!r} is already registered")
        unknown = [n for n in (*check.prerequisites, *check.apply_after) if n not in self._checks and n != check.name]
        if unknown:
            raise RegistryError(f"check {check.name!r} depends on unknown checks {unknown}; register those first")
        if check.name in (*check.prerequisites, *check.apply_after):
            raise RegistryError(f"check {check.name!r} cannot depend on itself")
        if check.section is not None:
            if check.key in Spec.model_fields:
                raise RegistryError(f"check {check.name!r} owns a section named like the spec key {check.key!r}; "
                                    "name the section otherwise (section_key)")
            owner = next((c for c in self._checks.values() if c.section is not None and c.key == check.key), None)
            if owner is not None and owner.section is not check.section:
                raise RegistryError(f"checks {owner.name!r} and {check.name!r} both own the section {check.key!r} "
                                    "with different models; share one model or rename a section")
        self._checks[check.name] = check


def entry_point_checks() -> list[Check]:
    """Checks that installed packages declare in the `pytest_optimtest.checks` entry-point group
    (a Check, a list of them, or a function returning either)."""
    found: list[Check] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        loaded = loaded() if callable(loaded) and not isinstance(loaded, Check) else loaded
        found += list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    return found


__all__ = ["entry_point_checks", "Registry", "RegistryError", "missing_prerequisites", "order"]
