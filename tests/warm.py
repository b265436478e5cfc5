"""Nested sessions and `init` runs forked from a process that has already imported torch.

A nested `python -m pytest` spends about 6 s of CPU before its first test (Python, torch, dynamo),
and the supervisor of a serial session starts a second such process: over the suite's hundred-odd
nested runs, a fifth of its time. Here one helper process per worker (the zygote) imports torch
once and does nothing else; each run is a fork of it that becomes `python -m <module> <args>` in
the run's folder, with the run's environment, stdout and stderr, and exits. It is still a process
of its own: what it imports, writes or crashes stays there.

What a child shares with the zygote is what the zygote imported, and whatever of the environment
those imports read. So a zygote serves only runs whose import-time environment (TORCH*, PYTHON*,
OMP_*, ...) is its own; another gets a zygote of its own, and where there is no fork, a plain
subprocess. The package under test is never imported ahead: its entry points (third-party checks)
are found as a fresh process finds them.

Sessions run with `--optim-in-process`: a supervised one would start a cold child of its own.
Tests of the supervisor, of crashes it contains, and of xdist sessions start real processes.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from _pytest.pathlib import make_numbered_dir  # pytester's own numbering of --basetemp folders

# Read by some import when a process starts (torch's config, logging and threads; Python's own).
IMPORT_TIME_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "OMP_", "MKL_", "KMP_", "OPENBLAS", "PYTHON", "HYPOTHESIS", "LD_")
# Not pytest plugins (xdist, Hypothesis): pytest rewrites a plugin's asserts as it loads it, and warns where
# the module is already imported.
WARM_IMPORTS = ("torch", "torch._dynamo", "torch._inductor.config", "torch.distributed", "numpy", "ruamel.yaml", "pydantic")

_BOOT = r"""
import json, os, runpy, sys
for name in sys.argv[1:]:
    try:
        __import__(name)
    except ImportError:  # not installed in this venv: a child fails to import it just as a cold process would
        pass
base_path = sys.path[1:]  # sys.path[0] is '' for -c: a child puts its own folder there
requests = os.fdopen(os.dup(0), "r")  # the protocol's own descriptors: 0, 1 and 2 become each child's
replies = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
for line in requests:
    run = json.loads(line)
    pid = os.fork()
    if pid == 0:
        requests.close()
        replies.close()
        os.chdir(run["cwd"])
        os.environ.clear()
        os.environ.update(run["env"])
        sys.path[:] = [run["cwd"], *filter(None, run["env"].get("PYTHONPATH", "").split(os.pathsep)), *base_path]
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, run["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, run["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
        sys.argv = ["", *run["args"]]  # runpy puts the module's file first
        runpy.run_module(run["module"], run_name="__main__", alter_sys=True)
        raise SystemExit(0)  # the interpreter's own exit: atexit handlers run, streams are flushed
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
"""


def _import_time(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k != "PYTHONPATH"))


class Zygote:
    """A process that imported WARM_IMPORTS and forks one run at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        boot_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, *WARM_IMPORTS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=boot_env, text=True, bufsize=1, cwd="/")

    def run(self, cwd: Path, module: str, args: list[str], env: dict[str, str], stdout: Path, stderr: Path,
            timeout: float | None) -> int:
        """The exit code of `python -m <module> *args` in `cwd` (negative: the signal that ended it);
        TimeoutError once `timeout` seconds pass, the run killed."""
        assert self.proc.stdin and self.proc.stdout  # Popen(stdin=PIPE, stdout=PIPE)
        run = {"cwd": str(cwd), "module": module, "args": args, "env": env, "stdout": str(stdout), "stderr": str(stderr)}
        try:
            self.proc.stdin.write(json.dumps(run) + "\n")
            reply = self.proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"the zygote (pid {self.proc.pid}) exited with code {self.proc.wait()}; it wrote "
                                   "to this worker's stderr why")
            pid = json.loads(reply)["pid"]
            if select.select([self.proc.stdout], [], [], timeout)[0]:
                return int(json.loads(self.proc.stdout.readline())["code"])
            os.kill(pid, signal.SIGKILL)
            self.proc.stdout.readline()
        except BaseException:  # interrupted between request and reply: a later run would read this one's reply
            self.proc.kill()
            raise
        raise TimeoutError(f"{timeout} second timeout expired running: python -m {module} {' '.join(args)}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            assert self.proc.stdin
            self.proc.stdin.close()  # the zygote ends at the end of its input
            self.proc.wait(timeout=60)


_ZYGOTES: dict[tuple[tuple[str, str], ...], Zygote] = {}


def _zygote(env: dict[str, str]) -> Zygote | None:
    if not hasattr(os, "fork"):
        return None
    key = _import_time(env)
    if key not in _ZYGOTES or not _ZYGOTES[key].alive():
        _ZYGOTES[key] = Zygote(env)
    return _ZYGOTES[key]


@atexit.register
def _close_all() -> None:
    while _ZYGOTES:
        _ZYGOTES.popitem()[1].close()


def run_module(cwd: Path, module: str, args: list[str], env: dict[str, str] | None = None,
               timeout: float | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, module, *args], cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)`, forked from a warm zygote where there is one."""
    env = dict(os.environ if env is None else env)
    zygote = _zygote(env)
    if zygote is None:
        return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="warm-run-") as folder:
        stdout, stderr = Path(folder, "stdout"), Path(folder, "stderr")
        try:
            code = zygote.run(Path(cwd).resolve(), module, args, env, stdout, stderr, timeout)
        except TimeoutError:
            raise subprocess.TimeoutExpired([module, *args], timeout or 0.0, stdout.read_text(), stderr.read_text()) from None
        return subprocess.CompletedProcess([module, *args], code, stdout.read_text(), stderr.read_text())


def run_pytest_in(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """A serial session of `python -m pytest *args` in `cwd`, in process (no supervisor), forked warm."""
    return run_module(cwd, "pytest", _in_process(args), timeout=timeout)


def _pytester_run(pytester: pytest.Pytester, module: str, args: list[str], timeout: float | None) -> pytest.RunResult:
    """As pytester.run(python, -m, module, *args): its folder, its PYTHONPATH, its printed output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    print("running: python -m", module, *args)
    print("     in:", Path.cwd())
    started = time.monotonic()
    try:
        done = run_module(Path.cwd(), module, args, env, timeout)
    except subprocess.TimeoutExpired as error:
        raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: {error.cmd}") from None
    out, err = done.stdout.splitlines(), done.stderr.splitlines()
    print("\n".join(out), "\n".join(err), sep="\n")
    return pytest.RunResult(done.returncode, out, err, time.monotonic() - started)


def run_pytest(pytester: pytest.Pytester, *args: str, timeout: float | None = None) -> pytest.RunResult:
    """`pytester.runpytest_subprocess(*args)` of a serial session, in process (no supervisor), forked warm."""
    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    return _pytester_run(pytester, "pytest", [f"--basetemp={basetemp}", *_in_process(args)], timeout)


def _in_process(args: tuple[str, ...]) -> list[str]:
    """A serial session's arguments, run in process: an xdist session's workers would start cold anyway."""
    workers = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("-n", "--numprocesses")]
    assert all(w == "0" for w in workers) and "--dist" not in args, \
        f"an xdist session starts cold workers: run it with pytester.runpytest_subprocess {args}"
    return [*args, "--optim-in-process"]


def run_init(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """`pytester.run(python, -m, pytest_optimtest, *args)` (init's command line), forked warm."""
    return _pytester_run(pytester, "pytest_optimtest", list(args), None)
