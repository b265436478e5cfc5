"""Compiled-step parity in the situations PyTorch's compiled-optimizer tests single out:
params whose grads are None on some steps, and a closure that breaks the graph."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..harness.blame import CLOSURE_NEVER_CALLED, KnownCause, one_line
from ..harness.compare import listed, snapshot_differences
from ..harness.diagnosis import closure_rounding_only
from ..harness.ladder import COMPARED_COMPILED, COMPILED
from ..harness.runner import MissingGrads, Regime, Run
from ..harness.builder import law_closure
from ..harness.vacuity import Blocked, NotApplicable, Vacuous, require_compiled, require_moved
from ..spec.values import resolve
from .base import Check, Verdict

# Which params have grad None at each iteration (indices into the model's params; -1 = last):
# all present, the first missing, all present, all missing (PyTorch's test), the last missing.
NONE_GRAD_PATTERN: tuple[MissingGrads, ...] = ((), (0,), (), "all", (-1,), ())
NONE_GRADS_RUN = Regime(missing_grads=NONE_GRAD_PATTERN, every_step=True, closure=False)  # none_grads' eager run


def check_none_grads(case: Any, runs: Any) -> Verdict:
    """Compiled and eager match after every step, state step counters included, when some
    params have grad None on some iterations (dynamo must guard on which grads exist)."""
    eager, compiled = runs.run(case, NONE_GRADS_RUN), runs.run(case, replace(NONE_GRADS_RUN, compiled=True))
    names = list(eager.initial)
    for i, (expected, actual) in enumerate(zip(eager.snapshots, compiled.snapshots)):
        problems = snapshot_differences(expected, actual, case.tolerance)
        if problems:
            pattern = NONE_GRAD_PATTERN[i]
            missing = names if pattern == "all" else sorted(names[j % len(names)] for j in pattern)
            raise AssertionError(
                f"{case.id}: compiled differs from eager after iteration {i + 1} of {len(NONE_GRAD_PATTERN)}, "
                f"where grads were None for {missing or 'no param'}:" + listed(problems)
            )
    moved = _require_meaningful(case, eager, compiled, f"over {len(NONE_GRAD_PATTERN)} iterations (some with None grads)")
    return Verdict(f"{len(NONE_GRAD_PATTERN)} iterations with None grads equal eager; moved {moved:.3g} tol",
                   {"iterations_compared": len(NONE_GRAD_PATTERN), "step_graphs": compiled.step_graphs,
                    "moved_tolerances": round(moved, 3)})


def raises_without_grads(case: Any, runs: Any) -> str | None:
    """What the eager step raised where some params' grads are None (none_grads' run), in a line: the
    root cause of a raise in a regime whose steps come with grad None (two optimizers in backward); else None."""
    try:
        runs.run(case, NONE_GRADS_RUN)
    except Exception as exc:  # noqa: BLE001  # the optimizer's error: none_grads' red
        return one_line(exc)
    return None


def check_closure_graph_break(case: Any, runs: Any) -> Verdict:
    """`step(closure)` compiled, with a graph break inside the closure, matches eager."""
    if not law_closure(case, resolve(case.optimizer))[0]:
        raise NotApplicable(f"{case.id}: the spec declares `closure: [false]` (its step refuses a closure): there is no "
                            "step(closure) to compile")
    eager = runs.run(case, Regime(closure=True))
    compiled = runs.run(case, Regime(compiled=True, closure=True, closure_graph_break=True))
    if not eager.closure_calls:
        raise KnownCause(f"{case.id}: {case.optimizer}.step(closure) never called the closure in "
                         f"{eager.steps} eager steps: step(closure) must re-evaluate the loss with it", CLOSURE_NEVER_CALLED)
    if not compiled.graph_breaks:
        raise AssertionError(f"{case.id}: the closure's graph break never reached dynamo: nothing was tested")
    problems = snapshot_differences(eager.final, compiled.final, case.tolerance)
    if problems:
        rounding = closure_rounding_only(case, eager.draws)
        if rounding:
            raise Vacuous(f"{case.id}: vacuous: {rounding}; at float32: {problems[0].splitlines()[0]}")
        raise AssertionError(f"{case.id}: compiled step(closure) with a graph break differs from eager after "
                             f"{eager.steps} steps:" + listed(problems))
    moved = _require_meaningful(case, eager, compiled, f"over {eager.steps} steps", runs)
    breaks = sum(compiled.graph_breaks.values())
    return Verdict(f"{eager.steps} steps equal; the step's own {compiled.step_graphs} graph(s), the closure's "
                   f"{compiled.closure.graphs} apart; graph breaks: {breaks}; moved {moved:.3g} tol",
                   {"steps_compared": eager.steps, "step_graphs": compiled.step_graphs,
                    "closure_graphs": compiled.closure.graphs, "graph_breaks": breaks,
                    "closure_calls": eager.closure_calls, "moved_tolerances": round(moved, 3)})


def _require_meaningful(case: Any, eager: Run, compiled: Run, over: str, runs: Any = None) -> float:
    """Tolerances the eager run moved: the evidence, or the reason there is none. A step that
    captures no graph of its own given a closure is its closure case's root cause, where there is one."""
    why = compiled.not_compiled()
    if why and compiled.closure.graphs:
        variant = case.closure_variant() if runs is not None else None
        if variant is not None:
            failure = runs.ladder(variant).first_failure(COMPILED)
            if failure is not None:
                raise Blocked(f"{failure.blocked()} (case {variant.id}, whose parity item is that red)")
        raise AssertionError(f"{case.id}: not compiled: {why}, so matching eager proves nothing")
    require_compiled(case.id, compiled.step_graphs, "matching eager proves nothing")
    return require_moved(case.id, eager.initial, eager.final.params, case.tolerance, case.min_movement, over,
                         f"; raise lr or steps in {case.location}, or loosen min_movement")


NONE_GRADS = Check("none_grads", check_none_grads, "steps with None grads on some params match eager", "primary",
                   rungs=COMPARED_COMPILED,
                   proves=("Compiled matches eager over six steps in which some params have `None` grads, state step counters included. Evidence: "
                           "steps compared and how far the params moved."),
                   red=("The compiled step treats a missing grad unlike eager (a skipped param's counter advanced, state created): usually the "
                        "optimizer's Python branch on `p.grad is None` specialised wrongly, or torch's guard on it."))
CLOSURE_GRAPH_BREAK = Check("closure_graph_break", check_closure_graph_break,
                            "step(closure) with a graph break matches eager", "primary",
                            rungs=COMPARED_COMPILED,
                            proves=("`step(closure)` with a graph break inside the closure matches eager, and the break really happened. Evidence: "
                                    "the closure's graphs and the step's."),
                            red="The compiled step with a breaking closure differs from eager, or never calls the closure (said so).")
