"""How the optimizer takes its params (a list, named params, the model, groups), and the spec written where
none of the plugin's forms constructs it."""

from __future__ import annotations

import inspect
import json
import linecache
import re
from typing import Any

import torch

from ..harness.blame import REMOVED, blame, one_line
from ..models import two_diagonal, two_linear, two_linear_no_bias
from ..spec.schema import ParamGroup
from ..spec.values import DEFAULT_BASE, KWARG_OBJECTS, takes_a_model, wrapped_optimizer_argument
from .lines import _head, _skip_lines
from .probe import (_bf16_two_linear, _construct, _constructs, _first_step_problem, _probed_class, _raising_line,
                    _stepped, _stepped_with)
from .step_protocol import (_backward_protocol, _loss_value_parameter, _missing_module, _needs_process_group, _step_arguments,
                            _step_arguments_reason, _unsteppable)


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
            _construct(cls, split, two_linear(), kwargs)
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
    problems, misfits, refusals = {}, [], {}
    factory: Any = two_linear
    for form in ("list", "named", "model"):
        try:
            _construct(cls, form, two_linear(), kwargs)
            break
        except Exception as exc:  # the constructor's verdict on this form; the next is tried
            problems[form], refusals[form] = one_line(exc), exc
            misfits.append(_call_misfit(exc))
    else:
        if None not in misfits:  # its own call raised, whatever the form: no form or model would do
            return "list", None, [f"# its constructor raises in a call of its own, whatever params it is given ({misfits[0]})"]
        unset = _unset_arguments(cls, refusals["list"])
        if unset is not None:  # a plain list fails on an argument left at None: give that first
            return "list", None, [f"# {unset}"]
        half = next((f for f in ("list", "named", "model") if _constructs(cls, f, _bf16_two_linear, kwargs)), "")
        if half:  # a bf16-only optimizer that says so in its constructor (mpadam's MPAdam)
            lines = [*([] if half == "list" else [f"params: {half}"]),
                     f"dtypes: [bfloat16]  # its constructor refuses float32 params and takes bf16 ones: {problems[half]}"]
            step_problem = _stepped(cls, half, kwargs, two_linear, steps=1, dtype=torch.bfloat16)[1]
            return half, two_linear, lines + ([f"# one step over bf16 params raises ({step_problem}): "
                                               f"{_what_to_fill_in(step_problem, cls)}"] if step_problem else [])
        form = next((f for f in ("list", "named", "model") if _constructs(cls, f, two_linear_no_bias, kwargs)), "")
        if not form:
            flagged = [ParamGroup(min_ndim=2, use_muon=True), ParamGroup(use_muon=False)]
            try:  # Muon's hybrids take only groups flagged `use_muon` (Keller Jordan's MuonWithAuxAdam and its copies)
                _construct(cls, flagged, two_linear(), kwargs)
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
            step_problem = _first_step_problem(cls, flagged, kwargs, two_linear)
            skip = _unsteppable(cls, flagged, kwargs, step_problem) if step_problem else None
            return flagged, two_linear, [f"params:  # matrices in a group with use_muon: true, the rest with use_muon: false "
                                         f"(it refuses a plain list: {problems['list']})",
                                         "  - {min_ndim: 2, use_muon: true}", "  - {use_muon: false}",
                                         *(_skip_lines(*skip) if skip else [])]
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
    set_up = _set_up_by(cls, step_problem) if step_problem else None
    if set_up is not None:  # a call its framework makes first, which no run of the plugin's makes
        lines += _skip_lines(f"its step raised: {step_problem}",
                             f"{_set_up_advice(*set_up)}, and remove this skip (every run raises until then)")
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
        _construct(cls, "list", two_linear(), kwargs)
        refusal, misfit, unset = "", None, None
    except Exception as exc:  # noqa: BLE001  # what it said of a plain list, which names what it wants instead
        refusal, misfit, unset = one_line(exc), _call_misfit(exc), _unset_arguments(cls, exc)
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
    if misfit is not None:  # no params form is at fault: the constructor's own call raised
        reason = (f"its constructor raises in a call of its own ({misfit}): the function it calls does not take those "
                  "arguments (a dependency whose installed version changed them?): the optimizer's doing, whatever "
                  "params it is given; run init again where it constructs")
    if unset is not None:  # no params form is at fault: it needs an argument whose default is None
        reason = f"{unset}, and remove this skip"
    players = _required_params_arguments(cls)
    loss = _loss_value_parameter(cls)
    if len(players) == 2 and loss is not None:  # CGDs' ACGD(max_params, min_params).step(loss): a min-max game
        reason = (f"its constructor takes two sets of params ({', '.join(players)}) and its step the loss itself "
                  f"(step({loss})): a two-player game's protocol, not torch.optim's: not supported")
    return "\n".join([*head, *(["params: model"] if form == "model" else []), *form_lines, *default_case,
                      "skip:", f"  - {{reason: {json.dumps(reason)}}}", ""])


def _refused_wrapper_spec(optimizer: str, cls: type, kwargs: dict, refusal: str) -> str:
    """A spec that loads and skips every test, for a wrapper that refuses on purpose to wrap the plugin's base
    optimizer with its other defaults (fairscale's AdaScale: one worker without grad accumulation): its words, its
    line, and what to give."""
    argument = wrapped_optimizer_argument(cls)
    return "\n".join([
        *_head(optimizer, cls, kwargs, [], {str(argument): DEFAULT_BASE.spec_text()}),
        f"params: wrapped  # it wraps an optimizer instance, `{argument}`, built over the params",
        *_skip_lines(f"its constructor refuses, on purpose, to wrap {DEFAULT_BASE.path} with its other defaults: {refusal}",
                     f"{cls.__name__} refuses, on purpose, to construct with its defaults ({refusal.partition(', at ')[0]}): "
                     "give under kwargs the settings it asks for, and remove this skip"),
        "cases:", "  - name: default", "devices: [cpu, cuda]", ""])


# Python's words for a call whose arguments do not fit the function called
_CALL_MISFIT = re.compile(r"unexpected keyword argument|takes \d+ positional arguments? but|missing \d+ required|"
                          r"takes no arguments")


def _call_misfit(exc: BaseException) -> str | None:
    """The constructor's own call of a function with arguments it does not take, with the line that made it
    (ColossalAI 0.5's GaLoreAdamW8bit passes `percentile_clipping` to bitsandbytes 0.50's Optimizer2State,
    which dropped it); None for anything else, the constructor's own arguments too (Python raises those at
    the plugin's call, in no frame of the user's)."""
    if not isinstance(exc, TypeError) or not _CALL_MISFIT.search(str(exc)):
        return None
    where = blame(exc).where
    return f"{one_line(exc)}, at {where}" if where else None


def _unset_arguments(cls: type, exc: BaseException) -> str | None:
    """What to give a constructor that uses, where it raised, arguments of its own left at their default None
    (Megatron's HybridDeviceOptimizer calls `cpu_optimizer_cls`, default None: "'NoneType' object is not
    callable"), or None where the error is no use of None or its line names no such argument."""
    if not isinstance(exc, (TypeError, AttributeError)) or "'NoneType' object" not in str(exc):
        return None
    found = blame(exc)
    if not found.frames:  # raised in torch's or the plugin's code, not the optimizer's
        return None
    frame = found.frames[-1]
    line = linecache.getline(frame.filename, frame.lineno or 0)
    used = set(re.findall(r"(?<![\w.])(?:self\.)?(\w+)", line))  # names, bare or of self, not of another object
    defaulted = [name for name, p in inspect.signature(cls).parameters.items() if p.default is None and name in used]
    if not defaulted:
        return None
    names = ", ".join(defaulted)
    return (f"its constructor uses {names}, left at {'its' if len(defaulted) == 1 else 'their'} default None "
            f"({one_line(exc)}, at {found.where}): give {names} under kwargs ({KWARG_OBJECTS}; docs/specs.md)")


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
    if _needs_process_group(refusal):  # fairscale's OSS asks torch.distributed for its rank as it constructs
        return (f"an initialized torch.distributed process group as it constructs ({refusal}): a distributed optimizer "
                "(it shards or shares its work across ranks), which the plugin builds in one process, without one: "
                "not supported")
    parameters = list(inspect.signature(cls).parameters.values())
    if parameters and all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in parameters):  # hivemind's Optimizer(*, ...)
        required = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
        return ("keyword arguments alone: give its params by name, in `params` groups with `argument` (docs/specs.md)"
                + (f", and under kwargs what it requires that init has no guess for ({', '.join(required)})" if required else ""))
    first = parameters[0] if parameters else None
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


def _what_to_fill_in(step_problem: str, cls: Any = None) -> str:
    """What a spec could give a step that raised `step_problem` over the default model and params."""
    set_up = _set_up_by(cls, step_problem) if cls is not None else None
    if set_up is not None:  # a framework's protocol: a method it calls between construction and the first step
        return _set_up_advice(*set_up)
    if step_problem.startswith("KeyError"):  # a group key the step reads (Muon hybrids' use_muon), or a dict of its own
        key = step_problem.partition(", at ")[0].removeprefix("KeyError: ")
        return (f"where it reads {key} from its param groups, fill in `params` groups that set it (Muon hybrids read "
                "use_muon so: [{min_ndim: 2, use_muon: true}, {use_muon: false}]); where not, the error is the optimizer's own")
    message = step_problem.partition(", at ")[0]  # not the raising function's name (get_world_size is no shape)
    if REMOVED.search(message):  # deepchem's KFACOptimizer calls torch.symeig ("... of the matrix ..."): no shape at fault
        return (f"it calls what torch {torch.__version__.split('+')[0]} removed or deprecated: the optimizer's own error, "
                "which every case's runs show once, with its line; no kwargs or model would do")
    if any(word in message for word in ("shape", "size", "dimension", "1D", "2D", "ndim", "matrix", "matrices")):
        return "fill in a `model` whose params it steps, or `params` groups that select them"
    return ("the optimizer's own error, which every case's runs show once, with its line; fill in the kwargs or `params` "
            "it needs, if it needs more than the defaults")


def _set_up_advice(method: str, attribute: str) -> str:
    return (f"its step reads self.{attribute}, which its method {method}() sets: it expects {method}() called before it "
            f"steps (its framework's protocol); give `setup:` a function that calls it (docs/specs.md)")


def _set_up_by(cls: Any, step_problem: str) -> tuple[str, str] | None:
    """(method, attribute): a method of the optimizer's, neither its constructor nor its step, that sets or fills an
    attribute of `self` the step's raising line reads (ColossalAI's DistributedLamb reads `self.is_dist[p]`, which
    only setup_distributed() makes), or None. Only an error about what is missing (an attribute, a key) says so:
    deepchem's KFACOptimizer raised that torch.symeig is gone on a line that reads what a forward hook sets."""
    if not step_problem.startswith(("AttributeError", "KeyError")):
        return None
    read = set(re.findall(r"\bself\.(\w+)", _raising_line(step_problem)))
    named = re.match(r"AttributeError: .* has no attribute '(\w+)'", step_problem)
    if named is not None:  # the attribute it lacks, not another the line reads
        read &= {named.group(1)}
    for klass in inspect.getmro(_probed_class(cls)):
        if klass.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        for name, function in vars(klass).items():
            if name in ("__init__", "step") or not inspect.isfunction(function):
                continue
            try:
                source = inspect.getsource(function)
            except (OSError, TypeError):  # no source to read (a C extension's, a lambda made at runtime)
                continue
            written = next((a for a in sorted(read) if re.search(rf"\bself\.{a}\s*(\[[^\]]*\]\s*)?=(?!=)", source)), None)
            if written is not None:
                return name, written
    return None
