"""Build cases from YAML text, for unit tests of checks and expansion."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.torch_api import torch_version
from pytest_optimtest.spec import Case


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def cases_from(tmp_path: Path, text: str, version: str | None = None) -> list[Case]:
    return CHECKS.cases(write_spec(tmp_path, text), version or torch_version())


def one_case(tmp_path: Path, text: str) -> Case:
    (case,) = cases_from(tmp_path, text)
    return case
