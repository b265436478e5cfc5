"""On CUDA, the compiled step runs under inductor's cudagraphs, as in PyTorch's tests."""

from __future__ import annotations

import torch

from ..harness import torch_api
from ..harness.builder import compile_step, make_optimizer, model_with_grads
from ..harness.isolation import isolated_case
from .base import NotApplicable


def check_cudagraphs(case, runs) -> str:
    """With triton.cudagraphs on, `case.steps` compiled steps record exactly one CUDA graph.
    Its own compile: under inductor's cudagraphs config, which the shared run does not use."""
    if not case.cudagraphs:
        raise NotApplicable(f"{case.id}: the spec sets cudagraphs: false (PyTorch runs Adagrad and SGD without them)")
    with isolated_case(case), torch_api.inductor_config(**{"triton.cudagraphs": True}):
        model, _, _ = model_with_grads(case)
        opt = make_optimizer(case, model.parameters())
        step = compile_step(opt)
        with torch.no_grad():
            for _ in range(case.steps):
                step()
        index = torch.device(case.device).index or 0
        next_id = torch_api.cudagraph_tree_graph_ids(index)
    if next_id is None:
        raise AssertionError(f"{case.id}: cudagraphs did not run: no cudagraph tree manager on cuda:{index}")
    if next_id != 1:
        raise AssertionError(f"{case.id}: expected the cudagraph tree manager to record 1 graph, it recorded {next_id}")
    return "cudagraphs ran: one graph recorded"
