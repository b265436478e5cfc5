"""Law `complex`: a complex param steps like its `view_as_real` twin, the real and imaginary
parts as independent reals (PyTorch's test_complex for torch.optim)."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed, max_movement, value_differences
from ...harness.law_runs import COMPLEX, complex_twin_run
from ..base import Check, Vacuous, Verdict
from .section import SECTION_KEY, Laws, law_steps, law_tolerance, laws_of, require_own_params


def check_complex(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "complex")
    laws, steps, tol = laws_of(case), law_steps(case), law_tolerance(case)
    initial, trajectory = complex_twin_run(case, laws.min_ndim, steps)
    for step, (as_real, real) in enumerate(trajectory):
        problems = value_differences("param", {"z": as_real}, {"z": real}, tol, ("complex", "view_as_real twin"))
        if problems:
            raise AssertionError(f"{case.id}: law complex broken: a complex param must step like its view_as_real "
                                 f"twin; they differ after step {step + 1} of {steps}:" + listed(problems))
    moved = max_movement({"z": initial}, {"z": trajectory[-1][1]}, tol)
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: law complex: the view_as_real twin moved at most {moved:.3g} tolerances in "
                      f"{steps} steps (need {case.min_movement:g}), so equal complex and real runs prove nothing")
    return Verdict(f"a complex param stepped like its view_as_real twin over {steps} steps; moved {moved:.3g} tol",
                   {"steps_compared": steps, "moved_tolerances": round(moved, 3)})


LAW_COMPLEX = Check("law_complex", check_complex, "a complex param steps like its view_as_real twin", "primary",
                    dtypes=tuple(COMPLEX), section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.complex),
                    proves="A complex param steps like its `view_as_real` twin. Evidence: steps, moved tolerances.",
                    red="Complex params treated as a pair of coupled reals (a conjugate taken, a norm over both parts).")
