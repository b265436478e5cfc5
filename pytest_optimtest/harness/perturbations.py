"""The changes a spec's `recompile.perturbations` make to a compiled optimizer between steps, as
user code would, and what each one cost in compilation."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spec.values import build_kwargs
from .run_phases import Perturbation
from .snapshot import group_params, groups_hold_settings, per_param_state


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
class PerturbationFailure:
    """A perturbation, or the compiled step after it, raised: the perturbation phase stopped there.
    Only the recompile check judges it; the steps before it (what parity compares) stand."""

    index: int
    perturbation: Perturbation
    error: Exception


class PerturbationError(AssertionError):
    """The spec asks for a perturbation this optimizer's state cannot take."""


def apply_perturbation(perturbation: Perturbation, opt: torch.optim.Optimizer, device: str) -> None:
    """Make the change a perturbation describes, in place, as user code would between steps."""
    action = perturbation.action
    if action in ("set_lr", "set_group") and not groups_hold_settings(opt):
        raise PerturbationError(f"{action}: this optimizer's param groups are its params alone (no settings to change)")
    state = per_param_state(opt)
    if action == "set_lr":
        for group in opt.param_groups:
            group["lr"] = float(perturbation.set_lr)  # type: ignore[arg-type]
    elif action == "replace_state":
        key = perturbation.replace_state
        holder = next((s for s in state.values() if isinstance(s, dict) and key in s), None)
        if holder is None or not isinstance(holder[key], torch.Tensor):
            keys = sorted({k for s in state.values() if isinstance(s, dict) for k in s})
            raise PerturbationError(f"replace_state: no state tensor {key!r}; this optimizer's state keys: {keys}")
        holder[key] = holder[key].clone()  # equal values, new storage: only an identity guard notices
    elif action == "clear_state":
        if not isinstance(state, dict) or state is not getattr(opt, "state", None):
            raise PerturbationError("clear_state: this optimizer keeps no per-param `state` dict to clear")
        state.clear()
    elif action == "add_param_group":
        first = group_params(opt.param_groups[0])[0]
        param = torch.nn.Parameter(torch.randn_like(first))
        param.grad = torch.randn_like(first)
        opt.add_param_group({"params": [param], **build_kwargs(perturbation.add_param_group or {}, device)})
    elif action == "set_group":
        values = build_kwargs(perturbation.set_group or {}, device)
        for group in opt.param_groups:
            group.update(values)
