"""Hypothesis properties: parity on fuzzed param shapes, in-backward on fuzzed (tied) MLPs,
ModTracker nesting and derived order on fuzzed module trees."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import torch
from hypothesis import strategies as st

from ...harness import torch_api
from ...harness.compare import listed, max_movement, snapshot_differences
from ...harness.devices import seed_all
from ...harness.hook_recorder import HookEvent, derive_hook_order, record_hook_order
from ...harness.in_backward_run import SECTION_KEY, CannotApply, in_backward_section, run_in_backward
from ...harness.isolation import isolated
from ...harness.fuzz_runs import compiled_step_for_examples, fuzz_parity_run
from ...harness.hypothesis_runs import run_property
from ...harness.ladder import steppable
from ...harness.strategies import Params, mlps, module_trees, param_lists, tree_input
from ..base import Check, NotApplicable, Vacuous, Verdict
from ..in_backward import compare_in_backward


def _rerun(fuzz, check: str) -> str:
    return f'pytest --optim-spec {fuzz.spec_path} -k "{fuzz.id} and {check}"'


def _drawable(fuzz, base_check: str, runs):
    if fuzz.cases and all(c.closure for c in fuzz.cases):  # the step must have a closure: a compiled step of its
        raise NotApplicable(f"{fuzz.id}: every case steps with a closure, which fuzz_{base_check}'s steps do not give")
    cases = fuzz.drawable(base_check)
    if not cases:
        raise NotApplicable(f"{fuzz.id}: no case to draw: {base_check} is skipped or xfailed for every plain {fuzz.device} case")
    return steppable(cases, runs, fuzz.id)


def check_fuzz_parity(fuzz, runs) -> Verdict:
    prop = fuzz.settings["fuzz_parity"]
    cases = _drawable(fuzz, "parity", runs)
    seen: Counter = Counter()
    reasons: Counter = Counter()
    with compiled_step_for_examples(cases[0], prop.dynamic) as compiled:
        def example(case, params: Params) -> None:
            _parity_example(case, params, compiled, prop.steps, seen, reasons)

        run = run_property(f"{fuzz.id} fuzz_parity", {
            "case": st.sampled_from(cases),
            "params": param_lists(max_size=prop.max_params, max_dims=prop.max_dims, max_side=prop.max_side),
        }, example, prop.examples, _rerun(fuzz, "fuzz_parity"))
    if not seen["moved"]:
        raise Vacuous(f"{fuzz.id}: vacuous: in none of {run.examples} examples did the params move "
                             f"{cases[0].min_movement:g} tolerances; the comparisons proved nothing")
    other = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(3))
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved, {seen['empty']} all-empty) equal; "
                   f"{seen['recompiles']} recompiles, {seen['new_optimizer']} of them for a new optimizer object"
                   + (f"; others: {other}" if other else "") + f"; dynamic={prop.dynamic}", run.evidence(seen))


def _parity_example(case, params: Params, compiled, steps: int, seen: Counter, reasons: Counter) -> None:
    run = fuzz_parity_run(case, params, compiled, steps)
    if not run.new_graphs:
        raise AssertionError(f"{case.id} on {params!r}: not compiled: the step captured no new graph")
    for message in run.recompiles:
        failures = torch_api.guard_failures(message)
        if any(torch_api.is_identity_guard(f) for f in failures):
            seen["new_optimizer"] += 1
        else:
            reasons.update(f.split("  #")[0].split(": ", 1)[-1] for f in failures[:1])
    seen["recompiles"] += len(run.recompiles)
    problems = snapshot_differences(run.eager, run.compiled, case.tolerance)
    if problems:
        raise AssertionError(f"{case.id} on {params!r}: compiled step differs from eager after {steps} steps:" + listed(problems))
    if all(p.numel() == 0 for p in run.initial.values()):
        seen["empty"] += 1
    elif max_movement(run.initial, run.eager.params, case.tolerance) >= case.min_movement:
        seen["moved"] += 1


def check_fuzz_in_backward(fuzz, runs) -> Verdict:
    prop = fuzz.settings["fuzz_in_backward"]
    cases = _drawable(fuzz, "in_backward", runs)
    seen: Counter = Counter()

    def example(case, model) -> None:
        fuzzed = replace(case, model=model, sections={**case.sections, SECTION_KEY: in_backward_section(case).model_copy(update={"tie": model.tie_names()})})
        try:
            fuzzed_run = run_in_backward(fuzzed, tied=bool(model.ties))
        except CannotApply as exc:
            raise NotApplicable(f"{fuzzed.id}: {exc}") from None
        moved = compare_in_backward(fuzzed, fuzzed_run, require_movement=False)
        seen["tied" if model.ties else "untied"] += 1
        seen["moved"] += moved >= case.min_movement

    shapes = {"max_depth": prop.max_depth, "max_width": prop.max_width}
    run = run_property(f"{fuzz.id} fuzz_in_backward", {
        "case": st.sampled_from(cases),
        "model": st.one_of(mlps(**shapes), mlps(**shapes, tied=True)),
    }, example, prop.examples, _rerun(fuzz, "fuzz_in_backward"))
    if not seen["moved"]:
        raise Vacuous(f"{fuzz.id}: vacuous: in none of {run.examples} examples did the params move "
                             f"{cases[0].min_movement:g} tolerances; the comparisons proved nothing")
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved): {seen['untied']} untied, "
                   f"{seen['tied']} tied MLPs equal the reference", run.evidence(seen))


def check_fuzz_hook_order(fuzz, runs) -> Verdict:
    prop = fuzz.settings["fuzz_hook_order"]
    seen: Counter = Counter()

    def example(tree, input_requires_grad: bool) -> None:
        def inputs() -> torch.Tensor:
            seed_all(0)
            return tree_input(input_requires_grad)

        with isolated():
            events = list(record_hook_order(tree.build(), inputs))
            derived = derive_hook_order(tree.build(), inputs)
        problem = nesting_problem(events)
        if problem:
            raise AssertionError(f"{tree!r}: ModTracker events are not properly nested: {problem}\n  "
                                 + "\n  ".join(e.short() for e in events))
        observed, expected = [e.short() for e in events], [e.short() for e in derived]
        if observed != expected:
            at = next((i for i, (a, b) in enumerate(zip(observed, expected)) if a != b), min(len(observed), len(expected)))
            raise AssertionError(f"{tree!r}: ModTracker differs from the derived order at event {at}:\n"
                                 f"  observed: {observed[at:at + 3]}\n  derived:  {expected[at:at + 3]}")
        seen["events"] += len(events)

    run = run_property(f"{fuzz.id} fuzz_hook_order", {
        "tree": module_trees(prop.max_leaves, prop.max_children),
        "input_requires_grad": st.booleans(),
    }, example, prop.examples, _rerun(fuzz, "fuzz_hook_order"))
    return Verdict(f"{run.examples} module trees (profile {run.profile}): {seen['events']} events nested and equal to the "
                   "derived order", run.evidence(seen))


def nesting_problem(events: list[HookEvent]) -> str | None:
    """Why the events do not nest, or None.

    Forward: pre_fw/post_fw nest like calls, and each module is in the tracker's parents at
    its own hooks. Backward is not a call stack: modules sharing a tensor get its grad at the
    same moment, and their hooks then fire in registration order (a child's pre_bw before its
    parent's, a parent's post_bw before its child's when they share the input). So backward
    requires: each module's pre_bw precedes its post_bw, and a module's backward overlaps its
    parent's (neither ends before the other begins).
    """
    forward = [e for e in events if e.kind in ("pre_fw", "post_fw")]
    backward = [e for e in events if e.kind in ("pre_bw", "post_bw")]
    if any(e.is_bw for e in forward) or not all(e.is_bw for e in backward):
        return "a forward hook ran with is_bw=True, or a backward hook with is_bw=False"
    outside = [e for e in forward + backward if not e.in_parents]
    if outside:
        return f"{outside[0].short()}: the module is not in the tracker's parents at its own hook"
    stack: list[str | None] = []
    for i, e in enumerate(forward):
        if e.kind == "pre_fw":
            stack.append(e.module)
        elif not stack or stack[-1] != e.module:
            return f"forward event {i}: post_fw {e.module} while {stack[-1] if stack else 'nothing'} is open"
        else:
            stack.pop()
    if stack:
        return f"forward: {stack} never closed"
    pre = {e.module: i for i, e in enumerate(backward) if e.kind == "pre_bw"}
    post = {e.module: i for i, e in enumerate(backward) if e.kind == "post_bw"}
    for module, end in post.items():
        begin = pre.get(module, end)
        if begin > end:
            return f"backward: post_bw {module} before its pre_bw"
        parent = max((m for m in post if m and module and module.startswith(m + ".")), key=len, default=None)
        if parent is None:
            continue
        if post[parent] < begin or pre.get(parent, post[parent]) > end:
            return f"backward: {module} (events {begin}-{end}) does not overlap its parent {parent}"
    return None


PARITY = Check("fuzz_parity", check_fuzz_parity, "Hypothesis: compiled vs eager step on fuzzed param shapes and views", "fuzz",
               proves=("Hypothesis: compiled equals eager on fuzzed param shapes (0-d, one-element, empty, views) within the declared bounds; passes "
                       "only if some example moved the params."),
               red="A falsifying minimal example, printed as code with the command to rerun it and the `@example` to pin it.")
IN_BACKWARD = Check("fuzz_in_backward", check_fuzz_in_backward, "Hypothesis: in-backward vs reference on fuzzed, tied MLPs",
                    "fuzz",
                    proves="Hypothesis: in-backward equals normal stepping on fuzzed MLPs, tied and untied.",
                    red="A minimal MLP where the per-param step differs.")
HOOK_ORDER = Check("fuzz_hook_order", check_fuzz_hook_order,
                   "Hypothesis: ModTracker nests and equals the derived order on fuzzed trees", "fuzz",
                   proves="Hypothesis: on drawn module trees, ModTracker's events nest and equal the derived order.",
                   red="The minimal module tree whose events do not nest.")
