"""The check registry: built-in and third-party checks, their prerequisites and order.

Seed 002's pass-ordering idea: a check names `prerequisites` (checks that must pass on the
same case first; when one fails, this check is skipped with that reason) and `apply_after`
(checks that must run first when both are selected). Third parties add checks with the
`pytest_optimtest_checks` hook or the `pytest_optimtest.checks` entry-point group.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from ..spec.ordering import missing_prerequisites, order
from ..spec.schema import Spec
from .base import Check


class RegistryError(Exception):
    """A check cannot be registered: a duplicate name, an unknown dependency, or a cycle."""


def register(check: Check, registry: MutableMapping[str, Check]) -> None:
    """Add `check`; its prerequisites and apply_after must name registered checks, with no cycle."""
    if not isinstance(check, Check):
        raise RegistryError(f"{check!r} is not a pytest_optimtest.Check")
    if check.name in registry:
        raise RegistryError(f"a check named {check.name!r} is already registered")
    unknown = [n for n in (*check.prerequisites, *check.apply_after) if n not in registry and n != check.name]
    if unknown:
        raise RegistryError(f"check {check.name!r} depends on unknown checks {unknown}; register those first")
    if check.name in (*check.prerequisites, *check.apply_after):
        raise RegistryError(f"check {check.name!r} cannot depend on itself")
    if check.section is not None and check.name in Spec.model_fields:
        raise RegistryError(f"check {check.name!r} owns a section named like the spec key {check.name!r}; rename the check")
    registry[check.name] = check


__all__ = ["RegistryError", "missing_prerequisites", "order", "register"]
