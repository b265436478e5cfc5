"""Which devices this machine can run cases on, and the random state a run seeds and watches."""

from __future__ import annotations

import functools
import sys
from typing import Any


def unavailable_reason(device: str) -> str | None:
    """Why `device` cannot run here, or None when it can."""
    import torch

    if device == "cpu":
        return None
    if device == "cuda":
        if not torch.cuda.is_available():
            return "cuda case: no CUDA device on this machine"
        return None
    if device == "mps":
        if not torch.backends.mps.is_available():
            return "mps case: no MPS device on this machine"
        return None
    return f"unknown device {device!r}"


def seed_all(seed: int, case: Any = None) -> None:
    """torch's RNG (every accelerator's too, where there is one) and, given the case, its optimizer
    package's own generators."""
    import torch

    if accelerator_present():
        torch.manual_seed(seed)
    else:  # torch.manual_seed would queue a lazy seed for CUDA, XPU and MTIA, each capturing the caller's
        torch.default_generator.manual_seed(seed)  # stack: milliseconds a call, and runs seed every step
    if getattr(case, "optimizer", None):
        from ..spec.values import resolve  # the case's optimizer has been imported by whoever built it

        seed_package_generators(resolve(case.optimizer), seed)


@functools.cache
def accelerator_present() -> bool:
    """Whether this process has an accelerator whose RNG torch.manual_seed seeds (none appears later)."""
    import torch

    return torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()


def package_generators(optimizer_cls: Any) -> dict[str, Any]:
    """The torch.Generators the optimizer's package keeps as module globals (adv_optm's, for
    stochastic rounding), by "module.name": draws torch.manual_seed does not order. None are looked
    for in torch's own or this plugin's modules."""
    top = getattr(optimizer_cls, "__module__", "torch").split(".")[0]
    if top in ("torch", "pytest_optimtest"):
        return {}
    found: dict[str, Any] = {}
    for name, module in dict.copy(sys.modules).items():
        if module is not None and (name == top or name.startswith(top + ".")):
            found |= generators_in(vars(module), f"{name}.")
    return found


def generators_in(namespace: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The torch.Generators of a namespace (a module's globals, an optimizer's attributes), by name: each
    held directly or in a dict, list or tuple (one per device or per group, as adv_optm and timm keep them)."""
    import torch

    found: dict[str, Any] = {}
    # Copied whole before reading: a module's globals lose dynamo's `__resume_at_*` names to a weakref callback
    # at any GC, and a read item by item (whose pairs may allocate, and so collect) then raises "dictionary
    # changed size during iteration". dict.copy allocates nothing per item and runs no subclass code.
    for name, value in dict.copy(namespace).items():
        if isinstance(value, torch.Generator):
            found[f"{prefix}{name}"] = value
        elif isinstance(value, (dict, list, tuple)):
            items = dict.copy(value).items() if isinstance(value, dict) else enumerate(list(value))
            found |= {f"{prefix}{name}[{key!r}]": g for key, g in items if isinstance(g, torch.Generator)}
    return found


def package_generator_states(optimizer_cls: Any) -> dict[str, Any]:
    return {name: generator.get_state() for name, generator in package_generators(optimizer_cls).items()}


def seed_package_generators(optimizer_cls: Any, seed: int) -> None:
    """Seed them as seed_all seeds torch's, so that two runs of a case draw alike step by step."""
    for generator in package_generators(optimizer_cls).values():
        generator.manual_seed(seed)


def selected_devices(config: Any) -> set[str] | None:
    """The devices `--optim-device` names, or None when it is not given."""
    value = config.getoption("optim_device")
    return {d.strip() for d in value.split(",") if d.strip()} if value else None
