"""`python -m pytest_optimtest init mypkg.optim:Lion`: a starter spec from the optimizer's constructor.

Every boolean flag of the constructor becomes a case with the flag flipped (one flag a case,
not a product: 2^n cases for n flags would be too many to start with); flags torch.optim
uses for device-specific paths (capturable, fused, differentiable) are left out with a
comment, since they need CUDA or autograd through the step. The spec is checked by
expanding it before it is written.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import linecache
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from .checks.laws.section import ON_BY_DEFAULT, Laws
from .harness.blame import blame, one_line
from .harness.builder import (backward_flag, closure_taken_as_value, make_closure, requires_closure, step_on_grads, step_parameters,
                              takes_closure)
from .harness.compare import max_movement
from .harness.devices import unavailable_reason
from .harness.law_runs import unstored_kwargs
from .harness.param_forms import construct
from .harness.snapshot import groups_hold_settings
from .items import missing_requirements
from .models import IN_FEATURES, two_diagonal, two_linear, two_linear_no_bias
from .setups import train_mode
from .spec.schema import DEFAULT_TOLERANCES, ParamGroup
from .spec.values import (DEFAULT_BASE, KWARG_OBJECTS, BaseOptimizer, optimizer_class_problem, resolve, takes_a_model,
                          takes_keyword, wrapped_optimizer_argument)

DEVICE_FLAGS = ("capturable", "fused", "differentiable")


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


def starter_spec(optimizer: str) -> tuple[str, str]:
    """(file name, YAML text) of a starter spec for the optimizer at `optimizer`. What the optimizer
    prints while it is tried goes to stderr: `init -o -` writes the spec itself to stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        return contextvars.copy_context().run(_starter_spec, optimizer)  # the protocol it finds is this spec's alone


def _starter_spec(optimizer: str) -> tuple[str, str]:
    cls = resolve(optimizer)
    problem = optimizer_class_problem(optimizer, cls)
    if problem is not None:
        raise ValueError(problem)
    params = inspect.signature(cls.__init__).parameters
    defaults = {n: p.default for n, p in params.items() if n not in ("self", "params") and p.default is not inspect.Parameter.empty}
    flags = [n for n, v in defaults.items() if isinstance(v, bool) or (v is None and n in ("foreach", "maximize"))]
    default_lr = defaults.get("lr", 1e-3)
    default_lr = default_lr if isinstance(default_lr, float) and default_lr > 0 else 1e-3
    has_lr = takes_keyword(cls, "lr")
    # The constructor's default, at most 0.01: the test models diverge over the in-backward checks'
    # six steps at SGD-like defaults such as 0.1, and a diverged run is a failed (not a passed) check.
    lr = min(default_lr, 1e-2)
    lr_refusal = _lr_refusal(cls, lr) if has_lr else None
    has_lr = has_lr and lr_refusal is None
    name = cls.__name__.lower()
    instances, instance_lines, instance_notes = _required_instances(cls)
    wraps = _wrapped_base(cls, {"lr": lr} if has_lr else {})
    if wraps is not None:  # a wrapper over an optimizer instance (Lookahead, Magma): its base carries the params
        argument, wrapped, shown_value = wraps
        instances, instance_lines, instance_notes = {argument: wrapped, **instances}, {argument: shown_value, **instance_lines}, [
            f"{argument}: torch.optim.SGD over the params (init's guess for the optimizer it wraps): put yours", *instance_notes]
    probed: Any = functools.partial(cls, **instances) if instances else cls
    fills, fill_notes = _required_fills(probed, {"lr": lr} if has_lr else {}, "wrapped" if wraps else "list")
    fill_notes = [*instance_notes, *fill_notes]
    probe: Any = functools.partial(probed, **fills) if fills else probed  # what every probe below constructs
    guessed = {"lr": lr} if has_lr else {}  # the kwargs the probes below start from, until lr is probed
    train_problem = _train_mode_problem(probe, guessed)
    if train_problem is not None:  # schedule-free's: every probe below, as every run of the spec, steps in train mode
        probe = _in_train_mode(probe)
    cuda_need = _cuda_need(probe, guessed)
    cpu_switches: dict[str, Any] = {}
    if cuda_need is not None:  # its defaults want a GPU this machine lacks: its CPU path, where flags give one
        found = _cpu_switches(probe, guessed)
        if found is None:
            return f"{name}.yaml", _cuda_only_spec(optimizer, cls, {**guessed, **fills}, fill_notes, cuda_need)
        cpu_switches, probe = found, functools.partial(probe, **found)
        fills = {**fills, **found}
        flags = [f for f in flags if f not in found]
    form, factory, form_lines = _params_form(probe, guessed, wraps[0] if wraps else None)
    if factory is None:  # nothing to probe: no params form or model of the plugin's constructs it
        return f"{name}.yaml", _unconstructible_spec(optimizer, cls, guessed, form, form_lines)
    slow = _PROBE_SLOW.get()
    if slow is not None:  # every probe after would wait as long: a spec that skips, saying why
        lines = form_lines if any(line.startswith("skip:") for line in form_lines) else [*form_lines, *_skip_lines(*_too_slow(slow))]
        return f"{name}.yaml", "\n".join([*_head(optimizer, cls, {**guessed, **fills}, fill_notes), *lines,
                                          "cases:", "  - name: default", "devices: [cpu, cuda]", ""])
    _PROBE_BACKWARD.set(next((line.split()[1] for line in form_lines if line.startswith("backward: ")), "plain"))
    _PROBE_CLOSURE.set(_moves_only_given_closure(probe, form, guessed, factory))
    _PROBE_STEP_CLOSURE.set(_steps_only_given_closure(probe, form, guessed, factory))
    seeded = _seed_fill(probe, form, guessed, factory)
    if seeded is not None:  # its own generator, seeded from the OS unless given a seed: runs would never compare
        fills, fill_notes, probe = {**fills, **seeded[0]}, [*fill_notes, seeded[1]], functools.partial(probe, **seeded[0])
    bf16_only = any(line.startswith("dtypes: [bfloat16]") for line in form_lines)
    dtype = torch.bfloat16 if bf16_only else torch.float32
    lr, lr_note = _moving_lr(probe, form, factory, lr, max(default_lr, 1e-2), dtype) if has_lr else (lr, "")
    low_precision_lines, bf16_lr = ([], lr) if bf16_only else _low_precision(probe, form, factory, lr if has_lr else None, max(default_lr, 1e-2))
    state_dtype = _probed_state_dtype(probe, form, factory, lr if has_lr else None)
    base = {"lr": lr} if has_lr else {}  # the kwargs every case starts from, once lr has moved
    stored, dropped = _stored_flags(probe, form, base, ("foreach", "maximize"), factory)
    base_problem = _stepped(probe, form, base, factory, steps=1)[1]  # the default case's own error: no option's refusal
    flag_cases = [(flag, value, *_constructible(probe, base, {flag: value}, defaults, form, factory,
                                                 {"lr": lr} if lr_refusal else {}, base_problem)) for flag, value in
                  ((f, not defaults[f] if isinstance(defaults[f], bool) else True) for f in flags if f not in DEVICE_FLAGS)]
    every_case = [base, *({**base, **kwargs} for _, _, kwargs, _ in flag_cases if kwargs is not None)]
    stored -= {flag for flag, _, kwargs, _ in flag_cases if kwargs is None}  # no law or property over a refused flag
    closure_line = _closure_line(probe, form, factory, base, dtype)
    needs_closure = closure_line.startswith("closure: [true]")
    shapes, shape_notes = _shape_claims(probe, form, every_case, dtype, needs_closure)
    draws = _draws_random(probe, form, base, dtype, factory)
    gradient_free = _gradient_free(probe, form, base, factory)
    claimed: list[tuple[int, ...]] = [(4, 3)] + ([] if shapes.get("min_dims") == 2 else [(5,)])
    zero_lr_refusal = _zero_lr_problem(probe, form, base, claimed, dtype, needs_closure) if has_lr else None
    # the property draws over every case (zij's AdaGC: fixed_decay's decay ignores lr); the laws run the default case's
    fuzz_zero_lr_refusal = zero_lr_refusal or (next(
        (f"{problem}{_with(kwargs, base)}" for kwargs in every_case[1:]
         if (problem := _zero_lr_problem(probe, form, kwargs, claimed, dtype, needs_closure)) is not None), None)
        if has_lr else None)
    shown_fills = "".join(f", {k}: {_scalar(v)}" for k, v in fills.items()) + "".join(f", {k}: {v}" for k, v in instance_lines.items())
    tensor_lr_refusal = _rejection(probe, base, {"lr": torch.tensor(lr)}, form, factory, base_problem) if has_lr else None
    lines = [
        f"# Starter spec for {cls.__module__}.{cls.__name__}, written by `python -m pytest_optimtest init`.",
        f"# Run it: pytest --optim-spec {name}.yaml   Then: pytest --optim-spec {name}.yaml --optim-update-expected",
        f"optimizer: {optimizer}",
        (f"kwargs: {{lr: {lr!r}{shown_fills}}}" + (f"  # {lr_note}" if lr_note else "")) if has_lr
        else f"kwargs: {{{shown_fills.removeprefix(', ')}}}  # " + (
            f"{cls.__name__} refuses an lr with its other defaults ({lr_refusal}): its cases leave lr out" if lr_refusal
            else f"{cls.__name__} takes no lr: fill in the kwargs a case needs"),
        *[f"# {note}" for note in fill_notes],
        *form_lines,
        *([f"setup: pytest_optimtest.setups:train_mode  # its step raises outside train mode ({train_problem}): "
           "every optimizer the runs build is put in it"] if train_problem is not None else []),
        "cases:",
        "  - name: default",
        *_cuda_defaults_case(defaults, cpu_switches, cuda_need[0] if cuda_need else ""),
    ]
    names = {"default", "tensor_lr", "scheduled", "low_precision", "cuda_defaults"}
    for flag, value, kwargs, note in flag_cases:
        if kwargs is None:
            lines.append(f"  # left out: {flag}: {value}: {note}")
            continue
        shown = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in kwargs.items())
        lines += [f"  - name: {_case_name(flag if value else f'no_{flag}', names)}", f"    kwargs: {{{shown}}}"
                  + (f"  # {note}" if note else "")]
    skipped = [f for f in flags if f in DEVICE_FLAGS]
    if skipped:
        lines.append(f"# left out: {', '.join(skipped)} (CUDA or autograd-through-step paths; add cases with devices: [cuda])")
    if dropped:
        lines.append(f"# left out of the laws and properties: {', '.join(dropped)}: the constructor accepts it and keeps it "
                     "nowhere (not in its defaults, param groups or attributes), so a law over it would compare identical runs")
    schedules = has_lr and issubclass(cls, torch.optim.Optimizer)  # torch's schedulers take nothing else
    if has_lr and tensor_lr_refusal is None:  # a tensor lr, and the schedulers that change lr, need an lr
        lines += ["  - name: tensor_lr", f"    kwargs: {{lr: {{tensor: {lr!r}}}}}", *(["    schedulers: true"] if schedules else [])]
    elif has_lr:
        lines += [f"  # left out: tensor_lr: a tensor lr is refused ({tensor_lr_refusal})",
                  *(["  - name: scheduled", "    schedulers: true"] if schedules else [])]
    lines += [
        *low_precision_lines,
        *(["schedulers:", "  StepLR: {step_size: 1, gamma: 0.5}", "  CosineAnnealingLR: {T_max: 10}"] if schedules else
          [f"# no schedulers: torch's LR schedulers take a torch.optim.Optimizer, and {cls.__name__} is not one"] if has_lr else []),
        closure_line,
        *_grad_mode_lines(probe, form, factory, base, dtype, needs_closure),
        *(["fallback_random: true  # its step draws from torch's RNG: compiled with inductor's fallback_random, the draws "
           "match eager's (per-param regimes, in-backward, ZeRO, FSDP, still draw in another order)"] if draws else []),
        "devices: [cpu, cuda]",
        "kernel_counts: {}  # fill in with --optim-update-expected",
        *_state_dtype_lines(state_dtype),
        *[f"# {note}" for note in shape_notes],
        *(_properties(probe, state_dtype == "param", stored - ({"maximize"} if gradient_free else set()), shapes,
                      fuzz_zero_lr_refusal, has_lr, _refusal(probe, form, base, [(4, 3)], torch.float64, needs_closure))
          if form != "model" else
          ["# fuzz: none: its constructor takes the model itself, and the properties step loose params of drawn shapes"]),
        # the tensor_lr law pins its lr at every dtype: bf16's, where that is larger, keeps it from being vacuous there
        *_laws(probe, max(lr, bf16_lr or lr) if has_lr else None, factory, stored,
               "allow_empty" not in shapes, "allow_views" not in shapes, tensor_lr=tensor_lr_refusal is None,
               gradient_free=gradient_free, zero_lr_refusal=zero_lr_refusal),
    ]
    return f"{name}.yaml", "\n".join(lines) + "\n"


# What an error raised without a GPU says when the code wants one: a check of its own (FlashAdam's "Quantization
# requires a CUDA device."), Triton finding no driver ("0 active drivers"), an assert on `is_cuda` (muonium's).
_WANTS_CUDA = re.compile(r"\bcuda\b|is_cuda|\bgpus?\b|nvidia|active drivers", re.IGNORECASE)


def _names_cuda(problem: str) -> bool:
    """Whether a probe's error (`_located`'s) says its code wants CUDA, by its message or by the line
    that raised it."""
    return bool(_WANTS_CUDA.search(problem.partition(", at ")[0]) or _WANTS_CUDA.search(_raising_line(problem)))


def _located(exc: BaseException) -> str:
    """A probe's error in one line, then `, at file:line in function` where the user's code raised it."""
    where = blame(exc).where
    return one_line(exc) + (f", at {where}" if where else "")


_DTYPE_WORDS = re.compile(r"bfloat16|bf16|float16|fp16|half|float32|fp32|float64|dtype|precision", re.IGNORECASE)


def _refuses_dtype(problem: str) -> bool:
    """Whether a probe's error is the optimizer refusing the params' dtype on purpose: its own `raise` or
    `assert` statement, naming dtypes ("SOAP supports float32/float64 parameters"), not an op that failed on them."""
    line = _raising_line(problem).strip()
    return line.startswith(("raise", "assert")) and bool(_DTYPE_WORDS.search(problem.split(", at ")[0] + " " + line))


def _raising_line(problem: str) -> str:
    """The source line a `_located` problem names, or ''."""
    found = re.search(r", at (\S+):(\d+) in \S+$", problem)
    return linecache.getline(found.group(1), int(found.group(2))) if found else ""


def _cpu_problems(cls: Any, kwargs: dict) -> tuple[list[str], tuple[str, Any] | None] | None:
    """(what constructing and stepping raised here, the first params form and model that constructed)
    over the plugin's forms and models, one step a model (its first form that constructs); None as
    soon as one steps."""
    problems, constructed = [], None
    for factory in (two_linear, two_linear_no_bias, _bf16_two_linear):  # the last for a bf16-only constructor
        dtype = torch.bfloat16 if factory is _bf16_two_linear else torch.float32
        for form in ("list", "named", "model"):
            try:
                construct(cls, form, factory(), kwargs, "cpu")
            except Exception as exc:  # noqa: BLE001  # the constructor's verdict; the next form is tried
                problems.append(_located(exc))
                continue
            problem = _stepped(cls, form, kwargs, factory, steps=1, dtype=dtype)[1]
            if problem is None:
                return None
            problems.append(problem)
            constructed = constructed or (form, factory)
            break
    return problems, constructed


def _cuda_need(cls: Any, kwargs: dict) -> tuple[str, tuple[str, Any] | None] | None:
    """(the error that says the optimizer wants CUDA, the params form and model it constructed with),
    where this machine has none and nothing of the plugin's steps it here (Triton kernels, quantized
    state kept on the GPU); None otherwise."""
    if torch.cuda.is_available():
        return None
    found = _cpu_problems(cls, kwargs)
    if found is None:
        return None
    problem = next((p for p in found[0] if _names_cuda(p)), None)
    return (problem, found[1]) if problem is not None else None


def _cpu_switches(cls: Any, kwargs: dict) -> dict[str, Any] | None:
    """The fewest of the constructor's switches that give it a CPU path, where they do: flags that default
    to True set False, optional settings set None (FlashAdam's quantize, fused and master_weight_bits)."""
    parameters = [p for p in inspect.signature(cls).parameters.values() if p.name not in kwargs]
    switches: dict[str, Any] = {p.name: False for p in parameters if p.default is True}
    switches |= {p.name: None for p in parameters if p.default not in (None, True, False, p.empty)
                 and ("Optional" in str(p.annotation) or "None" in str(p.annotation))}
    if not switches or _cpu_problems(cls, {**kwargs, **switches}) is not None:
        return None
    for name in list(switches):  # each one it steps without is the user's default, not a switch
        fewer = {k: v for k, v in switches.items() if k != name}
        if _cpu_problems(cls, {**kwargs, **fewer}) is None:
            switches = fewer
    return switches


def _cuda_defaults_case(defaults: dict[str, Any], switches: dict[str, Any], problem: str) -> list[str]:
    """The case that runs the constructor's own defaults where the CPU cases switched them off."""
    if not switches:
        return []
    shown = ", ".join(f"{k}: {_scalar(defaults[k])}" for k in switches)
    return [f"  - name: cuda_defaults  # its defaults need CUDA ({problem}): the other cases switch them off",
            f"    kwargs: {{{shown}}}", "    devices: [cuda]"]


def _head(optimizer: str, cls: type, kwargs: dict, notes: list[str]) -> list[str]:
    """The first lines of a spec that init writes without probing the step further: who wrote it, the
    optimizer, its kwargs and the notes on them."""
    shown = ", ".join(f"{k}: {_scalar(v)}" for k, v in kwargs.items())
    return [f"# Starter spec for {cls.__module__}.{cls.__name__}, written by `python -m pytest_optimtest init`.",
            f"optimizer: {optimizer}", f"kwargs: {{{shown}}}", *[f"# {note}" for note in notes]]


def _cuda_only_spec(optimizer: str, cls: type, kwargs: dict, notes: list[str], need: tuple[str, Any]) -> str:
    """A spec that loads for an optimizer that needs CUDA on a machine without it: its cases run on
    cuda, over the params form and model it constructed with; init, run where there is a GPU, probes
    its step for the rest."""
    problem, constructed = need
    form, factory = constructed or ("list", two_linear)
    return "\n".join([
        *_head(optimizer, cls, kwargs, notes),
        *([] if form == "list" else [f"params: {form}"]),
        *(["dtypes: [bfloat16]  # its constructor refuses float32 params and takes bf16 ones"] if factory is _bf16_two_linear
          else [] if factory is two_linear else [f"model: pytest_optimtest.models:{factory.__name__}  # its constructor "
                                                 "refuses the default model's 1-D params"]),
        f"# it needs CUDA, and init ran without a GPU: {problem}",
        "# run init again on a machine with one for a spec whose step was probed (closure, dtypes, shapes, laws)",
        "cases:", "  - name: default", "devices: [cuda]", ""])


def _scalar(value: Any) -> str:
    """`value` as YAML reads it back: true, false, null, or the number."""
    return json.dumps(value) if value is None or isinstance(value, bool) else repr(value)


# Tried in turn for a hyperparameter the constructor requires: QHM's momentum and nu take a fraction,
# TAdam's `iters` (a count, > 1) the integers.
REQUIRED_GUESSES = (0.9, 0.1, 1.0, 10, 1000)
APART_GUESSES = (-1.0, 1.0, 10.0)  # for required arguments that no equal guesses step: a range around the params
COUNT_GUESSES = (10, 1000, 1)  # for an argument whose name says it counts (num_epochs, total_steps, iters)
_COUNTS = re.compile(r"num|count|epoch|step|iter|batch|total|size")


def _guesses(name: str) -> tuple[float, ...]:
    return COUNT_GUESSES if _COUNTS.search(name) else REQUIRED_GUESSES


def _required_fills(cls: type, kwargs: dict, form: str = "list") -> tuple[dict[str, float | int], list[str]]:
    """({name: value}, notes) for the hyperparameters the constructor requires beyond params and lr
    (torch.optim's `required` sentinel, a keyword-only argument without a default, one annotated as a
    number, a positional one that steps given a number, or a None default it refuses by name): the first of
    REQUIRED_GUESSES with which it constructs and steps in the params `form`, said in a note to replace with
    the user's value."""
    from torch.optim.optimizer import required  # the sentinel torch.optim and its imitators default to

    parameters = list(inspect.signature(cls).parameters.values())[1:]  # after the params
    names = [p.name for p in parameters if p.name != "lr" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and (p.default is required or (p.default is p.empty and (p.kind is p.KEYWORD_ONLY or _numeric(p))))]
    unset = [p.name for p in parameters if p.default is None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and p.name not in ("lr", "foreach", "maximize", "capturable", "differentiable", "fused")]
    names += _positional_numbers(cls, kwargs, names, [p.name for p in parameters if p.name not in names and p.name != "lr"
                                                     and p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty], form)
    names += _needed_none_defaults(cls, kwargs, {name: _guesses(name)[0] for name in names}, unset, form)
    if not names:
        return {}, []

    def steps(candidate: dict[str, float]) -> bool:
        return _stepped(cls, form, {**kwargs, **candidate}, two_linear, steps=1)[1] is None

    fills = {name: _guesses(name)[0] for name in names}
    for name in names if not steps(fills) else ():  # one at a time, the others at the first guess
        fills[name] = next((g for g in _guesses(name) if steps({**fills, name: g})), _guesses(name)[0])
    # values apart, ascending in the constructor's order, around the params (whose init lies within +-1): equal
    # guesses make an empty range of bounds (torchzero's lb, ub), whose refusal a spec would show as the optimizer's
    apart = {name: (sorted(COUNT_GUESSES) if _COUNTS.search(name) else APART_GUESSES)[min(i, 2)] for i, name in enumerate(names)}
    if len(names) > 1 and not steps(fills) and (steps(apart) or _constructs(cls, form, two_linear, {**kwargs, **apart})):
        fills = apart
    elif len(set(fills.values())) == 1 < len(names) and form == "list" and _ignores_its_loss(cls, {**kwargs, **fills}):
        # equal bounds step, to one point whatever the loss (scipy's DE in lb = ub = 0.9): nothing under test; apart,
        # the search is, or it runs past the probe's time and the spec says so of these values
        apart_steps = steps(apart)
        if _PROBE_SLOW.get() is not None or (apart_steps and not _ignores_its_loss(cls, {**kwargs, **apart})):
            fills = apart
    if not steps(fills):
        if _constructs(cls, form, two_linear, {**kwargs, **fills}):  # a spec that loads, its step's error shown by its runs
            return fills, [f"{', '.join(f'{k}: {v}' for k, v in fills.items())}: init's guesses for what the constructor "
                           f"requires (it constructs so; no guess of {REQUIRED_GUESSES} stepped): put your values"]
        return {}, [f"{', '.join(names)}: the constructor requires them and no guess of {REQUIRED_GUESSES} stepped: fill them in"]
    return fills, [f"{', '.join(f'{k}: {v}' for k, v in fills.items())}: init's guesses for what the constructor requires; "
                   "put your values"]


def _positional_numbers(cls: type, kwargs: dict, names: list[str], untyped: list[str], form: str = "list") -> list[str]:
    """The required positional arguments without annotation that are hyperparameters (torch-clip's
    ClippedSSTM(params, lr, L): a Lipschitz constant), not a second params argument (Muon's hybrids):
    given one guess each, the others at their first, the constructor constructs and steps."""
    if not untyped:
        return []
    fills = {name: _guesses(name)[0] for name in names}
    for guess in REQUIRED_GUESSES:
        if _stepped(cls, form, {**kwargs, **fills, **{name: guess for name in untyped}}, two_linear, steps=1)[1] is None:
            return untyped
    return []


def _ignores_its_loss(cls: type, kwargs: dict) -> bool:
    """Whether one step lands on the same params whatever loss its closure and grads give (a search
    in an empty box of bounds): a setting under which none of the optimizer's work is under test.
    False where a step raises or runs past the probe's time."""
    landed = []
    for target in (0.0, 1.0):
        torch.manual_seed(0)
        model, batch = two_linear(), torch.randn(10, IN_FEATURES)
        try:
            optimizer = construct(cls, "list", model, kwargs, "cpu")
            closure = make_closure(model, optimizer, batch, lambda out, target=target: (out - target).pow(2).sum())
            closure()
            with torch.no_grad(), _time_bounded():
                optimizer.step(closure) if takes_closure(cls) else optimizer.step()
        except (Exception, ProbeTimeout):  # noqa: BLE001  # no answer: the fill stands as the other probes judged it
            return False
        landed.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return torch.equal(*landed)


def _numeric(parameter: inspect.Parameter) -> bool:
    """Whether the argument is annotated as a number (IVON's `ess: float`): a hyperparameter to guess,
    never a second params argument, however it is passed."""
    return parameter.annotation in (int, float, "int", "float")


def _required_instances(cls: type) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """({name: instance}, {name: spec value}, notes) for arguments after params that have no default
    and are annotated with a class that constructs without arguments (a config dataclass, as
    GaLoreAdamW's `cfg: GaLoreConfig`): each given as a default instance, `{call: "mod:Class"}`; or
    with an optimizer class (SAM's `optim: Optimizer`): that optimizer, or SGD, over the same params."""
    import typing  # get_type_hints resolves annotations written under `from __future__ import annotations`

    try:
        hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]  # the class's own constructor
    except Exception:  # noqa: BLE001  # an annotation that does not resolve: nothing to construct from
        return {}, {}, []
    instances: dict[str, Any] = {}
    shown, notes = {}, []
    for parameter in list(inspect.signature(cls).parameters.values())[1:]:
        kind = hints.get(parameter.name)
        if parameter.default is not parameter.empty or not inspect.isclass(kind) or kind.__module__ == "builtins":
            continue
        if issubclass(kind, torch.optim.Optimizer):  # a wrapper's base optimizer (SAM's `optim`), over the same params
            base = "torch.optim.SGD" if inspect.isabstract(kind) or kind is torch.optim.Optimizer else f"{kind.__module__}:{kind.__qualname__}"
            instances[parameter.name] = BaseOptimizer(base, DEFAULT_BASE.kwargs)
            shown[parameter.name] = instances[parameter.name].spec_text()
            notes.append(f"{parameter.name}: {base} over the same params (init's guess for the optimizer it wraps): put yours")
            continue
        try:
            instances[parameter.name] = kind()
        except Exception:  # noqa: BLE001  # it needs arguments of its own: left for the user, as before
            continue
        shown[parameter.name] = f'{{call: "{kind.__module__}:{kind.__qualname__}"}}'
        notes.append(f"{parameter.name}: {kind.__qualname__}() with its defaults (init's guess for what the constructor "
                     "requires): put yours")
    return instances, shown, notes


def _wrapped_base(cls: type, kwargs: dict) -> tuple[str, BaseOptimizer, str] | None:
    """(argument, base optimizer, spec value) where the constructor's first argument is the optimizer it
    wraps, an instance over the params (Lookahead's `base_optimizer`, Magma's `optimizer: Optimizer`):
    its name or annotation says so, and given SGD over the params it constructs. Else None."""
    argument = wrapped_optimizer_argument(cls)
    if argument is None:
        return None
    wrapper: Any = functools.partial(cls, **{argument: DEFAULT_BASE})
    # (its step may still raise: the optimizer's own error, which the spec's comment and runs then show)
    if not _constructs(wrapper, "wrapped", two_linear, {**kwargs, **_required_fills(wrapper, kwargs, "wrapped")[0]}):
        return None
    return argument, DEFAULT_BASE, DEFAULT_BASE.spec_text()


def _lr_refusal(cls: type, lr: float) -> str | None:
    """Why the constructor refuses an lr that it takes (HF's Adafactor: lr=None unless relative_step is
    off), where it constructs without one; or, taking it only through **kwargs, why its step does
    (torchmin's Minimizer passes them to minimize()), where it steps without one; else None."""
    try:
        construct(cls, "list", two_linear(), {"lr": lr}, "cpu")
    except Exception as exc:  # noqa: BLE001  # refused with lr: is it the lr?
        refusal = one_line(exc)
        try:
            construct(cls, "list", two_linear(), {}, "cpu")
        except Exception:  # noqa: BLE001  # refused without it too: something else is missing, not the lr's fault
            return None
        return refusal
    if "lr" in inspect.signature(cls).parameters:
        return None  # an lr by name: what its step raises is the step's own
    stepped = _stepped(cls, "list", {"lr": lr}, two_linear, steps=1)[1]
    if not stepped or "'lr'" not in stepped:
        return None
    return f"its step refuses it: {stepped}" if _stepped(cls, "list", {}, two_linear, steps=1)[1] != stepped else None


def _needed_none_defaults(cls: type, kwargs: dict, fills: dict, unset: list[str], form: str = "list") -> list[str]:
    """The None-default arguments the constructor cannot do without: while a step raises over None
    (Ranger21 multiplies its num_batches_per_epoch by num_epochs), or the constructor refuses naming
    one (DropGrad's "Either drop_rate or params must be specified"), each such one in turn is given a
    number, and kept where that changes what the step raises or makes it step."""
    problem = _stepped(cls, form, {**kwargs, **fills}, two_linear, steps=1)[1]
    needed: list[str] = []
    for name in unset:
        if not _wants_a_value(problem, name):
            continue
        for guess in _guesses(name):
            tried = _stepped(cls, form, {**kwargs, **fills, **{n: _guesses(n)[0] for n in needed}, name: guess},
                             two_linear, steps=1)[1]
            if tried != problem:
                needed.append(name)
                problem = tried
                break
    return [] if any(_wants_a_value(problem, name) for name in unset) else needed


def _wants_a_value(problem: str | None, name: str) -> bool:
    """Whether what a step raised says that a None-default argument, `name`, needs a value: it took
    None for a number, or it names the argument."""
    return problem is not None and ("NoneType" in problem or re.search(rf"\b{re.escape(name)}\b", problem) is not None)


def _constructible(cls: type, base: dict, kwargs: dict, defaults: dict, form: Any, factory: Any,
                   refused_lr: dict, base_problem: str | None = None) -> tuple[dict | None, str]:
    """(kwargs the optimizer constructs and steps with over `base`, a note): `kwargs` as given; else
    with a zero-default number that the rejection names set to 0.9 (SGD's nesterov needs momentum),
    or with the lr it refused by default (`refused_lr`: HF Adafactor wants one once relative_step is
    off); else (None, why)."""
    problem = _rejection(cls, base, kwargs, form, factory, base_problem)
    if problem is None:
        return kwargs, ""
    fixes = [{name: 0.9} for name, default in defaults.items() if name in problem and name not in kwargs
             and isinstance(default, (int, float)) and not isinstance(default, bool) and default == 0]
    for fix in [*fixes, *([refused_lr] if refused_lr else [])]:
        fixed = {**kwargs, **fix}
        if _rejection(cls, base, fixed, form, factory, base_problem) is None:
            shown = ", ".join(f"{k}: {v}" for k, v in fix.items())
            return fixed, f"with {shown}, since alone it is rejected: {problem}"
    return None, f"{getattr(cls, 'func', cls).__name__} rejects it: {problem}"  # a partial binds the required kwargs


def _rejection(cls: type, base: dict, kwargs: dict, form: Any, factory: Any, base_problem: str | None = None) -> str | None:
    """What constructing the optimizer with these kwargs, or its first step, raised; None where both ran,
    or where the step raised `base_problem`, the default case's own error (SGD_boost's KeyError without its
    warmup_step: no option's refusal)."""
    try:
        construct(cls, form, factory(), {**base, **kwargs}, "cpu")
    except Exception as exc:  # whatever the constructor raises is its verdict on these kwargs
        return one_line(exc)
    problem = _stepped(cls, form, {**base, **kwargs}, factory, steps=1)[1]
    return None if problem is not None and problem == base_problem else problem


def _params_form(cls: type, kwargs: dict, wraps: str | None = None) -> tuple[Any, Any, list[str]]:
    """(params form, model factory, spec lines): how the constructor takes its params (a list, named
    params, the model, or through the optimizer it wraps), and a model without 1-D params when the
    constructor or one step over the default model raises and over that one does not (Muon-style
    optimizers). What init cannot find out is left to fill in."""
    if wraps is not None:
        lines = [f"params: wrapped  # it wraps an optimizer instance, `{wraps}`, built over the params"]
        step_problem = _first_step_problem(cls, "wrapped", kwargs, two_linear)
        return "wrapped", two_linear, lines + ([f"# one step over the default model raises ({step_problem}): the optimizer's "
                                                "own error, which its runs show with its line"] if step_problem else [])
    required = _required_params_arguments(cls, kwargs)
    if len(required) == 2:  # params split across two arguments: Muon hybrids take matrices first
        split = [ParamGroup(min_ndim=2, argument=required[0]), ParamGroup(argument=required[1])]
        try:
            construct(cls, split, two_linear(), kwargs, "cpu")
            stepped = _stepped(cls, split, kwargs, two_linear, steps=1)[1]
            taken = _step_arguments(cls)
            if stepped is not None and taken is None:  # it took a list where it wants an object (SAM's base optimizer)
                raise ValueError(f"it constructs so, but its step raises {stepped}")
            return split, two_linear, [f"params:  # matrices to {required[0]}, the rest to {required[1]} (check which "
                                       "argument wants which)",
                                       f"  - {{min_ndim: 2, argument: {required[0]}}}", f"  - {{argument: {required[1]}}}",
                                       *(_skip_lines(f"its step requires arguments torch.optim's do not ({taken}): {stepped}",
                                                     _step_arguments_reason(taken)) if stepped is not None and taken else [])]
        except Exception as exc:  # noqa: BLE001  # then say what to fill in, in a spec that loads and skips until then
            return "list", None, [f"# the constructor requires {required[0]!r} and {required[1]!r} and refused "
                                        f"matrices to one and the rest to the other ({one_line(exc)}): fill in `params` "
                                        f"groups with `argument` where both take params, else give {required[1]!r} under "
                                        f"kwargs ({KWARG_OBJECTS}; docs/specs.md)"]
    problems = {}
    factory: Any = two_linear
    for form in ("list", "named", "model"):
        try:
            construct(cls, form, two_linear(), kwargs, "cpu")
            break
        except Exception as exc:  # the constructor's verdict on this form; the next is tried
            problems[form] = one_line(exc)
    else:
        half = next((f for f in ("list", "named", "model") if _constructs(cls, f, _bf16_two_linear, kwargs)), "")
        if half:  # a bf16-only optimizer that says so in its constructor (mpadam's MPAdam)
            lines = [*([] if half == "list" else [f"params: {half}"]),
                     f"dtypes: [bfloat16]  # its constructor refuses float32 params and takes bf16 ones: {problems[half]}"]
            step_problem = _stepped(cls, half, kwargs, two_linear, steps=1, dtype=torch.bfloat16)[1]
            return half, two_linear, lines + ([f"# one step over bf16 params raises ({step_problem}): "
                                               f"{_what_to_fill_in(step_problem)}"] if step_problem else [])
        form = next((f for f in ("list", "named", "model") if _constructs(cls, f, two_linear_no_bias, kwargs)), "")
        if not form:
            flagged = [ParamGroup(min_ndim=2, use_muon=True), ParamGroup(use_muon=False)]
            try:  # Muon's hybrids take only groups flagged `use_muon` (Keller Jordan's MuonWithAuxAdam and its copies)
                construct(cls, flagged, two_linear(), kwargs, "cpu")
            except Exception:  # noqa: BLE001  # not that convention either: say what to fill in
                if takes_a_model(cls):  # a model of its own kind (LoRA-Pro's LoRA pairs): none of the plugin's
                    return "model", None, [f"# its constructor takes a model, and refused the plugin's ({problems['model']})",
                                           "# model: yourpackage.testing:model_factory  # fill in: a model it takes, "
                                           "built on the device it is given"]
                extra = _extra_positional(cls)
                return "list", None, [
                    f"# the constructor refused a list of params, named params and the model ({problems['list']}): " +
                    (f"it takes positional arguments after its params (*{extra}), which a spec cannot give"
                     if extra and not _refuses_values(problems["list"]) else
                     f"it takes {_what_it_takes(cls, problems['list'])}")]
            return flagged, two_linear, [f"params:  # matrices in a group with use_muon: true, the rest with use_muon: false "
                                         f"(it refuses a plain list: {problems['list']})",
                                         "  - {min_ndim: 2, use_muon: true}", "  - {use_muon: false}"]
        factory = two_linear_no_bias  # a constructor that takes matrices only (EchoMuon's): its step probed over them below
    if factory is two_linear_no_bias:
        lines = [*([] if form == "list" else [f"params: {form}"]),
                 f"model: pytest_optimtest.models:two_linear_no_bias  # its constructor refuses 1-D params: {problems['list']}"]
    else:
        lines = [] if form == "list" else [f"params: {form}  # it refuses a plain list of params: {problems['list']}"]
    step_problem = _first_step_problem(cls, form, kwargs, factory)
    if step_problem and factory is two_linear and _first_step_problem(cls, form, kwargs, two_linear_no_bias) is None:
        lines.append(f"model: pytest_optimtest.models:two_linear_no_bias  # its step refuses 1-D params: {step_problem}")
        return form, two_linear_no_bias, lines
    if step_problem and _stepped(cls, form, kwargs, factory, steps=1, dtype=torch.bfloat16)[1] is None:
        lines.append(f"dtypes: [bfloat16]  # its step refuses float32 params and steps bf16 ones: {step_problem}")
        return form, factory, lines
    protocol = _backward_protocol(cls, form, kwargs, step_problem, factory) if step_problem else None
    if protocol is not None:
        return form, factory, [*lines, protocol]
    if step_problem and factory is two_linear:  # a step over vectors alone (LCG's torch.dot of each grad)
        vector_protocol = ("" if _first_step_problem(cls, form, kwargs, two_diagonal) is None
                           else _backward_protocol(cls, form, kwargs, step_problem, two_diagonal))
        if vector_protocol is not None:
            refused = _stepped_with(cls, form, kwargs, two_linear, 1, torch.float32, closure=bool(vector_protocol),
                                    backward=vector_protocol.split()[1] if vector_protocol else "plain")[1]
            model = f"model: pytest_optimtest.models:two_diagonal  # its step refuses matrices: {refused or step_problem}"
            return form, two_diagonal, [*lines, model, *([vector_protocol] if vector_protocol else [])]
    missing = _missing_module(step_problem) if step_problem else None
    if missing is not None:  # not a protocol: a dependency it imports when it steps (swarmtorch's CMA-ES, `cma`)
        return form, factory, [*lines, f"requires: [{missing}]  # its step imports {missing}, not installed here "
                                       f"({step_problem}): install it, then run init again for a spec that probed its step"]
    skip = _unsteppable(cls, form, kwargs, step_problem) if step_problem else None
    if skip is not None:
        lines += _skip_lines(*skip)
        return form, factory, lines
    if step_problem:
        lines.append(f"# one step over the default model raises ({step_problem}): {_what_to_fill_in(step_problem)}")
    return form, factory, lines


def _required_params_arguments(cls: type, kwargs: dict | None = None) -> list[str]:
    """The constructor's required positional arguments that `kwargs` does not give (a required lr is
    given): two where params are split across two arguments (Muon hybrids, a min-max game's players)."""
    return [n for n, p in inspect.signature(cls).parameters.items()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "self"
            and n not in (kwargs or {})]


def _unconstructible_spec(optimizer: str, cls: type, kwargs: dict, form: str, form_lines: list[str]) -> str:
    """A spec that loads and skips every test, saying what to fill in, for a constructor that refuses
    every params form and model the plugin has: a model of its own kind (LoRA-Pro's), params nested in
    a way no spec form gives (AdamSLS's list of lists). What it takes is the user's to give."""
    shown = ", ".join(f"{k}: {v!r}" for k, v in kwargs.items())
    try:
        construct(cls, "list", two_linear(), kwargs, "cpu")
        refusal = ""
    except Exception as exc:  # noqa: BLE001  # what it said of a plain list, which names what it wants instead
        refusal = one_line(exc)
    head = [f"# Starter spec for {cls.__module__}.{cls.__name__}, written by `python -m pytest_optimtest init`.",
            f"optimizer: {optimizer}", f"kwargs: {{{shown}}}"]
    default_case = ["cases:", "  - name: default", "devices: [cpu, cuda]"]
    missing = _missing_module(refusal)
    if missing is not None:  # gram_newton_schulz's Muon imports quack (CUDA kernels) as it constructs: a dependency
        return "\n".join([*head, f"requires: [{missing}]  # its constructor imports {missing}, not installed here ({refusal}): "
                                 "install it, then run init again for a spec that probed its step", *default_case, ""])
    wanted = ("a model of its own kind: give `model:` a factory of one (called as factory(device=...))" if form == "model"
              else _what_it_takes(cls, refusal))
    reason = (f"{cls.__name__} refused every params form and model the plugin has; it takes {wanted}"
              + ("" if wanted.endswith("not supported") else ", and remove this skip"))
    extra = _extra_positional(cls)
    if extra is not None and not _refuses_values(refusal):  # torchzero's Optimizer(params, *modules): the arguments
        reason = (f"{cls.__name__} takes positional arguments after its params (*{extra}) and refused construction without "
                  "them; a spec gives the constructor keyword arguments only: not supported")
    taken = _step_arguments(cls)
    if taken is not None:  # no params form would do: no run of the plugin's calls such a step
        reason = _step_arguments_reason(taken)
    players = _required_params_arguments(cls)
    loss = _loss_value_parameter(cls)
    if len(players) == 2 and loss is not None:  # CGDs' ACGD(max_params, min_params).step(loss): a min-max game
        reason = (f"its constructor takes two sets of params ({', '.join(players)}) and its step the loss itself "
                  f"(step({loss})): a two-player game's protocol, not torch.optim's: not supported")
    return "\n".join([*head, *(["params: model"] if form == "model" else []), *form_lines, *default_case,
                      "skip:", f"  - {{reason: {json.dumps(reason)}}}", ""])


_MISSING_ARGUMENTS = re.compile(r"missing \d+ required (?:positional|keyword-only) arguments?: (.+)$")


def _what_it_takes(cls: type, refusal: str) -> str:
    """What a constructor that refused every params form takes, read off its refusal of a plain list:
    arguments init had no guess for (infty's SAM: `base_optimizer`, `model`, `args`); no params at all
    (gdtuo's SGD(alpha=0.01, ...), whose first argument is a number); objects of its own kind in its
    first argument (ecoint8's int8 layers, read as `.w_i8`); else params nested in a form init could not
    find (AdamSLS's list of lists)."""
    missing = _MISSING_ARGUMENTS.search(refusal)
    if missing:
        arguments = re.findall(r"'(\w+)'", missing.group(1))
        names = ", ".join(arguments)
        if {"rank", "world_size"} & set(arguments):  # decent_optim_wrapper's: gossip between ranks it is told of
            return (f"its rank in a process group ({names}): a distributed optimizer, one instance per process, which "
                    "the plugin's runs (one process; ranks of DDP or FSDP2 each stepping a local optimizer) do not make: "
                    "not supported")
        return (f"arguments init has no guess for ({names}): give them under kwargs ({KWARG_OBJECTS}; docs/specs.md)")
    first = next(iter(inspect.signature(cls).parameters.values()), None)
    if first is None:
        return "no arguments: it cannot be given params"
    if isinstance(first.default, (int, float)) and not isinstance(first.default, bool):
        return (f"no params: its first argument, `{first.name}`, is a number (default {first.default!r}); it is no "
                "optimizer of params as torch.optim's are: not supported")
    if re.search(r"'(Parameter|Tensor)' object has no attribute", refusal):
        return (f"objects of its own kind in its first argument, `{first.name}`, which read attributes params lack: no params "
                "form gives them: not supported")
    if _refuses_values(refusal):  # SinkhornMuon: "... must have non-negative entries"
        return (f"params unlike those of the plugin's models, whose values it checks ({refusal}): give `model:` a factory "
                "of a model whose params it takes (called as factory(device=...); docs/specs.md)")
    return "params in a form init could not find: give `params` groups it takes (docs/specs.md)"


def _refuses_values(refusal: str) -> bool:
    """Whether a constructor's refusal is a check of the values it was given (SinkhornMuon's non-negative
    entries), not of the arguments it lacks (torchzero's modules after its params)."""
    return refusal.startswith(("ValueError", "AssertionError"))


def _extra_positional(cls: type) -> str | None:
    """The name of the constructor's *args, which no spec gives, or None."""
    return next((p.name for p in inspect.signature(cls).parameters.values() if p.kind is p.VAR_POSITIONAL), None)


def _what_to_fill_in(step_problem: str) -> str:
    """What a spec could give a step that raised `step_problem` over the default model and params."""
    if step_problem.startswith("KeyError"):  # a group key the step reads (Muon hybrids' use_muon), or a dict of its own
        key = step_problem.partition(", at ")[0].removeprefix("KeyError: ")
        return (f"where it reads {key} from its param groups, fill in `params` groups that set it (Muon hybrids read "
                "use_muon so: [{min_ndim: 2, use_muon: true}, {use_muon: false}]); where not, the error is the optimizer's own")
    if any(word in step_problem for word in ("shape", "size", "dimension", "1D", "2D", "ndim", "matrix", "matrices")):
        return "fill in a `model` whose params it steps, or `params` groups that select them"
    return ("the optimizer's own error, which every case's runs show once, with its line; fill in the kwargs or `params` "
            "it needs, if it needs more than the defaults")


def _bf16_two_linear(device: str = "cpu") -> torch.nn.Module:
    return two_linear(device=device).to(torch.bfloat16)


def _constructs(cls: type, form: str, factory: Any, kwargs: dict) -> bool:
    try:
        construct(cls, form, factory(), kwargs, "cpu")
    except Exception:  # noqa: BLE001  # the constructor's verdict on this form and model
        return False
    return True


def _unsteppable(cls: type, form: Any, kwargs: dict, step_problem: str) -> tuple[str, str] | None:
    """(comment, skip reason) where the step needs what no plugin run gives it: sparse grads, a process
    group, a closure protocol of its own; None where filling in params or a model may do."""
    if step_problem.startswith(ProbeTimeout.__name__):
        return _too_slow(step_problem)
    if _steps_sparse_grads_only(cls, form, kwargs):
        return (f"its step refuses dense grads ({step_problem}) and steps sparse ones",
                "a sparse-gradient optimizer: the plugin's models give dense grads (sparse ones, as "
                "nn.Embedding(sparse=True) gives, are not supported yet)")
    if "process group" in step_problem:
        return (f"its step needs torch.distributed initialized ({step_problem})",
                "its step needs an initialized torch.distributed process group (it shares the update across ranks): "
                "the plugin steps it in one process, without one")
    given = _closure_arguments(cls, form, kwargs)
    if given is not None:
        return (f"its step calls its closure with arguments ({given}): {step_problem}",
                "its step calls the closure with arguments, a protocol of its own: torch.optim's closures take none, "
                "and the plugin's take one bool besides (whether to run backward)")
    if _raised_on_purpose(step_problem):
        return (f"its step refuses, on purpose, to step as torch.optim's steps are driven: {step_problem}",
                f"its step needs a protocol of its own (it raises, on purpose: {step_problem.split(', at ')[0]}), where the "
                "plugin's runs call step() or step(closure) after backward, as torch.optim's training loops do: not supported")
    managers = _context_managers(cls)
    if managers:
        return (f"its step raised {step_problem}; it defines {', '.join(managers)}, a context manager a training loop "
                "wraps around forward and backward",
                f"its step needs a protocol of its own (its `{managers[0]}` context around forward and backward, as its docs "
                "say), where the plugin's runs call backward and step() as torch.optim's training loops do: not supported")
    valued = _loss_value_parameter(cls)
    if valued is not None:
        return (f"its step takes the loss's value as `{valued}`, not a closure: {step_problem}",
                f"its step takes the loss's value as `{valued}` after backward (step(loss)), a protocol of its own: "
                "torch.optim's steps take a closure or nothing, as the plugin's runs give: not supported")
    taken = _step_arguments(cls)
    if taken is not None:
        return f"its step requires arguments torch.optim's do not ({taken}): {step_problem}", _step_arguments_reason(taken)
    wanted = _argument_protocol(cls, form, kwargs)
    if wanted is not None:
        argument, problem = wanted
        if "'function' object has no attribute" in problem:
            return (f"its step takes an object as `{argument}`, not a closure: given one it raised {problem}",
                    f"its step takes an object of its own protocol as `{argument}` (it calls methods of it), where "
                    "torch.optim's steps take a closure function, as the plugin's runs give: not supported")
        return (f"its step takes a value as `{argument}`, not a closure: given one it raised {problem}",
                f"its step takes a value of its own as `{argument}` (step({argument}, ...): it computes with it), where "
                "torch.optim's steps take a closure or nothing, as the plugin's runs give: not supported")
    return None


def _train_mode_problem(probe: Any, kwargs: dict) -> str | None:
    """What one step raised that the same step after `optimizer.train()` does not (schedule-free optimizers step
    only in train mode), or None."""
    if not callable(getattr(_probed_class(probe), "train", None)):
        return None
    problem = _stepped(probe, "list", kwargs, two_linear, steps=1)[1]
    if problem is None or _stepped(_in_train_mode(probe), "list", kwargs, two_linear, steps=1)[1] is not None:
        return None
    return problem


def _in_train_mode(probe: Any) -> Any:
    """`probe`, its optimizers put in train mode once constructed, as `setup: ...setups:train_mode` puts each run's."""
    cls = _probed_class(probe)

    @functools.wraps(cls.__init__)  # its signature is the class's: the probes read what the constructor takes from it
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        train_mode(self)

    trained = type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return functools.partial(trained, *probe.args, **probe.keywords) if isinstance(probe, functools.partial) else trained


def _probed_class(probe: Any) -> Any:
    """The optimizer class behind a probe, which binds the kwargs the constructor requires in a partial."""
    return probe.func if isinstance(probe, functools.partial) else probe


def _context_managers(cls: type) -> list[str]:
    """The optimizer's own methods that are generator-based context managers (IVON's `sampled_params`,
    which gathers the grads its step reads): a training-loop protocol of the optimizer's."""
    optimizer_cls = _probed_class(cls)
    found = []
    for name, member in inspect.getmembers(optimizer_cls, callable):
        wrapped = getattr(member, "__wrapped__", None)
        if (wrapped is not None and inspect.isgeneratorfunction(wrapped)
                and not getattr(member, "__module__", "").startswith("torch.")):
            found.append(name)
    return found


def _loss_value_parameter(cls: type) -> str | None:
    """The name of the step's first parameter where it is required and takes the loss's value, not a
    closure (ELRA's `step(self, loss: float)`): named loss or annotated as a number; None otherwise."""
    optimizer_cls = _probed_class(cls)
    parameters = step_parameters(optimizer_cls) if requires_closure(optimizer_cls) else None
    if not parameters:
        return None
    first = parameters[0]
    return first.name if first.name == "loss" or _numeric(first) else None


def _step_arguments(cls: type) -> str | None:
    """The step's call, where it requires what no torch.optim step takes: more than one argument
    (torch_cgd's CGD.step(f, g), a two-player game's two losses) or a tensor (ACGD.step(f: Tensor), the
    loss itself, which it differentiates); None otherwise (ELRA's step(loss: float): `_loss_value_parameter`)."""
    parameters = [p for p in step_parameters(_probed_class(cls)) or []
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    tensor = bool(parameters) and parameters[0].annotation in (torch.Tensor, "torch.Tensor", "Tensor")
    return f"step({', '.join(p.name for p in parameters)})" if len(parameters) > 1 or tensor else None


def _step_arguments_reason(taken: str) -> str:
    """The skip reason for a step that requires the arguments `taken` names."""
    return (f"its step takes {taken}, a protocol of its own: torch.optim's steps take a closure or nothing, as the "
            "plugin's runs give: not supported")


def _too_slow(problem: str) -> tuple[str, str]:
    """(comment, skip reason) for a step that ran past PROBE_SECONDS."""
    return (f"its step does not finish in time: {problem}",
            f"one step over the plugin's model (two Linear(10, 10), 220 params) ran past init's limit ({problem}): every "
            "run would time out; give it a `model` it steps quickly (a smaller one) and remove this skip")


def _skip_lines(comment: str, reason: str) -> list[str]:
    """The spec's `skip` rule for every test, with why in a comment."""
    return [f"skip:  # {comment}", f"  - {{reason: {json.dumps(reason)}}}"]


def _missing_module(problem: str) -> str | None:
    """The module an ImportError the step raised says is missing (by `No module named`, or the package
    its message says to install), or None."""
    if not problem.startswith(("ImportError", "ModuleNotFoundError")):
        return None
    found = (re.search(r"No module named '([\w.]+)'", problem) or re.search(r"pip install ([\w.-]+)", problem)
             or re.search(r"requires the '([\w.-]+)' package", problem))
    return found.group(1).split(".")[0].replace("-", "_") if found else None


def _raised_on_purpose(problem: str, asserted: bool = False) -> bool:
    """Whether the line a step's error names is a `raise` statement of the optimizer's own (torch_constrained's
    "Need to call extrapolation before calling step."), or with `asserted` an `assert` (Adams_ZeRO's `assert
    p.is_contiguous()`, a claim about the params it takes): a protocol it enforces, not an accident."""
    return _raising_line(problem).strip().startswith(("raise ", "assert ") if asserted else "raise ")


def _argument_protocol(cls: type, form: Any, kwargs: dict) -> tuple[str, str] | None:
    """(the step's first argument, what it raised) where the step, given a closure there, used it as
    something a function is not (builder.closure_taken_as_value); None otherwise."""
    problem = _stepped_with(cls, form, kwargs, two_linear, 1, torch.float32, closure=True)[1]
    if problem is None:
        return None
    argument = closure_taken_as_value(cls, problem)
    return None if argument is None else (argument, problem)


def _backward_protocol(cls: type, form: Any, kwargs: dict, step_problem: str, factory: Any) -> str | None:
    """The spec's `backward:` line where the step differentiates what its closure made and moves the
    params of `factory`'s model that way: the loss itself (psgd's Kron, OPTAMI's DampedNewton) or p.grad's
    graph (AdaHessian, Sophia-H, LCG), where the plain protocol's step raised `step_problem`; None where
    neither moves them."""
    for protocol, what in (("by_step", "the loss its closure returns, without backward (psgd's protocol)"),
                           ("create_graph", "p.grad, which needs backward(create_graph=True) in its closure (a Hessian "
                                            "estimate)")):
        if _moves_under(cls, form, kwargs, protocol, factory):
            return f"backward: {protocol}  # its step differentiates {what}; plainly it raised {step_problem}"
    return None


def _moves_under(cls: type, form: Any, kwargs: dict, protocol: str, factory: Any) -> bool:
    """Whether two steps given a closure that makes grads by `protocol` run and move the params. Moves
    them: a step that skips grad-less params (SGD_boost) returns quietly given a closure without backward."""
    moved, problem = _stepped_with(cls, form, kwargs, factory, 2, torch.float32, closure=True, backward=protocol)
    return problem is None and moved > 0


def _closure_arguments(cls: type, form: Any, kwargs: dict) -> str | None:
    """The arguments the step passes its closure (polystep's dict of tensors), where it passes any the
    plugin's closures do not take: torch.optim's closure protocol passes none, and the plugin's closures
    take one bool besides (builder.backward_flag: torchzero's `backward=False`, SaLSA's `backwards=True`)."""
    torch.manual_seed(0)
    model, batch = two_linear(), torch.randn(10, IN_FEATURES)
    calls: list[tuple[tuple, dict]] = []
    try:
        optimizer = construct(cls, form, model, kwargs, "cpu")
        served = make_closure(model, optimizer, batch, lambda out: out.pow(2).sum())

        def closure(*args: Any, **named: Any) -> torch.Tensor:
            try:
                backward_flag(args, named)
            except TypeError:  # the answer: the rest of the step (a whole search) need not run
                calls.append((args, named))
                raise ProbeTimeout("the closure's arguments are seen") from None
            return served(*args, **named)

        with _time_bounded():
            optimizer.step(closure)
    except (Exception, ProbeTimeout):  # noqa: BLE001  # what the step did with its closure is the answer, not whether it finished
        pass
    if not calls:
        return None
    args, named = calls[0]
    return ", ".join([*map(_brief, args), *(f"{k}={_brief(v)}" for k, v in named.items())])


def _brief(value: Any) -> str:
    """A value for a one-line comment: a plain one as Python writes it, anything else by its type (polystep's
    closure argument, a dict of tensors, printed over many lines)."""
    shown = repr(value)
    return shown if isinstance(value, (bool, int, float, str, type(None))) and len(shown) <= 40 else f"a {type(value).__name__}"


MOVEMENT = 20.0  # tolerances the params must move (model: two steps; laws: their steps): twice the checks' min_movement


def _low_precision(cls: type, form: Any, factory: Any, lr: float | None, most: float) -> tuple[list[str], float | None]:
    """(lines, lr) of a bf16 case, its lr raised where bf16's tolerance needs a step that moves more;
    `lr` None: the cases give none."""
    head = "  - name: low_precision  # bf16 params (docs/production.md)"
    refusal = _stepped(cls, form, {} if lr is None else {"lr": lr}, factory, steps=1, dtype=torch.bfloat16)[1]
    if refusal and _refuses_dtype(refusal):  # sweepx's SOAP: a regime it does not claim, not a red of every bf16 item
        return [f"  # left out: low_precision: its step refuses bf16 params ({refusal})"], None
    if lr is None:
        return [head, "    dtypes: [bfloat16]"], lr
    bf16_lr, note = _moving_lr(cls, form, factory, lr, most, torch.bfloat16)
    kwargs = [f"    kwargs: {{lr: {bf16_lr!r}}}" + (f"  # at bf16: {note}" if note else "")] if bf16_lr != lr or note else []
    return [head, *kwargs, "    dtypes: [bfloat16]"], bf16_lr


def _probed_state_dtype(cls: type, form: Any, factory: Any, lr: float | None) -> str:
    """`param` or `float32` when two steps over bf16 params keep every state tensor (but 0-d
    counters) in that dtype; otherwise what was seen, for a comment."""
    try:
        _, optimizer = _probe_run(cls, form, {"lr": lr} if lr is not None else {}, factory, 2, torch.bfloat16)
    except Exception as exc:  # the optimizer's verdict on bf16 params
        return f"its step raised over bf16 params ({one_line(exc)})"
    seen = {str(v.dtype).removeprefix("torch.") for v in _state_tensors(getattr(optimizer, "state", {}))
            if v.is_floating_point() and v.dim() > 0}
    if seen == {"bfloat16"}:
        return "param"
    if seen == {"float32"}:
        return "float32"
    return f"over bf16 params its state tensors are {', '.join(sorted(seen))}" if seen else "it keeps no state tensor"


def _probe_run(cls: type, form: Any, kwargs: dict, factory: Any, steps: int,
               dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, Any]:
    """The model and optimizer after one closure call and `steps` probe steps, from torch's seed 0,
    over `factory`'s model in `dtype`; raises what the optimizer raised."""
    torch.manual_seed(0)
    model = factory().to(dtype)
    optimizer = construct(cls, form, model, kwargs, "cpu")
    closure = make_closure(model, optimizer, torch.randn(10, IN_FEATURES).to(dtype), lambda out: out.pow(2).sum(),
                           backward=_PROBE_BACKWARD.get())
    closure()
    for _ in range(steps):
        _probe_step(optimizer, closure)
    return model, optimizer


def _state_tensors(state: Any) -> list[torch.Tensor]:
    """Every tensor in the optimizer's state, however it nests it (dicts, lists, a tensor as a
    param's whole state); a tensor's own `.values()` (sparse layouts) is not a container's."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _state_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _state_tensors(v)]
    return []


def _state_dtype_lines(state_dtype: str) -> list[str]:
    if state_dtype == "param":
        return ["state_dtype: param  # over bf16 params two steps kept its state in bf16: declared, checked at bf16"]
    if state_dtype == "float32":
        return ["state_dtype: float32  # over bf16 params two steps kept its state in float32 (upcast by design)"]
    return [f"# state_dtype: param or float32, the dtype it keeps its state in: init could not tell ({state_dtype})"]


def _moving_lr(cls: type, form: Any, factory: Any, lr: float, most: float,
               dtype: torch.dtype = torch.float32) -> tuple[float, str]:
    """(lr, note): the smallest of lr, 10 lr, ... (up to `most`) at which the params move MOVEMENT
    default tolerances (see _movement), so the checks compare a step that did something (an optimizer
    idle on its first step, or one whose step grows from a tiny d0, barely moves at a small lr)."""
    tried = []
    while True:
        moved = _movement(cls, form, factory, lr, dtype)
        tried.append(f"{lr:g}: {moved:.3g}" if moved is not None else f"{lr:g}: raised")
        if moved is None or moved >= MOVEMENT or lr * 10 > most * (1 + 1e-9):
            break
        lr = float(f"{lr * 10:g}")
    if len(tried) == 1 and moved is not None and moved >= MOVEMENT:
        return lr, ""
    if moved is not None and moved >= MOVEMENT:
        return lr, f"raised until the params move {MOVEMENT:g} tolerances, the model's and the laws' (lr: tolerances {', '.join(tried)})"
    if moved is None and len(tried) == 1:  # what raised is said where the spec's first step is probed
        return lr, "its step raised at this lr, so how far it moves the params is unknown"
    return lr, (f"the params move under {MOVEMENT:g} tolerances at every lr tried (lr: tolerances "
                f"{', '.join(tried)}): raise lr or steps, or the checks will call their comparisons vacuous")


def _movement(cls: type, form: Any, factory: Any, lr: float, dtype: torch.dtype = torch.float32) -> float | None:
    """Param movement, in the dtype's default tolerance, that the checks and the laws will see: the
    smaller of two eager steps of the model on fixed grads and of the laws' regime; None if a step raised."""
    moved, problem = _stepped(cls, form, {"lr": lr}, factory, steps=2, dtype=dtype)
    # the laws' regime steps on grads set by hand: not one for a step that differentiates its closure's graph
    probed_alone = _PROBE_BACKWARD.get() != "plain" or _PROBE_CLOSURE.get()  # the laws' regime steps without one
    law_moved = moved if probed_alone else _law_regime_movement(cls, form, factory, lr, dtype)
    return None if problem or law_moved is None else min(moved, law_moved)


def _law_regime_movement(cls: type, form: Any, factory: Any, lr: float, dtype: torch.dtype) -> float | None:
    """Largest param movement, in the dtype's default tolerance, in the laws' regime: params of randn
    magnitude (where a relative tolerance such as bf16's is widest; the model's init is far smaller)
    stepped the laws' number of steps on randn grads, given a closure where the step raises without one
    (SAM's: the laws' runs give it one, `step_on_grads`). None if a step raised either way."""
    for with_closure in (False, True):
        torch.manual_seed(0)
        model = factory().to(dtype)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p))
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        try:
            optimizer = construct(cls, form, model, {"lr": lr}, "cpu")
            for _ in range(Laws.model_fields["steps"].default):
                for p in model.parameters():
                    p.grad = torch.randn_like(p)
                step_on_grads(optimizer, model.parameters(), with_closure)
        except Exception:  # noqa: BLE001  # the model probe's own run reports what the step raised
            continue
        tolerance = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")]
        return max_movement(before, {n: p.detach() for n, p in model.named_parameters()}, tolerance)
    return None


def _steps_sparse_grads_only(cls: type, form: Any, kwargs: dict) -> bool:
    """Whether one step over a param whose grad is sparse (as nn.Embedding(sparse=True) gives) runs:
    asked where the step refuses the default model's dense grads (SparseAdam-like optimizers)."""
    if form not in ("list", "named"):
        return False
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(10, 4))
    param.grad = torch.randn(10, 4).to_sparse()
    try:
        construct(cls, form, [("weight", param)], kwargs, "cpu").step()
    except Exception:  # noqa: BLE001  # it refuses sparse grads too: not a sparse-gradient optimizer
        return False
    return True


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
        optimizer = construct(cls, form, model, kwargs, "cpu")
        loss = make_closure(model, optimizer, batch, lambda out: out.pow(2).sum(), backward=backward)
        loss.__qualname__ = "closure"  # a step that passes it arguments reads "closure() got an unexpected keyword..."

        loss()
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


def _stored_flags(cls: type, form: Any, kwargs: dict, flags: tuple[str, ...],
                  factory: Any) -> tuple[set[str], list[str]]:
    """(flags the constructor takes and keeps, flags it takes and keeps nowhere): a law or property
    over a flag that is swallowed by **kwargs would compare two identical runs."""
    stored, dropped = set(), []
    for flag in flags:
        if not takes_keyword(cls, flag):
            continue
        try:
            optimizer = construct(cls, form, factory(), {**kwargs, flag: True}, "cpu")
        except Exception:  # noqa: BLE001  # refused: nothing to propose over it
            continue
        if unstored_kwargs(optimizer, [flag]):
            dropped.append(flag)
        else:
            stored.add(flag)
    return stored, dropped


def _grad_mode_lines(cls: type, form: Any, factory: Any, kwargs: dict, dtype: torch.dtype, closure: bool) -> list[str]:
    """`grad_mode: enabled` for a step that raises under no_grad, where the plugin steps, and steps
    with grad on, as a training loop does (Recursive's runs its inner optimizer's backward); `closure`:
    the step needs one."""
    if _PROBE_BACKWARD.get() != "plain":
        return []  # such a step runs with grad on already (builder.step_grad_mode)
    under_no_grad = _stepped_with(cls, form, kwargs, factory, 1, dtype, closure, grad=False)[1]
    if under_no_grad is None or _stepped_with(cls, form, kwargs, factory, 1, dtype, closure)[1] is not None:
        return []
    return [f"grad_mode: enabled  # its step raises under no_grad ({under_no_grad}) and steps with grad on"]


SEED_ARGUMENTS = ("seed", "random_state", "random_seed", "rng_seed")


def _seed_fill(cls: type, form: Any, kwargs: dict, factory: Any) -> tuple[dict[str, int], str] | None:
    """({argument: 0}, note) where the constructor takes a seed that defaults to None and two runs from
    torch's one seed differ without it and agree with it (pyperch's private generator, seeded from the OS)."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature to read
        return None
    name = next((n for n, p in parameters.items() if n in SEED_ARGUMENTS and p.default is None and n not in kwargs), None)
    if name is None:
        return None
    unseeded = _twin_runs(cls, form, kwargs, factory)
    if unseeded is None or unseeded == (True, True):  # it raised, or two runs that moved agree: seeded by torch's seed
        return None
    if _twin_runs(cls, form, {**kwargs, name: 0}, factory) is None:
        return None
    why = "two runs from one torch seed differ without it" if not unseeded[0] else \
        "its runs moved nothing here, so whether they agree without it is unknown"
    return {name: 0}, f"{name}: 0: {why} (it draws from a generator of its own)"


def _twin_runs(cls: type, form: Any, kwargs: dict, factory: Any) -> tuple[bool, bool] | None:
    """(whether two runs of three steps from torch's one seed end with equal params, whether they moved
    them); None if a step raised."""
    torch.manual_seed(0)
    start = [p.detach().clone() for p in factory().parameters()]
    try:
        ends = [[p.detach().clone() for p in _probe_run(cls, form, kwargs, factory, 3)[0].parameters()] for _ in range(2)]
    except Exception:  # noqa: BLE001  # the step probes report what it raised
        return None
    return all(torch.equal(a, b) for a, b in zip(*ends)), any(not torch.equal(a, b) for a, b in zip(start, ends[0]))


def _gradient_free(cls: type, form: Any, kwargs: dict, factory: Any) -> bool:
    """Whether the step moves params by its closure's loss alone: given a closure that leaves every grad
    None it moves them, and on grads without a closure it raises or moves nothing (pyperch's GA, swarmtorch's
    PSO). A step that moves grad-less params either way (a decay without a grad) is no search: its
    untouched law is to be checked."""
    if _PROBE_BACKWARD.get() != "plain":
        return False
    # four steps: a search's first evaluates its start alone (pyperch's SA, RHC)
    searched, problem = _stepped_with(cls, form, kwargs, factory, 4, torch.float32, closure=True, backward="by_step")
    if problem is not None or searched == 0:
        return False
    if _PROBE_CLOSURE.get():  # it moves nothing without a closure: probed already
        return True
    alone, problem = _stepped_with(cls, form, kwargs, factory, 4, torch.float32, closure=False)
    return problem is not None or alone == 0


def _moves_only_given_closure(cls: type, form: Any, kwargs: dict, factory: Any) -> bool:
    """Whether two steps return without moving the params given no closure and move them given one: a
    gradient-free step that evaluates its closure (swarmtorch's PSO returns at once without one)."""
    alone, problem = _stepped_with(cls, form, kwargs, factory, 2, torch.float32, closure=False)
    if problem is not None or alone > 0:
        return False
    given, problem = _stepped_with(cls, form, kwargs, factory, 2, torch.float32, closure=True)
    return problem is None and given > 0


def _steps_only_given_closure(cls: type, form: Any, kwargs: dict, factory: Any) -> bool:
    """Whether one step raises without a closure and runs given one."""
    return (_stepped_with(cls, form, kwargs, factory, 1, torch.float32, closure=False)[1] is not None
            and _stepped_with(cls, form, kwargs, factory, 1, torch.float32, closure=True)[1] is None)


def _closure_line(cls: type, form: Any, factory: Any, kwargs: dict, dtype: torch.dtype) -> str:
    """The spec's closure variants: both, unless the step raises without a closure and steps with one
    (QQN's `step(closure=None)` asserts it was given one), or the reverse (Adams_ZeRO's asserts it was
    not): a signature cannot say so."""
    if _PROBE_BACKWARD.get() != "plain":
        return "closure: [true]  # its backward protocol steps with a closure"
    if _PROBE_CLOSURE.get():
        return "closure: [true]  # its step moves the params only given a closure (it evaluates the loss; without one it returns)"
    alone = _stepped_with(cls, form, kwargs, factory, 1, dtype, closure=False)[1]
    given = _stepped_with(cls, form, kwargs, factory, 1, dtype, closure=True)[1]
    if alone is not None and given is None:
        return f"closure: [true]  # its step raises without a closure ({alone})"
    if alone is None and given is not None:
        return f"closure: [false]  # its step raises given a closure ({given})"
    return "closure: [false, true]"


def _probe_step(optimizer: Any, closure: Callable[[], torch.Tensor]) -> None:
    """One probe step as the runs take it: with the closure where the protocol found or the step's
    signature needs one (torch_pso's step(closure)), else on the grads the closure left."""
    if (_PROBE_BACKWARD.get() != "plain" or _PROBE_CLOSURE.get() or _PROBE_STEP_CLOSURE.get()
            or requires_closure(type(optimizer))):
        optimizer.step(closure)
    else:
        optimizer.step()


def _draws_random(cls: type, form: Any, kwargs: dict, dtype: torch.dtype, factory: Any) -> bool:
    """Whether a few eager steps advance torch's global RNG (a noisy update, a preconditioner updated
    with some probability): torch's RNG state after three steps vs after none, from one seed."""
    try:
        _probe_run(cls, form, kwargs, factory, 0, dtype)
        before = torch.get_rng_state()
        _probe_run(cls, form, kwargs, factory, 3, dtype)
    except Exception:  # noqa: BLE001  # the step probes above report what it raised
        return False
    return not torch.equal(before, torch.get_rng_state())


def _shape_claims(cls: type, form: Any, every_case: list[dict], dtype: torch.dtype,
                  needs_closure: bool) -> tuple[dict[str, Any], list[str]]:
    """(fuzz settings, notes): the param shapes the step refuses under any case's kwargs, so that fuzz
    draws only shapes the optimizer claims. Each shape is probed alone and beside a matrix, as fuzz
    draws them: a step may take a 0-d param alone and refuse it among others (one that stacks its
    params), or the reverse (one that drops 0-d params and then has none). In a grouped form each
    probed param joins the group its name and ndim select, as fuzz's drawn params do."""
    if form == "model":
        return {}, []  # no property is proposed: they step loose params
    if _PROBE_BACKWARD.get() != "plain":
        return {}, []  # the properties step on grads set by hand, which have no graph for it: none is proposed
    settings: dict[str, Any] = {}
    notes = []
    # an empty param of either side: fuzz draws both (Muon divides by the last side's size)
    for shape, setting, value in (((5,), "min_dims", 2), ((), "min_dims", 1), ((2, 3, 4), "max_dims", 2),
                                  ((0, 3), "allow_empty", False), ((3, 0), "allow_empty", False)):
        if setting in settings:
            continue  # min_dims 2 already leaves 0-d params out; one empty shape refused is enough
        refusal = _first_refusal(cls, form, every_case, shape, dtype, needs_closure)
        if refusal is not None:
            settings[setting] = value
            notes.append(f"fuzz draws no param of shape {shape} ({setting}: {str(value).lower()}): its step refused "
                         f"one {refusal}")
    # LuminaV's raw pointers: fuzz's transposed and strided views are no param it claims. Only a refusal on purpose
    # (its own `raise`): an accident over views (a `.view` of a transposed param) is a bug fuzz is there to show
    refusal = next((f"{_with(kwargs, every_case[0])}: {refused}" for kwargs in every_case
                    if (refused := _refusal(cls, form, kwargs, [(3, 4)], dtype, needs_closure, transposed=True,
                                            located=True)) is not None and _raised_on_purpose(refused, asserted=True)
                    and _refusal(cls, form, kwargs, [(4, 3)], dtype, needs_closure) is None), None)
    if refusal is not None:
        settings["allow_views"] = False
        notes.append(f"fuzz draws no non-contiguous param (allow_views: false): its step refused a transposed one{refusal}")
    return settings, notes


def _first_refusal(cls: type, form: Any, every_case: list[dict], shape: tuple[int, ...], dtype: torch.dtype,
                   needs_closure: bool) -> str | None:
    """How and under which kwargs a step first refused a param of `shape`, alone or beside a matrix.
    Kwargs under which a matrix alone is refused say nothing about shapes (a flag that needs a
    closure): they are passed over."""
    for kwargs in every_case:
        if _refusal(cls, form, kwargs, [(4, 3)], dtype, needs_closure) is not None:
            continue
        for how, shapes in (("alone", [shape]), ("beside a matrix", [(4, 3), shape])):
            refused = _refusal(cls, form, kwargs, shapes, dtype, needs_closure)
            if refused is not None:
                return f"{how}{_with(kwargs, every_case[0])}: {refused}"
    return None


def _with(kwargs: dict, base: dict) -> str:
    extra = {k: v for k, v in kwargs.items() if base.get(k, object()) != v}
    return f" with {', '.join(f'{k}={v!r}' for k, v in extra.items())}" if extra else ""


def _zero_lr_problem(cls: type, form: Any, base: dict, shapes: Sequence[tuple[int, ...]], dtype: torch.dtype,
                     needs_closure: bool) -> str | None:
    """Why the zero_lr property cannot hold (a step at lr 0 raises, or moves params: lr is not a step
    size there, or a decay ignores it), or None."""
    refused = _refusal(cls, form, {**base, "lr": 0.0}, shapes, dtype, needs_closure)
    if refused is not None and refused == _refusal(cls, form, base, shapes, dtype, needs_closure):
        return None  # the default case's own error (SGD_boost's KeyError), not lr 0's: its cases' reds say it
    if refused is not None:
        return f"raised {refused}"
    params = _loose_params(shapes, dtype)
    before = [p.detach().clone() for p in params]
    try:
        step_on_grads(construct(cls, form, params, {**base, "lr": 0.0}, "cpu"), params, needs_closure, _PROBE_BACKWARD.get())
    except Exception as exc:  # noqa: BLE001  # as the refusal probe's, on a second try
        return f"raised {one_line(exc)}"
    if any(not torch.equal(b, p.detach()) for b, p in zip(before, params)):
        return "moved params (its step size does not scale with lr, or a decay ignores it)"
    return None


def _refusal(cls: type, form: Any, kwargs: dict, shapes: Sequence[tuple[int, ...]], dtype: torch.dtype,
             needs_closure: bool, transposed: bool = False, located: bool = False) -> str | None:
    """What one step over loose params of these shapes (each transposed, a non-contiguous view, where
    asked) raised, with the line that raised it where `located`, or None."""
    params = _loose_params(shapes, dtype, transposed)
    try:
        step_on_grads(construct(cls, form, params, kwargs, "cpu"), params, needs_closure, _PROBE_BACKWARD.get())
    except Exception as exc:  # noqa: BLE001  # the optimizer's verdict on those shapes
        return _located(exc) if located else one_line(exc)
    return None


def _loose_params(shapes: Sequence[tuple[int, ...]], dtype: torch.dtype, transposed: bool = False) -> list[torch.nn.Parameter]:
    """Seeded params of these shapes (transposed: of the reverse shapes, transposed), each holding a seeded grad."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape[::-1], dtype=dtype).t() if transposed else torch.randn(shape, dtype=dtype))
              for shape in shapes]
    for param in params:
        param.grad = torch.randn_like(param)
    return params


def _case_name(text: str, taken: set[str]) -> str:
    """A case name the schema accepts (lowercase letters, digits, underscores), made from a kwarg's
    name (OPTAMI's `CG_subsolver`), and not one of `taken`, which it joins."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "case"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def _laws(cls: type, lr: float | None, factory: Any, stored: set[str], empty: bool = True, views: bool = True,
          tensor_lr: bool = True, gradient_free: bool = False, zero_lr_refusal: str | None = None) -> list[str]:
    """The conformance laws the constructor makes checkable (`lr` None: the cases give none) over params
    shaped as `factory`'s model's; the two init cannot judge, commented out; untouched not for a step
    that moves params by its closure's loss, not their grads."""
    lines = ["laws:  # conformance laws, each its own item (docs/laws.md); drop one it does not claim"]
    if factory is two_linear_no_bias:
        lines.append("  min_ndim: 2  # its step refuses 1-D params")
    if factory is two_diagonal:
        lines.append("  max_ndim: 1  # its step refuses matrices")
    if not empty:
        lines.append("  empty: false  # its step refuses a param with a 0 side")
    if not views:
        lines.append("  views: false  # its step refuses a non-contiguous param on purpose: descent steps contiguous ones")
    variants = []
    if "foreach" in stored:
        variants.append("    foreach: [{foreach: false}, {foreach: true}]")
    if lr is not None and tensor_lr:
        variants.append(f"    tensor_lr: [{{lr: {lr!r}}}, {{lr: {{tensor: {lr!r}}}}}]")
    if variants:
        lines += ["  equivalent:  # kwargs that must not change the run", *variants]
    lines.append("  # untouched: left out: its step moves params whose grad is None (it searches by its closure's loss, "
                 "not by grads)" if gradient_free else "  untouched: true  # a param whose grad is None does not move and gets no state")
    # lr 0 refused (a constructor's check) says nothing of a group set to lr 0 later; lr 0 moving params does
    lr_moves_nothing_at_0 = zero_lr_refusal is None or not zero_lr_refusal.startswith("moved")
    if lr is not None and not _groups_hold_settings(cls, factory, lr):
        lines.append("  # param_groups: left out: its param groups are its params alone (torchopt's tuples), no group holds an lr")
    elif lr is not None and lr_moves_nothing_at_0:
        lines.append("  param_groups: true  # each group's own lr is used (schedulers rely on it)")
    elif lr is not None:  # the law holds a group whose lr is set to 0 still
        lines.append(f"  # param_groups: left out: at lr 0 a step {zero_lr_refusal}")
    lines += ["  descent: true  # closure steps on a convex problem lower the loss (raise it under maximize)",
              "  # zero_grads: true  # uncomment if zero grads from fresh state move nothing (no decay)",
              "  # complex: true  # uncomment if it supports complex params (steps like view_as_real)"]
    return lines


def _groups_hold_settings(cls: type, factory: Any, lr: float) -> bool:
    """Whether the optimizer keeps its param groups as torch.optim's dicts (True where it does not construct)."""
    try:
        return groups_hold_settings(construct(cls, "list", factory(), {"lr": lr}, "cpu"))
    except Exception:  # noqa: BLE001  # the form probes already said how it constructs
        return True


def _properties(cls: type, state_follows_param: bool, stored: set[str], shapes: dict[str, Any],
                zero_lr_refusal: str | None = None, has_lr: bool = True, float64_refusal: str | None = None) -> list[str]:
    """The metamorphic properties the constructor allows; elementwise commented out (init cannot know),
    dtypes only where the state follows the param's dtype, zero_lr only where a step at lr 0 runs;
    each drawing only the shapes it steps."""
    if _PROBE_BACKWARD.get() != "plain":
        return [f"# fuzz: none: its properties step on grads set by hand, which have no graph for a step that "
                f"differentiates its closure's (backward: {_PROBE_BACKWARD.get()})"]
    bounds = "".join(f", {k}: {str(v).lower()}" for k, v in shapes.items())
    every = f"{{examples: {{ci: 10, dev: 20}}{bounds}}}"
    lines = ["fuzz:  # Hypothesis properties of the eager step over the plain cases (docs/fuzzing.md)",
             f"  determinism: {every}  # two runs from one seed are bitwise equal"]
    if state_follows_param and float64_refusal is None:
        lines.append(f"  dtypes: {every}  # params and state keep their dtype (bfloat16, float64)")
    elif state_follows_param:
        lines.append(f"  # dtypes: left out: it draws float64 params, and its step refused them ({float64_refusal})")
    if "maximize" in stored:
        lines.append(f"  maximize: {every}  # maximize on grad g equals minimize on -g, state included")
    if has_lr and zero_lr_refusal is None:
        lines.append(f"  zero_lr: {every}  # lr=0 leaves params unchanged; drop if a decay or minimum step ignores lr")
    elif has_lr:
        lines.append(f"  # zero_lr: left out: at lr 0 a step {zero_lr_refusal}")
    lines.append(f"  # elementwise: {every}  # uncomment if an element's update depends on that element alone "
                 "(Adam, SGD, Lion; not Shampoo, Muon, Adafactor)")
    return lines


def write_starter_spec(optimizer: str, output: Path | None) -> int:
    from .cases import project_registry
    from .spec import SpecError

    try:
        filename, text = starter_spec(optimizer)
    except (ImportError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a probe that met what it did not foresee: said in a line, never a traceback
        print(f"error: init could not probe {optimizer}: {one_line(exc)} (please report it to pytest-optimtest "
              "with the optimizer's package)", file=sys.stderr)
        return 1
    if output is not None and str(output) == "-":
        sys.stdout.write(text)
        return 0
    path = output or Path(filename)
    if path.exists():
        print(f"error: {path} exists; pass -o to write elsewhere", file=sys.stderr)
        return 1
    text = text.replace(f"--optim-spec {filename} ", f"--optim-spec {path} ")  # the "Run it" line names the file written
    path.write_text(text)
    try:
        spec, locator = project_registry(path).load_spec(path)
        missing = missing_requirements(spec)
        if missing:  # what init could not import, the user installs: until then every item skips saying so
            print(f"wrote {path}: it {missing}, so its items skip until it is installed")
            return 0
        cases = project_registry(path).expand(spec, locator)
    except SpecError as exc:  # a constructor that rejects a flipped flag: say which, keep the file to edit
        print(f"wrote {path}, but it does not validate yet: {exc}", file=sys.stderr)
        return 1
    # a CUDA-only spec's: none here; nor a case whose skip says its runs cannot be done (a step past PROBE_SECONDS)
    runnable = next((case for case in cases if unavailable_reason(case.device) is None and hasattr(case, "checks")
                     and set(case.checks) - set(case.skip)), None)
    seen = _laws_on_by_default_failing(project_registry(path), runnable) if runnable is not None else []
    refuted = _claims_refuted(project_registry(path), runnable) if runnable is not None else {}
    for law, saw in refuted.items():  # a claim init proposed and saw broken is the user's to make, not init's
        commented = f"  # {law}: true  # uncomment if it claims this: init saw it broken on its first case: {saw}"
        text = re.sub(rf"^  {law}: true  #.*$", commented.replace("\\", "\\\\"), text, flags=re.MULTILINE)
    if seen or refuted:
        path.write_text(text + "\n".join(seen) + ("\n" if seen else ""))
    failed = sum(line.startswith("  #   ") for line in seen)
    print(f"wrote {path}: {len(cases)} cases" + (f"; {failed} law(s) on by default failed on its first case "
                                                 "(commented at the end)" if seen else ""))
    return 0


# Laws init proposes on by name, not on by default, that it runs before proposing: descent (an
# ascent optimizer, GradientAscent, raises the loss by design; init cannot know it claims otherwise).
PROBED_CLAIMS = ("descent",)


def _claims_refuted(registry: Any, case: Any) -> dict[str, str]:
    """{law: the first line of its failure} for the PROBED_CLAIMS that fail on `case`."""
    return _failing_laws(registry, case, PROBED_CLAIMS)


def _failing_laws(registry: Any, case: Any, laws: Sequence[str]) -> dict[str, str]:
    """{law: the first line of its failure} for those of `laws` that the spec runs and that fail on `case`;
    one not applicable, vacuous, blocked or raising is left to the spec's own runs to judge."""
    from .harness.run_cache import RunCache  # imports torch's harness: only init's last step needs it

    runs, failing = RunCache(), {}
    for law in laws:
        check = registry.get(f"law_{law}")
        if check is None or check.name not in case.checks or check.name in case.skip:
            continue
        try:
            check.run(case, runs)
        except AssertionError as exc:
            failing[law] = one_line(exc)[:200]
        except Exception:  # noqa: BLE001 - not applicable, vacuous, blocked, or raising: the run itself says so
            continue
    return failing


def _laws_on_by_default_failing(registry: Any, case: Any) -> list[str]:
    """Comment lines for the laws of round two that fail on `case`: each with its failure's first
    line, as a `laws.off` entry to uncomment where the optimizer means it (a red is to read, not to hide)."""
    failing = [f"  #   {law}: \"<why the optimizer means it>\"  # init saw: {seen}"
               for law, seen in _failing_laws(registry, case, ON_BY_DEFAULT).items()]
    if not failing:
        return []
    return ["  # init ran the laws that are on by default: these failed on its first case. Read each red (pytest -k law_);",
            "  # turn one off only where the optimizer breaks it by design, with the reason:", "  # off:", *failing]
