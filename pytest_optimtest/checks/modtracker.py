"""ModTracker hook order: observed events against a written or derived sequence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..harness.hook_recorder import HookEvent
from .base import Check, NotApplicable, Verdict

CONTEXT = 3  # events shown before the first divergence
AFTER = 6  # and after it


def check_hook_order(case: Any, runs: Any) -> Verdict:
    """ModTracker reports exactly the expected events, in order; each side of a failure is
    shown aligned, with the first divergence marked."""
    observed, derived_order = runs.hook_order(case)
    if case.expected is None:
        raise NotApplicable(f"{case.id}: no expected sequence for this torch version ({case.expected_where}); observed:\n"
                            + "\n".join(e.short() for e in observed))
    derived = case.expected == "derive"
    observed, expected = _compared(case, observed, derived_order)
    if not observed:
        raise AssertionError(f"{case.id}: ModTracker reported no events: nothing was compared")
    source = "derived from the module tree and the forward call order" if derived else case.expected_where
    problem = first_divergence(expected, observed)
    if problem is not None:
        raise AssertionError(f"{case.id}: hook order differs from the expected ({source}):\n" + side_by_side(expected, observed, problem))
    if case.after_backward is not None:
        want = (case.after_backward.is_bw, frozenset(case.after_backward.parents))
        for i, seen in enumerate(observed.after_backward):
            if seen != want:
                raise AssertionError(f"{case.id}: after backward {i + 1}, tracker.is_bw={seen[0]} and parents={sorted(seen[1])}; "
                                     f"expected is_bw={want[0]} and parents={sorted(want[1])}")
    return Verdict(f"{len(observed)} events as expected ({'derived' if derived else 'written'})",
                   {"events_compared": len(observed), "expected_from": "derived" if derived else "written",
                    "after_backward_checked": len(observed.after_backward) if case.after_backward is not None else 0})


def _compared(case: Any, observed: Any, derived_order: list[HookEvent]) -> tuple[Any, list[HookEvent]]:
    """The observed and expected events the case compares (the expected: derived, or the spec's)."""
    keep = _kept(case)
    expected = derived_order if case.expected == "derive" else [_event(e) for e in case.expected]
    return _filtered(observed, keep), [e for e in expected if keep(e)]


def _kept(case: Any) -> Callable[[HookEvent], bool]:
    """Which events the case compares: marks, hooks, or all (a derived order knows hooks only)."""
    if case.compare == "marks":
        return lambda e: e.is_mark
    if case.compare == "hooks" or case.expected == "derive":
        return lambda e: not e.is_mark
    return lambda e: True


def hook_order_metrics(case: Any, runs: Any) -> dict[str, Any]:
    """For update mode: the observed order, where it differs from the running release's entry (or
    there is none), under that release's key (with the parents sets where the spec gives them); a
    spec whose `expected` is one list for every release becomes a mapping, the list kept under '*'."""
    recorded = runs.peek("hook_order", case)
    if recorded is None or case.expected == "derive" or not case.torch_version:
        return {}
    if case.expected is None:
        observed = _filtered(recorded[0], _kept(case))
    else:
        observed, expected = _compared(case, *recorded)
        if first_divergence(expected, observed) is None:
            return {}
    entries = case.written.values() if isinstance(case.written, dict) else [case.written]
    with_parents = any(e.parents is not None for entry in entries if isinstance(entry, list) for e in entry)
    events = [{"event": e.kind, "module": e.module, "in_parents": e.in_parents, "is_bw": e.is_bw, "parents": sorted(e.parents)}
              if with_parents else [e.kind, e.module, e.in_parents, e.is_bw] for e in observed]
    if isinstance(case.written, dict):
        declared = case.written.get(case.torch_version)
        update = {"path": ["expected", case.torch_version], "declared": _written(declared), "observed": events}
    else:
        update = {"path": ["expected"], "declared": _written(case.written),
                  "observed": {"*": _written(case.written), case.torch_version: events}}
    return {"updates": [update]}


def _written(events: Any) -> Any:
    """Spec events as they are written: the list shorthand, or a mapping where parents are given."""
    if not isinstance(events, list):
        return events
    return [[e.event, e.module, e.in_parents, e.is_bw] if e.parents is None else e.model_dump() for e in events]


def _filtered(events: Any, keep: Any) -> Any:
    kept = type(events)(e for e in events if keep(e))
    kept.after_backward = events.after_backward
    return kept


def _event(spec: Any) -> HookEvent:
    given = spec.parents is not None
    return _Expected(spec.event, spec.module, spec.in_parents, spec.is_bw, frozenset(spec.parents or ()), given)


@dataclass(frozen=True)
class _Expected(HookEvent):
    """An expected event; compares `parents` only when the spec gave them."""

    check_parents: bool = False

    def short(self, with_parents: bool = False) -> str:
        return super().short(with_parents or self.check_parents)


def _matches(expected: HookEvent, observed: HookEvent) -> bool:
    same = (expected.kind, expected.module, expected.in_parents, expected.is_bw) == (
        observed.kind, observed.module, observed.in_parents, observed.is_bw)
    if getattr(expected, "check_parents", False):
        same = same and expected.parents == observed.parents
    return same


def first_divergence(expected: list[HookEvent], observed: list[HookEvent]) -> int | None:
    """Index of the first event that differs (or that one side lacks); None when equal."""
    for i, (e, o) in enumerate(zip(expected, observed)):
        if not _matches(e, o):
            return i
    return None if len(expected) == len(observed) else min(len(expected), len(observed))


def side_by_side(expected: list[HookEvent], observed: list[HookEvent], at: int) -> str:
    """Both sequences in two aligned columns around the first divergence, which is marked '>>'.
    Flags: P = module in tracker.parents, B = tracker.is_bw."""
    def cell(events: list[HookEvent], i: int, parents: bool = False) -> str:
        return events[i].short(parents) if i < len(events) else "(none)"

    show_parents = any(getattr(e, "check_parents", False) for e in expected)
    start, stop = max(0, at - CONTEXT), min(max(len(expected), len(observed)), at + AFTER + 1)
    rows = [(cell(expected, i), cell(observed, i, show_parents)) for i in range(start, stop)]
    width = max(len("expected"), *(len(e) for e, _ in rows))
    lines = [f"     {'#':>3}  {'expected':<{width}}   observed"]
    if start:
        lines.append(f"     {'...':>3}")
    for i, (e, o) in zip(range(start, stop), rows):
        mark = ">> " if i == at else "   "
        sep = "|" if i != at else "≠"
        lines.append(f"  {mark}{i:>3}  {e:<{width}} {sep} {o}")
    if stop < max(len(expected), len(observed)):
        lines.append(f"     {'...':>3}")
    lines.append(f"  first divergence at event {at}; {len(expected)} events expected, {len(observed)} observed "
                 "(flags: P = module in tracker.parents, B = tracker.is_bw)")
    return "\n".join(lines)


CHECK = Check("hook_order", check_hook_order, "ModTracker hook order equals the spec's (hook_order specs only)", "hook_order",
              metrics=hook_order_metrics,
              proves=("Hook-order specs only: ModTracker reports the module hooks (and the model's marks) in the spec's order, or the order derived "
                      "from the module tree. Evidence: the events compared."),
              red=("Events differ: torch's ModTracker (or activation checkpointing) changed between releases, or the model's hooks are wrong; key "
                   "`expected` by torch release where torch changed."))
