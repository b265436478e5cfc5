"""The order checks run in on a case: prerequisites and apply_after first. Pure functions over a
mapping of names to objects with `prerequisites` and `apply_after`, so that expanding a spec does
not import the checks themselves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class OrderError(Exception):
    """Checks that order each other in a cycle."""


def order(names: Iterable[str], registry: Mapping[str, Any]) -> tuple[str, ...]:
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
            raise OrderError(f"checks {pending} order each other in a cycle")
    return tuple(done)


def missing_prerequisites(names: Iterable[str], applicable: Iterable[str],
                          registry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(check, prerequisite) pairs where the prerequisite applies to the case but was not selected."""
    chosen, applies = set(names), set(applicable)
    return [(n, p) for n in chosen for p in registry[n].prerequisites if p in applies and p not in chosen]
