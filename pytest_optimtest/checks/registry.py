"""The check registry: built-in and third-party checks, their prerequisites and order.

Seed 002's pass-ordering idea: a check names `prerequisites` (checks that must pass on the
same case first; when one fails, this check is skipped with that reason) and `apply_after`
(checks that must run first when both are selected). Third parties add checks with the
`pytest_optimtest_checks` hook or the `pytest_optimtest.checks` entry-point group.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

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
    registry[check.name] = check


def order(names: Iterable[str], registry: MutableMapping[str, Check]) -> tuple[str, ...]:
    """`names` in an order where every check follows its prerequisites and apply_after that are
    among `names`; otherwise as given (stable)."""
    pending = list(dict.fromkeys(names))
    done: list[str] = []
    while pending:
        for name in pending:
            before = set(registry[name].prerequisites) | set(registry[name].apply_after)
            if not (before & set(pending)):
                done.append(name)
                pending.remove(name)
                break
        else:  # unreachable for registered checks: register() rejects what could cycle
            raise RegistryError(f"checks {pending} order each other in a cycle")
    return tuple(done)


def missing_prerequisites(names: Iterable[str], applicable: Iterable[str],
                          registry: MutableMapping[str, Check]) -> list[tuple[str, str]]:
    """(check, prerequisite) pairs where the prerequisite applies to the case but was not selected."""
    chosen, applies = set(names), set(applicable)
    return [(n, p) for n in chosen for p in registry[n].prerequisites if p in applies and p not in chosen]
