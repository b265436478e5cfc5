"""Spec -> [Case]: cases x grid x schedulers x closure x dtypes x devices, with stable ids."""

from __future__ import annotations

import fnmatch
import inspect
import itertools
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from .case import Case, FuzzCase, HookOrderCase, Variant
from .context import CaseContext, SpecContext
from .errors import did_you_mean
from .loader import Locator
from .ordering import missing_prerequisites, order
from .schema import DEFAULT_TOLERANCES, CaseSpec, HookOrderFuzzSpec, HookOrderSpec, Spec, Tolerance
from .values import (DEFAULT_BASE, KWARG_OBJECTS, BaseOptimizer, base_holding, build_kwargs, optimizer_class_problem, resolve,
                     takes_a_model, takes_keyword, value_problem, wrapped_optimizer_argument)

SCHEDULER_MODULE = "torch.optim.lr_scheduler"


def expand(spec: Spec | HookOrderSpec | HookOrderFuzzSpec, locator: Locator, checks: Mapping[str, Any],
           torch_version: str | None = None) -> list[Case | HookOrderCase | FuzzCase]:
    """Every case of a spec, validated against the real optimizer and schedulers.

    `checks` maps names to objects with `applies_to(Variant)`, `prerequisites` and `apply_after`
    (a session's registry; `pytest_optimtest.checks.CHECKS` for the built-in ones). Default torch
    version: the running one.
    """
    check_names = list(checks)
    if torch_version is None:
        from ..harness.torch_api import torch_version as running

        torch_version = running()
    if isinstance(spec, HookOrderSpec):
        return [_hook_order_case(spec, locator, torch_version)]
    if isinstance(spec, HookOrderFuzzSpec):
        return [FuzzCase(spec.name, locator.path, locator.line(("name",)), "cpu", {"fuzz_hook_order": spec},
                         checks=("fuzz_hook_order",))]
    optimizer_cls = _resolve_optimizer(spec.optimizer, locator)
    _check_names(spec, locator, check_names)
    spec = spec.model_copy(update={  # the running torch's rules only
        "skip": [r for r in spec.skip if r.torch is None or torch_version in r.torch],
        "xfail": [r for r in spec.xfail if r.torch is None or torch_version in r.torch]})
    schedulers = {name: _resolve_scheduler(name, locator) for name in spec.schedulers}
    for name, kwargs in spec.schedulers.items():
        _check_values(kwargs, ("schedulers", name), locator)
        _check_scheduler_takes(optimizer_cls, name, schedulers[name], locator)
    _check_values(spec.kwargs, ("kwargs",), locator)
    _check_values({"model": {"import": spec.model}}, (), locator)
    if spec.setup:
        _check_values({"setup": {"import": spec.setup}}, (), locator)
    _check_params(spec, locator)
    context = SpecContext(locator, spec, optimizer_cls, tuple(schedulers), torch_version)
    sections = _sections(spec, checks, context)
    prefix = spec.name or optimizer_cls.__name__.lower()
    distributed = _distributed_cases(spec, locator)
    _bound_case_count(spec, locator)

    cases: list[Case] = []
    seen: dict[str, int] = {}
    primary = _primary_cases(spec)
    per_variant = _PerVariant(spec, locator, checks, sections, context)
    for index, entry in enumerate(spec.cases):
        where = ("cases", index)
        line = locator.line(where)
        _check_values(entry.kwargs, (*where, "kwargs"), locator)
        for name in entry.schedulers if isinstance(entry.schedulers, list) else []:
            if name not in schedulers:
                raise locator.error((*where, "schedulers"), f"unknown scheduler {name!r}{did_you_mean(name, schedulers)}; declare it under 'schedulers'")
        for device in entry.devices or spec.devices:
            if device not in spec.devices:
                continue
            for combo, grid_values in enumerate(_grid(spec, device)):
                kwargs = {**spec.kwargs, **entry.kwargs, **grid_values}
                _check_constructor(optimizer_cls, kwargs, spec, where, locator, constructs_here=device == "cpu",
                                   dtype=(entry.dtypes or spec.dtypes)[0])
                closures = entry.closure or spec.closure
                for scheduler, closure, dtype in itertools.product(_scheduler_names(entry, schedulers), closures,
                                                                   entry.dtypes or spec.dtypes):
                    # the once-per-optimizer checks take the plain variant, or the closure one where every case needs one
                    primary_variant = scheduler is None and closure == (False not in closures)
                    variant = Variant(device, closure, scheduler, dtype, entry.name, distributed=entry.name in distributed,
                                      primary=combo == 0 and primary[(device, dtype)] == index and primary_variant)
                    case = _make_case(spec, entry, locator, line, prefix, grid_values, kwargs,
                                      variant, per_variant)
                    if case.id in seen:
                        raise locator.error(where, f"duplicate test id {case.id!r}: cases[{seen[case.id]}] makes it too; give the cases distinct names")
                    seen[case.id] = index
                    cases.append(case)
    return [*cases, *_fuzz_cases(spec, locator, prefix, cases, optimizer_cls)]


FUZZ_CHECKS = {"parity": "fuzz_parity", "in_backward": "fuzz_in_backward", "elementwise": "fuzz_elementwise",
               "maximize": "fuzz_maximize", "dtypes": "fuzz_dtypes", "determinism": "fuzz_determinism",
               "zero_lr": "fuzz_zero_lr"}
CONSTRUCTOR_NEEDS = {"maximize": "maximize", "zero_lr": "lr"}  # fuzz property -> the argument it sets


def _fuzz_cases(spec: Spec, locator: Locator, prefix: str, cases: list[Case], optimizer_cls: type) -> list[FuzzCase]:
    """One FuzzCase per device for the spec's `fuzz` section, drawing its plain cases."""
    if spec.fuzz is None:
        return []
    for prop, argument in CONSTRUCTOR_NEEDS.items():
        if (getattr(spec.fuzz, prop) is not None and not takes_keyword(optimizer_cls, argument)
                and base_holding(optimizer_cls, spec.kwargs, argument) is None):
            raise locator.error(("fuzz", prop), f"the {prop} property sets {argument!r}, which "
                                                f"{spec.optimizer} does not take; remove it")
    settings = {FUZZ_CHECKS[name]: value for name, value in spec.fuzz if value is not None}
    checks = tuple(c for c in settings if spec.checks is None or c in spec.checks)
    out = []
    for device in spec.devices:
        case_id = f"{prefix}-fuzz-{device}"
        out.append(FuzzCase(
            case_id, locator.path, locator.line(("fuzz",)), device, settings,
            # float32 cases only: fuzzed parity at float64 falsified Adam on a 0-d param (compiled exp_avg 0;
            # torch 2.13 CPU, not isolated), and a property's one item cannot xfail one dtype's draws
            # a step that must have a closure is drawn too: the properties' steps on preset grads give it one
            cases=tuple(c for c in cases if c.device == device and (not c.closure or c.closure_forms == (True,))
                        and c.scheduler is None and c.dtype == "float32"),
            checks=checks, skip=_rule_reasons(spec.skip, case_id, device, checks),
            xfail=_rule_reasons(spec.xfail, case_id, device, checks),
            xfail_match=_rule_matches(spec.xfail, case_id, device, checks), optimizer=spec.optimizer,
        ))
    return out


class _PerVariant:
    """What a case takes from its variant alone (its checks, and so which sections it reads),
    worked out once per variant: a spec of 10,000 cases has a few dozen variants, and
    collection time is the user's."""

    def __init__(self, spec: Spec, locator: Locator, checks: Mapping[str, Any], sections: dict[str, Any],
                 context: SpecContext) -> None:
        self.spec, self.locator, self.checks, self.sections, self.context = spec, locator, checks, sections, context
        self._applied: dict[Variant, tuple[str, ...]] = {}
        self._expecting: dict[tuple[str, ...], tuple[Any, ...]] = {}

    def applied(self, variant: Variant, case_id: str) -> tuple[str, ...]:
        if variant not in self._applied:
            self._applied[variant] = _ordered_checks(self.spec, self.locator, self.checks, variant, case_id, self.sections)
        return self._applied[variant]

    def expected(self, applied: tuple[str, ...], case_id: str, device: str) -> dict[str, Any]:
        """Each applied check's `expect` of this case (kernel tables resolve by case id)."""
        if applied not in self._expecting:
            self._expecting[applied] = tuple(self.checks[n] for n in applied if self.checks[n].expect is not None)
        at = CaseContext(self.context, case_id, device)
        return {c.name: c.expect(self.sections.get(c.key), at) for c in self._expecting[applied]}


def _declared_closure(spec: Spec, entry: CaseSpec) -> tuple[bool, ...]:
    """The closure variants the spec writes for the case (its own, else the spec's); () where it writes none."""
    if entry.closure is not None:
        return tuple(entry.closure)
    return tuple(spec.closure) if "closure" in spec.model_fields_set else ()


def _make_case(spec: Spec, entry: CaseSpec, locator: Locator, line: int | None, prefix: str,
               grid_values: dict[str, Any], kwargs: dict[str, Any], variant: Variant,
               per_variant: _PerVariant) -> Case:
    device, closure, scheduler = variant.device, variant.closure, variant.scheduler
    parts = [prefix, entry.name, *(_id_part(k, v) for k, v in grid_values.items())]
    if scheduler:
        parts.append(scheduler.rpartition(":")[2].rpartition(".")[2].lower())
    if closure:
        parts.append("closure")
    if variant.dtype != "float32":  # float32 ids stay what they were before the dtype axis
        parts.append(variant.dtype)
    parts.append(device)
    case_id = "-".join(p for p in parts if p)
    applied = per_variant.applied(variant, case_id)
    return Case(
        id=case_id,
        spec_path=locator.path,
        line=line,
        optimizer=spec.optimizer,
        kwargs=kwargs,
        device=device,
        dtype=variant.dtype,
        steps=entry.steps or spec.steps,
        closure=closure,
        closure_forms=_declared_closure(spec, entry),
        scheduler=scheduler,
        scheduler_kwargs=dict(spec.schedulers.get(scheduler, {})) if scheduler else {},
        model=spec.model,
        params=spec.params,
        data=spec.data,
        seed=spec.seed,
        tolerance=tolerance_for(variant.dtype, entry.tolerance or {}, spec.tolerance),
        min_movement=spec.min_movement,
        strict=spec.strict,
        fallback_random=spec.fallback_random,
        recompile_limit=spec.recompile_limit,
        grad_mode=spec.grad_mode,
        backward=spec.backward,
        timeout_s=spec.timeout_s,
        setup=spec.setup,
        distributed=spec.distributed,
        checks=applied,
        skip=_rule_reasons(spec.skip, case_id, device, applied, variant.dtype),
        xfail=_rule_reasons(spec.xfail, case_id, device, applied, variant.dtype),
        xfail_match=_rule_matches(spec.xfail, case_id, device, applied, variant.dtype),
        sections=per_variant.sections,
        expected=per_variant.expected(applied, case_id, device),
    )


def _sections(spec: Spec, checks: Mapping[str, Any], context: SpecContext) -> dict[str, Any]:
    """Every check-owned section: the file's, else its model's defaults (None when the model has
    required fields: the check sees None and says what it needs); each validated by its checks."""
    out: dict[str, Any] = {}
    for check in checks.values():
        if check.section is None:
            continue
        if check.key not in out:
            value = getattr(spec, check.key, None)
            if value is None:
                try:
                    value = check.section()
                except ValidationError:
                    value = None
            out[check.key] = value
        if check.validate is not None and out[check.key] is not None:
            check.validate(out[check.key], context)
    return out


def _ordered_checks(spec: Spec, locator: Locator, checks: Mapping[str, Any], variant: Variant, case_id: str,
                    sections: Mapping[str, Any]) -> tuple[str, ...]:
    """The checks that apply to this variant (and that the spec declares, for checks of a claim),
    each after its prerequisites and apply_after."""
    def declared(name: str) -> bool:
        check = checks[name]
        return check.declared is None or bool(check.declared(sections.get(check.key)))

    index = next((i for i, c in enumerate(spec.cases) if c.name == variant.case), None)
    own = spec.cases[index].checks if index is not None else None
    where, chosen = (("cases", index, "checks"), own) if own is not None else (("checks",), spec.checks)
    for at, name in enumerate(chosen or ()):
        if not declared(name):
            raise locator.error((*where, at), f"{name!r} checks a claim the spec does not make: declare it under "
                                              f"{checks[name].key!r}")

    def named(name: str) -> bool:
        check = checks[name]
        return check.case_names is None or variant.case in check.case_names(sections.get(check.key),
                                                                            [c.name for c in spec.cases])

    selected = [c for c in (chosen or checks) if checks[c].applies_to(variant) and declared(c) and named(c)]
    applicable = [c for c in checks if checks[c].applies_to(variant) and declared(c) and named(c)]
    for name, needed in missing_prerequisites(selected, applicable, checks):
        raise locator.error(where, f"check {name!r} needs {needed!r} (its prerequisite) on {case_id}; add {needed!r} to checks")
    return order(selected, checks)


def _primary_cases(spec: Spec) -> dict[tuple[str, str], int]:
    """(device, dtype) -> the index of the first case that runs there: its first grid combination
    takes the once-per-optimizer checks at that device and dtype."""
    first: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(spec.cases):
        for device in entry.devices or spec.devices:
            for dtype in entry.dtypes or spec.dtypes:
                first.setdefault((device, dtype), index)
    return first


def _distributed_cases(spec: Spec, locator: Locator) -> set[str]:
    names = [c.name for c in spec.cases]
    chosen = spec.distributed.cases if spec.distributed.cases is not None else names[:1]
    for i, name in enumerate(chosen):
        if name not in names:
            raise locator.error(("distributed", "cases", i), f"no case named {name!r}{did_you_mean(name, names)}")
    return set(chosen)


MAX_CASES = 10_000


def _bound_case_count(spec: Spec, locator: Locator) -> None:
    """cases x grid x schedulers x closure x devices must stay under MAX_CASES; counted, not built."""
    total = 0
    for index, entry in enumerate(spec.cases):
        for device in entry.devices or spec.devices:
            if device in spec.devices:
                combos = 1
                for axis in spec.grid.values():
                    combos *= len(axis.values) if axis.devices is None or device in axis.devices else 1
                total += (combos * len(_scheduler_names(entry, spec.schedulers)) * len(entry.closure or spec.closure)
                          * len(entry.dtypes or spec.dtypes))
        if total > MAX_CASES:
            raise locator.error(("cases", index), f"the spec expands to more than {MAX_CASES:,} cases by this one "
                                                  "(cases x grid x schedulers x closure x dtypes x devices); split it into several specs")


def tolerance_for(dtype: Any, case: Mapping[Any, Tolerance], spec: Mapping[Any, Tolerance]) -> Tolerance:
    """The case's tolerance at a param dtype: the case's, else the spec's, else the dtype's default."""
    return case.get(dtype) or spec.get(dtype) or DEFAULT_TOLERANCES[dtype]


def _id_part(key: str, value: Any) -> str:
    if value is True:
        return key
    if value is False or value is None:
        return ""
    return f"{key}_{value}".replace(" ", "")


def _grid(spec: Spec, device: str) -> list[dict[str, Any]]:
    axes = {k: axis.values for k, axis in spec.grid.items() if axis.devices is None or device in axis.devices}
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def _scheduler_names(entry: CaseSpec, schedulers: dict[str, Any]) -> list[str | None]:
    if entry.schedulers is True:
        return list(schedulers) or [None]
    if isinstance(entry.schedulers, list):
        return list(entry.schedulers)
    return [None]


def _rule_reasons(rules: list, case_id: str, device: str, checks: tuple[str, ...],
                  dtype: str = "float32") -> dict[str, str]:
    return {check: rule.reason for check, rule in _rules_by_check(rules, case_id, device, checks, dtype).items()}


def _rule_matches(rules: list, case_id: str, device: str, checks: tuple[str, ...],
                  dtype: str = "float32") -> dict[str, str]:
    """check -> the failure its xfail rule expects, for the rules that say (`match`)."""
    return {check: rule.match for check, rule in _rules_by_check(rules, case_id, device, checks, dtype).items()
            if rule.match is not None}


def _rules_by_check(rules: list, case_id: str, device: str, checks: tuple[str, ...], dtype: str) -> dict[str, Any]:
    """check -> the first rule that holds for it on this case (its reason is the one shown)."""
    found: dict[str, Any] = {}
    for rule in rules:
        if (fnmatch.fnmatchcase(case_id, rule.cases) and (rule.devices is None or device in rule.devices)
                and (rule.dtypes is None or dtype in rule.dtypes)):
            for check in rule.checks or checks:
                found.setdefault(check, rule)
    return found


def _resolve_optimizer(path: str, locator: Locator) -> type:
    try:
        cls = resolve(path)
    except ImportError as exc:
        raise locator.error(("optimizer",), str(exc)) from None
    problem = optimizer_class_problem(path, cls)
    if problem is not None:
        raise locator.error(("optimizer",), problem)
    return cls


def _check_scheduler_takes(optimizer_cls: Any, name: str, scheduler: type, locator: Locator) -> None:
    """torch's LR schedulers refuse an optimizer that is no torch.optim.Optimizer (one that copies its
    base class, as adamz does): said at the spec's key, not as a red in every scheduler case."""
    import torch  # as _resolve_scheduler imports the schedulers: only for a spec that declares some

    if scheduler.__module__.startswith(SCHEDULER_MODULE) and inspect.isclass(optimizer_cls) \
            and not issubclass(optimizer_cls, torch.optim.Optimizer):
        raise locator.error(("schedulers", name), f"torch's {name} takes a torch.optim.Optimizer and "
                            f"{optimizer_cls.__name__} is not one (its bases: "
                            f"{', '.join(f'{b.__module__}.{b.__qualname__}' for b in optimizer_cls.__mro__[1:-1]) or 'none'}); "
                            "drop `schedulers` from this spec")


def _resolve_scheduler(name: str, locator: Locator) -> type:
    import torch.optim.lr_scheduler as lr_scheduler

    if ":" in name or "." in name:
        try:
            return resolve(name)
        except ImportError as exc:
            raise locator.error(("schedulers", name), str(exc)) from None
    cls = getattr(lr_scheduler, name, None)
    if not inspect.isclass(cls):
        known = [n for n, v in vars(lr_scheduler).items() if inspect.isclass(v) and n.endswith(("LR", "Plateau", "Restarts"))]
        raise locator.error(("schedulers", name), f"unknown LR scheduler {name!r}{did_you_mean(name, known)}")
    return cls


def _check_names(spec: Spec, locator: Locator, check_names: list[str]) -> None:
    lists = [(("checks",), spec.checks)] + [(("cases", i, "checks"), c.checks) for i, c in enumerate(spec.cases)]
    for where, names in lists:
        for i, name in enumerate(names or []):
            if name not in check_names:
                raise locator.error((*where, i), f"unknown check {name!r}{did_you_mean(name, check_names)}; known: "
                                                 f"{', '.join(check_names)}")
    for kind in ("skip", "xfail"):
        for i, rule in enumerate(getattr(spec, kind)):
            for j, name in enumerate(rule.checks or []):
                if name not in check_names:
                    raise locator.error((kind, i, "checks", j), f"unknown check {name!r}{did_you_mean(name, check_names)}")


def _check_values(kwargs: dict[str, Any], where: tuple, locator: Locator) -> None:
    for key, raw in kwargs.items():
        problem = value_problem(raw)
        if problem:
            raise locator.error((*where, key), problem)


_constructed: dict[tuple[type, str, str, str, str], str | None] = {}


def _check_constructor(cls: type, kwargs: dict[str, Any], spec: Spec, where: tuple, locator: Locator,
                       constructs_here: bool = True, dtype: str = "float32") -> None:
    """The optimizer's constructor must accept these kwargs (checked once per distinct set), over params
    of the case's first dtype (mpadam's MPAdam takes bf16 ones only). The constructor runs over CPU params
    only for a CPU case: a case of another device may need it (FlashAdam's defaults refuse to construct
    without CUDA); its run says what it refuses there."""
    for key in kwargs:
        if not takes_keyword(cls, key):
            names = [n for n in inspect.signature(cls).parameters if n not in ("self", "params")]
            at = (*where, "kwargs", key) if key in spec.cases[where[1]].kwargs else ("kwargs", key)
            if key in spec.grid:
                at = ("grid", key)
            raise locator.error(at, f"{cls.__name__} takes no argument {key!r}{did_you_mean(key, names)}")
    by_argument = {str(g.argument) for g in spec.params} if isinstance(spec.params, list) and spec.params[0].argument else set()
    for argument in sorted(by_argument - {"params"}):
        if not takes_keyword(cls, argument):
            raise locator.error(("params",), f"{cls.__name__} takes no argument {argument!r} for a param group")
    if _skips_everything(spec):  # init's spec for an optimizer it cannot build or step: nothing constructs it
        return
    positional = [n for n, p in inspect.signature(cls).parameters.items()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and n not in kwargs]
    if by_argument:
        missing = [n for n in positional if n not in by_argument]
        if missing:
            raise locator.error(("params",), f"{cls.__name__}'s constructor requires {', '.join(map(repr, missing))}, "
                                             "which no param group's `argument` names")
    elif len(positional) > 1:
        raise locator.error(("optimizer",), f"{cls.__name__}'s constructor requires {', '.join(map(repr, positional))}: "
                                            f"name the argument each param group goes to: `params: [{{min_ndim: 2, "
                                            f"argument: {positional[0]}}}, {{argument: {positional[1]}}}]` (the "
                                            "groups' selectors: names, ndim, min_ndim); or, where "
                                            f"{positional[-1]!r} takes no params of its own, give it under kwargs "
                                            f"({KWARG_OBJECTS})")
    if not constructs_here:
        return
    memo_key = (cls, repr(sorted(kwargs.items())), repr(spec.params), spec.model, dtype)
    if memo_key not in _constructed:
        from ..harness.isolation import rngs_kept  # torch loads only where a constructor runs: loading a spec stays light

        with rngs_kept(cls):  # a constructor that draws (spectral-norm vectors) draws nothing of the user's
            _constructed[memo_key] = _construct_problem(cls, kwargs, spec.params, spec.model, dtype)
    problem = _constructed[memo_key]
    if problem and problem.startswith(PARAMS_FORM):
        declared = isinstance(locator.root, Mapping) and "params" in locator.root
        raise locator.error(("params",) if declared else ("optimizer",), problem[len(PARAMS_FORM):])
    if problem:
        culprit = next((k for k in kwargs if k in problem and k in spec.cases[where[1]].kwargs), None)
        raise locator.error((*where, "kwargs", culprit) if culprit else where, f"{cls.__name__}({_show(kwargs)}) rejects these kwargs: {problem}")


def _skips_everything(spec: Spec) -> bool:
    """Whether a skip rule without selectors skips every test of the spec."""
    return any(r.cases == "*" and all(v is None for v in (r.devices, r.dtypes, r.checks, r.torch)) for r in spec.skip)


PARAMS_FORM = "params form: "  # a construction problem that another `params` form solves
LOOSE_PROBE_VALUES = ((1.0, 0.5), (0.25, 1.0))


def _construct_problem(cls: type, kwargs: dict[str, Any], form: Any, model_path: str, dtype: str = "float32") -> str | None:
    """Why `cls(params, **kwargs)` raises, or None. A list of params that the constructor refuses,
    where named params or the model itself are taken, is the spec's `params` form at fault."""
    import torch

    # torch and the param forms load only here, where a constructor runs: loading a spec stays light.
    from ..harness.param_forms import construct

    if form == "wrapped" and not any(isinstance(v, BaseOptimizer) for v in build_kwargs(kwargs, "cpu").values()):
        return (f"{PARAMS_FORM}`params: wrapped` gives {cls.__name__} no params of its own, and no kwarg is the base "
                f"optimizer to carry them: give the one it wraps as {DEFAULT_BASE.spec_text()}")

    def attempt(form: Any, given: dict[str, Any] = kwargs) -> str | None:
        # one 2x2 matrix for the forms that take loose params: what every optimizer steps, Muon's 2-D-only included;
        # positive and of full rank, for constructors that check norms (MuonHyperball refuses a zero one)
        loose = form in ("list", "named", "wrapped")
        model: Any = [("weight", torch.nn.Parameter(torch.tensor(LOOSE_PROBE_VALUES)))] if loose else _model_or_none(model_path)
        if model is None:  # the spec's model cannot be built here: the run will say why
            return None
        model = ([(name, torch.nn.Parameter(p.to(getattr(torch, dtype)))) for name, p in model] if loose else
                 model.to(getattr(torch, dtype)))
        try:
            construct(cls, form, model, build_kwargs(given, "cpu"), "cpu")
        except Exception as exc:  # any constructor error is the spec's fault, reported as such
            return f"{type(exc).__name__}: {exc}"
        return None

    problem = attempt(form)
    if not problem:
        return None
    words = {"list": "a plain list of params", "named": "named params", "model": "the model itself"}
    given = words.get(form, "these param groups") if isinstance(form, str) else "these param groups"
    for other in [f for f in words if f != form]:
        if attempt(other) is None:
            return (f"{PARAMS_FORM}{cls.__name__} refuses {given} ({problem}) and takes {words[other]}: "
                    f"{'remove `params`' if other == 'list' else f'set `params: {other}`'} in the spec")
    if not kwargs or attempt(form, {}) == problem:  # the same error without the kwargs: not theirs
        if takes_a_model(cls):  # its error over the model says what model it wants (LoRA-Pro's LoRA pairs)
            problem = attempt("model") if form != "model" else problem
            return (f"{PARAMS_FORM}{cls.__name__} takes a model and refuses the spec's `model: {model_path}` ({problem}), "
                    "and every other params form: give it a `model` factory whose modules it takes (called as "
                    "factory(device=...); docs/specs.md) with `params: model`")
        wrapped = wrapped_optimizer_argument(cls)
        fix = (f"if it wraps an optimizer instance (its first argument is `{wrapped}`), set `params: wrapped` and give "
               f"`{wrapped}: {DEFAULT_BASE.spec_text()}` under kwargs" if wrapped
               else "give it `params` groups it takes (selected by names, ndim, min_ndim; docs/specs.md)")
        return f"{PARAMS_FORM}{cls.__name__} refuses {given} and every other params form ({problem}), with these kwargs or none: {fix}"
    return problem


def _model_or_none(model_path: str) -> Any:
    from .param_groups import model_param_shapes

    if model_param_shapes(model_path) is None:
        return None
    return resolve(model_path)(device="cpu")


def _check_params(spec: Spec, locator: Locator) -> None:
    """Param groups' options are well-formed values, and on the spec's model every group selects
    a param and every param has a group (when the model can be built here)."""
    from .param_groups import assignment_problem, model_param_shapes

    if not isinstance(spec.params, list):
        return
    for index, group in enumerate(spec.params):
        _check_values(group.options, ("params", index), locator)
    shapes = model_param_shapes(spec.model)
    if shapes is None:
        return
    found = assignment_problem(spec.params, [(name, len(shape)) for name, shape in shapes])
    if found:
        at, why = found
        raise locator.error(("params", at) if at is not None else ("params",), f"on the model {spec.model}: {why}")


def _show(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())



def _hook_order_case(spec: HookOrderSpec, locator: Locator, torch_version: str) -> HookOrderCase:
    for key in ("model", "inputs"):
        try:
            resolve(getattr(spec, key))
        except ImportError as exc:
            raise locator.error((key,), str(exc)) from None
    _check_values(spec.model_kwargs, ("model_kwargs",), locator)
    expected: Any = spec.expected
    where = f"{locator.path}:{locator.line(('expected',))} expected"
    if isinstance(expected, dict):
        version: str | None = torch_version if torch_version in expected else "*" if "*" in expected else None
        where = f"{locator.path}:{locator.line(('expected', version)) if version else locator.line(('expected',))} expected['{version or torch_version}']"
        expected = expected[version] if version else None
    return HookOrderCase(
        id=spec.name, spec_path=locator.path, line=locator.line(("name",)), model=spec.model,
        model_kwargs=spec.model_kwargs, inputs=spec.inputs, iterations=spec.iterations, backward=spec.backward,
        drop_model_before_backward=spec.drop_model_before_backward, expected=expected, expected_where=where,
        after_backward=spec.after_backward, compare=spec.compare, xfail={"hook_order": spec.xfail} if spec.xfail else {},
        torch_version=torch_version, written=spec.expected,
    )
