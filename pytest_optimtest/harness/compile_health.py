"""The compile-health run of a case: warm-up, steady steps and perturbations of one compiled
optimizer, recording per step the graphs, kernels and recompiles (with dynamo's reasons)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..spec.case import Case
from ..spec.schema import SETTLE_STEPS, Perturbation
from ..spec.values import build_kwargs
from . import torch_api
from .compiled_run import compile_step, make_scheduler, step_scheduler
from .isolation import isolated_case
from .models import make_optimizer, model_with_grads


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
class HealthRun:
    case: Case
    warmup: list[StepCompiles] = field(default_factory=list)
    steady: list[StepCompiles] = field(default_factory=list)
    steady_failure: tuple[int, str] | None = None  # (step number, fail_on_recompile message)
    perturbations: list[PerturbationOutcome] = field(default_factory=list)
    graph_breaks: Counter = field(default_factory=Counter)  # reason -> count, over the warm-up
    graph_count: int = 0

    @property
    def warmup_compiles(self) -> int:
        return 1 + sum(len(s.recompiles) for s in self.warmup)

    @property
    def unsettled(self) -> bool:
        """An undeclared warm-up that still recompiled on its last step."""
        return len(self.warmup) >= SETTLE_STEPS and self.case.recompile.warmup.steps is None and bool(self.warmup[-1].recompiles)


class PerturbationError(AssertionError):
    """The spec asks for a perturbation this optimizer's state cannot take."""


def run_health(case: Case) -> HealthRun:
    """Compile the step without fullgraph (graph breaks are counted, not fatal) and watch it recompile."""
    with isolated_case(case), torch_api.recording_recompiles() as log:
        return _run(case, log)


def _run(case: Case, log: list[str]) -> HealthRun:
    model, _, _ = model_with_grads(case)
    opt = make_optimizer(case, model.parameters())
    step = compile_step(opt, fullgraph=False)
    schedulers = [make_scheduler(case, opt)] if case.scheduler else []
    spec = case.recompile
    run = HealthRun(case)

    def counted(with_schedulers: bool = True) -> StepCompiles:
        graphs, kernels, seen = torch_api.captured_graph_count(), torch_api.generated_kernel_count(), len(log)
        step()
        for scheduler in schedulers if with_schedulers else []:
            step_scheduler(scheduler)
        return StepCompiles(torch_api.captured_graph_count() - graphs, torch_api.generated_kernel_count() - kernels, log[seen:])

    with torch.no_grad():
        if spec.warmup.steps is not None:
            run.warmup = [counted() for _ in range(spec.warmup.steps)]
        else:  # until a step compiles nothing; the scheduler waits, its recompiles are judged over the steady steps
            run.warmup = [counted(with_schedulers=False)]
            run.warmup += _until_settled(lambda: counted(with_schedulers=False), SETTLE_STEPS - 1)
            for scheduler in schedulers:  # as after a declared warm-up step: steady step 1 sees its change
                step_scheduler(scheduler)
        run.graph_breaks = torch_api.graph_break_counts()
        allowed = spec.schedulers.get(case.scheduler, 0) if case.scheduler else 0
        for i in range(spec.steps):
            if allowed:
                run.steady.append(counted())
                continue
            failure = _failure_on_recompile(counted)
            if isinstance(failure, str):
                run.steady_failure = (len(run.warmup) + i + 1, failure)
                break
            run.steady.append(failure)
        if case.scheduler is None and run.steady_failure is None:
            for perturbation in spec.perturbations:
                apply_perturbation(perturbation, opt, case.device)
                outcome = counted()
                if perturbation.recompiles is None:  # undeclared: state recreated lazily may recompile once more
                    for more in _until_settled(counted, SETTLE_STEPS - 1):
                        outcome = StepCompiles(outcome.graphs + more.graphs, outcome.kernels + more.kernels,
                                               outcome.recompiles + more.recompiles)
                settle = _failure_on_recompile(counted)
                run.perturbations.append(PerturbationOutcome(perturbation, outcome, settle if isinstance(settle, str) else None))
    run.graph_count = torch_api.captured_graph_count()
    return run


def _until_settled(counted: Callable[[], StepCompiles], limit: int) -> list[StepCompiles]:
    """Steps until one recompiles nothing (that one included), at most `limit` steps."""
    steps = [counted()]
    while steps[-1].recompiles and len(steps) < limit:
        steps.append(counted())
    return steps


def _failure_on_recompile(counted: Callable[[], StepCompiles]) -> StepCompiles | str:
    """Run one step under the fail_on_recompile stance: its record, or dynamo's message."""
    try:
        with torch_api.fail_on_recompile():
            return counted()
    except RuntimeError as exc:
        if torch_api.is_recompile_failure(exc):
            return str(exc)
        raise


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
