"""Checkpoint round trip between a compiled and an eager optimizer."""

from __future__ import annotations

import io
from typing import Any

import torch

from ..harness import torch_api
from ..harness.compare import listed, snapshot_differences
from ..harness.builder import copy_with_grads, make_optimizer, make_twins
from ..harness.snapshot import snapshot
from ..harness.vacuity import require_compiled, require_moved
from ..harness.isolation import isolated_case
from ..harness.run_phases import run_phases
from ..harness.ladder import COMPARED_COMPILED
from .base import Check, Verdict


def check_state_dict(case: Any, runs: Any) -> Verdict:
    """After N steps, the compiled optimizer's state_dict loads into a fresh eager optimizer and
    the eager one's loads into the compiled optimizer; continuing N steps, all three (the
    eager reference, eager-from-compiled, compiled-from-eager) hold equal params and state.
    The load into the compiled optimizer may recompile at most `recompile.load_state_dict` times.
    Its own compile: it loads state into a compiled optimizer mid-run and counts those recompiles."""
    n = case.steps
    with isolated_case(case), torch_api.recording_recompiles() as recompiles:
        twins = make_twins(case)
        initial = twins.initial()
        step = twins.compile()
        with torch.no_grad():
            for _ in range(n):
                step()
                twins.eager_opt.step()
        # compiled -> eager: a fresh eager optimizer over a copy of the compiled model
        resumed_model = copy_with_grads(twins.compiled_model)
        resumed = make_optimizer(case, resumed_model)
        resumed.load_state_dict(_checkpointed(twins.compiled_opt.state_dict()))
        # eager -> compiled: the running compiled optimizer takes the eager one's params and state
        with torch.no_grad():
            for p, q in zip(twins.compiled_model.parameters(), twins.eager_model.parameters()):
                p.copy_(q)
        twins.compiled_opt.load_state_dict(_checkpointed(twins.eager_opt.state_dict()))
        before = len(recompiles)
        with torch.no_grad():
            for _ in range(n):
                step()
                twins.eager_opt.step()
                resumed.step()
        after_load = recompiles[before:]
        graphs = torch_api.captured_graph_count()
        require_compiled(case.id, graphs, "the round trip proves nothing")
        moved = require_moved(case.id, initial, {n: p.detach() for n, p in twins.eager_model.named_parameters()},
                              case.tolerance, case.min_movement, f"over {n}+{n} steps")
        reference, compiled = twins.snapshots()
        eager_resumed = snapshot(resumed, {p: name for name, p in resumed_model.named_parameters()})
    problems = [f"compiled after loading eager's state_dict: {p}" for p in snapshot_differences(reference, compiled, case.tolerance)]
    problems += [f"eager after loading compiled's state_dict: {p}" for p in snapshot_differences(reference, eager_resumed, case.tolerance)]
    if problems:
        raise AssertionError(f"{case.id}: state_dict round trip: {n} steps after loading, results differ from the eager reference:" + listed(problems))
    allowed = run_phases(case).load_state_dict
    if len(after_load) > allowed:
        reasons = "".join(f"\n    - {r}" for m in after_load for r in torch_api.guard_failures(m))
        raise AssertionError(f"{case.id}: loading a state_dict into the compiled optimizer caused {len(after_load)} recompiles, "
                             f"the spec allows {allowed} (recompile.load_state_dict):{reasons}")
    return Verdict(f"round trip both ways equal after {n}+{n} steps; {len(after_load)} recompile(s) after load; moved {moved:.3g} tol",
                   {"steps_compared": 2 * n, "step_graphs": graphs, "recompiles_after_load": len(after_load),
                    "state_entries": sum(map(len, reference.state.values())), "moved_tolerances": round(moved, 3)})


def _checkpointed(state_dict: dict[str, Any]) -> dict[str, Any]:
    """The state_dict as a checkpoint file gives it back: through torch.save and torch.load.
    (Loaded directly, an optimizer would alias the other's state tensors, e.g. Adam's step.)"""
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


CHECK = Check("state_dict", check_state_dict, "state_dict round trip compiled <-> eager; recompiles after load", "primary",
              rungs=COMPARED_COMPILED)
