"""The repository's own linter and type checker, run by the suite (and so by CI): ruff and mypy,
configured in pyproject.toml."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(command[0]) is None:  # a contributor's environment without the test extra
        pytest.skip(f"{command[0]} is not installed in this environment: pip install -e \".[test]\" installs it")
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_tool_skips_naming_it(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(pytest.skip.Exception, match=r"mypy is not installed in this environment: pip install -e"):
        _run("mypy")
