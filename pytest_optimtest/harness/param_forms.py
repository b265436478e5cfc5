"""What the optimizer's constructor is given as its params: the spec's `params` form (a list,
named params, the model itself, or param groups) applied to a model or to loose params."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..spec.param_groups import assign, describe
from ..spec.values import build_kwargs
from .vacuity import NotApplicable


def named_params(source: torch.nn.Module | Iterable[Any]) -> list[tuple[str, torch.Tensor]]:
    """A module's named params; loose params are named p0, p1, ... (and (name, param) pairs kept)."""
    if isinstance(source, torch.nn.Module):
        return list(source.named_parameters())
    return [item if isinstance(item, tuple) else (f"p{index}", item) for index, item in enumerate(source)]


def constructor_params(form: Any, source: torch.nn.Module | Iterable[Any], device: str) -> Any:
    """The first argument of the optimizer's constructor for the spec's `params` form."""
    if form == "model":
        if not isinstance(source, torch.nn.Module):
            raise NotApplicable("the optimizer takes the model itself (params: model), and this check steps loose "
                                "params, not a model")
        return source
    named = named_params(source)
    if form == "named":
        return named
    if form == "list":
        return [p for _, p in named]
    members, unmatched = assign(form, [(n, p.dim()) for n, p in named])
    if unmatched:
        raise ValueError(f"the spec's params groups take none of {unmatched}: add a group without names, ndim and "
                         "min_ndim for the rest")
    # A group that selects none of these params is left out: loose params (fuzzed shapes) need not fill every group.
    return [{"params": [named[i][1] for i in taken], **build_kwargs(group.options, device)}
            for group, taken in zip(form, members) if taken]


def form_name(form: Any) -> str:
    """The form in words, for messages."""
    if isinstance(form, str):
        return form
    return "groups [" + "; ".join(describe(g) for g in form) + "]"
