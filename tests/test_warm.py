"""The suite's warm runs (tests/warm.py) behave as `python -m <module>` in a process of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from warm import run_module

PROBE = """
import os, sys
print(os.getcwd(), os.environ.get("PROBE_VALUE"), sys.path[0], sys.argv[1:], __name__, hash("optimtest"))
sys.stderr.write("to stderr\\n")
if "--sleep" in sys.argv:
    import time
    time.sleep(60)
raise SystemExit(int(sys.argv[1]))
"""


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def test_a_warm_run_has_its_folder_environment_arguments_streams_and_exit_code(probe):
    env = {**os.environ, "PROBE_VALUE": "given"}
    warm = run_module(probe, "probe", ["7", "x y"], env=env, timeout=120)
    cold = subprocess.run([sys.executable, "-m", "probe", "7", "x y"], cwd=probe, env=env, capture_output=True, text=True)
    for run in (warm, cold):  # the last word is a string's hash: random, per process
        assert (run.returncode, run.stdout.rsplit(" ", 1)[0], run.stderr) == \
               (7, f"{probe} given {probe} ['7', 'x y'] __main__", "to stderr\n")


def test_an_import_time_variable_gets_a_process_started_with_it(probe):
    # PYTHONHASHSEED is read once, when Python starts: a fork of a process started without it would ignore it
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    warm = run_module(probe, "probe", ["0"], env=env, timeout=120)
    cold = subprocess.run([sys.executable, "-m", "probe", "0"], cwd=probe, env=env, capture_output=True, text=True)
    assert warm.stdout.split()[-1] == cold.stdout.split()[-1]


def test_a_run_past_its_timeout_is_killed(probe):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_module(probe, "probe", ["0", "--sleep"], timeout=5)
    assert time.monotonic() - started < 30
