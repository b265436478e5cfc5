"""Record ModTracker's view of a forward and backward pass as a list of events."""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..spec.values import build_kwargs, resolve
from . import torch_api

KINDS = ("pre_fw", "post_fw", "pre_bw", "post_bw")


@dataclass(frozen=True)
class HookEvent:
    """One ModTracker user-hook call: which hook, on which module (its fully qualified name, or
    None once the module is gone), whether that name was in `tracker.parents` and whether the
    tracker was in backward at that moment, and the whole parents set."""

    kind: str
    module: str | None
    in_parents: bool
    is_bw: bool
    parents: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"HookEvent({self.kind!r}, {self.module!r}, in_parents={self.in_parents}, is_bw={self.is_bw})"

    @property
    def is_mark(self) -> bool:
        """Recorded by the model through `mark()`, not by a ModTracker hook."""
        return self.kind.startswith("mark:")

    def short(self, with_parents: bool = False) -> str:
        """'pre_fw  Bar.foo [P-]': P = in parents, B = in backward; optionally the parents set."""
        flags = ("P" if self.in_parents else "-") + ("B" if self.is_bw else "-")
        text = f"{self.kind:<7} {self.module or '<deleted>'} [{flags}]"
        return f"{text} {{{', '.join(sorted(self.parents))}}}" if with_parents else text


_ACTIVE: contextvars.ContextVar[tuple[Any, list] | None] = contextvars.ContextVar("optimtest_hook_recording", default=None)


def mark(label: str) -> None:
    """From inside a model (its forward, or a tensor hook in backward): record a 'mark:<label>'
    event with the tracker's parents and is_bw at that moment. A no-op outside a recording."""
    active = _ACTIVE.get()
    if active is not None:
        tracker, events = active
        events.append(HookEvent(f"mark:{label}", None, False, tracker.is_bw, frozenset(tracker.parents)))


class HookRecording(list):
    """The events in order; `after_backward` holds (tracker.is_bw, tracker.parents) seen right
    after each iteration's backward, still inside the tracker."""

    after_backward: list[tuple[bool, frozenset[str]]]


def record_hook_order(
    model: torch.nn.Module | Callable[[], torch.nn.Module],
    inputs: Any,
    *,
    loss: Callable[[Any], torch.Tensor] | None = None,
    backward: bool = True,
    iterations: int = 1,
    drop_model_before_backward: bool = False,
) -> HookRecording:
    """Run forward (and backward of `loss(output)`, default: sum of the output) under a
    ModTracker and return every user-hook event in order.

    `inputs` is passed as model(*inputs) when a tuple, else model(inputs); a callable is
    called afresh each iteration. `drop_model_before_backward` needs `model` to be a factory,
    so that the recorder holds the only reference to what it deletes.
    """
    if drop_model_before_backward and isinstance(model, torch.nn.Module):
        raise TypeError("drop_model_before_backward needs a model factory: the caller's reference would keep the model alive")
    loss = loss or _sum_of
    events = HookRecording()
    events.after_backward = []
    tracker = torch_api.mod_tracker()

    def record(kind: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module | None, *_: Any) -> None:
            fqn = tracker.get_known_fqn(module) if module is not None else None
            parents = frozenset(tracker.parents)
            events.append(HookEvent(kind, fqn, fqn in parents, tracker.is_bw, parents))

        return hook

    tracker.register_user_hooks(*(record(kind) for kind in KINDS))
    box = [model if isinstance(model, torch.nn.Module) else model()]  # _run may need to drop the only reference
    token = _ACTIVE.set((tracker, events))
    try:
        _run(tracker, box, inputs, loss, backward, iterations, drop_model_before_backward, events)
    finally:
        _ACTIVE.reset(token)
    return events


def _run(tracker: Any, box: list, inputs: Any, loss: Callable, backward: bool, iterations: int,
         drop_model_before_backward: bool, events: HookRecording) -> None:
    for _ in range(iterations):
        args = inputs() if callable(inputs) else inputs
        with tracker:
            out = box[0](*args) if isinstance(args, tuple) else box[0](args)
            if backward:
                result = loss(out)
                del out
                if drop_model_before_backward:
                    alive = weakref.ref(box.pop())
                    if alive() is not None:
                        raise RuntimeError("drop_model_before_backward: the model is still referenced elsewhere")
                result.backward()
                events.after_backward.append((tracker.is_bw, frozenset(tracker.parents)))
        if drop_model_before_backward:
            break


def _sum_of(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.sum()
    if isinstance(out, dict):
        return sum(_sum_of(v) for v in out.values())
    if isinstance(out, (list, tuple)):
        return sum(_sum_of(v) for v in out)
    raise TypeError(f"cannot sum a model output of type {type(out).__name__}; pass loss=")


@dataclass(frozen=True)
class _Call:
    pre: bool
    module: str
    nodes: tuple[Any, ...]  # autograd nodes of the input (pre) or output (post) tensors that need grad


def derive_hook_order(
    model: torch.nn.Module, inputs: Any, *, backward: bool = True, iterations: int = 1,
    drop_model_before_backward: bool = False,
) -> list[HookEvent]:
    """The events ModTracker should report, derived without ModTracker.

    Forward: the module call order, from plain module hooks. Backward: a module's pre_bw fires
    when the grads of its outputs arrive and its post_bw when those of its inputs do. Grads
    arrive in reverse order of the autograd nodes' creation; events waiting on the same node
    fire in the order their forward events registered them. Outputs that need no grad fire no
    pre_bw; modules whose inputs need no grad report post_bw as backward ends, innermost first.
    With `drop_model_before_backward`, backward events name no module (ModTracker forgot it).
    """
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    root = type(model).__name__
    names = {id(m): f"{root}.{name}" if name else root for name, m in model.named_modules()}
    calls: list[_Call] = []

    def pre(module: torch.nn.Module, args: Any) -> None:
        if id(module) in names:
            calls.append(_Call(True, names[id(module)], _grad_nodes(args)))

    def post(module: torch.nn.Module, args: Any, out: Any) -> None:
        if id(module) in names:
            calls.append(_Call(False, names[id(module)], _grad_nodes(out)))

    events: list[HookEvent] = []
    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
    try:
        for _ in range(iterations):
            calls.clear()
            args = inputs() if callable(inputs) else inputs
            out = model(*args) if isinstance(args, tuple) else model(args)
            events += [HookEvent("pre_fw" if c.pre else "post_fw", c.module, True, False) for c in calls]
            if backward:
                gone = drop_model_before_backward
                events += [HookEvent(e.kind, None, False, True) if gone else e for e in _backward_events(calls)]
            del out
            if drop_model_before_backward:
                break
    finally:
        for handle in handles:
            handle.remove()
    return events


def _backward_events(calls: list[_Call]) -> list[HookEvent]:
    first_seen: dict[int, int] = {}
    for k, call in enumerate(calls):
        for node in call.nodes:
            first_seen.setdefault(id(node), k)
    waiting = [  # (when its grad arrives: later-created nodes first, then registration order, event)
        (-max(first_seen[id(n)] for n in call.nodes), k, HookEvent("post_bw" if call.pre else "pre_bw", call.module, True, True))
        for k, call in enumerate(calls)
        if call.nodes
    ]
    ordered = [event for *_, event in sorted(waiting, key=lambda w: (w[0], w[1]))]
    if not torch_api.mod_tracker_ends_backward_with_post_bw():  # torch 2.6: no post_bw for them at all
        return ordered
    # Modules whose inputs need no grad: post_bw when backward ends, innermost first.
    return ordered + [HookEvent("post_bw", c.module, True, True) for c in reversed(calls) if c.pre and not c.nodes]


def _grad_nodes(value: Any) -> tuple[Any, ...]:
    tensors = [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.requires_grad]
    return tuple(t.grad_fn if t.grad_fn is not None else t for t in tensors)


def record_case(case: Any) -> tuple[HookRecording, list[HookEvent]]:
    """A hook-order case's observed events, and the order derived from its module tree where the
    spec's `expected` is `derive` (else empty)."""
    def make_model() -> torch.nn.Module:
        return resolve(case.model)(**build_kwargs(case.model_kwargs, "cpu"))

    inputs = resolve(case.inputs)
    options: dict[str, Any] = dict(backward=case.backward, iterations=case.iterations,
                                   drop_model_before_backward=case.drop_model_before_backward)
    observed = record_hook_order(make_model if case.drop_model_before_backward else make_model(), inputs, **options)
    derived = derive_hook_order(make_model(), inputs, **options) if case.expected == "derive" else []
    return observed, derived
