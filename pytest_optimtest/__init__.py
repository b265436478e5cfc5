"""pytest-optimtest: spec-driven tests for PyTorch optimizers.

Names load on first use (PEP 562): the pytest plugin imports this package in every session,
and must not pull in torch where no spec or fixture of ours is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KernelCount": ".assertions", "assert_no_recompiles": ".assertions", "assert_optim_parity": ".assertions",
    "count_kernels": ".assertions",
    "Check": ".checks.base", "NotApplicable": ".checks.base",
    "assert_parity": ".checks.parity",
    "CompiledRun": ".harness.compiled_run", "run_compiled": ".harness.compiled_run",
    "HookEvent": ".harness.hook_recorder", "derive_hook_order": ".harness.hook_recorder", "mark": ".harness.hook_recorder",
    "record_hook_order": ".harness.hook_recorder",
    "Case": ".spec", "SpecError": ".spec", "load_case": ".cases", "load_cases": ".cases", "Registry": ".checks.registry",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_optimtest' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
