"""The one runner: a run is a value. `run(case, regime)` builds the case's model in its dtype and
the optimizer in the spec's params form, steps it (eagerly or compiled; with a closure where the
regime has one and the step takes one; grads None where the regime says; a warm-up, the LR
scheduler, checkpoints and perturbations where it asks for them), and records what happened:
snapshots, dynamo's graphs, kernels, breaks and recompiles per step (the closure's graphs apart
from the step's), step times, RNG use, storage aliases, a failure when asked to record it, and weak
references to the params.

A check that needs a run asks for it with a `Regime`, a small configuration, and judges the
`Run` it gets back; it never builds or steps anything itself.
"""

from __future__ import annotations

import contextlib
import io
import random
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from . import torch_api
from .builder import (ClosureCompiles, build_model, compile_step, first_backward, law_closure, make_closure, make_optimizer,
                      make_scheduler, require_closure_parameter, requires_closure, seeded_model, step_grad_mode, step_parameters,
                      step_scheduler, step_site)
from .containment import PROGRESS
from ..spec.values import resolve
from .devices import package_generator_states, seed_all
from .isolation import isolated_case
from .perturbations import PerturbationFailure, PerturbationOutcome, StepCompiles, apply_perturbation
from .run_phases import SETTLE_STEPS, Perturbation, run_phases
from .snapshot import OptimizerSnapshot, snapshot, storage_aliases, storage_of, storage_pointer, unsaved_generators
from .state_dict_layout import load_rebinds
from .vacuity import NotApplicable, divergence

MissingGrads = tuple[int, ...] | Literal["all"]  # indices into the model's params (-1: the last), or every one

MANY_SMALL = (100, (2, 2))  # how many params, of which shape: the compile-time regime's model


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """Params and the optimizer's state_dict after `step` steps, as a checkpoint file gives them back
    (through torch.save and torch.load: loaded directly, two optimizers would alias state tensors)."""

    step: int
    params: dict[str, torch.Tensor]
    state_dict: bytes
    # the grads as the run had them: without a closure its steps step on one backward's grads, which a step may write
    # (schedule-free's): a resumed run steps on those, as the run that never stopped does, and compares optimizer state
    grads: dict[str, torch.Tensor | None]
    unsaved_generators: tuple[str, ...] = ()  # the optimizer's own torch.Generators, drawn from, the state_dict lacks

    def optimizer_state(self) -> dict[str, Any]:
        return torch.load(io.BytesIO(self.state_dict), weights_only=False)


@dataclass(frozen=True)
class Regime:
    """How one run of a case steps. The defaults are the case as the spec gives it, run eagerly.
    Equal regimes of a case are one run, shared by the checks that ask for it (run_cache.py)."""

    compiled: bool = False  # torch.compile of the raw step, as PyTorch's tests (fullgraph off)
    backend: str = "inductor"
    inductor: tuple[tuple[str, Any], ...] = ()  # (option, value): inductor config for the run
    closure: bool | None = None  # None: the case's own (NotApplicable where the step takes none)
    closure_graph_break: bool = False  # the closure breaks dynamo's graph between forward and backward
    steps: int | None = None  # None: the case's steps (or the missing-grads pattern's length); after a warm-up, at
    #                           least this many more, and at least the case's steps in all
    warmup: int | None = None  # declared warm-up steps (dynamo's graph breaks are read after them)
    settle: bool = False  # warm up until a step compiles nothing (2 to SETTLE_STEPS steps), the scheduler held meanwhile
    missing_grads: tuple[MissingGrads, ...] = ()  # per step, the params whose grad is None
    every_step: bool = False  # a snapshot after every step, not only after the last
    scheduler: bool = False  # step the case's LR scheduler (if it has one) after every step
    scheduler_from: int = 1  # ... from this (1-based) step on; with `settle`, from the warm-up's last step on
    model: Literal["case", "many_small"] = "case"  # many_small: MANY_SMALL params of ones with grads of ones
    kwargs: tuple[tuple[str, Any], ...] = ()  # (name, value) over the case's kwargs
    checkpoint_at: int | None = None  # take a Checkpoint after this many steps
    load_at: tuple[int, Checkpoint] | None = None  # after this many steps, load that checkpoint (params and state)
    resume: Checkpoint | None = None  # start from this checkpoint, numbering steps on from it
    failures: Literal["raise", "record"] = "raise"  # record: an error constructing or stepping ends the run, kept in it
    perturb: bool = False  # after the steps (if none of them after the warm-up recompiled), the spec's perturbations


@dataclass(frozen=True)
class RunFailure:
    """Where a recorded run stopped: constructing (step 0) or at a step, and the error itself."""

    phase: Literal["constructs", "steps"]
    step: int
    error: Exception
    diverged: str = ""  # how the params had blown up when the step raised (vacuity.divergence), or ""


@dataclass
class Run:
    """What one run of a case did."""

    case: Any
    regime: Regime
    initial: dict[str, torch.Tensor]
    snapshots: list[OptimizerSnapshot] = field(default_factory=list)  # after each step (every_step), else the last
    checkpoint: Checkpoint | None = None
    graphs: int = 0  # graphs dynamo captured before any perturbation, the closure's included
    kernels: int = 0  # kernels inductor generated before any perturbation, the closure's included
    closure: ClosureCompiles = field(default_factory=ClosureCompiles)
    compiles: list[StepCompiles] = field(default_factory=list)  # per step: the step's own graphs, kernels, recompiles
    warmup_steps: int = 0  # how many of the steps were the warm-up
    graph_breaks: Counter = field(default_factory=Counter)  # reason -> times hit, over the warm-up (or the run)
    frames_given_up: Counter = field(default_factory=Counter)  # a break dynamo could not resume after: frame run eagerly
    break_sites: dict[str, str] = field(default_factory=dict)  # reason -> 'file:line' of the user code it broke at
    perturbations: list[PerturbationOutcome] = field(default_factory=list)
    perturbation_failure: PerturbationFailure | None = None  # the perturbation (or the step after it) that raised
    aliases: set[str] = field(default_factory=set)  # state tensors sharing storage with a param, a grad or each other, after any step
    closure_calls: int = 0
    step_seconds: list[float] = field(default_factory=list)
    draws: tuple[str, ...] = ()  # the global RNGs the steps advanced: "torch", "python"
    swapped: tuple[str, ...] = ()  # params whose storage the steps replaced (p.set_, p.data = ...)
    load_rebinds: str = ""  # state or groups shared with an inner optimizer that torch's load_state_dict unshares
    cudagraphs_recorded: int | None = None  # CUDA graphs inductor's cudagraph trees recorded (compiled cuda runs)
    param_refs: list[weakref.ref] = field(default_factory=list)  # the run keeps no param alive: these tell which survive
    failure: RunFailure | None = None  # (failures="record") what ended the run early

    @property
    def moved(self) -> bool:
        """Whether any param changed at all (bitwise) from its initial value."""
        return any(not torch.equal(before, self.final.params[name]) for name, before in self.initial.items())

    @property
    def final(self) -> OptimizerSnapshot:
        return self.snapshots[-1]

    @property
    def steps(self) -> int:
        return len(self.step_seconds)

    @property
    def step_graphs(self) -> int:
        """Graphs of the optimizer's own step: the closure's forward and backward are not the step's."""
        return self.graphs - self.closure.graphs

    def not_compiled(self) -> str | None:
        """Why the step itself was not compiled (no graph of its own), or None; None for an eager run."""
        return self.closure.step_not_compiled(self.step_graphs) if self.regime.compiled else None

    def recompiles_after(self, steps: int) -> list[str]:
        """Dynamo's recompile messages of the steps after the first `steps`."""
        return [message for step in self.compiles[steps:] for message in step.recompiles]

    def params_alive(self) -> int:
        return sum(ref() is not None for ref in self.param_refs)


def run(case: Any, regime: Regime | None = None) -> Run:
    """One run of `case` in `regime`, in a fresh compile state that is gone when it returns."""
    with running(case, regime) as finished:
        return finished


def _swapped(t: torch.Tensor, before: torch.UntypedStorage | None) -> bool:
    """Whether `t` has another storage than `before`, which the run held so that its address stayed taken."""
    return storage_pointer(t) != (before.data_ptr() if before is not None else None)


@contextlib.contextmanager
def running(case: Any, regime: Regime | None = None) -> Iterator[Run]:
    """The run, given while its compile state is still alive (dynamo's caches, inductor's
    cudagraph trees): for a check about what that state holds. Isolated as every check is."""
    regime = regime or Regime()
    with (isolated_case(case), torch_api.inductor_config(**dict(regime.inductor)), torch_api.recording_recompiles() as log,
          torch_api.recording_graph_break_sites() as breaks):
        yield _execute(case, regime, log, breaks)


def _execute(case: Any, regime: Regime, log: list[str], breaks: list[str]) -> Run:
    if regime.kwargs:
        case = replace(case, kwargs={**case.kwargs, **dict(regime.kwargs)})
    try:
        model = _model(case, regime)
        rngs = _RngStates.now(resolve(case.optimizer))
        optimizer = make_optimizer(case, model)  # before the backward, as a training loop builds it
        constructor_draws = rngs.drawn_since(type(optimizer))  # spectral-norm vectors drawn as state is made
        data = None if regime.model == "many_small" else first_backward(case, model)
    except Exception as exc:
        if regime.failures == "raise":
            raise
        return Run(case, regime, {}, failure=RunFailure("constructs", 0, exc))
    names: dict[torch.Tensor, str] = {p: name for name, p in model.named_parameters()}
    result = Run(case, regime, {name: p.detach().clone() for p, name in names.items()}, load_rebinds=load_rebinds(optimizer))
    stepping = _Stepping(case, regime, model, optimizer, result, log, data)
    stepping.drawn |= constructor_draws
    if regime.resume:
        _load(regime.resume, model, optimizer)
    storages = {name: storage_of(p) for p, name in names.items()}  # held: a freed address could be handed back
    try:
        stepping.all_steps()
    except _Stopped:
        return result
    result.swapped = tuple(name for p, name in names.items() if _swapped(p, storages[name]))
    del storages
    if not regime.every_step:
        result.snapshots.append(snapshot(optimizer, names))
    result.graphs, result.kernels = torch_api.captured_graph_count(), torch_api.generated_kernel_count()
    result.graph_breaks = result.graph_breaks or torch_api.graph_break_counts()
    result.frames_given_up = result.frames_given_up or torch_api.frames_given_up()
    result.break_sites = {reason: step_site(site, optimizer) for reason in (*result.graph_breaks, *result.frames_given_up)
                          if (site := torch_api.break_site(reason, breaks)) is not None}
    result.aliases |= storage_aliases(optimizer, model)
    if regime.compiled and torch.device(case.device).type == "cuda":
        result.cudagraphs_recorded = torch_api.cudagraph_tree_graph_ids(torch.device(case.device).index or 0)
    if regime.perturb and not any(s.recompiles for s in result.compiles[result.warmup_steps:]):
        stepping.perturbations()
    if case.backward == "create_graph":  # such a grad holds its param through autograd's graph (torch's documented
        for p in model.parameters():  # cycle, out of the collector's reach), as a training loop's zero_grad drops
            p.grad = None
    result.param_refs = [weakref.ref(p) for p in model.parameters()]
    return result


@dataclass
class _RngStates:
    """The global RNGs' states, and the optimizer package's own generators': what a step or a
    constructor drew from is what changed."""

    torch_rng: torch.Tensor
    python_rng: Any
    package: dict[str, torch.Tensor]

    @classmethod
    def now(cls, optimizer_cls: Any) -> _RngStates:
        return cls(torch.get_rng_state(), random.getstate(), package_generator_states(optimizer_cls))

    def drawn_since(self, optimizer_cls: Any) -> set[str]:
        """"torch", "python" and "generator <module.name>" for each that changed since."""
        drawn = {"torch"} if not torch.equal(self.torch_rng, torch.get_rng_state()) else set()
        drawn |= {"python"} if self.python_rng != random.getstate() else set()
        return drawn | {f"generator {name}" for name, state in package_generator_states(optimizer_cls).items()
                        if name not in self.package or not torch.equal(state, self.package[name])}


class _Stopped(Exception):
    """A recorded failure ended the run."""


class _Stepping:
    """The steps of one run, in the regime's phases: warm-up, steps, perturbations."""

    def __init__(self, case: Any, regime: Regime, model: torch.nn.Module, optimizer: Any, result: Run,
                 log: list[str], data: Data) -> None:
        self.case, self.regime, self.model, self.optimizer, self.result, self.log = case, regime, model, optimizer, result, log
        self.names: dict[torch.Tensor, str] = {p: name for name, p in model.named_parameters()}
        self.step = _stepper(regime, _closure(case, regime, model, data, optimizer, result), optimizer, result.closure,
                             case.backward)
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        self.schedulers = [make_scheduler(case, optimizer)] if regime.scheduler and case.scheduler else []
        self.first = regime.resume.step if regime.resume else 0
        self.drawn: set[str] = set()

    def all_steps(self) -> None:
        regime, result = self.regime, self.result
        planned = regime.steps or len(regime.missing_grads) or self.case.steps
        scheduler_from = regime.scheduler_from
        if regime.settle:
            self.one(scheduler_from=None)
            self.one(scheduler_from=None)
            while result.compiles[-1].recompiles and result.steps < SETTLE_STEPS:
                self.one(scheduler_from=None)
            scheduler_from = result.steps
            self._step_schedulers()  # as after a declared warm-up step: the first step after it sees the change
        for _ in range(regime.warmup or 0):
            self.one(scheduler_from)
        if regime.settle or regime.warmup:
            result.warmup_steps = result.steps
            result.graph_breaks = torch_api.graph_break_counts()
            result.frames_given_up = torch_api.frames_given_up()
            planned = max(planned, self.case.steps - result.warmup_steps)
        for _ in range(planned):
            self.one(scheduler_from)
        if regime.checkpoint_at == result.steps:
            result.checkpoint = _checkpoint(self.first + result.steps, self.model, self.optimizer)
        result.draws = tuple(sorted(self.drawn))

    def one(self, scheduler_from: int | None) -> None:
        """Step i + 1: checkpoint or load before it, its grads, its seed; counted, timed, snapshotted."""
        regime, result, i = self.regime, self.result, self.result.steps
        if regime.checkpoint_at == i:
            result.checkpoint = _checkpoint(self.first + i, self.model, self.optimizer)
        if regime.load_at and regime.load_at[0] == i:
            _load(regime.load_at[1], self.model, self.optimizer)
        if regime.missing_grads:
            _set_grads(self.model, self.grads, regime.missing_grads[i % len(regime.missing_grads)])
        PROGRESS.at_step(i + 1)
        seed_all(self.case.seed + 1 + self.first + i, self.case)
        rngs = _RngStates.now(type(self.optimizer))
        start = time.perf_counter()
        try:
            compiles = self.counted()
        except Exception as exc:
            if regime.failures == "raise":
                raise
            live = {name: p.detach() for p, name in self.names.items()}
            result.failure = RunFailure("steps", i + 1, exc, divergence(result.initial, live))
            raise _Stopped from exc
        result.step_seconds.append(time.perf_counter() - start)
        result.compiles.append(compiles)
        if i == 0:  # a lazily made buffer inductor handed back as an input is its first step's; rebound later, it misleads
            result.aliases |= storage_aliases(self.optimizer, self.model)  # the guards of the steps after it
        self.drawn |= rngs.drawn_since(type(self.optimizer))
        if scheduler_from is not None and i + 1 >= scheduler_from:
            self._step_schedulers()
        if regime.every_step:
            result.snapshots.append(snapshot(self.optimizer, self.names))

    def counted(self) -> StepCompiles:
        """One step, and what it compiled of its own (the closure's graphs and kernels apart)."""
        closure = self.result.closure
        graphs, kernels, seen = torch_api.captured_graph_count(), torch_api.generated_kernel_count(), len(self.log)
        closure_graphs, closure_kernels = closure.graphs, closure.kernels
        with step_grad_mode(self.case):
            self.step()
        return StepCompiles(torch_api.captured_graph_count() - graphs - (closure.graphs - closure_graphs),
                            torch_api.generated_kernel_count() - kernels - (closure.kernels - closure_kernels),
                            self.log[seen:])

    def perturbations(self) -> None:
        """Each of the spec's perturbations, then a step (more while an undeclared one settles), then
        one to see that it settled."""
        for index, perturbation in enumerate(run_phases(self.case).perturbations):
            try:
                outcome = self._perturbed(perturbation)
            except Exception as exc:  # the recompile check's to judge; what the steps before it did stands
                self.result.perturbation_failure = PerturbationFailure(index, perturbation, exc)
                return
            self.result.perturbations.append(outcome)

    def _perturbed(self, perturbation: Perturbation) -> PerturbationOutcome:
        apply_perturbation(perturbation, self.optimizer, self.case.device)
        outcome = self.counted()
        if perturbation.declared_recompiles(torch_api.torch_version()) is None:  # undeclared: state recreated lazily may recompile once more
            more = [self.counted()]
            while more[-1].recompiles and len(more) < SETTLE_STEPS - 1:
                more.append(self.counted())
            outcome = StepCompiles(outcome.graphs + sum(m.graphs for m in more), outcome.kernels + sum(m.kernels for m in more),
                                   outcome.recompiles + [r for m in more for r in m.recompiles])
        settle = self.counted().recompiles
        return PerturbationOutcome(perturbation, outcome, settle[0] if settle else None)

    def _step_schedulers(self) -> None:
        for scheduler in self.schedulers:
            step_scheduler(scheduler)


Data = tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]] | None  # (input, loss_fn) for a closure


def _model(case: Any, regime: Regime) -> torch.nn.Module:
    """The regime's model, seeded: the case's, whose grads first_backward gives once its optimizer is built, or
    many small params with their grads."""
    if regime.model != "many_small":
        return seeded_model(case)
    count, shape = MANY_SMALL
    params = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(shape, device=case.device)) for _ in range(count))
    for p in params:
        p.grad = torch.ones_like(p)
    return params


def _stepper(regime: Regime, closure: Callable[[], Any] | None, optimizer: Any,
             closure_compiles: ClosureCompiles, backward: str) -> Callable[[], Any]:
    """The step as the regime takes it: compiled or eager, with the closure or without."""
    if regime.compiled:
        return compile_step(optimizer, closure, backend=regime.backend, closure_compiles=closure_compiles, backward=backward)
    if closure is None:
        return optimizer.step
    return lambda: optimizer.step(closure)


def _closure(case: Any, regime: Regime, model: torch.nn.Module, data: Data, optimizer: Any,
             result: Run) -> Callable[[], Any] | None:
    """The closure the regime steps with (its calls counted), or None; NotApplicable where the
    step and the regime disagree about having one."""
    wanted = case.closure if regime.closure is None else regime.closure
    cls = type(optimizer)
    if wanted:
        require_closure_parameter(optimizer)
    if wanted and data is not None:
        closure = make_closure(model, optimizer, *data, regime.closure_graph_break, case.backward)

        def counted(*args: Any, **named: Any) -> Any:
            result.closure_calls += 1
            return closure(*args, **named)

        return counted
    if law_closure(case, cls)[1]:  # its signature or its spec says it must have one
        fix = f": give the spec `closure: [true]` ({case.location})" if regime.closure is None and requires_closure(cls) else ""
        first = next(iter(step_parameters(cls) or []), None)
        if fix and first is not None and first.name != "closure":  # SpawnGD's step(epoch, closure=None): maybe no closure
            fix = f", if its required `{first.name}` is one{fix}"
        raise NotApplicable(f"{case.id}: {cls.__qualname__}.step requires a closure, and this run steps without one{fix}")
    return None


def _set_grads(model: torch.nn.Module, grads: list[torch.Tensor | None], missing: MissingGrads) -> None:
    count = len(grads)
    absent = set(range(count)) if missing == "all" else {i % count for i in missing}
    for i, p in enumerate(model.parameters()):
        grad = grads[i]
        p.grad = None if i in absent or grad is None else grad.clone()


def _restore_grads(model: torch.nn.Module, grads: dict[str, torch.Tensor | None]) -> None:
    """A checkpoint's grads into the model's params, in place where a param holds a grad tensor of that kind (a
    compiled step guards on it)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            grad = grads.get(name)
            if grad is None or p.grad is None or (p.grad.shape, p.grad.dtype, p.grad.layout) != (grad.shape, grad.dtype, grad.layout):
                p.grad = None if grad is None else grad.clone()
            else:
                p.grad.copy_(grad)


def _checkpoint(step: int, model: torch.nn.Module, optimizer: Any) -> Checkpoint:
    _require_state_dict(optimizer)
    buffer = io.BytesIO()
    saved = optimizer.state_dict()
    torch.save(saved, buffer)
    return Checkpoint(step, {name: p.detach().clone() for name, p in model.named_parameters()}, buffer.getvalue(),
                      {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()},
                      unsaved_generators(optimizer, saved))


def loaded_state_dict(case: Any, checkpoint: Checkpoint) -> Any:
    """The state_dict of a fresh optimizer of the case after loading the checkpoint's; None where the load raises."""
    optimizer = make_optimizer(case, build_model(case))
    try:
        optimizer.load_state_dict(checkpoint.optimizer_state())
        return optimizer.state_dict()
    except Exception:  # noqa: BLE001  # the runs that load show the error, with its owner
        return None


def _require_state_dict(optimizer: Any) -> None:
    """A run that checkpoints needs the optimizer's state_dict and load_state_dict (psgd's Affine and LRA
    are no torch.optim optimizers and have neither): without them it does not apply, and says so."""
    missing = [name for name in ("state_dict", "load_state_dict") if not callable(getattr(optimizer, name, None))]
    if missing:
        raise NotApplicable(f"{type(optimizer).__qualname__} has no {' or '.join(missing)} (it is no torch.optim "
                            "optimizer): a checkpoint can neither save nor restore it, so this run does not apply")


def _load(checkpoint: Checkpoint, model: torch.nn.Module, optimizer: Any) -> None:
    _require_state_dict(optimizer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(checkpoint.params[name])
    _restore_grads(model, checkpoint.grads)
    optimizer.load_state_dict(checkpoint.optimizer_state())
