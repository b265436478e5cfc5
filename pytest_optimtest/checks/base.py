"""What a check is, and how it says 'this comparison did not happen'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class NotApplicable(Exception):
    """The check cannot say anything about this case; the reason is reported as a skip."""


@dataclass(frozen=True)
class Check:
    """A named property of a case. `run(case, runs)` returns a one-line summary or raises
    AssertionError (failed) or NotApplicable (nothing to compare)."""

    name: str
    run: Callable
    description: str
