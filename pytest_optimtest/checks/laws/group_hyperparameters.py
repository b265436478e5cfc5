"""Law `group_hyperparameters`: every hyperparameter is a param group's own, not only lr. For each
key of the optimizer's `defaults` that its constructor takes (weight_decay, betas, eps, momentum,
...), moved to a value that visibly changes a run: an optimizer with two groups that differ in it
steps each group as two optimizers, one a group, do. A step that reads the constructor's value
decays the biases a user excluded, and ignores every per-layer setting."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed, value_differences
from ...harness.hyperparameter_runs import FIRST, SECOND, HyperparameterProbe, Moved, grouped_and_alone
from ...harness.ladder import MOVES
from ..base import Check, NotApplicable, Vacuous, Verdict
from .determinism import require_deterministic
from .section import SECTION_KEY, Laws, law_steps, law_tolerance, laws_of, require_on


def check_group_hyperparameters(case: Any, runs: Any) -> Verdict:
    require_on(case, "group_hyperparameters")
    require_deterministic(case, runs)
    probe = hyperparameters(case, runs)
    broken = {m.key: found for m in probe.moved if (found := group_problems(case, m))}
    if broken:
        shown = [f"{key} (group 1's {_value(m)}, group 0's {m.default!r}): {found[0]}"
                 for m in probe.moved if (key := m.key) in broken for found in [broken[key]]]
        raise AssertionError(f"{case.id}: law group_hyperparameters broken: a param group's own hyperparameters must be "
                             f"the ones its params step with; two groups differing in one must step as two optimizers, "
                             f"one a group, over {probe.steps} steps; they do not for:" + listed(shown))
    return Verdict(f"{len(probe.moved)} hyperparameters honoured per group over {probe.steps} steps: "
                   + ", ".join(m.key for m in probe.moved), evidence(probe))


def hyperparameters(case: Any, runs: Any) -> HyperparameterProbe:
    """The case's hyperparameters, moved; NotApplicable when it has none besides lr, Vacuous when
    none could be moved far enough to tell a group's value from another's."""
    steps, laws = law_steps(case), laws_of(case)
    probe = runs.hyperparameters(case, steps, laws.min_ndim, law_tolerance(case), case.min_movement)
    if not probe.moved and not probe.left_out:
        raise NotApplicable(f"{case.id}: the optimizer keeps no hyperparameter in its groups besides lr (law param_groups')")
    if not probe.moved:
        raise Vacuous(f"{case.id}: vacuous: no hyperparameter could be moved to change a {steps}-step run visibly:"
                      + listed([f"{k}: {why}" for k, why in probe.left_out.items()]))
    return probe


def group_problems(case: Any, moved: Moved) -> list[str]:
    """Where the two-group run leaves the one-group-an-optimizer runs, first step first."""
    steps, tol = law_steps(case), law_tolerance(case)
    grouped, first, second = grouped_and_alone(case, moved, steps, laws_of(case).min_ndim)
    for step in range(1, steps + 1):
        together = grouped.snapshots[step]
        problems = []
        for names, alone, label in ((FIRST, first.snapshots[step], "group 0"), (SECOND, second.snapshots[step], "group 1")):
            problems += value_differences(f"{label} param", {n: alone.params[n] for n in names},
                                          {n: together.params[n] for n in names}, tol, ("alone", "grouped"))
            problems += value_differences(f"{label} state", {n: alone.state.get(n) for n in names},
                                          {n: together.state.get(n) for n in names}, tol, ("alone", "grouped"))
        if problems:
            return [f"after step {step}: {problems[0]}"]
    return []


def evidence(probe: HyperparameterProbe) -> dict[str, Any]:
    return {"steps": probe.steps, "varied": {m.key: {"from": _plain(m.default), "to": _plain(m.value),
                                                      "moved_tolerances": round(m.moved_tolerances, 3)} for m in probe.moved},
            "left_out": probe.left_out}


def _value(moved: Moved) -> str:
    return repr(moved.value)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


LAW_GROUP_HYPERPARAMETERS = Check("law_group_hyperparameters", check_group_hyperparameters,
                                  "every hyperparameter is its group's own", "primary", section=Laws,
                                  section_key=SECTION_KEY, rungs=MOVES)
