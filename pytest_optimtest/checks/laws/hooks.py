"""Law `hooks`: the hooks torch.optim.Optimizer offers are honoured: `register_step_pre_hook` and
`register_step_post_hook` fire once a step, in that order, and state_dict's and load_state_dict's
pre and post hooks run, what a state_dict post-hook adds reaching load_state_dict's pre-hook.
Overriding `step` or `state_dict` without torch's wrappers silently drops them (EMA, profilers and
checkpointing libraries hang off these hooks)."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed
from ...harness.ladder import MOVES
from ...spec.values import resolve
from ..base import Blocked, Check, NotApplicable, Verdict
from .section import SECTION_KEY, observed, Laws, require_on


def check_hooks(case: Any, runs: Any) -> Verdict:
    require_on(case, "hooks")
    seen = observed(case, runs).run
    if not seen.hooks_supported or "unsupported" in seen.state_dict_hooks:
        raise NotApplicable(f"{case.id}: law hooks: the optimizer has no torch.optim hook registration "
                            f"({seen.state_dict_hooks.get('unsupported', 'register_step_pre_hook')})")
    expected = [f"{when} {step}" for step in range(seen.steps) for when in ("pre", "post")]
    repeated = _base_steps_hooked(case, seen.hook_calls, seen.steps)
    if repeated:
        raise AssertionError(f"{case.id}: law hooks broken: step hooks fired {repeated[0]} times a step (pre {repeated[0]} "
                             f"times, then post): the step calls {repeated[1]}, which torch.optim also wrapped with the "
                             f"hooks when a {repeated[1].split('.')[0]} was built in this process "
                             "(Optimizer._patch_step_function wraps each class's own step once): torch's doing, not "
                             "the optimizer's; every subclass that calls super().step() gets its hooks twice then")
    problems = [] if seen.hook_calls == expected else [
        f"step hooks: expected {_calls(expected)}, fired {_calls(seen.hook_calls) or 'none'}"]
    calls = seen.state_dict_hooks
    if "error" in calls:
        raise Blocked(f"{case.id}: blocked by state_dict: the optimizer's state_dict round trip raised {calls['error']} "
                      "(the state_dict check's finding), so its hooks cannot be judged")
    if "unregistered" in calls:
        raise AssertionError(f"{case.id}: law hooks broken: registering a state_dict hook on the optimizer raised "
                             f"{calls['unregistered']}" + listed(problems))
    for name in ("state_dict_pre", "state_dict_post", "load_pre", "load_post"):
        if calls[name] != 1:
            problems.append(f"{name.replace('_', ' ')} hook: fired {calls[name]} times for one call, expected once")
    if calls["state_dict_post"] == 1 and not calls.get("marker_in_state_dict"):
        problems.append("state_dict post hook: its returned dict is not what state_dict() returned")
    if calls["load_pre"] == 1 and not calls["marker_reached_load"]:
        problems.append("load_state_dict pre hook: did not receive the state dict that was loaded")
    if problems:
        raise AssertionError(f"{case.id}: law hooks broken: torch.optim's step and state_dict hooks must fire as "
                             "registered (override step/state_dict and call torch's, or keep Optimizer's wrappers):"
                             + listed(problems))
    return Verdict(f"step pre/post hooks fired once each over {seen.steps} steps; state_dict and load_state_dict hooks ran",
                   {"steps": seen.steps, "step_hook_calls": len(seen.hook_calls), "state_dict_hooks": 4})


def _base_steps_hooked(case: Any, calls: list[str], steps: int) -> tuple[int, str] | None:
    """(times a step, 'Base.step') where every step's hooks fired n > 1 times, nested (pre n times,
    then post n times), and a base class of the optimizer has a step torch.optim has hooked."""
    optimizer_cls = resolve(case.optimizer)
    hooked = [base for base in optimizer_cls.__mro__[1:] if getattr(vars(base).get("step"), "hooked", False)]
    times = len(calls) // (2 * steps) if steps else 0
    nested = [f"{when} {step}" for step in range(steps) for when in ("pre", "post") for _ in range(times)]
    if not hooked or times < 2 or calls != nested:
        return None
    return times, f"{hooked[0].__qualname__}.step"


def _calls(calls: list[str]) -> str:
    shown = ", ".join(calls[:6])
    return shown + (f", ... ({len(calls)} in all)" if len(calls) > 6 else "")


LAW_HOOKS = Check("law_hooks", check_hooks, "step and state_dict hooks fire as registered", "primary",
                  section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                  proves="Step pre/post hooks fire once a step, in order; state_dict and load_state_dict hooks run. Evidence: hooks fired per step.",
                  red=("A `step` replaced on the instance, or a `state_dict` override that skips the hooks: the optimizer's. Hooks fired twice by a "
                       "base class's step that torch.optim wrapped too are named torch's doing."))
