"""One eager run of the law params, watched from outside the optimizer, that several laws of round
two judge (issue 34): what the step did to the grads it was given, what `step(closure)` returned,
the size of the state it keeps, whether it drew from Python's or NumPy's global RNG, and which step
and state_dict hooks fired. A second, identical run is the determinism law's twin."""

from __future__ import annotations

import contextlib
import pickle
import random
import sys
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .blame import optimizer_frame, told
from .builder import backward_flag, law_closure, make_optimizer, require_graph_free_grads, step_grad_mode
from .devices import seed_all
from .isolation import isolated_case
from ..spec.schema import Tolerance
from .compare import max_movement
from .law_runs import copy_params, law_grads, law_params, lr_probes
from .snapshot import OptimizerSnapshot, per_param_state, snapshot

MARKER = "optimtest_state_dict_hook"  # what our state_dict post-hook adds, and the load pre-hook must see
SIZE_DEPTH = 4  # how deep state containers are walked for their sizes


@dataclass
class Observation:
    """What one run of the case's optimizer did, step by step."""

    steps: int
    closure_steps: list[int] = field(default_factory=list)  # 0-based steps that passed a closure
    grad_problems: list[str] = field(default_factory=list)  # "step 2: 'weight'.grad ..." in the order seen
    grads_checked: int = 0
    grad_writes: list[str] = field(default_factory=list)  # "clamp_ at file:line in step": where the grads were written
    returned: list[tuple[int, Any, list[Any]]] = field(default_factory=list)  # (step, step's return, closure's returns)
    sizes: list[dict[str, int]] = field(default_factory=list)  # after each step: state path -> bytes or length
    rng_used: list[str] = field(default_factory=list)  # "step 1 drew from Python's random", ...
    rng_reseeded: list[str] = field(default_factory=list)  # "step 1 reseeded NumPy's global RNG": its stream reset, none drawn
    torch_rng_used: bool = False  # a step drew from torch's RNG (runs over other params draw in another order)
    numpy_checked: bool = False
    hook_calls: list[str] = field(default_factory=list)  # "pre 0", "post 0", ... ("step_hooks" absent: no such API)
    state_dict_hooks: dict[str, Any] = field(default_factory=dict)
    hooks_supported: bool = True
    initial: dict[str, torch.Tensor] = field(default_factory=dict)
    final: OptimizerSnapshot | None = None


@dataclass
class ObservedRun:
    """The observed run and its twin (same seed, same grads, a fresh optimizer), and the multiple
    of the case's lr they ran at (the first of LR_PROBES that moved the params `floor` tolerances)."""

    run: Observation
    twin: Observation
    lr_factor: float = 1.0


def observed_run(case: Any, steps: int, min_ndim: int, tol: Tolerance, floor: float) -> ObservedRun:
    """Two identical eager runs of `steps` steps over the law params (no empty one), every param
    with a grad at every step. A step that takes an optional closure gets one at every odd step
    (both paths are users'), a step that requires one at every step. Where the params move less
    than `floor` tolerances, the runs are redone at a larger lr (LR_PROBES), so that what the laws
    compare is evidence."""
    observed = _observed(case, steps, min_ndim)
    for factor, scaled in lr_probes(case)[1:]:
        if observed.run.final is not None and max_movement(observed.run.initial, observed.run.final.params, tol) >= floor:
            break
        try:
            observed = _observed(scaled, steps, min_ndim)
        except Exception:  # a larger lr the optimizer refuses: the laws judge the run at the last lr it took
            break
        observed.lr_factor = factor
    return observed


def _observed(case: Any, steps: int, min_ndim: int) -> ObservedRun:
    numpy = _numpy()  # imported first, so that isolated_case restores its global RNG (and Python's) as the user left them
    with isolated_case(case):
        params = law_params(case, min_ndim, empty=False)
        grads = law_grads(case, steps, params, scheduled=False)
        twin = _observe(case, params, grads, numpy)  # first: the hooks probe's load_state_dict may touch shared defaults
        run = _observe(case, params, grads, numpy, probe_hooks=True)
        if run.grad_problems:  # where: a third run, with every in-place write to a grad watched
            run.grad_writes = _grad_writes(case, params, grads, numpy)
        return ObservedRun(run, twin)


def _grad_writes(case: Any, params: dict[str, torch.nn.Parameter], grads: list[dict[str, Any]],
                 numpy: ModuleType | None) -> list[str]:
    """Where the step wrote its grads; [] where the watched run cannot tell (a step that compiles itself
    may not trace under the watching mode): the verdict stands without the where."""
    try:
        return _observe(case, params, grads, numpy, watch_grads=True).grad_writes
    except Exception:  # noqa: BLE001 - only the diagnosis is lost
        return []


def _numpy() -> ModuleType | None:
    """NumPy where installed: torch does not require it, so it is imported here, only when a law runs."""
    if "numpy" in sys.modules:
        return sys.modules["numpy"]
    try:
        import numpy  # optional: only to watch its global RNG
    except ImportError:
        return None
    return numpy


def _observe(case: Any, params: dict[str, torch.nn.Parameter], grads: list[dict[str, Any]],
             numpy: ModuleType | None, watch_grads: bool = False, probe_hooks: bool = False) -> Observation:
    require_graph_free_grads(case.backward)
    own = copy_params(params)
    optimizer = make_optimizer(case, list(own.items()))
    names: dict[torch.Tensor, str] = {p: n for n, p in own.items()}
    seen = Observation(steps=len(grads), numpy_checked=numpy is not None, initial=snapshot(optimizer, names).params)
    seen.hooks_supported = all(hasattr(optimizer, h) for h in ("register_step_pre_hook", "register_step_post_hook"))
    if seen.hooks_supported:
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.hook_calls.append(f"pre {len(seen.sizes)}"))
        optimizer.register_step_post_hook(lambda opt, args, kwargs: seen.hook_calls.append(f"post {len(seen.sizes)}"))
    optional, required = law_closure(case, type(optimizer))
    for index, step_grads in enumerate(grads):
        with_closure = required or (optional and index % 2 == 1)
        feed = _Feed(own, step_grads)
        if not with_closure:
            feed.give()
        seed_all(case.seed + 1 + index, case)
        _unseeded_global_rngs(numpy, case.seed + 1 + index)
        before, torch_before = _rng_states(numpy), _torch_rng(case.device)
        watch = _GradWrites(feed) if watch_grads else contextlib.nullcontext()
        with step_grad_mode(case), watch:
            returned = optimizer.step(feed.closure) if with_closure else optimizer.step()  # type: ignore[arg-type]
        if isinstance(watch, _GradWrites):
            seen.grad_writes += [w for w in watch.writes if w not in seen.grad_writes]
        for what in _rng_changes(before, _rng_states(numpy)):
            if _freshly_seeded(what, numpy):
                seen.rng_reseeded.append(f"step {index + 1} reseeded {what}")
            else:
                seen.rng_used.append(f"step {index + 1} drew from {what}")
        seen.torch_rng_used |= not torch.equal(torch_before, _torch_rng(case.device))
        if with_closure:
            seen.closure_steps.append(index)
            seen.returned.append((index, returned, feed.returns))
        seen.grad_problems += _grad_changes(index, own, feed.given, step_grads)  # given afresh from step_grads each time
        seen.grads_checked += len(feed.given)
        seen.sizes.append(state_sizes(optimizer, names))
    seen.final = snapshot(optimizer, names)
    if seen.hooks_supported and probe_hooks:
        seen.state_dict_hooks = _state_dict_hooks(case, optimizer, own)
    return seen


class _Feed:
    """One step's grads, given to the params (again at each call of the closure, as a closure's
    backward would), and what the closure returned each time."""

    def __init__(self, own: dict[str, torch.nn.Parameter], grads: dict[str, Any]) -> None:
        self.own, self.grads = own, grads
        self.given: dict[str, torch.Tensor] = {}
        self.returns: list[Any] = []

    def give(self) -> None:
        for name, p in self.own.items():
            self.given[name] = p.grad = self.grads[name].clone()

    def closure(self, *args: Any, **named: Any) -> torch.Tensor:
        if backward_flag(args, named):
            self.give()
        loss = sum(((p.detach().double() * self.grads[n].double()).sum() for n, p in self.own.items()),
                   torch.zeros((), dtype=torch.float64))
        self.returns.append(loss)
        return loss


class _GradWrites(TorchFunctionMode):
    """Records where the step calls an in-place op (or `out=`) on a grad it was given."""

    def __init__(self, feed: _Feed) -> None:
        super().__init__()
        self.feed = feed
        self.writes: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():  # inside a step that compiles itself: not traceable, let it through
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if (name.endswith("_") and not name.startswith("_")) or name.startswith("_foreach_") and name.endswith("_") \
                or name == "__setitem__" or "out" in kwargs:
            given = {id(g) for g in self.feed.given.values()}
            first = args[0] if args else None
            targets = list(first) if isinstance(first, (list, tuple)) else [first]
            targets += list(kwargs["out"]) if isinstance(kwargs.get("out"), (list, tuple)) else [kwargs.get("out")]
            if any(id(t) in given for t in targets if t is not None):
                where = optimizer_frame(traceback.extract_stack())
                write = f"{name} at {where}" if where else name
                if write not in self.writes:
                    self.writes.append(write)
        return func(*args, **kwargs)


def _grad_changes(index: int, own: dict[str, torch.nn.Parameter], given: dict[str, torch.Tensor],
                  values: dict[str, Any]) -> list[str]:
    """What the step did to the grads it was given (none, where it never called its closure)."""
    problems = []
    for name, grad in given.items():
        p = own[name]
        if p.grad is None:
            problems.append(f"step {index + 1}: {name!r}.grad was set to None")
        elif p.grad is not grad:
            problems.append(f"step {index + 1}: {name!r}.grad was replaced by another tensor")
        elif not _same(p.grad, values[name]):
            diff = (p.grad.double() - values[name].double()).abs().nan_to_num(nan=float("inf")).max().item()
            problems.append(f"step {index + 1}: {name!r}.grad was written in place (max abs change {diff:.3g})")
    return problems


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN where NaN was (a step may not touch a grad, even where it is NaN)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _torch_rng(device: str) -> torch.Tensor:
    """The state of torch's generator that a step on `device` draws from."""
    return torch.cuda.get_rng_state() if device.startswith("cuda") else torch.get_rng_state()


def _unseeded_global_rngs(numpy: ModuleType | None, seed: int) -> None:
    """Python's and NumPy's global RNGs set, before a step, to states no seed() call makes (seeded, then one
    draw): a step that reseeds them is seen at every step. SaLSA seeds NumPy's with int(time.time()), which
    left the state as it found it whenever its last step fell in the same second: a verdict that came and went."""
    random.seed(seed)
    random.random()
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
        numpy.random.random_sample()


def _freshly_seeded(what: str, numpy: ModuleType | None) -> bool:
    """Whether the global RNG named `what` is as a seed() call leaves it, nothing drawn since (Mersenne
    Twister's position at the end of its 624 words): a step that reset the user's stream without reading it."""
    if what == "Python's random":
        return random.getstate()[1][-1] == 624
    return numpy is not None and numpy.random.get_state()[2] == 624


def _rng_states(numpy: ModuleType | None) -> dict[str, bytes]:
    states = {"Python's random": pickle.dumps(random.getstate())}
    if numpy is not None:
        states["NumPy's global RNG"] = pickle.dumps(numpy.random.get_state())
    return states


def _rng_changes(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return [name for name, state in before.items() if after.get(name) != state]


def state_sizes(optimizer: Any, names: dict[Any, str]) -> dict[str, int]:
    """Bytes of every tensor and the length of every container the optimizer keeps, by path: its
    per-param state, and its own attributes (less param_groups and defaults)."""
    by_id = {id(p): n for p, n in names.items()}
    sizes: dict[str, int] = {}
    for position, (key, value) in enumerate(per_param_state(optimizer).items()):
        _walk(value, f"state[{by_id.get(id(key), f'#{position}')!r}]", sizes, SIZE_DEPTH)
    for name, value in vars(optimizer).items():
        if name not in ("state", "param_groups", "defaults"):
            _walk(value, f"self.{name}", sizes, SIZE_DEPTH)
    return sizes


def _walk(value: Any, path: str, sizes: dict[str, int], depth: int) -> None:
    if isinstance(value, torch.Tensor):
        sizes[path] = value.numel() * value.element_size()
    elif isinstance(value, dict):
        sizes[f"len({path})"] = len(value)
        for key, item in list(value.items())[:1000] if depth else ():
            _walk(item, f"{path}[{key!r}]" if isinstance(key, (str, int)) else f"{path}[{type(key).__name__}]", sizes, depth - 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        sizes[f"len({path})"] = len(value)
        if depth and not isinstance(value, (set, frozenset)):
            for position, item in enumerate(list(value)[:1000]):
                _walk(item, f"{path}[{position}]", sizes, depth - 1)


def _state_dict_hooks(case: Any, optimizer: Any, own: dict[str, torch.nn.Parameter]) -> dict[str, Any]:
    """Whether state_dict's pre and post hooks and load_state_dict's pre and post hooks ran, and
    whether what the post hook added reached load_state_dict's pre hook. 'error': a call raised;
    'unregistered': registering a hook raised."""
    calls: dict[str, Any] = {"state_dict_pre": 0, "state_dict_post": 0, "load_pre": 0, "load_post": 0,
                             "marker_reached_load": False}
    for hook in ("register_state_dict_pre_hook", "register_state_dict_post_hook", "register_load_state_dict_pre_hook",
                 "register_load_state_dict_post_hook"):
        if not hasattr(optimizer, hook):
            return {"unsupported": hook}

    def post(opt: Any, state: dict[str, Any]) -> dict[str, Any]:
        calls["state_dict_post"] += 1
        return {**state, MARKER: True}

    def load_pre(opt: Any, state: dict[str, Any]) -> dict[str, Any]:
        calls["load_pre"] += 1
        calls["marker_reached_load"] = MARKER in state
        return {k: v for k, v in state.items() if k != MARKER}

    try:
        handles = [optimizer.register_state_dict_pre_hook(lambda opt: calls.__setitem__("state_dict_pre", calls["state_dict_pre"] + 1)),
                   optimizer.register_state_dict_post_hook(post)]
    except Exception as exc:  # noqa: BLE001  # timm's Lookahead skips Optimizer.__init__, whose hook dicts these write
        return {"unregistered": told(exc)}  # law hooks' finding, with blame's why; the run every law shares goes on
    try:
        state = optimizer.state_dict()
        calls["marker_in_state_dict"] = MARKER in state
        fresh = make_optimizer(case, list(copy_params(own).items()))
        fresh.register_load_state_dict_pre_hook(load_pre)
        fresh.register_load_state_dict_post_hook(lambda opt: calls.__setitem__("load_post", calls["load_post"] + 1))
        fresh.load_state_dict(state)
    except Exception as exc:  # state_dict's own check owns a state_dict that cannot round-trip
        calls["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for handle in handles:
            handle.remove()
    return calls
