"""The one place that touches torch's private APIs; a torch upgrade is fixed here.

Everything else in the package calls these functions instead of reaching into
torch._dynamo, torch._inductor or torch.distributed internals.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch


def torch_version() -> str:
    """The running torch as 'major.minor', the key of kernel-count expectations."""
    major, minor = torch.__version__.split(".")[:2]
    return f"{major}.{minor}"


def reset_compile_state() -> None:
    """Forget compiled code, inductor metrics and dynamo counters."""
    import torch._dynamo
    import torch._inductor.metrics

    torch._dynamo.reset()
    torch._inductor.metrics.reset()
    torch._dynamo.utils.counters.clear()


def generated_kernel_count() -> int:
    import torch._inductor.metrics

    return torch._inductor.metrics.generated_kernel_count


def captured_graph_count() -> int:
    """Graphs dynamo handed to the backend since the last reset."""
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def graph_break_reasons() -> list[str]:
    """dynamo's reason for each distinct graph break since the last reset."""
    import torch._dynamo.utils

    return list(torch._dynamo.utils.counters["graph_break"])


def inductor_config(**options: Any) -> contextlib.AbstractContextManager:
    import torch._inductor.config

    return torch._inductor.config.patch(options)


@functools.cache
def _torch_optim_wrapper_codes() -> frozenset:
    from torch.optim.optimizer import Optimizer, _use_grad_for_differentiable

    def probe(self: Any) -> None: ...

    return frozenset({Optimizer.profile_hook_step(probe).__code__, _use_grad_for_differentiable(probe).__code__})


def raw_step(optimizer: torch.optim.Optimizer) -> Callable[..., Any]:
    """optimizer.step without torch.optim's own wrappers, bound to the optimizer.

    torch.optim wraps step in a profiling hook wrapper and in `_use_grad_for_differentiable`,
    which inserts graph breaks; PyTorch's tests compile the function under them, under
    no_grad, and so do we (see optimizer.py's "Note on graph break"). Other decorators,
    a user's torch.compiler.disable included, are kept.
    """
    wrappers = _torch_optim_wrapper_codes()
    step = type(optimizer).step
    while getattr(step, "__code__", None) in wrappers and hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    return step.__get__(optimizer)


def mark_step_called(optimizer: torch.optim.Optimizer) -> None:
    """Silence the LR scheduler's 'step() before optimizer.step()' warning for a raw step."""
    optimizer._opt_called = True  # type: ignore[attr-defined]


# Attributes that torch.optim's wrappers (not the step itself) write on an optimizer.
WRAPPER_ATTRIBUTES = frozenset({"_opt_called", "_zero_grad_profile_name", "_optimizer_step_code"})


def apply_optimizer_in_backward(optimizer_cls: type, params: list, kwargs: dict, register_hook: bool = True) -> None:
    """torch.distributed.optim._apply_optimizer_in_backward: step `params` as their grads are ready."""
    from torch.distributed.optim import _apply_optimizer_in_backward

    _apply_optimizer_in_backward(optimizer_cls, params, optimizer_kwargs=kwargs, register_hook=register_hook)


def in_backward_optimizers(module: torch.nn.Module) -> list:
    from torch.distributed.optim import _get_in_backward_optimizers

    return _get_in_backward_optimizers(module)


def optimizers_on_param(param: torch.Tensor) -> list:
    """The in-backward optimizers stored on a parameter."""
    return list(getattr(param, "_in_backward_optimizers", []))
