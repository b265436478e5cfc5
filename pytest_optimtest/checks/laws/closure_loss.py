"""Law `closure_loss`: `step(closure)` returns the loss the closure returned (the first one, for a
step that calls it several times, as LBFGS does). Training loops log it and
ReduceLROnPlateau is fed it: a step that drops it feeds them None."""

from __future__ import annotations

import math
from typing import Any

import torch

from ...harness.blame import CLOSURE_NEVER_CALLED, KnownCause
from ...harness.ladder import MOVES
from ..base import Check, NotApplicable, Verdict
from .section import SECTION_KEY, observed, Laws, require_on


def check_closure_loss(case: Any, runs: Any) -> Verdict:
    require_on(case, "closure_loss")
    seen = observed(case, runs).run
    if not seen.returned:
        declared = f"the spec declares no closure variant (`closure: [false]`, {case.location})" if case.closure_forms else ""
        raise NotApplicable(f"{case.id}: law closure_loss: {declared or 'the step takes no closure'}")
    for step, returned, given in seen.returned:
        if not given:
            raise KnownCause(f"{case.id}: law closure_loss broken: step {step + 1} was given a closure and never "
                             f"called it (returned {_shown(returned)}), so the loss it returns is not this step's",
                             CLOSURE_NEVER_CALLED)
        if not any(_same(returned, loss) for loss in given):
            raise AssertionError(f"{case.id}: law closure_loss broken: step(closure) must return the loss the closure "
                                 f"returned; at step {step + 1} the closure returned {_shown(given[0])}"
                                 f"{f' (and {len(given) - 1} more)' if len(given) > 1 else ''} and the step "
                                 f"returned {_shown(returned)}")
    calls = sum(len(given) for _, _, given in seen.returned)
    return Verdict(f"{len(seen.returned)} closure steps returned their closure's loss ({calls} closure calls)",
                   {"closure_steps": len(seen.returned), "closure_calls": calls})


def _same(returned: Any, loss: torch.Tensor) -> bool:
    """The closure's loss itself, a tensor equal to it, or its value as a number (a NaN loss returned
    as NaN is the same loss: a run that diverged still returns what its closure did)."""
    if returned is loss:
        return True
    if isinstance(returned, torch.Tensor):
        return returned.numel() == 1 and _equal(float(returned), float(loss))
    return isinstance(returned, (int, float)) and not isinstance(returned, bool) and _equal(float(returned), float(loss))


def _equal(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return f"tensor({float(value):.6g})"
    return repr(value) if len(repr(value)) < 60 else f"a {type(value).__name__}"


LAW_CLOSURE_LOSS = Check("law_closure_loss", check_closure_loss, "step(closure) returns the closure's loss", "primary",
                         section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                         proves="`step(closure)` returns the closure's loss. Evidence: the closure's return and the step's.",
                         red="Another value, None, or a step that never calls its closure (said so): the optimizer's.")
