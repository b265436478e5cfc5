"""The cases of a spec file, as the built-in checks see them: what a test or a Hypothesis
example loads by id (every Case's repr is a `load_case(...)` call)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .spec import Case, Spec, SpecError, did_you_mean, expand, load_spec


def load_cases(path: str | Path, checks: Mapping[str, Any] | None = None) -> list[Case]:
    """Every case of the optimizer spec at `path`, for `checks` (default: the built-in ones)."""
    if checks is None:
        from .checks import CHECKS

        checks = CHECKS
    spec, locator = load_spec(path, sections_of(checks))
    if not isinstance(spec, Spec):
        raise SpecError(str(path), None, "kind", "not an optimizer spec (it has no cases)")
    return expand(spec, locator, checks)


def sections_of(checks: Mapping[str, Any]) -> dict[str, type]:
    """The spec sections the checks own: check name -> its model."""
    return {name: check.section for name, check in checks.items() if getattr(check, "section", None) is not None}


def load_case(path: str | Path, case_id: str, checks: Mapping[str, Any] | None = None) -> Case:
    """The case `case_id` of the spec at `path`."""
    cases = {c.id: c for c in load_cases(path, checks)}
    if case_id not in cases:
        raise KeyError(f"{path}: no case {case_id!r}{did_you_mean(case_id, list(cases))}")
    return cases[case_id]
