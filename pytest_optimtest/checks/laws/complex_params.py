"""Law `complex`: a complex param steps like its `view_as_real` twin, the real and imaginary
parts as independent reals (PyTorch's test_complex for torch.optim)."""

from __future__ import annotations

from typing import Any

import torch

from ...harness.builder import make_optimizer
from ...harness.compare import listed, max_movement, value_differences
from ...harness.devices import seed_all
from ...harness.isolation import isolated_case
from ..base import Check, Vacuous, Verdict
from .section import SECTION_KEY, Laws, law_steps, law_tolerance, laws_of, require_own_params


COMPLEX = {"float32": torch.complex64, "float64": torch.complex128}  # torch has no complex bfloat16


def check_complex(case: Any, runs: Any) -> Verdict:
    require_own_params(case, "complex")
    laws, steps, tol = laws_of(case), law_steps(case), law_tolerance(case)
    with isolated_case(case):
        seed_all(case.seed)
        shape = (1,) * max(0, laws.min_ndim - 2) + (4, 3)
        complex_dtype = COMPLEX[case.dtype]
        value = torch.randn(shape, dtype=complex_dtype, device=case.device)
        complex_param = torch.nn.Parameter(value.clone())
        real_param = torch.nn.Parameter(torch.view_as_real(value).clone())
        complex_opt = make_optimizer(case, [("z", complex_param)])
        real_opt = make_optimizer(case, [("z", real_param)])
        generator = torch.Generator().manual_seed(case.seed + 15485863)
        for step in range(steps):
            grad = torch.randn(shape, dtype=complex_dtype, generator=generator).to(case.device)
            complex_param.grad, real_param.grad = grad.clone(), torch.view_as_real(grad).clone()
            for opt in (complex_opt, real_opt):
                seed_all(case.seed + 1 + step)
                with torch.no_grad():
                    opt.step()
            problems = value_differences("param", {"z": torch.view_as_real(complex_param.detach())},
                                         {"z": real_param.detach()}, tol, ("complex", "view_as_real twin"))
            if problems:
                raise AssertionError(f"{case.id}: law complex broken: a complex param must step like its view_as_real "
                                     f"twin; they differ after step {step + 1} of {steps}:" + listed(problems))
        moved = max_movement({"z": torch.view_as_real(value)}, {"z": real_param.detach()}, tol)
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: law complex: the view_as_real twin moved at most {moved:.3g} tolerances in "
                      f"{steps} steps (need {case.min_movement:g}), so equal complex and real runs prove nothing")
    return Verdict(f"a complex param stepped like its view_as_real twin over {steps} steps; moved {moved:.3g} tol",
                   {"steps_compared": steps, "moved_tolerances": round(moved, 3)})


LAW_COMPLEX = Check("law_complex", check_complex, "a complex param steps like its view_as_real twin", "primary",
                    dtypes=tuple(COMPLEX), section=Laws, section_key=SECTION_KEY, declared=lambda laws: bool(laws and laws.complex))
