"""Run a Hypothesis property under the active settings profile and report a reproducer.

Profiles `ci` (derandomized, few examples, no database), `dev` (the default) and
`nightly` (thousands of examples) are registered by the plugin and chosen with
Hypothesis's own `--hypothesis-profile`; a spec may set its own counts per profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 10, "derandomize": True, "database": None, "print_blob": True},
    "dev": {"max_examples": 30},
    "nightly": {"max_examples": 1000},
}
_COMMON: dict[str, Any] = {
    "deadline": None,  # a compile takes seconds; Hypothesis's 200 ms deadline would flag every example
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "report_multiple_bugs": False,  # one shrunk failure with its message, not an ExceptionGroup of several
}


def register_profiles() -> None:
    """Register ci, dev and nightly, unless the user registered profiles of those names first.

    Hypothesis itself registers a `ci` profile (derandomized, but 100 examples, and loaded
    when the CI variable is set); ours replaces that one, not a user's.
    """
    for name, values in PROFILES.items():
        try:
            existing = settings.get_profile(name)
        except Exception:  # InvalidArgument: not registered yet
            existing = None
        if existing is None or existing is _hypothesis_ci_profile():
            settings.register_profile(name, **values, **_COMMON)


def _hypothesis_ci_profile() -> settings | None:
    try:
        from hypothesis._settings import CI
    except ImportError:  # a Hypothesis without the built-in ci profile
        return None
    return CI


def active_profile() -> str:
    """The profile in force: the one loaded with --hypothesis-profile, else `dev`."""
    name = settings.get_current_profile_name()
    return "dev" if name == "default" else name


def property_settings(examples: dict[str, int]) -> tuple[str, settings]:
    """(profile name, settings): the profile's, with the spec's example count for it if given."""
    register_profiles()
    name = active_profile()
    base = settings.get_profile(name)
    count = examples.get(name, base.max_examples)
    return name, settings(base, max_examples=count, **_COMMON)


@dataclass
class PropertyRun:
    """What a property run saw: examples run, and notes each example added (e.g. recompiles)."""

    profile: str
    max_examples: int
    examples: int = 0
    notes: list[str] = field(default_factory=list)


def run_property(title: str, strategies: dict[str, st.SearchStrategy[Any]], example: Callable[..., None],
                 examples: dict[str, int], reproduce: str) -> PropertyRun:
    """Run `example(**drawn)` under Hypothesis; on failure raise AssertionError with the shrunk
    example as code, the original error, and how to rerun it."""
    profile, chosen = property_settings(examples)
    run = PropertyRun(profile, chosen.max_examples)
    last: list[dict[str, Any]] = []

    @chosen
    @given(**strategies)
    def prop(**drawn: Any) -> None:
        last[:] = [drawn]  # Hypothesis replays the shrunk example last
        run.examples += 1
        example(**drawn)

    try:
        prop()
    except Exception as exc:
        if not last:
            raise
        shown = ", ".join(f"{k}={v!r}" for k, v in last[0].items())
        raise AssertionError(
            f"{title}: falsified (hypothesis profile {profile!r}, {run.examples} examples run); minimal example:\n"
            f"    {shown}\n{type(exc).__name__ if not isinstance(exc, AssertionError) else ''}"
            f"{': ' if not isinstance(exc, AssertionError) else ''}{exc}\n"
            f"rerun: {reproduce} --hypothesis-profile {profile}\n"
            f"pin it in a test of your own (from pytest_optimtest import load_case; "
            f"from pytest_optimtest.strategies import *):\n    @example({shown})"
        ) from exc
    return run
