"""Hypothesis strategies for optimizer tests: parameters, models, module trees, inputs, spec cases.

Every strategy draws a *blueprint*: a small frozen value whose repr is the Python code
that rebuilds it, so a falsifying example reads as a reproducer::

    from hypothesis import given
    from pytest_optimtest.strategies import param_lists

    @given(param_lists())
    def test_my_optimizer_keeps_shapes(blueprint):
        params = blueprint.build()              # tensors with .grad, seeded
        MyOptimizer(params).step()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from .cases import load_cases
from .harness.strategies import (LAYOUTS, MLP, DictOf, Inputs, Lin, ListOf, Param, Params, Seq, inputs, mlps,
                                 module_trees, param_lists, params, shapes, tree_input)
from .spec import Case


def spec_cases(spec: str | Path, device: str = "cpu", check: str | None = None) -> st.SearchStrategy[Any]:
    """The spec's plain cases (no closure, no scheduler) on `device`, minus those `check` is
    skipped or xfailed for; a drawn case's repr is `load_case(path, id)`."""
    cases = [c for c in load_cases(spec) if isinstance(c, Case) and c.device == device and not c.closure
             and c.scheduler is None and not (check and (check in c.skip or check in c.xfail))]
    if not cases:
        raise ValueError(f"{spec}: no plain {device} case to draw from" + (f" that {check} runs on" if check else ""))
    return st.sampled_from(cases)


__all__ = ["LAYOUTS", "MLP", "DictOf", "Inputs", "Lin", "ListOf", "Param", "Params", "Seq", "inputs", "mlps",
           "module_trees", "param_lists", "params", "shapes", "spec_cases", "tree_input"]
