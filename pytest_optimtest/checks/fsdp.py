"""FSDP2: the optimizer over DTensor params sharded on N ranks, eager and compiled, equals it over
whole params in one process; and its DCP checkpoint resumes at another world size exactly like
the run that never stopped."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from pydantic import Field

from ..harness import torch_api
from ..harness.blame import KnownCause
from ..harness.compare import listed, median_ratio, snapshot_differences, value_differences
from ..harness.diagnosis import state_load_rebuilds
from ..harness.distributed_run import rank_backend
from ..harness.fsdp_run import FsdpRun, Trained, resume_on_ranks, unavailable_reason
from ..harness.ranks import RankFailure
from ..harness.snapshot import params_in_groups_diagnosis, tensor_attributes_diagnosis
from ..harness.vacuity import (Blocked, Vacuous, require_beyond_amplified_rounding, require_beyond_amplified_ulp,
                               require_moved)
from ..spec.schema import MAX_COMPILES, StrictModel, Tolerance
from ..spec.case import shown_path
from ..spec.values import gives_a_mesh, mesh_arguments, mesh_form, resolve
from ..harness.ladder import MOVES
from .base import Check, NotApplicable, Verdict
from .state_dict import require_state_kept_by_load


class FsdpSpec(StrictModel):
    """The fsdp and checkpoint checks. Ranks, train steps, global batch and timeout are the
    `distributed` section's; every rank trains on the whole global batch."""

    cases: list[str] | None = Field(None, description="names of the cases to shard, with their scheduler variants "
                                    "(default: the first case)")
    compiled: bool = Field(True, description="also compile the optimizer step over the DTensor params")
    recompiles: int | None = Field(None, ge=0, le=MAX_COMPILES, description="recompiles the sharded compiled step may "
                                   "take over the train steps (default: reported, not checked)")
    load_world_sizes: list[int] = Field([1], min_length=1, description="world sizes the checkpoint is loaded at "
                                        "(1: one process, whole params, no process group)")
    tolerance: Tolerance | None = Field(None, description="default: the case's")


def _case_names(section: FsdpSpec | None, names: list[str]) -> list[str]:
    return names[:1] if section is None or section.cases is None else section.cases


def _validate(section: FsdpSpec, spec: Any) -> None:
    names = [c.name for c in spec.spec.cases]
    for i, name in enumerate(section.cases or ()):
        if name not in names:
            raise spec.error(("fsdp", "cases", i), f"no case named {name!r}; the cases: {', '.join(names)}")
    for i, size in enumerate(section.load_world_sizes):
        if not 1 <= size <= 64:
            raise spec.error(("fsdp", "load_world_sizes", i), f"a world size from 1 to 64, got {size}")


def _run(case: Any, runs: Any) -> FsdpRun:
    reason = unavailable_reason(case)
    if reason:
        raise NotApplicable(reason)
    run = runs.fsdp(case)
    if run.eager.unshardable:
        raise NotApplicable(f"FSDP2's fully_shard refuses the spec's model {case.model}: {run.eager.unshardable}")
    return run


def _tolerance(case: Any) -> Tolerance:
    return case.sections["fsdp"].tolerance or case.tolerance


def _mesh_not_given(case: Any, trained: Trained) -> None:
    """Where the sharded run raised and the constructor takes a mesh the spec leaves unset (Dion's
    `distributed_mesh`: its step over DTensor params refuses to run without it), the run said nothing
    of the optimizer: skip, saying which kwarg to give."""
    if not trained.error:
        return
    optimizer_cls = resolve(case.optimizer)
    meshes = mesh_arguments(optimizer_cls)
    given = [name for name in meshes if gives_a_mesh(case.kwargs.get(name))]
    if meshes and not given:
        name = meshes[0] if len(meshes) == 1 else "<the argument it shards over>"
        raise NotApplicable(
            f"{case.id}: its constructor takes {' or '.join(f'`{m}`' for m in meshes)} (a DeviceMesh or ProcessGroup), "
            f"which the spec leaves unset, and its step over FSDP2's DTensor params raised: "
            f"{trained.error.splitlines()[0]}; give it the mesh the run shards over: `kwargs: "
            f"{{{name}: {{{mesh_form(optimizer_cls, meshes[0])}: fsdp}}}}` in "
            f"{shown_path(case.spec_path)} (None in every run whose params are whole)")


def _raised(case: Any, what: str, trained: Trained, state_of: Trained | None = None) -> None:
    """Raise where the run raised; `state_of`: the run whose state tells why (the eager sharded one's):
    a plain shard-shaped tensor that met a DTensor is that state's root cause (checkpoint's too)."""
    _mesh_not_given(case, trained)
    if trained.error:
        raise _red(f"{case.id}: {what} raised on rank 0 (the same step over whole params in one process "
                   f"does not): {trained.error}", state_of or trained)


def _other_grads(case: Any, run: FsdpRun) -> str | None:
    """Why the sharded optimizer was given other gradients than the one-process optimizer, before its
    first step, or None. FSDP2 averages the ranks' gradients and every rank trains on the whole batch,
    so they must be equal: where they are not, no difference after it is the optimizer's."""
    ws, labels = run.world_size, ("one process", f"sharded on {run.world_size} ranks")
    differences = value_differences("grad", run.reference.first_grads, run.eager.first_grads, _tolerance(case), labels)
    if not differences:
        return None
    ratio = median_ratio(run.reference.first_grads, run.eager.first_grads)
    how = (f" (they are {ratio:.3g}x the one-process grads, the world size: the ranks' gradients were summed, not averaged)"
           if ratio is not None and abs(ratio - ws) <= 1e-3 * ws else
           f" (median ratio to the one-process grads {ratio:.3g})" if ratio is not None else "")
    return (f"FSDP2 gave the optimizer other gradients on {ws} {rank_backend(case)} ranks than one process gives it, before "
            f"the optimizer's first step{how}: torch {torch_api.torch_version()}'s doing (FSDP2's gradient reduction), or the spec's "
            f"model's where it computes differently on ranks; not the optimizer's, so its comparison is not made:" + listed(differences))


def _differences(label: str, reference: Trained, other: Trained, tol: Tolerance,
                 reference_label: str = "one process") -> list[str]:
    return snapshot_differences(reference, other, tol, (reference_label, label))


def check_fsdp(case: Any, runs: Any) -> Verdict:
    run = _run(case, runs)
    section, tol, ws, steps = case.sections["fsdp"], _tolerance(case), run.world_size, run.case.distributed.iterations
    _raised(case, "the eager step over FSDP2-sharded (DTensor) params", run.eager)
    sharded_compiled, unserved = run.compiled, None
    if sharded_compiled is not None and sharded_compiled.error:
        unserved = runs.ladder(case).first_failure(("graph_captured", "compiled_steps"))
        if unserved is None:
            _raised(case, "the compiled step over FSDP2-sharded (DTensor) params", sharded_compiled, run.eager)
        sharded_compiled = None  # it fails over whole params too: the ladder's red, not the shards'
    other_grads = _other_grads(case, run)
    if other_grads:
        raise AssertionError(f"{case.id}: {other_grads}")
    moved = require_moved(case.id, run.initial, run.reference.params, tol, case.min_movement,
                          f"over {steps} one-process train steps", f"; raise lr or distributed.iterations in {case.location}")
    eager = _differences(f"sharded on {ws} ranks", run.reference, run.eager, tol)
    problems, compiled, recompiled = [f"eager sharded: {d}" for d in eager], [], []
    if sharded_compiled is not None:
        compiled = _differences(f"compiled, sharded on {ws} ranks", run.reference, sharded_compiled, tol)
        blocked = runs.ladder(case).first_failure(("compiled_matches",)) if compiled and not eager else None
        if blocked is not None:  # the step compiles wrong over whole params too: parity's red, not the shards'
            raise Blocked(blocked.blocked() + "; the eager step over the same shards matches one process")
        problems += [f"compiled sharded: {d}" for d in compiled]
        if compiled and not eager:  # torch.compile's over DTensors, unless the optimizer amplifies any rounding as much
            require_beyond_amplified_ulp(case.id, run.reference.params, run.nudged_reference.params,
                                         sharded_compiled.params, f"over {steps} train steps")
            problems.append("the eager step over the same shards matches, and the compiled step over whole params matches "
                            "eager (parity): the difference is torch.compile's over DTensor params (torch's doing)")
        allowed = section.recompiles
        if allowed is not None and len(sharded_compiled.recompiles) > allowed:
            recompiled = [f"the sharded compiled step recompiled {len(sharded_compiled.recompiles)} times over {steps} "
                          f"steps, the spec allows {allowed} (fsdp.recompiles): " + "; ".join(sharded_compiled.recompiles[:2])]
    if not recompiled:  # values differ and nothing else: no verdict where the run's growth amplified rounding
        require_beyond_amplified_rounding(case.id, run.initial, [
            (run.reference.params, trained.params) for trained, found in ((run.eager, eager), (sharded_compiled, compiled))
            if found and trained is not None], f"over {steps} one-process train steps")
    problems += recompiled
    if problems:
        raise _red(f"{case.id}: after {steps} train steps, the optimizer over params sharded by FSDP2 on {ws} "
                   f"{rank_backend(case)} ranks differs from it over whole params in one process:" + listed(problems),
                   run.eager if eager else None)
    if sharded_compiled is not None and sharded_compiled.graphs == 0:  # half of what the check claims did not happen: not a pass
        raise Vacuous(f"{case.id}: vacuous: the eager step over FSDP2-sharded params matches one process, but torch.compile "
                      "captured no graph of the step over DTensor params, so the compiled comparison did not happen (where "
                      "the case's own step captures none either, its parity item is that root cause's red)")
    if unserved is not None:
        raise Blocked(unserved.blocked() + "; the eager step over the same shards matches one process")
    said = f"eager{' and compiled' if sharded_compiled is not None else ''} over DTensor params on {ws} ranks"
    if sharded_compiled is not None:
        said += f" ({sharded_compiled.graphs} graphs, {len(sharded_compiled.recompiles)} recompiles)"
    return Verdict(f"{said} equal one process: {len(run.reference.params)} params and their state; moved {moved:.3g} tol; "
                   f"{run.seconds:.1f}s", {"steps_compared": steps, "world_size": ws, "params": len(run.reference.params),
                                            "compiled_graphs": sharded_compiled.graphs if sharded_compiled is not None else None,
                                            "moved_tolerances": round(moved, 3)})


def check_checkpoint(case: Any, runs: Any) -> Verdict:
    optimizer_cls = resolve(case.optimizer)
    if inspect.isclass(optimizer_cls) and not issubclass(optimizer_cls, torch.optim.Optimizer):
        raise NotApplicable(f"{case.id}: torch.distributed.checkpoint's get_optimizer_state_dict takes a "
                            f"torch.optim.Optimizer, and {optimizer_cls.__name__} is not one")
    try:
        run = _run(case, runs)
    except RankFailure as exc:  # the ranks of the one sharded run both read crashed or hung: fsdp's red
        if "fsdp" not in case.checks:
            raise
        raise Blocked(f"blocked by fsdp: {str(exc).splitlines()[0]}") from None
    _mesh_not_given(case, run.eager)
    if run.eager.error and "fsdp" in case.checks:  # the one sharded run both read: fsdp's red, not a second one
        raise Blocked(f"blocked by fsdp: the eager step over FSDP2-sharded (DTensor) params raised: "
                            f"{run.eager.error.splitlines()[0]}")
    _raised(case, "the eager step over FSDP2-sharded (DTensor) params", run.eager)
    if state_load_rebuilds(run.eager.state):
        require_state_kept_by_load(case, runs)  # DCP's load is torch's load_state_dict too, which garbles a str
    other_grads = _other_grads(case, run)
    if other_grads and "fsdp" in case.checks:
        raise Blocked(f"blocked by fsdp: {other_grads.splitlines()[0]}")
    if other_grads:
        raise AssertionError(f"{case.id}: the run saved on ranks cannot be compared: {other_grads}")
    tol, steps, ws = _tolerance(case), run.case.distributed.iterations, run.world_size
    # the run that never stopped is the sharded one: where it differs from one process (fsdp's red), a run
    # resumed at another world size differs from it for that reason, and only the state as loaded is compared
    sharded_apart = bool(_differences(f"sharded on {ws} ranks", run.reference, run.eager, tol))
    sharded_differs = "fsdp" in case.checks and sharded_apart
    if run.eager.save_error:
        raise KnownCause(f"{case.id}: saving the optimizer's state with torch.distributed.checkpoint "
                         f"(get_optimizer_state_dict, dcp.save) on {ws} ranks after {steps} steps raised: "
                         f"{run.eager.save_error}", run.eager.save_cause, run.eager.save_root_cause)
    never_stopped, saved = run.eager.continued, run.eager.after_save
    assert never_stopped is not None and saved is not None  # the eager sharded run always trains on after saving
    problems = [f"saving changed the optimizer it saved: {d}" for d in
                _differences("right after saving", run.eager, saved, tol, "before saving")]
    held: dict[str, list[str]] = {}
    raised: list[BaseException | None] = []  # per load that raised: the exception, where it raised in this process
    missed_state = False  # a load raised for a param the checkpoint holds no state for
    for size in case.sections["fsdp"].load_world_sizes:
        at = "one process (whole params)" if size == 1 else f"{size} ranks"
        resumed = resume_on_ranks(run, size, runs.rank_pools)
        held = held or resumed.held_before_load
        missed_state = missed_state or resumed.load_missed_state
        if resumed.error or resumed.loaded is None:
            stepping = (" (in the optimizer's step: loading steps a fresh optimizer once, with zero grads at lr 0, to "
                        "create the state it loads into; torch/distributed/checkpoint/state_dict.py, _init_optim_state)"
                        if " in step" in (resumed.error or "") else "")
            problems.append(f"loading at {at} raised{stepping}: {resumed.error}")
            raised.append(resumed.raised)
            continue
        loaded = _differences(f"loaded at {at}", saved, resumed.loaded, tol, f"saved on {ws} ranks")
        problems += [f"right after loading at {at}, vs the state saved on {ws} ranks: {d}" for d in loaded]
        if not loaded and not (sharded_differs and size != ws):
            problems += [f"resumed at {at}, {steps} steps on: {d}" for d in
                         _differences(f"resumed at {at}", never_stopped, resumed, tol, f"never stopped, {ws} ranks")]
    if not problems and sharded_differs and any(size != ws for size in case.sections["fsdp"].load_world_sizes):
        raise Blocked(f"blocked by fsdp: the state loads as saved, but the eager step over params sharded on {ws} ranks "
                      "differs from it over whole params in one process, so a run resumed at another world size "
                      "differs from the one that never stopped for that reason")
    if problems:
        dropped = missed_state or any("missing in loaded" in p for p in problems)
        save_stepped = problems[0].startswith("saving changed")  # DCP's save stepped it: the red's cause
        why = (SAVE_STEPS if save_stepped else
               _constructor_state(held) if dropped and held else DROPPED_KEYS if dropped else "")
        why += tensor_attributes_diagnosis(run.reference.tensor_attributes, "torch.distributed.checkpoint")
        why += params_in_groups_diagnosis(run.reference.groups, "torch.distributed.checkpoint saves param groups as "
                                          "pickled objects, with the saving ranks' sharded params (DTensors) in them, "
                                          "which a load elsewhere finds bound to process groups that are gone")
        # where every problem is a load that raised here, the error is the red's root cause (session.py): AdaBayes
        # divides by lr, and DCP's load steps at lr 0 as the param_groups law does: one red
        cause = raised[0] if len(raised) == len(problems) else None
        # state saved as each rank's plain tensor loads nowhere else: fsdp's red, the same cause
        raise _red(f"{case.id}: optimizer state saved with torch.distributed.checkpoint on {ws} ranks after {steps} "
                   "steps does not resume like the run that never stopped:" + listed(problems) + why, run.eager,
                   partial_reads_matter=sharded_apart, partial_reads_cause=not save_stepped) from cause
    sizes = ", ".join(map(str, case.sections["fsdp"].load_world_sizes))
    entries = sum(len(s) for s in run.eager.state.values())
    return Verdict(f"saved on {ws} ranks after {steps} steps ({entries} state entries), loaded at world size {sizes}: "
                   f"state and param groups as saved, and {steps} more steps equal the run that never stopped",
                   {"saved_world_size": ws, "load_world_sizes": list(case.sections["fsdp"].load_world_sizes),
                    "steps_before_and_after": steps, "state_entries": entries})


SHARD_SHAPED_STATE = "its state is plain tensors of the ranks' shards"  # one red: fsdp's and checkpoint's
PARTIAL_READS = "its step reads numbers off partial DTensors"  # one red: fsdp's and checkpoint's


def _red(message: str, told: Trained | None, partial_reads_matter: bool = True,
         partial_reads_cause: bool = True) -> AssertionError:
    """The red of `message`, with what `told` (the eager sharded run) says of why: numbers its step read off
    partial DTensors, where the sharded run differs from one process (`partial_reads_matter`: else the reads
    changed nothing), the red's root cause unless another is (`partial_reads_cause`: a save that stepped the
    optimizer, thermoclaw's EPTO); state kept as plain shard tensors, one root cause with the other regime's."""
    if told is None:
        return AssertionError(message)
    partial_reads = told.partial_reads if partial_reads_matter else []
    if partial_reads:
        message += _partial_reads(told)
    if told.shard_shaped:
        return KnownCause(message + _shard_shaped(told), SHARD_SHAPED_STATE)
    if partial_reads and partial_reads_cause:  # numbers read off partial DTensors differ by rank: fsdp's red and the load's
        return KnownCause(message, PARTIAL_READS)
    return AssertionError(message)


def _partial_reads(trained: Trained) -> str:
    shown = "; ".join(trained.partial_reads[:2]) + (f" and {len(trained.partial_reads) - 2} more" if len(trained.partial_reads) > 2 else "")
    return ("\n  diagnosis: its step reads a Python number (item(), float()) off a DTensor that is a partial reduction, not "
            f"yet reduced across the ranks ({shown}): DTensor gives each rank its own partial value there (a norm or sum "
            "of the rank's shard), not the whole tensor's, so each rank steps with a number one process never computes: "
            "the optimizer's doing under FSDP2 (take .full_tensor() of the reduction before reading it), met through "
            "DTensor's semantics (torch's)")


def _shard_shaped(trained: Trained) -> str:
    shown = ", ".join(trained.shard_shaped[:3]) + (f" and {len(trained.shard_shaped) - 3} more" if len(trained.shard_shaped) > 3 else "")
    return (f"\n  diagnosis: {SHARD_SHAPED_STATE}, not DTensors ({shown}): its step computes over a rank's shard (from "
            "`to_local()` or the shard's grad) what it computes over the whole param in one process (a matrix function, a "
            "norm, a per-row statistic), and DCP saves that state as each rank's own tensor, which loads at no other world "
            "size: the optimizer's doing (keep state as DTensors like the params, e.g. zeros_like(p), and reduce over the "
            "mesh where the update needs the whole param)")


DROPPED_KEYS = ("\n DCP loads a checkpoint into the state the optimizer holds (get_optimizer_state_dict makes it with one "
                "zero-grad, zero-lr step when there is none): a state key the optimizer creates only on a later step "
                "has no place to load into and is dropped. Create every state key on the first step.")


SAVE_STEPS = ("\n torch's doing (DCP), met by this optimizer: get_optimizer_state_dict, which a save calls, initializes an "
              "optimizer whose state is empty by calling its step() with zero grads at lr 0 "
              "(torch/distributed/checkpoint/state_dict.py, _init_optim_state). This optimizer keeps no per-param state, so "
              "every save steps it once more, and whatever that step changes (a step count in its param groups, a move "
              "that does not scale with lr) is saved and trained on. Way around: keep per-param state in self.state.")


def _constructor_state(held: dict[str, list[str]]) -> str:
    shown = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in list(held.items())[:3])
    return (f"\n the optimizer's doing: it holds state before its first step ({shown}), so DCP's get_optimizer_state_dict "
            "takes that for initialized state and does not run its zero-lr step: a checkpoint loads only into the keys "
            "the optimizer holds, and every other key it saved is dropped (a strict load raises instead, for a param "
            "it holds none for). Create state in step(), or all of it in the constructor.")


FSDP = Check("fsdp", check_fsdp, "FSDP2-sharded params on N ranks, eager and compiled, vs whole params in one process",
             "no_closure", section=FsdpSpec, validate=_validate, case_names=_case_names, rungs=MOVES,
             proves=("FSDP2-sharded params (`fully_shard` on `world_size` ranks), stepped eagerly and compiled, equal the same optimizer over whole "
                     "params in one process: params and state gathered with `full_tensor()`, and the param groups. Evidence: ranks, steps, moved "
                     "tolerances, recompiles."),
             red=("The optimizer cannot take DTensor params (its exception and line), or computes per shard what needs the whole tensor (a norm over "
                  "`to_local()`): the optimizer's doing."))
CHECKPOINT = Check("checkpoint", check_checkpoint, "DCP state saved on N ranks resumes at another world size like the "
                   "run that never stopped", "no_closure", section=FsdpSpec, section_key="fsdp",
                   case_names=_case_names, apply_after=("fsdp",), rungs=MOVES,
                   proves=("DCP state saved on N ranks loads at each of `fsdp.load_world_sizes` equal to what was saved, and continues like the run "
                           "that never stopped. Evidence: world sizes, steps after resuming."),
                   red=("A state key created only on a later step is dropped on load, a tensor lr comes back a float, or the resumed run diverges "
                        "from the uninterrupted one (state kept as a state tensor's `.grad`, which DCP does not save, is named): usually the "
                        "optimizer's state_dict; torch's where DCP itself reshards wrongly."))
