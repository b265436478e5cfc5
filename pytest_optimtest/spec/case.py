"""`Case`: one fully expanded configuration that checks run on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import InBackwardSpec, RecompileSpec, Tolerance


@dataclass(frozen=True)
class Variant:
    """Where a case sits in its spec's matrix: what decides which checks apply to it."""

    device: str
    closure: bool = False
    scheduler: str | None = None
    primary: bool = False  # the first case's first grid combination: once-per-optimizer checks

    @property
    def plain(self) -> bool:
        return not self.closure and self.scheduler is None


@dataclass(frozen=True, eq=False)
class KernelExpectation:
    count: int | None
    where: str  # "specs/adam.yaml:12 kernel_counts['2.13'].cpu['*']", or where to add one
    torch_version: str


@dataclass(frozen=True, eq=False)
class Case:
    """Everything needed to run one optimizer configuration; raw spec values, built per run."""

    id: str
    spec_path: str
    line: int | None
    optimizer: str
    kwargs: dict[str, Any]
    device: str
    steps: int = 2
    closure: bool = False
    scheduler: str | None = None
    scheduler_kwargs: dict[str, Any] = field(default_factory=dict)
    model: str = "pytest_optimtest.models:two_linear"
    data: str = "random"
    seed: int = 0
    tolerance: Tolerance = Tolerance(atol=1e-5, rtol=1.3e-6)
    min_movement: float = 10.0
    fallback_random: bool = False
    in_backward: InBackwardSpec = InBackwardSpec()
    checks: tuple[str, ...] = ("parity", "kernel_count")
    kernels: KernelExpectation | None = None
    recompile: RecompileSpec = RecompileSpec()
    perturbation_kernels: tuple[KernelExpectation, ...] = ()
    graph_breaks: int = 0
    compile_budget_s: float | None = None
    cudagraphs: bool = True
    skip: dict[str, str] = field(default_factory=dict)  # check -> reason
    xfail: dict[str, str] = field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.spec_path}:{self.line}" if self.line else self.spec_path


@dataclass(frozen=True, eq=False)
class HookOrderCase:
    """A ModTracker hook-order test from a `kind: hook_order` spec."""

    id: str
    spec_path: str
    line: int | None
    model: str
    model_kwargs: dict[str, Any]
    inputs: str
    iterations: int
    backward: bool
    drop_model_before_backward: bool
    expected: Any  # "derive", a list of HookEventSpec, or None when no entry fits this torch
    expected_where: str
    after_backward: Any = None
    compare: str = "all"
    device: str = "cpu"
    checks: tuple[str, ...] = ("hook_order",)
    skip: dict[str, str] = field(default_factory=dict)
    xfail: dict[str, str] = field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.spec_path}:{self.line}" if self.line else self.spec_path
