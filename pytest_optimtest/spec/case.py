"""`Case`: one fully expanded configuration that checks run on."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .schema import DEFAULT_TOLERANCES, DistributedSpec, Tolerance


@dataclass(frozen=True)
class Variant:
    """Where a case sits in its spec's matrix: what decides which checks apply to it."""

    device: str
    closure: bool = False
    scheduler: str | None = None
    dtype: str = "float32"
    case: str = ""  # the spec case's name
    # the first case at its device and dtype, first grid combination, no scheduler, no closure unless the case
    # steps with one only: once-per-optimizer checks
    primary: bool = False
    distributed: bool = False  # a case the spec's `distributed` section names

    @property
    def plain(self) -> bool:
        return not self.closure and self.scheduler is None


@dataclass(frozen=True, eq=False, repr=False)
class Case:
    """Everything needed to run one optimizer configuration; raw spec values, built per run."""

    id: str
    spec_path: str
    line: int | None
    optimizer: str
    kwargs: dict[str, Any]
    device: str
    dtype: str = "float32"  # the params' (and the data's) dtype
    steps: int = 2
    closure: bool = False
    closure_forms: tuple[bool, ...] = ()  # the closure variants the spec declares for the case; () where it is silent
    scheduler: str | None = None
    scheduler_kwargs: dict[str, Any] = field(default_factory=dict)
    model: str = "pytest_optimtest.models:two_linear"
    params: Any = "list"  # the spec's `params` form: list, named, model, or [ParamGroup]
    data: str = "random"
    seed: int = 0
    tolerance: Tolerance = DEFAULT_TOLERANCES["float32"]  # the one for `dtype`
    min_movement: float = 10.0
    strict: bool = False  # vacuous items fail instead of skipping
    fallback_random: bool = False
    recompile_limit: int | None = None  # the spec's: dynamo's recompile limit for every run
    grad_mode: str = "no_grad"  # the spec's: the grad mode steps run under
    backward: str = "plain"  # the spec's: how a closure makes the grads (plain, create_graph, by_step)
    timeout_s: float = 900
    setup: str | None = None
    distributed: DistributedSpec = DistributedSpec()
    checks: tuple[str, ...] = ("parity", "kernel_count")
    skip: dict[str, str] = field(default_factory=dict)  # check -> reason
    xfail: dict[str, str] = field(default_factory=dict)
    xfail_match: dict[str, str] = field(default_factory=dict)  # check -> the failure its xfail rule expects (a regex)
    sections: dict[str, Any] = field(default_factory=dict)  # spec key -> a check's section (validated model)
    expected: dict[str, Any] = field(default_factory=dict)  # check name -> what its `expect` made of this case

    @property
    def key(self) -> tuple[str, str]:
        """Unique in a session: two spec files may make the same case id."""
        return (self.spec_path, self.id)

    @property
    def location(self) -> str:
        return f"{self.spec_path}:{self.line}" if self.line else self.spec_path

    def closure_variant(self) -> Case | None:
        """This case with a closure, as its spec generates it (id included: its runs are that case's),
        or None where the spec declares no closure variant."""
        if self.closure or True not in self.closure_forms:
            return None
        tail = f"-{self.dtype}-{self.device}" if self.dtype != "float32" else f"-{self.device}"
        return replace(self, id=f"{self.id.removesuffix(tail)}-closure{tail}", closure=True)

    def __repr__(self) -> str:
        """Code that loads this case again: what a falsifying example prints."""
        return f"load_case({shown_path(self.spec_path)!r}, {self.id!r})"


def shown_path(path: str) -> str:
    """The path relative to the working directory when it lies below it, else as given."""
    import os

    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


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
    torch_version: str = ""  # the running release: update mode records the observed order under it
    written: Any = None  # the spec's `expected` as written (a list, or a mapping by release): what update mode edits
    device: str = "cpu"
    checks: tuple[str, ...] = ("hook_order",)
    skip: dict[str, str] = field(default_factory=dict)
    xfail: dict[str, str] = field(default_factory=dict)
    xfail_match: dict[str, str] = field(default_factory=dict)  # none: a hook-order spec's `xfail` is a reason alone

    @property
    def key(self) -> tuple[str, str]:
        return (self.spec_path, self.id)

    @property
    def location(self) -> str:
        return f"{self.spec_path}:{self.line}" if self.line else self.spec_path


@dataclass(frozen=True, eq=False)
class FuzzCase:
    """The Hypothesis properties of a spec on one device: `settings` per property (check name),
    and the optimizer cases they draw from (none for module-tree properties)."""

    id: str
    spec_path: str
    line: int | None
    device: str
    settings: dict[str, Any]
    cases: tuple[Case, ...] = ()
    checks: tuple[str, ...] = ()
    skip: dict[str, str] = field(default_factory=dict)
    xfail: dict[str, str] = field(default_factory=dict)
    xfail_match: dict[str, str] = field(default_factory=dict)
    # the spec's optimizer, whose report rows these are even where no case is drawable; None for
    # module-tree properties
    optimizer: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.spec_path, self.id)

    @property
    def location(self) -> str:
        return f"{self.spec_path}:{self.line}" if self.line else self.spec_path

    def drawable(self, base_check: str) -> tuple[Case, ...]:
        """The cases a property may draw: those its base check is neither skipped nor xfailed for."""
        return tuple(c for c in self.cases if base_check not in c.skip and base_check not in c.xfail)
