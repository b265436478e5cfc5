"""Law `grads_untouched`: a step leaves every `p.grad` as it found it, the same tensor with the
same values. Gradient accumulation, clipping, logging and the next optimizer of a param read the
grads after the step; one that clips or scales them in place corrupts all of those."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed, max_movement
from ...harness.ladder import MOVES
from ..base import Check, Vacuous, Verdict
from .section import SECTION_KEY, observed, Laws, law_tolerance, require_on


def check_grads_untouched(case: Any, runs: Any) -> Verdict:
    require_on(case, "grads_untouched")
    both = observed(case, runs)
    seen = both.run
    if seen.grad_problems:
        raise AssertionError(f"{case.id}: law grads_untouched broken: a step must leave every p.grad as it found it, "
                             "the same tensor with the same values (accumulation, clipping and logging read it after "
                             "the step); the step changed them:" + listed(seen.grad_problems, 4)
                             + ("\n  written by: " + "; ".join(seen.grad_writes[:4]) if seen.grad_writes else ""))
    moved = max_movement(seen.initial, seen.final.params, law_tolerance(case))
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: law grads_untouched: the params moved at most {moved:.3g} tolerances in "
                      f"{seen.steps} steps, at up to {both.lr_factor:g}x the case's lr, so a step that left the grads alone may "
                      "not have read them")
    return Verdict(f"{seen.grads_checked} grads over {seen.steps} steps ({len(seen.closure_steps)} through a closure) "
                   f"left as given; params moved {moved:.3g} tol",
                   {"grads_checked": seen.grads_checked, "steps": seen.steps, "closure_steps": len(seen.closure_steps),
                    "moved_tolerances": round(moved, 3), "lr_factor": both.lr_factor})


LAW_GRADS_UNTOUCHED = Check("law_grads_untouched", check_grads_untouched, "a step leaves every p.grad as it found it",
                            "primary", section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                            proves=("A step leaves every `p.grad` as it found it: the same tensor, the same values. Evidence: the grads watched and "
                                    "steps."),
                            red=("The step clips, scales or replaces a grad; a rerun under a TorchFunctionMode names the op and the optimizer's "
                                 "file:line."))
