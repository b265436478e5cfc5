"""A whole train step in one process (eager and compiled) vs DDP and ZeRO on N ranks.

Seed 002's comparison with public APIs: every rank gets its shard of the same global
batch; DDP averages the shards' gradients, and multiplying them by the world size (the
seed's scaling) makes them the gradient of the whole batch's summed loss, which is what
the one-process run computes, shard by shard: its grads are the shards' grads summed, as
DDP's reduction sums them, not the whole batch's in one backward, whose rounding differs in
the last bit; an update that divides by a near-zero statistic (an Adam without bias
correction at a vanishing grad) turns that bit into a difference no tolerance admits.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..spec.case import Case
from ..spec.values import build_kwargs, resolve
from . import torch_api
from .blame import one_line, optimizer_frame, told
from .builder import make_scheduler, step_scheduler
from .devices import seed_all
from .isolation import isolated_case
from .param_forms import binding_base_optimizers, constructor_params
from .builder import build_model, loss_for, make_data, make_optimizer, param_dtype, setup_of, zero_grads
from .ranks import RankFailure, RankJob, RankPools, run_ranks
from .snapshot import SEQUENCES, rebuilt
from .state_dict_layout import foreign_layout


@dataclass
class RankResult:
    """What one rank ended with, on CPU."""

    params: dict[str, torch.Tensor]
    state_dict: dict[str, Any]
    zero_params: dict[str, torch.Tensor] | None = None
    zero_state_dict: dict[str, Any] | None = None  # consolidated; rank 0 only
    zero_refused: str | None = None  # what building the optimizer under ZeRO raised, and whose doing it was


@dataclass
class DistributedRun:
    """The one-process eager and compiled runs, and every rank's DDP (and ZeRO) run."""

    case: Case
    initial_params: dict[str, torch.Tensor]
    eager: dict[str, torch.Tensor]
    eager_state_dict: dict[str, Any]
    compiled: dict[str, torch.Tensor]
    ranks: list[RankResult]
    backend: str
    graph_count: int
    graph_breaks: list[str]
    seconds: float  # the ranks, from spawn to teardown
    compiled_error: Exception | None = None  # the compiled train step raised: no `compiled` params (ZeRO needs none)
    zero_failure: RankFailure | None = None  # the ZeRO job failed on a rank: the zero check's red, not DDP's


@dataclass(frozen=True)
class _Payload:
    case: Case
    batches: list[torch.Tensor]  # the global batches, on CPU


def unavailable_reason(case: Case) -> str | None:
    """Why this machine cannot run the case on `world_size` ranks, or None."""
    world_size = case.distributed.world_size
    if case.backward != "plain":
        return (f"the spec's `backward: {case.backward}`: DDP and FSDP2 reduce grads in the hooks of loss.backward(), and a "
                "step that differentiates its closure's graph itself would get its rank's unreduced grads: not applicable")
    if case.device == "cuda" and torch.cuda.device_count() < world_size:
        return f"distributed cuda case: needs {world_size} CUDA devices (one per rank), found {torch.cuda.device_count()}"
    if case.device not in ("cpu", "cuda"):
        return f"distributed: no backend for device {case.device!r} (gloo on cpu, nccl on cuda)"
    return None


def run_distributed(case: Case, pools: RankPools | None = None) -> DistributedRun:
    """Run the case's train step on its ranks (those `pools` keeps, else ranks started for this
    run), then in this process eagerly and compiled."""
    spec = case.distributed
    seed_all(case.seed + 1000)
    batches = [make_data(case.data, "cpu", spec.batch, dtype=param_dtype(case))[0] for _ in range(spec.iterations)]
    backend = rank_backend(case)
    zero = "zero" in case.checks and zero_takes(case)
    start = time.perf_counter()
    payload = _Payload(case, batches)
    ranks = run_ranks(RankJob(f"{__name__}:rank_main", payload, spec.world_size, backend, spec.timeout_s), pools)
    zero_failure = None
    if zero:  # a job of its own: ZeRO failing on a rank (an optimizer that swaps its params' storage) is not DDP's red
        try:
            zero_ranks = run_ranks(RankJob(f"{__name__}:rank_zero_main", payload, spec.world_size, backend, spec.timeout_s), pools)
        except RankFailure as exc:
            zero_failure = exc
        else:
            for result, zero_result in zip(ranks, zero_ranks):
                result.zero_params, result.zero_state_dict, result.zero_refused = zero_result
    seconds = time.perf_counter() - start
    with isolated_case(case):
        initial, eager, eager_state, _ = _train_local(case, batches, compiled=False)
        torch_api.reset_compile_state()
        compiled, error = {}, None
        try:
            _, compiled, _, _ = _train_local(case, batches, compiled=True)
        except Exception as exc:  # the distributed check's to judge; the eager DDP and ZeRO runs stand
            error = exc
        graphs, breaks = torch_api.captured_graph_count(), torch_api.graph_break_reasons()
    return DistributedRun(case, initial, eager, eager_state, compiled, ranks, backend, graphs, breaks, seconds, error,
                          zero_failure)


def _train_local(case: Case, batches: list[torch.Tensor], compiled: bool):
    seed_all(case.seed)
    model = build_model(case)
    initial = _cpu_params(model)
    opt = make_optimizer(case, model)
    scheduler = make_scheduler(case, opt) if case.scheduler else None
    loss_fn = loss_for(case.data)

    def train_step(inputs: torch.Tensor) -> None:
        for shard in inputs.chunk(case.distributed.world_size):  # each rank's, summed as DDP's reduction sums them
            loss_fn(model(shard)).backward()
        opt.step()
        zero_grads(opt, model.parameters)

    step = torch.compile(train_step, backend="inductor") if compiled else train_step
    for batch in batches:
        step(batch.to(case.device))
        if scheduler is not None:
            step_scheduler(scheduler)
    return initial, _cpu_params(model), _saved(opt), opt


def rank_main(payload: _Payload, rank: int, world_size: int) -> RankResult:
    """One rank (runs in the rank's process): DDP with the plain optimizer."""
    return RankResult(*_train_ddp(on_rank(payload.case, rank), payload.batches, rank, world_size, zero=False))


def rank_zero_main(payload: _Payload, rank: int, world_size: int) -> tuple[Any, Any, str | None]:
    """One rank: DDP with ZeRO over the optimizer; (params, consolidated state_dict or None, why ZeRO refused it)."""
    try:
        return (*_train_ddp(on_rank(payload.case, rank), payload.batches, rank, world_size, zero=True), None)
    except ZeroRefused as exc:  # every rank builds alike and raises alike: none is left in a collective
        return None, None, str(exc)


class ZeroRefused(Exception):
    """ZeroRedundancyOptimizer could not take the optimizer: its class raised in ZeRO's constructor (given
    param groups, say), or its state_dict could not be consolidated; the message says when and why."""

    def __init__(self, when: str, why: str) -> None:
        super().__init__(f"{when}: {why}")


# What an optimizer that shards or syncs itself across ranks calls in its step (Adams_ZeRO's all_gather_into_tensor).
COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_reduce", "all_to_all", "all_to_all_single", "barrier",
               "broadcast", "gather", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter")


def _without_collectives(function: Any) -> Any:
    """`function` (the local optimizer's constructor or step under ZeRO), refused with ZeroRefused, on every rank
    alike so that none waits in a collective, where the optimizer calls a torch.distributed collective itself:
    ZeRO gives each rank's instance other params, so those collectives cannot match (a hang, or garbage), and
    an optimizer that distributes itself is not ZeRO's to wrap."""
    def called(*args: Any, **kwargs: Any) -> Any:
        with _collectives_refused():
            return function(*args, **kwargs)
    return called


@contextlib.contextmanager
def _collectives_refused() -> Iterator[None]:
    import torch.distributed as dist  # the module the optimizer's code calls them through

    def refused(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            where = optimizer_frame(traceback.extract_stack()[:-1], code=True) or "its step"
            raise ZeroRefused("distributing itself", f"the optimizer calls torch.distributed.{name} itself, at {where}: "
                              "it distributes its own work across the ranks, and ZeRO gives each rank's instance other "
                              "params, so those collectives cannot match")
        return call

    saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    try:
        for name in saved:
            setattr(dist, name, refused(name))
        yield
    finally:
        for name, function in saved.items():
            setattr(dist, name, function)


def _consolidation_error(exc: BaseException, optimizer: Any) -> str:
    """What ZeRO's consolidation raised, and whose doing it is: the optimizer's where its state_dict is not
    torch.optim's layout (Magma's, Lookahead's), though ZeRO's frame raised the KeyError."""
    foreign = foreign_layout(optimizer)
    if not foreign:
        return told(exc)
    return (f"{one_line(exc)}, raised in ZeroRedundancyOptimizer reading it\n  diagnosis: {foreign} (ZeRO gathers and "
            "merges the ranks' 'state' and 'param_groups')")


def _regrouped_by(case: Case) -> str | None:
    """Why ZeRO refused an optimizer that makes other param groups than it is given (gefen's one group
    per param): ZeRO syncs its own groups with the optimizer's one to one; None where it keeps them."""
    try:
        model = build_model(case)
        groups = sum(isinstance(g, dict) for g in constructor_params(case.params, model, case.device)) or 1  # a list: one
        made = len(make_optimizer(case, model).param_groups)
    except Exception:  # noqa: BLE001  # it does not build in one process either: that is told as it is
        return None
    if made == groups:
        return None
    name = getattr(resolve(case.optimizer), "__name__", case.optimizer)
    return (f"{name} makes {made} param groups of the {groups} it is given, and ZeroRedundancyOptimizer keeps its "
            "own groups and the optimizer's in step one to one: the optimizer's doing (keep the groups it is given)")


def load_into_plain(case: Case, state_dict: Any) -> tuple[dict[str, Any], str | None]:
    """(the state_dict of a plain optimizer of the case loaded with ZeRO's consolidated one, None),
    or ({}, why it does not load)."""
    opt = make_optimizer(case, build_model(case))
    try:
        opt.load_state_dict(state_dict)
    except Exception as exc:  # the property under test: it must load
        return {}, f"does not load into a plain {type(opt).__name__}: {type(exc).__name__}: {exc}"
    return opt.state_dict(), None


def rank_backend(case: Case) -> str:
    """The process group's backend for the case's device: NCCL on CUDA, gloo on CPU."""
    return "nccl" if case.device == "cuda" else "gloo"


def on_rank(case: Case, rank: int) -> Case:
    """The case as rank `rank` runs it: on CUDA, on that rank's own GPU."""
    if case.device != "cuda":
        return case
    torch.cuda.set_device(rank)
    return replace(case, device=f"cuda:{rank}")


def zero_takes(case: Case) -> bool:
    """ZeroRedundancyOptimizer hands its optimizer class param lists or groups, never names or a model."""
    return case.params not in ("named", "model") and not (isinstance(case.params, list) and case.params[0].argument)


def _train_ddp(case: Case, batches: list[torch.Tensor], rank: int, world_size: int, zero: bool):
    from torch.nn.parallel import DistributedDataParallel

    seed_all(case.seed)
    model = build_model(case)
    ddp = DistributedDataParallel(model, device_ids=[rank] if case.device.startswith("cuda") else None)
    if zero:
        params = constructor_params(case.params, ddp.module, case.device)
        kwargs = build_kwargs(case.kwargs, case.device)
        try:
            opt = torch_api.distributed_optim().ZeroRedundancyOptimizer(
                params, optimizer_class=_without_collectives(
                    binding_base_optimizers(resolve(case.optimizer), kwargs, case.params, setup_of(case))), **kwargs)
        except ZeroRefused:
            raise
        except Exception as exc:  # noqa: BLE001  # the zero check's verdict, told with its line, not a crashed rank
            regrouped = _regrouped_by(case)
            raise ZeroRefused("building it", f"{one_line(exc)}, raised in ZeroRedundancyOptimizer\n  diagnosis: {regrouped}"
                              if regrouped else told(exc)) from exc
        opt.optim.step = _without_collectives(opt.optim.step)  # ZeRO's own broadcasts follow the local step
    else:
        opt = make_optimizer(case, ddp.module)
    scheduler = make_scheduler(case, opt) if case.scheduler else None
    loss_fn = loss_for(case.data)
    for batch in batches:
        loss_fn(ddp(batch.chunk(world_size)[rank].to(case.device))).backward()
        with torch.no_grad():  # DDP averages over ranks; the one-process loss sums the whole batch
            for p in ddp.parameters():
                if p.grad is not None:
                    p.grad.mul_(world_size)
        opt.step()
        zero_grads(opt, ddp.parameters)
        if scheduler is not None:
            step_scheduler(scheduler)
    if zero:
        opt.consolidate_state_dict(to=0)
        try:
            state = _cpu(opt.state_dict()) if rank == 0 else None
        except Exception as exc:  # noqa: BLE001  # rank 0 alone, after the last collective: told, DDP's run stands
            raise ZeroRefused("saving its consolidated state_dict on rank 0", _consolidation_error(exc, opt.optim)) from exc
    else:
        state = _saved(opt)
    return _cpu_params(model), state


def _saved(optimizer: Any) -> dict[str, Any]:
    """The optimizer's state_dict on the CPU; empty for one without (emotigrad's wrapper): its params are compared."""
    return _cpu(optimizer.state_dict()) if callable(getattr(optimizer, "state_dict", None)) else {}


def _cpu_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()}


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, SEQUENCES):
        return rebuilt(value, (_cpu(v) for v in value))
    return value
