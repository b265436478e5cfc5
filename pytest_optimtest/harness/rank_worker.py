"""One rank's process: `python -m pytest_optimtest.harness.rank_worker FOLDER RANK HOST PORT`.

Joins the process group through the test process's store, then runs jobs until its stdin
closes: for each job number N read there, it runs FOLDER/jobN.pkl's function and pickles
the return value to FOLDER/rank<RANK>.N.out. Any exception ends the process non-zero (its
peers would wait for it in a collective) with its traceback on stdout, and what raised it and
whose doing it is in FOLDER/rank<RANK>.N.err, which the test process reports first, and its root
cause where blame knows one in FOLDER/rank<RANK>.N.cause (one red with the same cause raised in the test process).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
from datetime import timedelta
from pathlib import Path


def main(folder: str, rank: str, host: str, port: str) -> None:
    faulthandler.enable()  # a rank killed by a signal (a segfault in native code) leaves its Python stack in the log
    if hasattr(faulthandler, "register"):  # POSIX: the test process asks a rank that hangs where it is (ranks._ask_for_stacks)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    import torch.distributed as dist

    from ..spec.values import resolve
    from . import torch_api
    from .isolation import optimizer_globals_kept

    here = Path(folder)
    world_size, backend, timeout_s = pickle.loads((here / "group.pkl").read_bytes())
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=int(rank), world_size=world_size, timeout=timeout)
    while line := sys.stdin.readline():
        number = int(line)
        job = pickle.loads((here / f"job{number}.pkl").read_bytes())
        print(f"--- job {number}: {job.function}", flush=True)
        try:
            # the rank runs case after case: what one job's optimizer changes process-wide is not the next one's
            with optimizer_globals_kept(getattr(job.payload, "case", None)), torch_api.guard_latency_unprofiled():
                result = resolve(job.function)(job.payload, int(rank), world_size)
        except Exception as exc:  # a rank's exit (SystemExit) or a signal tells of itself
            from .blame import blame, root_cause, told  # imported once a job failed: the rank's start stays as light as it was

            (here / f"rank{rank}.{number}.err").write_text(told(exc).replace("\n", "\n    "))
            (here / f"rank{rank}.{number}.cause").write_text(blame(exc).mechanism)
            (here / f"rank{rank}.{number}.root").write_text(root_cause(exc))
            raise
        partial = here / f"rank{rank}.{number}.part"
        partial.write_bytes(pickle.dumps(result))
        os.replace(partial, here / f"rank{rank}.{number}.out")  # the test process sees it whole or not at all
    dist.destroy_process_group()
    sys.stdout.flush()
    # Skip interpreter teardown: torch 2.13's store/gloo threads sometimes abort in static destructors
    # ("terminate called without an active exception", SIGABRT) after all work is done.
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
