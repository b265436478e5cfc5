"""The registry of checks a spec can name in `checks:`."""

from __future__ import annotations

from .base import Check, NotApplicable
from .kernel_count import check_kernel_count
from .parity import check_parity

CHECKS: dict[str, Check] = {
    c.name: c
    for c in (
        Check("parity", check_parity, "eager vs compiled step: params, state, param_groups, attributes"),
        Check("kernel_count", check_kernel_count, "inductor's generated kernel count equals the spec's"),
    )
}

__all__ = ["CHECKS", "Check", "NotApplicable"]
