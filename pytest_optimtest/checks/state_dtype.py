"""The state dtype contract of low-precision (or float64) params: the spec declares whether the
optimizer's state follows the param's dtype or is kept in float32, and the eager step must keep it."""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import RootModel

from ..harness.builder import param_dtype
from ..harness.runner import Regime
from .base import Check, NotApplicable, Verdict


class StateDtype(RootModel[Literal["param", "float32"]]):
    """The dtype of every state tensor but 0-d counters: `param` (the param's own, as torch.optim
    keeps it) or `float32` (upcast by design, as low-precision optimizers keep it)."""


def check_state_dtype(case: Any, runs: Any) -> Verdict:
    contract = case.sections["state_dtype"].root
    final = runs.run(case, Regime()).final
    problems, checked = [], 0
    for name, state in final.state.items():
        param = final.params.get(name)
        for key, value in state.items():
            if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() > 0):
                continue  # 0-d counters (step) are float32 by torch.optim's own convention
            checked += 1
            wanted = (param.dtype if param is not None else param_dtype(case)) if contract == "param" else torch.float32
            if value.dtype != wanted:
                problems.append(f"state[{key!r}] of {name!r} is {value.dtype}, not {wanted}")
    if not checked:
        raise NotApplicable(f"{case.id}: after {case.steps} steps the optimizer keeps no state tensor (but 0-d "
                            "counters): there is no state dtype to check")
    if problems:
        silently = {"param": "upcast (memory the user did not ask for, and eager/compiled twins that disagree)",
                    "float32": "kept in the param's dtype (updates below its resolution are lost: training stalls)"}
        raise AssertionError(f"{case.id}: {case.dtype} params: the spec declares `state_dtype: {contract}`, but the state "
                             f"is {silently[contract]}:\n  " + "\n  ".join(problems))
    kept = f"the params' {case.dtype}" if contract == "param" else "float32"
    return Verdict(f"{checked} state tensors in {kept}, as declared", {"state_tensors_checked": checked, "dtype": str(kept)})


CHECK = Check("state_dtype", check_state_dtype, "state tensors keep the declared dtype (the param's, or float32)",
              "plain", dtypes=("bfloat16", "float16", "float64"), section=StateDtype,
              declared=lambda contract: contract is not None,
              proves=("Every state tensor but 0-d counters keeps the declared dtype (`state_dtype: param` or `float32`) at each non-float32 param "
                      "dtype. Evidence: the state keys and their dtypes."),
              red=("Names each state tensor that broke the contract: silently upcast, or kept in bf16 where updates below its resolution are lost. "
                   "The optimizer's doing."))
