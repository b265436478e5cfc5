"""Spec files: schema, loading with line numbers, expansion into cases."""

from __future__ import annotations

from pathlib import Path

from .case import Case, KernelExpectation
from .errors import SpecError, did_you_mean
from .expand import expand
from .loader import load_spec
from .schema import Spec, json_schema


def load_cases(path: str | Path) -> list[Case]:
    """Every case of the optimizer spec at `path`, for every registered check and the running torch."""
    spec, locator = load_spec(path)
    if not isinstance(spec, Spec):
        raise SpecError(str(path), None, "kind", "not an optimizer spec (it has no cases)")
    return expand(spec, locator)


def load_case(path: str | Path, case_id: str) -> Case:
    """The case `case_id` of the spec at `path` (the repr of every Case)."""
    cases = {c.id: c for c in load_cases(path)}
    if case_id not in cases:
        raise KeyError(f"{path}: no case {case_id!r}{did_you_mean(case_id, list(cases))}")
    return cases[case_id]


__all__ = ["Case", "KernelExpectation", "Spec", "SpecError", "expand", "json_schema", "load_case", "load_cases", "load_spec"]
