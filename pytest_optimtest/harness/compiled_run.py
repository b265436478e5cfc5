"""The one compiled run of a case, which parity, kernel_count, graph_breaks and recompile all read.

An eager optimizer and a compiled twin step side by side: a warm-up (until a step compiles
nothing, or as declared), then the steady steps; parity compares the two after the last of
them. Then the compiled one alone takes the spec's perturbations. The step is compiled once,
without fullgraph: a step that breaks the graph still gets a parity verdict, and "fullgraph
would pass" is what graph_breaks judges (one graph, zero breaks).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..spec.case import Case
from ..spec.values import build_kwargs
from . import torch_api
from .blame import blame
from .builder import ClosureCompiles, Twins, make_scheduler, make_twins, step_scheduler
from .containment import PROGRESS
from .devices import seed_all
from .diagnosis import storage_aliases
from .isolation import isolated_case
from .run_phases import SETTLE_STEPS, Perturbation, run_phases
from .snapshot import OptimizerSnapshot


class CompiledStepOnlyError(Exception):
    """The compiled step raised where the eager step, given the same state, did not."""

    def __init__(self, step: int, error: Exception) -> None:
        found = blame(error)
        if found.generated:
            cause = f"the code inductor generated for the step raised it ({found.innermost}): torch's doing"
        else:
            cause = ("so the difference is torch.compile's (dynamo traced the step differently from Python, e.g. an "
                     "attribute write it dropped), not the optimizer's arithmetic")
        super().__init__(f"only the compiled step raised, at step {step}: {type(error).__name__}: {error}; the eager step "
                         f"ran the same step without error, {cause}")
        self.step, self.error = step, error


@dataclass
class StepCompiles:
    """What one compiled step cost in compilation."""

    graphs: int
    kernels: int
    recompiles: list[str]  # dynamo's message for each recompile during the step


@dataclass
class PerturbationOutcome:
    perturbation: Perturbation
    step: StepCompiles
    settle_failure: str | None  # dynamo's message when the step after it recompiled too


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
    perturbed: bool = False  # whether the perturbation phase ran (only for a selected recompile check)
    graph_breaks: Counter = field(default_factory=Counter)  # reason -> times hit, over the warm-up
    graph_count: int = 0  # graphs captured before the perturbations, the closure's included
    closure: ClosureCompiles = field(default_factory=ClosureCompiles)  # what the closure's own frames compiled
    compiled_step_seconds: list[float] = field(default_factory=list)
    eager_step_seconds: list[float] = field(default_factory=list)
    eager_aliases: set[str] = field(default_factory=set)  # state tensors sharing storage with a param or grad
    compiled_aliases: set[str] = field(default_factory=set)
    draws_random: bool = False  # the eager step advanced the global RNG
    diagnoses: list[str] = field(default_factory=list)  # parity's, when it found differences

    @property
    def steps(self) -> int:
        """Steps both optimizers took before parity compared them."""
        return len(self.warmup) + len(self.steady)

    @property
    def step_graph_count(self) -> int:
        """Graphs of the optimizer's own step: the closure's forward and backward are not the step's."""
        return self.graph_count - self.closure.graphs

    def not_compiled(self) -> str | None:
        """Why the step itself was not compiled (no graph of its own), or None."""
        if self.step_graph_count > 0:
            return None
        if self.closure.graphs:
            return (f"the step captured no graph of its own; the closure's {self.closure.graphs} graph(s) are not the "
                    "step's (the step ran eagerly around a compiled closure)")
        return "torch.compile captured no graph of the step (it ran eagerly or traced to no tensor operation)"

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


class PerturbationError(AssertionError):
    """The spec asks for a perturbation this optimizer's state cannot take."""


def run_compiled(case: Case, perturb: bool = True) -> CompiledRun:
    """Run the case's eager optimizer and its compiled twin (see the module docstring). The
    perturbations, which compile again, run only with `perturb` (the recompile check's part)."""
    with isolated_case(case), torch_api.recording_recompiles() as log:
        return _run(case, log, perturb)


def _prepared(case: Case, backend: str = "inductor", closure_compiles: ClosureCompiles | None = None
              ) -> tuple[Twins, Any, Callable[[], None], list]:
    """(twins, eager closure or None, the compiled twin's step, their schedulers) of a case."""
    twins = make_twins(case)
    eager_closure, compiled_closure = twins.closures() if case.closure else (None, None)
    compiled_step = twins.compile(compiled_closure, backend=backend, closure_compiles=closure_compiles)
    schedulers = [make_scheduler(case, o) for o in (twins.eager_opt, twins.compiled_opt)] if case.scheduler else []
    return twins, eager_closure, compiled_step, schedulers


def _run(case: Case, log: list[str], perturb: bool) -> CompiledRun:
    closure = ClosureCompiles()
    twins, eager_closure, compiled_step, schedulers = _prepared(case, closure_compiles=closure)
    run = CompiledRun(case, twins.initial(), closure=closure)
    with torch.no_grad():  # as PyTorch's tests: a step(closure) enables grad for the closure itself
        _steps(run, twins, compiled_step, eager_closure, schedulers, log, perturb)
    return run


def _steps(run: CompiledRun, twins: Twins, compiled_step: Callable[[], None], eager_closure: Any,
           schedulers: list, log: list[str], perturb: bool) -> None:
    case = run.case

    def eager_step() -> None:
        twins.eager_opt.step(eager_closure) if eager_closure else twins.eager_opt.step()

    def both(with_schedulers: bool = True) -> StepCompiles:
        PROGRESS.at_step(run.steps + 1)
        seed_all(case.seed + 1 + run.steps)
        start = time.perf_counter()
        try:
            compiled = _counted(compiled_step, log, run.closure)
        except Exception as exc:
            seed_all(case.seed + 1 + run.steps)
            eager_step()  # raises too: the optimizer's own error, reported from the eager step
            raise CompiledStepOnlyError(run.steps + 1, exc) from exc
        run.compiled_step_seconds.append(time.perf_counter() - start)
        seed_all(case.seed + 1 + run.steps)
        rng = torch.get_rng_state()
        start = time.perf_counter()
        eager_step()
        run.eager_step_seconds.append(time.perf_counter() - start)
        run.draws_random = run.draws_random or not torch.equal(rng, torch.get_rng_state())
        if with_schedulers:
            step_all(schedulers)
        return compiled

    spec = run_phases(case)
    if spec.warmup.steps is not None:
        for _ in range(spec.warmup.steps):
            run.warmup.append(both())
    else:  # until a step compiles nothing; the scheduler waits, its recompiles are judged over the steady steps
        run.warmup += [both(with_schedulers=False), both(with_schedulers=False)]  # the compile, then one to settle
        while run.warmup[-1].recompiles and len(run.warmup) < SETTLE_STEPS:
            run.warmup.append(both(with_schedulers=False))
        step_all(schedulers)  # as after a declared warm-up step: steady step 1 sees its change
    run.graph_breaks = torch_api.graph_break_counts()
    while len(run.steady) < spec.steps or run.steps < (case.steps or 0):
        run.steady.append(both())
    run.eager, run.compiled = twins.snapshots()
    run.eager_aliases = storage_aliases(twins.eager_opt, twins.eager_model)
    run.compiled_aliases = storage_aliases(twins.compiled_opt, twins.compiled_model)
    run.graph_count = torch_api.captured_graph_count()
    if perturb and case.scheduler is None and not case.closure and run.steady_failure is None:
        _perturb(run, twins.compiled_opt, compiled_step, log)
    run.perturbed = perturb


def _counted(compiled_step: Callable[[], None], log: list[str], closure: ClosureCompiles | None = None) -> StepCompiles:
    """Run one compiled step and record what it compiled of its own (the closure's graphs and kernels apart)."""
    closure = closure or ClosureCompiles()
    graphs, kernels, seen = torch_api.captured_graph_count(), torch_api.generated_kernel_count(), len(log)
    closure_graphs, closure_kernels = closure.graphs, closure.kernels
    compiled_step()
    return StepCompiles(torch_api.captured_graph_count() - graphs - (closure.graphs - closure_graphs),
                        torch_api.generated_kernel_count() - kernels - (closure.kernels - closure_kernels), log[seen:])


def _perturb(run: CompiledRun, opt: torch.optim.Optimizer, compiled_step: Callable[[], None], log: list[str]) -> None:
    def counted() -> StepCompiles:
        return _counted(compiled_step, log)

    for perturbation in run_phases(run.case).perturbations:
        apply_perturbation(perturbation, opt, run.case.device)
        outcome = counted()
        if perturbation.recompiles is None:  # undeclared: state recreated lazily may recompile once more
            more = [counted()]
            while more[-1].recompiles and len(more) < SETTLE_STEPS - 1:
                more.append(counted())
            outcome = StepCompiles(outcome.graphs + sum(m.graphs for m in more), outcome.kernels + sum(m.kernels for m in more),
                                   outcome.recompiles + [r for m in more for r in m.recompiles])
        settle = counted().recompiles
        run.perturbations.append(PerturbationOutcome(perturbation, outcome, settle[0] if settle else None))


def step_all(schedulers: list) -> None:
    for scheduler in schedulers:
        step_scheduler(scheduler)


def apply_perturbation(perturbation: Perturbation, opt: torch.optim.Optimizer, device: str) -> None:
    """Make the change a perturbation describes, in place, as user code would between steps."""
    action = perturbation.action
    if action == "set_lr":
        for group in opt.param_groups:
            group["lr"] = float(perturbation.set_lr)  # type: ignore[arg-type]
    elif action == "replace_state":
        key = perturbation.replace_state
        holder = next((s for s in opt.state.values() if isinstance(s, dict) and key in s), None)
        if holder is None or not isinstance(holder[key], torch.Tensor):
            keys = sorted({k for s in opt.state.values() if isinstance(s, dict) for k in s})
            raise PerturbationError(f"replace_state: no state tensor {key!r}; this optimizer's state keys: {keys}")
        holder[key] = holder[key].clone()  # equal values, new storage: only an identity guard notices
    elif action == "clear_state":
        opt.state.clear()
    elif action == "add_param_group":
        first = opt.param_groups[0]["params"][0]
        param = torch.nn.Parameter(torch.randn_like(first))
        param.grad = torch.randn_like(first)
        opt.add_param_group({"params": [param], **build_kwargs(perturbation.add_param_group or {}, device)})
    elif action == "set_group":
        values = build_kwargs(perturbation.set_group or {}, device)
        for group in opt.param_groups:
            group.update(values)
