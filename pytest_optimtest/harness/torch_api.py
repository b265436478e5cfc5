"""The one place that touches torch's private APIs; a torch upgrade is fixed here.

Everything else in the package calls these functions instead of reaching into
torch._dynamo, torch._inductor or torch.distributed internals.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
import sys
import traceback
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch


def _import_quietly(module: str) -> None:
    """Import a torch module whose import emits torch.jit DeprecationWarnings on 2.13: they are
    torch's own, and a user can do nothing about them. Once imported, later imports are silent."""
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit", category=DeprecationWarning)
        importlib.import_module(module)


_import_quietly("torch.utils.mkldnn")  # inductor imports it on its first compile


def torch_version() -> str:
    """The running torch as 'major.minor', the key of kernel-count expectations."""
    major, minor = torch.__version__.split(".")[:2]
    return f"{major}.{minor}"


TRACE_LOGGER = "torch.__trace"  # torch._logging._internal.trace_log: structured-trace records, empty as text


def generated_code_dir() -> str | None:
    """Where inductor writes the Python it generates (its cache folder), or None."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # another torch layout: frames there then count as nobody's
        return None
    return str(cache_dir())


@contextlib.contextmanager
def trace_log_kept_local() -> Iterator[None]:
    """torch's structured-trace logger does not propagate, so pytest's logging plugin attaches its
    capture handlers to it directly (`catching_logs`, for non-propagating loggers), and every
    failure report then shows dozens of blank `DEBUG torch.__trace` lines (the records are
    structured payloads, empty as text). Detach pytest's handlers for the block; torch's own trace
    handler (TORCH_TRACE) stays."""
    logger = logging.getLogger(TRACE_LOGGER)
    pytest_handlers = [h for h in logger.handlers if type(h).__module__ == "_pytest.logging"]
    for handler in pytest_handlers:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in pytest_handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)


def reset_compile_state() -> None:
    """Forget compiled code, inductor metrics and dynamo counters."""
    import torch._dynamo
    import torch._inductor.metrics

    torch._dynamo.reset()
    torch._inductor.metrics.reset()
    torch._dynamo.utils.counters.clear()


def generated_kernel_count() -> int:
    import torch._inductor.metrics

    return torch._inductor.metrics.generated_kernel_count


def captured_graph_count() -> int:
    """Graphs dynamo handed to the backend since the last reset."""
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def outside_step_trace(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` called from compiled code runs as a graph break, its own frame eager, while the frames
    it calls still compile (dynamo.disable, non-recursive): a closure counted apart from the step."""
    import torch._dynamo

    return torch._dynamo.disable(fn, recursive=False)


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` and every frame it calls run eagerly, wherever it is called from (dynamo.disable)."""
    import torch._dynamo

    return torch._dynamo.disable(fn)


# Graph breaks that are the traced code's own error, not code dynamo cannot trace: under fullgraph, the
# user's code raised or asserted while dynamo traced it (muonium's `assert d_in.is_cuda` in a Triton kernel's wrapper).
_TRACED_CODE_RAISED = ("Observed exception", "Data-dependent assertion failed")


def traced_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of the code dynamo was tracing when it raised `exc`, outermost first: the user's
    line the Python traceback (which ends in torch's compile wrapper) never reaches. [] for others."""
    dynamo_exc = sys.modules.get("torch._dynamo.exc")  # not loaded: nothing was compiled, so exc is not dynamo's
    if dynamo_exc is None or not isinstance(exc, dynamo_exc.TorchDynamoException):
        return []
    return list(getattr(exc, "real_stack", None) or [])


def raised_by_traced_code(exc: BaseException) -> bool:
    """Whether dynamo raised `exc` because the code it traced raised or asserted (the code's doing),
    rather than for something it cannot trace."""
    dynamo_exc = sys.modules.get("torch._dynamo.exc")
    if dynamo_exc is None or not isinstance(exc, dynamo_exc.Unsupported):
        return False
    kind = getattr(exc, "gb_type", None) or str(exc).lstrip()  # torch 2.6's has no gb_type: its message starts with it
    return str(kind).startswith(_TRACED_CODE_RAISED)


def graph_break_reasons() -> list[str]:
    """dynamo's reason for each distinct graph break since the last reset."""
    return list(graph_break_counts())


def graph_break_counts() -> Counter:
    """dynamo's graph-break reasons since the last reset, with how often each broke a graph; where dynamo skipped
    inlining a function and said no why (`skipped_inlining_cause`), the reason its inlining failed instead."""
    import torch._dynamo.utils

    counters = torch._dynamo.utils.counters
    counts: Counter = Counter()
    for reason, count in counters["graph_break"].items():
        counts[skipped_inlining_cause(reason, counters["inline_call"])] += count
    return counts


# torch 2.9: a SkipFrame raised inside an inlined function (a generator's frame it will not trace) becomes the
# break "SKIPPED INLINING <code object f ...>: " with the SkipFrame's empty message, at the call of f; the
# failure that made it skip is counted under "inline_call" alone (symbolic_convert.py, inline_call_)
_SKIPPED_INLINING = re.compile(r'SKIPPED INLINING <code object (\S+) at 0x[0-9a-f]+, file "([^"]+)", line (\d+)>:\s*')


def skipped_inlining_cause(reason: str, inline_failures: Counter) -> str:
    """`reason`, or where it is dynamo's "SKIPPED INLINING <code object f ...>: " with nothing after, the failure
    counted inlining functions (the most frequent, where there were several), naming f and ending with `reason`
    (`break_site` finds the break by it)."""
    found = _SKIPPED_INLINING.fullmatch(reason)
    if found is None:
        return reason
    causes = [failure for failure, _ in inline_failures.most_common() if not _SKIPPED_INLINING.match(failure)]
    if not causes:
        return reason
    name, file, line = found.groups()
    head, _, rest = causes[0].strip().partition("\n")
    return f"{head} (inlining {name}, {file}:{line}, which dynamo then skipped)\n{rest}\n{reason.strip()}"


def frames_given_up() -> Counter:
    """dynamo's reasons for the graph breaks it could not resume after since the last reset (momo's `.item()` in a
    loop: "Failed to handle graph break gracefully. Skipping the function and falling back to eager"), each of
    which ran a whole frame eagerly; counted apart from the graph breaks it resumed after."""
    import torch._dynamo.utils

    return Counter(torch._dynamo.utils.counters["unimplemented"])


def graph_break_summary(reason: str) -> str:
    """The first line of a dynamo graph-break reason and its hint; without a hint, the start of its
    debug context, which names the call ("Unhandled args for method" alone does not say which)."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    hints = [line for line in lines[1:] if line.startswith("Hint:")]
    context = [line for line in lines[1:] if line.startswith("Developer debug context:")]
    if not hints and context:
        hints = [context[0] if len(context[0]) <= 160 else context[0][:157] + "..."]
    return " ".join(lines[:1] + hints)


def break_names_function(reason: str, qualname: str) -> bool:
    """Whether a dynamo graph-break reason is about the function `qualname` (dynamo's explanation of a
    break at a call it skips prints the function's repr: "Skip inlining function <function f at 0x...>")."""
    return f"<function {qualname} at " in reason


def graph_break() -> None:
    """Break the graph here when traced by dynamo; a no-op eagerly."""
    import torch._dynamo

    torch._dynamo.graph_break()


_RECOMPILES_ARTIFACT = "recompiles"
_RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"


@contextlib.contextmanager
def recording_recompiles() -> Iterator[list[str]]:
    """Collect dynamo's own message for every recompile inside the block.

    Each message is dynamo's 'Recompiling function ... triggered by the following guard
    failure(s)' text: which guard failed, on which value, at which source line. This is
    what TORCH_LOGS=recompiles prints; we enable that artifact for the block only and keep
    the messages off the user's terminal.
    """
    import torch._dynamo.guards  # noqa: F401  (registers the artifact logger)

    with _recording_artifact(_RECOMPILES_ARTIFACT, _RECOMPILES_LOGGER) as messages:
        yield messages


_GRAPH_BREAKS_ARTIFACT = "graph_breaks"
_GRAPH_BREAKS_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
_BREAK_SITE = re.compile(r"Graph break in user code at (.+):(\d+)\n")


@contextlib.contextmanager
def recording_graph_break_sites() -> Iterator[list[str]]:
    """Collect TORCH_LOGS=graph_breaks' message for every graph break inside the block ("Graph break in user
    code at file:line", then the reason), off the user's terminal; `break_site` reads one."""
    import torch._dynamo.symbolic_convert  # noqa: F401  (registers the artifact logger)

    with _recording_artifact(_GRAPH_BREAKS_ARTIFACT, _GRAPH_BREAKS_LOGGER) as messages:
        yield messages


def break_site(reason: str, logged: list[str]) -> str | None:
    """'file:line' of the user code where dynamo broke the graph for `reason` (a graph_break_counts key), from
    `recording_graph_break_sites`' messages; None where none names it."""
    lines = reason.strip().split("\n")
    for head in dict.fromkeys((lines[0], lines[-1])):  # the last: the break as logged, under a cause found apart
        for message in logged:
            found = _BREAK_SITE.match(message)
            if found and head in message:
                return f"{found.group(1)}:{found.group(2)}"
    return None


def fake_call_type_error(reason: str) -> str | None:
    """Where a graph break's reason is a TypeError that dynamo's fake tensors raised calling an op, the call
    it names ("_foreach_mul() received an invalid combination of arguments - got (NoneType, FakeTensor)"):
    the op was handed other types than the eager step, which ran, handed it; else None."""
    if not reason.startswith("TypeError when making fake tensor call"):
        return None
    context = re.search(r"Developer debug context: TypeError (?:<[^>]*>: )?([^\n]*)", reason)
    return (context.group(1) if context else "").strip() or "an op"


# The overloads torch deprecated that take the number first (`p.add_(-lr, grad)`, `addcmul_(1 - beta, g, g)`):
# eager warns "This overload of add_ is deprecated" and runs them; dynamo breaks the graph, its args unhandled.
_DEPRECATED_OVERLOAD = re.compile(r"call_method TensorVariable\(\) (add_?|sub_?|addcmul_?|addcdiv_?) \[ConstantVariable\([^]]*?\), "
                                  r"(?:LazyVariableTracker\(realized: )?TensorVariable\(\)")  # lazily realized: 2.10's wording
# torch 2.6 says only that one positional too many reached the method's handler, which takes the tensors alone
# positionally (`method_add_(self, other, *, alpha)`): the number-first form is the only call that passes one more.
_DEPRECATED_OVERLOAD_2_6 = re.compile(r"unhandled args for (add_|sub_|addcmul_|addcdiv_): TensorVariable\.method_\1\(\) takes "
                                      r"(\d+) positional arguments but (?!\2)\d+ were given")


def deprecated_overload_call(reason: str) -> str | None:
    """Where a graph break's reason is dynamo's unhandled args for a number-first overload that torch deprecated,
    the method's name ("add_"); else None."""
    found = _DEPRECATED_OVERLOAD.search(reason) if "Unhandled args for method" in reason else _DEPRECATED_OVERLOAD_2_6.search(reason)
    return found.group(1) if found else None


@contextlib.contextmanager
def _recording_artifact(artifact: str, logger_name: str) -> Iterator[list[str]]:
    """The messages a TORCH_LOGS artifact logs inside the block, enabled for it alone."""
    from torch._logging._internal import log_state

    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(logger_name)
    was_enabled = log_state.is_artifact_enabled(artifact)
    level, propagate = logger.level, logger.propagate
    handler = _Collect(logging.DEBUG)
    log_state.enable_artifact(artifact)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = was_enabled  # the user asked for these logs: let them through too
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        if not was_enabled:
            log_state.artifact_names.discard(artifact)


def fsdp2_runs_on_cpu() -> bool:
    """Whether FSDP2's fully_shard can run on CPU ranks: it records events on the device's stream,
    and torch.cpu.Stream has no record_event before some release after 2.6 (2.11 has it)."""
    return hasattr(torch.cpu.Stream, "record_event")


def unlimited_recompiles(limit: int = 100_000) -> contextlib.AbstractContextManager:
    """Raise dynamo's recompile limits for the block, and make hitting one an error: past the
    limit dynamo would otherwise run the function eagerly, without a word."""
    return _recompile_limits(limit, limit, fail=True)


def recompile_limit_at(limit: int | None) -> contextlib.AbstractContextManager:
    """dynamo's recompile limits set to `limit` for the block (the spec's `recompile_limit`); None: torch's own."""
    return contextlib.nullcontext() if limit is None else _recompile_limits(limit, max(limit, 256))


def _recompile_limits(limit: int, accumulated: int, fail: bool = False) -> contextlib.AbstractContextManager:
    import torch._dynamo.config as dynamo_config

    if not hasattr(dynamo_config, "recompile_limit"):  # torch 2.6: the cache_size names, and no raise on hitting one
        return _patched(dynamo_config, cache_size_limit=limit, accumulated_cache_size_limit=accumulated)
    settings: dict[str, Any] = {"recompile_limit": limit, "accumulated_recompile_limit": accumulated}
    if fail:
        settings["fail_on_recompile_limit_hit"] = True
    return _patched(dynamo_config, **settings)


def _patched(config_module: Any, **settings: Any) -> contextlib.AbstractContextManager:
    """A torch config module's `patch` (torch 2.6's modules declare no `patch` to a type checker)."""
    return config_module.patch(**settings)


def is_recompile_limit_error(exc: BaseException) -> bool:
    """Whether dynamo raised it on hitting its recompile limit (fullgraph, or fail_on_recompile_limit_hit);
    by name: the class moved and was renamed across releases (CacheLimitExceeded, RecompileLimitExceeded)."""
    return bool({c.__name__ for c in type(exc).__mro__} & {"FailOnRecompileLimitHit", "RecompileLimitExceeded",
                                                           "CacheLimitExceeded"})


def recompile_limit() -> int:
    import torch._dynamo.config as dynamo_config

    return int(getattr(dynamo_config, "recompile_limit", getattr(dynamo_config, "cache_size_limit", 8)))


def is_identity_guard(failure: str) -> bool:
    """A guard failure caused by a new object where the old one was (or was freed)."""
    return "got deallocated" in failure or "___check_obj_id" in failure or "ID_MATCH" in failure


def fail_on_recompile() -> contextlib.AbstractContextManager:
    """The public stance: any recompile inside raises, with dynamo's guard-failure reasons."""
    return torch.compiler.set_stance("fail_on_recompile")


def is_recompile_failure(exc: BaseException) -> bool:
    """Whether `exc` is the error the fail_on_recompile stance raises."""
    return isinstance(exc, RuntimeError) and "stance is 'fail_on_recompile'" in str(exc)


def cudagraph_tree_graph_ids(device_index: int = 0) -> int | None:
    """The id the cudagraph tree manager would give its next graph (= graphs recorded), or
    None when no tree manager exists on that device (cudagraphs never ran)."""
    import torch._inductor.cudagraph_trees as trees

    manager = trees.get_container(device_index).tree_manager
    return None if manager is None else manager.new_graph_id().id


@contextlib.contextmanager
def guard_latency_unprofiled() -> Iterator[None]:
    """Within: dynamo does not time each new guard set. It does so once per compile, after flushing
    the CPU's caches, for a compile metric (guard_latency_us) that no check reads: about 20 ms of
    every compile on CPU, a few percent of a compiled matrix. A release without it is left as it is."""
    import torch._dynamo.guards as guards  # private: the one place it is named

    profiled = getattr(guards, "profile_guard_manager", None)
    if profiled is None:
        yield
        return
    guards.profile_guard_manager = _guard_latency_unmeasured
    try:
        yield
    finally:
        guards.profile_guard_manager = profiled


def _guard_latency_unmeasured(guard_manager: Any, f_locals: Any, n_iters: int = 1) -> float:  # 2.6 passes no n_iters
    return 0.0


def compile_cache_hits() -> int:
    """Compiled graphs found in inductor's on-disk caches (FX graph and AOT autograd) since the last reset."""
    import torch._dynamo.utils

    counters = torch._dynamo.utils.counters
    return int(counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"])


def inductor_config(**options: Any) -> contextlib.AbstractContextManager:
    import torch._inductor.config

    return _patched(torch._inductor.config, **options)


@contextlib.contextmanager
def init_group_traced() -> Iterator[None]:
    """Within: dynamo traces an optimizer's `_init_group` like any method. Outside, it runs it once,
    eagerly, while tracing (torch/_dynamo/variables/optimizer.py, OptimizerVariable.call_method: torch.optim's
    _init_group only creates state), so per-step work an optimizer does there is skipped by every compiled
    step after the first. Compiles made within keep tracing it; reset dynamo after."""
    from torch._dynamo.variables.optimizer import OptimizerVariable  # private: the one place it is named
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    table = vars(OptimizerVariable).get("tp_methods")
    if isinstance(table, dict) and "_init_group" in table:  # torch 2.15: a declarative method table; without the entry it inlines
        variable: Any = OptimizerVariable  # the table is not declared before torch 2.15
        variable.tp_methods = {k: v for k, v in table.items() if k != "_init_group"}
        try:
            yield
        finally:
            variable.tp_methods = table
        return
    shortcut = OptimizerVariable.call_method

    def traced(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        if name == "_init_group":
            return UserDefinedObjectVariable.call_method(self, tx, name, args, kwargs)
        return shortcut(self, tx, name, args, kwargs)

    OptimizerVariable.call_method = traced  # type: ignore[method-assign]
    try:
        yield
    finally:
        OptimizerVariable.call_method = shortcut  # type: ignore[method-assign]


@functools.cache
def _torch_optim_wrapper_codes() -> frozenset:
    from torch.optim.optimizer import Optimizer, _use_grad_for_differentiable

    def probe(self: Any) -> None: ...

    return frozenset({Optimizer.profile_hook_step(probe).__code__, _use_grad_for_differentiable(probe).__code__})


def raw_step(optimizer: torch.optim.Optimizer) -> Callable[..., Any]:
    """optimizer.step without torch.optim's own wrappers, bound to the optimizer.

    torch.optim wraps step in a profiling hook wrapper and in `_use_grad_for_differentiable`,
    which inserts graph breaks; PyTorch's tests compile the function under them, under
    no_grad, and so do we (see optimizer.py's "Note on graph break"). A package's copy of
    those wrappers is unwrapped too. Other decorators, a user's torch.compiler.disable
    included, are kept.
    """
    return _without_torch_optim_wrappers(type(optimizer).step).__get__(optimizer)


def frame_skipped_without_tensors(function: Callable[..., Any]) -> bool:
    """Whether dynamo skips `function`'s frame when it is entered with no tensor among its locals, as a
    step is after its closure's graph break (the optimizer and the closure): dynamo traces a frame only
    where one holds a tensor or its code names a torch module among its globals (convert_frame's
    has_tensor_in_frame). gradient_equilibrum's step names none: it ran eagerly, whole. A decorated step
    (DeepSpeed's `@torch.no_grad()` ones) is judged by the code it wraps, whose frame calls the closure."""
    function = inspect.unwrap(getattr(function, "__func__", function))
    code, found = getattr(function, "__code__", None), getattr(function, "__globals__", {})
    if code is None:
        return False
    return not any(isinstance(module := found.get(name), types.ModuleType)
                   and (module is torch or module.__name__.startswith("torch.")) for name in code.co_names)


# What a copy of torch.optim's step wrappers calls (a package vendoring torch's Optimizer, AdamZ's): known by
# name and by these calls, as its code objects are not torch's
_VENDORED_WRAPPER_CALLS = {"wrapper": {"record_function", "_optimizer_step_code"},
                           "_use_grad": {"graph_break", "set_grad_enabled"}}


def _is_torch_optim_wrapper(step: Callable[..., Any]) -> bool:
    code = getattr(step, "__code__", None)
    if code is None or not hasattr(step, "__wrapped__"):
        return False
    return code in _torch_optim_wrapper_codes() or _VENDORED_WRAPPER_CALLS.get(code.co_name, {""}) <= set(code.co_names)


def _without_torch_optim_wrappers(step: Callable[..., Any]) -> Callable[..., Any]:
    while _is_torch_optim_wrapper(step):
        step = step.__wrapped__  # type: ignore[attr-defined]  # checked above
    return step


@contextlib.contextmanager
def torch_optim_bases_unwrapped(optimizer_cls: type) -> Iterator[list[str]]:
    """Within: a third-party subclass's `super().step()`, and the step of a torch.optim optimizer
    that a wrapper holds (Lookahead's base, TopoAdamW's AdamW), run with the grad mode torch.optim's
    `_use_grad_for_differentiable` sets, but without that wrapper's two `torch._dynamo.graph_break()`
    calls, which exist only to make AOT see no_grad (pytorch/pytorch#104053): the plugin compiles
    the raw step, as PyTorch's tests do, and so the steps that one calls. Left alone when the
    optimizer is torch.optim's own (AdamW subclasses Adam). Yields the patched classes' names."""
    if optimizer_cls.__module__.startswith("torch."):
        yield []
        return
    patched = []
    for base in dict.fromkeys([*optimizer_cls.__mro__[1:], *_torch_optim_classes()]):
        step = vars(base).get("step")
        if step is None or not base.__module__.startswith("torch.optim"):
            continue
        raw = _without_torch_optim_wrappers(step)
        if raw is not step:
            patched.append((base, step))
            base.step = _with_step_grad_mode(raw)  # type: ignore[attr-defined]  # an optimizer class
    try:
        yield [f"{base.__module__}.{base.__qualname__}" for base, _ in patched]
    finally:
        for base, step in reversed(patched):
            base.step = step


@functools.cache
def _torch_optim_classes() -> tuple[type, ...]:
    """torch.optim's optimizer classes, which a wrapper may hold an instance of."""
    import torch.optim

    return tuple(c for c in vars(torch.optim).values() if isinstance(c, type) and issubclass(c, torch.optim.Optimizer))


def _with_step_grad_mode(raw: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(raw)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.set_grad_enabled(self.defaults.get("differentiable", False)):
            return raw(self, *args, **kwargs)

    return step


def mark_step_called(optimizer: torch.optim.Optimizer) -> None:
    """Silence the LR scheduler's 'step() before optimizer.step()' warning for a raw step."""
    optimizer._opt_called = True  # type: ignore[attr-defined]


# Attributes that torch.optim's wrappers (not the step itself) write on an optimizer.
WRAPPER_ATTRIBUTES = frozenset({"_opt_called", "_zero_grad_profile_name", "_optimizer_step_code"})


def distributed_optim() -> Any:
    """The torch.distributed.optim module (imported quietly: see `_import_quietly`)."""
    _import_quietly("torch.distributed.optim")
    import torch.distributed.optim as distributed_optim

    return distributed_optim


def apply_optimizer_in_backward(optimizer_cls: type, params: list, kwargs: dict, register_hook: bool = True) -> None:
    """torch.distributed.optim._apply_optimizer_in_backward: step `params` as their grads are ready."""
    distributed_optim()._apply_optimizer_in_backward(optimizer_cls, params, optimizer_kwargs=kwargs, register_hook=register_hook)


def in_backward_optimizers(module: torch.nn.Module) -> list:
    return distributed_optim()._get_in_backward_optimizers(module)


def optimizers_on_param(param: torch.Tensor) -> list:
    """The in-backward optimizers stored on a parameter."""
    return list(getattr(param, "_in_backward_optimizers", []))


def guard_failures(recompile_message: str) -> list[str]:
    """The guard-failure lines ('0/0: <guard>  # <source line>') of a dynamo recompile message,
    without the user stack traces; the whole message when its format is not recognised. A frame's local
    reads as the newer releases write it (`step.__self__`; torch 2.6 writes `L['step'].__self__`)."""
    lines = [_LOCAL_SOURCE.sub(r"\1", m.group(1).strip()) for m in _GUARD_LINE.finditer(recompile_message)]
    return lines or [recompile_message.strip()]


_GUARD_LINE = re.compile(r"^\s*- (\d+/\d+: .*)$", re.MULTILINE)
_LOCAL_SOURCE = re.compile(r"\bL\['([A-Za-z_]\w*)'\]")


def recompiles_first_frame(recompile_message: str) -> bool:
    """Whether a dynamo recompile message recompiled the first frame dynamo compiled in the process's fresh
    compile state (frame 0: the compiled function itself, not a frame a graph break split off); True when
    its format is not recognised."""
    frames = {line.split("/", 1)[0] for line in guard_failures(recompile_message) if _GUARD_LINE_START.match(line)}
    return not frames or "0" in frames


_GUARD_LINE_START = re.compile(r"\d+/\d+: ")


def identity_guards_only(recompile_message: str) -> bool:
    """Whether every guard that failed in a dynamo recompile message is an identity guard (`___check_obj_id`:
    a tensor dynamo holds as a static input, such as an optimizer's state, replaced by another object; on
    torch 2.6, the entry that object's death invalidated)."""
    lines = guard_failures(recompile_message)
    return bool(lines) and all("___check_obj_id(" in line or _DEALLOCATED.search(line) for line in lines)


# torch 2.6 drops a cache entry whose identity-guarded object died, and gives that as the recompile's reason
_DEALLOCATED = re.compile(r"Cache line invalidated because \S+ got deallocated")


@functools.cache
def mod_tracker_ends_backward_with_post_bw() -> bool:
    """Whether this torch's ModTracker fires post_bw, as backward ends, for a module whose inputs need
    no grad (2.11 and later do; 2.6 does not): probed once on a one-Linear model."""
    fired: list[str] = []
    layer = torch.nn.Linear(2, 2)
    tracker = mod_tracker()
    tracker.register_user_hooks(post_bw_hook=lambda module, grads: fired.append("post_bw"))
    with tracker:
        layer(torch.ones(1, 2)).sum().backward()
    return bool(fired)


def mod_tracker() -> Any:
    """A new torch.distributed._tools.mod_tracker.ModTracker."""
    from torch.distributed._tools.mod_tracker import ModTracker

    return ModTracker()


def process_group_store() -> Any:
    """The default process group's key-value store (its rendezvous store, under the group's prefix)."""
    import torch.distributed.distributed_c10d as c10d

    return c10d._get_default_store()


def inductor_backend() -> Callable[..., Any]:
    """Inductor as a callable torch.compile backend (what backend="inductor" names)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx


# FSDP2 and torch.distributed.checkpoint: public since torch 2.6, imported where used (heavy, and
# only the fsdp and checkpoint checks need them).

def device_mesh(device_type: str, world_size: int) -> Any:
    """A 1-D device mesh over the process group's ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (world_size,))


def fully_shard(module: torch.nn.Module, mesh: Any) -> None:
    """FSDP2: shard the module's own params over the mesh (they become DTensors). On gloo, the ranks'
    gradients are reduced as a sum, then divided by the world size: torch 2.7's and 2.8's FSDP2 ask
    gloo's reduce-scatter for ReduceOp.AVG, which gloo carries out as a sum (the optimizer was given
    world-size times the gradients). The average is the same; NCCL's path is left as FSDP2 chooses it."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy
    from torch.distributed.fsdp import fully_shard as shard

    gloo = torch.distributed.get_backend() == "gloo"
    force_sum = hasattr(FSDPModule, "set_force_sum_reduction_for_comms")  # torch 2.8 and later
    # before 2.8, a reduce dtype other than float32 and bfloat16 is what makes FSDP2 sum and divide;
    # the ranks' grads are equal here, so their average in float64 casts back to them exactly
    policy = MixedPrecisionPolicy(reduce_dtype=torch.float64 if gloo and not force_sum else None)
    shard(module, mesh=mesh, mp_policy=policy)
    if force_sum and gloo:
        module.set_force_sum_reduction_for_comms(True)  # type: ignore[operator]


def map_local(tensor: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """fn of a DTensor's local shard, as a DTensor on the same mesh and placements; fn(tensor) of any other."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        return DTensor.from_local(fn(tensor.to_local()), tensor.device_mesh, tensor.placements,
                                  shape=tensor.shape, stride=tensor.stride())  # FSDP2 shards unevenly
    return fn(tensor)


def shard_shaped(param: torch.Tensor, value: Any) -> bool:
    """Whether `value`, a state tensor of `param`, is a plain tensor shaped like the local shard of a
    DTensor param, not like the param: state an optimizer made from `to_local()` (or from a shard's grad)."""
    from torch.distributed.tensor import DTensor

    return (isinstance(param, DTensor) and isinstance(value, torch.Tensor) and not isinstance(value, DTensor)
            and value.dim() > 0 and value.shape == param.to_local().shape and value.shape != param.shape)


@contextlib.contextmanager
def partial_scalar_reads() -> Iterator[list[list[traceback.FrameSummary]]]:
    """Record the stack of each Python number read (item(), float(), int(), bool(), tolist()) off a
    DTensor whose placements include Partial: a reduction (a norm, a sum) over a sharded tensor that
    is not yet reduced across ranks, whose read gives each rank its own partial value. The reads are
    wrapped on DTensor alone, so no other op (nor the error it raises) passes through the plugin."""
    from torch.distributed.tensor import DTensor

    found: list[list[traceback.FrameSummary]] = []
    names = ("item", "tolist", "__float__", "__int__", "__bool__")
    own = {name: DTensor.__dict__[name] for name in names if name in DTensor.__dict__}

    def watched(read: Callable[..., Any]) -> Callable[..., Any]:
        def read_watched(self: Any, *args: Any, **kwargs: Any) -> Any:
            if any(p.is_partial() for p in self.placements):
                found.append(traceback.extract_stack()[:-1])
            return read(self, *args, **kwargs)
        return read_watched

    for name in names:
        setattr(DTensor, name, watched(getattr(DTensor, name)))
    try:
        yield found
    finally:
        for name in names:
            if name in own:
                setattr(DTensor, name, own[name])
            else:
                delattr(DTensor, name)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered whole; any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def checkpoint_errors() -> tuple[type[BaseException], ...]:
    """What a DCP save or load raises: CheckpointException (which collects the ranks' errors) is a
    BaseException, not an Exception."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


def dcp_save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: str) -> None:
    """The model's and optimizer's state, saved with DCP as a training job saves it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    with _step_keyword_closure(optimizer):
        dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)},
                 checkpoint_id=folder)


def dcp_missing_state(error: BaseException) -> bool:
    """Whether DCP's strict optimizer load raised for a param the loaded state holds no entry for
    (torch/distributed/checkpoint/state_dict.py, _split_optim_state_dict): from 2.10 a RuntimeError
    that says so; before, the bare KeyError of indexing the loaded state by the param's name."""
    if "Missing optimizer state for parameter" in str(error):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return isinstance(error, KeyError) and bool(frames) and frames[-1].name == "_split_optim_state_dict"


def dcp_load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: str) -> None:
    """Load a DCP checkpoint into the model and optimizer, resharded to this process group (or to
    this one process, with no process group at all)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)

    with _step_keyword_closure(optimizer):
        state: dict[str, Any] = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)}
        dcp.load(state, checkpoint_id=folder, no_dist=not (dist.is_available() and dist.is_initialized()))
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, optimizer, state["optim"])


@contextlib.contextmanager
def _step_keyword_closure(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """DCP creates an empty optimizer's state with `optimizer.step(closure=None)` (state_dict.py,
    _init_optim_state): a step that takes no closure would fail there for DCP's calling convention,
    not for anything the checkpoint holds. Within, such a step accepts and drops that keyword."""
    import inspect

    step = optimizer.step
    try:
        takes = "closure" in inspect.signature(step).parameters or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(step).parameters.values())
    except (TypeError, ValueError):
        takes = True
    if takes:
        yield
        return

    def step_without_closure(*args: Any, closure: Any = None, **kwargs: Any) -> Any:
        return step(*args, **kwargs)

    own = optimizer.__dict__.get("step")  # an instance's own step (a wrapper set on it) is put back
    optimizer.step = step_without_closure  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del optimizer.step
        else:
            optimizer.step = own  # type: ignore[method-assign]
