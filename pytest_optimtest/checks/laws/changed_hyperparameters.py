"""Law `changed_hyperparameters`: a numeric hyperparameter assigned to every param group between
steps, as schedulers (momentum, betas) and users do, takes effect at the next steps. A step that
cached it at construction, or on its first step, ignores every such schedule silently."""

from __future__ import annotations

from typing import Any

import torch

from ...harness.compare import listed
from ...harness.hyperparameter_runs import LATE, candidates, changed_between_steps
from ...harness.ladder import MOVES
from ...harness.vacuity import Vacuous
from ..base import Blocked, Check, NotApplicable, Verdict
from .group_hyperparameters import group_problems, hyperparameters, require_two_groups
from .determinism import require_deterministic
from .section import SECTION_KEY, Laws, law_steps, laws_of, require_on


def check_changed_hyperparameters(case: Any, runs: Any) -> Verdict:
    require_on(case, "changed_hyperparameters")
    require_deterministic(case, runs)
    require_two_groups(case, runs)
    probe = hyperparameters(case, runs)
    at, min_ndim = law_steps(case), laws_of(case).min_ndim
    numeric = [m for m in probe.moved if not isinstance(m.default, bool)]
    if not numeric:
        raise NotApplicable(f"{case.id}: the optimizer's hyperparameters besides lr are flags, which no schedule changes")
    judged, blocked, problems, initial_values, idle = [], [], [], [], []
    for moved in numeric:
        if group_problems(case, runs, moved)[0]:  # law group_hyperparameters' red already says the group's value is not read
            blocked.append(moved.key)
            continue
        found = _taken(case, moved, at, min_ndim)
        if found == IDLE:
            idle.append(moved.key)
            continue
        judged.append(moved.key)
        if found == NEW_STATE:
            initial_values.append(moved.key)
        elif found is not None:
            problems.append(found)
    if problems:
        raise AssertionError(f"{case.id}: law changed_hyperparameters broken: a hyperparameter assigned to the param "
                             "groups between steps must change the next steps (schedulers and users assign them); "
                             "the step kept the old value:" + listed(problems))
    if not judged and idle:
        raise Vacuous(f"{case.id}: vacuous: steps {at + 1}-{2 * at} moved no param with the case's values, so whether "
                      f"{', '.join(idle)} assigned after step {at} take effect cannot be seen (momo's Polyak step size is "
                      "none where the loss is not positive)")
    if not judged:
        raise Blocked(f"{case.id}: blocked by law_group_hyperparameters: the groups' own {', '.join(blocked)} are not "
                      "what the step reads, which that law's red says")
    return Verdict(f"{', '.join(judged)} assigned after step {at} changed the next steps"
                   + (f" ({', '.join(initial_values)}: of state made after it, an initial value)" if initial_values else ""),
                   {"changed_after_step": at, "keys": judged, "read_when_state_is_made": initial_values,
                    "blocked_by_group_law": blocked})


NEW_STATE = "read when a param's state is made"
IDLE = "the steps after the change moved nothing"


def _taken(case: Any, moved: Any, at: int, min_ndim: int) -> str | None:
    """None where the assigned value changed the next steps; NEW_STATE where it changed only a param
    whose state was made after it (an initial value: an accumulator's start, a preconditioner's
    scale); IDLE where the run that kept the value moved nothing after the change; else the problem,
    in words."""
    tried = [moved.value, *(v for v in candidates(moved.default) if v != moved.value)]
    for value in tried:
        try:
            kept, changed = changed_between_steps(case, moved, value, at, 2 * at, min_ndim)
        except Exception as exc:  # noqa: BLE001 - an assignment the step cannot take is the finding
            return f"{moved.key} = {value!r} after step {at}: the next step raised {type(exc).__name__}: {exc}"
        if all(torch.equal(kept.params_after(at)[n], kept.params_after(2 * at)[n]) for n in kept.final):
            return IDLE  # a run that stood still: an ignored value and a read one look the same
        if _differs(kept, changed, at, list(kept.final)):
            return None
    for value in tried:
        try:
            kept, changed = changed_between_steps(case, moved, value, at, 2 * at, min_ndim, late=True)
        except Exception:  # noqa: BLE001 - params without a grad are law untouched's to judge
            break
        if _differs(kept, changed, at, [LATE]):
            return NEW_STATE
    return (f"{moved.key}: set to each of {', '.join(map(repr, tried))} in every group after step {at}, steps {at + 1}-"
            f"{2 * at} ran bit for bit as with {moved.default!r}, a param's state made after it included")


def _differs(kept: Any, changed: Any, at: int, names: list[str]) -> bool:
    return any(not torch.equal(kept.params_after(s)[n], changed.params_after(s)[n])
               for s in range(at + 1, 2 * at + 1) for n in names)


LAW_CHANGED_HYPERPARAMETERS = Check("law_changed_hyperparameters", check_changed_hyperparameters,
                                    "a hyperparameter assigned between steps takes effect", "primary", section=Laws,
                                    section_key=SECTION_KEY, rungs=MOVES,
                                    proves=("A numeric hyperparameter assigned to every group after step 7 changes steps 8-14 (a value read when a "
                                            "param's state is made passes where state made after the change takes it). Evidence: keys changed and how"
                                            " each was read."),
                                    red=("A value the next steps ignore (cached at construction) or cannot take (a KeyError for state the step never "
                                         "made)."))
