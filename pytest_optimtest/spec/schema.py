"""The spec format, as strict pydantic models. `python -m pytest_optimtest schema` prints it."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Device = Literal["cpu", "cuda", "mps"]
NAME = r"^[a-z0-9][a-z0-9_]*$"
TORCH_VERSION = re.compile(r"^\d+\.\d+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(_Strict):
    """Element-wise closeness: |eager - compiled| <= atol + rtol * |eager|."""

    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class Rule(_Strict):
    """Selects generated tests by case-id glob, devices and checks; a reason is required."""

    cases: str = Field("*", description="fnmatch pattern over case ids, e.g. '*-tensor_lr-*'")
    devices: list[Device] | None = None
    checks: list[str] | None = None
    reason: str = Field(min_length=1)


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
    steps: int | None = Field(None, ge=1)
    tolerance: Tolerance | None = None


class ParamGroupSpec(_Strict):
    """Params by name: a glob over unique names, or an exact name (an alias of a tied param too)."""

    params: list[str] = Field(min_length=1)
    kwargs: dict[str, Any] = {}


class InBackwardSpec(_Strict):
    """How the in-backward checks build and compare their models."""

    steps: int = Field(6, ge=1)
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
    steps: int = Field(2, ge=1)
    data: Literal["random", "ones"] = Field(
        "random", description="random: seeded randn input, squared loss; ones: PyTorch's torch.ones, sum loss"
    )
    seed: int = 0
    tolerance: Tolerance = Tolerance(atol=1e-5, rtol=1.3e-6)
    min_movement: float = Field(
        10.0, gt=0, description="params must move this many tolerances, else the comparison is vacuous"
    )
    fallback_random: bool = Field(False, description="compile with inductor's fallback_random (RNG-drawing optimizers)")
    kernel_counts: dict[str, dict[Device, dict[str, int]]] = Field(
        {}, description="torch major.minor -> device -> {case-id glob or '*': generated kernel count}"
    )
    in_backward: InBackwardSpec = InBackwardSpec()
    checks: list[str] = Field(
        ["parity", "kernel_count", "in_backward", "in_backward_tied", "in_backward_two_optimizers", "in_backward_no_hook"],
        description="checks to run; each applies to the cases it can say something about",
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
        if not isinstance(counts, dict):
            return counts
        for version, per_device in counts.items():
            if not isinstance(version, str):
                raise ValueError(f"quote torch versions: '{version}' (YAML reads {version} as a number)")
            if not TORCH_VERSION.match(version):
                raise ValueError(f"kernel_counts keys are torch versions like '2.13', got {version!r}")
            if isinstance(per_device, dict):
                counts[version] = {d: {"*": n} if isinstance(n, int) else n for d, n in per_device.items()}
        return counts


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file, for editor completion."""
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pytest-optimtest spec"
    return schema
