"""The one compiled run of a case, which parity, kernel_count, graph_breaks and recompile all read.

Two runs of the one runner (runner.py): the compiled run warms up (until a step compiles nothing,
or as declared), then takes the steady steps, then (for a selected recompile check) the spec's
perturbations; the eager run takes the same steps, its scheduler stepped at the same points, and
parity compares the two after the last steady step. A compiled step that raises is compared with
the eager run's same step: raising there too, it is the optimizer's own error. The step is compiled
once, without fullgraph: a step that breaks the graph still gets a parity verdict, and "fullgraph
would pass" is what graph_breaks judges (one graph, zero breaks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from ..spec.case import Case
from ..spec.values import resolve
from . import torch_api
from .blame import blame, one_line
from .builder import ClosureCompiles
from .diagnosis import (dropped_writes_in_words, drops_optimizer_attribute_writes, optimizer_attribute_writes_under_dynamo,
                        raised_attribute_writes_in_words)
from .perturbations import PerturbationFailure, PerturbationOutcome, StepCompiles
from .run_phases import SETTLE_STEPS, run_phases
from .runner import Regime, Run, run
from .snapshot import OptimizerSnapshot
from .vacuity import diverged_before_raising


class CompiledStepOnlyError(Exception):
    """The compiled step raised where the eager step, given the same state, did not."""

    def __init__(self, step: int, error: Exception, optimizer_name: str = "") -> None:
        found = blame(error)
        on_optimizer = isinstance(error, AttributeError) and f"'{optimizer_name}' object has no attribute" in str(error)
        if found.generated:
            cause = f"the code inductor generated for the step raised it ({found.innermost}): torch's doing"
        elif on_optimizer and drops_optimizer_attribute_writes():
            cause = ("torch's doing (dynamo): the step reads an attribute of the optimizer that eager's step sets, "
                     f"and {dropped_writes_in_words()}")
        elif one_line(error) in optimizer_attribute_writes_under_dynamo():  # the probe's own error: an attribute write
            cause = f"torch's doing (dynamo): {raised_attribute_writes_in_words()}"
        else:
            cause = ("so the difference is torch.compile's (dynamo traced the step differently from Python, e.g. an "
                     "attribute write it dropped), not the optimizer's arithmetic")
        super().__init__(f"only the compiled step raised, at step {step}: {type(error).__name__}: {error}; the eager step "
                         f"ran the same step without error, {cause}")
        self.step, self.error = step, error


@dataclass
class CompiledRun:
    """What an eager optimizer and its compiled twin did, step by step."""

    case: Case
    initial_params: dict[str, torch.Tensor]
    eager: OptimizerSnapshot | None = None  # both after the last steady step
    compiled: OptimizerSnapshot | None = None
    warmup: list[StepCompiles] = field(default_factory=list)
    steady: list[StepCompiles] = field(default_factory=list)
    perturbations: list[PerturbationOutcome] = field(default_factory=list)
    perturbation_failure: PerturbationFailure | None = None  # the perturbation phase stopped there
    perturbed: bool = False  # whether the perturbation phase ran (only for a selected recompile check)
    graph_breaks: Counter = field(default_factory=Counter)  # reason -> times hit, over the warm-up
    frames_given_up: Counter = field(default_factory=Counter)  # breaks dynamo ran a whole frame eagerly at
    break_sites: dict[str, str] = field(default_factory=dict)  # reason -> 'file:line' of the user code it broke at
    graph_count: int = 0  # graphs captured before the perturbations, the closure's included
    closure: ClosureCompiles = field(default_factory=ClosureCompiles)  # what the closure's own frames compiled
    compiled_step_seconds: list[float] = field(default_factory=list)
    eager_step_seconds: list[float] = field(default_factory=list)
    eager_aliases: set[str] = field(default_factory=set)  # state tensors sharing storage with a param, a grad or each other
    compiled_aliases: set[str] = field(default_factory=set)
    draws_random: bool = False  # the eager step advanced the global RNG
    diagnoses: list[str] = field(default_factory=list)  # parity's, when it found differences
    rounding: str | None = None  # parity's: why a difference that scales with precision proves nothing ("" if not)

    @property
    def steps(self) -> int:
        """Steps both optimizers took before parity compared them."""
        return len(self.warmup) + len(self.steady)

    @property
    def step_graph_count(self) -> int:
        """Graphs of the optimizer's own step: the closure's forward and backward are not the step's."""
        return self.graph_count - self.closure.graphs

    def break_lines(self) -> list[str]:
        """dynamo's graph breaks in a line each, those it ran a whole frame eagerly at said so."""
        lines = [*(self.break_line(reason) for reason in self.graph_breaks),
                 *("dynamo gave up on a frame and ran it eagerly, at a graph break it could not resume after (one inside "
                   f"a loop): {self.break_line(reason)}" for reason in self.frames_given_up)]
        return list(dict.fromkeys(lines))  # reasons that differ past their first line read the same here

    def break_line(self, reason: str) -> str:
        """One graph break's reason, the user code it broke at, and where dynamo's fake tensors raised a
        TypeError the eager step never met, that it is torch's doing."""
        at = f" (at {self.break_sites[reason]})" if reason in self.break_sites else ""
        call = torch_api.fake_call_type_error(reason)
        deprecated = torch_api.deprecated_overload_call(reason)
        if deprecated is not None:
            keyword = "value" if deprecated.startswith(("addcmul", "addcdiv")) else "alpha"
            return (f"{torch_api.graph_break_summary(reason)}{at}: the step calls {deprecated}(number, tensor...), an overload "
                    f"torch deprecated (eager warns \"This overload of {deprecated} is deprecated\") and dynamo does not trace: "
                    f"the optimizer's doing (write {deprecated}(tensor..., {keyword}=number))")
        if call is None:
            return torch_api.graph_break_summary(reason) + at
        return (f"{reason.strip().splitlines()[0]}{at}: {call}; dynamo handed the op other types than the eager step, which "
                "ran, hands it: torch's doing, dynamo traced a value eager computes otherwise (a generator's `yield from` "
                "result comes back None; plain-torch reproducer: python -m pytest_optimtest.harness.diagnosis)")

    def not_compiled(self) -> str | None:
        """Why the step itself was not compiled (no graph of its own), or None."""
        return self.closure.step_not_compiled(self.step_graph_count)

    def evidence(self) -> dict[str, Any]:
        """What this run captured of the optimizer's own step, the closure's apart: a compiled check's evidence."""
        return {"step_graphs": self.step_graph_count, "closure_graphs": self.closure.graphs, "kernels": self.kernel_count,
                "graph_breaks": len(self.graph_breaks)}

    @property
    def kernel_count(self) -> int:
        """Kernels inductor generated for the step until it settled (the warm-up), the closure's not counted."""
        return sum(s.kernels for s in self.warmup)

    @property
    def compile_seconds(self) -> float:
        """The first compiled step: tracing, inductor and one step."""
        return self.compiled_step_seconds[0]

    @property
    def warmup_compiles(self) -> int:
        return 1 + sum(len(s.recompiles) for s in self.warmup)

    @property
    def unsettled(self) -> bool:
        """An undeclared warm-up that still recompiled on its last step."""
        return len(self.warmup) >= SETTLE_STEPS and run_phases(self.case).warmup.steps is None and bool(self.warmup[-1].recompiles)

    @property
    def steady_failure(self) -> tuple[int, str] | None:
        """(step number, dynamo's message) of the first steady step that recompiled."""
        for i, step in enumerate(self.steady):
            if step.recompiles:
                return len(self.warmup) + i + 1, step.recompiles[0]
        return None


def run_compiled(case: Case, perturb: bool = True) -> CompiledRun:
    """The case's compiled run and the eager run of the same steps (see the module docstring). The
    perturbations, which compile again, run only with `perturb` (the recompile check's part)."""
    phases = run_phases(case)
    declared = phases.warmup.steps
    compiled = run(case, Regime(compiled=True, steps=phases.steps, warmup=declared, settle=declared is None,
                                scheduler=True, failures="record",
                                perturb=perturb and case.scheduler is None and not case.closure))
    failed = compiled.failure
    held = compiled.warmup_steps or (failed.step + 1 if failed else 1)  # a failure in the warm-up: never stepped
    eager = run(case, Regime(steps=failed.step if failed else compiled.steps, scheduler=True,
                             scheduler_from=1 if declared is not None else held, failures="record" if failed else "raise"))
    if failed is not None:
        if failed.phase == "constructs":
            raise failed.error
        if eager.failure is not None and eager.failure.diverged:  # it raised as the run blew up: nothing to compare
            raise diverged_before_raising(case.id, eager.failure.step, eager.failure.error, eager.failure.diverged)
        if eager.failure is not None:  # the eager step raises too: the optimizer's own error, from the eager step
            raise eager.failure.error
        raise CompiledStepOnlyError(failed.step, failed.error, getattr(resolve(case.optimizer), "__name__", ""))
    return _assembled(case, eager, compiled, perturb)


def _assembled(case: Case, eager: Run, compiled: Run, perturb: bool) -> CompiledRun:
    warm = compiled.warmup_steps
    return CompiledRun(
        case, eager.initial, eager=eager.final, compiled=compiled.final, warmup=compiled.compiles[:warm],
        steady=compiled.compiles[warm:], perturbations=compiled.perturbations,
        perturbation_failure=compiled.perturbation_failure, perturbed=perturb,
        graph_breaks=compiled.closure.step_breaks(compiled.graph_breaks),
        frames_given_up=compiled.closure.step_frames_given_up(compiled.frames_given_up), break_sites=compiled.break_sites,
        graph_count=compiled.graphs, closure=compiled.closure,
        compiled_step_seconds=compiled.step_seconds, eager_step_seconds=eager.step_seconds,
        eager_aliases=eager.aliases, compiled_aliases=compiled.aliases, draws_random="torch" in eager.draws)
