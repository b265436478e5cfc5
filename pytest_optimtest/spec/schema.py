"""The spec format, as strict pydantic models. `python -m pytest_optimtest schema` prints it."""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationInfo, create_model, field_validator, model_validator

Device = Literal["cpu", "cuda", "mps"]
Dtype = Literal["float32", "bfloat16", "float16", "float64"]
LOW_PRECISION = ("bfloat16", "float16")  # dtypes whose rounding can swallow an update
NAME = r"^[a-z0-9][a-z0-9_]*$"
TORCH_VERSION = re.compile(r"^\d+\.\d+$")
MAX_STEPS = 1000  # optimizer steps, train iterations: a typo like 10**20 is a spec error, not a hang
MAX_COMPILES = 100
MAX_EXAMPLES = 1_000_000


Backward = Literal["plain", "create_graph", "by_step"]


def _closure_needed(backward: str, key: str) -> None:
    """A run without a closure has grads set by hand, with no graph behind them to differentiate."""
    if backward != "plain":
        raise ValueError(f"backward: {backward} steps only with a closure (grads set by hand have no graph for the step "
                         f"to differentiate): give {key} [true], or leave it out")


class StrictModel(BaseModel):
    """Unknown keys are errors; validated values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(StrictModel):
    """Element-wise closeness: |eager - compiled| <= atol + rtol * |eager|.

    At low precision an element where a subtraction cancels keeps the rounding of its operands,
    which are as large as the tensor's largest: up to `error_rate` of a tensor's elements may
    instead differ by atol + rtol * (the tensor's largest magnitude)."""

    atol: float = Field(ge=0, description="absolute tolerance")
    rtol: float = Field(ge=0, description="relative tolerance, of eager's value")
    error_rate: float = Field(0.0, ge=0, le=1, description="fraction of a tensor's elements allowed to differ at "
                              "the tensor's scale (bf16/fp16 rounding where a subtraction cancels)")


# Compiled vs eager, per param dtype. float64 keeps float32's: compiled steps compute their scalars
# (bias corrections from a float32 step) in float32, 7e-6 relative on Adam's float64 params (torch 2.13
# CPU). bf16 and fp16: inductor keeps a fused step's intermediates in float32 where eager rounds after
# every op, and the state carries the difference into the next step: on torch 2.13 CPU the torch.optim
# optimizers' bf16 params and state differ by up to 6 ulps after 6 steps (ASGD), 4 eps relative, in up
# to 20% of a tensor's elements (AdamW's 10-element bias), those at the tensor's scale.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(atol=1e-5, rtol=1.3e-6),
    "float64": Tolerance(atol=1e-5, rtol=1.3e-6),
    "bfloat16": Tolerance(atol=1e-5, rtol=3.2e-2, error_rate=0.25),
    "float16": Tolerance(atol=1e-5, rtol=4e-3, error_rate=0.25),
}


def _per_dtype(value: Any) -> Any:
    """A bare tolerance is float32's (what `tolerance` always meant); a mapping names dtypes."""
    if isinstance(value, dict) and value and not set(value) & set(DEFAULT_TOLERANCES):
        return {"float32": value}
    return value


Tolerances = dict[Dtype, Tolerance]


def check_torch_version(version: Any, what: str) -> None:
    if not isinstance(version, str):
        raise ValueError(f"quote torch versions: '{version}' (YAML reads {version} as a number)")
    if not TORCH_VERSION.match(version):
        raise ValueError(f"{what} like '2.13', got {version!r}")



class Rule(StrictModel):
    """Selects generated tests by case-id glob, devices, checks and torch versions; a reason is required."""

    cases: str = Field("*", description="fnmatch pattern over case ids, e.g. '*-tensor_lr-*'")
    devices: list[Device] | None = Field(None, description="devices the rule holds on (default: every one)")
    dtypes: list[Dtype] | None = Field(None, description="param dtypes the rule holds at")
    checks: list[str] | None = Field(None, description="checks the rule holds for (default: every one)")
    torch: list[Any] | None = Field(None, description="torch versions the rule holds for, e.g. ['2.11'] (a torch bug fixed later)")
    reason: str = Field(min_length=1, description="why: shown in the skip or xfail, and required")

    @field_validator("torch")
    @classmethod
    def _versions(cls, versions: list[Any] | None) -> list[Any] | None:
        for version in versions or ():
            check_torch_version(version, "torch versions")
        return versions


class XfailRule(Rule):
    """An expected failure; with `match`, the failure it expects, so that another one is a red."""

    match: str | None = Field(None, description="a regular expression (re.search) the failure's text must contain: a "
                              "failure that does not is a red naming the rule and what failed instead")

    @field_validator("match")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class GridAxis(StrictModel):
    """One flag crossed with every case; `devices` limits where it varies."""

    values: list[Any] = Field(min_length=1, description="the kwarg's values; a bare list is this")
    devices: list[Device] | None = Field(None, description="devices where the kwarg varies (elsewhere: its first value)")


class CaseSpec(StrictModel):
    """A named optimizer configuration, like PyTorch's OptimizerInput."""

    name: str = Field(pattern=NAME, description="the case's name, in its test ids")
    kwargs: dict[str, Any] = Field({}, description="kwargs over the spec's; {tensor: x} makes a tensor on the case's device")
    schedulers: bool | list[str] = Field(
        False, description="true: one variant per spec scheduler; or a list of scheduler names"
    )
    devices: list[Device] | None = Field(None, description="devices of this case (default: the spec's)")
    closure: list[bool] | None = Field(None, description="closure variants of this case (default: the spec's)")
    dtypes: list[Dtype] | None = Field(None, min_length=1, description="param dtypes of this case (default: the spec's)")
    checks: list[str] | None = Field(None, description="checks of this case (default: the spec's `checks`)")
    steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="steps of this case (default: the spec's)")
    tolerance: Tolerances | None = Field(None, description="per dtype, over the spec's; a bare {atol, rtol} is float32's")

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance_shorthand(cls, value: Any) -> Any:
        return _per_dtype(value)


class DistributedSpec(StrictModel):
    """The distributed checks: a whole train step compiled in one process vs DDP (and ZeRO) on N ranks."""

    cases: list[str] | None = Field(
        None, description="names of the cases to run on N ranks, with their scheduler variants (default: the first case)"
    )
    world_size: int = Field(2, ge=2, le=64, description="ranks (processes on gloo)")
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


class ParamGroup(BaseModel):
    """One param group: the params it selects (all selectors must hold; none: every param no other
    group takes) and, as its other keys, the group's own options (e.g. `use_muon: true`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    names: list[str] | None = Field(None, description="fnmatch globs over the model's param names, e.g. '*.weight'")
    ndim: list[int] | None = Field(None, description="param dimensions, e.g. 2 or [2, 3, 4]")
    min_ndim: int | None = Field(None, ge=0, le=64, description="at least this many dimensions (2: matrices, as Muon wants)")
    argument: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the constructor argument that "
                                 "takes this group's params (e.g. muon_params), for constructors that take params in "
                                 "several arguments; then every group names one")

    @field_validator("names", "ndim", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, int)) and not isinstance(value, bool) else value

    @property
    def options(self) -> dict[str, Any]:
        """The group's own hyperparameters: its keys other than the selectors."""
        return dict(self.model_extra or {})

    @property
    def selects_rest(self) -> bool:
        return self.names is None and self.ndim is None and self.min_ndim is None


ParamsForm = Literal["list", "named", "model", "wrapped"] | list[ParamGroup]


PROFILES = ("ci", "dev", "nightly")


def _examples(value: Any) -> Any:
    """A bare count is the dev profile's; a mapping gives counts per Hypothesis profile."""
    return {"dev": value} if isinstance(value, int) and not isinstance(value, bool) else value


class FuzzProperty(StrictModel):
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
    steps: int = Field(2, ge=1, le=MAX_STEPS, description="steps per example")
    max_params: int = Field(4, ge=1, le=64, description="params per example, at most")
    max_dims: int = Field(3, ge=0, le=6, description="dimensions per param, at most")
    max_side: int = Field(4, ge=1, le=16, description="size of each dimension, at most")


class FuzzInBackward(FuzzProperty):
    """In-backward vs the normally stepped reference on fuzzed MLPs, tied and untied."""

    max_depth: int = Field(3, ge=2, le=8, description="Linear layers per MLP, at most")
    max_width: int = Field(6, ge=1, le=256, description="features per layer, at most")


class FuzzShapes(FuzzProperty):
    """An eager metamorphic property over fuzzed params (0-d, one-element, empty, views)."""

    steps: int = Field(3, ge=1, le=MAX_STEPS, description="steps per example")
    max_params: int = Field(4, ge=1, le=64, description="params per example, at most")
    min_dims: int = Field(0, ge=0, le=6, description="e.g. 2 for optimizers of matrices only (Muon)")
    max_dims: int = Field(3, ge=0, le=6, description="dimensions per param, at most")
    max_side: int = Field(4, ge=1, le=16, description="size of each dimension, at most")
    allow_empty: bool = Field(True, description="draw params with a 0 side (false: an optimizer that cannot step them)")
    allow_views: bool = Field(True, description="draw non-contiguous params, transposed and strided views (false: an "
                              "optimizer that refuses them, as one stepping raw pointers does)")

    @model_validator(mode="after")
    def _dims(self) -> FuzzShapes:
        if self.min_dims > self.max_dims:
            raise ValueError(f"min_dims {self.min_dims} is above max_dims {self.max_dims}")
        return self


class FuzzMaximize(FuzzShapes):
    """maximize=True on grad g equals maximize=False on -g."""

    state: bool = Field(True, description="compare the state too (false: an optimizer that keeps it sign-flipped)")


class FuzzDtypes(FuzzShapes):
    """Params and state keep their dtype and device."""

    dtypes: list[Dtype] = Field(["bfloat16", "float64"], min_length=1, description="tried in this order")


class FuzzSpec(StrictModel):
    """Hypothesis properties of this optimizer; each draws the spec's plain cases.

    parity and in_backward compare the compiled or in-backward run with eager; the others are
    metamorphic properties of the eager step, which catch what eager and compiled share.
    """

    parity: FuzzParity | None = Field(None, description="compiled vs eager step on fuzzed param shapes and views")
    in_backward: FuzzInBackward | None = Field(None, description="in-backward vs normal stepping on fuzzed, tied MLPs")
    elementwise: FuzzShapes | None = Field(
        None, description="declare only for optimizers whose update of an element depends on that element alone "
        "(Adam, SGD, Lion; not Shampoo, Muon, Adafactor): layout, splitting and order do not change updates")
    maximize: FuzzMaximize | None = Field(None, description="the constructor must take `maximize`")
    dtypes: FuzzDtypes | None = Field(None, description="params and state keep their dtype and device")
    determinism: FuzzShapes | None = Field(None, description="two runs with one seed are bitwise equal")
    zero_lr: FuzzShapes | None = Field(
        None, description="lr=0 leaves params bitwise unchanged; not for optimizers whose decay ignores lr")


class Spec(StrictModel):
    """One optimizer's test matrix."""

    optimizer: str = Field(description="import path: 'torch.optim.Adam' or 'mypkg.optim:Lion'")
    name: str | None = Field(None, pattern=NAME, description="id prefix; default: class name, lowercased")
    kwargs: dict[str, Any] = Field({}, description="base kwargs, under each case's kwargs")
    model: str = Field(
        "pytest_optimtest.models:two_linear",
        description="model factory by import path, called as factory(device=...)",
    )
    params: ParamsForm = Field(
        "list", description="how the constructor gets the model's params: list (model.parameters()), named "
        "(model.named_parameters()), model (the module itself), a list of param groups selected by name or shape, or "
        "wrapped (none of its own: a wrapper such as Lookahead gets them through the base optimizer it wraps, a kwarg "
        "given as {optimizer: ..., kwargs: ...})")
    backward: Backward = Field(
        "plain", description="how a closure makes the grads its step reads: plain, loss.backward() (torch.optim's protocol); "
        "create_graph, loss.backward(create_graph=True), for a step that differentiates p.grad (AdaHessian's and Sophia-H's "
        "Hessian estimates); by_step, no backward: the closure returns the loss and the step differentiates it (psgd's "
        "Kron, OPTAMI's DampedNewton). Other than plain, every run steps with a closure (the spec's `closure` is [true])")
    cases: list[CaseSpec] = Field([CaseSpec(name="default")], min_length=1, description="named configurations, "
                                  "like PyTorch's OptimizerInput (default: one case, 'default')")
    grid: dict[str, GridAxis] = Field({}, description="kwarg -> values crossed with every case, e.g. {foreach: [false, true]}")
    schedulers: dict[str, dict[str, Any]] = Field(
        {}, description="LR scheduler name (torch.optim.lr_scheduler or import path) -> kwargs"
    )
    devices: list[Device] = Field(["cpu"], min_length=1, description="devices to generate cases for (those this "
                                  "machine lacks are not generated)")
    closure: list[bool] = Field([False], min_length=1, description="run each case without/with a closure")
    steps: int = Field(2, ge=1, le=MAX_STEPS, description="steps of the once-per-optimizer checks; parity compares after at "
                       "least this many (its run is the warm-up and the recompile steady steps)")
    data: Literal["random", "ones"] = Field(
        "random", description="random: seeded randn input, squared loss; ones: PyTorch's torch.ones, sum loss"
    )
    seed: int = Field(0, ge=0, lt=2**63, description="torch's seed for the model, inputs and grads")
    dtypes: list[Dtype] = Field(["float32"], min_length=1, description="param dtypes: every case runs at each, "
                                "the dtype in its id (float32 left out)")
    tolerance: Tolerances = Field({}, description="per param dtype, over DEFAULT_TOLERANCES; a bare {atol, rtol} "
                                  "is float32's")
    min_movement: float = Field(
        10.0, gt=0, description="params must move this many tolerances, else the comparison is vacuous"
    )
    strict: bool = Field(False, description="vacuous items (nothing moved, the run diverged) fail instead of skipping, "
                         "as --optim-strict does for every spec")
    fallback_random: bool = Field(False, description="compile with inductor's fallback_random (RNG-drawing optimizers)")
    recompile_limit: int | None = Field(
        None, ge=1, le=100_000, description="dynamo's recompile limit for every run (torch's default: 8), where the "
        "optimizer's own torch.compile needs more and its users raise torch._dynamo.config.recompile_limit (Dion's "
        "training script sets 100)")
    grad_mode: Literal["no_grad", "enabled"] = Field(
        "no_grad", description="the grad mode steps run under: no_grad, as PyTorch's compiled-optimizer tests step; "
        "enabled, as a training loop steps, for a step that runs autograd itself (an inner optimizer's backward)")
    setup: str | None = Field(None, description="import path of a callable run on each optimizer the checks build, "
                              "right after construction: setup(optimizer) (e.g. schedule-free's optimizer.train())")
    timeout_s: float = Field(900, gt=0, le=86400, description="a case's check still running after this many seconds fails "
                             "as timed out, with the stack where it hung (--optim-timeout overrides it)")
    requires: list[str] = Field([], description="modules the spec needs (e.g. the optimizer's package), or "
                                "'module:Name' for a name the installed version must have ('torch.optim:Muon'): when one "
                                "is missing, the spec's tests are skipped with that reason instead of failing")
    distributed: DistributedSpec = Field(DistributedSpec(), description="the distributed and zero checks' settings")
    fuzz: FuzzSpec | None = Field(None, description="Hypothesis properties: parity, in_backward")
    checks: list[str] | None = Field(
        None, description="checks to run (default: every registered check); each applies to the cases it can say something about"
    )
    skip: list[Rule] = Field([], description="tests not to run, each rule with its reason")
    xfail: list[XfailRule] = Field([], description="tests expected to fail (strict: a pass is red), each rule with its "
                                   "reason, and with `match` the failure it expects")

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance_shorthand(cls, value: Any) -> Any:
        return _per_dtype(value)

    @model_validator(mode="before")
    @classmethod
    def _closure_for_backward(cls, value: Any) -> Any:
        """A spec whose step differentiates its closure's graph steps with a closure unless it says otherwise."""
        if isinstance(value, dict) and value.get("backward", "plain") != "plain" and "closure" not in value:
            return {**value, "closure": [True]}
        return value

    @field_validator("cases")
    @classmethod
    def _case_closures(cls, cases: list[CaseSpec], info: ValidationInfo) -> list[CaseSpec]:
        for i, case in enumerate(cases):
            if case.closure is not None and False in case.closure:
                _closure_needed(info.data.get("backward", "plain"), f"cases[{i}].closure ({case.name})")
        return cases

    @field_validator("closure")
    @classmethod
    def _spec_closure(cls, closure: list[bool], info: ValidationInfo) -> list[bool]:
        if False in closure:
            _closure_needed(info.data.get("backward", "plain"), "closure")
        return closure

    @field_validator("grid", mode="before")
    @classmethod
    def _grid_shorthand(cls, grid: Any) -> Any:
        if isinstance(grid, dict):
            return {k: {"values": v} if isinstance(v, list) else v for k, v in grid.items()}
        return grid

    @field_validator("params")
    @classmethod
    def _groups(cls, params: Any) -> Any:
        if isinstance(params, list):
            if not params:
                raise ValueError("give at least one param group, or one of list, named, model")
            if sum(group.selects_rest for group in params) > 1:
                raise ValueError("only one group may leave out names, ndim and min_ndim (it takes the params no other group takes)")
            for group in params:
                if "params" in group.options:
                    raise ValueError("a group selects its params with names, ndim or min_ndim, not 'params'")
            arguments = [group.argument is not None for group in params]
            if any(arguments) and not all(arguments):
                raise ValueError("either every group names its constructor `argument` or none does")
        return params


HOOK_KINDS = ("pre_fw", "post_fw", "pre_bw", "post_bw")


class HookEventSpec(StrictModel):
    """One expected ModTracker event; shorthand: [event, module, in_parents, is_bw]."""

    event: str = Field(pattern=r"^(pre_fw|post_fw|pre_bw|post_bw|mark:.+)$",
                       description="a ModTracker user hook, or 'mark:<label>' recorded by the model itself")
    module: str | None = Field(description="fully qualified name, e.g. 'Mod.b.nest'; null once the module is deleted")
    in_parents: bool = Field(description="whether the module is in tracker.parents at the event")
    is_bw: bool = Field(description="tracker.is_bw at the event")
    parents: list[str] | None = Field(None, description="the whole tracker.parents set at that moment, when given")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 4:
                raise ValueError(f"an event list is [event, module, in_parents, is_bw], got {len(value)} items")
            return dict(zip(("event", "module", "in_parents", "is_bw"), value))
        return value


class AfterBackward(StrictModel):
    """The tracker's state right after backward, still inside it."""

    is_bw: bool = Field(False, description="tracker.is_bw")
    parents: list[str] = Field(["Global"], description="tracker.parents")


class HookOrderSpec(StrictModel):
    """A ModTracker hook-order test: a model, its input, and the events ModTracker must report."""

    kind: Literal["hook_order"] = Field(description="marks a hook-order spec")
    name: str = Field(pattern=NAME, description="the test id")
    model: str = Field(description="import path of a module class or factory")
    model_kwargs: dict[str, Any] = Field({}, description="kwargs of the model's constructor")
    inputs: str = Field(description="import path of a zero-argument callable returning the input (a tuple is unpacked)")
    iterations: int = Field(1, ge=1, le=MAX_STEPS, description="forward+backward passes, all recorded")
    backward: bool = Field(True, description="run backward after each forward")
    drop_model_before_backward: bool = Field(False, description="delete the model between forward and backward")
    expected: Literal["derive"] | list[HookEventSpec] | dict[str, list[HookEventSpec]] = Field(
        "derive", description="'derive' (from the module tree and the forward call order), the events, "
        "or events keyed by torch major.minor ('*' for any other version)"
    )
    after_backward: AfterBackward | None = Field(None, description="the tracker's state right after backward, checked when given")
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

    kind: Literal["hook_order_fuzz"] = Field(description="marks a hook-order fuzz spec")
    name: str = Field(pattern=NAME, description="the test id")
    max_leaves: int = Field(6, ge=1, le=64, description="Linear leaves per tree, at most")
    max_children: int = Field(3, ge=1, le=16, description="children per container, at most")


SectionModels = tuple[tuple[str, type], ...]  # (spec key, pydantic model) of each check-owned section


@functools.lru_cache(maxsize=16)
def spec_model(sections: SectionModels = ()) -> type[Spec]:
    """`Spec` with an optional top-level field per check-owned section (absent: None, and the
    check gets its model's defaults)."""
    if not sections:
        return Spec
    fields: dict[str, Any] = {key: (model | None, Field(None, description=(model.__doc__ or "").strip() or None))
                              for key, model in sections}
    return create_model("Spec", __base__=Spec, **fields)


def json_schema(sections: SectionModels = ()) -> dict[str, Any]:
    """The JSON Schema of a spec file, with these check-owned sections, for editor completion."""
    kinds: Any = spec_model(sections) | HookOrderSpec | HookOrderFuzzSpec  # a union made at run time
    schema = TypeAdapter(kinds).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-optimtest spec"
    return schema
