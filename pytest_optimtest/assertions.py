"""Assertions for anyone's tests: recompiles, kernel counts, optimizer parity."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .harness import torch_api
from .harness.compare import listed, snapshot_differences
from .harness.snapshot import group_params, snapshot
from .spec.schema import Tolerance


@contextlib.contextmanager
def assert_no_recompiles() -> Iterator[list[str]]:
    """Fail if anything compiled inside the block recompiles; the failure lists dynamo's reasons.

        step()                      # first call compiles
        with assert_no_recompiles():
            step()                  # must reuse the compiled graph
    """
    with torch_api.recording_recompiles() as messages:
        yield messages
    if messages:
        reasons = [r for m in messages for r in torch_api.guard_failures(m)]
        raise AssertionError(f"{len(messages)} recompile(s) inside assert_no_recompiles(); dynamo's reasons:"
                             + listed(reasons, 12))


@dataclass
class KernelCount:
    """Kernels inductor generated inside a `count_kernels()` block (set when the block ends)."""

    count: int = 0


@contextlib.contextmanager
def count_kernels() -> Iterator[KernelCount]:
    """Count inductor's generated kernels inside the block (exact on inductor cache hits too).

        with count_kernels() as kernels:
            step()
        assert kernels.count == 2
    """
    result = KernelCount()
    before = torch_api.generated_kernel_count()
    try:
        yield result
    finally:
        result.count = torch_api.generated_kernel_count() - before


def assert_optim_parity(eager: torch.optim.Optimizer, compiled: torch.optim.Optimizer,
                        atol: float = 1e-5, rtol: float = 1.3e-6) -> str:
    """Two optimizers over params in the same order must hold equal params, state, param_groups
    and plain attributes; the failure names every difference. Returns a one-line summary."""
    def names(opt: torch.optim.Optimizer) -> dict[torch.Tensor, str]:
        return {p: f"group{g}.params[{i}]" for g, group in enumerate(opt.param_groups) for i, p in enumerate(group_params(group))}

    a, b = snapshot(eager, names(eager)), snapshot(compiled, names(compiled))
    if list(a.params) != list(b.params):
        raise AssertionError(f"the optimizers hold different params: {list(a.params)} vs {list(b.params)}")
    problems = snapshot_differences(a, b, Tolerance(atol=atol, rtol=rtol))
    if problems:
        raise AssertionError("compiled optimizer differs from eager:" + listed(problems))
    return f"{len(a.params)} params, {sum(len(s) for s in a.state.values())} state entries equal"
