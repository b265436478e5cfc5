"""Expensive runs are done once per case and shared by every check that needs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..spec.case import Case
from .compiled_run import CompiledRun, run_compiled
from .distributed_run import DistributedRun, run_distributed
from .ranks import RankPools


class RunCache:
    """Per-case memo of runs (results or the exception they raised), freed when released."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], Any] = {}
        self.cases_run = 0
        self.unperturbed: set[str] = set()  # cases whose recompile check is not selected: no perturbation compiles
        self.rank_pools = RankPools()  # rank processes, kept from one distributed case to the next

    def compiled(self, case: Case) -> CompiledRun:
        """The one compiled run of `case` (parity, kernel_count, recompile, graph_breaks)."""
        return self._get("compiled", case, lambda c: run_compiled(c, perturb=c.id not in self.unperturbed))

    def distributed(self, case: Case) -> DistributedRun:
        """The N-rank DDP/ZeRO run and the one-process runs of `case` (distributed, zero)."""
        return self._get("distributed", case, lambda c: run_distributed(c, self.rank_pools))

    def _get(self, kind: str, case: Case, make: Callable[[Case], Any]) -> Any:
        key = (kind, case.id)
        if key not in self._runs:
            try:
                self._runs[key] = make(case)
            except Exception as exc:  # replayed to every check of this case
                self._runs[key] = exc
            finally:
                self.cases_run += 1
        result = self._runs[key]
        if isinstance(result, Exception):
            raise result
        return result

    def peek(self, kind: str, case_id: str) -> Any:
        """The finished run of that kind for the case, or None (not run, or it raised)."""
        result = self._runs.get((kind, case_id))
        return None if isinstance(result, Exception) else result

    def release(self, case_id: str) -> None:
        for key in [k for k in self._runs if k[1] == case_id]:
            del self._runs[key]

    def close(self) -> None:
        """End the rank processes kept (the runs stay readable)."""
        self.rank_pools.close()
