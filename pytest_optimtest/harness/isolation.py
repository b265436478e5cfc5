"""Run a check without leaking global state into the next one."""

from __future__ import annotations

import contextlib
import random
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from ..spec.values import resolve
from . import torch_api
from .devices import package_generators


@contextlib.contextmanager
def isolated(**inductor_options: object) -> Iterator[None]:
    """Fresh dynamo/inductor state in, and every touched global restored on the way out.

    Restores: default dtype, grad mode, every RNG (rngs_kept), inductor config, and resets dynamo
    caches, inductor metrics and dynamo counters on both sides. Compiles inside skip dynamo's
    guard-latency metric (torch_api.guard_latency_unprofiled): nothing here reads it.
    """
    dtype = torch.get_default_dtype()
    grad = torch.is_grad_enabled()
    torch_api.reset_compile_state()
    with rngs_kept():
        try:
            with (torch_api.inductor_config(**inductor_options), torch_api.trace_log_kept_local(),
                  torch_api.guard_latency_unprofiled()):
                yield
        finally:
            torch_api.reset_compile_state()
            torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)


@contextlib.contextmanager
def isolated_case(case: Any) -> Iterator[None]:
    """`isolated()` with the case's inductor options, torch's UserWarnings silenced, and, for a
    subclass of a torch.optim optimizer, `super().step()` free of torch.optim's graph breaks."""
    options = {"fallback_random": True} if case.fallback_random else {}
    optimizer_cls = _optimizer_class(case)
    # its globals kept outermost: a class's step goes back after the bases' unwrapping is undone
    with (_globals_kept(optimizer_cls), isolated(**options), torch_api.recompile_limit_at(getattr(case, "recompile_limit", None)),
          warnings.catch_warnings(), _bases_unwrapped(optimizer_cls)):
        warnings.simplefilter("ignore", UserWarning)
        yield


def _optimizer_class(case: Any) -> Any:
    try:
        return resolve(case.optimizer) if getattr(case, "optimizer", None) else None
    except ImportError:  # an optimizer that does not import fails where the case builds it
        return None


@contextlib.contextmanager
def optimizer_globals_kept(case: Any) -> Iterator[None]:
    """The RNGs as they were, the optimizer package's own torch.Generators included (runs reseed
    them, as they reseed torch's), and its classes' `step` (steps_kept)."""
    with _globals_kept(_optimizer_class(case)):
        yield


@contextlib.contextmanager
def _globals_kept(optimizer_cls: Any) -> Iterator[None]:
    with steps_kept(optimizer_cls), rngs_kept(optimizer_cls):
        yield


_ABSENT = object()


@contextlib.contextmanager
def steps_kept(optimizer_cls: Any) -> Iterator[None]:
    """The `step` of the optimizer's classes as it was. torch.optim wraps a class's step with its
    hook wrapper, process-wide, when an instance is built, unpickled, or zero_grad'ed without
    having run Optimizer.__init__ (eve's Lookahead, whose wrapped step then raises): kept, no run's
    outcome depends on the runs before it, and the user's session gets its classes back."""
    classes = [c for c in getattr(optimizer_cls, "__mro__", ()) if c is not object]
    held = {c: vars(c).get("step", _ABSENT) for c in classes}
    try:
        yield
    finally:
        for cls, step in held.items():
            if vars(cls).get("step", _ABSENT) is step:
                continue
            if step is _ABSENT:
                delattr(cls, "step")
            else:
                cls.step = step


@contextlib.contextmanager
def rngs_kept(optimizer_cls: Any = None) -> Iterator[None]:
    """Every RNG as it was: torch's CPU and CUDA ones, Python's, NumPy's (where NumPy is loaded), and
    the optimizer package's own generators. Runs reseed them; what loading a spec builds (a model, a
    probed optimizer) draws nothing from the user's session."""
    cpu_rng, python_rng = torch.get_rng_state(), random.getstate()
    numpy = sys.modules.get("numpy")  # not imported here: an optimizer that uses it has loaded it
    numpy_rng = numpy.random.get_state() if numpy is not None else None
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    generators = package_generators(optimizer_cls) if optimizer_cls is not None else {}
    states = {name: g.get_state() for name, g in generators.items()}
    try:
        yield
    finally:
        torch.set_rng_state(cpu_rng)
        random.setstate(python_rng)
        if numpy is not None:
            numpy.random.set_state(numpy_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        for name, generator in generators.items():
            generator.set_state(states[name])


@contextlib.contextmanager
def _bases_unwrapped(optimizer_cls: Any) -> Iterator[None]:
    if optimizer_cls is None:
        yield
        return
    with torch_api.torch_optim_bases_unwrapped(optimizer_cls):
        yield
