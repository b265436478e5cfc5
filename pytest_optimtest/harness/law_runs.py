"""The eager runs the conformance laws compare: a fixed set of params with a schedule of grads
that holds the regimes where optimizers go wrong (PyTorch's TestOptimRenewed): an empty param,
a param whose grad is None at one step, one frozen for the first steps and then trained, and
one that never gets a grad."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from ..spec.values import build_kwargs, resolve
from .builder import make_optimizer, param_dtype, with_setup
from .devices import seed_all
from .snapshot import OptimizerSnapshot, snapshot
from .vacuity import NotApplicable

# name -> shape; "sometimes" has no grad at step SOMETIMES_NONE, "frozen" none before FROZEN_UNTIL, "never" none at all.
LAW_PARAMS: dict[str, tuple[int, ...]] = {"weight": (6, 5), "bias": (6,), "empty": (0, 3), "sometimes": (5,),
                                          "frozen": (3, 4), "never": (4,)}
SOMETIMES_NONE = 1  # 0-based step
FROZEN_UNTIL = 3


def has_grad(name: str, step: int) -> bool:
    """Whether the law params' grad schedule gives `name` a grad at 0-based `step`."""
    if name == "never":
        return False
    if name == "sometimes":
        return step != SOMETIMES_NONE
    if name == "frozen":
        return step >= FROZEN_UNTIL
    return True


def schedule_in_words() -> str:
    return (f"with an empty param, 'sometimes' without a grad at step {SOMETIMES_NONE + 1}, 'frozen' without one "
            f"until step {FROZEN_UNTIL + 1}, 'never' without one at all")


def law_params(case: Any, min_ndim: int = 0, empty: bool = True) -> dict[str, torch.nn.Parameter]:
    """The law params, seeded by the case, on its device; shapes padded with leading 1s to
    `min_ndim` dimensions (optimizers of matrices), the empty one left out unless `empty`."""
    seed_all(case.seed)
    return {name: torch.nn.Parameter(torch.randn((1,) * (min_ndim - len(shape)) + shape, device=case.device)
                                     .to(param_dtype(case)))
            for name, shape in LAW_PARAMS.items() if empty or name != "empty"}


def law_grads(case: Any, steps: int, params: dict[str, torch.nn.Parameter],
              scheduled: bool = True) -> list[dict[str, torch.Tensor | None]]:
    """grads[step][name], drawn once so every run of a law sees the same ones: None per the
    schedule, or (`scheduled` false) a grad for every param at every step."""
    generator = torch.Generator().manual_seed(case.seed + 7919)
    return [{name: torch.randn(p.shape, generator=generator).to(p.device, p.dtype) if not scheduled or has_grad(name, step)
             else None for name, p in params.items()} for step in range(steps)]


def copy_params(params: dict[str, torch.nn.Parameter]) -> dict[str, torch.nn.Parameter]:
    return {name: torch.nn.Parameter(p.detach().clone()) for name, p in params.items()}


@dataclass
class LawRun:
    """An optimizer over its own copy of the law params, stepped one grad set at a time."""

    case: Any
    params: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer

    def step(self, index: int, grads: dict[str, torch.Tensor | None]) -> None:
        for name, p in self.params.items():
            grad = grads[name]
            p.grad = None if grad is None else grad.clone()
        seed_all(self.case.seed + 1 + index)
        with torch.no_grad():
            self.optimizer.step()

    def snapshot(self) -> OptimizerSnapshot:
        return snapshot(self.optimizer, {p: n for n, p in self.params.items()})

    def values(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self.params.items()}


def unstored_kwargs(optimizer: Any, keys: Any) -> list[str]:
    """The keyword arguments among `keys` that the constructed optimizer kept nowhere: not in its
    defaults, any param group, or an attribute of its own. A constructor that takes **kwargs and
    drops them makes a law over such a kwarg compare two identical runs."""
    kept = {*getattr(optimizer, "defaults", {}), *vars(optimizer)}
    kept.update(k for group in getattr(optimizer, "param_groups", []) for k in group)
    return [k for k in keys if k not in kept]


def law_run(case: Any, params: dict[str, torch.nn.Parameter], overrides: dict[str, Any] | None = None) -> LawRun:
    """The case's optimizer (kwargs overridden by spec values) over a copy of `params`."""
    if overrides:
        case = replace(case, kwargs={**case.kwargs, **overrides})
    own = copy_params(params)
    return LawRun(case, own, make_optimizer(case, list(own.items())))


def grouped_run(case: Any, params: dict[str, torch.nn.Parameter], groups: list[tuple[list[str], dict[str, Any]]]) -> LawRun:
    """The case's optimizer over a copy of `params` in explicit param groups: (names, group options),
    each group's params named where the spec's form is `named`. NotApplicable when the constructor
    refuses param groups (the case's own form constructs: the ladder's first rung says so)."""
    own = copy_params(params)
    optimizer_cls = resolve(case.optimizer)
    named = case.params == "named"
    given = [{"params": [(n, own[n]) if named else own[n] for n in names], **options} for names, options in groups]
    try:
        optimizer = optimizer_cls(given, **build_kwargs(case.kwargs, case.device))
    except (TypeError, ValueError, KeyError, AssertionError) as exc:
        raise NotApplicable(f"{case.id}: {optimizer_cls.__qualname__} refuses param groups "
                            f"({'of named params' if named else 'as dicts'}): {type(exc).__name__}: {exc}; "
                            "a law over groups cannot apply (turn it off in the spec's laws)") from exc
    return LawRun(case, own, with_setup(case, optimizer))
