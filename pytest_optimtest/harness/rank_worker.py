"""One rank's process: `python -m pytest_optimtest.harness.rank_worker FOLDER RANK HOST PORT`.

Joins the process group through the test process's store, runs the job's function
and pickles its return value to FOLDER/rank<RANK>.out. Any exception exits non-zero
with its traceback on stdout, which the test process reports.
"""

from __future__ import annotations

import os
import pickle
import sys
from datetime import timedelta
from pathlib import Path


def main(folder: str, rank: str, host: str, port: str) -> None:
    import torch.distributed as dist

    from ..spec.values import resolve

    job = pickle.loads((Path(folder) / "job.pkl").read_bytes())
    timeout = timedelta(seconds=job.timeout_s)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    dist.init_process_group(job.backend, store=store, rank=int(rank), world_size=job.world_size, timeout=timeout)
    result = resolve(job.function)(job.payload, int(rank), job.world_size)
    (Path(folder) / f"rank{rank}.out").write_bytes(pickle.dumps(result))
    dist.destroy_process_group()
    sys.stdout.flush()
    # Skip interpreter teardown: torch 2.13's store/gloo threads sometimes abort in static destructors
    # ("terminate called without an active exception", SIGABRT) after all work is done.
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
