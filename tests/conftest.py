import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # planted.py and helpers.py

import pytest


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester runs get the suite's fixed order (pytester clears PYTEST_ADDOPTS first); tests
    about random order pass `-p randomly`."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    return pytester


@pytest.fixture
def ci_profile():
    """Hypothesis's `ci` settings profile (ours: derandomized, 10 examples) for the test."""
    from hypothesis import settings

    from pytest_optimtest.harness.hypothesis_runs import register_profiles

    register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile("optimtest-ci")
    yield
    settings.load_profile(previous)
