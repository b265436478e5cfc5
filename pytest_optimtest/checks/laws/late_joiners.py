"""Law `late_joiners`: a param whose grad is None for its first steps (a frozen layer thawed, an
MoE expert that got no tokens) steps, once its grad comes, as a fresh optimizer's first steps
would for it: its own step count and bias correction, not the others'."""

from __future__ import annotations

from typing import Any

from ...harness.ladder import MOVES
from ..base import Check, Verdict
from .joiners import joiners_judged
from .section import SECTION_KEY, Laws, law_steps, require_on


def check_late_joiners(case: Any, runs: Any) -> Verdict:
    require_on(case, "late_joiners")
    steps = law_steps(case)
    evidence = joiners_judged(case, runs, "late_joiners", "late", "get their first grad")
    return Verdict(f"params without a grad for {steps} steps then stepped {steps} steps as a fresh optimizer does; "
                   f"moved {evidence['moved_tolerances']:.3g} tol", evidence)


LAW_LATE_JOINERS = Check("law_late_joiners", check_late_joiners, "a param whose grads start late steps as if fresh",
                         "primary", section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                         proves="Params without a grad for 7 steps then step as a fresh optimizer's first steps. Evidence: steps compared.",
                         red=("A step count shared by all params (bias correction of a thawed layer wrong): the optimizer's, or by design (turn it "
                              "off with the reason)."))
