"""What runs are built from: data, model, optimizer, compiled step, closure and scheduler. The
runner (runner.py), the fixtures and the benchmark build from these; checks never do."""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..models import IN_FEATURES
from . import torch_api
from .param_forms import construct
from .devices import seed_all
from .vacuity import NotApplicable


def make_data(kind: str, device: str, batch: int = 10, features: int = IN_FEATURES,
              dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """(input, loss_fn). 'random': seeded randn and a squared loss, so every weight gets a
    full-rank gradient; 'ones': PyTorch's torch.ones input and sum loss (rank-1 gradients).
    Drawn in float32 and cast, so every dtype sees the same numbers."""
    if kind == "ones":
        return torch.ones(batch, features, device=device).to(dtype), loss_for(kind)
    return torch.randn(batch, features, device=device).to(dtype), loss_for(kind)


def param_dtype(case: Any) -> torch.dtype:
    """The case's param dtype (float32 for cases without a dtype axis)."""
    return getattr(torch, getattr(case, "dtype", "float32"))


def build_model(case: Any, device: str | None = None) -> torch.nn.Module:
    """The case's model on its device (or `device`), floating params and buffers in the case's dtype."""
    model = model_factory(case)(device=device or case.device)
    return model.to(dtype=param_dtype(case)) if param_dtype(case) != torch.float32 else model


def loss_for(kind: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The loss of a data kind: a sum over the batch, so shards' losses add up to the whole batch's."""
    if kind == "ones":
        return lambda out: out.sum()
    return lambda out: out.pow(2).sum()


def model_factory(case: Any) -> Callable[..., torch.nn.Module]:
    """The case's model factory: an import path, or a callable (a strategies.MLP blueprint)."""
    from ..spec.values import resolve

    return case.model if callable(case.model) else resolve(case.model)


def seeded_model(case: Any) -> torch.nn.Module:
    """The case's model, from its seed."""
    seed_all(case.seed)
    return build_model(case)


def first_backward(case: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """The case's (input, loss_fn), drawn right after its seeded model, and the grads of one backward through them.
    An optimizer built in between (make_optimizer leaves the RNG stream as it was) sees this forward and backward,
    as in a training loop: one that hooks the model's modules (deepchem's KFACOptimizer) records them."""
    inputs, loss_fn = make_data(case.data, case.device, dtype=param_dtype(case))
    loss_fn(model(inputs)).backward()
    return inputs, loss_fn


def make_optimizer(case: Any, source: torch.nn.Module | Iterable[Any]) -> torch.optim.Optimizer:
    """The case's optimizer over a model's params (or loose params), given in the spec's `params`
    form, with kwargs built afresh, and the spec's `setup` run on it. What the constructor draws from
    torch's RNG (torch_pso's particles) comes from the case's seed, whatever ran before, so that two
    runs of a comparison start alike; the caller's RNG stream is left as it was."""
    from ..spec.values import build_kwargs, resolve

    with torch.random.fork_rng(devices=_rng_devices(case.device)):
        seed_all(case.seed, case)
        optimizer = construct(resolve(case.optimizer), getattr(case, "params", "list"), source,
                              build_kwargs(case.kwargs, case.device), case.device)
    return with_setup(case, optimizer)


def _rng_devices(device: str) -> list[int]:
    """The CUDA devices whose RNG a case on `device` draws from (fork_rng saves and restores those)."""
    return [torch.cuda.current_device()] if device.startswith("cuda") and torch.cuda.is_available() else []


def with_setup(case: Any, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer after the spec's `setup` ran on it (e.g. schedule-free's train mode)."""
    setup = setup_of(case)
    if setup is not None:
        setup(optimizer)
    return optimizer


def setup_of(case: Any) -> Callable[[Any], Any] | None:
    """The spec's `setup` callable, run on every optimizer a run builds, torch's builders' too; None without one."""
    from ..spec.values import resolve

    return resolve(case.setup) if getattr(case, "setup", None) else None


def step_parameters(optimizer_cls: type) -> list[inspect.Parameter] | None:
    """The parameters of the class's `step` after self; None when it has no signature to read (a C function)."""
    try:
        return list(inspect.signature(optimizer_cls.step).parameters.values())[1:]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None


def own_step_arguments(optimizer: Any) -> list[str]:
    """The positional arguments a `step` set on the instance requires, a closure aside (DeepSpeed's
    ZenFlowCPUAdam sets `self.step = self._sequential_step`, a step(step_id, closure=None) over the class's
    step(closure=None)); none where the step is the class's, whose signature the runs already follow."""
    if "step" not in getattr(optimizer, "__dict__", {}):
        return []
    try:
        parameters = inspect.signature(optimizer.step).parameters.values()
    except (AttributeError, TypeError, ValueError):  # no step, or none with a signature to read (a C function)
        return []
    return [p.name for p in parameters if p.default is p.empty and p.name != "closure"
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def takes_closure(optimizer_cls: type) -> bool:
    """Whether the step has a parameter for a closure (one without a signature gets the benefit of the doubt)."""
    parameters = step_parameters(optimizer_cls)
    return parameters is None or bool(parameters)


def requires_closure(optimizer_cls: type) -> bool:
    """Whether the step's closure parameter has no default (LBFGS-like steps)."""
    parameters = step_parameters(optimizer_cls)
    if not parameters:
        return False
    first = parameters[0]
    return first.default is inspect.Parameter.empty and first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)


def closure_taken_as_value(optimizer_cls: type, error: BaseException | str) -> str | None:
    """The step's first argument, where given a closure there the step used it as a value or an object
    (SpawnGD's step(epoch, closure=None) computes epoch % 2, torch_numopt's step(objective) calls
    objective.closure()): a step protocol of its own, not a bug; None where that argument is the closure,
    or the error (or its "Type: message" line) says nothing of a function."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    if not text.startswith(("TypeError", "AttributeError")) or "'function'" not in text:
        return None
    parameters = step_parameters(optimizer_cls)
    return parameters[0].name if parameters and parameters[0].name != "closure" else None


def step_grad_mode(case: Any) -> contextlib.AbstractContextManager:
    """The grad mode a step runs under: no_grad, as PyTorch's compiled-optimizer tests step (and as
    torch.optim's step sets for itself: its compiled raw step goes without that wrapper); grad enabled
    where the spec says `grad_mode: enabled`, as a training loop steps (a step that runs autograd itself),
    and for a step that differentiates its closure's graph (`backward` other than plain: a Hessian-vector
    product under no_grad records no graph to differentiate again). A step(closure) gets grad for its
    closure either way: the closures enable it themselves."""
    return torch.enable_grad() if case.grad_mode == "enabled" or case.backward != "plain" else torch.no_grad()


def law_closure(case: Any, optimizer_cls: type) -> tuple[bool, bool]:
    """(may, must): whether a law's run may give the step a closure, and must. The closure variants
    the spec declares decide (a step that refuses one is declared `closure: [false]`, only with one
    `closure: [true]`); where the spec is silent, the step's signature."""
    must = requires_closure(optimizer_cls) or case.closure_forms == (True,)
    return must or (takes_closure(optimizer_cls) and True in (case.closure_forms or (True,))), must


def step_on_set_grads(case: Any, optimizer: Any, params: Iterable[torch.Tensor]) -> None:
    """`optimizer.step()` on the grads `params` hold now, with a closure where the step must have one
    (its signature, or the spec's `closure: [true]`): see `step_on_grads`."""
    step_on_grads(optimizer, params, law_closure(case, type(optimizer))[1], case.backward)


def step_on_grads(optimizer: Any, params: Iterable[torch.Tensor], with_closure: bool, backward: str = "plain") -> None:
    """`optimizer.step()` on the grads `params` hold now; `with_closure`: given a closure that sets those
    same grads again and returns the linear loss they are the gradient of, so that what steps preset
    grads applies to a step that must have a closure too. Not applicable under a `backward` other than
    plain: preset grads have no graph for the step to differentiate."""
    require_graph_free_grads(backward)
    if not with_closure:
        optimizer.step()
        return
    held = [(p, None if p.grad is None else p.grad.detach().clone()) for p in params]

    def closure(*args: Any, **named: Any) -> torch.Tensor:
        if backward_flag(args, named):
            for p, grad in held:
                p.grad = None if grad is None else grad.clone()
        with torch.no_grad():
            terms = [(g.conj() * p).real.sum().float() if p.is_complex() else (g * p).sum().float() for p, g in held if g is not None]
            return torch.stack(terms).sum() if terms else torch.zeros((), device=held[0][0].device if held else "cpu")

    optimizer.step(closure)


def require_graph_free_grads(backward: str) -> None:
    """A run that sets grads by hand cannot serve a step that differentiates its closure's graph (the
    loss's, or p.grad's): there is none behind them (a linear stand-in has no second derivative)."""
    if backward != "plain":
        raise NotApplicable(f"the spec's `backward: {backward}` (a step that differentiates the graph its closure made) and "
                            "this run's grads set by hand, which have no graph behind them: not applicable")


def require_closure_parameter(opt: torch.optim.Optimizer) -> None:
    """A step that cannot take a closure makes closure cases say nothing: not applicable, and why."""
    if not takes_closure(type(opt)):
        step = type(opt).step
        code = getattr(inspect.unwrap(step), "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
        raise NotApplicable(f"{type(opt).__qualname__}.step{inspect.signature(step)} takes no closure{where}: "
                            "a closure case does not apply (drop `closure: true` from the spec)")


def zero_grads(optimizer: Any, params: Any) -> None:
    """The optimizer's zero_grad(), or, for one without it (psgd's Kron and LRA are no torch.optim
    optimizers), every param's grad set to None as zero_grad() does by default."""
    zero = getattr(optimizer, "zero_grad", None)
    if callable(zero):
        zero()
        return
    for p in params() if callable(params) else params:
        p.grad = None


def make_closure(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor, loss_fn: Any,
                 graph_break: bool = False, backward: str = "plain") -> Callable[[], torch.Tensor]:
    """The usual closure: zero grads, forward, backward as the spec's `backward` says, return the loss
    (optionally breaking the graph). It enables grad itself, as a user's closure runs with grad on:
    torch.optim's step enables it for the closure, and a step that does not (many third-party ones)
    must not fail for the harness's no_grad."""
    def closure(*args: Any, **named: Any) -> torch.Tensor:
        if not backward_flag(args, named):
            with torch.no_grad():
                return loss_fn(model(inputs))
        with torch.enable_grad():
            zero_grads(opt, model.parameters)
            loss = loss_fn(model(inputs))
            if graph_break:
                torch_api.graph_break()
            closure_backward(loss, backward)
        return loss

    return closure


def backward_flag(args: tuple[Any, ...], named: dict[str, Any]) -> bool:
    """Whether a call of a plugin closure asks for grads. torch.optim's closures take no arguments; a step
    may pass one bool, positionally or by any name (torchzero's `closure(backward=False)`, SaLSA's
    `backwards=`): False evaluates the loss alone, no zero_grad, no backward. Any other argument is a
    protocol of the optimizer's own: TypeError, as a closure without parameters raises."""
    given = [*args, *named.values()]
    if not given:
        return True
    if len(given) == 1 and isinstance(given[0], bool):
        return given[0]
    shown = ", ".join([*(type(a).__name__ for a in args), *(f"{k}={type(v).__name__}" for k, v in named.items())])
    raise TypeError(f"closure() takes no arguments, or one bool saying whether to run backward; it was given ({shown})")


def closure_backward(loss: torch.Tensor, backward: str) -> None:
    """A closure's backward under the spec's protocol: plain, create_graph (grads that carry their graph,
    for a step that differentiates them), or none at all (by_step: the step differentiates the loss)."""
    if backward == "by_step":
        return
    if backward == "create_graph":
        with warnings.catch_warnings():  # the param-grad reference cycle it warns of is what such a step asks for
            warnings.filterwarnings("ignore", "Using backward\\(\\) with create_graph=True", UserWarning)
            loss.backward(create_graph=True)
        return
    loss.backward()


FRAME_SKIPPED = (": torch's doing, dynamo's heuristic: after the closure's graph break the step is a frame of its own "
                 "that holds no tensor (the optimizer, the closure) and whose code names no torch module, and dynamo "
                 "traces only a frame that holds a tensor or names torch (has_tensor_in_frame); naming torch in the "
                 "step, a `torch.no_grad()` around its update, lets it be traced")


@dataclass
class ClosureCompiles:
    """What dynamo captured and inductor generated while the closure ran inside a compiled step:
    the closure's forward and backward, counted apart from the step's own graphs and kernels."""

    graphs: int = 0
    kernels: int = 0
    frame_skipped: bool = False  # dynamo skips the step's frame once the closure breaks its graph (no tensor, no torch)
    graph_breaks: Counter = field(default_factory=Counter)  # dynamo's breaks in the closure's frames (zero_grad, backward)
    frames_given_up: Counter = field(default_factory=Counter)  # closure frames dynamo ran eagerly (a model's loop)

    def step_breaks(self, breaks: Counter) -> Counter:
        """The step's own graph breaks among a compiled run's `breaks`: not the closure's frames', nor
        the one at the step's call into the closure (the plugin's, run eagerly by design)."""
        own = breaks - self.graph_breaks
        return Counter({reason: n for reason, n in own.items() if not torch_api.break_names_function(reason, CLOSURE_CALL)})

    def step_frames_given_up(self, given_up: Counter) -> Counter:
        """The step's own frames among a compiled run's `given_up` ones: not the closure's (its model's forward)."""
        return given_up - self.frames_given_up

    def step_not_compiled(self, step_graphs: int) -> str | None:
        """Why the step itself was not compiled (no graph of its own), or None."""
        if step_graphs > 0:
            return None
        if self.graphs:
            return (f"the step captured no graph of its own; the closure's {self.graphs} graph(s) are not the "
                    "step's (the step ran eagerly around a compiled closure" + (FRAME_SKIPPED if self.frame_skipped else "") + ")")
        return "torch.compile captured no graph of the step (it ran eagerly or traced to no tensor operation)"


def compile_step(opt: torch.optim.Optimizer, closure: Any = None, fullgraph: bool = False,
                 backend: str | Callable[..., Any] = "inductor", closure_compiles: ClosureCompiles | None = None,
                 backward: str = "plain") -> Callable[[], None]:
    """torch.compile of the optimizer's raw step (see torch_api.raw_step), as PyTorch's tests do.
    A closure runs outside the step's trace (its own frames still compile), counted into
    `closure_compiles`: graphs of the closure are not evidence that the step compiled. Under a
    `backward` other than plain the closure runs eagerly, frames and all: the step differentiates
    what it made, and a graph made by compiled frames cannot be differentiated twice (aot_autograd)."""
    step = torch_api.raw_step(opt)
    torch_api.mark_step_called(opt)
    if closure is None:
        def fn() -> None:
            step()
    else:
        into = closure_compiles if closure_compiles is not None else ClosureCompiles()
        into.frame_skipped = torch_api.frame_skipped_without_tensors(step)
        counted = _counted_closure(closure if backward == "plain" else torch_api.eager(closure), into)

        def fn() -> None:
            step(counted)
    return torch.compile(fn, backend=backend, fullgraph=fullgraph)


def step_site(site: str, optimizer: Any) -> str:
    """A graph break's 'file:line', where it is compile_step's own call of the step (dynamo was handed a step it
    does not trace: a `torch.compiler.disable`d one) the step's definition instead: the user's line, not ours."""
    path, _, line = site.rpartition(":")
    lines, first = inspect.getsourcelines(compile_step)
    if path != inspect.getsourcefile(compile_step) or not line.isdigit() or not first <= int(line) < first + len(lines):
        return site
    step = inspect.unwrap(type(optimizer).step)
    try:
        return f"{inspect.getsourcefile(step)}:{inspect.getsourcelines(step)[1]}, the step's definition"
    except (OSError, TypeError):  # a step defined without source (C, a lambda made at runtime): say ours
        return site


def _counted_closure(closure: Callable[..., Any], into: ClosureCompiles) -> Callable[..., Any]:
    def counted(*args: Any, **named: Any) -> Any:  # backward_flag's one bool, passed on
        graphs, kernels = torch_api.captured_graph_count(), torch_api.generated_kernel_count()
        breaks, given_up = torch_api.graph_break_counts(), torch_api.frames_given_up()
        try:
            return closure(*args, **named)
        finally:
            into.graphs += torch_api.captured_graph_count() - graphs
            into.kernels += torch_api.generated_kernel_count() - kernels
            into.graph_breaks += torch_api.graph_break_counts() - breaks
            into.frames_given_up += torch_api.frames_given_up() - given_up

    return torch_api.outside_step_trace(counted)


CLOSURE_CALL = f"{_counted_closure.__name__}.<locals>.counted"  # the function dynamo's break at the step's call names


def make_scheduler(case: Any, opt: torch.optim.Optimizer) -> Any:
    """The case's LR scheduler over `opt`, one epoch in (as PyTorch's tests: some act only after one)."""
    import torch.optim.lr_scheduler as lr_scheduler

    from ..spec.values import build_kwargs, resolve

    name = case.scheduler or ""
    cls = resolve(name) if (":" in name or "." in name) else getattr(lr_scheduler, name)
    scheduler = cls(opt, **build_kwargs(case.scheduler_kwargs, case.device))
    scheduler.last_epoch = 1
    return scheduler


def step_scheduler(scheduler: Any) -> None:
    import torch.optim.lr_scheduler as lr_scheduler

    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
        scheduler.step(1.0)
    else:
        scheduler.step()
