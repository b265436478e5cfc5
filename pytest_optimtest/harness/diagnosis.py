"""When a compiled step differs from eager, name the known mechanisms and whose doing they are.

Each diagnosis is one line for the failure and the JSON report. What is looked for:
- a compiled state tensor that shares storage with a grad or a param where eager's does not
  (inductor handed back an input as a new buffer: torch's doing);
- an optimizer that draws from the global RNG while it is compiled without fallback_random
  (inductor's RNG differs from eager's by design: the spec should set fallback_random).
"""

from __future__ import annotations

from typing import Any

import torch


def storage_aliases(opt: torch.optim.Optimizer, model: torch.nn.Module) -> set[str]:
    """'state[key] of param shares storage with param.grad' for each state tensor that does."""
    owners: dict[int, str] = {}
    for name, p in model.named_parameters():
        owners.setdefault(_storage(p), name)
        if p.grad is not None:
            owners.setdefault(_storage(p.grad), f"{name}.grad")
    names: dict[Any, str] = {p: n for n, p in model.named_parameters()}
    found = set()
    for param, state in opt.state.items():
        for key, value in state.items() if isinstance(state, dict) else ():
            if isinstance(value, torch.Tensor) and value.numel() and _storage(value) in owners:
                found.add(f"state[{key!r}] of {names.get(param, '?')} shares storage with {owners[_storage(value)]}")
    return found


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def parity_diagnoses(run: Any) -> list[str]:
    """One line per mechanism found in a compiled run whose snapshots differ."""
    lines = []
    aliased = sorted(run.compiled_aliases - run.eager_aliases)
    if aliased:
        shown = "; ".join(aliased[:3]) + (f"; and {len(aliased) - 3} more" if len(aliased) > 3 else "")
        lines.append(f"torch's doing: in the compiled run {shown}, where eager's state does not: inductor handed an "
                     "input back as the new state buffer (a buffer made lazily in step, e.g. zeros_like(p) then "
                     "mul_().add_(grad)), so the next grad, or one zeroed in place, rewrites the optimizer's state; "
                     "plain-torch reproducer: python -m pytest_optimtest.harness.diagnosis")
    if run.draws_random and not run.case.fallback_random:
        lines.append("the optimizer draws random numbers in its step, and inductor's RNG is not eager's: set "
                     f"`fallback_random: true` in {run.case.spec_path} to compare them exactly (the difference may be "
                     "that alone, not the optimizer's doing)")
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
