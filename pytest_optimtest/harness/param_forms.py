"""What the optimizer's constructor is given as its params: the spec's `params` form (a list,
named params, the model itself, param groups, or none of its own where it wraps a base optimizer
built over them) applied to a model or to loose params."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..spec.param_groups import assign, describe
from ..spec.values import BaseOptimizer, bind_base_optimizers, build_kwargs
from .snapshot import record_construction
from .vacuity import NotApplicable


def named_params(source: torch.nn.Module | Iterable[Any]) -> list[tuple[str, torch.Tensor]]:
    """A module's named params; loose params are named p0, p1, ... (and (name, param) pairs kept)."""
    if isinstance(source, torch.nn.Module):
        return list(source.named_parameters())
    return [item if isinstance(item, tuple) else (f"p{index}", item) for index, item in enumerate(source)]


def constructor_params(form: Any, source: torch.nn.Module | Iterable[Any], device: str) -> Any:
    """The params argument of the optimizer's constructor for the spec's `params` form (for forms
    that pass them as one argument; see constructor_arguments for the general case). A wrapper's are
    its base optimizer's: the plain list."""
    if form == "wrapped":
        return [p for _, p in named_params(source)]
    args, keywords = constructor_arguments(form, source, device)
    if keywords:
        raise NotApplicable(f"the optimizer takes its params in several arguments ({', '.join(keywords)}), and "
                            "this check hands them over as one")
    return args[0]


def constructor_arguments(form: Any, source: torch.nn.Module | Iterable[Any], device: str) -> tuple[tuple, dict[str, Any]]:
    """(positional, keyword) arguments that give the optimizer's constructor its params in the
    spec's `params` form: a list, named params, the model, param groups, or groups by argument; none
    where it wraps an optimizer (`wrapped`: the base optimizer in its kwargs is built over them)."""
    if form == "wrapped":
        return (), {}
    if form == "model":
        if not isinstance(source, torch.nn.Module):
            raise NotApplicable("the optimizer takes the model itself (params: model), and this check steps loose "
                                "params, not a model")
        return (source,), {}
    named = named_params(source)
    if form == "named":
        return (named,), {}
    if form == "list":
        return ([p for _, p in named],), {}
    members, unmatched = assign(form, [(n, p.dim()) for n, p in named])
    if unmatched:
        raise ValueError(f"the spec's params groups take none of {unmatched}: add a group without names, ndim and "
                         "min_ndim for the rest")
    if form[0].argument is not None:  # every group names its argument: a plain list of params for each
        keywords: dict[str, list] = {}
        for group, taken in zip(form, members):
            keywords.setdefault(group.argument, []).extend(named[i][1] for i in taken)
        return (), keywords
    # A group that selects none of these params is left out: loose params (fuzzed shapes) need not fill every group.
    return ([{"params": [named[i][1] for i in taken], **build_kwargs(group.options, device)}
             for group, taken in zip(form, members) if taken],), {}


def construct(optimizer_cls: Any, form: Any, source: torch.nn.Module | Iterable[Any], kwargs: dict[str, Any],
              device: str) -> Any:
    """`optimizer_cls` given `source`'s params in the `params` form, and built `kwargs`."""
    args, params = constructor_arguments(form, source, device)
    return instantiate(optimizer_cls, args, params, kwargs, [p for _, p in named_params(source)] if form == "wrapped" else None)


def construct_over(optimizer_cls: Any, form: Any, params: list[Any], kwargs: dict[str, Any]) -> Any:
    """`optimizer_cls` over a plain list of params (one optimizer per param, in backward), in the list
    form or, for a wrapper, through its base optimizer."""
    wrapped = form == "wrapped"
    return instantiate(optimizer_cls, () if wrapped else (params,), {}, kwargs, params if wrapped else None)


def instantiate(optimizer_cls: Any, args: tuple, params: dict[str, Any], kwargs: dict[str, Any],
                over: list[Any] | None = None) -> Any:
    """`optimizer_cls(*args, **params, **kwargs)`, where `args` and `params` hold its params, and a
    kwarg that is a base optimizer (`{optimizer: ...}`) is built over those same params (over `over`,
    params or param groups, where the constructor takes none of its own)."""
    if isinstance(optimizer_cls, functools.partial) and any(isinstance(v, BaseOptimizer) for v in optimizer_cls.keywords.values()):
        kwargs = {**optimizer_cls.keywords, **kwargs}  # init's probes give required arguments by partial
        args, optimizer_cls = (*optimizer_cls.args, *args), optimizer_cls.func
    if any(isinstance(v, BaseOptimizer) for v in kwargs.values()):
        kwargs = bind_base_optimizers(kwargs, _tensors_in([*args, *params.values()]) if over is None else over)
    optimizer = optimizer_cls(*args, **params, **kwargs)
    record_construction(optimizer)
    return optimizer


def binding_base_optimizers(optimizer_cls: Any, kwargs: dict[str, Any], form: Any = "list",
                            setup: Callable[[Any], Any] | None = None) -> Any:
    """What to hand a constructor of torch's that builds the optimizer itself as `cls(params, **kwargs)`
    (`_apply_optimizer_in_backward`, ZeroRedundancyOptimizer): the class, or where `kwargs` hold a base
    optimizer, a function that builds it over the params given; either running the spec's `setup` on what
    it built (schedule-free's train mode), where the spec has one."""
    bound = (functools.partial(lambda cls, params, **given: construct_over(cls, form, list(params), given), optimizer_cls)
             if any(isinstance(v, BaseOptimizer) for v in kwargs.values()) else optimizer_cls)
    if setup is None:
        return bound

    def set_up(params: Any, **given: Any) -> Any:
        optimizer = bound(params, **given)
        setup(optimizer)
        return optimizer

    return set_up


def _tensors_in(value: Any) -> list[torch.Tensor]:
    """The params in a constructor's params argument, in order: a list of tensors, of (name, tensor)
    pairs, of param group dicts, or a module."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, torch.nn.Module):
        return list(value.parameters())
    if isinstance(value, dict):
        return _tensors_in(value.get("params", []))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _tensors_in(value[1])
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors_in(item)]
    return []


def form_name(form: Any) -> str:
    """The form in words, for messages."""
    if form == "wrapped":
        return "none of its own (wrapped: through the base optimizer in its kwargs)"
    if isinstance(form, str):
        return form
    return "groups [" + "; ".join(describe(g) for g in form) + "]"
