import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # planted.py and helpers.py

import pytest

PYTESTER_ADDOPTS = "-p no:randomly --optim-device cpu"


@pytest.fixture(autouse=True)
def nested_sessions_on_cpu(monkeypatch):
    """Every pytest session a test starts in a subprocess of its own gets the same fixed order and CPU
    cases as pytester's below: on a GPU machine `init` writes CUDA cases too, which would double the
    counts the tests expect."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PYTESTER_ADDOPTS)


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester runs get the suite's fixed order (pytester clears PYTEST_ADDOPTS first), and CPU cases
    only: the counts the tests expect are CPU's, on a contributor's GPU machine too. Tests about
    random order pass `-p randomly`, those about devices pass their own `--optim-device` (it wins)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PYTESTER_ADDOPTS)
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
