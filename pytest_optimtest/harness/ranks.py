"""Run a function on N ranks as real processes: rendezvous, timeout, teardown.

The test process holds the rendezvous store, bound to port 0 on loopback, so the
operating system picks a free port and no two runs (xdist workers included) can
collide. Each rank is `python -m pytest_optimtest.harness.rank_worker`, in its own
process group, so a hung or crashed rank is killed with everything it started.

Starting ranks costs seconds (each imports torch and joins the group), so a session
keeps them: `RankPools` holds one `RankPool` per (world size, backend, timeout) and
gives it jobs one at a time. A job that fails or hangs ends its pool; the next job
starts a fresh one.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .blame import file_owner

HOST = "127.0.0.1"
STACK_WAIT_S = 1.0  # how long ranks that did not finish get to write their stacks (rank_worker's SIGUSR1) before the kill
DEATH_GRACE_S = 0.5  # after one rank dies, how long the others get to die of their own before they are killed


class RankFailure(AssertionError):
    """A rank crashed, raised, or did not finish in time; says which, with its output, and the root
    cause of what a rank's job raised where blame knew one (`mechanism`)."""

    def __init__(self, message: str, pids: list[int], mechanism: str = "", root: str = "") -> None:
        super().__init__(message)
        self.pids, self.mechanism = pids, mechanism
        self.root = root  # the root cause's key (blame.root_cause) of what the first failed rank's job raised, if it raised


@dataclass(frozen=True)
class RankJob:
    """What every rank runs: `function(job.payload, rank, world_size)` by import path."""

    function: str  # "package.module:function"
    payload: Any
    world_size: int
    backend: str
    timeout_s: float

    @property
    def group(self) -> tuple[int, str, float]:
        """What the ranks' process group is made with: jobs that agree on it share a pool."""
        return self.world_size, self.backend, self.timeout_s


def run_ranks(job: RankJob, pools: RankPools | None = None) -> list[Any]:
    """Each rank's return value, in rank order; RankFailure when any rank fails or hangs.
    With `pools`, on the ranks those keep; without, on ranks started and ended for this job."""
    if pools is not None:
        return pools.run(job)
    pool = RankPool(*job.group)
    try:
        return pool.run(job)
    finally:
        pool.close()


class RankPools:
    """The rank processes a session keeps, one pool per process-group shape."""

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str, float], RankPool] = {}

    def run(self, job: RankJob) -> list[Any]:
        pool = self._pools.get(job.group)
        if pool is None or not pool.alive:
            pool = self._pools[job.group] = RankPool(*job.group)
        return pool.run(job)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


class RankPool:
    """`world_size` rank processes in one process group, each waiting for job numbers on stdin."""

    def __init__(self, world_size: int, backend: str, timeout_s: float) -> None:
        import torch.distributed as dist

        self.world_size = world_size
        self._store: Any = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False)
        self._folder = tempfile.TemporaryDirectory(prefix="optimtest-ranks-")
        self.folder = Path(self._folder.name)
        (self.folder / "group.pkl").write_bytes(pickle.dumps((world_size, backend, timeout_s)))
        self._procs = [_start(self.folder, rank, self._store.port) for rank in range(world_size)]
        self._jobs = 0
        self._finalizer = weakref.finalize(self, _end, self._procs, self._folder)  # at exit, whatever happened

    @property
    def alive(self) -> bool:
        return self._finalizer.alive and all(p.poll() is None for p in self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def run(self, job: RankJob) -> list[Any]:
        number, self._jobs = self._jobs, self._jobs + 1
        (self.folder / f"job{number}.pkl").write_bytes(pickle.dumps(job))
        try:
            for proc in self._procs:
                proc.stdin.write(f"{number}\n".encode())  # type: ignore[union-attr]  # Popen(stdin=PIPE)
                proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:  # a rank died between jobs: _wait names it
            pass
        outputs = [self.folder / f"rank{r}.{number}.out" for r in range(self.world_size)]
        try:
            self._wait(outputs, job.timeout_s)
        except RankFailure:
            self.close()
            raise
        return [pickle.loads(path.read_bytes()) for path in outputs]

    def _wait(self, outputs: list[Path], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(path.exists() for path in outputs):
            codes = [p.poll() for p in self._procs]
            failed = [r for r, c in enumerate(codes) if c is not None]
            if failed:  # the others would wait in a collective until the backend's timeout
                codes = self._codes_after(DEATH_GRACE_S)
                then = [r for r, c in enumerate(codes) if c is not None and r not in failed]
                _kill(self._procs)
                raise RankFailure("\n".join([*(f"rank {r} failed ({_exit(codes[r], self.folder, r)})"
                                               f"{_raised(outputs[r]) or _outside_job(self.folder, r)}:\n"
                                               f"{_tail(self.folder, r)}" for r in failed),
                                             *(f"then rank {r} failed too, within {DEATH_GRACE_S:g}s ({_exit(codes[r], self.folder, r)}):\n"
                                               f"{_tail(self.folder, r)}" for r in then)]), self.pids,
                                  next(filter(None, (_cause(outputs[r]) for r in failed)), ""),
                                  next(filter(None, (_cause(outputs[r], ".root") for r in failed)), ""))
            if time.monotonic() > deadline:
                waiting = [r for r, path in enumerate(outputs) if not path.exists()]
                _ask_for_stacks([self._procs[r] for r in waiting])
                _kill(self._procs)
                raise RankFailure(
                    f"rank(s) {waiting} did not finish within {timeout_s:g}s; killed. "
                    + "; ".join(f"rank {r} was at {_stuck_at(self.folder, r)}" for r in waiting) + "\n"
                    + "\n".join(f"rank {r} output:\n{_tail(self.folder, r)}" for r in waiting), self.pids
                )
            time.sleep(0.02)

    def _codes_after(self, grace_s: float) -> list[int | None]:
        """The ranks' exit codes once every rank has exited or `grace_s` has passed: ranks that die of one
        cause die within moments of each other, and the failure names each (the first polled is chance)."""
        deadline = time.monotonic() + grace_s
        codes = [p.poll() for p in self._procs]
        while any(c is None for c in codes) and time.monotonic() < deadline:
            time.sleep(0.02)
            codes = [p.poll() for p in self._procs]
        return codes

    def close(self) -> None:
        """End the ranks (closing their stdin lets them leave the group) and remove the folder."""
        self._finalizer()
        self._store = None


def _environment() -> dict[str, str]:
    """A rank's environment: this process's, importing what it can, where the user set nothing else."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo" if sys.platform.startswith("linux") else "lo0")
    # torch builds with Triton (CUDA builds) start a pool of one compile process per core in every process
    # at its first compile (inductor's warm pool): ranks x xdist workers multiply it, for graphs this small.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def _start(folder: Path, rank: int, port: int) -> subprocess.Popen:
    log = open(folder / f"rank{rank}.log", "wb")
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest_optimtest.harness.rank_worker", str(folder), str(rank), HOST, str(port)],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=_environment(), start_new_session=True,
        )


def _end(procs: list[subprocess.Popen], folder: tempfile.TemporaryDirectory, grace_s: float = 5.0) -> None:
    for p in procs:
        try:
            p.stdin.close()  # type: ignore[union-attr]  # Popen(stdin=PIPE)
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    _kill(procs)
    folder.cleanup()


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def _raised(output: Path) -> str:
    """What the rank's job raised and whose doing it is, as the rank wrote it beside its output."""
    told = output.with_suffix(".err")
    return f": its job raised {told.read_text(errors='replace')}\n    its log" if told.exists() else ""


def _outside_job(folder: Path, rank: int) -> str:
    """Whose doing a rank's Python exception outside its job is (joining the group, loading the job, the
    plugin's own imports), by the innermost frame of the traceback it printed: never the optimizer's verdict."""
    path = folder / f"rank{rank}.log"
    frames = re.findall(r'File "(.+)", line (\d+), in (\S+)', path.read_text(errors="replace") if path.exists() else "")
    owned = [(frame, file_owner(frame[0])) for frame in frames]
    decided = [(frame, owner) for frame, owner in owned if owner != "python"]  # the standard library decides nothing
    if not decided:
        return ""
    (filename, line, function), owner = decided[-1]
    whose = {"pytest-optimtest": "pytest-optimtest's doing (a bug of ours: please report it with this case's spec)",
             "optimizer": "the optimizer's doing"}.get(owner, "torch's doing")
    return f": it raised outside its job, at {filename}:{line} in {function}: {whose}"


def _cause(output: Path, suffix: str = ".cause") -> str:
    """The root cause of what the rank's job raised, where blame knew one (`.root`: its key, blame's or not)."""
    cause = output.with_suffix(suffix)
    return cause.read_text(errors="replace") if cause.exists() else ""


def _ask_for_stacks(procs: list[subprocess.Popen]) -> None:
    """Have each rank's faulthandler write its threads' Python stacks into its log (rank_worker registers
    it for SIGUSR1), and give them a moment to: a rank blocked in a collective answers from C."""
    if not hasattr(signal, "SIGUSR1"):
        return
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGUSR1)
    time.sleep(STACK_WAIT_S)


def _stuck_at(folder: Path, rank: int) -> str:
    """Where a rank that did not finish was when asked: its innermost frame in the optimizer's code (or
    the innermost of the first thread faulthandler listed)."""
    path = folder / f"rank{rank}.log"
    frame = _innermost_frame(path.read_text(errors="replace") if path.exists() else "")
    if frame is None:
        return "an unknown line (it wrote no stack: blocked before Python?)"
    owner = file_owner(frame[0])
    return f"{frame[0]}:{frame[1]} in {frame[2]} ({'the optimizer' if owner == 'optimizer' else owner}'s code)"


def _innermost_frame(log: str) -> tuple[str, str, str] | None:
    """The innermost frame of the stacks faulthandler wrote into `log` that is the optimizer's code, else
    the innermost frame of the first thread listed; None where the log holds no stack."""
    dumps = log.split("(most recent call first):\n")[1:]
    stacks = [dump.partition("\n\n")[0] for dump in dumps]
    frames = [re.findall(r'^\s*File "(.+)", line (\d+) in (\S+)', stack, re.MULTILINE) for stack in stacks]
    ours = next((f for thread in frames for f in thread if file_owner(f[0]) == "optimizer"), None)
    return ours or next((thread[0] for thread in frames if thread), None)


def _exit(code: int | None, folder: Path, rank: int) -> str:
    """How a rank ended: its exit code, or the signal that killed it and the Python line it was running then
    (faulthandler's innermost frame: DeepSpeed's CPU Adam handing a DTensor's storage to its C++ kernel)."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        how = f"killed by signal {signal.Signals(-code).name} (exit code {code})"
    except ValueError:
        how = f"exit code {code}"
    path = folder / f"rank{rank}.log"
    frame = _innermost_frame(path.read_text(errors="replace") if path.exists() else "")
    return f"{how} at {frame[0]}:{frame[1]} in {frame[2]}" if frame else how


def _tail(folder: Path, rank: int, lines: int = 25) -> str:
    path = folder / f"rank{rank}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "    " + "\n    ".join(kept) if kept else "    (no output)"
