"""Compiled-step parity in the situations PyTorch's compiled-optimizer tests single out:
params whose grads are None on some steps, and a closure that breaks the graph."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..harness import torch_api
from ..harness.compare import listed, snapshot_differences
from ..harness.vacuity import require_compiled, require_moved
from ..harness.isolation import isolated_case
from ..harness.builder import ClosureCompiles, Twins, make_twins
from ..harness.ladder import COMPARED_COMPILED
from .base import Check, NotApplicable, Verdict

# Which params have grad None at each iteration (indices into the model's params; -1 = last):
# all present, the first missing, all present, all missing (PyTorch's test), the last missing.
NONE_GRAD_PATTERN: tuple[tuple[int, ...] | str, ...] = ((), (0,), (), "all", (-1,), ())


def check_none_grads(case: Any, runs: Any) -> Verdict:
    """Compiled and eager match after every step, state step counters included, when some
    params have grad None on some iterations (dynamo must guard on which grads exist).
    Its own compile: the None-grad pattern changes what the step traces, so the shared run's graph cannot stand in."""
    with isolated_case(case):
        twins = make_twins(case)
        initial = twins.initial()
        step = twins.compile()
        grads = [p.grad.detach().clone() for p in twins.eager_model.parameters()]  # type: ignore[union-attr]  # make_twins gives each a grad
        names = [n for n, _ in twins.eager_model.named_parameters()]
        for i, pattern in enumerate(NONE_GRAD_PATTERN):
            missing: set[int] = set(range(len(grads))) if isinstance(pattern, str) else {j % len(grads) for j in pattern}
            for model in (twins.eager_model, twins.compiled_model):
                for j, p in enumerate(model.parameters()):
                    p.grad = None if j in missing else grads[j].clone()
            with torch.no_grad():
                step()
                twins.eager_opt.step()
            problems = snapshot_differences(*twins.snapshots(), case.tolerance)
            if problems:
                raise AssertionError(
                    f"{case.id}: compiled differs from eager after iteration {i + 1} of {len(NONE_GRAD_PATTERN)}, "
                    f"where grads were None for {sorted(names[j] for j in missing) or 'no param'}:" + listed(problems)
                )
        moved, graphs = _require_meaningful(case, twins, initial, f"over {len(NONE_GRAD_PATTERN)} iterations (some with None grads)")
    return Verdict(f"{len(NONE_GRAD_PATTERN)} iterations with None grads equal eager; moved {moved:.3g} tol",
                   {"iterations_compared": len(NONE_GRAD_PATTERN), "step_graphs": graphs, "moved_tolerances": round(moved, 3)})


def check_closure_graph_break(case: Any, runs: Any) -> Verdict:
    """`step(closure)` compiled, with a graph break inside the closure, matches eager.
    Its own compile: the closure, with its break, is part of the compiled function."""
    with isolated_case(case):
        twins = make_twins(case)
        if "closure" not in inspect.signature(torch_api.raw_step(twins.compiled_opt)).parameters:
            raise NotApplicable(f"{case.id}: {case.optimizer}.step takes no closure")
        initial = twins.initial()
        calls = [0]
        closure, _ = twins.closures()

        def eager_closure():
            calls[0] += 1
            return closure()

        closure_compiles = ClosureCompiles()
        step = twins.compile(twins.closures(graph_break=True)[1], closure_compiles=closure_compiles)
        for _ in range(case.steps):
            with torch.no_grad():  # as PyTorch's tests: the step's own enable_grad runs the closure
                step()
            twins.eager_opt.step(eager_closure)
        if not calls[0]:
            raise AssertionError(f"{case.id}: {case.optimizer}.step(closure) never called the closure in "
                                 f"{case.steps} eager steps: step(closure) must re-evaluate the loss with it")
        breaks = torch_api.graph_break_counts()
        if not breaks:
            raise AssertionError(f"{case.id}: the closure's graph break never reached dynamo: nothing was tested")
        problems = snapshot_differences(*twins.snapshots(), case.tolerance)
        if problems:
            raise AssertionError(f"{case.id}: compiled step(closure) with a graph break differs from eager after {case.steps} steps:" + listed(problems))
        moved, graphs = _require_meaningful(case, twins, initial, f"over {case.steps} steps", closure_compiles)
    return Verdict(f"{case.steps} steps equal; the step's own {graphs} graph(s), the closure's {closure_compiles.graphs} "
                   f"apart; graph breaks: {sum(breaks.values())}; moved {moved:.3g} tol",
                   {"steps_compared": case.steps, "step_graphs": graphs, "closure_graphs": closure_compiles.graphs,
                    "graph_breaks": sum(breaks.values()), "closure_calls": calls[0], "moved_tolerances": round(moved, 3)})


def _require_meaningful(case, twins: Twins, initial: dict[str, torch.Tensor], over: str,
                        closure: ClosureCompiles | None = None) -> tuple[float, int]:
    """(tolerances moved, graphs of the step's own): the evidence, or the reason there is none."""
    own = torch_api.captured_graph_count() - (closure.graphs if closure else 0)
    if own == 0 and closure and closure.graphs:
        raise AssertionError(f"{case.id}: not compiled: the step captured no graph of its own; the closure's "
                             f"{closure.graphs} graph(s) are not the step's, so matching eager proves nothing")
    require_compiled(case.id, own, "matching eager proves nothing")
    params = {n: p.detach() for n, p in twins.eager_model.named_parameters()}
    moved = require_moved(case.id, initial, params, case.tolerance, case.min_movement, over,
                          f"; raise lr or steps in {case.location}, or loosen min_movement")
    return moved, own


NONE_GRADS = Check("none_grads", check_none_grads, "steps with None grads on some params match eager", "primary",
                   rungs=COMPARED_COMPILED)
CLOSURE_GRAPH_BREAK = Check("closure_graph_break", check_closure_graph_break,
                            "step(closure) with a graph break matches eager", "primary",
                            rungs=COMPARED_COMPILED)
