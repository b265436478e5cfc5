"""How the step is called: closures (required, passed arguments, differentiated), grad mode, train mode,
context managers, arguments of its own."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import torch

from ..harness.builder import (backward_flag, closure_taken_as_value, make_closure, own_step_arguments, requires_closure,
                                step_parameters)
from ..models import IN_FEATURES, two_linear
from ..setups import train_mode
from .constructor import _numeric
from .lines import _too_slow
from .probe import (_construct, ProbeTimeout, _PROBE_BACKWARD, _PROBE_CLOSURE, _probed_class, _raised_on_purpose, _stepped,
                    _stepped_with, _time_bounded)


def _needs_process_group(step_problem: str) -> bool:
    """Whether a step's error asks for a process group: torch's "Default process group has not been initialized",
    DeepSpeed's "backend not set, please initialize it using init_process_group()"."""
    return re.search(r"process.group", step_problem.partition(", at ")[0], re.IGNORECASE) is not None


def _unsteppable(cls: type, form: Any, kwargs: dict, step_problem: str) -> tuple[str, str] | None:
    """(comment, skip reason) where the step needs what no plugin run gives it: sparse grads, a process
    group, a closure protocol of its own; None where filling in params or a model may do."""
    if step_problem.startswith(ProbeTimeout.__name__):
        return _too_slow(step_problem)
    if _steps_sparse_grads_only(cls, form, kwargs):
        return (f"its step refuses dense grads ({step_problem}) and steps sparse ones",
                "a sparse-gradient optimizer: the plugin's models give dense grads (sparse ones, as "
                "nn.Embedding(sparse=True) gives, are not supported yet)")
    if _needs_process_group(step_problem):
        return (f"its step needs torch.distributed initialized ({step_problem})",
                "its step needs an initialized torch.distributed process group, or its package's comms backend set up "
                "over one (it shares the update across ranks): the plugin steps it in one process, without one")
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
    taken = _instance_step_arguments(cls, form, kwargs)  # a step its constructor sets (ZenFlowCPUAdam's)
    if taken is not None:
        return f"its step requires arguments torch.optim's do not ({taken}): {step_problem}", _step_arguments_reason(taken)
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


def _instance_step_arguments(cls: type, form: Any, kwargs: dict) -> str | None:
    """The step's call where the step its instance has (set by its constructor) requires arguments, else None."""
    try:
        required = own_step_arguments(_construct(cls, form, two_linear(), kwargs))
    except Exception:  # noqa: BLE001  # it constructed for the probe before: nothing more to learn here
        return None
    return f"step({', '.join(required)})" if required else None


def _step_arguments_reason(taken: str) -> str:
    """The skip reason for a step that requires the arguments `taken` names."""
    return (f"its step takes {taken}, a protocol of its own: torch.optim's steps take a closure or nothing, as the "
            "plugin's runs give: not supported")


def _missing_module(problem: str) -> str | None:
    """The module an ImportError the step raised says is missing (by `No module named`, or the package
    its message says to install), or None."""
    if not problem.startswith(("ImportError", "ModuleNotFoundError")):
        return None
    found = (re.search(r"No module named '([\w.]+)'", problem) or re.search(r"pip install ([\w.-]+)", problem)
             or re.search(r"requires the '([\w.-]+)' package", problem))
    return found.group(1).split(".")[0].replace("-", "_") if found else None


def _argument_protocol(cls: type, form: Any, kwargs: dict) -> tuple[str, str] | None:
    """(the step's first argument, what it raised) where the step, given a closure there, used it as
    something a function is not (builder.closure_taken_as_value); None otherwise."""
    problem = _stepped_with(cls, form, kwargs, two_linear, 1, torch.float32, closure=True)[1]
    if problem is None:
        return None
    argument = closure_taken_as_value(_probed_class(cls), problem)
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
        optimizer = _construct(cls, form, model, kwargs)
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


def _steps_sparse_grads_only(cls: type, form: Any, kwargs: dict) -> bool:
    """Whether one step over a param whose grad is sparse (as nn.Embedding(sparse=True) gives) runs:
    asked where the step refuses the default model's dense grads (SparseAdam-like optimizers)."""
    if form not in ("list", "named"):
        return False
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(10, 4))
    param.grad = torch.randn(10, 4).to_sparse()
    try:
        _construct(cls, form, [("weight", param)], kwargs).step()
    except Exception:  # noqa: BLE001  # it refuses sparse grads too: not a sparse-gradient optimizer
        return False
    return True


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
