"""The prerequisite ladder every check of a case stands on: the optimizer constructs, its eager
step runs, the eager step moves params, torch.compile captures a graph of the step's own, the
compiled step runs, and it matches the eager step (parity's comparison). A rung that fails is one
root cause: one item of the case is red with it, and every other item that needs the rung is
skipped as blocked by it (session.py). compiled_matches is parity's: another check comparing a
compiled run with an eager one runs, and only a red of it is called blocked by that rung."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .blame import blame, one_line
from .builder import build_model, closure_taken_as_value, make_optimizer, own_step_arguments
from .compare import listed, snapshot_differences
from .compiled_run import CompiledRun, CompiledStepOnlyError
from .containment import CaseTimedOut
from .diagnosis import parity_diagnoses, rounding_only
from .run_phases import SETTLE_STEPS, STEADY_STEPS
from .runner import Regime, run
from .vacuity import Diverged, NotApplicable, diverged_before_raising, require_moved
from ..spec.schema import LOW_PRECISION
from ..spec.values import resolve

if TYPE_CHECKING:  # annotations only
    from .run_cache import RunCache

RUNGS = ("constructs", "eager_steps", "eager_moves", "graph_captured", "compiled_steps", "compiled_matches")
EAGER = ("constructs", "eager_steps")
MOVES = (*EAGER, "eager_moves")
COMPILED = (*EAGER, "graph_captured", "compiled_steps")
COMPARED_COMPILED = (*MOVES, "graph_captured", "compiled_steps")  # a check comparing compiled values with eager ones:
#   its red, where parity's compiled_matches failed, is that root cause's (session.py), its pass stays a pass
PARITY = (*COMPARED_COMPILED, "compiled_matches")


@dataclass(frozen=True)
class RungFailure:
    """Why a rung failed: the cause in one line, the user's file and line when their code raised,
    and the exception itself (the root-cause item re-raises it, so its blame and frames show)."""

    rung: str
    cause: str
    where: str = ""
    error: BaseException | None = None
    vacuous: bool = False  # not a finding: every check that needs the rung is vacuous, none red
    not_applicable: bool = False  # the case cannot be run as written (a spec's doing): every check skips
    mechanism: str = ""  # the root cause blame knows, where it raised in several places (blame.py): reports group by it

    def blocked(self) -> str:
        """The skip reason of a check that needs this rung."""
        return f"blocked by {self.rung}: {self.cause}" + (f" ({self.where})" if self.where else "")

    def as_record(self) -> dict[str, Any]:
        return {"rung": self.rung, "cause": self.cause, "where": self.where, **({"mechanism": self.mechanism} if self.mechanism else {})}


@dataclass
class EagerProbe:
    """The eager rungs of a case: constructed, stepped `steps` times, moved or not."""

    failure: RungFailure | None
    steps: int
    draws: tuple[str, ...] = ()  # the global RNGs its step advanced: "torch", "python"
    swapped: tuple[str, ...] = ()  # params whose storage its steps replaced


class Ladder:
    """A case's rungs, climbed lazily and once: the eager ones by a short eager run of their own,
    the compiled ones read off the case's shared compiled run."""

    def __init__(self, case: Any, runs: RunCache) -> None:
        self.case, self.runs = case, runs
        self._eager: EagerProbe | None = None
        self._compiled: RungFailure | None | bool = False  # False: not climbed yet

    def first_failure(self, rungs: tuple[str, ...]) -> RungFailure | None:
        """The lowest failed rung among `rungs` (climbing what it must), or None."""
        for rung in RUNGS:
            if rung not in rungs:
                continue
            failure = self._eager_failure() if rung in MOVES else self._compiled_failure()
            if failure is not None and (failure.rung == rung or RUNGS.index(failure.rung) < RUNGS.index(rung)):
                return failure
        return None

    @property
    def draws(self) -> tuple[str, ...]:
        """The global RNGs the eager step advanced, as far as the eager rungs were climbed (runs nothing)."""
        return self._eager.draws if self._eager is not None else ()

    @property
    def swapped(self) -> tuple[str, ...]:
        """The params whose storage the eager steps replaced, as far as the eager rungs were climbed."""
        return self._eager.swapped if self._eager is not None else ()

    def steps_before_moving(self) -> int:
        """Where the case's eager step moved its params only after more steps than a case takes (RAdam without its
        SGD phase waits 4 steps), the steps it was given to move (climbing the eager rungs); else 0."""
        failure = self._eager_failure()
        return self._eager.steps if failure is None and self._eager is not None and self._eager.steps > _short(self.case) else 0

    def _eager_failure(self) -> RungFailure | None:
        if self._eager is None:
            try:
                self._eager = probe_eager(self.case)
            except CaseTimedOut as exc:  # a step that hangs is the rung's failure, told once, not per check
                self._eager = EagerProbe(_failure("eager_steps", exc), 0)
        return self._eager.failure

    def _compiled_failure(self) -> RungFailure | None:
        if self._compiled is False:
            self._compiled = self._climb_compiled()
        return self._compiled  # type: ignore[return-value]

    def _climb_compiled(self) -> RungFailure | None:
        try:
            run = self.runs.compiled(self.case)
        except (CompiledStepOnlyError, CaseTimedOut) as exc:  # the eager rungs passed: the compiled run raised or hung
            return _failure("compiled_steps", exc)
        except Exception:  # not a rung's verdict (a closure the step cannot take): each check says it
            return None
        why = run.not_compiled()
        if why:
            breaks = "\n    - ".join(run.break_lines()) or "none"
            waited = self.steps_before_moving() if not run.graph_breaks and not run.frames_given_up else 0
            return RungFailure("graph_captured", why, error=AssertionError(
                f"{self.case.id}: not compiled: {why}, so no compiled check of this case can say anything; dynamo's "
                f"graph breaks:\n    - {breaks}" + (WAITED.format(steps=waited, short=_short(self.case)) if waited else "")))
        mismatch = compiled_mismatch(run)
        return RungFailure("compiled_matches", mismatch.cause, error=mismatch, vacuous=mismatch.vacuous) if mismatch else None


WAITED = ("\n  diagnosis: torch's doing (dynamo): its eager step moved no param in {short} steps and moved them within {steps} "
          "(it waits), so the first compiled call traced no tensor operation, and dynamo does not trace a frame again "
          "once a call of it traced none (pytorch/pytorch#144820): every later step ran eagerly, the moving ones too (compiled when first "
          "called after the wait, the step captures its graph; a plain-torch reproducer: torch.compile(opt.step) "
          "from the first step, under torch.no_grad(), then count torch._dynamo.utils.counters['stats'])")


class CompiledMismatch(AssertionError):
    """The compiled step's params, state, groups or attributes differ from the eager step's after
    the same steps: parity's red, and the root cause of every other compiled-vs-eager check's."""

    def __init__(self, message: str, cause: str, vacuous: bool = False) -> None:
        super().__init__(message)
        self.cause, self.vacuous = cause, vacuous  # vacuous: a difference that proves nothing (rounding_only)


def compiled_mismatch(run: CompiledRun) -> CompiledMismatch | None:
    """How the compiled run differs from its eager twin, with what the case's diagnoses find (each
    rerun once, kept on the run); None where they match or cannot be compared (an eager run that
    diverged). An eager run that moved too little makes a match vacuous, each check's own verdict,
    but a difference found there is still a difference (a counter dynamo left at 0, a state value)."""
    case, eager, compiled = run.case, run.eager, run.compiled
    if eager is None or compiled is None:
        return None
    try:
        require_moved(case.id, run.initial_params, eager.params, case.tolerance, 0.0, "")
    except Diverged:
        return None
    problems = snapshot_differences(eager, compiled, case.tolerance)
    if not problems:
        return None
    if run.rounding is None:
        run.rounding = rounding_only(run) or ""
    if run.rounding:
        return CompiledMismatch(f"{case.id}: vacuous: {run.rounding}; at float32: " + problems[0].splitlines()[0],
                                run.rounding, vacuous=True)
    if not run.diagnoses:
        run.diagnoses = parity_diagnoses(run)
    cause = (f"the compiled step differs from eager after {run.steps} steps ({len(problems)} difference(s), first: "
             f"{problems[0].splitlines()[0]})" + "".join(f"; diagnosis: {d}" for d in run.diagnoses[:1]))
    return CompiledMismatch(f"{case.id}: compiled step differs from eager after {run.steps} steps:" + listed(problems)
                            + "".join(f"\n  diagnosis: {d}" for d in run.diagnoses), cause)


def steppable(cases: Any, runs: RunCache, property_id: str) -> list[Any]:
    """The cases whose eager rungs hold: a property that drew a case whose eager step fails would be a
    second red for the root cause that case's items show. NotApplicable where no case is left."""
    failures = [runs.ladder(case).first_failure(EAGER) for case in cases]
    kept = [case for case, failure in zip(cases, failures) if failure is None]
    first = next((failure for failure in failures if failure is not None), None)
    if not kept and first is not None:
        raise NotApplicable(f"{property_id}: no case to draw: every plain case is {first.blocked()}")
    return kept


def _short(case: Any) -> int:
    """The steps the eager rungs first give a case's step to move its params."""
    return max(case.steps, 2)


def probe_eager(case: Any) -> EagerProbe:
    """Construct the case's optimizer and take its steps eagerly (a closure where the case has one
    and the step takes one): the first rung that fails, if any."""
    if not getattr(torch, case.dtype).is_floating_point:  # complex cases are the complex law's, over its own params
        return EagerProbe(None, 0)
    short = _short(case)
    # a step that waits before it moves (eve's RAdam without its SGD phase: 5 steps) is given as many
    # as the compiled run's default warm-up and steady steps take before it is called unmoved
    for steps in dict.fromkeys((short, max(short, SETTLE_STEPS + STEADY_STEPS))):
        try:
            probe = run(case, Regime(steps=steps, failures="record"))
        except NotApplicable as exc:  # the step requires a closure the case lacks, or takes none and the case has one
            return EagerProbe(RungFailure("eager_steps", str(exc), not_applicable=True), 0)
        failure = probe.failure
        if failure is not None and failure.phase == "constructs":
            return EagerProbe(_failure("constructs", failure.error), 0)
        if failure is not None:
            argument = closure_taken_as_value(resolve(case.optimizer), failure.error) if case.closure else None
            if argument is not None:
                return EagerProbe(RungFailure("eager_steps", _not_a_closure(case, argument, failure.error),
                                              not_applicable=True), 0)
            protocol = _own_step_protocol(case, failure.error)
            if protocol is not None:
                return EagerProbe(RungFailure("eager_steps", protocol, not_applicable=True), 0)
            if failure.diverged:  # the step refused a blown-up run: lr too high for the model, not a finding
                blown_up = diverged_before_raising(case.id, failure.step, failure.error, failure.diverged)
                return EagerProbe(RungFailure("eager_steps", str(blown_up), vacuous=True, error=blown_up), failure.step - 1)
            return EagerProbe(_failure("eager_steps", failure.error, f"at eager step {failure.step}: "), failure.step - 1)
        if probe.moved:
            return EagerProbe(None, steps, probe.draws, probe.swapped)
    return EagerProbe(_unmoved(case, steps), steps, probe.draws, probe.swapped)


def _not_a_closure(case: Any, argument: str, error: BaseException) -> str:
    return (f"{case.id}: its step takes a value of its own as `{argument}`, its first argument, where the plugin's "
            f"closure runs put their closure (given one, it raised {one_line(error)}): a step protocol of its own, not "
            "torch.optim's step(closure); not supported (init writes such a spec's skip)")


def _own_step_protocol(case: Any, error: BaseException) -> str | None:
    """Why the case cannot run, where its step raised and the step its instance has requires arguments that
    torch.optim's step takes none of (given none it lacks them, given a closure it takes that for one); None
    otherwise."""
    try:
        optimizer = make_optimizer(case, build_model(case))
    except Exception:  # noqa: BLE001  # it constructed for the run that raised; what it raises now tells nothing more
        return None
    required = own_step_arguments(optimizer)
    if not required:
        return None
    return (f"{case.id}: its step ({getattr(optimizer.step, '__qualname__', 'step')}) requires {', '.join(required)}: "
            f"a step protocol of its own, where torch.optim's step takes a closure or nothing (called so, it raised "
            f"{one_line(error)}); not supported (init writes such a spec's skip)")


def _unmoved(case: Any, steps: int) -> RungFailure:
    lr = case.kwargs.get("lr", "the default")
    if case.dtype in LOW_PRECISION:
        return RungFailure("eager_moves", f"{steps} eager steps at lr {lr} left every {case.dtype} param bitwise unchanged "
                           f"(its updates round away at {case.dtype}): every comparison would be vacuous; raise lr for "
                           f"this dtype in {case.location}", vacuous=True)
    return RungFailure("eager_moves", f"{steps} eager steps at lr {lr} left every param bitwise unchanged: the step does "
                       f"nothing, or its lr or steps are too small to move anything ({case.location})",
                       error=AssertionError(f"{case.id}: the optimizer's step moved nothing: {steps} eager steps at lr "
                                            f"{lr} left every param bitwise unchanged, so every comparison of this case "
                                            f"would be vacuous; raise lr or steps in {case.location} if that is expected"))


def _failure(rung: str, exc: BaseException, prefix: str = "") -> RungFailure:
    """The rung's failure for `exc`, placed where the user's code raised it: a compiled-only error by
    the error inside it, a timeout by where it hung (below the signal handler's own frame)."""
    if isinstance(exc, CompiledStepOnlyError):
        found = blame(exc.error)
    else:
        found = blame(exc, handler_frames=1 if isinstance(exc, CaseTimedOut) else 0)
    return RungFailure(rung, prefix + one_line(exc), found.where or found.innermost, exc, mechanism=found.mechanism)
