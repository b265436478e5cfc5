"""One eager and one compiled run of a case: the shared input of parity and kernel checks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..spec.case import Case
from ..spec.values import build_kwargs, resolve
from . import torch_api
from .devices import seed_all
from .isolation import isolated_case
from .models import copy_with_grads, make_optimizer, model_with_grads
from .snapshot import OptimizerSnapshot, snapshot


@dataclass
class CompiledRun:
    """What an eager and a compiled optimizer did over `case.steps` steps."""

    case: Case
    initial_params: dict[str, torch.Tensor]
    eager: OptimizerSnapshot
    compiled: OptimizerSnapshot
    kernel_count: int
    graph_count: int
    graph_breaks: list[str]
    compile_seconds: float  # first compiled step: tracing, inductor and one step
    compiled_step_seconds: list[float] = field(default_factory=list)
    eager_step_seconds: list[float] = field(default_factory=list)


def run_compiled(case: Case) -> CompiledRun:
    """Step an eager optimizer and a compiled deep copy side by side, PyTorch-test style."""
    with isolated_case(case):
        return _run(case)


def _run(case: Case) -> CompiledRun:
    model, inputs, loss_fn = model_with_grads(case)
    model_c = copy_with_grads(model)
    names = {p: n for n, p in model.named_parameters()}
    names_c = {p: n for n, p in model_c.named_parameters()}

    opt = make_optimizer(case, model.parameters())
    opt_c = make_optimizer(case, model_c.parameters())
    closure = make_closure(model, opt, inputs, loss_fn) if case.closure else None
    step_c = compile_step(opt_c, make_closure(model_c, opt_c, inputs, loss_fn) if case.closure else None, fullgraph=not case.closure)
    schedulers = [make_scheduler(case, o) for o in (opt, opt_c)] if case.scheduler else []

    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    run = CompiledRun(case, initial, None, None, 0, 0, [], 0.0)  # type: ignore[arg-type]
    with torch.no_grad():
        for i in range(case.steps):
            seed_all(case.seed + 1 + i)
            start = time.perf_counter()
            step_c()
            run.compiled_step_seconds.append(time.perf_counter() - start)
            seed_all(case.seed + 1 + i)
            start = time.perf_counter()
            opt.step(closure) if closure else opt.step()
            run.eager_step_seconds.append(time.perf_counter() - start)
            for scheduler in schedulers:
                step_scheduler(scheduler)
    run.compile_seconds = run.compiled_step_seconds[0]
    run.eager = snapshot(opt, names)
    run.compiled = snapshot(opt_c, names_c)
    run.kernel_count = torch_api.generated_kernel_count()
    run.graph_count = torch_api.captured_graph_count()
    run.graph_breaks = torch_api.graph_break_reasons()
    return run


def make_closure(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor, loss_fn: Any,
                 graph_break: bool = False):
    """The usual closure: zero grads, forward, backward, return the loss (optionally breaking the graph)."""
    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(inputs))
        if graph_break:
            torch_api.graph_break()
        loss.backward()
        return loss

    return closure


def compile_step(opt: torch.optim.Optimizer, closure: Any = None, fullgraph: bool = True):
    """torch.compile of the optimizer's raw step (see torch_api.raw_step), as PyTorch's tests do."""
    step = torch_api.raw_step(opt)
    torch_api.mark_step_called(opt)
    if closure is None:
        def fn() -> None:
            step()
    else:
        def fn() -> None:
            step(closure)
    return torch.compile(fn, backend="inductor", fullgraph=fullgraph)


def make_scheduler(case: Case, opt: torch.optim.Optimizer) -> Any:
    import torch.optim.lr_scheduler as lr_scheduler

    name = case.scheduler or ""
    cls = resolve(name) if (":" in name or "." in name) else getattr(lr_scheduler, name)
    scheduler = cls(opt, **build_kwargs(case.scheduler_kwargs, case.device))
    scheduler.last_epoch = 1  # as PyTorch's tests: some schedulers act only after an epoch
    return scheduler


def step_scheduler(scheduler: Any) -> None:
    import torch.optim.lr_scheduler as lr_scheduler

    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
        scheduler.step(1.0)
    else:
        scheduler.step()
