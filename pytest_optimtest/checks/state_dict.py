"""Checkpoint round trip between a compiled and an eager optimizer."""

from __future__ import annotations

from typing import Any

from ..harness import torch_api
from ..harness.blame import KnownCause
from ..harness.compare import dynamo_group_keys, listed, snapshot_differences
from ..harness.diagnosis import (DYNAMO_GROUP_KEY_ON_LOAD, STATE_CAST, STATE_CAST_ON_LOAD, cast_on_load,
                                 guards_a_cast_state_dtype, guards_a_group_length, state_load_rebuilds, state_lost_on_load)
from ..harness.ladder import COMPARED_COMPILED
from ..harness.run_phases import run_phases
from ..harness.runner import Regime, loaded_state_dict
from ..harness.snapshot import (int_state_keys, params_in_groups_diagnosis, tensor_attributes_diagnosis,
                                unsaved_generators_diagnosis)
from ..harness.state_dict_layout import FOREIGN_LAYOUT, described_layout, layout_of
from ..harness.vacuity import Blocked, require_compiled, require_moved
from ..spec.values import resolve
from .base import Check, Verdict


def require_state_kept_by_load(case: Any, runs: Any) -> Any:
    """The eager run checkpointed at `case.steps` (the round trip's reference); one red of torch's where
    torch's load_state_dict does not give back a str of its state (every run that loads would step on its
    garbled text and raise in the optimizer's frame) or a deque's maxlen (every run that loads would keep
    more history than the one that never did): state_dict's, checkpoint's and ZeRO's root cause."""
    n = case.steps
    reference = runs.run(case, Regime(closure=case.closure, steps=2 * n, checkpoint_at=n))
    saved = reference.checkpoint.optimizer_state() if reference.checkpoint is not None else {}
    if not isinstance(saved, dict) or not state_load_rebuilds(saved.get("state", {})):
        return reference  # nothing torch's load could rebuild otherwise: no probe load
    loaded = loaded_state_dict(case, reference.checkpoint)
    lost = state_lost_on_load(case.id, saved, loaded) if loaded is not None else None
    if lost:
        raise KnownCause(*lost)
    return reference


def check_state_dict(case: Any, runs: Any) -> Verdict:
    """After N steps, the compiled optimizer's state_dict loads into a fresh eager optimizer and
    the eager one's loads into the running compiled optimizer; continuing N steps, all three (the
    eager reference, eager-from-compiled, compiled-from-eager) hold equal params and state.
    The load into the compiled optimizer may recompile at most `recompile.load_state_dict` times."""
    n = case.steps
    reference = require_state_kept_by_load(case, runs)
    compiled = runs.run(case, Regime(compiled=True, closure=case.closure, steps=2 * n, checkpoint_at=n,
                                     load_at=(n, reference.checkpoint)))
    resumed = runs.run(case, Regime(closure=case.closure, steps=n, resume=compiled.checkpoint))
    require_compiled(case.id, compiled.step_graphs, "the round trip proves nothing")
    moved = require_moved(case.id, reference.initial, reference.final.params, case.tolerance, case.min_movement,
                          f"over {n}+{n} steps")
    problems = [f"compiled after loading eager's state_dict: {p}"
                for p in snapshot_differences(reference.final, compiled.final, case.tolerance, ("reference", "loaded"))]
    problems += [f"eager after loading compiled's state_dict: {p}"
                 for p in snapshot_differences(reference.final, resumed.final, case.tolerance, ("reference", "loaded"))]
    if problems:
        cast = bool(cast_on_load(case.dtype, problems))  # the cause ZeRO's consolidated load shows too: one red
        foreign = described_layout(resolve(case.optimizer).__name__, layout_of(reference.checkpoint.optimizer_state()))
        message = (f"{case.id}: state_dict round trip: {n} steps after loading, results differ from the "
                     "eager reference:" + listed(problems) + params_in_groups_diagnosis(
                         reference.final.groups, "load_state_dict deep-copies the saved param groups, so after a "
                         "load they refer to copies of the saved optimizer's params, not to the loading one's")
                     + tensor_attributes_diagnosis(reference.final.tensor_attributes, "torch.save")
                     + (LOAD_REBINDS.format(shared=reference.load_rebinds) if reference.load_rebinds else "")
                     + (ATTRIBUTES_NOT_SAVED if any("optimizer attribute[" in p for p in problems) else "")
                     + unsaved_generators_diagnosis(reference.checkpoint.unsaved_generators)
                     + (INT_KEYS.format(keys=", ".join(keys)) if (keys := int_state_keys(reference.final.state)) else "")
                     + (STATE_CAST_ON_LOAD if cast else "")
                     + (f"\n  diagnosis: {foreign}" if foreign else ""))
        if foreign:  # ZeRO's and DCP's red too, where they read it: one root cause
            raise KnownCause(message, FOREIGN_LAYOUT)
        raise KnownCause(message, STATE_CAST) if cast else AssertionError(message)
    after_load, allowed = compiled.recompiles_after(n), run_phases(case).load_state_dict
    # A load hands every compiled frame new state tensors to guard on; where the step graph breaks, the frames the
    # breaks split off take state as inputs, guarded by identity, one cache entry a tensor: those recompiles are the
    # breaks' (graph_breaks' red); the step's own frame, and any guard on a value, are this check's
    split = [m for m in after_load if not torch_api.recompiles_first_frame(m) and torch_api.identity_guards_only(m)
             ] if compiled.graph_breaks else []
    counted = [m for m in after_load if m not in split]
    if len(counted) > allowed and runs.compiled(case).unsettled:  # zij's AdaGC: an int `step` in its groups
        raise Blocked("blocked by recompile: the compiled step recompiles on every warm-up step without any load (the "
                      "recompile check's red), so the recompiles after the load are not the load's")
    if len(counted) > allowed:
        reasons = "".join(f"\n    - {r}" for m in counted for r in torch_api.guard_failures(m))
        message = (f"{case.id}: loading a state_dict into the compiled optimizer caused {len(counted)} recompiles of the "
                   f"step, the spec allows {allowed} (recompile.load_state_dict):{reasons}")
        if guards_a_cast_state_dtype(reasons):  # hakuli's float32 `prev_norm` over bf16 params, bf16 after the load
            raise KnownCause(message + STATE_CAST_ON_LOAD, STATE_CAST)
        if guards_a_group_length(reasons) and dynamo_group_keys(reference.final, compiled.final):  # geoopt's RSGD
            message += DYNAMO_GROUP_KEY_ON_LOAD
        raise AssertionError(message)
    split_off = f", and {len(split)} in the frames its graph breaks split off" if split else ""
    return Verdict(f"round trip both ways equal after {n}+{n} steps; {len(counted)} recompile(s) of the step after load"
                   f"{split_off}; "
                   f"moved {moved:.3g} tol",
                   {"steps_compared": 2 * n, "step_graphs": compiled.step_graphs, "recompiles_after_load": len(counted),
                    "recompiles_after_load_split_off": len(split),
                    "state_entries": sum(map(len, reference.final.state.values())), "moved_tolerances": round(moved, 3)})


ATTRIBUTES_NOT_SAVED = ("\n  diagnosis: an attribute of the optimizer's own is not in its state_dict, so a load leaves it as "
                        "the loading optimizer had it (a fresh one: its initial value): the optimizer's doing (keep it in "
                        "state or param_groups, or save it in state_dict)")


INT_KEYS = ("\n  diagnosis: the optimizer keeps state under int keys that are no params ({keys}), and torch's "
            "state_dict saves each param's state under the param's index: on load an int key is read back as that "
            "param's state and the optimizer's own is lost: the optimizer's doing (keep state under its params, or in "
            "param groups)")


# Named by this check alone: DCP and ZeRO load in place into the tensors state_dict() handed out, which are the inner
# optimizer's, so the sharing survives their loads
LOAD_REBINDS = ("\n  diagnosis: the optimizer's doing: {shared}, and torch's Optimizer.load_state_dict, which it does not "
                "override, rebinds self.state and self.param_groups to the loaded ones (Optimizer.__setstate__): after a "
                "load the inner optimizer steps with its own state and groups, not the loaded ones (override "
                "load_state_dict to load the inner optimizer, or expose its state and groups as properties)")


CHECK = Check("state_dict", check_state_dict, "state_dict round trip compiled <-> eager; recompiles after load", "primary",
              rungs=COMPARED_COMPILED,
              proves=("The compiled optimizer's `state_dict` (through torch.save/load) loads into a fresh eager optimizer and eager's into the "
                      "compiled one, and both continue equal, with at most `recompile.load_state_dict` recompiles. Evidence: steps compared, "
                      "recompiles after load."),
              red=("A state that does not survive the round trip (a key dropped or renamed, a tensor lr turned float), or a compiled step that "
                   "recompiles on every load: the optimizer's `state_dict`/`load_state_dict` or torch's guards. Named where recognised: an "
                   "attribute of the optimizer's own, state kept as a state tensor's `.grad`, state and groups shared with an inner optimizer "
                   "that torch's `load_state_dict` rebinds, state cast to the params' dtype, a torch.Generator of its own whose state it does "
                   "not save."))
