"""Every hyperparameter the optimizer keeps in its param groups, each moved to a value that visibly
changes the run, and the runs issue 34's laws `group_hyperparameters` and
`changed_hyperparameters` judge: two groups that differ in it against one optimizer a group, and
the key assigned between steps against a run that keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..spec.schema import Tolerance
from ..spec.values import base_holding, resolve, takes_keyword
from .builder import make_optimizer
from .compare import max_movement
from .isolation import isolated_case
from .law_runs import LawTrajectory, law_grads, law_params, law_trajectory, lr_probes, lr_scaled
from .snapshot import group_settings
from .vacuity import NotApplicable

FIRST, SECOND = ["weight", "bias"], ["sometimes", "frozen"]  # the law params in two groups, every grad present
# Keys that pick an implementation or are another law's (lr: law_param_groups), not a hyperparameter to vary.
NOT_HYPERPARAMETERS = {"params", "lr", "foreach", "fused", "capturable", "differentiable", "param_names", "initial_lr"}
FACTORS = (0.5, 2.0, 1e3, 1e6)  # a nonzero number is tried at these multiples, in turn, until the run changes


@dataclass
class Moved:
    """A hyperparameter and the value that visibly changes a one-group run."""

    key: str
    default: Any
    value: Any
    moved_tolerances: float  # how far the changed run ends from the default one
    lr_factor: float = 1.0  # the multiple of the case's lr it was moved at (LR_PROBES: bf16 barely moves)


@dataclass
class HyperparameterProbe:
    """The case's hyperparameters: those moved visibly, and why each other one is left out."""

    moved: list[Moved] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    steps: int = 0


def candidates(value: Any) -> list[Any]:
    """Values to try in place of `value`: a flag flipped, an int stepped, a float scaled (or made
    nonzero), one element of a tuple of numbers moved; none for anything else."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):  # + 100: a step threshold (warm-up, start step) is only seen beyond the steps taken
        return [value + 1, value * 2, value + 100] if value else [1, 2, 100]
    if isinstance(value, float):
        return [value * f for f in FACTORS] if value else [0.1, 0.01]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [type(value)([*value[:i], c, *value[i + 1:]]) for i, v in enumerate(value) for c in candidates(v)[:2]]
    return []


def probe_hyperparameters(case: Any, steps: int, min_ndim: int, tol: Tolerance, floor: float) -> HyperparameterProbe:
    """For each key of the optimizer's `defaults` (less NOT_HYPERPARAMETERS) that its constructor
    takes: the first candidate whose one-group run, over SECOND, ends at least `floor` tolerances
    from the default run's."""
    optimizer_cls = resolve(case.optimizer)
    probe = HyperparameterProbe(steps=steps)
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, steps, params, scheduled=False)
        alone = {n: params[n] for n in SECOND}
        optimizer = make_optimizer(case, list(alone.items()))
        defaults = getattr(optimizer, "defaults", None)
        if not isinstance(defaults, dict):
            raise NotApplicable(f"{case.id}: {optimizer_cls.__qualname__} keeps no `defaults` dict: no hyperparameters to read")
        if case.params == "wrapped":  # its groups are its base's, which hold hyperparameters its own defaults lack
            defaults = {**group_settings(optimizer.param_groups[0]), **defaults}
        bases = {}
        for factor, scaled in lr_probes(case):
            try:
                bases[factor] = (scaled, law_trajectory(scaled, alone, grads))
            except Exception:  # a larger lr the optimizer refuses (or blows up at) is a probe that is not taken
                if factor == 1.0:
                    raise

        for key, default in defaults.items():
            if key in NOT_HYPERPARAMETERS:
                continue
            if not takes_keyword(optimizer_cls, key) and base_holding(optimizer_cls, case.kwargs, key) is None:
                probe.left_out[key] = "the constructor takes no such argument, so no one-group optimizer can hold another value"
                continue
            tried = candidates(default)
            if not tried:
                probe.left_out[key] = f"{type(default).__name__} {default!r} is not a number or a flag to move"
                continue
            found: tuple[Any, float] | str = ""
            for factor, (scaled, base) in bases.items():
                found = _first_visible(scaled, alone, grads, key, tried, base, tol, floor)
                if not isinstance(found, str):
                    probe.moved.append(Moved(key, default, found[0], found[1], factor))
                    break
            else:
                probe.left_out[key] = str(found) + f", up to {max(bases)}x the case's lr"
    return probe


def _first_visible(case: Any, alone: dict, grads: list, key: str, tried: list[Any], base: LawTrajectory,
                   tol: Tolerance, floor: float) -> tuple[Any, float] | str:
    seen = []
    for value in tried:
        try:
            run = law_trajectory(case, alone, grads, overrides={key: value})
        except Exception as exc:  # an invalid value for this optimizer (beta > 1, a flag needing another): the next one
            seen.append(f"{value!r}: {type(exc).__name__}")
            continue
        moved = max_movement(base.final, run.final, tol)
        if moved >= floor:
            return value, moved
        seen.append(f"{value!r}: {moved:.3g} tol")
    return f"no value tried changed a {len(grads)}-step run by {floor:g} tolerances ({'; '.join(seen)})"


@dataclass
class GroupRuns:
    """The runs group_hyperparameters compares for one moved key."""

    grouped: LawTrajectory  # FIRST with the case's kwargs, SECOND with the moved value, in one optimizer
    equal: LawTrajectory  # the same two groups, both with the case's kwargs
    first: LawTrajectory  # FIRST alone, the case's kwargs
    second: LawTrajectory  # SECOND alone, the moved value as a constructor argument
    second_default: LawTrajectory  # SECOND alone, the case's kwargs
    # the equal groups with FIRST's grads doubled: where SECOND then steps otherwise, the groups are coupled (a norm
    # over every param, SAM's), whatever the dtype's tolerance; a step that rounds stochastically is not
    equal_other_grads: LawTrajectory


def two_groups_run(case: Any, steps: int, min_ndim: int) -> LawTrajectory:
    """The case's optimizer over FIRST and SECOND as two groups with equal options: what every law
    over groups needs to step at all."""
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, steps, params, scheduled=False)
        return law_trajectory(case, {n: params[n] for n in FIRST + SECOND}, grads, groups=[(FIRST, {}), (SECOND, {})])


def grouped_and_alone(case: Any, moved: Moved, steps: int, min_ndim: int) -> GroupRuns:
    """The runs of GroupRuns, at the lr the key was moved at."""
    case = lr_scaled(case, moved.lr_factor)
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, steps, params, scheduled=False)
        pair = {n: params[n] for n in FIRST + SECOND}
        second = {n: params[n] for n in SECOND}
        return GroupRuns(
            grouped=law_trajectory(case, pair, grads, groups=[(FIRST, {}), (SECOND, {moved.key: _built(moved.value)})]),
            equal=law_trajectory(case, pair, grads, groups=[(FIRST, {}), (SECOND, {})]),
            first=law_trajectory(case, {n: params[n] for n in FIRST}, grads),
            second=law_trajectory(case, second, grads, overrides={moved.key: moved.value}),
            second_default=law_trajectory(case, second, grads),
            equal_other_grads=law_trajectory(case, pair, [{n: g * 2 if n in FIRST and g is not None else g for n, g in step.items()}
                                                          for step in grads], groups=[(FIRST, {}), (SECOND, {})]))


LATE = "frozen"  # the law param that, in a run with `late`, gets its first grad only after the change


def changed_between_steps(case: Any, moved: Moved, value: Any, at: int, steps: int, min_ndim: int,
                          late: bool = False) -> tuple[LawTrajectory, LawTrajectory]:
    """(the run that keeps the case's value, the run whose every group gets `value` after `at` steps).
    `late`: LATE has no grad before the change, so its state is made after it (an initial value
    such as an accumulator's start is only read then)."""
    case = lr_scaled(case, moved.lr_factor)
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, steps, params, scheduled=False)
        if late:
            grads = [{n: (None if n == LATE and index < at else g) for n, g in step.items()} for index, step in enumerate(grads)]
        pair = {n: params[n] for n in FIRST + SECOND}
        kept = law_trajectory(case, pair, grads)

        def assign(optimizer: Any, index: int, own: Any) -> None:
            if index == at:
                for group in optimizer.param_groups:
                    group[moved.key] = _built(value)

        changed = law_trajectory(case, pair, grads, before_step=assign)
    return kept, changed


def _built(value: Any) -> Any:
    return type(value)(value) if isinstance(value, (list, tuple)) else value

