"""How an optimizer's state_dict departs from torch.optim's layout, which ZeRO and DCP read:
{'state': {param index: {...}}, 'param_groups': [...]}."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class StateDictLayout:
    keys: list[str]  # the state_dict's own keys
    unkeyed: list[Any]  # entries under 'state' that are no param's: keys that are not a param's index
    params_held: bool = False  # its param groups hold the params themselves, not their indices

    @property
    def torch_optims(self) -> bool:
        """Whether it holds torch.optim's 'state' and 'param_groups', the groups' params as indices."""
        return {"state", "param_groups"} <= set(self.keys) and not self.params_held


def state_dict_layout(optimizer: Any) -> StateDictLayout | None:
    """The layout of `optimizer.state_dict()`; None where that raises (its own error says why)."""
    try:
        state_dict = optimizer.state_dict()
    except Exception:  # noqa: BLE001  # any error of the optimizer's own state_dict
        return None
    return layout_of(state_dict)


def layout_of(state_dict: Any) -> StateDictLayout:
    """The layout of a state_dict an optimizer gave (or a checkpoint holds)."""
    if not isinstance(state_dict, dict):
        return StateDictLayout([], [])
    state, groups = state_dict.get("state"), state_dict.get("param_groups")
    unkeyed = [key for key in state if not isinstance(key, int)] if isinstance(state, dict) else []
    held = isinstance(groups, list) and any(isinstance(group, dict) and any(isinstance(p, torch.Tensor) for p in group.get("params", ()))
                                            for group in groups)
    return StateDictLayout(sorted(map(str, state_dict)), unkeyed, held)


FOREIGN_LAYOUT = ("its state_dict is not torch.optim's {'state', 'param_groups'}, which ZeroRedundancyOptimizer and "
                  "torch.distributed.checkpoint read: the optimizer's doing")


UNKEYED_STATE = ("its state_dict keeps entries under 'state' that are no param's, where torch.optim keeps one entry "
                 "per param, keyed by its index: the optimizer's doing")  # DCP's and ZeRO's red: one root cause


def foreign_layout(optimizer: Any) -> str:
    """What the optimizer's state_dict holds where it is not torch.optim's layout (Magma's, Lookahead's:
    {'optimizer', 'lookahead', ...}), with FOREIGN_LAYOUT, the root cause ZeRO and DCP share; else ''."""
    layout = state_dict_layout(optimizer)  # None: its state_dict raised (its own error says so)
    return "" if layout is None else described_layout(type(optimizer).__name__, layout)


def described_layout(name: str, layout: StateDictLayout) -> str:
    """How the state_dict of optimizer class `name` departs from torch.optim's layout, with FOREIGN_LAYOUT; else ''."""
    if layout.torch_optims:
        return ""
    if layout.params_held:  # gradient_equilibrum's returns self.param_groups: a load binds the saved tensors, not the params
        return (f"{name}.state_dict() holds its param groups' params themselves, not their indices "
                f"(a load binds the saved tensors, copies, in place of the loading optimizer's params): {FOREIGN_LAYOUT}")
    return f"{name}.state_dict() holds {layout.keys}: {FOREIGN_LAYOUT}"


def load_rebinds(optimizer: Any) -> str:
    """Where the optimizer's `state` or `param_groups` are an inner optimizer's (a Lookahead's `self.state =
    base_optimizer.state`) and its load_state_dict is torch's, which rebinds both (Optimizer.__setstate__), so
    that after a load the inner optimizer steps with state and groups that were not loaded: what is shared; else ''."""
    if getattr(type(optimizer), "load_state_dict", None) is not torch.optim.Optimizer.load_state_dict:
        return ""
    for name, inner in vars(optimizer).items():
        if isinstance(inner, torch.optim.Optimizer) and inner is not optimizer:
            shared = [a for a in ("state", "param_groups") if getattr(inner, a, None) is getattr(optimizer, a, None)]
            if shared:
                return f"{type(optimizer).__name__}'s {' and '.join(shared)} are its {name}'s " \
                       f"({'; '.join(f'self.{a} = {name}.{a}' for a in shared)})"
    return ""
