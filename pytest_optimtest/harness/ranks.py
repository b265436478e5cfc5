"""Run a function on N ranks as real processes: rendezvous, timeout, teardown.

The test process holds the rendezvous store, bound to port 0 on loopback, so the
operating system picks a free port and no two runs (xdist workers included) can
collide. Each rank is `python -m pytest_optimtest.harness.rank_worker`, in its own
process group, so a hung or crashed rank is killed with everything it started.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


class RankFailure(AssertionError):
    """A rank crashed, raised, or did not finish in time; says which, with its output."""

    def __init__(self, message: str, pids: list[int]) -> None:
        super().__init__(message)
        self.pids = pids


@dataclass(frozen=True)
class RankJob:
    """What every rank runs: `function(job.payload, rank, world_size)` by import path."""

    function: str  # "package.module:function"
    payload: Any
    world_size: int
    backend: str
    timeout_s: float


def run_ranks(job: RankJob) -> list[Any]:
    """Each rank's return value, in rank order; RankFailure when any rank fails or hangs."""
    import torch.distributed as dist

    store = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory(prefix="optimtest-ranks-") as tmp:
        folder = Path(tmp)
        (folder / "job.pkl").write_bytes(pickle.dumps(job))
        procs = [_start(folder, rank, store.port) for rank in range(job.world_size)]
        try:
            _wait(procs, folder, job.timeout_s)
            return [pickle.loads((folder / f"rank{r}.out").read_bytes()) for r in range(job.world_size)]
        finally:
            _kill(procs)
            del store


def _start(folder: Path, rank: int, port: int) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)  # the ranks import what this process can
    env.setdefault("GLOO_SOCKET_IFNAME", "lo" if sys.platform.startswith("linux") else "lo0")
    log = open(folder / f"rank{rank}.log", "wb")
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest_optimtest.harness.rank_worker", str(folder), str(rank), HOST, str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )


def _wait(procs: list[subprocess.Popen], folder: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pids = [p.pid for p in procs]
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:  # the others would wait in a collective until the backend's timeout
            _kill(procs)
            raise RankFailure(
                "\n".join(f"rank {r} failed (exit code {codes[r]}):\n{_tail(folder, r)}" for r in failed), pids
            )
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            waiting = [r for r, c in enumerate(codes) if c is None]
            _kill(procs)
            raise RankFailure(
                f"rank(s) {waiting} did not finish within {timeout_s:g}s (hung in a collective?); killed.\n"
                + "\n".join(f"rank {r} output:\n{_tail(folder, r)}" for r in waiting), pids
            )
        time.sleep(0.05)


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def _tail(folder: Path, rank: int, lines: int = 25) -> str:
    path = folder / f"rank{rank}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "    " + "\n    ".join(kept) if kept else "    (no output)"
