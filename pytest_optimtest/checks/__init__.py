"""The registry of checks a spec can name in `checks:`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .base import Check, NotApplicable
from .registry import RegistryError, order, register
from .compile_time import check_compile_time
from .cudagraphs import check_cudagraphs
from .distributed import check_distributed, check_zero
from .fuzz import check_fuzz_hook_order, check_fuzz_in_backward, check_fuzz_parity
from .in_backward import check_in_backward, check_in_backward_no_hook, check_in_backward_tied, check_in_backward_two_optimizers
from .kernel_count import check_kernel_count, kernel_count_metrics
from .leak import check_no_leak
from .metamorphic import (check_fuzz_determinism, check_fuzz_dtypes, check_fuzz_elementwise, check_fuzz_maximize,
                          check_fuzz_zero_lr)
from .modtracker import check_hook_order
from .parity import check_parity, parity_metrics
from .recompile import check_graph_breaks, check_recompile, graph_breaks_metrics, recompile_metrics
from .state_dict import check_state_dict
from .step_properties import check_closure_graph_break, check_none_grads

BUILTIN: tuple[Check, ...] = (
    Check("parity", check_parity, "eager vs compiled step: params, state, param_groups, attributes",
          metrics=parity_metrics),
    Check("kernel_count", check_kernel_count, "inductor's generated kernel count equals the spec's", "no_closure",
          apply_after=("parity",), metrics=kernel_count_metrics),
    Check("recompile", check_recompile, "no recompile in steady steps; declared recompiles per perturbation", "no_closure",
          metrics=recompile_metrics),
    Check("graph_breaks", check_graph_breaks, "graph breaks without fullgraph equal the spec's count", "plain",
          metrics=graph_breaks_metrics),
    Check("none_grads", check_none_grads, "steps with None grads on some params match eager", "primary"),
    Check("closure_graph_break", check_closure_graph_break, "step(closure) with a graph break matches eager", "primary"),
    Check("state_dict", check_state_dict, "state_dict round trip compiled <-> eager; recompiles after load", "primary"),
    Check("no_leak", check_no_leak, "params are freed once model, optimizer and compiled step are dropped", "primary"),
    Check("compile_time", check_compile_time, "compile time of a 100-tensor foreach step, against a budget", "primary"),
    Check("cudagraphs", check_cudagraphs, "CUDA: the compiled step ran under cudagraphs (one graph)", "plain", ("cuda",),
          prerequisites=("parity",)),
    Check("in_backward", check_in_backward, "optimizer applied in backward equals normal stepping", "plain"),
    Check("in_backward_tied", check_in_backward_tied, "the same, with tied (shared) params", "plain",
          prerequisites=("in_backward",)),
    Check("in_backward_two_optimizers", check_in_backward_two_optimizers, "the same, two optimizers per param", "plain",
          prerequisites=("in_backward",)),
    Check("in_backward_no_hook", check_in_backward_no_hook, "register_hook=False leaves params untouched", "plain"),
    Check("distributed", check_distributed, "compiled train step in one process vs DDP on N ranks; eager DDP vs eager", "distributed"),
    Check("zero", check_zero, "ZeroRedundancyOptimizer vs the unsharded optimizer; consolidated state_dict loads back", "distributed",
          apply_after=("distributed",)),
    Check("hook_order", check_hook_order, "ModTracker hook order equals the spec's (hook_order specs only)", "hook_order"),
    Check("fuzz_parity", check_fuzz_parity, "Hypothesis: compiled vs eager step on fuzzed param shapes and views", "fuzz"),
    Check("fuzz_in_backward", check_fuzz_in_backward, "Hypothesis: in-backward vs reference on fuzzed, tied MLPs", "fuzz"),
    Check("fuzz_elementwise", check_fuzz_elementwise, "Hypothesis: layout, splitting and param order do not change updates", "fuzz"),
    Check("fuzz_maximize", check_fuzz_maximize, "Hypothesis: maximize on grad g equals minimize on -g, state included", "fuzz"),
    Check("fuzz_dtypes", check_fuzz_dtypes, "Hypothesis: params and state keep their dtype and device", "fuzz"),
    Check("fuzz_determinism", check_fuzz_determinism, "Hypothesis: two runs from one seed are bitwise equal", "fuzz"),
    Check("fuzz_zero_lr", check_fuzz_zero_lr, "Hypothesis: lr=0 leaves params unchanged", "fuzz"),
    Check("fuzz_hook_order", check_fuzz_hook_order, "Hypothesis: ModTracker nests and equals the derived order on fuzzed trees", "fuzz"),
)

def _builtin_registry() -> Mapping[str, Check]:
    registry: dict[str, Check] = {}
    for check in BUILTIN:
        register(check, registry)
    return MappingProxyType(registry)


CHECKS: Mapping[str, Check] = _builtin_registry()  # read-only: a session copies it and adds third-party checks

__all__ = ["BUILTIN", "CHECKS", "Check", "NotApplicable", "RegistryError", "order", "register"]
