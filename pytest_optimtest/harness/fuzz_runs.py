"""The runs of the Hypothesis properties over drawn params: fuzz_parity's one compiled step
function shared by every example, with an eager optimizer and its compiled twin per example; and
the metamorphic properties' optimizers stepped over drawn params and grads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import torch_api
from .builder import make_optimizer, param_dtype, require_graph_free_grads, step_grad_mode, step_on_set_grads
from .devices import seed_all
from .isolation import isolated_case
from .law_runs import with_overrides
from .snapshot import OptimizerSnapshot, snapshot

def _call_step(step: Callable[..., Any], optimizer: Any) -> None:
    step(optimizer)


@contextlib.contextmanager
def compiled_step_for_examples(case: Any, dynamic: bool | None) -> Iterator[Callable[..., None]]:
    """One compiled step function for a whole property, called as compiled(raw_step, optimizer):
    dynamic shapes let inductor reuse one symbolic graph (its FX graph cache) across examples of
    different sizes. Isolated as a check, recompiles unlimited (every example is a new optimizer)."""
    with isolated_case(case), torch_api.unlimited_recompiles():
        yield torch.compile(_call_step, backend="inductor", fullgraph=True, dynamic=dynamic)


@dataclass
class FuzzParityRun:
    """An eager optimizer and its compiled twin over one drawn param list, stepped side by side."""

    initial: dict[str, torch.Tensor]
    eager: OptimizerSnapshot
    compiled: OptimizerSnapshot
    new_graphs: int  # graphs this example captured
    recompiles: list[str]  # dynamo's messages


def fuzz_parity_run(case: Any, params: Any, compiled: Callable[..., None], steps: int) -> FuzzParityRun:
    require_graph_free_grads(case.backward)  # its steps take no closure, on the grads the params were built with
    eager_params, compiled_params = (params.build(case.device, case.seed, param_dtype(case)) for _ in range(2))
    opt, opt_c = make_optimizer(case, eager_params), make_optimizer(case, compiled_params)
    names = {p: f"params[{i}]" for i, p in enumerate(eager_params)}
    names_c = {p: f"params[{i}]" for i, p in enumerate(compiled_params)}
    initial = {n: p.detach().clone() for p, n in names.items()}
    step = torch_api.raw_step(opt_c).__func__  # type: ignore[attr-defined]  # a bound method's function
    torch_api.mark_step_called(opt_c)
    graphs = torch_api.captured_graph_count()
    with torch_api.recording_recompiles() as recompiles, step_grad_mode(case):
        for i in range(steps):
            seed_all(case.seed + 1 + i, case)
            compiled(step, opt_c)
            seed_all(case.seed + 1 + i, case)
            opt.step()
    return FuzzParityRun(initial, snapshot(opt, names), snapshot(opt_c, names_c),
                         torch_api.captured_graph_count() - graphs, list(recompiles))


def stepped_over(case: Any, params: list[torch.Tensor], grads: list[list[torch.Tensor]],
             **overrides: Any) -> torch.optim.Optimizer:
    """The case's optimizer (kwargs overridden) over `params`, stepped once per entry of `grads`."""
    if overrides:
        case = with_overrides(case, overrides)
    optimizer = make_optimizer(case, params)
    for k, step_grads in enumerate(grads):
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        seed_all(case.seed + 1 + k, case)
        with step_grad_mode(case):
            step_on_set_grads(case, optimizer, params)
    return optimizer
