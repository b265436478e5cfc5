"""MkDocs hook: fills the reference pages' markers with what pytest_optimtest.reference renders
from the code, so a key, check or option added in code appears here with no edit (and one
without a description fails the build)."""

from __future__ import annotations

import re
from typing import Any

MARKER = re.compile(r"<!-- reference: (\w+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: _render(match.group(1)), markdown)


def _render(what: str) -> str:
    # imported here, not at the top: MkDocs loads hooks before the page needs them, and this pulls in torch
    from pytest_optimtest import plugin, reference
    from pytest_optimtest.__main__ import build_parser
    from pytest_optimtest.checks import CHECKS

    renderers = {
        "spec_keys": lambda: reference.spec_keys(CHECKS),
        "checks": lambda: reference.checks(CHECKS),
        "options": lambda: reference.options([plugin.pytest_addoption]),
        "commands": lambda: reference.commands(build_parser()),
    }
    if what not in renderers:
        raise ValueError(f"unknown reference marker {what!r}; known: {', '.join(renderers)}")
    return renderers[what]()
