"""Init's probes: one optimizer built and stepped a few times over the plugin's model, bounded in time,
its error placed where the optimizer's code raised it. Names with a leading underscore are init's own,
shared among the modules of this package; its API is `starter_spec` and `write_starter_spec`."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import linecache
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..harness import torch_api
from ..harness.blame import blame, one_line, refusal_statement
from ..harness.builder import closure_backward, make_closure, requires_closure
from ..harness.compare import max_movement
from ..harness.param_forms import construct
from ..models import IN_FEATURES, two_linear
from ..spec.schema import DEFAULT_TOLERANCES


# How a probe's closure makes grads: the protocol `_params_form` found (`backward:` in the spec) holds
# for every probe after it, and each probe builds its own closure.
_PROBE_BACKWARD: contextvars.ContextVar[str] = contextvars.ContextVar("probe_backward", default="plain")
# a step that moves the params only given a closure (a gradient-free one that evaluates it): every probe gives one
_PROBE_CLOSURE: contextvars.ContextVar[bool] = contextvars.ContextVar("probe_closure", default=False)
# a step that raises without a closure and steps given one (momo's `assert closure or loss`), which its signature's
# `closure=None` does not say: the probes that step a run of their own (state dtype, RNG use, seeding) give one
_PROBE_STEP_CLOSURE: contextvars.ContextVar[bool] = contextvars.ContextVar("probe_step_closure", default=False)


# A probe's steps run this long at most: a step that searches globally (torchzero's ScipyDE over the 220 params of
# the plugin's model) ran for minutes in each of init's dozens of probes. Once one ran out, every later probe of the
# spec answers with that at once, and the spec skips: every run of the step would time out the same way.
PROBE_SECONDS = 30.0
# The first step of init's process may compile what the optimizer compiles itself (emerging_optimizers' PSGDPro:
# over 30 s on a cold inductor cache, 5 s warm, nothing after): a one-time cost, not a step's, so it gets longer
COLD_STEP_FACTOR = 5
_PROBE_SLOW: contextvars.ContextVar[str | None] = contextvars.ContextVar("probe_slow", default=None)
_PROBE_COLD: contextvars.ContextVar[bool] = contextvars.ContextVar("probe_cold", default=True)


class ProbeTimeout(BaseException):
    """A probe's steps ran past PROBE_SECONDS (no Exception: an optimizer's `except Exception` does not swallow it)."""


@contextlib.contextmanager
def _time_bounded(seconds: float | None = None) -> Iterator[None]:
    """Raise ProbeTimeout in the code running when `seconds` (PROBE_SECONDS) have passed (SIGALRM: init's
    main thread; elsewhere unbounded)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    limit = PROBE_SECONDS if seconds is None else seconds

    def expire(signum: int, frame: Any) -> None:
        raise ProbeTimeout(f"one step ran past {limit:g} s, and init stopped it")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)  # and each second after, should the code swallow one
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _located(exc: BaseException) -> str:
    """A probe's error in one line, then `, at file:line in function` where the user's code raised it."""
    where = blame(exc).where
    return one_line(exc) + (f", at {where}" if where else "")


def _raising_line(problem: str) -> str:
    """The source line a `_located` problem names, or ''."""
    found = re.search(r", at (\S+):(\d+) in \S+$", problem)
    return linecache.getline(found.group(1), int(found.group(2))) if found else ""


def _bf16_two_linear(device: str = "cpu") -> torch.nn.Module:
    return two_linear(device=device).to(torch.bfloat16)


def _construct(cls: type, form: Any, params: Any, kwargs: dict) -> Any:
    """The optimizer a probe steps, built on CPU from dynamo's state as fresh as a test item's: what an
    optimizer compiles itself (Dion's fullgraph Newton-Schulz) would otherwise count the recompiles of
    every probe before it against dynamo's limit, and refuse a later probe's shapes and dtypes."""
    if torch_api.captured_graph_count():
        torch_api.reset_compile_state()
    return construct(cls, form, params, kwargs, "cpu")


def _constructs(cls: type, form: str, factory: Any, kwargs: dict) -> bool:
    try:
        _construct(cls, form, factory(), kwargs)
    except Exception:  # noqa: BLE001  # the constructor's verdict on this form and model
        return False
    return True


def _probed_class(probe: Any) -> Any:
    """The optimizer class behind a probe, which binds the kwargs the constructor requires in a partial."""
    return probe.func if isinstance(probe, functools.partial) else probe


def _raised_on_purpose(problem: str, asserted: bool = False) -> bool:
    """Whether the line a step's error names is a `raise` statement of the optimizer's own (torch_constrained's
    "Need to call extrapolation before calling step."), or with `asserted` an `assert` (Adams_ZeRO's `assert
    p.is_contiguous()`, a claim about the params it takes): a protocol it enforces, not an accident."""
    return refusal_statement(_raising_line(problem), asserted)


def _probe_run(cls: type, form: Any, kwargs: dict, factory: Any, steps: int,
               dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, Any]:
    """The model and optimizer after one closure call and `steps` probe steps, from torch's seed 0,
    over `factory`'s model in `dtype`; raises what the optimizer raised."""
    torch.manual_seed(0)
    model = factory().to(dtype)
    optimizer = _construct(cls, form, model, kwargs)
    inputs = torch.randn(10, IN_FEATURES).to(dtype)
    closure = make_closure(model, optimizer, inputs, _probe_loss, backward=_PROBE_BACKWARD.get())
    _first_grads(model, inputs, _PROBE_BACKWARD.get())
    for _ in range(steps):
        _probe_step(optimizer, closure)
    return model, optimizer


def _probe_loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).sum()


def _first_grads(model: torch.nn.Module, inputs: torch.Tensor, backward: str) -> None:
    """The first grads as the runs make them: a fresh model's backward, with no zero_grad() of the optimizer's
    (torchrec's placeholders never call Optimizer.__init__, and torch's zero_grad() raises before their step would)."""
    with torch.enable_grad():
        closure_backward(_probe_loss(model(inputs)), backward)


def _first_step_problem(cls: type, form: Any, kwargs: dict, factory: Any) -> str | None:
    return _stepped(cls, form, kwargs, factory, steps=1)[1]


def _stepped(cls: type, form: Any, kwargs: dict, factory: Any, steps: int,
             dtype: torch.dtype = torch.float32) -> tuple[float, str | None]:
    """(largest param movement in the dtype's default tolerances, what the steps raised) of `steps`
    eager steps of a fresh model's optimizer on one seeded batch's grads."""
    moved, problem = _stepped_with(cls, form, kwargs, factory, steps, dtype, closure=False)
    if problem is None:
        return moved, None
    with_closure = _stepped_with(cls, form, kwargs, factory, steps, dtype, closure=True)  # a step that needs one
    needs_closure = "'closure'" in problem  # then what its step raised given one says more
    return with_closure if with_closure[1] is None or needs_closure else (moved, problem)


def _stepped_with(cls: type, form: Any, kwargs: dict, factory: Any, steps: int, dtype: torch.dtype,
                  closure: bool, grad: bool = True, backward: str | None = None) -> tuple[float, str | None]:
    """`_stepped`'s one try, with or without a closure that makes grads by `backward` (default: the
    protocol init found)."""
    backward = backward or _PROBE_BACKWARD.get()
    slow = _PROBE_SLOW.get()
    if slow is not None:
        return 0.0, slow
    torch.manual_seed(0)
    model = factory().to(dtype)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = torch.randn(10, IN_FEATURES).to(dtype)
    closure = closure or backward != "plain" or _PROBE_CLOSURE.get()  # grads set beforehand have no graph for such a step
    try:
        optimizer = _construct(cls, form, model, kwargs)
        loss = make_closure(model, optimizer, batch, _probe_loss, backward=backward)
        loss.__qualname__ = "closure"  # a step that passes it arguments reads "closure() got an unexpected keyword..."

        _first_grads(model, batch, backward)
        cold = _PROBE_COLD.get()
        with torch.set_grad_enabled(grad), _time_bounded(PROBE_SECONDS * COLD_STEP_FACTOR if cold else None):
            if cold:  # the process's first step alone: what it compiles once is not the steps' pace
                optimizer.step(loss) if closure else optimizer.step()
                _PROBE_COLD.set(False)
        with torch.set_grad_enabled(grad), _time_bounded():
            for _ in range(steps - cold):
                optimizer.step(loss) if closure else optimizer.step()
    except ProbeTimeout as exc:
        _PROBE_SLOW.set(_located(exc))
        return 0.0, _located(exc)
    except Exception as exc:  # the optimizer's verdict on this model and these kwargs
        return 0.0, _located(exc)
    tolerance = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")]
    return max_movement(before, {n: p.detach() for n, p in model.named_parameters()}, tolerance), None


def _probe_step(optimizer: Any, closure: Callable[[], torch.Tensor]) -> None:
    """One probe step as the runs take it: with the closure where the protocol found or the step's
    signature needs one (torch_pso's step(closure)), else on the grads the closure left."""
    if (_PROBE_BACKWARD.get() != "plain" or _PROBE_CLOSURE.get() or _PROBE_STEP_CLOSURE.get()
            or requires_closure(type(optimizer))):
        optimizer.step(closure)
    else:
        optimizer.step()
