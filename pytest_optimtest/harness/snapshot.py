"""Frozen copies of an optimizer's observable state, for comparing two runs."""

from __future__ import annotations

import inspect
import re
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from . import torch_api
from .devices import generators_in

SIMPLE = (bool, int, float, str, type(None))


# The sequences an optimizer's state may hold and the walkers below go into: a deque too (an L-BFGS
# history of tensors; left as it is, a snapshot would hold the live deque, and its `==` raises on tensors).
SEQUENCES = (list, tuple, deque)


def rebuilt(value: list | tuple | deque, items: Any) -> Any:
    """A sequence of `value`'s type holding `items`: a namedtuple (state QUTEN keeps) takes them one by one."""
    if isinstance(value, deque):
        return deque(items, value.maxlen)
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


def freeze(value: Any, names: dict[int, str] | None = None, depth: int = 0) -> Any:
    """A detached copy of tensors and NumPy arrays (also inside lists, tuples and dicts); an object
    with a state_dict (an optimizer inside the optimizer's state) as its state_dict, a generator as
    its state, another object of the optimizer's own (a schedule in a group, RMSGD's metrics) as its
    fields, two levels deep, a param among them by its name; other values as they are.

    A dict keyed by tensors (a group's {param: value}) is keyed by what the keys are, not by
    their identity, so the twins of two runs line up: a param by its name, another tensor by
    its position among the keys."""
    if isinstance(value, torch.Tensor):
        name = (names or {}).get(id(value)) if depth else None  # a param an object refers to: compared as a param
        return f"<param {name}>" if name is not None else frozen_tensor(value)
    if isinstance(value, SEQUENCES):
        return rebuilt(value, (freeze(v, names, depth) for v in value))
    if isinstance(value, dict):
        return {_key(k, i, names): freeze(v, names, depth) for i, (k, v) in enumerate(value.items())}
    if stateful(value):  # copied as it is now: the live object moves on with later steps
        return {f"<{type(value).__qualname__}.state_dict()>": freeze(value.state_dict(), names)}
    if isinstance(value, torch.Generator):
        return {"<Generator.get_state()>": value.get_state()}
    if is_numpy(value):
        return value.copy()
    if own_object(value):  # as it is now, for the same reason; nested ones by their type alone (no cycle followed)
        fields = {k: freeze(v, names, depth + 1) for k, v in vars(value).items() if not callable(v)} if depth < 2 else "..."
        return {f"<{type(value).__qualname__}>": fields}
    return value


def params_in_groups(groups: list[dict[str, Any]]) -> list[str]:
    """The entries of frozen param groups (their params aside) that refer to the optimizer's params:
    an object holding them (RMSGD's metrics), a dict keyed by them."""
    return [f"param_groups[{i}][{key!r}]" for i, group in enumerate(groups) for key, value in group.items()
            if _names_a_param(value)]


def _names_a_param(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("<param ")
    if isinstance(value, dict):
        return any(map(_names_a_param, value)) or any(map(_names_a_param, value.values()))
    return isinstance(value, SEQUENCES) and any(map(_names_a_param, value))


def params_in_groups_diagnosis(groups: list[dict[str, Any]], regime: str) -> str:
    """Why state held in param groups that refers to params does not survive `regime`; '' where none does."""
    held = params_in_groups(groups)
    if not held:
        return ""
    return (f"\n  diagnosis: the optimizer's param groups refer to its params ({', '.join(held)}), and {regime}: the "
            "optimizer's doing (keep what refers to params out of param_groups, or bind it anew on load)")


def tensor_attributes(optimizer: Any, by_id: dict[int, str]) -> tuple[str, ...]:
    """State the optimizer keeps as attributes of its state tensors: a `.grad` set on one (adancfgd's
    `state['param_prev'].grad`), a Python attribute. A checkpoint saves a tensor's values, not these."""
    found = []
    for key, entry in per_param_state(optimizer).items():
        for name, value in entry.items() if isinstance(entry, dict) else ():
            if not isinstance(value, torch.Tensor) or id(value) in by_id:
                continue
            held = ([".grad"] if _holds_grad(value) else []) + [f".{a}" for a in vars(value)]
            found += [f"state[{name!r}]{attribute} of {by_id.get(id(key), '?')}" for attribute in held]
    return tuple(found)


def _holds_grad(tensor: torch.Tensor) -> bool:
    try:
        return tensor.is_leaf and tensor.grad is not None
    except RuntimeError:  # a view made under no_grad of a param since changed in place (Adams_ZeRO's `p.view(-1)` as
        return False  # its master copy): autograd refuses to read its history, and it holds no grad of its own


def tensor_attributes_diagnosis(found: tuple[str, ...], saved_by: str) -> str:
    """Why state kept in tensor attributes does not survive `saved_by`; '' where there is none."""
    if not found:
        return ""
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    return (f"\n  diagnosis: the optimizer keeps state as attributes of its state tensors ({shown}), and {saved_by} saves "
            "a tensor's values, not its attributes: a load leaves them as the loading optimizer had them. The "
            "optimizer's doing (keep that state as an entry of its own in self.state)")


def unsaved_generators(optimizer: Any, saved: Any) -> tuple[str, ...]:
    """The torch.Generators the optimizer keeps as attributes (timm's Adahessian's `self.generator`), has drawn
    from, and whose state its state_dict `saved` does not hold: an optimizer that loads it draws from its own
    generator's start again, not where the saved run was."""
    held = generators_in(getattr(optimizer, "__dict__", {}), "self.")
    if not held:  # most optimizers: no state_dict to walk
        return ()
    saved_states = _byte_tensors(saved)
    return tuple(name for name, generator in held.items() if _drawn_from(generator)
                 and not any(torch.equal(generator.get_state(), state) for state in saved_states))


def _drawn_from(generator: torch.Generator) -> bool:
    """Whether its state moved on from its seed's (a generator seeded and never drawn from needs no saving)."""
    fresh = torch.Generator(generator.device).manual_seed(generator.initial_seed())
    return not torch.equal(fresh.get_state(), generator.get_state())


def _byte_tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The uint8 tensors in a state_dict's containers (where a generator's saved state would be), six levels deep."""
    if isinstance(value, torch.Tensor):
        return [value] if value.dtype == torch.uint8 else []
    if depth >= 6 or not isinstance(value, (dict, list, tuple)):
        return []
    return [t for v in (value.values() if isinstance(value, dict) else value) for t in _byte_tensors(v, depth + 1)]


def unsaved_generators_diagnosis(found: tuple[str, ...]) -> str:
    """Why a run resumed from the optimizer's state_dict draws other random numbers; '' where nothing says so."""
    if not found:
        return ""
    return (f"\n  diagnosis: the optimizer draws from a torch.Generator of its own ({', '.join(found)}) whose state its "
            "state_dict does not hold: an optimizer that loads it draws from its generator's seed again, not where the "
            "saved run was, so a resumed run draws other numbers than the run that never stopped: the optimizer's doing "
            "(save `generator.get_state()` in state_dict and `set_state` it on load)")


def is_numpy(value: Any) -> bool:
    """A NumPy array or scalar (by its module: NumPy is the optimizer's dependency, not ours)."""
    return type(value).__module__ == "numpy" and hasattr(value, "shape")


def own_object(value: Any) -> bool:
    """An instance of a class of the optimizer's package that keeps object's identity equality."""
    return (type(value).__eq__ is object.__eq__ and hasattr(value, "__dict__") and not isinstance(value, type)
            and not inspect.isroutine(value) and not inspect.ismodule(value))


def stateful(value: Any) -> bool:
    """An object with a state_dict() that takes no arguments (an inner optimizer, a module, a scheduler):
    two runs' twins are equal by their state_dicts, never by identity. One whose state_dict wants arguments
    (flashoptim's quantized state tensor: `state_dict(name)`) is an object of the optimizer's own."""
    method = getattr(value, "state_dict", None)
    if not callable(method) or isinstance(value, type):
        return False
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a C method): torch's own, which take none
        return True
    return not any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                   for p in parameters)


def frozen_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A detached copy. A tensor subclass that cannot copy itself (torchao's quantized optimizer state
    implements only the ops its step uses) is copied as the values it stands for, by its dequantize()."""
    try:
        return tensor.detach().clone()
    except NotImplementedError:
        if type(tensor) is torch.Tensor:
            raise
        return tensor.dequantize().detach().clone()


def _key(key: Any, position: int, names: dict[int, str] | None) -> Any:
    if not isinstance(key, torch.Tensor):
        return key
    name = (names or {}).get(id(key))
    return f"<param {name}>" if name is not None else f"<tensor key #{position}>"


def _is_plain(value: Any) -> bool:
    if isinstance(value, (torch.Tensor, *SIMPLE)):
        return True
    if isinstance(value, SEQUENCES):
        return all(_is_plain(v) for v in value)
    return False


@dataclass
class OptimizerSnapshot:
    """Params, per-param state, param_groups entries and plain attributes of an optimizer."""

    params: dict[str, torch.Tensor]
    state: dict[str, dict[str, Any]]
    groups: list[dict[str, Any]]
    attrs: dict[str, Any]
    tensor_attributes: tuple[str, ...] = ()  # state kept as attributes of state tensors, which no checkpoint saves
    constructed: dict[str, Any] = field(default_factory=dict)  # its scalar attributes as its constructor left them


_CONSTRUCTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def record_construction(optimizer: Any) -> None:
    """Keep the optimizer's scalar attributes as its constructor left them, for the snapshots of its run."""
    try:
        _CONSTRUCTED[optimizer] = {k: v for k, v in vars(optimizer).items() if isinstance(v, SIMPLE)}
    except TypeError:  # no __dict__, or not weakly referable: nothing recorded, every attribute compared
        pass


def constructed_attributes(optimizer: Any) -> dict[str, Any]:
    """The scalar attributes `record_construction` kept for the optimizer, or none."""
    try:
        return _CONSTRUCTED.get(optimizer, {})
    except TypeError:
        return {}


def snapshot(optimizer: torch.optim.Optimizer, names: dict[torch.Tensor, str]) -> OptimizerSnapshot:
    by_id = {id(p): n for p, n in names.items()}
    params = {n: p.detach().clone() for p, n in names.items()}
    state = {by_id.get(id(k), _foreign_key_name(i, k)):
             {sk: freeze(sv, by_id) for sk, sv in v.items()} if isinstance(v, dict) else {"": freeze(v, by_id)}
             for i, (k, v) in enumerate(per_param_state(optimizer).items())}
    groups = [{k: freeze(v, by_id) for k, v in group_settings(g).items()} for g in getattr(optimizer, "param_groups", [])]
    attrs = {
        k: freeze(v, by_id)
        for k, v in vars(optimizer).items()
        if k not in ("state", "param_groups", "defaults") and k not in torch_api.WRAPPER_ATTRIBUTES and _is_plain(v)
    }
    return OptimizerSnapshot(params, state, groups, attrs, tensor_attributes(optimizer, by_id), constructed_attributes(optimizer))


def _foreign_key_name(position: int, key: Any) -> str:
    """How a snapshot names a state key that is no param: an int or str by its value (DoWG's group index 0,
    its 'rt2'), anything else by its position and type."""
    shown = repr(key) if isinstance(key, (int, str)) and len(repr(key)) <= 40 else f"#{position}: {type(key).__name__}"
    return f"<state key {shown}>"


def int_state_keys(state: Mapping[str, Any]) -> list[str]:
    """A snapshot's state keys that are ints but no param: torch's state_dict saves each param as its index, so
    on load such a key is read back as that param's state and the optimizer's own is gone."""
    return [name for name in state if re.fullmatch(r"<state key -?\d+>", name)]


def per_param_state(optimizer: Any) -> Mapping[Any, Any]:
    """The optimizer's per-param state, torch.optim's `state`; empty where it keeps none so (torchopt keeps its
    state in `state_groups`, which snapshots compare as an attribute)."""
    state = getattr(optimizer, "state", None)
    return state if isinstance(state, Mapping) else {}


def groups_hold_settings(optimizer: Any) -> bool:
    """Whether every param group is torch.optim's dict, with settings beside its params (torchopt's are tuples)."""
    return all(isinstance(group, Mapping) for group in getattr(optimizer, "param_groups", []))


def group_settings(group: Any) -> dict[str, Any]:
    """A param group's entries but its params; none where the group is its params alone (torchopt keeps
    each group as a tuple of tensors, its hyperparameters inside its gradient transformation)."""
    return {k: v for k, v in group.items() if k != "params"} if isinstance(group, Mapping) else {}


def group_params(group: Any) -> list[torch.Tensor]:
    """A param group's params, whether the group is torch.optim's dict or the params alone (torchopt's tuple)."""
    return list(group["params"]) if isinstance(group, Mapping) else list(group)


def tensors_in(value: Any, depth: int = 0) -> list[tuple[str, torch.Tensor]]:
    """(where, tensor) for a state entry's tensors: itself, in its containers, and in the fields of an object
    of the optimizer's own (flashoptim's quantized state keeps `_data`), two levels deep."""
    if isinstance(value, torch.Tensor):
        return [("", value)]
    if depth >= 2:
        return []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, SEQUENCES):
        items = list(enumerate(value))
    elif own_object(value):
        items = [(f".{k}", v) for k, v in vars(value).items()]
    else:
        return []
    return [(f"{k if str(k).startswith('.') else f'[{k!r}]'}{inner}", tensor)
            for k, v in items for inner, tensor in tensors_in(v, depth + 1)]


def storage_aliases(opt: torch.optim.Optimizer, model: torch.nn.Module) -> set[str]:
    """'state[key] of param shares storage with param.grad' for each state tensor that shares storage with
    a param, a grad, or a state tensor before it (inductor gave two state tensors a step made lazily one
    buffer: olmo-core's SkipStepAdamW's per-param `step` counters on torch 2.13)."""
    owners: dict[int | None, str] = {}
    for name, p in model.named_parameters():
        owners.setdefault(storage_pointer(p), name)
        if p.grad is not None:
            owners.setdefault(storage_pointer(p.grad), f"{name}.grad")
    owners.pop(None, None)
    names: dict[Any, str] = {p: n for n, p in model.named_parameters()}
    found = set()
    for param, state in getattr(opt, "state", {}).items():
        for key, entry in state.items() if isinstance(state, dict) else ():
            for inner, value in tensors_in(entry):  # inside an object of its own too (flashoptim's quantized state)
                pointer = storage_pointer(value)
                if not value.numel() or pointer is None:
                    continue
                this = f"state[{key!r}]{inner} of {names.get(param, '?')}"
                if pointer in owners:
                    found.add(f"{this} shares storage with {owners[pointer]}")
                owners.setdefault(pointer, this)
    return found


def storage_pointer(t: torch.Tensor) -> int | None:
    """The data pointer of the tensor's storage; None for a wrapper tensor subclass, which has no
    storage of its own (torchao's quantized optimizer state: its inner tensors hold the data)."""
    storage = storage_of(t)
    return storage.data_ptr() if storage is not None else None


def storage_of(t: torch.Tensor) -> torch.UntypedStorage | None:
    """The tensor's storage (holding it keeps its address taken); None for a wrapper tensor subclass, whose
    storage is there but has no data pointer to read."""
    try:
        storage = t.untyped_storage()
        storage.data_ptr()
    except RuntimeError:
        return None
    return storage
