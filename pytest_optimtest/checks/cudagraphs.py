"""On CUDA, the compiled step runs under inductor's cudagraphs, as in PyTorch's tests."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import RootModel

from ..harness import torch_api
from ..harness.builder import compile_step, make_optimizer, model_with_grads
from ..harness.vacuity import require_compiled
from ..harness.isolation import isolated_case
from ..harness.ladder import COMPILED
from .base import Check, NotApplicable, Verdict


class Cudagraphs(RootModel[bool]):
    """Run CUDA cases under inductor's cudagraphs, as PyTorch's tests (false: PyTorch runs Adagrad and SGD without)."""

    root: bool = True


def check_cudagraphs(case: Any, runs: Any) -> Verdict:
    """With triton.cudagraphs on, `case.steps` compiled steps record one CUDA graph per graph dynamo
    compiled (PyTorch's test: one, for torch.optim's single graph); more means a graph was re-recorded.
    Its own compile: under inductor's cudagraphs config, which the shared run does not use."""
    if not case.sections["cudagraphs"].root:
        raise NotApplicable(f"{case.id}: the spec sets cudagraphs: false (PyTorch runs Adagrad and SGD without them)")
    with isolated_case(case), torch_api.inductor_config(**{"triton.cudagraphs": True}):
        model, _, _ = model_with_grads(case)
        opt = make_optimizer(case, model)
        step = compile_step(opt)
        with torch.no_grad():
            for _ in range(case.steps):
                step()
        index = torch.device(case.device).index or 0
        recorded = torch_api.cudagraph_tree_graph_ids(index)
        graphs = torch_api.captured_graph_count()
    require_compiled(case.id, graphs, "there was no graph for cudagraphs to run")
    if recorded is None:
        raise AssertionError(f"{case.id}: cudagraphs did not run: no cudagraph tree manager on cuda:{index}")
    if recorded != graphs:
        raise AssertionError(f"{case.id}: the cudagraph tree manager recorded {recorded} graph(s) for the {graphs} "
                             f"graph(s) dynamo compiled over {case.steps} steps: "
                             + ("a graph was recorded again" if recorded > graphs else "a graph ran without cudagraphs"))
    return Verdict(f"cudagraphs ran: {recorded} graph(s) recorded, one per compiled graph",
                   {"cudagraphs_recorded": recorded, "step_graphs": graphs, "steps": case.steps})


CHECK = Check("cudagraphs", check_cudagraphs, "CUDA: the compiled step ran under cudagraphs (one graph)", "plain", ("cuda",),
              prerequisites=("parity",), section=Cudagraphs, rungs=COMPILED)
