"""On CUDA, the compiled step runs under inductor's cudagraphs, as in PyTorch's tests."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel

from ..harness.ladder import COMPILED
from ..harness.runner import Regime
from ..harness.vacuity import require_compiled
from .base import Check, NotApplicable, Verdict


class Cudagraphs(RootModel[bool]):
    """Run CUDA cases under inductor's cudagraphs, as PyTorch's tests (false: PyTorch runs Adagrad and SGD without)."""

    root: bool = True


def check_cudagraphs(case: Any, runs: Any) -> Verdict:
    """With triton.cudagraphs on, `case.steps` compiled steps record one CUDA graph per graph dynamo
    compiled (PyTorch's test: one, for torch.optim's single graph); more means a graph was re-recorded."""
    if not case.sections["cudagraphs"].root:
        raise NotApplicable(f"{case.id}: the spec sets cudagraphs: false (PyTorch runs Adagrad and SGD without them)")
    run = runs.run(case, Regime(compiled=True, closure=False, inductor=(("triton.cudagraphs", True),)))
    recorded, graphs = run.cudagraphs_recorded, run.step_graphs
    require_compiled(case.id, graphs, "there was no graph for cudagraphs to run")
    if recorded is None:
        raise AssertionError(f"{case.id}: cudagraphs did not run: no cudagraph tree manager on {case.device}")
    if recorded != graphs:
        raise AssertionError(f"{case.id}: the cudagraph tree manager recorded {recorded} graph(s) for the {graphs} "
                             f"graph(s) dynamo compiled over {run.steps} steps: "
                             + ("a graph was recorded again" if recorded > graphs else "a graph ran without cudagraphs"))
    return Verdict(f"cudagraphs ran: {recorded} graph(s) recorded, one per compiled graph",
                   {"cudagraphs_recorded": recorded, "step_graphs": graphs, "steps": run.steps})


CHECK = Check("cudagraphs", check_cudagraphs, "CUDA: the compiled step ran under cudagraphs (one graph)", "plain", ("cuda",),
              prerequisites=("parity",), section=Cudagraphs, rungs=COMPILED,
              proves=("CUDA only: under inductor's `triton.cudagraphs` the compiled step records one CUDA graph per graph dynamo compiled and matches"
                      " eager. Evidence: graphs recorded."),
              red=("Re-recording (more graphs than dynamo compiled) or a difference: a step that changes tensor addresses or a CPU scalar per step "
                   "(the optimizer's), or torch's cudagraph trees."))
