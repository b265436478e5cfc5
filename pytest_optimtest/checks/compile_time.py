"""Compile time of a foreach step over many small tensors, against the spec's budget."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import Field, RootModel

from ..harness.blame import one_line
from ..harness.containment import CaseTimedOut, deadline
from ..harness.ladder import COMPILED
from ..harness.runner import MANY_SMALL, Regime
from ..harness.vacuity import Vacuous
from ..spec.values import resolve
from .base import Check, Verdict

TENSORS, SHAPE = MANY_SMALL
# How long the check waits for the compile where the spec sets no budget: a third of the default case timeout.
# A step that unrolls a long per-param loop (zij's AdaGC, no foreach path) compiled over 100 tensors past 900 s,
# and the item was red as "hung" though the check only reports without a budget. A larger budget waits that long.
REPORT_WAIT_S = 300.0


class CompileBudget(RootModel[Annotated[float, Field(gt=0, le=86400)]]):
    """Fail compile_time past this many seconds (default: report only)."""


def check_compile_time(case: Any, runs: Any) -> Verdict:
    """PyTorch's compile-time smoke test, for the spec's optimizer: the first compiled step over
    100 small params (foreach where the optimizer takes it and the case is not fused). Reported; fails only past
    `compile_budget_s`."""
    foreach = "foreach" in inspect.signature(resolve(case.optimizer).__init__).parameters and not case.kwargs.get("fused")
    # torch.optim refuses foreach with fused: a fused case times its own path
    foreach_raised = None
    budget = case.sections.get("compile_budget_s")
    budget_s = budget.root if budget is not None else None
    wait_s = max(budget_s or 0.0, REPORT_WAIT_S)  # a tiny budget is judged on the time taken, not by a stray alarm
    said = " foreach" if foreach else ""
    try:
        with deadline(wait_s):
            try:
                run = runs.run(case, Regime(compiled=True, closure=False, model="many_small", steps=1,
                                            kwargs=(("foreach", True),) if foreach else ()))
            except Exception as exc:  # noqa: BLE001  # the foreach path this check chose; the case's own path is timed
                if not foreach:
                    raise
                foreach, foreach_raised, said = False, one_line(exc), ""
                run = runs.run(case, Regime(compiled=True, closure=False, model="many_small", steps=1))
    except CaseTimedOut as exc:
        if exc.seconds != wait_s:  # the case's own timeout came first: its red, not this check's report
            raise
        measured = f"first{said} step over {TENSORS} tensors of {SHAPE} still compiling after {wait_s:g}s, stopped"
        if budget_s is not None:
            raise AssertionError(f"{case.id}: {measured}: over the budget of {budget_s:g}s (compile_budget_s in "
                                 f"{case.spec_path})") from None
        return Verdict(f"{measured} (no budget set: reported, not judged; a step that unrolls a per-param loop compiles "
                       "in time that grows with the params)", {"compile_s": None, "compile_s_over": wait_s, "tensors": TENSORS})
    seconds = run.step_seconds[0]
    if not run.step_graphs:  # the case's own step compiles (its ladder): over these params nothing was, so nothing timed
        raise Vacuous(f"{case.id}: vacuous: torch.compile captured no graph of the step over {TENSORS} tensors of {SHAPE} "
                      "(it ran eagerly), so no compile time was measured")
    measured = f"first{said} step over {TENSORS} tensors of {SHAPE} compiled in {seconds:.1f}s"
    if foreach_raised:  # not this check's red: a case with foreach: true gets it as its parity item's root cause
        measured += (f" (its foreach step raised compiled, {foreach_raised}: the case's own path was timed instead; "
                     "give the spec a case with foreach: true to judge that error)")
    if budget_s is not None and seconds > budget_s:
        raise AssertionError(f"{case.id}: {measured}, over the budget of {budget_s:g}s (compile_budget_s in {case.spec_path})")
    return Verdict(measured + (f" (budget {budget_s:g}s)" if budget_s is not None else " (no budget set)"),
                   {"compile_s": round(seconds, 3), "tensors": TENSORS, "step_graphs": run.step_graphs, "budget_s": budget_s,
                    "foreach_raised": foreach_raised})


# float32 only: its params are its own float32 ones, so at another case dtype it would time the same compile
# again under that dtype's name (and it is the costliest once-per-optimizer check)
CHECK = Check("compile_time", check_compile_time, "compile time of a 100-tensor foreach step, against a budget", "primary",
              dtypes=("float32",), section=CompileBudget, section_key="compile_budget_s", rungs=COMPILED,
              proves=("The first compiled foreach step over 100 small tensors compiles within `compile_budget_s` (no budget: reported only). "
                      "Evidence: the seconds, and that something over those tensors compiled (else vacuous)."),
              red="The compile took longer than the budget: a step that unrolls per param, or a torch compile-time regression.")
