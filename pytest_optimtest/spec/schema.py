"""The spec format, as strict pydantic models. `python -m pytest_optimtest schema` prints it."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Device = Literal["cpu", "cuda", "mps"]
NAME = r"^[a-z0-9][a-z0-9_]*$"
TORCH_VERSION = re.compile(r"^\d+\.\d+$")
MAX_STEPS = 1000  # optimizer steps, train iterations: a typo like 10**20 is a spec error, not a hang
MAX_COMPILES = 100
MAX_EXAMPLES = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(_Strict):
    """Element-wise closeness: |eager - compiled| <= atol + rtol * |eager|."""

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class Rule(_Strict):
    """Selects generated tests by case-id glob, devices, checks and torch versions; a reason is required."""

    cases: str = Field("*", description="fnmatch pattern over case ids, e.g. '*-tensor_lr-*'")
    devices: list[Device] | None = None
    checks: list[str] | None = None
    torch: list[Any] | None = Field(None, description="torch versions the rule holds for, e.g. ['2.11'] (a torch bug fixed later)")
    reason: str = Field(min_length=1)

    @field_validator("torch")
    @classmethod
    def _versions(cls, versions: list[Any] | None) -> list[Any] | None:
        for version in versions or ():
            _check_torch_version(version, "torch versions")
        return versions


class GridAxis(_Strict):
    """One flag crossed with every case; `devices` limits where it varies."""

    values: list[Any] = Field(min_length=1)
    devices: list[Device] | None = None


class CaseSpec(_Strict):
    """A named optimizer configuration, like PyTorch's OptimizerInput."""

    name: str = Field(pattern=NAME)
    kwargs: dict[str, Any] = {}
    schedulers: bool | list[str] = Field(
        False, description="true: one variant per spec scheduler; or a list of scheduler names"
    )
    devices: list[Device] | None = None
    closure: list[bool] | None = None
    steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    tolerance: Tolerance | None = None


class ParamGroupSpec(_Strict):
    """Params by name: a glob over unique names, or an exact name (an alias of a tied param too)."""

    params: list[str] = Field(min_length=1)
    kwargs: dict[str, Any] = {}


class InBackwardSpec(_Strict):
    """How the in-backward checks build and compare their models."""

    steps: int = Field(6, ge=1, le=MAX_STEPS)
    groups: list[ParamGroupSpec] = Field(
        [ParamGroupSpec(params=["*weight"]), ParamGroupSpec(params=["*bias"])],
        description="optimizer groups (PyTorch's test: weights, biases); kwargs go over the case's",
    )
    tie: list[list[str]] = Field(
        [["0.weight", "1.weight"]], description="params the tied variant shares: each list becomes its first"
    )
    per_parameter: str | None = Field(
        None,
        description="why this optimizer cannot match one optimizer over all params (it couples params or "
        "draws random numbers); then the reference is one optimizer per param stepped in hook order",
    )


KernelTable = dict[str, dict[Device, dict[str, int]]]


def _check_torch_version(version: Any, what: str) -> None:
    if not isinstance(version, str):
        raise ValueError(f"quote torch versions: '{version}' (YAML reads {version} as a number)")
    if not TORCH_VERSION.match(version):
        raise ValueError(f"{what} like '2.13', got {version!r}")


def _kernel_table(counts: Any) -> Any:
    """Validate torch-version keys and expand the `device: N` shorthand to `device: {'*': N}`."""
    if not isinstance(counts, dict):
        return counts
    for version, per_device in counts.items():
        _check_torch_version(version, "kernel_counts keys are torch versions")
        if isinstance(per_device, dict):
            counts[version] = {d: {"*": n} if isinstance(n, int) else n for d, n in per_device.items()}
    return counts


PERTURBATIONS = ("set_lr", "replace_state", "clear_state", "add_param_group", "set_group")


class Perturbation(_Strict):
    """One change made to the optimizer between compiled steps, and the recompiles it must cause.

    Exactly one of: set_lr (every group's lr becomes this Python float), replace_state (that
    state tensor of the first param is replaced by an equal copy: proves a guard on identity),
    clear_state, add_param_group (kwargs of a new group holding one new param), set_group
    (hyperparameters written into every group, e.g. {maximize: true}).
    """

    set_lr: float | None = None
    replace_state: str | None = None
    clear_state: bool = False
    add_param_group: dict[str, Any] | None = None
    set_group: dict[str, Any] | None = None
    recompiles: int | None = Field(1, ge=0, le=MAX_COMPILES, description="recompiles the next compiled step must make; "
                                   "null: observe and report only (the implicit default perturbation)")
    kernel_counts: KernelTable = Field({}, description="kernels that recompile generates, keyed as kernel_counts")

    @model_validator(mode="after")
    def _one_action(self) -> Perturbation:
        given = [k for k in PERTURBATIONS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"a perturbation takes exactly one of {', '.join(PERTURBATIONS)}; got {given or 'none'}")
        return self

    @property
    def action(self) -> str:
        return next(k for k in PERTURBATIONS if getattr(self, k) not in (None, False))

    @field_validator("kernel_counts", mode="before")
    @classmethod
    def _counts_shorthand(cls, counts: Any) -> Any:
        return _kernel_table(counts)


SETTLE_STEPS = 4


class Warmup(_Strict):
    """Steps before the steady state, and how many times they may compile the step.

    Undeclared, the warm-up steps until a step compiles nothing (at most SETTLE_STEPS): one
    recompile for state an optimizer creates inside `step` is the norm; one on every step is not.
    The scheduler is not stepped while it settles: its recompiles are judged over the steady steps.
    """

    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description=f"default: until settled, at most {SETTLE_STEPS}")
    compiles: int | None = Field(None, ge=1, le=MAX_COMPILES, description="e.g. 2 for SGD with momentum: its buffer "
                                 "appears after step 1; default: 1 with `steps`, else what settling took")

    @property
    def allowed_compiles(self) -> int | None:
        return self.compiles if self.compiles is not None else (1 if self.steps is not None else None)


class RecompileSpec(_Strict):
    """What the recompile check expects of the compiled step."""

    warmup: Warmup = Warmup()
    steps: int = Field(4, ge=1, le=MAX_STEPS, description="steady steps after warm-up; none may recompile")
    perturbations: list[Perturbation] = Field(
        [Perturbation(clear_state=True, recompiles=None)],
        description="applied in order; undeclared: clear_state, its recompiles observed and reported, not assumed "
        "(an optimizer without state does not recompile); --optim-update-expected writes what it saw")
    schedulers: dict[str, int] = Field(
        {}, description="scheduler name -> recompiles its steps may cause over the steady steps (default 0)"
    )
    load_state_dict: int = Field(1, ge=0, le=MAX_COMPILES, description="recompiles a load_state_dict into the compiled optimizer may cause")


class DistributedSpec(_Strict):
    """The distributed checks: a whole train step compiled in one process vs DDP (and ZeRO) on N ranks."""

    cases: list[str] | None = Field(
        None, description="names of the cases to run on N ranks, with their scheduler variants (default: the first case)"
    )
    world_size: int = Field(2, ge=2, le=64)
    iterations: int = Field(3, ge=1, le=MAX_STEPS, description="train steps: forward, backward, optimizer step, zero_grad")
    batch: int = Field(8, ge=1, le=65536, description="global batch, split evenly across the ranks")
    zero: bool = Field(True, description="also run ZeroRedundancyOptimizer over the spec's optimizer")
    timeout_s: float = Field(180, gt=0, le=86400, description="a rank still running after this is killed and the test fails")
    tolerance: Tolerance | None = Field(
        None, description="for DDP vs one process (a sharded batch sums in another order); default: the case's"
    )

    @model_validator(mode="after")
    def _batch_splits(self) -> DistributedSpec:
        if self.batch % self.world_size:
            raise ValueError(f"batch {self.batch} does not split evenly across world_size {self.world_size} ranks")
        return self


PROFILES = ("ci", "dev", "nightly")


def _examples(value: Any) -> Any:
    """A bare count is the dev profile's; a mapping gives counts per Hypothesis profile."""
    return {"dev": value} if isinstance(value, int) and not isinstance(value, bool) else value


class FuzzProperty(_Strict):
    """One Hypothesis property and its example counts per settings profile."""

    examples: dict[str, int] = Field(
        {}, description="examples per Hypothesis profile, e.g. {ci: 10, dev: 30}; a bare number is dev's; "
        "a profile not named runs its own max_examples (ci 10, dev 30, nightly 1000)"
    )

    @field_validator("examples", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return _examples(value)

    @field_validator("examples")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        for profile, count in value.items():
            if not 1 <= count <= MAX_EXAMPLES:
                raise ValueError(f"examples[{profile!r}] must be between 1 and {MAX_EXAMPLES}, got {count}")
        return value


class FuzzParity(FuzzProperty):
    """Compiled vs eager step on fuzzed parameter shapes (0-d, one-element, empty, views)."""

    dynamic: bool = Field(True, description="compile with dynamic shapes (one symbolic graph for every size)")
    steps: int = Field(2, ge=1, le=MAX_STEPS)
    max_params: int = Field(4, ge=1, le=64)
    max_dims: int = Field(3, ge=0, le=6)
    max_side: int = Field(4, ge=1, le=16)


class FuzzInBackward(FuzzProperty):
    """In-backward vs the normally stepped reference on fuzzed MLPs, tied and untied."""

    max_depth: int = Field(3, ge=2, le=8)
    max_width: int = Field(6, ge=1, le=256)


class FuzzShapes(FuzzProperty):
    """An eager metamorphic property over fuzzed params (0-d, one-element, empty, views)."""

    steps: int = Field(3, ge=1, le=MAX_STEPS)
    max_params: int = Field(4, ge=1, le=64)
    min_dims: int = Field(0, ge=0, le=6, description="e.g. 2 for optimizers of matrices only (Muon)")
    max_dims: int = Field(3, ge=0, le=6)
    max_side: int = Field(4, ge=1, le=16)
    allow_empty: bool = Field(True, description="draw params with a 0 side (false: an optimizer that cannot step them)")

    @model_validator(mode="after")
    def _dims(self) -> FuzzShapes:
        if self.min_dims > self.max_dims:
            raise ValueError(f"min_dims {self.min_dims} is above max_dims {self.max_dims}")
        return self


class FuzzMaximize(FuzzShapes):
    """maximize=True on grad g equals maximize=False on -g."""

    state: bool = Field(True, description="compare the state too (false: an optimizer that keeps it sign-flipped)")


FuzzDtype = Literal["float64", "float32", "bfloat16", "float16"]


class FuzzDtypes(FuzzShapes):
    """Params and state keep their dtype and device."""

    dtypes: list[FuzzDtype] = Field(["bfloat16", "float64"], min_length=1, description="tried in this order")


class FuzzSpec(_Strict):
    """Hypothesis properties of this optimizer; each draws the spec's plain cases.

    parity and in_backward compare the compiled or in-backward run with eager; the others are
    metamorphic properties of the eager step, which catch what eager and compiled share.
    """

    parity: FuzzParity | None = None
    in_backward: FuzzInBackward | None = None
    elementwise: FuzzShapes | None = Field(
        None, description="declare only for optimizers whose update of an element depends on that element alone "
        "(Adam, SGD, Lion; not Shampoo, Muon, Adafactor): layout, splitting and order do not change updates")
    maximize: FuzzMaximize | None = Field(None, description="the constructor must take `maximize`")
    dtypes: FuzzDtypes | None = None
    determinism: FuzzShapes | None = Field(None, description="two runs with one seed are bitwise equal")
    zero_lr: FuzzShapes | None = Field(
        None, description="lr=0 leaves params bitwise unchanged; not for optimizers whose decay ignores lr")


class Spec(_Strict):
    """One optimizer's test matrix."""

    optimizer: str = Field(description="import path: 'torch.optim.Adam' or 'mypkg.optim:Lion'")
    name: str | None = Field(None, pattern=NAME, description="id prefix; default: class name, lowercased")
    kwargs: dict[str, Any] = Field({}, description="base kwargs, under each case's kwargs")
    model: str = Field(
        "pytest_optimtest.models:two_linear",
        description="model factory by import path, called as factory(device=...)",
    )
    cases: list[CaseSpec] = Field([CaseSpec(name="default")], min_length=1)
    grid: dict[str, GridAxis] = {}
    schedulers: dict[str, dict[str, Any]] = Field(
        {}, description="LR scheduler name (torch.optim.lr_scheduler or import path) -> kwargs"
    )
    devices: list[Device] = Field(["cpu"], min_length=1)
    closure: list[bool] = Field([False], min_length=1, description="run each case without/with a closure")
    steps: int = Field(2, ge=1, le=MAX_STEPS, description="steps of the once-per-optimizer checks; parity compares after at least this many (its run is the warm-up and the recompile steady steps)")
    data: Literal["random", "ones"] = Field(
        "random", description="random: seeded randn input, squared loss; ones: PyTorch's torch.ones, sum loss"
    )
    seed: int = Field(0, ge=0, lt=2**63)
    tolerance: Tolerance = Tolerance(atol=1e-5, rtol=1.3e-6)
    min_movement: float = Field(
        10.0, gt=0, description="params must move this many tolerances, else the comparison is vacuous"
    )
    fallback_random: bool = Field(False, description="compile with inductor's fallback_random (RNG-drawing optimizers)")
    setup: str | None = Field(None, description="import path of a callable run on each optimizer the checks build, "
                              "right after construction: setup(optimizer) (e.g. schedule-free's optimizer.train())")
    requires: list[str] = Field([], description="modules the spec needs (e.g. the optimizer's package): when one "
                                "cannot be imported, the spec's tests are skipped with that reason instead of failing")
    kernel_counts: KernelTable = Field(
        {}, description="torch major.minor -> device -> {case-id glob or '*': generated kernel count}"
    )
    recompile: RecompileSpec = RecompileSpec()
    graph_breaks: int = Field(0, ge=0, le=MAX_COMPILES, description="distinct graph-break reasons a compile without fullgraph must show")
    compile_budget_s: float | None = Field(
        None, gt=0, le=86400, description="fail compile_time past this many seconds (default: report only)"
    )
    cudagraphs: bool = Field(True, description="run CUDA cases under inductor's cudagraphs, as PyTorch's tests")
    in_backward: InBackwardSpec = InBackwardSpec()
    distributed: DistributedSpec = DistributedSpec()
    fuzz: FuzzSpec | None = Field(None, description="Hypothesis properties: parity, in_backward")
    checks: list[str] | None = Field(
        None, description="checks to run (default: every registered check); each applies to the cases it can say something about"
    )
    skip: list[Rule] = []
    xfail: list[Rule] = []

    @field_validator("grid", mode="before")
    @classmethod
    def _grid_shorthand(cls, grid: Any) -> Any:
        if isinstance(grid, dict):
            return {k: {"values": v} if isinstance(v, list) else v for k, v in grid.items()}
        return grid

    @field_validator("kernel_counts", mode="before")
    @classmethod
    def _counts_shorthand(cls, counts: Any) -> Any:
        return _kernel_table(counts)


HOOK_KINDS = ("pre_fw", "post_fw", "pre_bw", "post_bw")


class HookEventSpec(_Strict):
    """One expected ModTracker event; shorthand: [event, module, in_parents, is_bw]."""

    event: str = Field(pattern=r"^(pre_fw|post_fw|pre_bw|post_bw|mark:.+)$",
                       description="a ModTracker user hook, or 'mark:<label>' recorded by the model itself")
    module: str | None = Field(description="fully qualified name, e.g. 'Mod.b.nest'; null once the module is deleted")
    in_parents: bool
    is_bw: bool
    parents: list[str] | None = Field(None, description="the whole tracker.parents set at that moment, when given")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 4:
                raise ValueError(f"an event list is [event, module, in_parents, is_bw], got {len(value)} items")
            return dict(zip(("event", "module", "in_parents", "is_bw"), value))
        return value


class AfterBackward(_Strict):
    """The tracker's state right after backward, still inside it."""

    is_bw: bool = False
    parents: list[str] = ["Global"]


class HookOrderSpec(_Strict):
    """A ModTracker hook-order test: a model, its input, and the events ModTracker must report."""

    kind: Literal["hook_order"]
    name: str = Field(pattern=NAME, description="the test id")
    model: str = Field(description="import path of a module class or factory")
    model_kwargs: dict[str, Any] = {}
    inputs: str = Field(description="import path of a zero-argument callable returning the input (a tuple is unpacked)")
    iterations: int = Field(1, ge=1, le=MAX_STEPS, description="forward+backward passes, all recorded")
    backward: bool = True
    drop_model_before_backward: bool = Field(False, description="delete the model between forward and backward")
    expected: Literal["derive"] | list[HookEventSpec] | dict[str, list[HookEventSpec]] = Field(
        "derive", description="'derive' (from the module tree and the forward call order), the events, "
        "or events keyed by torch major.minor ('*' for any other version)"
    )
    after_backward: AfterBackward | None = None
    compare: Literal["all", "hooks", "marks"] = Field(
        "all", description="which events to compare: all, the four hooks only, or the model's marks only"
    )
    xfail: str | None = Field(None, description="why this test is expected to fail (strict)")

    @field_validator("expected", mode="before")
    @classmethod
    def _versions(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for version in value:
                if version != "*" and not (isinstance(version, str) and TORCH_VERSION.match(version)):
                    raise ValueError(f"expected is keyed by quoted torch versions like '2.13' or '*', got {version!r}")
        return value


class HookOrderFuzzSpec(FuzzProperty):
    """ModTracker on Hypothesis-drawn module trees: events nest, and equal the derived order."""

    kind: Literal["hook_order_fuzz"]
    name: str = Field(pattern=NAME, description="the test id")
    max_leaves: int = Field(6, ge=1, le=64, description="Linear leaves per tree, at most")
    max_children: int = Field(3, ge=1, le=16, description="children per container, at most")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file, for editor completion."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(Spec | HookOrderSpec | HookOrderFuzzSpec).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-optimtest spec"
    return schema
