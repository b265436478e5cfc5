"""Recompilation guards and graph breaks of the compiled step, with dynamo's own reasons."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel

from ..harness import torch_api
from ..harness.compiled_run import CompiledRun
from ..harness.blame import blame, one_line
from ..harness.perturbations import PerturbationError, PerturbationFailure, StepCompiles
from ..harness.vacuity import require_compiled
from ..harness.run_phases import SECTION_KEY, Perturbation, RecompileSpec, run_phases
from ..spec.context import CaseContext, SpecContext
from ..spec.errors import did_you_mean
from ..spec.kernel_table import KernelExpectation, table_entry
from ..spec.releases import ReleaseCounts, for_release, release_update
from ..harness.ladder import COMPILED
from .base import Check, Verdict


class GraphBreaks(RootModel[ReleaseCounts]):
    """Distinct graph-break reasons a compile without fullgraph must show: one count, or counts keyed
    by torch release ('2.11') with '*' for the others, where releases differ."""

    root: ReleaseCounts = 0


def validate_recompile(section: RecompileSpec, spec: SpecContext) -> None:
    """Scheduler names the spec declares; perturbation kwargs well formed."""
    for name in section.schedulers:
        if name not in spec.schedulers:
            raise spec.error(("recompile", "schedulers", name), f"unknown scheduler {name!r}"
                             f"{did_you_mean(name, spec.schedulers)}; declare it under 'schedulers'")
    for i, perturbation in enumerate(section.perturbations):
        spec.check_values(perturbation.add_param_group or {}, ("recompile", "perturbations", i, "add_param_group"))
        spec.check_values(perturbation.set_group or {}, ("recompile", "perturbations", i, "set_group"))


def perturbation_kernels(section: RecompileSpec, case: CaseContext) -> tuple[KernelExpectation, ...]:
    """Each perturbation's kernel-table entry for the case."""
    return tuple(case.spec.kernels(p.kernel_counts, ("recompile", "perturbations", i, "kernel_counts"), case.id, case.device)
                 for i, p in enumerate(section.perturbations))


def check_recompile(case: Any, runs: Any) -> Verdict:
    """Warm-up compiles at most as declared; steady steps do not recompile (or, with a scheduler,
    exactly as declared); each perturbation recompiles exactly as declared, then settles."""
    run = runs.compiled(case)
    _require_compiled(run)
    if not run.perturbed:
        raise RuntimeError(f"{case.id}: the shared compiled run skipped the perturbations (no selected check needs them)")
    spec, problems = run_phases(case), []
    allowed = spec.warmup.allowed_compiles
    if allowed is not None and run.warmup_compiles > allowed:
        problems.append(
            f"warm-up ({len(run.warmup)} steps) compiled the step {run.warmup_compiles} times, the spec allows "
            f"{allowed} (recompile.warmup in {case.spec_path}):" + _reasons(run.warmup)
        )
    if run.unsettled:
        problems.append(f"the step recompiled on each of {len(run.warmup)} warm-up steps and never settled "
                        "(lazily created state recompiles once; this keeps recompiling):" + _reasons(run.warmup))
    if run.steady_failure and not (case.scheduler and spec.schedulers.get(case.scheduler, 0)):
        number, message = run.steady_failure
        problems.append(f"step {number} recompiled in the steady state (after warm-up):\n    - "
                        + "\n    - ".join(torch_api.guard_failures(message)))
    elif case.scheduler:
        allowed = spec.schedulers.get(case.scheduler, 0)
        observed = sum(len(s.recompiles) for s in run.steady)
        if observed != allowed:
            problems.append(f"stepping {case.scheduler} between {len(run.steady)} compiled steps caused {observed} recompiles, "
                            f"the spec declares {allowed} (recompile.schedulers):" + _reasons(run.steady))
    for i, (outcome, kernels) in enumerate(zip(run.perturbations, case.expected["recompile"])):
        problems += _perturbation_problems(i, outcome.perturbation, outcome.step, outcome.settle_failure, kernels)
    failed = run.perturbation_failure
    if failed is not None and failed.perturbation.declared_recompiles(torch_api.torch_version()) is not None:
        problems.append(_raised_after(failed) + "; the perturbations after it were not made")
    if problems:
        raise AssertionError(f"{case.id}: " + "\n".join(problems))
    return Verdict(_summary(run), {**run.evidence(), "warmup_steps": len(run.warmup), "steady_steps": len(run.steady),
                                   "steady_recompiles": sum(len(s.recompiles) for s in run.steady),
                                   "perturbations": [{"action": o.perturbation.action, "recompiles": len(o.step.recompiles)}
                                                     for o in run.perturbations]})


def check_graph_breaks(case: Any, runs: Any) -> Verdict:
    """A compile without fullgraph breaks the graph for exactly as many distinct reasons as the
    spec declares (default 0). Distinct reasons, because dynamo counts a break again each time
    it restarts tracing."""
    run = runs.compiled(case)
    observed = len(run.graph_breaks)
    if observed != declared_breaks(case):
        listed = "\n    - ".join(f"{run.break_line(reason)} (hit {count}x while tracing)"
                                 for reason, count in run.graph_breaks.items()) or "none"
        nothing = "; and no graph was captured at all" if run.graph_count == 0 else ""
        raise AssertionError(
            f"{case.id}: {observed} graph breaks compiling the step, the spec declares {declared_breaks(case)} "
            f"(graph_breaks in {case.spec_path}){nothing}; dynamo's reasons:\n    - {listed}"
        )
    _require_compiled(run)
    return Verdict(f"{observed} graph breaks", {**run.evidence(), "declared_graph_breaks": declared_breaks(case)})


def declared_breaks(case: Any) -> int:
    """The count for the running release: its own entry, else '*', else 0."""
    return for_release(_written_breaks(case), torch_api.torch_version(), 0) or 0


def _written_breaks(case: Any) -> int | dict[str, int]:
    section = case.sections.get("graph_breaks")
    return section.root if section is not None else 0


def _require_compiled(run: CompiledRun) -> None:
    require_compiled(run.case.id, run.step_graph_count, "there is nothing to recompile")


def _perturbation_problems(index: int, perturbation: Perturbation, step: StepCompiles, settle: str | None,
                           kernels: KernelExpectation) -> list[str]:
    what = _named(index, perturbation)
    problems = []
    observed, declared = len(step.recompiles), perturbation.declared_recompiles(torch_api.torch_version())
    if declared is not None and observed != declared:
        if observed == 0:
            problems.append(f"{what} caused no recompile, expected {declared}: either the compiled "
                            "step has no guard on what changed (then it runs with the old value), or a graph compiled "
                            "earlier fits the new state (then declare `recompiles: 0`)")
        else:
            problems.append(f"{what} caused {observed} recompiles, expected {declared}:" + _reasons([step]))
    if settle:
        problems.append(f"{what}: the step after it recompiled again:\n    - " + "\n    - ".join(torch_api.guard_failures(settle)))
    if kernels.count is not None and observed and step.kernels != kernels.count:
        problems.append(f"{what}: its recompile generated {step.kernels} kernels, expected {kernels.count}; "
                        f"if intended, set {kernels.where} to {step.kernels}")
    return problems


def _reasons(steps: list[StepCompiles]) -> str:
    reasons = [r for s in steps for message in s.recompiles for r in torch_api.guard_failures(message)]
    return "".join(f"\n    - {r}" for r in reasons) or " (dynamo gave no recompile reason)"


def _named(index: int, perturbation: Perturbation) -> str:
    return f"perturbation {index} ({perturbation.action}: {getattr(perturbation, perturbation.action)})"


def _raised_after(failed: PerturbationFailure) -> str:
    what = _named(failed.index, failed.perturbation)
    if isinstance(failed.error, PerturbationError):  # the spec asks for a change this optimizer's state cannot take
        return f"{what} cannot be made: {failed.error}"
    found = blame(failed.error)
    where = found.where or found.innermost
    return (f"{what}, or the compiled step after it, raised {one_line(failed.error)}"
            + (f" at {where} (the {found.owner}'s code)" if where else ""))


def _summary(run: CompiledRun) -> str:
    steady = sum(len(s.recompiles) for s in run.steady)
    settled = "" if run_phases(run.case).warmup.steps is not None else f" in {len(run.warmup)} steps until settled"
    why = "; ".join(r for s in run.warmup for m in s.recompiles for r in torch_api.guard_failures(m)[:1])
    parts = [f"warm-up {run.warmup_compiles} compile(s){settled}" + (f" (recompiled for: {why})" if why else ""),
             f"{len(run.steady)} steady steps, {steady} recompile(s)"]
    for outcome, kernels in zip(run.perturbations, run.case.expected["recompile"]):
        declared = "as declared" if kernels.count is not None else "no expectation"
        observed = "" if outcome.perturbation.declared_recompiles(torch_api.torch_version()) is not None else \
            " (observed, not declared: --optim-update-expected writes it)"
        parts.append(f"{outcome.perturbation.action}: {len(outcome.step.recompiles)} recompile(s){observed}, "
                     f"{outcome.step.kernels} kernels ({declared})")
    if run.perturbation_failure is not None:  # undeclared, so observed only: said, not judged
        parts.append(f"not observed: {_raised_after(run.perturbation_failure)}; an optimizer that cannot step after it "
                     "declares the perturbations it takes under recompile.perturbations")
    return "; ".join(parts)


def recompile_metrics(case: Any, runs: Any) -> dict[str, Any]:
    """Recompiles per phase, declared perturbation recompiles, and the kernels of each perturbation's recompile."""
    run = runs.peek("compiled", case)
    if run is None or not run.graph_count:  # nothing compiled: no recompile count to report or write
        return {}
    recompiles = {"warmup": run.warmup_compiles - 1, "steady": sum(len(s.recompiles) for s in run.steady),
                  "perturbations": [len(p.step.recompiles) for p in run.perturbations]}
    return {
        "recompiles": recompiles,
        "gate": {"recompiles": recompiles["warmup"] + recompiles["steady"] + sum(recompiles["perturbations"])},
        "updates": [release_update(["recompile", "perturbations", i, "recompiles"], declared.recompiles, observed,
                                   torch_api.torch_version(), None)
                    for i, (observed, declared) in enumerate(zip(recompiles["perturbations"], run_phases(case).perturbations))],
        "kernel_tables": [table_entry(k, case.device, observed=p.step.kernels)
                          for p, k in zip(run.perturbations, case.expected["recompile"]) if p.step.recompiles],
    }


def graph_breaks_metrics(case: Any, runs: Any) -> dict[str, Any]:
    run = runs.peek("compiled", case)
    if run is None:
        return {}
    observed = len(run.graph_breaks)
    return {"graph_breaks": observed, "gate": {"graph breaks": observed}, "updates": [_breaks_update(case, observed)]}


def _breaks_update(case: Any, observed: int) -> dict[str, Any]:
    return release_update(["graph_breaks"], _written_breaks(case), observed, torch_api.torch_version(), 0)


RECOMPILE = Check("recompile", check_recompile, "no recompile in steady steps; declared recompiles per perturbation",
                  "no_closure", section=RecompileSpec, section_key=SECTION_KEY, validate=validate_recompile,
                  expect=perturbation_kernels, metrics=recompile_metrics, needs=("perturbations",),
                  rungs=COMPILED,
                  proves=("The warm-up settled, no steady step recompiled, and each declared perturbation recompiled exactly as declared. Evidence: "
                          "compiles per phase, with dynamo's reason for each recompile."),
                  red=("An unexpected recompile, with dynamo's own guard failure (e.g. `param_groups[0]['betas'][0] == 0.95  # optim/adam.py:229`). "
                       "Usually the optimizer's: a Python value that changes every step (a step counter, a float lr) guarded as a constant."))
GRAPH_BREAKS = Check("graph_breaks", check_graph_breaks, "graph breaks without fullgraph equal the spec's count", "plain",
                     section=GraphBreaks, metrics=graph_breaks_metrics, rungs=COMPILED,
                     proves=("A compile without fullgraph broke the step's graph for exactly `graph_breaks` distinct reasons (default 0). Evidence: "
                             "the graphs and the break reasons."),
                     red=("More or fewer breaks than declared, with dynamo's reasons and hints: the optimizer calls something dynamo cannot trace "
                          "(`.item()`, a data-dependent branch, an unsupported builtin)."))
