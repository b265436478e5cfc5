"""The built-in checks, in registration order. Adding a check: its module declares a `Check`;
one line here registers it."""

from __future__ import annotations

from . import (compile_time, cudagraphs, distributed, fsdp, in_backward, kernel_count, leak, modtracker, parity, recompile,
               state_dict, state_dtype, step_properties)
from .base import Check, NotApplicable, Vacuous, Verdict
from .hypothesis import fuzzed, metamorphic
from .laws import LAWS
from .registry import Registry, RegistryError, order

BUILTIN: tuple[Check, ...] = (
    parity.CHECK,
    kernel_count.CHECK,
    recompile.RECOMPILE,
    recompile.GRAPH_BREAKS,
    step_properties.NONE_GRADS,
    step_properties.CLOSURE_GRAPH_BREAK,
    state_dict.CHECK,
    state_dtype.CHECK,
    leak.CHECK,
    compile_time.CHECK,
    cudagraphs.CHECK,
    in_backward.IN_BACKWARD,
    in_backward.TIED,
    in_backward.TWO_OPTIMIZERS,
    in_backward.NO_HOOK,
    distributed.DISTRIBUTED,
    distributed.ZERO,
    fsdp.FSDP,
    fsdp.CHECKPOINT,
    modtracker.CHECK,
    fuzzed.PARITY,
    fuzzed.IN_BACKWARD,
    metamorphic.ELEMENTWISE,
    metamorphic.MAXIMIZE,
    metamorphic.DTYPES,
    metamorphic.DETERMINISM,
    metamorphic.ZERO_LR,
    fuzzed.HOOK_ORDER,
    *LAWS,
)

CHECKS = Registry(BUILTIN)  # read-only: a session makes its own with `CHECKS.with_checks(third_party)`

__all__ = ["BUILTIN", "CHECKS", "Check", "NotApplicable", "Registry", "RegistryError", "Vacuous", "Verdict", "order"]
