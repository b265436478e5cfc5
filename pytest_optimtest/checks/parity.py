"""Eager vs compiled `optimizer.step`: params, state, param_groups and optimizer attributes."""

from __future__ import annotations

import statistics
from typing import Any

from ..harness.compare import dynamo_group_keys
from ..harness.compiled_run import CompiledRun
from ..harness.ladder import PARITY, compiled_mismatch
from ..harness.vacuity import Vacuous, require_moved
from .base import Check, Verdict


def check_parity(case: Any, runs: Any) -> Verdict:
    return assert_parity(runs.compiled(case))


def assert_parity(run: CompiledRun) -> Verdict:
    """Raise AssertionError naming every difference after the run's warm-up and steady steps;
    refuse vacuous comparisons. A step that breaks the graph is still compared (graph_breaks
    judges the breaks)."""
    case = run.case
    not_compiled = run.not_compiled()
    if not_compiled:
        raise AssertionError(f"{case.id}: not compiled: {not_compiled}, so matching eager proves nothing; graph breaks: "
                             + ("; ".join(run.break_lines()) or "none"))
    e, c = run.eager, run.compiled
    if e is None or c is None:
        raise RuntimeError(f"{case.id}: the compiled run ended before its snapshots were taken")
    mismatch = compiled_mismatch(run)  # in the plugin's items, the ladder's compiled_matches rung raised it first
    if mismatch is not None and mismatch.vacuous:  # a difference that scales with precision: rounding, no verdict
        raise Vacuous(str(mismatch))
    if mismatch is not None:  # a difference is one even where the params moved too little to prove a match
        raise mismatch
    moved = require_moved(case.id, run.initial_params, e.params, case.tolerance, case.min_movement,
                          f"over {run.steps} steps", f"; raise lr or steps in {case.location}, or loosen min_movement")
    notes = [f"the step's own {run.step_graph_count} graph(s)" + (f", the closure's {run.closure.graphs} apart"
                                                                    if run.closure.graphs else "")]
    if run.graph_breaks:
        notes.append(f"{len(run.graph_breaks)} graph-break reason(s) (graph_breaks judges them)")
    added = dynamo_group_keys(e, c)
    if added:
        notes.append(f"torch's dynamo added {', '.join(added)} = True to the compiled optimizer's groups "
                     "(OptimizerVariable._set_capturable), not compared")
    return Verdict(f"{run.steps} steps: {len(e.params)} params, {sum(map(len, e.state.values()))} state entries equal; "
                   f"moved {moved:.3g} tol" + "".join(f"; {n}" for n in notes),
                   {**run.evidence(), "steps_compared": run.steps, "moved_tolerances": round(moved, 3),
                    "params": len(e.params), "state_entries": sum(map(len, e.state.values()))})



def parity_metrics(case: Any, runs: Any) -> dict[str, Any]:
    """Kernels, compile seconds and median steady step times of the case's compiled run."""
    run = runs.peek("compiled", case)
    if run is None:
        return {}
    metrics: dict[str, Any] = {"kernels": run.kernel_count, "compile_s": round(run.compile_seconds, 4),
                               "gate": {"generated kernels": run.kernel_count}}
    if run.diagnoses:
        metrics["diagnoses"] = run.diagnoses
    steady_c, steady_e = run.compiled_step_seconds[1:], run.eager_step_seconds[1:]
    if steady_c and steady_e:
        metrics["compiled_step_s"] = statistics.median(steady_c)
        metrics["eager_step_s"] = statistics.median(steady_e)
    return metrics


CHECK = Check("parity", check_parity, "eager vs compiled step: params, state, param_groups, attributes",
              metrics=parity_metrics, rungs=PARITY,
              proves=("Params, every state value, `param_groups` and the optimizer's plain attributes are equal (tensors within the dtype's "
                      "tolerance, the rest exactly) after the compiled run's last steady step. Evidence: `step_graphs`, `closure_graphs` and "
                      "`kernels` of the step's own code (the closure's graphs counted apart), `steps_compared`, `moved_tolerances`."),
              red=("The compiled step computes another value than eager: names the param or state key, the max abs/rel difference and index, and one "
                   "`diagnosis:` line per mechanism it recognises (a state tensor aliasing a grad, RNG without `fallback_random`, aot_eager vs "
                   "inductor, bf16 rounding under `emulate_precision_casts`). Usually torch's doing when aot_eager matches eager (inductor's code "
                   "generation); the optimizer's when the step reads something dynamo cannot guard (a Python global, an attribute written outside the"
                   " graph)."))
