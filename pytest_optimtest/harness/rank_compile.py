"""Inductor on N ranks that compile the same graphs: rank 0 compiles each graph first, and the other
ranks, waiting for it, find the graph in inductor's on-disk cache instead of compiling it again at
the same moment. Sharded params of equal shards trace to equal graphs, so a compiled FSDP run costs
one rank's compile, not N of them; what runs is the same inductor code either way.

No deadlock: every rank compiles its k-th graph at the same point of the same program, so rank 0
reaches that point whatever the others wait for. Where the ranks' programs differ (a graph only one
rank compiles), the wait times out and the rank compiles on its own.

Waiting pays only where the ranks' graphs key alike in the cache. Some releases key a DTensor
graph by each rank's DeviceMesh (torch 2.13 pickles its rank, coordinate and a per-process hash
into the FX graph cache key): every rank then misses, and waiting would only queue N full compiles
one after another. A rank that waited and still missed stops waiting for the rest of its process.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from . import torch_api

# At most this long for rank 0's graph, then compile it here: a graph rank 0 never compiles costs
# this once, well inside a rank job's timeout (180 s by default); a slower rank 0 only costs the saving.
WAIT_S = 30.0


class _Waiting:
    """Whether a rank that waits for rank 0's graph finds it in the cache (this process's torch decides)."""

    pays = True


_waiting = _Waiting()


def rank_ordered_inductor(rank: int, run_key: str, wait_s: float = WAIT_S) -> Callable[..., Any]:
    """A torch.compile backend: inductor, each graph compiled on rank 0 before the other ranks.
    `run_key` names this run on the process group's store (unique per run: the store outlives it)."""
    store = torch_api.process_group_store()
    compile_fx = torch_api.inductor_backend()
    graph_numbers = itertools.count()

    def backend(graph: Any, example_inputs: Any) -> Any:
        key = f"optimtest-compiled/{run_key}/{next(graph_numbers)}"
        if rank != 0:
            if not _waiting.pays:
                return compile_fx(graph, example_inputs)
            try:
                store.wait([key], timedelta(seconds=wait_s))
            except RuntimeError:  # the store's timeout (DistStoreError): compile this graph here, uncached
                return compile_fx(graph, example_inputs)
            hits = torch_api.compile_cache_hits()
            compiled = compile_fx(graph, example_inputs)
            _waiting.pays = torch_api.compile_cache_hits() > hits
            return compiled
        try:
            return compile_fx(graph, example_inputs)
        finally:  # raised or not: the other ranks go on (and meet the same error themselves)
            store.set(key, "done")

    return backend
