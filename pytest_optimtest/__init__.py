"""pytest-optimtest: spec-driven tests for PyTorch optimizers."""

from .checks.parity import assert_parity
from .harness.compiled_run import CompiledRun, run_compiled
from .spec import Case, SpecError, json_schema, load_spec

__all__ = ["Case", "CompiledRun", "SpecError", "assert_parity", "json_schema", "load_spec", "run_compiled"]
__version__ = "0.1.0"
