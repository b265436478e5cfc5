"""Train a model with its optimizer applied in backward next to a normally stepped twin."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from copy import deepcopy
from dataclasses import dataclass, replace
from typing import Any

import torch

from pydantic import Field

from ..spec.case import Case
from ..spec.schema import MAX_STEPS, StrictModel
from ..spec.values import build_kwargs, resolve
from . import torch_api
from .compare import value_differences
from .devices import seed_all
from .isolation import optimizer_globals_kept, isolated
from ..models import IN_FEATURES
from .builder import (build_model, make_data, make_optimizer, model_factory, param_dtype, requires_closure, setup_of,
                      with_setup)
from .param_forms import binding_base_optimizers, construct_over, form_name
from .snapshot import group_params

SECTION_KEY = "in_backward"


class ParamGroupSpec(StrictModel):
    """Params by name: a glob over unique names, or an exact name (an alias of a tied param too)."""

    params: list[str] = Field(min_length=1, description="param names or fnmatch globs over them")
    kwargs: dict[str, Any] = Field({}, description="the group's kwargs, over the case's")


class InBackwardSpec(StrictModel):
    """How the in-backward checks build and compare their models."""

    steps: int = Field(6, ge=1, le=MAX_STEPS, description="train steps compared")
    groups: list[ParamGroupSpec] = Field(
        [ParamGroupSpec(params=["*weight"]), ParamGroupSpec(params=["*bias"])],
        description="optimizer groups (PyTorch's test: weights, biases); kwargs go over the case's",
    )
    tie: list[list[str]] = Field(
        [["0.weight", "1.weight"]], description="params the tied variant shares: each list becomes its first"
    )
    per_parameter: str | None = Field(
        None,
        description="why this optimizer cannot match one optimizer over all params (it couples params or "
        "draws random numbers); then the reference is one optimizer per param stepped in hook order",
    )


def in_backward_section(case: Any) -> InBackwardSpec:
    """The case's `in_backward` section (its defaults when the case carries none)."""
    return case.sections.get(SECTION_KEY) or InBackwardSpec()


Groups = list[tuple[list[torch.nn.Parameter], dict]]


class CannotApply(Exception):
    """The case cannot be applied in backward (reason in the message)."""


def require_param_list(case: Case) -> None:
    """_apply_optimizer_in_backward builds one optimizer per param from a one-param list, and steps
    it in a hook of autograd's backward, where grad is off."""
    if case.backward != "plain":
        raise CannotApply(f"the spec declares `backward: {case.backward}` (a step that differentiates the graph its closure "
                          "made), and _apply_optimizer_in_backward steps each param inside the one backward, with no closure")
    if case.grad_mode == "enabled":
        raise CannotApply("the spec declares `grad_mode: enabled` (a step that runs autograd itself), and "
                          "_apply_optimizer_in_backward steps it inside autograd's backward, where grad is off")
    if case.params not in ("list", "wrapped"):
        raise CannotApply(f"the optimizer takes its params as {form_name(case.params)} (the spec's `params`), and "
                          "_apply_optimizer_in_backward builds one optimizer per param from a list of that param alone")


def make_model(case: Case, tied: bool) -> torch.nn.Module:
    seed_all(case.seed)
    model = build_model(case)
    if tied:
        for names in in_backward_section(case).tie:
            tie(model, names)
    return model


def tie(model: torch.nn.Module, names: list[str]) -> None:
    """Make every named param the same Parameter as the first."""
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = [n for n in names if n not in params]
    if missing:
        raise CannotApply(f"model has no parameters named {missing}; declare in_backward.tie for this model")
    shared = params[names[0]]
    for name in names[1:]:
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, shared)


def groups_of(model: torch.nn.Module, case: Case) -> Groups:
    """The spec's groups on `model`: exact names as written (aliases included), globs over unique names."""
    every = dict(model.named_parameters(remove_duplicate=False))
    unique = dict(model.named_parameters())
    groups: Groups = []
    for group in in_backward_section(case).groups:
        params: list[torch.nn.Parameter] = []
        for pattern in group.params:
            if pattern in every:
                params.append(every[pattern])
            else:
                params += [p for n, p in unique.items() if fnmatch.fnmatchcase(n, pattern)]
        if params:
            groups.append((params, build_kwargs({**case.kwargs, **group.kwargs}, case.device)))
    return groups


def unique_params(groups: Groups) -> Groups:
    out = []
    for params, kwargs in groups:
        seen: dict[int, torch.nn.Parameter] = {}
        for p in params:
            seen.setdefault(id(p), p)
        out.append((list(seen.values()), kwargs))
    return out


def hook_order(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Record the order in which params' grads become ready during the next backward."""
    order: list[torch.nn.Parameter] = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda param: order.append(param))
    return order


@dataclass
class InBackwardRun:
    """A model whose optimizer is applied in backward beside its twin stepped normally: params by name
    before any step and after each step on both sides, and the optimizers the in-backward model holds."""

    initial: dict[str, torch.Tensor]
    reference: list[dict[str, torch.Tensor]]  # after each step
    in_backward: list[dict[str, torch.Tensor]]
    found: int  # optimizers _get_in_backward_optimizers returns
    stored: int  # optimizers the params hold
    found_are_stored: bool  # the same optimizer objects
    covered: int  # params that hold one
    failure: Exception | None = None  # what a step raised (the steps before it are recorded)

    def steps(self) -> Iterator[tuple[int, dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
        """(step, reference params, in-backward params) after each step."""
        yield from ((i, ref, got) for i, (ref, got) in enumerate(zip(self.reference, self.in_backward)))


def run_in_backward(case: Case, tied: bool = False, copies: int = 1) -> InBackwardRun:
    """The case's in-backward run over `in_backward.steps` training steps (CannotApply where it has none).
    copies=2 applies two optimizers to every group, on both sides, each with its own kwargs."""
    require_param_list(case)
    optimizer_cls = resolve(case.optimizer)
    if requires_closure(optimizer_cls):
        raise CannotApply(f"{optimizer_cls.__name__}.step requires a closure; an optimizer applied in backward steps without one")
    with isolated(), optimizer_globals_kept(case):
        model = make_model(case, tied)
        reference, in_backward = deepcopy(model), deepcopy(model)
        ref_groups = [g for _ in range(copies) for g in unique_params(groups_of(reference, case))]
        per_param = in_backward_section(case).per_parameter is not None
        if per_param:
            ref_opts: dict[int, list] = {id(p): [] for params, _ in ref_groups for p in params}
            for params, kwargs in ref_groups:
                for p in params:
                    ref_opts[id(p)].append(with_setup(case, construct_over(optimizer_cls, case.params, [p], kwargs)))
            order = hook_order(reference)
        else:
            optimizers = [with_setup(case, construct_over(optimizer_cls, case.params, params, kwargs)) for params, kwargs in ref_groups]
        for params, kwargs in [g for _ in range(copies) for g in groups_of(in_backward, case)]:
            torch_api.apply_optimizer_in_backward(binding_base_optimizers(optimizer_cls, kwargs, case.params, setup_of(case)), params, kwargs)

        features = getattr(model_factory(case), "in_features", IN_FEATURES)
        inputs, loss_fn = make_data(case.data, case.device, batch=4, features=features, dtype=param_dtype(case))
        result = InBackwardRun(_values(model), [], [], 0, 0, False, 0)
        try:
            for step in range(in_backward_section(case).steps):
                seed_all(case.seed + 1 + step, case)
                loss_fn(reference(inputs)).backward()
                if per_param:
                    for p in order:
                        for opt in ref_opts.get(id(p), []):
                            opt.step()
                    order.clear()
                else:
                    for opt in optimizers:
                        opt.step()
                reference.zero_grad(set_to_none=True)
                seed_all(case.seed + 1 + step, case)
                loss_fn(in_backward(inputs)).backward()
                result.reference.append(_values(reference))
                result.in_backward.append(_values(in_backward))
        except Exception as exc:  # the optimizer's (or torch's) error: the check weighs it after the steps before it
            result.failure = exc
        found = torch_api.in_backward_optimizers(in_backward)
        stored = [opt for p in in_backward.parameters() for opt in torch_api.optimizers_on_param(p)]
        result.found, result.stored = len(found), len(stored)
        result.found_are_stored = set(map(id, found)) == set(map(id, stored))
        result.covered = sum(1 for p in in_backward.parameters() if torch_api.optimizers_on_param(p))
        return result


def _values(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def matches_per_param_reference(case: Case, tied: bool = False, copies: int = 1) -> bool:
    """Whether in-backward equals one optimizer per param stepped in hook order at every step, where
    it differed from the spec's reference (one optimizer a group): then the optimizer couples params
    or draws random numbers, and in-backward did what it promises (run on a red only)."""
    section = in_backward_section(case)
    if section.per_parameter is not None:
        return False
    probe = replace(case, sections={**case.sections, SECTION_KEY: section.model_copy(update={"per_parameter": "probe"})})
    run = run_in_backward(probe, tied, copies)
    return run.failure is None and all(not value_differences("param", ref, got, case.tolerance) for _, ref, got in run.steps())


def double_step_diagnosis(case: Case) -> str | None:
    """torch's doing, when each in-backward optimizer's step ran more than once in one backward
    (in_backward_two_optimizers), else None."""
    calls, without_grad = step_calls_in_one_backward(case)
    if calls <= 1:
        return None
    return (f"torch's doing: with two optimizers applied to a param, each optimizer's step() ran {calls} times in one "
            "backward: _apply_optimizer_in_backward registers a hook per call, and every hook steps all of the param's "
            "optimizers" + (", the later ones with grad None (the first hook set it so)" if without_grad else "")
            + "; an optimizer that counts steps, or builds empty foreach lists, without grads then drifts or raises, "
            "where one step() per backward would not")


def step_calls_in_one_backward(case: Case) -> tuple[int, bool]:
    """(most step() calls one in-backward optimizer got in one backward, whether some came with no
    grad) with two optimizers applied to every param, as in_backward_two_optimizers applies them.
    torch registers one hook per _apply_optimizer_in_backward call, and each hook steps every
    optimizer of the param, then sets its grad to None."""
    optimizer_cls = resolve(case.optimizer)
    with isolated(), optimizer_globals_kept(case):
        model = make_model(case, tied=False)
        for params, kwargs in [g for _ in range(2) for g in groups_of(model, case)]:
            torch_api.apply_optimizer_in_backward(binding_base_optimizers(optimizer_cls, kwargs, case.params, setup_of(case)), params, kwargs)
        calls: dict[int, int] = {}
        without_grad = [False]

        def counting(opt: Any) -> Any:  # the instance's own step, counted: any optimizer, step hooks or not
            step = opt.step

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls[id(opt)] = calls.get(id(opt), 0) + 1
                without_grad[0] = without_grad[0] or all(p.grad is None for g in opt.param_groups for p in group_params(g))
                return step(*args, **kwargs)

            return counted

        for opt in torch_api.in_backward_optimizers(model):
            opt.step = counting(opt)
        inputs, loss_fn = make_data(case.data, case.device, batch=4, dtype=param_dtype(case),
                                    features=getattr(model_factory(case), "in_features", IN_FEATURES))
        try:
            loss_fn(model(inputs)).backward()
        except Exception:  # noqa: BLE001  # a step given no grad may raise: the calls counted before it tell
            pass
    return max(calls.values(), default=0), without_grad[0]


@dataclass
class NoHookRun:
    """One backward of the model with the optimizer applied in backward, hooked and with
    register_hook=False, and one ordinary step from the same start: params by name."""

    initial: dict[str, torch.Tensor]
    hooked: dict[str, torch.Tensor]
    unhooked: dict[str, torch.Tensor]
    stepped_once: dict[str, torch.Tensor]


def run_without_hook(case: Case) -> NoHookRun:
    optimizer_cls = resolve(case.optimizer)
    with isolated(), optimizer_globals_kept(case):
        model = make_model(case, tied=False)
        initial, hooked, unhooked, stepped = deepcopy(model), deepcopy(model), deepcopy(model), deepcopy(model)
        for m, hooks in ((hooked, True), (unhooked, False)):
            kwargs = build_kwargs(case.kwargs, case.device)
            torch_api.apply_optimizer_in_backward(binding_base_optimizers(optimizer_cls, kwargs, case.params, setup_of(case)), list(m.parameters()), kwargs,
                                                  register_hook=hooks)
        inputs, loss_fn = make_data(case.data, case.device, batch=4, dtype=param_dtype(case))
        for m in (hooked, unhooked):
            loss_fn(m(inputs)).backward()
        optimizer = make_optimizer(case, stepped)
        loss_fn(stepped(inputs)).backward()
        optimizer.step()

        return NoHookRun(_values(initial), _values(hooked), _values(unhooked), _values(stepped))
