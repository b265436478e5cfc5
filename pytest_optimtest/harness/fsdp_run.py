"""FSDP2: the case's optimizer over DTensor params sharded with `fully_shard` on N ranks, eager
and compiled, against the same optimizer over whole params in one process; and its state saved
with torch.distributed.checkpoint (DCP) and resumed at another world size.

Every rank trains on the whole global batch. FSDP2 averages the ranks' gradients, and the
average of equal gradients is the one-process gradient, so what differs is the optimizer on
shards against the optimizer on whole params, not the data parallelism. The first step's grads
are kept, whole, to show that (torch 2.7's and 2.8's FSDP2 on gloo summed them instead).
"""

from __future__ import annotations

import functools
import re
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..spec.case import Case
from ..spec.values import sharding_mesh
from . import torch_api
from .blame import blame, mechanism, one_line, optimizer_frame, root_cause
from .builder import (build_model, compile_step, loss_for, make_data, make_optimizer, make_scheduler, param_dtype,
                      step_grad_mode, step_scheduler, zero_grads)
from .devices import seed_all
from .distributed_run import on_rank, rank_backend
from .distributed_run import unavailable_reason as ranks_unavailable  # the same rank pools, the same limits
from .isolation import isolated_case
from .rank_compile import rank_ordered_inductor
from .ranks import RankJob, RankPools, run_ranks
from .snapshot import SEQUENCES, SIMPLE, frozen_tensor, per_param_state, rebuilt, snapshot, tensors_in
from .state_dict_layout import FOREIGN_LAYOUT, UNKEYED_STATE, foreign_layout, state_dict_layout


@dataclass
class Trained:
    """What a run ended with, whole and on CPU, keyed by param name; or the exception it raised."""

    params: dict[str, torch.Tensor] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)  # param groups, less their params
    tensor_attributes: tuple[str, ...] = ()  # state kept as attributes of state tensors (snapshot.tensor_attributes)
    shard_shaped: tuple[str, ...] = ()  # state entries that are plain tensors of a DTensor param's shard, with shapes
    partial_reads: tuple[str, ...] = ()  # eager: where its step read a number off a partial DTensor (torch_api.partial_scalar_reads)
    scheduler: dict[str, Any] | None = None  # the LR scheduler's state_dict
    first_grads: dict[str, torch.Tensor] = field(default_factory=dict)  # the grads the first step was given, whole
    recompiles: list[str] = field(default_factory=list)  # compiled: dynamo's message for each recompile
    graphs: int = 0
    error: str | None = None  # what raised, where, and whose doing it is
    unshardable: str | None = None  # why fully_shard refused the spec's model
    save_error: str | None = None  # what torch.distributed.checkpoint raised saving the state
    save_cause: str = ""  # its root cause, where blame knows one
    save_root_cause: str = ""  # its root_cause key: one red with the same error raised anywhere in the case
    loaded: Trained | None = None  # a resumed run: what it held right after loading the checkpoint
    held_before_load: dict[str, list[str]] = field(default_factory=dict)  # a resumed run: state keys per param its fresh optimizer held
    load_missed_state: bool = False  # a resumed run: DCP's strict load raised for a param the checkpoint holds no state for
    after_save: Trained | None = None  # a checkpointed run: what it held right after DCP saved it
    continued: Trained | None = None  # a checkpointed run: what it held after training on, never stopped
    raised: BaseException | None = field(default=None, repr=False, compare=False)  # a run in this process: what it raised


@dataclass
class FsdpRun:
    """The sharded runs (rank 0's view), the one-process reference, and the checkpoint folder.
    The eager sharded run saves its state after `iterations` steps and trains on (`continued`)."""

    case: Case
    batches: list[torch.Tensor]  # 2 x iterations global batches: the checkpoint check resumes on the second half
    initial: dict[str, torch.Tensor]
    reference: Trained  # one process, whole params, eager, `iterations` steps
    eager: Trained
    compiled: Trained | None
    world_size: int
    seconds: float
    folder: tempfile.TemporaryDirectory  # the eager sharded run's DCP checkpoint, after `iterations` steps

    @property
    def checkpoint(self) -> str:
        return self.folder.name

    @functools.cached_property
    def nudged_reference(self) -> Trained:
        """The reference again, its params nudged by one ulp after the first step: how far rounding made
        in one step carries by the last (an update over a vanishing grad amplifies it a thousandfold)."""
        with isolated_case(self.case):
            return train_whole(self.case, self.batches[:self.case.distributed.iterations], nudged=True)


@dataclass(frozen=True)
class _Train:
    case: Case
    batches: list[torch.Tensor]
    compiled: bool
    checkpoint: str | None  # save the state here after `iterations` batches, then train on through the rest
    run_key: str = ""  # names the run on the process group's store (rank-ordered compiles)


@dataclass(frozen=True)
class _Resume:
    case: Case
    batches: list[torch.Tensor]  # those after the checkpoint
    checkpoint: str
    scheduler: dict[str, Any] | None


def unavailable_reason(case: Case) -> str | None:
    """Why this machine (or this torch) cannot shard the case with FSDP2, or None."""
    if case.device == "cpu" and not torch_api.fsdp2_runs_on_cpu():
        return (f"FSDP2 cannot shard on CPU in torch {torch.__version__}: fully_shard records an event on torch.cpu.Stream, "
                "which has none to record here (torch 2.6: AttributeError in foreach_all_gather); torch 2.11 and later run it")
    return ranks_unavailable(case)


def run_fsdp(case: Case, pools: RankPools | None = None) -> FsdpRun:
    """The case's sharded runs on `distributed.world_size` ranks (eager, and compiled unless the
    spec says not), and the one-process reference."""
    spec, section = case.distributed, case.sections["fsdp"]
    seed_all(case.seed + 1000)
    batches = [make_data(case.data, "cpu", spec.batch, dtype=param_dtype(case))[0] for _ in range(2 * spec.iterations)]
    folder = tempfile.TemporaryDirectory(prefix="optimtest-dcp-")
    start = time.perf_counter()
    eager = _on_ranks(case, _Train(case, batches, False, folder.name), pools)
    compiled = _on_ranks(case, _Train(case, batches[:spec.iterations], True, None, uuid.uuid4().hex), pools) if section.compiled else None
    seconds = time.perf_counter() - start
    with isolated_case(case):
        seed_all(case.seed)
        initial = {n: p.detach().cpu().clone() for n, p in build_model(case).named_parameters()}
        reference = train_whole(case, batches[:spec.iterations])
    return FsdpRun(case, batches, initial, reference, eager, compiled, spec.world_size, seconds, folder)


def _on_ranks(case: Case, payload: Any, pools: RankPools | None, world_size: int | None = None) -> Trained:
    function = "train_main" if isinstance(payload, _Train) else "resume_main"
    job = RankJob(f"pytest_optimtest.harness.fsdp_run:{function}", payload, world_size or case.distributed.world_size,
                  rank_backend(case), case.distributed.timeout_s)
    return run_ranks(job, pools)[0]  # full tensors: every rank holds the same


def resume_on_ranks(run: FsdpRun, world_size: int, pools: RankPools | None = None) -> Trained:
    """The eager sharded run's checkpoint loaded on `world_size` ranks (1: this process, whole params
    and no process group, as a user loads it to evaluate or fine-tune), trained on the second half."""
    iterations = run.case.distributed.iterations
    payload = _Resume(run.case, run.batches[iterations:], run.checkpoint, run.eager.scheduler)
    if world_size == 1:
        with isolated_case(run.case):
            return _guarded(lambda: _resume(payload, None), in_process=True)
    return _on_ranks(run.case, payload, pools, world_size)


def train_whole(case: Case, batches: list[torch.Tensor], nudged: bool = False) -> Trained:
    """The reference: the case's eager optimizer over whole params, in this process; `nudged`: each
    floating param moved by one ulp after the first step."""
    seed_all(case.seed)
    model = build_model(case)
    optimizer = make_optimizer(case, model)
    scheduler = make_scheduler(case, optimizer) if case.scheduler else None
    first_grads = _train(case, model, optimizer, optimizer.step, scheduler, batches[:1] if nudged else batches)
    if nudged:
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    p.copy_(torch.nextafter(p, torch.full_like(p, float("inf"))))
        _train(case, model, optimizer, optimizer.step, scheduler, batches[1:], first=1)
    return replace(_trained(model, optimizer, scheduler), first_grads=first_grads)


def train_main(payload: _Train, rank: int, world_size: int) -> Trained:
    """One rank: shard the model, train, gather; save the state with DCP when asked."""
    case = on_rank(payload.case, rank)
    torch_api.reset_compile_state()
    with torch_api.recording_recompiles() as recompiles, torch_api.recompile_limit_at(case.recompile_limit):
        result = _guarded(lambda: _train_sharded(case, payload, rank, world_size))
    result.recompiles, result.graphs = list(recompiles), torch_api.captured_graph_count()
    torch_api.reset_compile_state()
    return result


def resume_main(payload: _Resume, rank: int, world_size: int) -> Trained:
    """One rank: shard the model, load the checkpoint into it and the optimizer, train on."""
    case = on_rank(payload.case, rank)
    with torch_api.recompile_limit_at(case.recompile_limit):
        return _guarded(lambda: _resume(replace(payload, case=case), _mesh(case, world_size)))


def _train_sharded(case: Case, payload: _Train, rank: int, world_size: int) -> Trained:
    seed_all(case.seed)
    model = build_model(case)
    mesh = _mesh(case, world_size)
    try:
        _sharded(model, mesh)
    except Exception as exc:  # the spec's model, not the optimizer: the checks cannot apply
        return Trained(unshardable=f"{type(exc).__name__}: {exc}")
    with sharding_mesh(mesh):
        optimizer = make_optimizer(case, model)
    scheduler = make_scheduler(case, optimizer) if case.scheduler else None
    reads: list[list[traceback.FrameSummary]] = []
    step = (compile_step(optimizer, backend=rank_ordered_inductor(rank, payload.run_key)) if payload.compiled else
            _watching_partial_reads(optimizer.step, reads))
    iterations = case.distributed.iterations
    first_grads = _train(case, model, optimizer, step, scheduler, payload.batches[:iterations])
    partial_reads = tuple(dict.fromkeys(optimizer_frame(stack, code=True) or "torch's code" for stack in reads))
    trained = replace(_trained(model, optimizer, scheduler), first_grads=first_grads, partial_reads=partial_reads)
    if payload.checkpoint:
        try:
            torch_api.dcp_save(model, optimizer, payload.checkpoint)
        except torch_api.checkpoint_errors() as exc:  # the checkpoint check's verdict; the train run stands
            foreign = foreign_layout(optimizer)  # DCP reads 'state' and 'param_groups' first: a KeyError, "torch's"
            unkeyed = _unkeyed_state(optimizer, exc) if not foreign else None
            trained.save_error = (unkeyed or _described(exc) if not foreign else
                                  f"{one_line(exc)}, raised in torch.distributed.checkpoint reading it\n  diagnosis: {foreign}")
            trained.save_cause, trained.save_root_cause = ((FOREIGN_LAYOUT, FOREIGN_LAYOUT) if foreign else
                                                           (UNKEYED_STATE, UNKEYED_STATE) if unkeyed else _save_cause(exc))
            return trained
        trained.after_save = _trained(model, optimizer, scheduler)  # DCP steps an optimizer whose state is empty
        _train(case, model, optimizer, step, scheduler, payload.batches[iterations:], first=iterations)
        trained.continued = _trained(model, optimizer, scheduler)
    return trained


def _watching_partial_reads(step: Callable[[], Any], found: list[list[traceback.FrameSummary]]) -> Callable[[], Any]:
    """The eager step, recording where it reads a Python number off a partial DTensor (a norm of a shard)."""
    def watched() -> Any:
        with torch_api.partial_scalar_reads() as reads:
            result = step()
        found.extend(reads)
        return result
    return watched


def _resume(payload: _Resume, mesh: Any) -> Trained:
    case = payload.case
    seed_all(case.seed)
    model = build_model(case)
    if mesh is not None:
        model = _sharded(model, mesh)
    with sharding_mesh(mesh):
        optimizer = make_optimizer(case, model)
    scheduler = make_scheduler(case, optimizer) if case.scheduler else None  # made before loading, as a training script does
    names: dict[Any, str] = {p: name for name, p in model.named_parameters()}
    held = {names.get(p, f"<{type(p).__name__}>"): sorted(map(str, entry)) for p, entry in per_param_state(optimizer).items() if entry}
    try:
        torch_api.dcp_load(model, optimizer, payload.checkpoint)
    except torch_api.checkpoint_errors() as exc:  # the checkpoint check's verdict, with what the optimizer held before
        missed = torch_api.dcp_missing_state(exc)
        premade = bool(held) and missed  # held before a step: DCP made no state for the rest
        return Trained(error=_described(exc, premade), raised=exc if mesh is None else None, held_before_load=held,
                       load_missed_state=missed)
    if scheduler is not None and payload.scheduler is not None:
        scheduler.load_state_dict(payload.scheduler)
    loaded = _trained(model, optimizer, scheduler)
    _train(case, model, optimizer, optimizer.step, scheduler, payload.batches, first=case.distributed.iterations)
    return replace(_trained(model, optimizer, scheduler), loaded=loaded, held_before_load=held)


def _mesh(case: Case, world_size: int) -> Any:
    return torch_api.device_mesh("cuda" if case.device.startswith("cuda") else "cpu", world_size)


def _sharded(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """fully_shard on every module that holds params of its own, then on the root (FSDP2's usual wrapping)."""
    for module in list(model.modules())[1:]:
        if next(module.parameters(recurse=False), None) is not None:
            torch_api.fully_shard(module, mesh)
    torch_api.fully_shard(model, mesh)
    return model


def _train(case: Case, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: Callable[[], Any],
           scheduler: Any, batches: list[torch.Tensor], first: int = 0) -> dict[str, torch.Tensor]:
    """Train steps on `batches`, the first being train step number `first` (it seeds the step); the
    grads train step 0 gave the optimizer, whole (gathered on every rank), when it is among them."""
    loss_fn = loss_for(case.data)
    first_grads: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(batches, start=first):
        loss_fn(model(batch.to(case.device))).backward()
        if index == 0:  # before any step: what they hold is the model's and FSDP2's doing, not the optimizer's
            first_grads = _portable({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        seed_all(case.seed + 1 + index, case)
        with step_grad_mode(case):  # compile_step's raw step leaves grad mode to its caller
            step()
        zero_grads(optimizer, model.parameters)
        if scheduler is not None:
            step_scheduler(scheduler)
    return first_grads


def _trained(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> Trained:
    """What the run holds, as parity snapshots it (state keyed by param name, group values by what
    they are), every tensor gathered whole: picklable, and comparable with the one-process run."""
    taken = snapshot(optimizer, {p: name for name, p in model.named_parameters()})
    shard_shaped = tuple(f"state[{name!r}][{key!r}]{inner} {tuple(value.shape)} of {tuple(p.shape)}"
                         for name, p in model.named_parameters() for key, entry in per_param_state(optimizer).get(p, {}).items()
                         for inner, value in tensors_in(entry) if torch_api.shard_shaped(p, value))
    return Trained(params=_portable(taken.params), state=_portable(taken.state), groups=_portable(taken.groups),
                   tensor_attributes=taken.tensor_attributes, shard_shaped=shard_shaped,
                   scheduler=scheduler.state_dict() if scheduler is not None else None)


def _portable(value: Any) -> Any:
    """Tensors (DTensors gathered) on CPU, containers walked, plain values as they are; any other
    object by its type's name: it cannot cross to the test process, and two runs' objects of one
    type compare equal by that name."""
    if isinstance(value, torch.Tensor):
        # copied shard by shard first: a tensor subclass' shards (torchao's quantized state) may not gather
        return torch_api.full_tensor(torch_api.map_local(value, frozen_tensor)).cpu()
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, SEQUENCES):
        return rebuilt(value, (_portable(v) for v in value))
    if isinstance(value, SIMPLE):
        return value
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _guarded(run: Callable[[], Trained], in_process: bool = False) -> Trained:
    """The run's result, or the exception it raised as text (pickled back to the test process,
    where a traceback object cannot go); run `in_process`, the exception itself too (its root cause)."""
    try:
        return run()
    except torch_api.checkpoint_errors() as exc:  # the optimizer's (or torch's) failure on sharded params is the verdict
        return Trained(error=_described(exc), raised=exc if in_process else None)


def _unkeyed_state(optimizer: Any, exc: BaseException) -> str | None:
    """Why DCP's save raised `exc` where it raised over an entry the optimizer's state_dict keeps under
    'state' that is no param's (DoG's '_first_step'): torch.optim keeps one entry a param, keyed by its
    index, and DCP maps those keys to param names. None where the error is not about such a key."""
    layout = state_dict_layout(optimizer)
    keys = layout.unkeyed if layout is not None else []
    if not any(repr(key) in str(exc) for key in keys):
        return None
    return (f"{type(exc).__name__}: {exc}: {type(optimizer).__name__}.state_dict() keeps {', '.join(map(repr, keys))} under 'state', where torch.optim "
            "keeps one entry per param, keyed by its index; torch.distributed.checkpoint maps those keys to param names and "
            "raises on these (KeyError): the optimizer's doing (keep such values in a param group, or in each param's state)")


def _first_rank_failure(exc: BaseException) -> tuple[list[int], BaseException, list[traceback.FrameSummary]] | None:
    """(the failed ranks, the first one's exception and its extracted traceback) of a DCP
    CheckpointException, or None for any other exception."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return None
    ranks = sorted(failures)
    cause, frames = failures[ranks[0]]
    return ranks, cause, list(frames or [])


def _save_cause(exc: BaseException) -> tuple[str, str]:
    """(the mechanism blame knows, or '', and the root_cause key) of DCP's failure: the first failing
    rank's exception, for a CheckpointException."""
    first = _first_rank_failure(exc)
    if first is None:
        found = blame(exc)
        return found.mechanism, root_cause(exc, found=found)
    return mechanism(first[1], first[2]), root_cause(first[1], first[2])


# DCP's load planner, where a state entry is a tensor on one side and a Python value on the other
_RETYPED_STATE = re.compile(r"Invalid checkpoint metadata for optim\.state\.(?P<param>.+)\.(?P<key>[^.]+), expected "
                            r"(?P<expected>Bytes|Tensor)StorageMetadata but found <class '[\w.]*?(?P<found>Bytes|Tensor)StorageMetadata'>")


def _retyped_state(exc: BaseException) -> str:
    """Why DCP refused a state entry whose type the loading optimizer and the checkpoint disagree on (catalyst's
    Lamb keeps `trust_ratio` a tensor, or the int 1 where a norm is 0, as on the zero grads DCP steps a fresh
    optimizer on to make its state); '' for any other error."""
    found = _RETYPED_STATE.search(str(exc))
    if found is None:
        return ""
    kinds = {"Tensor": "a tensor", "Bytes": "a Python value (not a tensor)"}
    return (f"state {found['key']!r} of param {found['param']!r} is {kinds[found['found']]} in the checkpoint and "
            f"{kinds[found['expected']]} in the optimizer made to load it, whose state DCP makes with one step on zero "
            f"grads at lr 0 (torch.distributed.checkpoint.state_dict._init_optim_state): the step keeps {found['key']!r} "
            "as a tensor or a Python number depending on the values it sees, which DCP cannot reshard; the optimizer's "
            "doing (keep each state entry one type, a 0-d tensor throughout)")


def _described(exc: BaseException, optimizers_doing: bool = False) -> str:
    """What raised, the line that raised it, and whose doing it is (for a DCP CheckpointException,
    the first rank's own exception); `optimizers_doing`: the check's diagnosis says why it is the
    optimizer's, though torch raised it."""
    first = _first_rank_failure(exc)
    if first is not None:
        ranks, cause, frames = first
        user = [f for f in frames if "site-packages/torch/" not in f.filename]
        last = frames[-1] if frames else None
        retyped = _retyped_state(cause)
        return (f"on ranks {ranks}, rank {ranks[0]}'s: {type(cause).__name__}: {cause}\n  raised at "
                + (f"{last.filename}:{last.lineno} in {last.name}" if last else "an unknown line")
                + " (inside torch.distributed.checkpoint)" + "".join(f"\n  via {f.filename}:{f.lineno}" for f in user[-2:])
                + (f"\n  diagnosis: {retyped}" if retyped else ""))
    found = blame(exc)
    where = found.where or found.innermost
    owner = "the optimizer's doing, though torch raised it: see the diagnosis" if optimizers_doing else f"{found.owner}'s doing"
    return (f"{type(exc).__name__}: {exc}\n  raised at {where} ({owner})\n"
            + (f"  diagnosis: {found.note}\n" if found.note else "")
            + (found.traceback() or "".join(traceback.format_exception(exc)[-6:])))
