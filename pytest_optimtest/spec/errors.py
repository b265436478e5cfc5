"""The one error type for bad spec input: file, line, key path and what was expected."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SpecError(Exception):
    """A spec file is invalid. ``str()`` is a one-line, user-facing message."""

    def __init__(self, path: str, line: int | None, key: str, message: str):
        self.path = str(path)
        self.line = line
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        key = f" [{self.key}]" if self.key else ""
        return f"{where}:{key} {self.message}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def key_path(parts: Iterable[object]) -> str:
    """('cases', 2, 'kwargs', 'lr') -> 'cases[2].kwargs.lr'"""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def internal_error(path: object, exc: BaseException) -> SpecError:
    """A loader failure that is pytest-optimtest's bug, worded as such, for that file alone."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return SpecError(str(path), None, "", f"pytest-optimtest failed on this spec ({type(exc).__name__}: {first}); "
                                          "this is a bug of pytest-optimtest, please report it with the file")
