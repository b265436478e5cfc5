"""A serial session runs under a supervisor, so that a case whose process dies is one failed case.

Under pytest-xdist a dead worker is replaced, and the journal (harness/containment.py) fails
the case's other items. Run serially, nothing of the process outlives it. So the command's
own process becomes a supervisor: it runs the same command in a child and waits. When the
child dies while the journal names a case it was running, the supervisor runs the command
again; there the journal fails that case's items at once as crashed, and the rest runs to a
whole report. Tests that ran before the death run twice (their results died with the child).

Only a session started as a command is supervised (pytest.main(), pytester's in-process runs
cannot be re-executed faithfully), and `--optim-in-process` turns it off.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .harness.containment import JOURNAL_ENV

SUPERVISED_ENV = "PYTEST_OPTIMTEST_SUPERVISED"
MAX_RUNS = 10  # each death fails one case for good, so a run ends after as many deaths as crashing cases


def wanted(config: pytest.Config, has_specs: bool) -> bool:
    """Whether this session should run as a supervisor of a child running the same command."""
    option = config.option
    return (has_specs and not config.getoption("optim_in_process") and not supervised()
            and not hasattr(config, "workerinput")  # an xdist worker: xdist replaces it when it dies
            and not getattr(option, "numprocesses", None) and getattr(option, "dist", "no") == "no"
            and not any(getattr(option, name, False) for name in ("help", "version", "collectonly", "markers",
                                                                  "showfixtures", "show_fixtures_per_test"))
            and tuple(config.invocation_params.args) == tuple(sys.argv[1:]))


def supervised() -> bool:
    """Whether this process is the child of a supervisor. The variable names the supervisor's pid, so a
    pytest that a test of the child starts (and that inherits the environment) is not taken for it."""
    return os.environ.get(SUPERVISED_ENV) == str(os.getppid())


def supervise(config: pytest.Config) -> int:
    """Run the command in a child until it ends without dying in a case; its exit code."""
    folder = tempfile.mkdtemp(prefix="optimtest-journal-")
    env = {**os.environ, SUPERVISED_ENV: str(os.getpid()), JOURNAL_ENV: folder}
    command = [sys.executable, "-m", "pytest", *config.invocation_params.args]
    try:
        for _ in range(MAX_RUNS):
            before = set(os.listdir(folder))
            code = _wait(subprocess.Popen(command, cwd=config.invocation_params.dir, env=env))
            died = [Path(folder, name).read_text(errors="replace") for name in set(os.listdir(folder)) - before]
            if not died:
                return code
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            sys.stderr.write(f"\noptimtest: the session's process died ({how}) in {died[0]}; running the session "
                             "again, where that case fails as crashed and the rest runs\n")
        sys.stderr.write(f"optimtest: the session died {MAX_RUNS} times; giving up\n")
        return pytest.ExitCode.INTERNAL_ERROR
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait(child: subprocess.Popen) -> int:
    """The child's exit code; Ctrl-C reaches the child (same process group), which ends its session itself."""
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue
