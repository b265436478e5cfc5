"""pytest-optimtest: spec-driven tests for PyTorch optimizers."""

from .checks.parity import assert_parity
from .harness.compiled_run import CompiledRun, run_compiled
from .harness.hook_recorder import HookEvent, derive_hook_order, mark, record_hook_order
from .spec import Case, SpecError, json_schema, load_case, load_spec

__all__ = [
    "Case", "CompiledRun", "HookEvent", "SpecError", "assert_parity", "derive_hook_order", "json_schema",
    "load_case", "load_spec", "mark", "record_hook_order", "run_compiled",
]
__version__ = "0.1.0"
