"""When a compiled step differs from eager, name the known mechanisms and whose doing they are.

Each diagnosis is one line for the failure and the JSON report. What is looked for:
- a compiled state tensor that shares storage with a grad or a param where eager's does not
  (inductor handed back an input as a new buffer: torch's doing);
- an optimizer that draws from the global RNG while it is compiled without fallback_random
  (inductor's RNG differs from eager's by design: the spec should set fallback_random), and
  whether the run with fallback_random then matches;
- whether the same steps compiled with `aot_eager` (dynamo and AOTAutograd, no inductor) match
  eager: then the difference is inductor's, else it was already in the traced graph.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..spec.case import shown_path


def storage_aliases(opt: torch.optim.Optimizer, model: torch.nn.Module) -> set[str]:
    """'state[key] of param shares storage with param.grad' for each state tensor that does."""
    owners: dict[int | None, str] = {}
    for name, p in model.named_parameters():
        owners.setdefault(_storage(p), name)
        if p.grad is not None:
            owners.setdefault(_storage(p.grad), f"{name}.grad")
    owners.pop(None, None)
    names: dict[Any, str] = {p: n for n, p in model.named_parameters()}
    found = set()
    for param, state in opt.state.items():
        for key, value in state.items() if isinstance(state, dict) else ():
            if isinstance(value, torch.Tensor) and value.numel() and _storage(value) in owners:
                found.add(f"state[{key!r}] of {names.get(param, '?')} shares storage with {owners[_storage(value)]}")
    return found


def _storage(t: torch.Tensor) -> int | None:
    """The data pointer of the tensor's storage; None for a wrapper tensor subclass, which has no
    storage of its own (torchao's quantized optimizer state: its inner tensors hold the data)."""
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return None


def parity_diagnoses(run: Any) -> list[str]:
    """One line per mechanism found in a compiled run whose snapshots differ; each rerun that
    decides between mechanisms runs here, once, when parity has already failed."""
    if "parity" in run.case.xfail:  # its reason already names the mechanism: no reruns for a verdict nobody reads
        return _storage_and_rng(run, rerun=False)
    return [*_storage_and_rng(run), _aot_eager(run)]


def _reproduce(case: Any) -> str:
    return f"reproduce: pytest --optim-spec {shown_path(case.spec_path)} -k '{case.id} and parity'"


def _rerun(case: Any, steps: int, backend: str = "inductor") -> list[str] | str:
    """The rerun's differences, or why it could not run."""
    # compiled_run imports this module (storage_aliases): the reruns load it when a diagnosis needs them.
    from .compiled_run import rerun_differences

    try:
        return rerun_differences(case, steps, backend)
    except Exception as exc:  # the rerun is evidence, not the verdict: its failure is reported as such
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _aot_eager(run: Any) -> str:
    case = run.case
    found = _rerun(case, run.steps, backend="aot_eager")
    if isinstance(found, str):
        return f"compiled with aot_eager instead of inductor, the step raised ({found}): no verdict on inductor"
    if not found:
        return (f"torch's doing (inductor): compiled with aot_eager (dynamo and AOTAutograd, no inductor) the {run.steps} "
                f"steps match eager, so inductor's code generation makes the difference; {_reproduce(case)}")
    return (f"compiled with aot_eager (no inductor) the step differs from eager too ({len(found)} values): the difference "
            "is in the graph dynamo traced (a Python effect it did not capture, or the optimizer's reliance on eager-only "
            f"behaviour), not in inductor's code; {_reproduce(case)}")


def _storage_and_rng(run: Any, rerun: bool = True) -> list[str]:
    lines = []
    aliased = sorted(run.compiled_aliases - run.eager_aliases)
    if aliased:
        shown = "; ".join(aliased[:3]) + (f"; and {len(aliased) - 3} more" if len(aliased) > 3 else "")
        lines.append(f"torch's doing: in the compiled run {shown}, where eager's state does not: inductor handed an "
                     "input back as the new state buffer (a buffer made lazily in step, e.g. zeros_like(p) then "
                     "mul_().add_(grad)), so the next grad, or one zeroed in place, rewrites the optimizer's state; "
                     "plain-torch reproducer: python -m pytest_optimtest.harness.diagnosis")
    if run.draws_random and not run.case.fallback_random:
        found = _rerun(replace(run.case, fallback_random=True), run.steps) if rerun else None
        verdict = ("" if found is None else "; rerun so, it matches eager: the RNG is the whole difference, not the "
                   "optimizer's doing" if found == [] else f"; rerun so, it still differs "
                   f"({found if isinstance(found, str) else f'{len(found)} values'}): more than the RNG differs")
        lines.append("the optimizer draws random numbers in its step, and inductor's RNG is not eager's: set "
                     f"`fallback_random: true` in {shown_path(run.case.spec_path)} to compare them exactly{verdict}")
    return lines


def _alias_reproducer() -> bool:
    """Plain torch: a momentum buffer created lazily in a compiled step comes back as the grad itself."""
    p = torch.nn.Parameter(torch.ones(4))
    grad = p.grad = torch.full((4,), 2.0)
    state: dict[str, torch.Tensor] = {}

    def step() -> None:
        if "buf" not in state:
            state["buf"] = torch.zeros_like(p)
        state["buf"].mul_(0.9).add_(grad)
        p.data.add_(state["buf"], alpha=-0.1)

    torch.compile(step)()
    return _storage(state["buf"]) == _storage(grad)


if __name__ == "__main__":
    shared = _alias_reproducer()
    print(f"torch {torch.__version__}: the compiled step's new momentum buffer "
          + ("shares the grad's storage (the bug is present)" if shared else "has storage of its own (no aliasing)"))
