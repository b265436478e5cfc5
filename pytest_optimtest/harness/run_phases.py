"""The phases of a case's shared compiled run, as a spec declares them under `recompile:`: the
warm-up, the steady steps and the perturbations. The recompile check owns this section and
judges it; the compiled run (and so parity) takes its warm-up and steady steps from it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ..spec.kernel_table import KernelTable, kernel_table_shorthand
from ..spec.releases import ReleaseCounts, for_release
from ..spec.schema import MAX_COMPILES, MAX_STEPS, StrictModel

SECTION_KEY = "recompile"


PERTURBATIONS = ("set_lr", "replace_state", "clear_state", "add_param_group", "set_group")

class Perturbation(StrictModel):
    """One change made to the optimizer between compiled steps, and the recompiles it must cause.

    Exactly one of: set_lr (every group's lr becomes this Python float), replace_state (that
    state tensor of the first param is replaced by an equal copy: proves a guard on identity),
    clear_state, add_param_group (kwargs of a new group holding one new param), set_group
    (hyperparameters written into every group, e.g. {maximize: true}).
    """

    set_lr: float | None = Field(None, description="every group's lr becomes this Python float")
    replace_state: str | None = Field(None, description="this state key of the first param is replaced by an equal "
                                      "copy (proves a guard on the tensor's identity)")
    clear_state: bool = Field(False, description="the optimizer's state is emptied")
    add_param_group: dict[str, Any] | None = Field(None, description="kwargs of a new group holding one new param")
    set_group: dict[str, Any] | None = Field(None, description="hyperparameters written into every group, e.g. {maximize: true}")
    recompiles: ReleaseCounts | None = Field(
        1, description="recompiles the next compiled step must make, or counts keyed by torch release ('2.11') with '*' "
        "for the others; null: observe and report only (the implicit default perturbation)")
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

    def declared_recompiles(self, version: str) -> int | None:
        """The recompiles declared for that torch release (None: observe and report only)."""
        return for_release(self.recompiles, version, None)

    @field_validator("kernel_counts", mode="before")
    @classmethod
    def _counts_shorthand(cls, counts: Any) -> Any:
        return kernel_table_shorthand(counts)


SETTLE_STEPS = 4
STEADY_STEPS = 4  # the recompile section's default steady steps


class Warmup(StrictModel):
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


class RecompileSpec(StrictModel):
    """What the recompile check expects of the compiled step."""

    warmup: Warmup = Field(Warmup(), description="steps before the steady state, and the compiles they may make")
    steps: int = Field(STEADY_STEPS, ge=1, le=MAX_STEPS, description="steady steps after warm-up; none may recompile")
    perturbations: list[Perturbation] = Field(
        [Perturbation(clear_state=True, recompiles=None)],
        description="applied in order; undeclared: clear_state, its recompiles observed and reported, not assumed "
        "(an optimizer without state does not recompile); --optim-update-expected writes what it saw")
    schedulers: dict[str, int] = Field(
        {}, description="scheduler name -> recompiles its steps may cause over the steady steps (default 0)"
    )
    load_state_dict: int = Field(1, ge=0, le=MAX_COMPILES, description="recompiles a load_state_dict into the compiled optimizer may cause")


def run_phases(case: Any) -> RecompileSpec:
    """The case's `recompile` section (its defaults when the case carries none)."""
    return case.sections.get(SECTION_KEY) or RecompileSpec()
