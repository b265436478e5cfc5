"""Compile time of a foreach step over many small tensors, against the spec's budget."""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from typing import Annotated, Any

import torch
from pydantic import Field, RootModel

from ..harness import torch_api
from ..harness.builder import compile_step, make_optimizer
from ..harness.vacuity import require_compiled
from ..harness.isolation import isolated_case
from ..spec.values import resolve
from .base import Check, Verdict

TENSORS = 100
SHAPE = (2, 2)


class CompileBudget(RootModel[Annotated[float, Field(gt=0, le=86400)]]):
    """Fail compile_time past this many seconds (default: report only)."""


def check_compile_time(case: Any, runs: Any) -> Verdict:
    """PyTorch's compile-time smoke test, for the spec's optimizer: the first compiled step over
    100 small params (foreach where the optimizer takes it and the case is not fused). Reported; fails only past
    `compile_budget_s`.
    Its own compile: 100 tensors, to time a compile, not the spec's model."""
    with isolated_case(case):
        cls = resolve(case.optimizer)
        kwargs = dict(case.kwargs)
        if "foreach" in inspect.signature(cls.__init__).parameters and not kwargs.get("fused"):
            kwargs["foreach"] = True  # torch.optim refuses foreach with fused: a fused case times its own path
        params = [torch.nn.Parameter(torch.ones(SHAPE, device=case.device)) for _ in range(TENSORS)]
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer = make_optimizer(replace(case, kwargs=kwargs), [(f"p{i}", p) for i, p in enumerate(params)])
        step = compile_step(optimizer, fullgraph=False)
        start = time.perf_counter()
        with torch.no_grad():
            step()
        seconds = time.perf_counter() - start
        graphs = torch_api.captured_graph_count()
        require_compiled(case.id, graphs, "no compile time was measured")
    foreach = " foreach" if kwargs.get("foreach") else ""
    budget = case.sections.get("compile_budget_s")
    budget_s = budget.root if budget is not None else None
    measured = f"first{foreach} step over {TENSORS} tensors of {SHAPE} compiled in {seconds:.1f}s"
    if budget_s is not None and seconds > budget_s:
        raise AssertionError(f"{case.id}: {measured}, over the budget of {budget_s:g}s (compile_budget_s in {case.spec_path})")
    return Verdict(measured + (f" (budget {budget_s:g}s)" if budget_s is not None else " (no budget set)"),
                   {"compile_s": round(seconds, 3), "tensors": TENSORS, "step_graphs": graphs, "budget_s": budget_s})


# float32 only: its params are its own float32 ones, so at another case dtype it would time the same compile
# again under that dtype's name (and it is the costliest once-per-optimizer check)
CHECK = Check("compile_time", check_compile_time, "compile time of a 100-tensor foreach step, against a budget", "primary",
              dtypes=("float32",), section=CompileBudget, section_key="compile_budget_s", rungs=("constructs",))
