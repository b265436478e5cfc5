"""The `laws` section: the laws a spec's author claims their optimizer obeys, and what every
law check reads of it."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from ...harness.compare import max_movement
from ...harness.law_runs import SECTION_KEY, law_grads, law_trajectory
from ...spec.context import SpecContext
from ...spec.errors import did_you_mean
from ...spec.schema import MAX_STEPS, NAME, StrictModel, Tolerance
from ...spec.values import base_holding, takes_keyword
from ..base import NotApplicable

# Laws of round two (issue 34): what every optimizer owes its users, so on unless the spec turns one
# off, with the reason, under `laws.off`.
ON_BY_DEFAULT = ("grads_untouched", "closure_loss", "add_param_group", "group_hyperparameters",
                 "changed_hyperparameters", "late_joiners", "bounded_state", "determinism", "hooks")


class Descent(StrictModel):
    """N closure steps on a convex least-squares problem lower its loss (raise it under maximize)."""

    steps: int = Field(20, ge=1, le=MAX_STEPS, description="closure steps; the loss after them must be below the first")


class Laws(StrictModel):
    """Laws the optimizer obeys, each its own item per spec and device (docs: laws)."""

    steps: int = Field(7, ge=1, le=MAX_STEPS, description="steps each law takes (--optim-horizon raises it)")
    equivalent: dict[str, list[dict[str, Any]]] = Field(
        {}, description="name -> kwargs variants that must give the same run, e.g. foreach: [{foreach: false}, "
        "{foreach: true}]; each over the first case's kwargs")
    untouched: bool = Field(False, description="a param whose grad is None does not move and gets no state")
    zero_grads: bool = Field(False, description="with every grad zero, from fresh state, no param moves (no decay)")
    param_groups: bool = Field(False, description="each group's own lr is used: an lr-0 group stays, a changed lr "
                               "changes that group's next update only")
    descent: bool | Descent = Field(False, description="closure steps on a convex problem lower the loss (raise it "
                                    "under maximize), with contiguous and non-contiguous params")
    complex: bool = Field(False, description="a complex param steps like its view_as_real twin")
    min_ndim: int = Field(0, ge=0, le=6, description="give the laws' params at least this many dimensions (2: Muon)")
    max_ndim: int | None = Field(None, ge=1, le=6, description="give the laws' params at most this many dimensions, "
                                 "leading ones merged (1: a step that takes vectors alone, ncg's LCG)")
    empty: bool = Field(True, description="include an empty param (false: an optimizer that cannot step one)")
    views: bool = Field(True, description="step a non-contiguous param beside a contiguous one where a law does "
                        "(descent); false: an optimizer that refuses views on purpose (raw pointers)")
    tolerance: Tolerance | None = Field(None, description="for the laws' comparisons; default: the case's")
    off: dict[str, str] = Field({}, description="laws that are on by default, turned off for this optimizer: "
                                "law -> why, e.g. {late_joiners: 'one step counter for all params, by design'}")

    @model_validator(mode="after")
    def _ndim_bounds(self) -> Laws:
        if self.max_ndim is not None and self.min_ndim > self.max_ndim:
            raise ValueError(f"min_ndim {self.min_ndim} is over max_ndim {self.max_ndim}: no param shape has both")
        if self.complex and self.max_ndim == 1:
            raise ValueError("complex: true with max_ndim: 1: a complex param's view_as_real twin has one more "
                             "dimension, so the law has no twin to step")
        return self

    @field_validator("off")
    @classmethod
    def _off(cls, laws: dict[str, str]) -> dict[str, str]:
        for name, reason in laws.items():
            if name not in ON_BY_DEFAULT:
                raise ValueError(f"no law {name!r} is on by default{did_you_mean(name, list(ON_BY_DEFAULT))}; "
                                 f"those are {', '.join(ON_BY_DEFAULT)}")
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"off[{name!r}] needs the reason it is off, as text")
        return laws

    @field_validator("equivalent")
    @classmethod
    def _variants(cls, sets: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        for name, variants in sets.items():
            if not re.match(NAME, name):
                raise ValueError(f"equivalence names are lowercase identifiers, got {name!r}")
            if len(variants) < 2:
                raise ValueError(f"equivalent[{name!r}] needs two or more kwargs variants to compare, got {len(variants)}")
        return sets

    @property
    def descent_steps(self) -> int | None:
        if self.descent is False:
            return None
        return self.descent.steps if isinstance(self.descent, Descent) else Descent().steps


def validate_laws(section: Laws, spec: SpecContext) -> None:
    """Each equivalence variant's kwargs are values the constructor takes; param_groups needs an lr."""
    for name, variants in section.equivalent.items():
        for index, kwargs in enumerate(variants):
            spec.check_values(kwargs, ("laws", "equivalent", name, index))
            for key in kwargs:
                if not takes_keyword(spec.optimizer, key):
                    raise spec.error(("laws", "equivalent", name, index, key),
                                     f"{spec.optimizer.__name__} takes no argument {key!r}")
    if section.param_groups and not takes_keyword(spec.optimizer, "lr") and base_holding(spec.optimizer, spec.spec.kwargs, "lr") is None:
        raise spec.error(("laws", "param_groups"), f"{spec.optimizer.__name__} takes no lr, so no group has one to honour")


def laws_of(case: Any) -> Laws:
    return case.sections.get(SECTION_KEY) or Laws()


def law_steps(case: Any) -> int:
    """The law's horizon: the section's steps, raised by the case's (--optim-horizon raises those)."""
    return max(laws_of(case).steps, case.steps)


# How often a comparing law may double its horizon to reach a measurable move (up to 8x its steps).
HORIZON_DOUBLINGS = 3
HORIZON_TRIED = f"up to {1 << HORIZON_DOUBLINGS}x as many steps tried"


def law_horizon(case: Any, params: dict, tol: Tolerance, names: list[str] | None = None,
                overrides: dict[str, Any] | None = None, scheduled: bool = False) -> tuple[int, float]:
    """The steps a comparing law runs: its horizon, doubled (at most three times) until `names`
    (default: every param), with a grad at every step (or per the laws' schedule), under the case's
    kwargs with `overrides`, move the case's min_movement tolerances. A slow optimizer at low
    precision (Adadelta at bf16 on CUDA moved 8.3 tolerances in 7 steps) then gives evidence instead
    of a vacuous skip; one that moves too little even then is vacuous at its horizon. Returns the
    steps and how far `names` moved over them, in tolerances."""
    steps, names = law_steps(case), names or list(params)
    at_horizon = None
    for horizons in ([steps], [steps << doubling for doubling in range(1, HORIZON_DOUBLINGS + 1)]):
        run = law_trajectory(case, params, law_grads(case, horizons[-1], params, scheduled), overrides)
        for horizon in horizons:
            after = run.params_after(horizon)
            moved = max_movement({n: run.initial[n] for n in names}, {n: after[n] for n in names}, tol)
            if moved >= case.min_movement:
                return horizon, moved
            at_horizon = moved if at_horizon is None else at_horizon
    return steps, at_horizon or 0.0


def law_tolerance(case: Any) -> Tolerance:
    return laws_of(case).tolerance or case.tolerance


def require_on(case: Any, law: str) -> None:
    """A law of round two is on unless the spec turns it off, with its reason, and where it can run."""
    reason = laws_of(case).off.get(law)
    if reason is not None:
        raise NotApplicable(f"{case.id}: law {law} is off in the spec: {reason}")
    require_own_params(case, law)


def require_own_params(case: Any, law: str) -> None:
    """The laws step params of their own; a constructor that takes a model or groups by name cannot have them."""
    form = case.params
    if form == "model" or (isinstance(form, list) and any(g.names is not None or g.argument for g in form)):
        raise NotApplicable(f"{case.id}: law {law} steps params of its own, and the optimizer takes its params by the "
                            "model's names or as the model (the spec's `params`)")


def observed(case: Any, runs: Any) -> Any:
    """The observed run the laws of round two share: twice the law's horizon (a warm-up, then a
    window the state must not grow in)."""
    return runs.observed(case, 2 * law_steps(case), laws_of(case).min_ndim, law_tolerance(case), case.min_movement)
