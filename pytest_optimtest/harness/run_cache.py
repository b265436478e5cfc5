"""Expensive runs are done once per case and shared by every check that needs them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..spec.case import Case
from ..spec.schema import Tolerance
from .containment import CaseTimedOut
from .compiled_run import CompiledRun, run_compiled
from .distributed_run import DistributedRun, run_distributed
from .fsdp_run import FsdpRun, run_fsdp
from .hook_recorder import record_case
from .hyperparameter_runs import GroupRuns, HyperparameterProbe, Moved, grouped_and_alone, probe_hyperparameters, two_groups_run
from .in_backward_run import InBackwardRun, run_in_backward
from .joiner_runs import JoinerRuns, joiner_runs
from .law_runs import LawTrajectory, lr_scaled
from .ladder import Ladder
from .observed_run import ObservedRun, observed_run
from .ranks import RankPools
from .runner import Regime, Run, run

CaseKey = tuple[str, str]  # (spec file, case id): ids repeat across spec files


class RunCache:
    """Per-case memo of runs (results or the exception they raised), freed when released."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, CaseKey], Any] = {}
        self.cases_run = 0
        self.perturbed: set[CaseKey] | None = None  # cases a selected check needs perturbed; None: every case
        self.rank_pools = RankPools()  # rank processes, kept from one distributed case to the next

    def compiled(self, case: Case) -> CompiledRun:
        """The one compiled run of `case` (parity, kernel_count, recompile, graph_breaks)."""
        perturb = self.perturbed is None or case.key in self.perturbed
        return self._get("compiled", case, lambda c: run_compiled(c, perturb=perturb))

    def run(self, case: Case, regime: Regime | None = None) -> Run:
        """The run of `case` in `regime` (eager, as the spec gives it, by default), done once for
        every check that asks for an equal regime."""
        regime = regime or Regime()
        try:
            hash(regime)
        except TypeError:  # a kwarg value that cannot be a key (a list): not shared
            return run(case, regime)
        return self._get(("run", regime), case, lambda c: run(c, regime))

    def ladder(self, case: Any) -> Ladder:
        """The case's prerequisite ladder, climbed once for all its checks."""
        key = ("ladder", case.key)
        if key not in self._runs:
            self._runs[key] = Ladder(case, self)
        return self._runs[key]

    def distributed(self, case: Case) -> DistributedRun:
        """The N-rank DDP/ZeRO run and the one-process runs of `case` (distributed, zero)."""
        return self._get("distributed", case, lambda c: run_distributed(self._long_enough(c), self.rank_pools))

    def fsdp(self, case: Case) -> FsdpRun:
        """The FSDP2-sharded runs of `case` and its one-process reference (fsdp, checkpoint)."""
        return self._get("fsdp", case, lambda c: run_fsdp(self._long_enough(c), self.rank_pools))

    def _long_enough(self, case: Case) -> Case:
        """The case with as many train steps on ranks as its eager step needs to move its params (an optimizer that
        waits before it moves): its spec's `distributed.iterations` would compare params that never moved."""
        steps = self.ladder(case).steps_before_moving()
        if steps <= case.distributed.iterations:
            return case
        return dataclasses.replace(case, distributed=case.distributed.model_copy(update={"iterations": steps}))

    def in_backward(self, case: Case, tied: bool = False, copies: int = 1) -> InBackwardRun:
        """The case's optimizer applied in backward beside its normally stepped twin (the in_backward checks)."""
        return self._get(("in_backward", tied, copies), case, lambda c: run_in_backward(c, tied, copies))

    def observed(self, case: Case, steps: int, min_ndim: int, tol: Tolerance, floor: float) -> ObservedRun:
        """The observed eager run of the law params and its twin (grads, closure, state size, RNG,
        hooks and determinism laws)."""
        return self._get("observed", case, lambda c: observed_run(c, steps, min_ndim, tol, floor))

    def hyperparameters(self, case: Case, steps: int, min_ndim: int, tol: Tolerance, floor: float) -> HyperparameterProbe:
        """Each of the case's hyperparameters moved to a value that visibly changes its run (the
        group_hyperparameters and changed_hyperparameters laws)."""
        return self._get("hyperparameters", case, lambda c: probe_hyperparameters(c, steps, min_ndim, tol, floor))

    def two_groups(self, case: Case, steps: int, min_ndim: int) -> LawTrajectory:
        """The case's optimizer stepping two param groups with equal options (the laws over groups)."""
        return self._get("two_groups", case, lambda c: two_groups_run(c, steps, min_ndim))

    def group_runs(self, case: Case, moved: Moved, steps: int, min_ndim: int) -> GroupRuns:
        """The two-group and one-group runs of one moved hyperparameter (group_hyperparameters, and
        changed_hyperparameters, which defers to its verdict key by key)."""
        return self._get(("group_runs", moved.key), case, lambda c: grouped_and_alone(c, moved, steps, min_ndim))

    def joiners(self, case: Case, how: str, factor: float, steps: int, min_ndim: int) -> JoinerRuns:
        """The joiner runs at `factor` times the case's lr (late_joiners, and add_param_group, which
        defers to late_joiners' red)."""
        return self._get(("joiners", how, factor), case,
                         lambda c: joiner_runs(lr_scaled(c, factor), how, steps, steps, min_ndim))  # type: ignore[arg-type]

    def hook_order(self, case: Any) -> Any:
        """A hook-order case's recording: (observed events, the order derived from its module tree)."""
        return self._get("hook_order", case, record_case)

    def _get(self, kind: Any, case: Case, make: Callable[[Case], Any]) -> Any:
        key = (kind, case.key)
        if key not in self._runs:
            try:
                self._runs[key] = make(case)
            except (Exception, CaseTimedOut) as exc:  # replayed to every check of this case
                self._runs[key] = exc
            finally:
                self.cases_run += 1
        result = self._runs[key]
        if isinstance(result, (Exception, CaseTimedOut)):
            raise result
        return result

    def peek(self, kind: str, case: Any) -> Any:
        """The finished run of that kind ("compiled", "distributed") for the case, or None (not
        run, or it raised); never runs anything."""
        result = self._runs.get((kind, case.key))
        return None if isinstance(result, (Exception, CaseTimedOut)) else result

    def release(self, case: Any) -> None:
        """Free the case's runs (its last item was torn down)."""
        for key in [k for k in self._runs if k[1] == case.key]:
            del self._runs[key]

    def close(self) -> None:
        """End the rank processes kept (the runs stay readable)."""
        self.rank_pools.close()
