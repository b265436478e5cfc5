"""Metamorphic properties of the eager step, fuzzed with Hypothesis.

Parity compares an optimizer with itself (compiled vs eager), so a bug on both sides passes
it. These properties compare two eager runs that must agree by a law of the optimizer:

- elementwise: an element's update depends on that element alone, so layout (0-d, views),
  splitting one param into pieces, and the order of params do not change any update;
- maximize: maximize=True on grad g equals maximize=False on -g, state included;
- dtypes: params and state keep their dtype and device;
- determinism: two runs from one seed are bitwise equal;
- zero_lr: lr=0 leaves params bitwise unchanged.

Each example draws one of the spec's plain cases and a list of params; grads are drawn per
step, so every run of an example sees the same gradients, transformed like its params.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from ...harness.compare import max_movement, tensor_difference, value_differences
from ...harness import torch_api
from ...harness.isolation import isolated_case
from ...harness.snapshot import per_param_state
from ...harness.builder import param_dtype
from ...harness.fuzz_runs import stepped_over
from ...harness.hypothesis_runs import run_property
from ...harness.ladder import steppable
from ...spec.schema import Tolerance
from ...harness.strategies import LAYOUTS, Param, Params, param_lists
from ..base import Check, NotApplicable, Vacuous, Verdict

EXACT = Tolerance(atol=0.0, rtol=0.0)


def _built(blueprint: Params, case: Any, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """The drawn params, seeded by the case, in its param dtype (or `dtype`)."""
    return blueprint.build(case.device, case.seed, dtype or param_dtype(case))


def _grads(blueprint: Params, case: Any, steps: int, dtype: torch.dtype | None = None) -> list[list[torch.Tensor]]:
    """grads[step][i]: contiguous, of params[i]'s shape, in the case's param dtype (or `dtype`)."""
    generator = torch.Generator().manual_seed(case.seed + 7919)
    return [[torch.randn(p.shape, generator=generator).to(case.device, dtype or param_dtype(case))
             for p in blueprint.params] for _ in range(steps)]


def _flat(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [_as_param(t.reshape(-1)) for t in tensors]


def _as_param(values: torch.Tensor) -> torch.Tensor:
    """A fresh leaf of these values that requires grad, as a model's param (an optimizer may skip
    params that do not)."""
    return values.detach().clone().requires_grad_()


def _movement(before: list[torch.Tensor], after: list[torch.Tensor], tol: Tolerance) -> float:
    return max_movement({str(i): b for i, b in enumerate(before)}, {str(i): a.detach() for i, a in enumerate(after)}, tol)


def _state_differences(where: str, opt_a: torch.optim.Optimizer, p_a: torch.Tensor, opt_b: torch.optim.Optimizer,
                       p_b: torch.Tensor, tol: Tolerance, labels: tuple[str, str]) -> list[str]:
    """Differences between two params' states; a state tensor of its param's shape is compared
    flattened, so a 0-d or view param's state lines up with its 1-d copy's."""
    state_a, state_b = dict(per_param_state(opt_a).get(p_a, {})), dict(per_param_state(opt_b).get(p_b, {}))
    for key in state_a.keys() & state_b.keys():
        a, b = state_a[key], state_b[key]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == p_a.shape \
                and b.shape == p_b.shape and a.numel() == b.numel():
            state_a[key], state_b[key] = a.detach().reshape(-1), b.detach().reshape(-1)  # a view made under no_grad
    return value_differences(f"{where} state", state_a, state_b, tol, labels)


def _param_differences(index: int, opt_a: torch.optim.Optimizer, p_a: torch.Tensor, opt_b: torch.optim.Optimizer,
                       p_b: torch.Tensor, tol: Tolerance, labels: tuple[str, str], state: bool = True) -> list[str]:
    """params[index] of two runs (flattened when their shapes differ, e.g. 0-d vs one-element),
    and, with `state`, its state entries."""
    a, b = p_a.detach(), p_b.detach()
    if a.shape != b.shape:
        a, b = a.reshape(-1), b.reshape(-1)
    found = tensor_difference(f"params[{index}]", a, b, tol, labels)
    problems = [found] if found else []
    if state:
        problems += _state_differences(f"params[{index}]", opt_a, p_a, opt_b, p_b, tol, labels)
    return problems


def _draws(fuzz: Any, prop: Any, runs: Any, layouts: tuple[str, ...] = LAYOUTS) -> dict[str, st.SearchStrategy[Any]]:
    if not fuzz.cases:
        raise NotApplicable(f"{fuzz.id}: no float32 {fuzz.device} case without a scheduler to draw")
    return {"case": st.sampled_from(steppable(fuzz.cases, runs, fuzz.id)),
            "params": param_lists(max_size=prop.max_params, min_dims=prop.min_dims, max_dims=prop.max_dims,
                                  max_side=prop.max_side, allow_empty=prop.allow_empty,
                                  layouts=layouts if prop.allow_views else ("contiguous",))}


def _run(fuzz: Any, check: str, example: Callable[..., None], runs: Any,
         layouts: tuple[str, ...] = LAYOUTS) -> tuple[Any, Counter]:
    """Run `example(case, params, seen)` as a property; fail as vacuous if no example moved params."""
    prop = fuzz.settings[check]
    seen: Counter = Counter()
    draws = _draws(fuzz, prop, runs, layouts)
    # every example builds new optimizers: one that compiles inside its own step (adv_optm's compiled_optimizer)
    # recompiles for each, past dynamo's limit, which one optimizer in a training run never reaches
    with isolated_case(fuzz.cases[0]), torch_api.unlimited_recompiles():
        run = run_property(f"{fuzz.id} {check}", draws,
                           lambda case, params: example(case, params, seen), prop.examples,
                           f'pytest --optim-spec {fuzz.spec_path} -k "{fuzz.id} and {check}"')
    if not seen["moved"]:
        raise Vacuous(f"{fuzz.id} {check}: vacuous: in none of {run.examples} examples did the params move "
                             f"{fuzz.cases[0].min_movement:g} tolerances; the property was never exercised")
    return run, seen


def _describe(blueprint: Param, index: int) -> str:
    if blueprint.layout != "contiguous":
        return f"params[{index}], a {blueprint.layout} view of shape {blueprint.shape}"
    return f"params[{index}], 0-d" if blueprint.shape == () else f"params[{index}] of shape {blueprint.shape}"


def _failed(words: str, problems: list[str]) -> AssertionError:
    return AssertionError(words + "\n  " + "\n  ".join(problems[:6]))


def check_fuzz_elementwise(fuzz: Any, runs: Any) -> Verdict:
    """An elementwise optimizer's updates do not depend on layout, splitting or param order."""

    def example(case: Any, params: Params, seen: Counter) -> None:
        tol, steps = case.tolerance, fuzz.settings["fuzz_elementwise"].steps
        grads = _grads(params, case, steps)
        flat_grads = [[g.reshape(-1) for g in gs] for gs in grads]
        initial = _flat(_built(params, case))
        drawn, flat = _built(params, case), _flat(_built(params, case))
        opt_drawn, opt_flat = stepped_over(case, drawn, grads), stepped_over(case, flat, flat_grads)
        for i, blueprint in enumerate(params.params):
            copy = "the same value as a one-element param" if blueprint.shape == () else "a contiguous 1-d copy of it"
            problems = _param_differences(i, opt_flat, flat[i], opt_drawn, drawn[i], tol, (copy, "as drawn"))
            if problems:
                still = torch.equal(drawn[i].detach().reshape(-1), initial[i]) and not torch.equal(flat[i], initial[i])
                verb = f"did not move while {copy} did" if still else f"was updated differently than {copy}"
                raise _failed(f"elementwise: {_describe(blueprint, i)}, {verb}", problems)

        order = [(i + 1) % len(initial) for i in range(len(initial))]  # every param moves to another position
        permuted = [_as_param(initial[j]) for j in order]
        opt_permuted = stepped_over(case, permuted, [[gs[j] for j in order] for gs in flat_grads])
        problems = [d for position, i in enumerate(order)
                    for d in _param_differences(i, opt_flat, flat[i], opt_permuted, permuted[position], tol,
                                                (f"at position {i}", f"moved to position {position}"))]
        if problems:
            raise _failed(f"elementwise: permuting the params of the group (order {order}) did not permute the "
                          "updates: a param's update depends on its position", problems)

        sizes = [t.numel() for t in initial]
        whole = [_as_param(torch.cat([t.detach() for t in initial]))]
        stepped_over(case, whole, [[torch.cat(gs)] for gs in flat_grads])
        problems = [d for i, piece in enumerate(whole[0].detach().split(sizes))
                    if (d := tensor_difference(f"params[{i}]", flat[i], piece, tol, ("its own param", "a piece of one param")))]
        if problems:
            raise _failed(f"elementwise: the params stepped as one concatenated param (sizes {sizes}) were updated "
                          "differently than the same values stepped as separate params", problems)
        seen["moved"] += _movement(initial, flat, tol) >= case.min_movement

    run, seen = _run(fuzz, "fuzz_elementwise", example, runs)
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved): layout, splitting and order did "
                   "not change an update", run.evidence(seen))


def check_fuzz_maximize(fuzz: Any, runs: Any) -> Verdict:
    """maximize=True on grad g equals maximize=False on -g (state too, unless the spec says not)."""
    compare_state = fuzz.settings["fuzz_maximize"].state

    def example(case: Any, params: Params, seen: Counter) -> None:
        tol, steps = case.tolerance, fuzz.settings["fuzz_maximize"].steps
        grads = _grads(params, case, steps)
        initial = _built(params, case)
        up, down = _built(params, case), _built(params, case)
        opt_up = stepped_over(case, up, grads, maximize=True)
        opt_down = stepped_over(case, down, [[-g for g in gs] for gs in grads], maximize=False)
        labels = ("maximize=False on -g", "maximize=True on g")
        problems = [d for i in range(len(up))
                    for d in _param_differences(i, opt_down, down[i], opt_up, up[i], tol, labels, compare_state)]
        if problems:
            raise _failed("maximize: stepping with maximize=True on grad g differs from maximize=False on -g"
                          + (" (set fuzz.maximize.state: false if the state is kept sign-flipped by design)"
                             if compare_state else ""), problems)
        seen["moved"] += _movement(initial, down, tol) >= case.min_movement

    run, seen = _run(fuzz, "fuzz_maximize", example, runs)
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved): maximize on g equals minimize "
                   "on -g" + (", state included" if compare_state else ", params only"), run.evidence(seen))


def check_fuzz_dtypes(fuzz: Any, runs: Any) -> Verdict:
    """Params and every state tensor (but 0-d counters) keep the param's dtype and device."""
    dtypes = [getattr(torch, name) for name in fuzz.settings["fuzz_dtypes"].dtypes]

    def example(case: Any, params: Params, seen: Counter) -> None:
        steps = fuzz.settings["fuzz_dtypes"].steps
        for dtype in dtypes:
            grads = _grads(params, case, steps, dtype)
            initial = _built(params, case, dtype)
            tensors = [_as_param(t) for t in initial]
            device = tensors[0].device
            opt = stepped_over(case, tensors, grads)
            for i, p in enumerate(tensors):
                where = f"{_describe(params.params[i], i)}, {dtype}"
                if p.dtype != dtype or p.device != device:
                    raise AssertionError(f"dtypes: {where}: the param became {p.dtype} on {p.device} after the step")
                for key, value in per_param_state(opt).get(p, {}).items():
                    if not isinstance(value, torch.Tensor) or value.dim() == 0:
                        continue  # 0-d counters (step) are float32 by torch.optim's own convention
                    if value.is_floating_point() and value.dtype != dtype:
                        raise AssertionError(f"dtypes: {where}: state[{key!r}] is {value.dtype}: the state is "
                                             f"silently {'up' if value.element_size() > p.element_size() else 'down'}cast")
                    if value.device != device:
                        raise AssertionError(f"dtypes: {where}: state[{key!r}] lives on {value.device}, not the param's {device}")
            if dtype.is_floating_point and torch.finfo(dtype).bits >= 32:
                seen["moved"] += _movement(initial, tensors, case.tolerance) >= case.min_movement

    run, seen = _run(fuzz, "fuzz_dtypes", example, runs, layouts=("contiguous",))
    names = ", ".join(fuzz.settings["fuzz_dtypes"].dtypes)
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved): {names} params and their state "
                   "kept dtype and device", run.evidence(seen))


def check_fuzz_determinism(fuzz: Any, runs: Any) -> Verdict:
    """Two fresh runs from the same seed give bitwise equal params and state."""

    def example(case: Any, params: Params, seen: Counter) -> None:
        grads = _grads(params, case, fuzz.settings["fuzz_determinism"].steps)
        first, second = _built(params, case), _built(params, case)
        initial = _built(params, case)
        opt_first, opt_second = stepped_over(case, first, grads), stepped_over(case, second, grads)
        problems = [d for i in range(len(first))
                    for d in _param_differences(i, opt_first, first[i], opt_second, second[i], EXACT,
                                                ("first run", "second run"))]
        if problems:
            raise _failed("determinism: two runs from the same seed (torch.manual_seed before every step) are not "
                          "bitwise equal: the step draws from a source the seed does not control", problems)
        seen["moved"] += _movement(initial, first, case.tolerance) >= case.min_movement

    run, seen = _run(fuzz, "fuzz_determinism", example, runs)
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved): two runs per example bitwise "
                   "equal", run.evidence(seen))


def check_fuzz_zero_lr(fuzz: Any, runs: Any) -> Verdict:
    """lr=0 leaves params bitwise unchanged, while the case's own lr moves them."""

    def example(case: Any, params: Params, seen: Counter) -> None:
        grads = _grads(params, case, fuzz.settings["fuzz_zero_lr"].steps)
        initial, moving, still = (_built(params, case) for _ in range(3))
        zero = {"tensor": 0.0} if isinstance(case.kwargs.get("lr"), dict) and "tensor" in case.kwargs["lr"] else 0.0
        stepped_over(case, moving, grads)
        stepped_over(case, still, grads, lr=zero)
        for i, (p, p0) in enumerate(zip(still, initial)):
            if not torch.equal(p.detach(), p0):
                d = tensor_difference(f"params[{i}]", p0, p.detach(), EXACT, ("before", "after")) or ""
                raise AssertionError(f"zero_lr: {_describe(params.params[i], i)} moved at lr=0 (a decay or update "
                                     f"that ignores lr?)\n  {d}")
        seen["moved"] += _movement(initial, moving, case.tolerance) >= case.min_movement

    run, seen = _run(fuzz, "fuzz_zero_lr", example, runs)
    return Verdict(f"{run.examples} examples (profile {run.profile}, {seen['moved']} moved at the case's lr): lr=0 left "
                   "params unchanged", run.evidence(seen))


ELEMENTWISE = Check("fuzz_elementwise", check_fuzz_elementwise,
                    "Hypothesis: layout, splitting and param order do not change updates", "fuzz",
                    proves=("Hypothesis, eager: a 0-d param steps like a one-element one, a view like a contiguous copy, params stepped together like"
                            " apart, rotated params give rotated updates. Declare it only for element-wise optimizers."),
                    red="The minimal example where layout, splitting or order changed an update.")
MAXIMIZE = Check("fuzz_maximize", check_fuzz_maximize, "Hypothesis: maximize on grad g equals minimize on -g, state included",
                 "fuzz",
                 proves="Hypothesis, eager: `maximize=True` on grad g equals `maximize=False` on -g, params and state.",
                 red="The minimal example where maximize is not a sign flip.")
DTYPES = Check("fuzz_dtypes", check_fuzz_dtypes, "Hypothesis: params and state keep their dtype and device", "fuzz",
               proves="Hypothesis, eager: params and state keep their dtype and device.",
               red="The state tensor silently upcast or moved, with the minimal example.")
DETERMINISM = Check("fuzz_determinism", check_fuzz_determinism, "Hypothesis: two runs from one seed are bitwise equal", "fuzz",
                    proves="Hypothesis, eager: two runs from one seed are bitwise equal, params and state.",
                    red="The minimal example where two runs differ.")
ZERO_LR = Check("fuzz_zero_lr", check_fuzz_zero_lr, "Hypothesis: lr=0 leaves params unchanged", "fuzz",
                proves="Hypothesis, eager: lr=0 leaves params bitwise unchanged while the case's lr moves them.",
                red="The minimal example where a zero lr still moves params (a decay or minimum step that ignores lr).")
