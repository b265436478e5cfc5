"""A pytest plugin for tools/gpu/run.sh: each failure's text is appended to a file as it happens (a
run cut by its time limit prints nothing at its end), with each test's duration."""

from __future__ import annotations

import os

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes each report once
        return
    folder = os.environ.get("OUT", "/tmp/out")
    path = os.environ.get("FAILURES_FILE", os.path.join(folder, "main_failures.txt"))
    if report.failed:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when}, {report.duration:.1f}s)\n{report.longreprtext}\n\n")
    if report.when == "call":
        with open(path.replace("failures", "durations"), "a") as f:
            f.write(f"{report.duration:.1f}\t{report.outcome}\t{report.nodeid}\n")
