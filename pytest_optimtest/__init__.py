"""pytest-optimtest: spec-driven tests for PyTorch optimizers."""

from .assertions import KernelCount, assert_no_recompiles, assert_optim_parity, count_kernels
from .checks.base import Check, NotApplicable
from .checks.parity import assert_parity
from .harness.compiled_run import CompiledRun, run_compiled
from .harness.hook_recorder import HookEvent, derive_hook_order, mark, record_hook_order
from .spec import Case, SpecError, json_schema, load_case, load_spec

__all__ = [
    "Case", "Check", "CompiledRun", "HookEvent", "KernelCount", "NotApplicable", "SpecError",
    "assert_no_recompiles", "assert_optim_parity", "assert_parity", "count_kernels", "derive_hook_order",
    "json_schema", "load_case", "load_spec", "mark", "record_hook_order", "run_compiled",
]
__version__ = "0.1.0"
