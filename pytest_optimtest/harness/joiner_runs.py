"""Params that join a run late, and the fresh optimizer they must step like (issue 34's laws
`add_param_group` and `late_joiners`): the joiners' snapshots after each step they took, beside a
fresh optimizer's over the joiners alone, on the same grads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from ..spec.param_groups import assign
from ..spec.values import build_kwargs
from .isolation import isolated_case
from .law_runs import law_grads, law_params, law_trajectory
from .snapshot import OptimizerSnapshot
from .vacuity import NotApplicable

STAYING, JOINING = ["weight", "bias"], ["sometimes", "frozen"]  # law params: in from the start, and joining late


@dataclass
class JoinerRuns:
    """After each of the `steps` steps the joiners took: their params and state in the run they
    joined (`joined`) and in a fresh optimizer over them alone (`fresh`)."""

    joined_at: int  # the steps the others took before the joiners had a grad (or a group)
    joined: list[OptimizerSnapshot]
    fresh: list[OptimizerSnapshot]
    initial: dict[str, torch.Tensor]


def joiner_runs(case: Any, how: Literal["late", "added"], before: int, steps: int, min_ndim: int = 0) -> JoinerRuns:
    """`late`: the joiners are in the optimizer from the start, their grads None for `before` steps.
    `added`: the optimizer starts over the others; `add_param_group` brings the joiners after
    `before` steps (in the spec's params form: named pairs for `params: named`)."""
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        every = law_grads(case, before + steps, params, scheduled=False)
        grads = [{n: (g if n in STAYING or index >= before else None) for n, g in step.items()}
                 for index, step in enumerate(every)]
        params = {n: params[n] for n in STAYING + JOINING}
        if how == "late":
            joined = law_trajectory(case, params, grads)
        else:
            joined = law_trajectory(case, params, every, start=STAYING,
                                    before_step=lambda opt, index, own: _add(case, opt, own) if index == before else None)
        fresh = law_trajectory(case, {n: params[n] for n in JOINING}, [{n: step[n] for n in JOINING} for step in every[before:]])
    return JoinerRuns(before, [_only(s) for s in joined.snapshots[before + 1:]], [_only(s) for s in fresh.snapshots[1:]],
                      {n: fresh.initial[n] for n in JOINING})


def _add(case: Any, optimizer: Any, own: dict[str, torch.nn.Parameter]) -> None:
    if not hasattr(optimizer, "add_param_group"):
        raise NotApplicable(f"{case.id}: {type(optimizer).__qualname__} has no add_param_group")
    # named as the groups it holds are (torch refuses a mix): a constructor may take names and keep none
    named = case.params == "named" and all("param_names" in g for g in optimizer.param_groups)
    if not isinstance(case.params, (list, tuple)):
        optimizer.add_param_group({"params": [(n, own[n]) if named else own[n] for n in JOINING]})
        return
    # the spec's groups carry options the optimizer needs in every group (Muon's hybrids: use_muon): the
    # joiners come as the groups that would have taken them, each with its options
    members, _ = assign(case.params, [(n, own[n].ndim) for n in JOINING])
    for group, taken in zip(case.params, members):
        if taken:
            optimizer.add_param_group({"params": [own[JOINING[i]] for i in taken], **build_kwargs(group.options, case.device)})


def _only(snap: OptimizerSnapshot) -> OptimizerSnapshot:
    """The joiners' params and state: the rest is not what the law is about."""
    return OptimizerSnapshot({n: snap.params[n] for n in JOINING}, {n: s for n, s in snap.state.items() if n in JOINING},
                             [], {})
