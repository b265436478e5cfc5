"""One pytest session's spec run, held on the pytest config (as pytest-benchmark and syrupy do):
its own registry of checks, the run cache, per-item outcomes and the results. Nothing global."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .checks import CHECKS, Check, RegistryError, register
from .harness.run_cache import RunCache
from .report import Results


@dataclass
class OptimtestSession:
    """What a session with specs holds, from configure to the terminal summary."""

    roots: list[Path]
    checks: dict[str, Check] = field(default_factory=lambda: dict(CHECKS))  # built-in, then third-party
    runs: RunCache = field(default_factory=RunCache)
    results: Results = field(default_factory=Results)
    remaining: Counter = field(default_factory=Counter)  # case id -> its items not yet torn down
    outcomes: dict = field(default_factory=dict)  # (case id, check) -> None (passed) or why not
    absent: Counter = field(default_factory=Counter)  # (device, why unavailable) -> items not generated
    messages: list[str] = field(default_factory=list)  # lines for the terminal summary
    partial: bool = False  # some generated items were deselected
    check_seconds: float = 0.0

    def add_checks(self, checks: list[Check]) -> None:
        """Register third-party checks for this session only (RegistryError on a bad one)."""
        for check in checks:
            register(check, self.checks)


ENTRY_POINT_GROUP = "pytest_optimtest.checks"
SESSION = pytest.StashKey[OptimtestSession]()
_CHECKS = pytest.StashKey[dict]()  # the registry of a session without specs (fixtures and markers only)


def third_party_checks(config: pytest.Config) -> list[Check]:
    """Checks from the `pytest_optimtest_checks` hook and the `pytest_optimtest.checks` entry points."""
    from importlib.metadata import entry_points

    found = [c for checks in config.hook.pytest_optimtest_checks() for c in (checks or [])]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        loaded = loaded() if callable(loaded) and not hasattr(loaded, "applies_to") else loaded
        found += list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    return found


def session_checks(config: pytest.Config) -> Mapping[str, Check]:
    """This session's checks: the spec run's registry, or (in a session without specs) the
    built-in ones plus the third-party ones, registered once."""
    if SESSION in config.stash:
        return config.stash[SESSION].checks
    if _CHECKS not in config.stash:
        registry = dict(CHECKS)
        try:
            for check in third_party_checks(config):
                register(check, registry)
        except RegistryError as exc:
            raise pytest.UsageError(f"pytest-optimtest: cannot register check: {exc}") from None
        config.stash[_CHECKS] = registry
    return config.stash[_CHECKS]
