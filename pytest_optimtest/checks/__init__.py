"""The registry of checks a spec can name in `checks:`."""

from __future__ import annotations

from .base import Check, NotApplicable
from .in_backward import check_in_backward, check_in_backward_no_hook, check_in_backward_tied, check_in_backward_two_optimizers
from .kernel_count import check_kernel_count
from .parity import check_parity

CHECKS: dict[str, Check] = {
    c.name: c
    for c in (
        Check("parity", check_parity, "eager vs compiled step: params, state, param_groups, attributes"),
        Check("kernel_count", check_kernel_count, "inductor's generated kernel count equals the spec's"),
        Check("in_backward", check_in_backward, "optimizer applied in backward equals normal stepping"),
        Check("in_backward_tied", check_in_backward_tied, "the same, with tied (shared) params"),
        Check("in_backward_two_optimizers", check_in_backward_two_optimizers, "the same, two optimizers per param"),
        Check("in_backward_no_hook", check_in_backward_no_hook, "register_hook=False leaves params untouched"),
    )
}

__all__ = ["CHECKS", "Check", "NotApplicable"]
