"""Law `group_hyperparameters`: every hyperparameter is a param group's own, not only lr. For each
key of the optimizer's `defaults` that its constructor takes (weight_decay, betas, eps, momentum,
...), moved to a value that visibly changes a run: an optimizer with two groups that differ in it
steps each group as two optimizers, one a group, do. A step that reads the constructor's value
decays the biases a user excluded, and ignores every per-layer setting."""

from __future__ import annotations

from typing import Any

import torch

from ...harness.blame import blame
from ...harness.compare import listed, value_differences
from ...harness.hyperparameter_runs import FIRST, SECOND, HyperparameterProbe, Moved
from ...harness.ladder import MOVES
from ..base import Blocked, Check, NotApplicable, Vacuous, Verdict
from .determinism import require_deterministic
from .section import SECTION_KEY, Laws, law_steps, law_tolerance, laws_of, observed, require_on


def check_group_hyperparameters(case: Any, runs: Any) -> Verdict:
    require_on(case, "group_hyperparameters")
    require_deterministic(case, runs)
    runs.two_groups(case, law_steps(case), laws_of(case).min_ndim)  # two groups must step at all: raised, this red
    probe = hyperparameters(case, runs)
    found = {m.key: group_problems(case, runs, m) for m in probe.moved}
    broken = {key: problems for key, (problems, _) in found.items() if problems}
    if broken:
        if observed(case, runs).run.torch_rng_used:
            raise Vacuous(f"{case.id}: vacuous: not comparable: the step draws from torch's RNG, and one optimizer over two "
                          f"groups draws in another order than one a group ({next(iter(broken.values()))[0]})")
        shown = [f"{m.key} (group 1's {m.value!r}, group 0's {m.default!r}): {broken[m.key][0]}"
                 for m in probe.moved if m.key in broken]
        raise AssertionError(f"{case.id}: law group_hyperparameters broken: a param group's own hyperparameters must be "
                             f"the ones its params step with; two groups differing in one must step as two optimizers, "
                             f"one a group, over {probe.steps} steps; they do not for:" + listed(shown))
    coupled = [key for key, (_, against_equal) in found.items() if against_equal]
    return Verdict(f"{len(probe.moved)} hyperparameters honoured per group over {probe.steps} steps: "
                   + ", ".join(m.key for m in probe.moved) + (" (groups coupled: against equal groups)" if coupled else ""),
                   {**evidence(probe), "coupled_groups": bool(coupled)})


def require_two_groups(case: Any, runs: Any) -> None:
    """A law over groups stands on the optimizer stepping two param groups; where that raises, law
    group_hyperparameters' item is the red and this one is blocked by it (unless that law is off)."""
    if "group_hyperparameters" in laws_of(case).off:
        return
    try:
        runs.two_groups(case, law_steps(case), laws_of(case).min_ndim)
    except NotApplicable:
        return  # refuses param groups: the law says so itself
    except Exception as exc:
        raise Blocked(f"{case.id}: blocked by law_group_hyperparameters: stepping two param groups raised "
                      f"{type(exc).__name__}: {exc}") from exc


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


def group_problems(case: Any, cache: Any, moved: Moved) -> tuple[list[str], bool]:
    """(where the two-group run leaves the one-group-an-optimizer runs, first step first; whether the
    groups were judged against equal groups). An optimizer whose groups are coupled (equal groups
    already step unlike two optimizers: a step count, a norm or a schedule shared by all) is held to
    less: its moved group must step unlike the equal groups'."""
    steps, tol = law_steps(case), law_tolerance(case)
    try:
        runs = cache.group_runs(case, moved, steps, laws_of(case).min_ndim)
    except NotApplicable:
        raise
    except Exception as exc:  # equal groups step (require_two_groups): this value in one group is what raised
        found = blame(exc)
        return [f"two groups, group 1's {moved.key} = {moved.value!r}, raised {type(exc).__name__}: {exc}"
                + (f" at {found.where}" if found.where else "") + f" ({found.owner}'s doing; one optimizer with that value "
                "for all params did not)"], False
    # Coupled: equal groups step unlike two optimizers, or group 1 steps otherwise when group 0's grads change.
    # The second tells a norm over every param (SAM's) at bf16, where the first can stay under a tolerance.
    coupled = _first_difference(runs.equal, runs.first, runs.second_default, steps, tol) or any(
        not torch.equal(runs.equal.params_after(s)[n], runs.equal_other_grads.params_after(s)[n])
        for s in range(1, steps + 1) for n in SECOND)
    if coupled:
        same = all(torch.equal(runs.grouped.params_after(s)[n], runs.equal.params_after(s)[n])
                   for s in range(1, steps + 1) for n in SECOND)
        return [f"group 1 stepped exactly as with {moved.default!r} (its groups are coupled, so this is against equal "
                "groups: the step does not read the group's own value)"] if same else [], True
    problem = _first_difference(runs.grouped, runs.first, runs.second, steps, tol)
    return [problem] if problem else [], False


def _first_difference(together: Any, first: Any, second: Any, steps: int, tol: Any) -> str | None:
    for step in range(1, steps + 1):
        snap = together.snapshots[step]
        problems = []
        for names, alone, label in ((FIRST, first.snapshots[step], "group 0"), (SECOND, second.snapshots[step], "group 1")):
            problems += value_differences(f"{label} param", {n: alone.params[n] for n in names},
                                          {n: snap.params[n] for n in names}, tol, ("alone", "grouped"))
            problems += value_differences(f"{label} state", {n: alone.state.get(n) for n in names},
                                          {n: snap.state.get(n) for n in names}, tol, ("alone", "grouped"))
        if problems:
            return f"after step {step}: {problems[0]}"
    return None


def evidence(probe: HyperparameterProbe) -> dict[str, Any]:
    return {"steps": probe.steps, "varied": {m.key: {"from": _plain(m.default), "to": _plain(m.value),
                                                      "moved_tolerances": round(m.moved_tolerances, 3)} for m in probe.moved},
            "left_out": probe.left_out}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


LAW_GROUP_HYPERPARAMETERS = Check("law_group_hyperparameters", check_group_hyperparameters,
                                  "every hyperparameter is its group's own", "primary", section=Laws,
                                  section_key=SECTION_KEY, rungs=MOVES,
                                  proves=("Each hyperparameter key of `defaults` the constructor takes, moved in one group, makes two groups step as "
                                          "two optimizers (coupled groups: the moved group steps unlike equal groups). Evidence: keys varied, keys "
                                          "left out and why."),
                                  red=("A hyperparameter read from the constructor or the first group, not the param's own: the optimizer's "
                                       "(torch.optim's Adagrad reads `initial_accumulator_value` so: torch's)."))
