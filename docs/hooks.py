"""MkDocs hook: fills the reference pages' markers with what pytest_optimtest.reference renders
from the code, so a key, check or option added in code appears here with no edit (and one
without a description fails the build)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- reference: (\w+) -->")
RELEASES = Path(__file__).parent / "releases"  # rows written by tools/torch_release.py
SPECS = Path(__file__).parent.parent / "specs"  # the shipped specs: each spec key's example


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: _render(match.group(1)), markdown)


def _render(what: str) -> str:
    # imported here, not at the top: MkDocs loads hooks before the page needs them, and this pulls in torch
    from pytest_optimtest import plugin, reference
    from pytest_optimtest.__main__ import build_parser
    from pytest_optimtest.checks import CHECKS

    renderers = {
        "spec_keys": lambda: reference.spec_keys(CHECKS, sorted(SPECS.rglob("*.yaml"), key=lambda p: ("ecosystem" in p.parts, p))),
        "checks": lambda: reference.checks(CHECKS),
        "options": lambda: reference.options([plugin.pytest_addoption]),
        "commands": lambda: reference.commands(build_parser()),
        "releases": _releases,
    }
    if what not in renderers:
        raise ValueError(f"unknown reference marker {what!r}; known: {', '.join(renderers)}")
    return renderers[what]()


def _releases() -> str:
    """The compatibility table: one row per main-job run that tools/torch_release.py recorded."""
    rows = ["| torch | device | passed | failed | xfailed | skipped | kernel_count passed / skipped | exit code | date | command | note |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |"]
    for path in sorted(RELEASES.glob("*.json")):
        row = json.loads(path.read_text())
        seen, kernels = row["outcomes"], row["kernel_count"]
        rows.append(f"| {row['torch']} | {row['device']} | {seen.get('passed', 0)} | {seen.get('failed', 0)} | "
                    f"{seen.get('xfailed', 0)} | {seen.get('skipped', 0)} | {kernels.get('passed', 0)} / "
                    f"{kernels.get('skipped', 0)} | {row['exit_code']} | {row['date']} | `{row['command']}` | {row.get('note', '')} |")
    return "\n".join(rows)
