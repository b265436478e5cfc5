"""Hooks other plugins and conftest.py files implement."""

from __future__ import annotations


def pytest_optimtest_checks():
    """Return a list of `pytest_optimtest.Check` to register next to the built-in checks.

    Example, in a conftest.py::

        from pytest_optimtest import Check

        def check_finite(case, runs):
            run = runs.compiled(case)
            assert all(p.isfinite().all() for p in run.compiled.params.values()), "non-finite params"
            return "all params finite"

        def pytest_optimtest_checks():
            return [Check("finite", check_finite, "compiled params stay finite", prerequisites=("parity",))]
    """
