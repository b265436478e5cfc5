"""Law `param_groups`: each group's own hyperparameters are used. A group whose lr is zero does
not move while another does (unless the optimizer refuses lr 0 on purpose, with a `raise` or
`assert` of its own); and setting one group's lr, as every LR scheduler does, changes that
group's next update and only that one. An optimizer that reads the constructor's lr breaks
both, and then every scheduler silently does nothing."""

from __future__ import annotations

from typing import Any

import torch

from ...harness.blame import one_line, refused_on_purpose
from ...harness.compare import max_movement
from ...harness.isolation import isolated_case
from ...harness.law_runs import Groups, law_grads, law_params, law_trajectory
from ...spec.values import build_value, kwarg_value, resolve
from ...harness.ladder import MOVES
from ..base import Check, Vacuous, Verdict
from .section import SECTION_KEY, Laws, HORIZON_TRIED, law_horizon, law_tolerance, laws_of, require_own_params

FIRST, SECOND = ["weight", "bias"], ["sometimes", "frozen"]  # the law params in two groups, every grad present


def check_param_groups(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "param_groups")
    laws, tol = laws_of(case), law_tolerance(case)
    with isolated_case(case):
        params = law_params(case, laws.min_ndim, empty=False)
        steps, _ = law_horizon(case, params, tol, FIRST)
        grads = law_grads(case, steps + 1, params, scheduled=False)
        zero_lr = _zero_lr_group(case, params, grads, steps, tol)
        _changed_lr_changes_that_group_only(case, params, grads, steps)
    said, evidence = zero_lr
    return Verdict(f"{said}; changing one group's lr changed that group's next update only", {"steps": steps, **evidence})


def _zero_lr_group(case: Any, params: dict, grads: list, steps: int, tol: Any) -> tuple[str, dict[str, Any]]:
    """(what was seen, evidence) of a group at lr 0 beside one at the case's lr: it must stay put."""
    lr = kwarg_value(resolve(case.optimizer), case.kwargs, "lr")
    zero = {"lr": build_value({"tensor": 0.0} if isinstance(lr, dict) and "tensor" in lr else 0.0, case.device)}
    try:
        run = law_trajectory(case, params, grads[:steps], groups=[(FIRST, {}), (SECOND, zero)])
    except Exception as exc:  # noqa: BLE001  # a refusal of lr 0 on purpose is a claim; anything else is the red
        refusal = refused_on_purpose(exc)
        if not refusal:
            raise
        return (f"a group at lr 0 not run: the optimizer refuses lr 0 on purpose ({one_line(exc)}, at {refusal})",
                {"lr0_refused": refusal})
    initial = run.initial
    moved_zero = {n: max_movement({n: initial[n]}, {n: run.final[n]}, tol) for n in SECOND}
    still = {n: m for n, m in moved_zero.items() if m > 1}
    if still:
        shown = ", ".join(f"{n!r} by {m:.3g} tolerances" for n, m in still.items())
        raise AssertionError(f"{case.id}: law param_groups broken: a group whose lr is 0 must not move; its params moved "
                             f"over {steps} steps ({shown}) while the other group's lr is the case's (does the step "
                             "read lr from the constructor, or another group, or add to it?)")
    moved = max_movement({n: initial[n] for n in FIRST}, {n: run.final[n] for n in FIRST}, tol)
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: the group with the case's lr moved at most {moved:.3g} tolerances "
                      f"in {steps} steps ({HORIZON_TRIED}), so its lr-0 twin staying put proves nothing")
    return (f"an lr-0 group stayed while the other moved {moved:.3g} tol over {steps} steps",
            {"moved_tolerances": round(moved, 3), "lr0_group_moved_tolerances": round(max(moved_zero.values()), 3)})


# Factors the changed group's lr is scaled by, in turn, until its next update differs from the
# unchanged twin's: at bf16 a halved update can round to the very same values (the change is real,
# the rounding hides it), so a wider change is tried before "the step does not read lr" is said.
LR_FACTORS = (0.5, 0.1, 4.0)


def _changed_lr_changes_that_group_only(case: Any, params: dict, grads: list, steps: int) -> None:
    groups: Groups = [(FIRST, {}), (SECOND, {})]
    base = law_trajectory(case, params, grads, groups=groups)
    before, after = base.params_after(steps), base.final
    # a param whose update rounds away (low precision) shows no lr at all: it is not evidence
    seen = [n for n in FIRST if not torch.equal(before[n], after[n])]
    if not seen:
        raise Vacuous(f"{case.id}: vacuous: group 0's step {steps + 1} left its params bitwise unchanged at "
                      f"{case.dtype} (the update rounds away), so changing its lr cannot be seen")
    for factor in LR_FACTORS:
        changed = law_trajectory(case, params, grads, groups=groups, scale_lr=(steps, factor)).final
        same_first = [n for n in seen if torch.equal(after[n], changed[n])]
        if not same_first:
            break
    else:
        raise AssertionError(f"{case.id}: law param_groups broken: scaling group 0's lr by {', '.join(map(str, LR_FACTORS))} "
                             f"after step {steps} must change its next update; {same_first} stepped exactly as with the "
                             "old lr each time (the step does not read param_groups[0]['lr']: LR schedulers do nothing)")
    other = [n for n in SECOND if not torch.equal(after[n], changed[n])]
    if other:
        raise AssertionError(f"{case.id}: law param_groups broken: scaling group 0's lr by {factor} after step {steps} must "
                             f"leave group 1's update alone; {other} changed too (one group's lr leaks into another's)")


LAW_PARAM_GROUPS = Check("law_param_groups", check_param_groups, "each param group's own lr is the one used", "primary",
                         section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.param_groups), rungs=MOVES,
                         proves=("An lr-0 group stays put, and changing one group's lr changes that group's next update only. Evidence: the groups "
                                 "and the lr factor used."),
                         red="The step reads the constructor's lr or another group's: per-group lrs and every LR scheduler silently do nothing.")
