"""The spec's `params` groups applied to a model's params: which group each param joins, and the
spec-time check that every group selects a param and every param has a group."""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Sequence
from typing import Any

from .schema import ParamGroup


def selects(group: ParamGroup, name: str, ndim: int) -> bool:
    """Whether the group's selectors (all of them) hold for a param; a group without any selects nothing here."""
    if group.selects_rest:
        return False
    return ((group.names is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in group.names))
            and (group.ndim is None or ndim in group.ndim)
            and (group.min_ndim is None or ndim >= group.min_ndim))


def assign(groups: Sequence[ParamGroup], params: Sequence[tuple[str, int]]) -> tuple[list[list[int]], list[str]]:
    """(param indices per group, names of params no group takes) for params given as (name, ndim).
    A param joins the first group that selects it, else the group without selectors."""
    rest = next((i for i, g in enumerate(groups) if g.selects_rest), None)
    members: list[list[int]] = [[] for _ in groups]
    unmatched: list[str] = []
    for index, (name, ndim) in enumerate(params):
        chosen = next((i for i, g in enumerate(groups) if selects(g, name, ndim)), rest)
        if chosen is None:
            unmatched.append(name)
        else:
            members[chosen].append(index)
    return members, unmatched


def describe(group: ParamGroup) -> str:
    selectors = {k: v for k, v in (("names", group.names), ("ndim", group.ndim), ("min_ndim", group.min_ndim)) if v is not None}
    shown = ", ".join(f"{k}: {v}" for k, v in selectors.items()) or "the rest"
    return f"{shown} as {group.argument}" if group.argument else shown


def assignment_problem(groups: Sequence[ParamGroup], params: Sequence[tuple[str, int]]) -> tuple[int | None, str] | None:
    """(index of the group at fault or None, why) when a group selects no param or a param has no group."""
    members, unmatched = assign(groups, params)
    for index, (group, taken) in enumerate(zip(groups, members)):
        if not taken:
            return index, (f"group {index} ({describe(group)}) selects none of the model's params "
                           f"{[f'{n} ({d}-D)' for n, d in params]}")
    if unmatched:
        return None, (f"no group takes {unmatched}; add a group without names, ndim and min_ndim for the rest")
    return None


@functools.lru_cache(maxsize=64)
def model_param_shapes(model_path: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """(name, shape) of each unique param of the spec's model built on CPU, or None when it cannot be
    built here (the run will say why); for spec-time checks of name and shape selectors."""
    from ..harness.isolation import rngs_kept  # torch loads only where a model is built: loading a spec stays light
    from .values import resolve

    try:
        with rngs_kept():  # its init draws from torch's RNG, not the user's session's
            model: Any = resolve(model_path)(device="cpu")
        return tuple((name, tuple(p.shape)) for name, p in model.named_parameters())
    except Exception:  # noqa: BLE001  # a model that needs another device is checked when it runs
        return None
