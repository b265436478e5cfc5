"""Run a Hypothesis property under the active settings profile and report a reproducer.

The spec's properties run under profiles of the plugin's own, `optimtest-ci` (derandomized,
few examples, no database), `optimtest-dev` (the default) and `optimtest-nightly`
(thousands of examples). Which one follows the profile the session loaded: Hypothesis's
`ci` (loaded when the CI variable is set) or `--hypothesis-profile optimtest-ci` gives
`ci`, `--hypothesis-profile optimtest-nightly` (or a profile of the user's named
`nightly`) gives `nightly`, anything else `dev`. The plugin registers only its own names
and loads no profile: the user's own @given tests run exactly as without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .vacuity import NotApplicable

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


PREFIX = "optimtest-"


def register_profiles() -> None:
    """Register the plugin's own profiles (optimtest-ci, -dev, -nightly); no other name is touched."""
    for name, values in PROFILES.items():
        settings.register_profile(PREFIX + name, **values, **_COMMON)


def active_profile() -> str:
    """ci, dev or nightly: the plugin's profile that the session's loaded profile stands for."""
    name = settings.get_current_profile_name().removeprefix(PREFIX)
    return name if name in PROFILES else "dev"


def property_settings(examples: dict[str, int]) -> tuple[str, settings]:
    """(profile name, settings): the plugin's profile, with the spec's example count for it if given."""
    register_profiles()
    name = active_profile()
    base = settings.get_profile(PREFIX + name)
    count = examples.get(name, base.max_examples)
    return name, settings(base, max_examples=count, **_COMMON)


@dataclass
class PropertyRun:
    """What a property run saw: examples run, and notes each example added (e.g. recompiles)."""

    profile: str
    max_examples: int
    examples: int = 0
    notes: list[str] = field(default_factory=list)

    def evidence(self, seen: Any) -> dict[str, Any]:
        """A property's evidence: examples run under which profile, and what its examples counted (`seen`)."""
        return {"examples": self.examples, "profile": self.profile, **{str(k): v for k, v in dict(seen).items()}}


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
    except NotApplicable:  # the case cannot be stepped as the property steps it (a constructor that takes the model
        raise  # itself, given loose params): every draw raises it, a skip saying why, no falsifying example
    except Exception as exc:
        if not last:
            raise
        shown = ", ".join(f"{k}={v!r}" for k, v in last[0].items())
        raise AssertionError(
            f"{title}: falsified (hypothesis profile {profile!r}, {run.examples} examples run); minimal example:\n"
            f"    {shown}\n{type(exc).__name__ if not isinstance(exc, AssertionError) else ''}"
            f"{': ' if not isinstance(exc, AssertionError) else ''}{exc}\n{_raised_at(exc)}"
            f"rerun: {reproduce} --hypothesis-profile {profile}\n"
            f"pin it in a test of your own (from pytest_optimtest import load_case; "
            f"from pytest_optimtest.strategies import *):\n    @example({shown})"
        ) from exc
    return run


def _raised_at(exc: Exception) -> str:
    """Where the example's error was raised, and whose doing it is, when not the property's own verdict."""
    if isinstance(exc, AssertionError):
        return ""
    from .blame import blame  # it imports torch; this module loads with the plugin, before torch may be imported

    found = blame(exc)
    if found.owner == "optimizer" and found.where:
        return f"  at {found.where} (the optimizer's doing)\n"
    if found.owner == "torch" and found.innermost:
        what = "the code inductor generated raised it" if found.generated else "raised in torch's code"
        last = f"; the optimizer's last line before it: {found.where}" if found.where else ""
        return f"  at {found.innermost}: torch's doing ({what}{last})\n"
    return f"  at {found.innermost}\n" if found.innermost else ""
