"""The eager runs the conformance laws compare: a fixed set of params with a schedule of grads
that holds the regimes where optimizers go wrong (PyTorch's TestOptimRenewed): an empty param,
a param whose grad is None at one step, one frozen for the first steps and then trained, and
one that never gets a grad."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch

from ..spec.schema import DEFAULT_TOLERANCES
from ..spec.values import build_kwargs, kwarg_value, resolve, with_kwarg
from .builder import (backward_flag, closure_backward, law_closure, make_optimizer, param_dtype, step_grad_mode, step_on_set_grads, with_setup,
                      zero_grads)
from .compare import non_finite, value_differences
from .devices import seed_all
from .isolation import isolated_case
from .param_forms import instantiate
from .snapshot import OptimizerSnapshot, group_settings, groups_hold_settings, snapshot
from .vacuity import NotApplicable, diverged_params

SECTION_KEY = "laws"  # the spec's section (checks/laws/section.py)

# name -> shape; "sometimes" has no grad at step SOMETIMES_NONE, "frozen" none before FROZEN_UNTIL, "never" none at all.
LAW_PARAMS: dict[str, tuple[int, ...]] = {"weight": (6, 5), "bias": (6,), "empty": (0, 3), "sometimes": (5,),
                                          "frozen": (3, 4), "never": (4,)}
SOMETIMES_NONE = 1  # 0-based step
FROZEN_UNTIL = 3


LR_PROBES = (1.0, 10.0, 100.0)  # a law whose params barely move (bf16) retries at these multiples of the case's lr


def lr_scaled(case: Any, factor: float) -> Any:
    """The case with its lr (the constructor's default where the spec gives none; a wrapper's base
    optimizer's) times `factor`; None where there is no number to scale (no lr, or one that is not a
    plain or tensor number)."""
    if factor == 1.0:
        return case
    optimizer_cls = resolve(case.optimizer)
    lr = kwarg_value(optimizer_cls, case.kwargs, "lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return replace(case, kwargs=with_kwarg(optimizer_cls, case.kwargs, "lr", lr * factor))
    if isinstance(lr, dict) and isinstance(lr.get("tensor"), (int, float)) and len(lr) == 1:
        return replace(case, kwargs=with_kwarg(optimizer_cls, case.kwargs, "lr", {"tensor": lr["tensor"] * factor}))
    return None


def lr_probes(case: Any) -> list[tuple[float, Any]]:
    """(factor, case) for each of LR_PROBES the case's lr can be scaled by."""
    return [(f, scaled) for f in LR_PROBES if (scaled := lr_scaled(case, f)) is not None]


def with_overrides(case: Any, overrides: dict[str, Any]) -> Any:
    """The case with spec kwargs `overrides` set where each goes (a wrapper's base optimizer's, where it has them)."""
    optimizer_cls, kwargs = resolve(case.optimizer), case.kwargs
    for key, value in overrides.items():
        kwargs = with_kwarg(optimizer_cls, kwargs, key, value)
    return replace(case, kwargs=kwargs)


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
    `min_ndim` dimensions (optimizers of matrices) and merged to the section's `max_ndim` (of
    vectors), the empty one left out unless `empty`."""
    seed_all(case.seed)
    return {name: torch.nn.Parameter(torch.randn(law_shape(shape, min_ndim, max_ndim(case)), device=case.device)
                                     .to(param_dtype(case)))
            for name, shape in LAW_PARAMS.items() if empty or name != "empty"}


def law_shape(shape: tuple[int, ...], min_ndim: int, most: int | None) -> tuple[int, ...]:
    """`shape` padded with leading 1s to `min_ndim` dimensions, its leading ones merged down to `most`."""
    shape = (1,) * (min_ndim - len(shape)) + shape
    if most is None or len(shape) <= most:
        return shape
    cut = len(shape) - most + 1
    return (math.prod(shape[:cut]), *shape[cut:])


def max_ndim(case: Any) -> int | None:
    """The laws section's `max_ndim`: the most dimensions the step takes (1: vectors alone)."""
    return getattr(case.sections.get(SECTION_KEY), "max_ndim", None)


def views(case: Any) -> bool:
    """The laws section's `views`: whether the laws step a non-contiguous param (false: refused on purpose)."""
    return getattr(case.sections.get(SECTION_KEY), "views", True)


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
class LawTrajectory:
    """An optimizer's run over its own copy of the law params: snapshots before its first step and
    after each, params named as in LAW_PARAMS."""

    optimizer: str  # its class's qualified name
    snapshots: list[OptimizerSnapshot]
    unstored: list[str]  # the overriding kwargs the constructed optimizer kept nowhere

    @property
    def initial(self) -> dict[str, torch.Tensor]:
        return self.snapshots[0].params

    @property
    def final(self) -> dict[str, torch.Tensor]:
        return self.snapshots[-1].params

    def params_after(self, steps: int) -> dict[str, torch.Tensor]:
        return self.snapshots[steps].params

    def state_keys(self, steps: int, name: str) -> set[str]:
        """The state keys of param `name` after `steps` steps (0: what the constructor made)."""
        return set(map(str, self.snapshots[steps].state.get(name, {})))


Groups = list[tuple[list[str], dict[str, Any]]]  # (param names, group options)


def law_trajectory(case: Any, params: dict[str, torch.nn.Parameter], grads: list[dict[str, torch.Tensor | None]],
                   overrides: dict[str, Any] | None = None, groups: Groups | None = None,
                   scale_lr: tuple[int, float] | None = None,
                   before_step: Callable[[Any, int, dict[str, torch.nn.Parameter]], None] | None = None,
                   start: list[str] | None = None) -> LawTrajectory:
    """The case's optimizer (kwargs overridden by spec values; in explicit `groups` if given) over a
    copy of `params`, one step per entry of `grads`. `scale_lr` (k, factor): group 0's lr is scaled
    by factor after k steps, as a scheduler does (in place for a tensor lr). `before_step(optimizer,
    index, params)` runs before each step's grads are set (what a user does between steps). `start`:
    the params the optimizer is built over (all by default; the rest can join through before_step)."""
    if overrides:
        case = with_overrides(case, overrides)
    own = copy_params(params)
    optimizer = _grouped(case, own, groups) if groups else make_optimizer(case, [(n, own[n]) for n in start or own])
    names: dict[torch.Tensor, str] = {p: n for n, p in own.items()}
    snapshots = [snapshot(optimizer, names)]
    for index, step_grads in enumerate(grads):
        if scale_lr is not None and scale_lr[0] == index:
            _scale_lr(optimizer.param_groups[0], scale_lr[1])
        if before_step is not None:
            before_step(optimizer, index, own)
        for name, p in own.items():
            grad = step_grads[name]
            p.grad = None if grad is None else grad.clone()
        seed_all(case.seed + 1 + index, case)
        with step_grad_mode(case):
            step_on_set_grads(case, optimizer, own.values())
        snapshots.append(snapshot(optimizer, names))
    return LawTrajectory(type(optimizer).__qualname__, snapshots, unstored_kwargs(optimizer, overrides or {}))


def _scale_lr(group: dict[str, Any], factor: float) -> None:
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(group["lr"].item() * factor)
    else:
        group["lr"] = group["lr"] * factor


def unstored_kwargs(optimizer: Any, keys: Any) -> list[str]:
    """The keyword arguments among `keys` that the constructed optimizer kept nowhere: not in its
    defaults, any param group, or an attribute of its own. A constructor that takes **kwargs and
    drops them makes a law over such a kwarg compare two identical runs."""
    kept = {*getattr(optimizer, "defaults", {}), *vars(optimizer)}
    kept.update(k for group in getattr(optimizer, "param_groups", []) for k in group_settings(group))
    return [k for k in keys if k not in kept]


def _grouped(case: Any, own: dict[str, torch.nn.Parameter], groups: Groups) -> Any:
    """The case's optimizer over `own` in explicit param groups, each group's params named where the
    spec's form is `named`. NotApplicable when the constructor refuses param groups (the case's own
    form constructs: the ladder's first rung says so)."""
    optimizer_cls = resolve(case.optimizer)
    named = case.params == "named"
    given = [{"params": [(n, own[n]) if named else own[n] for n in names], **options} for names, options in groups]
    try:  # a wrapper's groups are its base optimizer's
        optimizer = (instantiate(optimizer_cls, (), {}, build_kwargs(case.kwargs, case.device), given) if case.params == "wrapped"
                     else instantiate(optimizer_cls, (given,), {}, build_kwargs(case.kwargs, case.device)))
    except Exception as exc:  # noqa: BLE001  # whatever it raises given groups its own form does not (RMSGD: AttributeError)
        raise NotApplicable(f"{case.id}: {optimizer_cls.__qualname__} refuses param groups "
                            f"({'of named params' if named else 'as dicts'}): {type(exc).__name__}: {exc}; "
                            "a law over groups cannot apply (turn it off in the spec's laws)") from exc
    if not groups_hold_settings(optimizer):
        raise NotApplicable(f"{case.id}: {optimizer_cls.__qualname__} keeps each param group as its params alone (torchopt's "
                            "tuples: its settings live in its transformation), so no group has settings of its own; a "
                            "law over groups cannot apply (turn it off in the spec's laws)")
    return with_setup(case, optimizer)


COMPLEX = {"float32": torch.complex64, "float64": torch.complex128}  # torch has no complex bfloat16


def complex_twin_run(case: Any, min_ndim: int, steps: int) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A complex param and its `view_as_real` twin, each with the case's optimizer, stepped on equal
    grads: (the initial value as real, [(the complex param as real, the twin) after each step])."""
    with isolated_case(case):
        seed_all(case.seed)
        shape = (1,) * max(0, min_ndim - 2) + (4, 3)
        complex_dtype = COMPLEX[case.dtype]
        value = torch.randn(shape, dtype=complex_dtype, device=case.device)
        complex_param = torch.nn.Parameter(value.clone())
        real_param = torch.nn.Parameter(torch.view_as_real(value).clone())
        complex_opt = make_optimizer(case, [("z", complex_param)])
        real_opt = make_optimizer(case, [("z", real_param)])
        generator = torch.Generator().manual_seed(case.seed + 15485863)
        trajectory = []
        for step in range(steps):
            grad = torch.randn(shape, dtype=complex_dtype, generator=generator).to(case.device)
            complex_param.grad, real_param.grad = grad.clone(), torch.view_as_real(grad).clone()
            for opt, param in ((complex_opt, complex_param), (real_opt, real_param)):
                seed_all(case.seed + 1 + step, case)
                with step_grad_mode(case):
                    step_on_set_grads(case, opt, [param])
            trajectory.append((torch.view_as_real(complex_param.detach()).clone(), real_param.detach().clone()))
    return torch.view_as_real(value), trajectory


def descent_losses(case: Any, steps: int, contiguous_only: bool = False) -> tuple[list[float], bool]:
    """On a small least-squares problem with a contiguous and a transposed (non-contiguous) param (with
    the laws' `max_ndim: 1`, a contiguous and a strided vector; with `views: false` or `contiguous_only`,
    both contiguous), the loss before each step and after the last, measured in float64 (a bf16 loss
    cannot show the small steps a bf16 optimizer takes); and whether the steps were given the closure
    (law_closure)."""
    with isolated_case(case):
        seed_all(case.seed)
        at = {"device": case.device, "dtype": param_dtype(case)}
        vectors = max_ndim(case) == 1  # a step over vectors alone: one column, a strided vector
        a, b = torch.randn(8, 4).to(**at), torch.randn(*((8,) if vectors else (8, 3))).to(**at)
        target = torch.randn(*((4,) if vectors else (4, 5))).to(**at)
        contiguous = torch.nn.Parameter(torch.zeros(4, *b.shape[1:], **at))
        transposed = torch.nn.Parameter(torch.zeros(4, 2, **at)[:, 0] if vectors else torch.zeros(5, 4, **at).t())  # non-contiguous
        if contiguous_only or not views(case):
            transposed = torch.nn.Parameter(transposed.detach().contiguous())
        try:
            optimizer = make_optimizer(case, [("contiguous", contiguous), ("transposed", transposed)])
        except (ValueError, AssertionError):  # a constructor that refuses a zero param (MuonHyperball keeps its norm):
            with torch.no_grad():  # the problem started elsewhere, as the law is about the steps, not the start
                for param in (contiguous, transposed):
                    param.copy_(torch.randn(param.shape).to(**at) * 0.1)
            optimizer = make_optimizer(case, [("contiguous", contiguous), ("transposed", transposed)])

        def loss_fn(*tensors: torch.Tensor) -> torch.Tensor:
            a, b, target, contiguous, transposed = tensors
            return (a @ contiguous - b).pow(2).mean() + (transposed - target).pow(2).mean()

        def measured() -> float:
            with torch.no_grad():
                return float(loss_fn(*(t.double() for t in (a, b, target, contiguous, transposed))))

        def closure(*args: Any, **named: Any) -> torch.Tensor:
            if not backward_flag(args, named):
                with torch.no_grad():
                    return loss_fn(a, b, target, contiguous, transposed)
            with torch.enable_grad():
                zero_grads(optimizer, (contiguous, transposed))
                loss = loss_fn(a, b, target, contiguous, transposed)
                closure_backward(loss, case.backward)
            return loss

        with_closure = law_closure(case, type(optimizer))[0]
        losses = []
        for step in range(steps):
            seed_all(case.seed + 1 + step, case)
            losses.append(measured())
            closure()  # grads before the step too: one that never calls its closure is closure_loss's red, not descent's
            with step_grad_mode(case):  # the closure enables grad for itself, as the harness's closures do
                optimizer.step(closure) if with_closure else optimizer.step()  # type: ignore[arg-type]
        losses.append(measured())
    return losses, with_closure


class Coupling(NamedTuple):
    """What the coupling probe found: `couples` True with its evidence, or None where it could not tell;
    `rounding`: only in how its arithmetic rounds beside same-shaped params, whatever their values."""

    couples: bool | None
    evidence: str
    rounding: bool = False


def coupling(case: Any, min_ndim: int) -> Coupling | None:
    """How one param's update depends on the other params the optimizer steps (a global norm, a line
    search or a temperature shared by all), or None where it steps as it would alone: up to
    COUPLING_STEPS eager steps over every law param against as many over the first alone, the same
    grads (run on a red only: the premise of laws and regimes that step params apart, late joiners and
    ZeRO's shards), compared after each step until either run diverges (a line search over the
    probe's linear loss runs off to 1e35 in a few steps, where any two runs differ). Probed in
    float32: coupling is the algorithm's, and a bf16 run can round it away where the law's steps show it."""
    tol = DEFAULT_TOLERANCES["float32"]
    case = replace(case, dtype="float32", tolerance=tol)
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, COUPLING_STEPS, params, scheduled=False)
        first = next(iter(params))
        try:
            together, alone = (law_trajectory(case, params, grads, start=start).snapshots for start in (None, [first]))
        except Exception:  # noqa: BLE001  # a step that refuses one of the runs: no answer either way
            return None
    for steps in range(1, COUPLING_STEPS + 1):
        if any(diverged_params(run[0].params, run[steps].params) or non_finite(run[steps].params) for run in (together, alone)):
            return Coupling(None, f"whether its update couples params is unknown: the probe's runs diverged at step {steps} "
                                  "(NaN/inf or far beyond their start) before they differed")
        # its state too: at bf16 a small update can round away in the param and show in the state alone
        differences = value_differences(
            "", {"param": alone[steps].params[first], "state": alone[steps].state.get(first, {})},
            {"param": together[steps].params[first], "state": together[steps].state.get(first, {})}, tol,
            ("alone", "beside the others"))
        if differences and all(d.startswith("['state']") for d in differences):  # FusedAdam's step counted on the last param
            return Coupling(True, f"its state couples params: after {steps} step(s) on the same grads, param '{first}' stepped "
                                  f"alone keeps other state than stepped beside the others ({differences[0]}), though it moved "
                                  "alike so far: what it keeps for a param depends on the params beside it (a count or a "
                                  "statistic over several)")
        if differences:
            return Coupling(True, f"its update couples params: after {steps} step(s) on the same grads, param '{first}' stepped "
                                  f"alone differs from it stepped beside the others ({differences[0]}): a norm, line search or "
                                  "statistic taken over all its params")
    with isolated_case(case):
        return _beside_its_shape(case, first, params[first], [{first: g[first]} for g in grads])


def _beside_its_shape(case: Any, name: str, param: torch.nn.Parameter, firsts: list[dict[str, torch.Tensor | None]]) -> Coupling | None:
    """The coupling probe's second half: `param` stepped alone against beside a param of its own shape, and
    beside another such param (other values, other grads). An optimizer that stacks same-shaped params into
    one batch (Dion's Muon: a bf16 Newton-Schulz that inductor compiles for the batch's shape) rounds
    otherwise with company, whatever the company's values: not a coupling of values, and no regime that
    steps params apart (ZeRO's shards) can match it closer than that rounding."""
    generator = torch.Generator().manual_seed(case.seed + 104729)

    def twin() -> tuple[torch.Tensor, list[torch.Tensor]]:
        return (torch.randn(param.shape, generator=generator).to(param.device, param.dtype),
                [torch.randn(param.shape, generator=generator).to(param.device, param.dtype) for _ in firsts])

    runs = []
    for company in (None, twin(), twin()):
        params = {name: param} if company is None else {name: param, "twin": torch.nn.Parameter(company[0])}
        given = firsts if company is None else [{**g, "twin": company[1][i]} for i, g in enumerate(firsts)]
        try:
            runs.append(law_trajectory(case, params, given).snapshots)
        except Exception:  # noqa: BLE001  # a step that refuses one of the runs: no answer either way
            return None
    tol = DEFAULT_TOLERANCES["float32"]
    for steps in range(1, len(firsts) + 1):
        if any(non_finite(run[steps].params) for run in runs):
            return None
        alone, beside, beside_other = ({"param": run[steps].params[name], "state": run[steps].state.get(name, {})} for run in runs)
        differences = value_differences("", alone, beside, tol, ("alone", "beside a param of its shape"))
        if not differences:
            continue
        if value_differences("", beside, beside_other, tol, ("beside one", "beside another")):
            return Coupling(True, f"its update couples params: after {steps} step(s) on the same grads, param '{name}' stepped "
                                  f"beside a param of its shape differs with that param's values ({differences[0]} alone)")
        return Coupling(True, f"its arithmetic rounds otherwise beside params of the same shape: after {steps} step(s) on the same "
                              f"grads, param '{name}' stepped alone differs from it stepped beside a param of its shape "
                              f"({differences[0]}), and not at all with that param's values: it batches same-shaped params "
                              "(a stacked, compiled or low-precision computation rounds with the batch's shape), and no regime "
                              "that steps params apart can match it closer", rounding=True)
    return None


COUPLING_STEPS = 3
