"""What the constructor needs: required arguments filled by guesses that step, wrapped optimizers, an lr it
refuses, flags it keeps, a seed its own generator wants."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import torch

from ..harness.blame import one_line
from ..harness.builder import make_closure, takes_closure
from ..harness.law_runs import unstored_kwargs
from ..models import IN_FEATURES, two_linear
from ..spec.values import BaseOptimizer, DEFAULT_BASE, takes_keyword, wrapped_optimizer_argument
from .probe import (_construct, ProbeTimeout, _PROBE_SLOW, _constructs, _located, _probe_run, _raised_on_purpose,
                    _stepped, _time_bounded)


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
            optimizer = _construct(cls, "list", model, kwargs)
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


def _wrapper_refusal(cls: type, kwargs: dict) -> str | None:
    """Where the constructor's first argument is the optimizer it wraps and, given SGD over the params, it refuses
    on purpose (a `raise` of its own: fairscale's AdaScale "does not support a single worker without grad
    accumulation"), that refusal with its line; else None."""
    argument = wrapped_optimizer_argument(cls)
    if argument is None:
        return None
    wrapper: Any = functools.partial(cls, **{argument: DEFAULT_BASE})
    try:
        _construct(wrapper, "wrapped", two_linear(), kwargs)
    except Exception as exc:  # noqa: BLE001  # the wrapper's verdict: its own words, or something else
        problem = _located(exc)
        return problem if _raised_on_purpose(problem) else None
    return None


def _lr_refusal(cls: type, lr: float) -> str | None:
    """Why the constructor refuses an lr that it takes (HF's Adafactor: lr=None unless relative_step is
    off), where it constructs without one, in the first params form it takes (allennlp's wrapper of that
    Adafactor takes named params alone); or, taking it only through **kwargs, why its step does
    (torchmin's Minimizer passes them to minimize()), where it steps without one; else None."""
    form = next((f for f in ("list", "named", "model") if _constructs(cls, f, two_linear, {})), None)
    if form is None:  # refused without an lr in every form too: something else is missing, not the lr's fault
        return None
    try:
        _construct(cls, form, two_linear(), {"lr": lr})
    except Exception as exc:  # noqa: BLE001  # refused with lr, in a form it takes without: the lr
        return one_line(exc)
    if "lr" in inspect.signature(cls).parameters:
        return None  # an lr by name: what its step raises is the step's own
    stepped = _stepped(cls, form, {"lr": lr}, two_linear, steps=1)[1]
    if not stepped or "'lr'" not in stepped:
        return None
    return f"its step refuses it: {stepped}" if _stepped(cls, form, {}, two_linear, steps=1)[1] != stepped else None


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
        _construct(cls, form, factory(), {**base, **kwargs})
    except Exception as exc:  # whatever the constructor raises is its verdict on these kwargs
        return one_line(exc)
    problem = _stepped(cls, form, {**base, **kwargs}, factory, steps=1)[1]
    return None if problem is not None and problem == base_problem else problem


def _stored_flags(cls: type, form: Any, kwargs: dict, flags: tuple[str, ...],
                  factory: Any) -> tuple[set[str], list[str]]:
    """(flags the constructor takes and keeps, flags it takes and keeps nowhere): a law or property
    over a flag that is swallowed by **kwargs would compare two identical runs."""
    stored, dropped = set(), []
    for flag in flags:
        if not takes_keyword(cls, flag):
            continue
        try:
            optimizer = _construct(cls, form, factory(), {**kwargs, flag: True})
        except Exception:  # noqa: BLE001  # refused: nothing to propose over it
            continue
        if unstored_kwargs(optimizer, [flag]):
            dropped.append(flag)
        else:
            stored.add(flag)
    return stored, dropped


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
