"""Law `add_param_group`: params added with `add_param_group` after some steps move, and their
group runs as it would in a fresh optimizer built with it (fine-tuning that unfreezes layers, and
progressive growing, add groups mid-run)."""

from __future__ import annotations

from typing import Any

from ...harness.ladder import MOVES
from ..base import Blocked, Check, Verdict
from .group_hyperparameters import require_two_groups
from .joiners import joiners_judged
from .section import SECTION_KEY, Laws, law_steps, laws_of, require_on


def check_add_param_group(case: Any, runs: Any) -> Verdict:
    require_on(case, "add_param_group")
    steps = law_steps(case)
    require_two_groups(case, runs)
    try:
        evidence = joiners_judged(case, runs, "add_param_group", "added", "join through add_param_group")
    except AssertionError:
        late = _late_joiners_red(case, runs)
        if late:  # one root cause (no per-param step count, say), one red: late_joiners'
            raise Blocked(f"{case.id}: blocked by law_late_joiners: params that start late already leave a fresh "
                          f"optimizer's path ({late}); an added group doing so too is that root cause") from None
        raise
    return Verdict(f"a group added after {steps} steps stepped {steps} steps as a fresh optimizer does; moved "
                   f"{evidence['moved_tolerances']:.3g} tol", evidence)


def _late_joiners_red(case: Any, runs: Any) -> str | None:
    """The first line of law late_joiners' red on this case (None: it is off, passes, or says nothing)."""
    if "late_joiners" in laws_of(case).off:
        return None
    try:
        joiners_judged(case, runs, "late_joiners", "late", "get their first grad")
    except AssertionError as late:
        return str(late).splitlines()[0]
    except Exception:  # noqa: BLE001 - vacuous, blocked or raising: no verdict to defer to
        return None
    return None


LAW_ADD_PARAM_GROUP = Check("law_add_param_group", check_add_param_group, "an added group steps as in a fresh optimizer",
                            "primary", section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                            proves=("Params added with `add_param_group` after 7 steps move and step as a fresh optimizer over them alone, params and"
                                    " state. Evidence: steps compared, moved tolerances."),
                            red=("An added group that never moves or steps unlike a fresh optimizer (state sized at construction, a global step). "
                                 "Blocked by law_late_joiners' red, its usual root cause."))
