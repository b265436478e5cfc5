"""Which devices this machine can run cases on."""

from __future__ import annotations

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


def seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)  # seeds CUDA and MPS generators too


def selected_devices(config: Any) -> set[str] | None:
    """The devices `--optim-device` names, or None when it is not given."""
    value = config.getoption("optim_device")
    return {d.strip() for d in value.split(",") if d.strip()} if value else None
