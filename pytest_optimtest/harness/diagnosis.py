"""When a compiled step differs from eager, name the known mechanisms and whose doing they are.

Each diagnosis is one line for the failure and the JSON report. What is looked for:
- a compiled state tensor that shares storage with a grad or a param where eager's does not
  (the compiled step handed back an input as a new buffer: torch's doing);
- an optimizer that draws from the global RNG while it is compiled without fallback_random
  (inductor's RNG differs from eager's by design: the spec should set fallback_random), and
  whether the run with fallback_random then matches;
- optimizer attributes the compiled run lacks or left stale, where the installed torch's dynamo
  drops attribute writes on a torch.optim.Optimizer (a plain-torch probe tells: torch's doing);
- state the compiled run lacks, where the optimizer's code calls typing.cast and the installed torch's
  dynamo loses writes into a dict passed through it (a plain-torch probe tells: torch's doing);
- whether the same steps compiled with `aot_eager` (dynamo and AOTAutograd, no inductor) match
  eager: then the difference is inductor's, else it was already in the traced graph.

`python -m pytest_optimtest.harness.diagnosis` runs the plain-torch reproducers on the installed torch.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import typing
from collections import deque
from dataclasses import replace
from typing import Any

import torch

from ..spec.case import shown_path
from ..spec.schema import LOW_PRECISION
from ..spec.values import resolve
from .blame import one_line
from .compare import snapshot_differences, value_differences
from . import torch_api
from .runner import Regime, run
from .snapshot import storage_pointer
from .vacuity import Vacuous


def parity_diagnoses(run: Any) -> list[str]:
    """One line per mechanism found in a compiled run whose snapshots differ; each rerun that
    decides between mechanisms runs here, once, when parity has already failed."""
    if "parity" in run.case.xfail:  # its reason already names the mechanism: no reruns for a verdict nobody reads
        return _storage_and_rng(run, rerun=False)
    aliased = bool(run.compiled_aliases - run.eager_aliases)
    precision = _precision_casts(run)
    found = [line for line in precision if line.startswith("torch's doing")]
    # A finding leads (the first is the case's root cause in one line); "still differs" at bf16 rules one out, no more.
    return [*_storage_and_rng(run), *found, *_dropped_attribute_writes(run), *_state_lost_through_cast(run),
            *_init_group_once(run), *[line for line in precision if line not in found], _aot_eager(run, aliased)]


# Regimes whose reference steps params in another order (all at once, or whole where they step shards): an
# optimizer that draws from torch's global RNG lands its draws on other elements there, so a difference is not a verdict
DRAW_ORDER_REGIMES = ("in_backward", "in_backward_tied", "in_backward_two_optimizers", "in_backward_no_hook", "zero", "fsdp",
                      "checkpoint")
PER_PARAM_REGIMES = (*DRAW_ORDER_REGIMES, "distributed")
STORAGE_SWAP = "its step replaces its params' storage"  # a root cause of every red of those regimes (session.py)
PRECISION_CASTS = "inductor's rounding at low precision"  # a root cause of every compiled regime's red it explains
PRECISION_CASTS_FOUND = ("torch's doing (inductor's rounding at {dtype}): inductor computes the step's pointwise chain in "
                         "float32 and rounds once, eager rounds after every op; run again with emulate_precision_casts=True, "
                         "{check} passes, so the difference is that rounding, not the optimizer's")


STATE_CAST = "torch's load_state_dict casts its state to the params' dtype"  # one red: state_dict's and ZeRO's
STATE_CAST_ON_LOAD = ("\n  diagnosis: torch's Optimizer.load_state_dict casts every state tensor but 'step' (integer ones "
                      "too) to its param's dtype where the param is floating (_process_value_according_to_param_policy), "
                      "so state the optimizer keeps in another dtype than its params (float32 over bf16, an int64 flag) "
                      "comes back in theirs: the optimizer's doing (restore its dtype in a load_state_dict post hook, or "
                      "override load_state_dict)")


STRINGS_LOST = "torch's load_state_dict rebuilds str state as a generator's text"  # one red: state_dict's and ZeRO's
BOUNDS_LOST = "torch's load_state_dict rebuilds a deque without its maxlen"  # one red: state_dict's and ZeRO's


def _indexed(state: Any) -> dict[Any, Any]:
    """Per-param state by its index or key: torch.optim's {index: entry}, or a list of entries (fastai's
    state_dict, an optimizer that is no torch.optim.Optimizer); {} for anything else."""
    if isinstance(state, dict):
        return state
    return dict(enumerate(state)) if isinstance(state, (list, tuple)) else {}


def state_load_rebuilds(state: Any) -> bool:
    """Whether per-param state ({param: {key: value}} or a list of entries, a state_dict's or a snapshot's)
    holds what torch's load_state_dict does not give back: a str, or a deque with a maxlen."""
    return any(isinstance(value, str) or (isinstance(value, deque) and value.maxlen is not None)
               for entry in _indexed(state).values() if isinstance(entry, dict) for value in entry.values())


def _per_param_pairs(saved: Any, loaded: Any) -> list[tuple[str, Any, Any]]:
    """('state[i][key]', saved value, loaded value) for each per-param state entry of the saved state_dict."""
    pairs = []
    for index, entry in _indexed(saved.get("state") if isinstance(saved, dict) else None).items():
        back = _indexed(loaded.get("state") if isinstance(loaded, dict) else None).get(index, {})
        for key, value in entry.items() if isinstance(entry, dict) else ():
            pairs.append((f"state[{index!r}][{key!r}]", value, back.get(key) if isinstance(back, dict) else None))
    return pairs


def strings_lost_on_load(saved: Any, loaded: Any) -> list[str]:
    """'state[i][key]: 'diag' came back as '<generator object ...>'' for each str in the saved state_dict's
    per-param state that the loaded optimizer's state_dict does not give back (`saved`, `loaded`: state_dicts)."""
    return [f"{where}: {value!r} came back as {str(back)[:60]!r}" for where, value, back in _per_param_pairs(saved, loaded)
            if isinstance(value, str) and back != value]


def strings_lost_diagnosis(case_id: str, lost: list[str]) -> str:
    return (f"{case_id}: torch's Optimizer.load_state_dict does not give back the optimizer's str state: "
            f"{_first_three(lost)}. Its _cast (torch/optim/optimizer.py) takes a str "
            "for an Iterable and rebuilds it as str(generator), so a run that loads a checkpoint steps on that text: "
            "torch's doing (the optimizer can keep such a setting in its param groups, which load deep-copies)")


def bounds_lost_on_load(saved: Any, loaded: Any) -> list[str]:
    """'state[i][key]: a deque of maxlen 2 came back with maxlen None' for each bounded deque in the saved
    state_dict's per-param state that the loaded optimizer's state_dict gives back with another bound."""
    return [f"{where}: a deque of maxlen {value.maxlen} came back with maxlen {getattr(back, 'maxlen', None)}"
            for where, value, back in _per_param_pairs(saved, loaded)
            if isinstance(value, deque) and value.maxlen is not None and getattr(back, "maxlen", None) != value.maxlen]


def bounds_lost_diagnosis(case_id: str, lost: list[str]) -> str:
    return (f"{case_id}: torch's Optimizer.load_state_dict does not give back the bound of the optimizer's deque state: "
            f"{_first_three(lost)}. Its _cast (torch/optim/optimizer.py) rebuilds an Iterable as type(value)(generator), "
            "which drops a deque's maxlen, so after a checkpoint is loaded the deque grows past its bound and the steps "
            "differ from a run that never loaded: torch's doing (the optimizer can trim the deque itself, or restore "
            "its maxlen in a load_state_dict post hook)")


def state_lost_on_load(case_id: str, saved: Any, loaded: Any) -> tuple[str, str] | None:
    """(diagnosis, root cause) where torch's load_state_dict did not give back the saved state's str values or
    deque bounds; None where it gave back both."""
    if lost := strings_lost_on_load(saved, loaded):
        return strings_lost_diagnosis(case_id, lost), STRINGS_LOST
    if lost := bounds_lost_on_load(saved, loaded):
        return bounds_lost_diagnosis(case_id, lost), BOUNDS_LOST
    return None


def _first_three(lost: list[str]) -> str:
    return f"{'; '.join(lost[:3])}{f' (and {len(lost) - 3} more)' if len(lost) > 3 else ''}"


def cast_on_load(dtype: str, problems: list[str]) -> list[str]:
    """The differences that are a loaded state tensor in the params' `dtype` where the run that never
    loaded kept another."""
    return [p for p in problems if re.search(rf"\bstate\[.*: dtype torch\.{dtype} != \w+ torch\.", p)]


def guards_a_cast_state_dtype(guard_failures: str) -> bool:
    """Whether dynamo's guard failures include a state tensor's dtype: after a load, the dtype torch's
    load_state_dict cast it to (hakuli's float32 `prev_norm` over bf16 params, rebound float32 by the next step,
    so that only the compiled step's guard sees it)."""
    return _STATE_DTYPE_GUARD.search(guard_failures) is not None


# a state tensor's source, as 2.13 spells it (`...state[list(dict.keys(...state))[0]]['prev_norm']`) or 2.7
# (`dict.__getitem__(...state, list(dict.keys(...state))[0])['prev_norm']`)
_STATE_DTYPE_GUARD = re.compile(r"tensor '.*?\.state\b.*?' dtype mismatch")


def guards_a_group_length(guard_failures: str) -> bool:
    """Whether dynamo's guard failures include a param group's length: a step that tests a key's presence in
    its group (geoopt's `if "step" not in group`) or assigns one of its keys (pyro's ClippedAdam, `group["lr"]
    *= group["lrd"]`) is guarded on how many keys the group holds."""
    return _GROUP_LENGTH_GUARD.search(guard_failures) is not None


_GROUP_LENGTH_GUARD = re.compile(r"len\(\S*param_groups\[\d+\]\) == \d+")

DYNAMO_GROUP_KEY_ON_LOAD = (
    "\n  diagnosis: torch's doing (dynamo), met by this optimizer: dynamo writes `capturable` into the param groups of "
    "every step it compiles (OptimizerVariable._set_capturable), a key this optimizer's groups do not have, so the eager "
    "optimizer's state_dict lacks it; the step tests a key's presence in its groups or assigns one of their keys (the "
    "guard's line above), so dynamo guards each group's length, "
    "which the load shortens (a recompile) and the next compile's write lengthens back (another). Way around: put "
    "`capturable: False` in the defaults the optimizer passes torch.optim.Optimizer, or keep the key it tests in self.state.")


def ordered_draws(draws: tuple[str, ...]) -> str | None:
    """The RNG whose draws land by step order (torch's global one, or a torch.Generator of the
    optimizer's package), in words; None where the step draws from neither."""
    own = [d.removeprefix("generator ") for d in draws if d.startswith("generator ")]
    if "torch" in draws:
        return "torch's global RNG"
    return f"a torch.Generator of its own package ({', '.join(own)})" if own else None


def run_diagnoses(check: str, run: Any, draws: tuple[str, ...], swapped: tuple[str, ...] = ()) -> list[str]:
    """What the case's runs already show, for a check that failed on it (parity adds its reruns to
    its own message): storage aliasing and RNG use in the shared compiled run (`run`: None for a
    check that compares no compiled values with eager ones), the RNG draw order of the regimes
    that step params one at a time or one shard per rank, and params whose storage the eager step
    replaced (`swapped`), which those regimes hold on to."""
    lines = list(run.diagnoses or _storage_and_rng(run, rerun=False)) if run is not None and check != "parity" else []
    rng = ordered_draws(draws)
    if rng and check in PER_PARAM_REGIMES:
        lines.append(f"the optimizer draws from {rng} (as it makes its state or steps), and {check} steps params in another "
                     "order (one param as its grad is ready, or one shard per rank) than the reference, so the draws "
                     "land on other elements: a difference here may be the draw order, not the optimizer's arithmetic "
                     "(compare with a generator per param, or skip this check with that reason)")
    if swapped and check in PER_PARAM_REGIMES:
        lines.append(f"the optimizer's eager step replaces the storage of {len(swapped)} param(s) ({', '.join(swapped[:3])}"
                     f"{', ...' if len(swapped) > 3 else ''}) with `p.set_()` or `p.data = ...` instead of updating them in place, "
                     f"and {check} holds on to a param's storage or its autograd hooks (DDP's gradient buckets, the hooks that step "
                     "in backward, FSDP2's shards): the optimizer's doing (update in place: `p.copy_(new)`)")
    if "python" in draws:
        lines.append("the optimizer's step draws from Python's global `random`: runs seeded alike by torch.manual_seed "
                     "still differ (seed `random` too, or draw from torch)")
    return lines


def not_comparable(check: str, case_id: str, draws: tuple[str, ...], verdict: AssertionError) -> Vacuous | None:
    """A check's red that proves nothing, as the vacuous skip it is: a per-param regime's difference
    from its reference, for an optimizer that draws from torch's global RNG (strict mode fails it)."""
    rng = ordered_draws(draws)
    if check not in DRAW_ORDER_REGIMES or rng is None:
        return None
    lines = str(verdict).splitlines()
    return Vacuous(f"{case_id}: vacuous: not comparable: the optimizer draws from {rng} (as it makes its state or steps), and "
                   f"{check} steps params in another order than its reference (one param as its grad is ready, or one "
                   f"shard per rank), so the draws land on other elements; what differed: "
                   f"{' '.join(lines[1:2]) or lines[0] if lines else ''}")


def _reproduce(case: Any, check: str = "parity") -> str:
    return f"reproduce: pytest --optim-spec {shown_path(case.spec_path)} -k '{case.id} and {check}'"


def _rerun(case: Any, steps: int, backend: str = "inductor", **inductor_options: Any) -> list[str] | str:
    """Eager vs a compiled run built with `backend` and `inductor_options` (and the case as given,
    e.g. fallback_random flipped), after exactly `steps` steps: the differences, or why it could not
    run. Which change makes the difference go away says whose it is."""
    try:
        eager = run(case, Regime(steps=steps, scheduler=True))
        compiled = run(case, Regime(compiled=True, steps=steps, scheduler=True, backend=backend,
                                    inductor=tuple(inductor_options.items())))
        return snapshot_differences(eager.final, compiled.final, case.tolerance)
    except Exception as exc:  # the rerun is evidence, not the verdict: its failure is reported as such
        return one_line(exc)


def _precision_casts(run: Any) -> list[str]:
    """At bf16/fp16, inductor computes a chain of pointwise ops in float32 and rounds once where eager
    rounds after every op; `emulate_precision_casts` makes it round as eager does. Whether the
    difference goes away with it says whether that is the whole of it.
    A step over float32 params may do low-precision math of its own (Muon's Newton-Schulz in bf16): there
    the rerun is said only where it explains the difference."""
    case = run.case
    low = case.dtype in LOW_PRECISION
    found = _rerun(case, run.steps, emulate_precision_casts=True)
    if isinstance(found, str):
        return [f"compiled with inductor's emulate_precision_casts, the step raised ({found}): no verdict on its rounding"] if low else []
    if not found:
        at = f"at {case.dtype}" if low else f"of the step's own low-precision math (its params are {case.dtype})"
        return [f"torch's doing (inductor's rounding {at}): inductor computes the step's pointwise chain in "
                f"float32 and rounds once, eager rounds after every op; with emulate_precision_casts=True the "
                f"{run.steps} steps match eager, so the difference is that rounding, not the optimizer's; "
                f"{_reproduce(case)}"]
    return [f"with inductor's emulate_precision_casts=True the step still differs ({len(found)} values): more than "
            f"inductor's float32 upcasting at {case.dtype} differs"] if low else []


def rounding_only(run: Any) -> str | None:
    """Where a float32 case's compiled run differs from eager and the same steps over float64 params
    match: the difference scales with precision, so it is rounding (compiled code may round otherwise
    than eager, a fused multiply-add or another reduction order, which torch.compile allows) grown by
    the optimizer's own arithmetic over the steps (ncg's LCG divides by dot products), not a value the
    step computes otherwise. A comparison that proves nothing either way: why, in words; else None."""
    case = run.case
    if case.dtype != "float32" or (run.draws_random and not case.fallback_random) or "parity" in case.xfail:
        return None
    found = _rerun(replace(case, dtype="float64"), run.steps)
    if found != []:
        return None
    return (f"not comparable at float32: over float64 params the compiled {run.steps} steps match eager within the same "
            f"tolerance, so the difference scales with precision: rounding (compiled code may round otherwise than eager, "
            f"e.g. a fused multiply-add or another reduction order, which torch.compile allows), grown over the steps by "
            f"the optimizer's arithmetic; compare fewer steps or widen the case's tolerance in {case.location}; "
            f"{_reproduce(case)}")


def closure_rounding_only(case: Any, draws: tuple[str, ...]) -> str | None:
    """rounding_only for closure_graph_break's runs, which compile the closure too: where a float32 case's
    compiled step(closure) with a graph break differs from eager and over float64 params matches, the
    compiled forward and backward (and step) round otherwise than eager, grown by the optimizer's own
    arithmetic (Shampoo's matrix roots, an accumulator of squared grads); `draws`: the eager run's RNG use."""
    if case.dtype != "float32" or ("torch" in draws and not case.fallback_random):
        return None
    wide = replace(case, dtype="float64")
    try:
        eager = run(wide, Regime(closure=True))
        compiled = run(wide, Regime(compiled=True, closure=True, closure_graph_break=True))
    except Exception:  # noqa: BLE001  # the rerun is evidence, not the verdict: without it the difference stands
        return None
    if snapshot_differences(eager.final, compiled.final, case.tolerance):
        return None
    return ("not comparable at float32: over float64 params the compiled step(closure) with its graph break matches eager "
            "within the same tolerance, so the difference scales with precision: rounding (the compiled closure's forward "
            "and backward, and the step, may round otherwise than eager, which torch.compile allows), grown by the "
            f"optimizer's arithmetic; {_reproduce(case, 'closure_graph_break')}")


def _aot_eager(run: Any, aliased: bool = False) -> str:
    case = run.case
    found = _rerun(case, run.steps, backend="aot_eager")
    if isinstance(found, str):
        return f"compiled with aot_eager instead of inductor, the step raised ({found}): no verdict on inductor"
    if not found:
        return (f"torch's doing (inductor): compiled with aot_eager (dynamo and AOTAutograd, no inductor) the {run.steps} "
                f"steps match eager, so inductor's code generation makes the difference; {_reproduce(case)}")
    ours = {_differing(d) for d in snapshot_differences(run.eager, run.compiled, case.tolerance)} if run.compiled else set()
    theirs = {_differing(d) for d in found}
    if theirs < ours:  # two causes: what aot_eager shares is dynamo's graph, the rest inductor's code
        rest = sorted(ours - theirs)
        return (f"compiled with aot_eager (no inductor) the step differs from eager in {', '.join(sorted(theirs))} alone: "
                f"those are in the graph dynamo traced; the other {len(rest)} values ({', '.join(rest[:3])}"
                f"{', ...' if len(rest) > 3 else ''}) match eager there, so inductor's code makes them: torch's doing "
                f"(inductor); {_reproduce(case)}")
    if aliased:  # the aliasing found above is then made before inductor: one cause, one owner
        return (f"compiled with aot_eager (no inductor) the step differs from eager too ({len(found)} values): the aliasing "
                f"above is made before inductor's code (dynamo and AOTAutograd), torch's doing still; {_reproduce(case)}")
    return (f"compiled with aot_eager (no inductor) the step differs from eager too ({len(found)} values): the difference "
            "is in the graph dynamo traced (a Python effect it did not capture, or the optimizer's reliance on eager-only "
            f"behaviour), not in inductor's code; {_reproduce(case)}")


def _differing(difference: str) -> str:
    """What a difference of snapshot_differences' is about: `param['0.weight']`, `optimizer attribute['n']`."""
    return difference.partition(": ")[0]


def _dropped_attribute_writes(run: Any) -> list[str]:
    """The optimizer attributes that differ between the runs, when the installed torch's dynamo
    drops attribute writes on an optimizer: then those differences are torch's, not the step's."""
    eager, compiled, tol = run.eager.attrs, run.compiled.attrs, run.case.tolerance
    differing = [name for name in sorted(eager.keys() | compiled.keys())
                 if value_differences(name, {name: eager[name]} if name in eager else {},
                                      {name: compiled[name]} if name in compiled else {}, tol)]
    if not differing or not drops_optimizer_attribute_writes():
        return []
    return [f"torch's doing (dynamo): {dropped_writes_in_words()}; the compiled optimizer's {', '.join(differing)} "
            "differ for that reason (and any value the step computes from them with them)"]


def _state_lost_through_cast(run: Any) -> list[str]:
    """State the eager step wrote and the compiled run lacks, where the optimizer's code calls typing.cast
    and the installed torch's dynamo loses writes into a dict passed through it (homeadam's
    `state = cast(dict[str, Any], self.state[p])`): torch's doing, found by a plain-torch probe."""
    eager, compiled = run.eager.state, run.compiled.state
    lost = sorted(f"{name}[{key!r}]" for name, keys in eager.items() for key in keys if key not in compiled.get(name, {}))
    if not lost or not _calls_typing_cast(resolve(run.case.optimizer)) or not loses_writes_through_cast():
        return []
    shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
    return [f"torch's doing (dynamo): the installed torch loses writes into a dict that passed through typing.cast in a "
            f"compiled region (`state = cast(dict, self.state[p]); state['m'] = ...` is never written back), and the "
            f"optimizer's code calls typing.cast: the compiled run lacks the state the eager step wrote ({shown}), and "
            "every value computed from that state differs with it; plain-torch reproducer: python -m "
            "pytest_optimtest.harness.diagnosis; index self.state without the cast (a type annotation says the same)"]


def _calls_typing_cast(optimizer_cls: Any) -> bool:
    """Whether a module defining the optimizer's class or one of its bases calls typing.cast (bound as
    `cast`, or through `typing.`): its source says so."""
    modules = {sys.modules.get(getattr(c, "__module__", "")) for c in getattr(optimizer_cls, "__mro__", ())}
    for module in [m for m in modules if m is not None and not m.__name__.startswith(("torch.", "builtins"))]:
        if not any(value is typing.cast or value is typing for value in vars(module).values()):
            continue  # no source to read where the module binds neither
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            continue
        if _CAST_CALL.search(source):
            return True
    return False


_CAST_CALL = re.compile(r"\b(typing\.)?cast\(")


@functools.cache
def loses_writes_through_cast() -> bool:
    """Plain torch: whether a key set in a compiled function on a dict returned by typing.cast is lost (once a process)."""
    state: dict[str, dict[str, torch.Tensor]] = {"p": {}}
    param = torch.zeros(2)

    def step() -> None:
        entry = typing.cast(dict, state["p"])
        entry["m"] = torch.ones_like(param)
        param.add_(entry["m"])

    with torch_api.trace_log_kept_local():
        torch.compile(step, backend="eager")()
    return "m" not in state["p"]


def _init_group_once(run: Any) -> list[str]:
    """An optimizer of its own with an `_init_group`: dynamo runs that once while tracing, not at every
    compiled step, so per-step work there (ACFGM keeps its previous iterates there) is skipped after the
    first. Rerun with dynamo tracing it like any method: a match says that is the whole difference."""
    optimizer_cls = resolve(run.case.optimizer)
    init_group = getattr(optimizer_cls, "_init_group", None)
    if init_group is None or getattr(init_group, "__module__", "").startswith("torch."):
        return []
    with torch_api.init_group_traced():
        found = _rerun(run.case, run.steps)
    torch_api.reset_compile_state()  # what compiled within keeps tracing _init_group
    if found != []:
        return []
    return [f"torch's doing (dynamo): dynamo runs the optimizer's `_init_group` once, while tracing, not at every compiled "
            f"step (an optimization for torch.optim, whose _init_group only creates state: torch/_dynamo/variables/"
            f"optimizer.py), so the per-step work {optimizer_cls.__name__}._init_group does is skipped after the first "
            f"step; with dynamo tracing it like any method the {run.steps} steps match eager. Move that work into step, "
            f"or keep _init_group to creating state; {_reproduce(run.case)}"]


def dropped_writes_in_words() -> str:
    """What the attribute-write probe found, with its reproducer and the optimizer author's way around it."""
    return ("the installed torch drops attribute writes on a torch.optim.Optimizer inside a compiled region "
            "(`self.n += 1` or `self.x = ...` in step is never written back; dynamo wraps the optimizer without "
            "tracking its attribute mutations; pytorch/pytorch#171590 is the same path); plain-torch reproducer: "
            "python -m pytest_optimtest.harness.diagnosis; keep such values in self.state or a param group, which "
            "dynamo writes back, or set them outside the compiled step")


def raised_attribute_writes_in_words() -> str:
    """What the attribute-write probe found where dynamo raises on the write, with the way around it."""
    return ("the installed torch's dynamo raises on an attribute write on a torch.optim.Optimizer inside a compiled region "
            f"(`self.n += 1` in step: {optimizer_attribute_writes_under_dynamo().removeprefix('raises: ')}); plain-torch "
            "reproducer: python -m pytest_optimtest.harness.diagnosis; keep such values in self.state or a param group, "
            "or set them outside the compiled step")


def drops_optimizer_attribute_writes() -> bool:
    """Plain torch: whether an attribute written on an optimizer in a compiled function is lost (once a process)."""
    return optimizer_attribute_writes_under_dynamo() == "dropped"


@functools.cache
def optimizer_attribute_writes_under_dynamo() -> str:
    """Plain torch, once a process: what becomes of `self.count += 1` in an optimizer's compiled step: "kept",
    "dropped" (never written back: 2.13) or "raises: <error>" (2.10's dynamo asserts "Attempted setattr on a
    user-defined object that does not have an AttributeMutation mutation_type")."""

    class Probe(torch.optim.Optimizer):
        def __init__(self) -> None:
            super().__init__([torch.zeros(1)], {})
            self.count = 0

        def step(self, closure: None = None) -> None:  # type: ignore[override]
            self.count += 1
            self.param_groups[0]["params"][0].add_(1)  # a graph to capture: a frame without one runs eagerly

    probe = Probe()
    try:
        with torch_api.trace_log_kept_local():  # the user's failure reports stay free of torch's trace records
            torch.compile(probe.step, backend="eager")()
    except Exception as error:  # noqa: BLE001  # dynamo's own assertion, whatever its class: the answer, not a failure
        return f"raises: {one_line(error)}"
    return "kept" if probe.count == 1 else "dropped"


def _storage_and_rng(run: Any, rerun: bool = True) -> list[str]:
    lines = []
    aliased = sorted(run.compiled_aliases - run.eager_aliases)
    with_inputs = [alias for alias in aliased if not alias.rsplit(" shares storage with ", 1)[1].startswith("state[")]
    if with_inputs:
        lines.append(f"torch's doing: in the compiled run {_aliases_shown(with_inputs)}, where eager's state does not: the compiled step handed "
                     "an input back as the new state buffer (a buffer made lazily in step, e.g. zeros_like(p) then "
                     "mul_().add_(grad)), so the next grad, or one zeroed in place, rewrites the optimizer's state (and "
                     "where the step rebinds it, the graph compiled while the two aliased reads one for the other); "
                     "plain-torch reproducer: python -m pytest_optimtest.harness.diagnosis")
    between_states = [alias for alias in aliased if alias not in with_inputs]
    if between_states:
        lines.append(f"torch's doing: in the compiled run {_aliases_shown(between_states)}, where eager's state does not: the compiled step made "
                     "those state tensors, which it creates lazily, as one buffer, so a write to one writes them all (a "
                     "per-param counter advances once for every param that shares it), and every difference that follows "
                     "is torch's; plain-torch reproducer: python -m pytest_optimtest.harness.diagnosis")
    if run.draws_random and not run.case.fallback_random:
        found = _rerun(replace(run.case, fallback_random=True), run.steps) if rerun else None
        verdict = ("" if found is None else "; rerun so, it matches eager: the RNG is the whole difference, not the "
                   "optimizer's doing" if found == [] else f"; rerun so, it still differs "
                   f"({found if isinstance(found, str) else f'{len(found)} values'}): more than the RNG differs")
        lines.append("the optimizer draws random numbers in its step, and inductor's RNG is not eager's: set "
                     f"`fallback_random: true` in {shown_path(run.case.spec_path)} to compare them exactly{verdict}")
    return lines


def _aliases_shown(aliases: list[str]) -> str:
    """The first three, as recorded reasons quote them ("...; and 1 more"; _first_three writes "(and 1 more)")."""
    return "; ".join(aliases[:3]) + (f"; and {len(aliases) - 3} more" if len(aliases) > 3 else "")


def _alias_reproducer() -> bool:
    """Plain torch: a momentum buffer created lazily in a compiled step comes back as the grad itself."""
    p = torch.nn.Parameter(torch.ones(4))
    grad = p.grad = torch.full((4,), 2.0)
    state: dict[str, torch.Tensor] = {}

    def step() -> None:
        if "buf" not in state:
            state["buf"] = torch.zeros_like(p)
        state["buf"].mul_(0.9).add_(grad)
        p.data.add_(state["buf"], alpha=-0.1)

    torch.compile(step)()
    return storage_pointer(state["buf"]) == storage_pointer(grad)


def _shared_lazy_state_reproducer() -> bool:
    """Plain torch: whether two counters a compiled step creates after a dynamo-disabled call come back as one
    buffer (torch 2.13's inductor; olmo-core's SkipStepAdamW)."""
    counters: dict[int, torch.Tensor] = {}

    @torch._dynamo.disable()
    def factor() -> torch.Tensor:
        return torch.tensor(1.0)

    def step() -> None:
        f = factor()
        for i in (0, 1):
            if i not in counters:
                counters[i] = torch.zeros(())
            counters[i].add_(f)

    torch_api.reset_compile_state()
    torch.compile(step)()
    torch_api.reset_compile_state()
    return storage_pointer(counters[0]) == storage_pointer(counters[1])


def loses_yield_from_results() -> bool:
    """Plain torch: whether dynamo traces `u = yield from gen()` in a generator driven to its end as u = None
    (the eager result is gen's return value): the TypeError it then meets breaks the graph."""
    return yield_from_under_dynamo() == "lost"


def yield_from_under_dynamo() -> str:
    """Plain torch: what dynamo makes of `u = yield from gen()` in a generator driven to its end: "kept" (gen's
    return value), "lost" (traced as None: a TypeError breaks the graph) or "raises: <dynamo's error>" (torch 2.6:
    InternalTorchDynamoError, "TensorVariable() is not a constant")."""
    def inner(x: torch.Tensor) -> Any:
        yield
        return x * 2

    def outer(x: torch.Tensor, out: list[Any]) -> Any:
        u = yield from inner(x)
        out.append(torch.add(u, 1))

    def step(x: torch.Tensor) -> Any:
        out: list[Any] = []
        for _ in outer(x, out):
            pass
        return out[0]

    torch_api.reset_compile_state()
    try:
        with torch_api.trace_log_kept_local():
            result = torch.compile(step, backend="eager")(torch.ones(2))
        lost = (not torch.equal(result, torch.full((2,), 3.0))
                or any(map(torch_api.fake_call_type_error, (*torch_api.graph_break_counts(), *torch_api.frames_given_up()))))
        outcome = "lost" if lost else "kept"
    except TypeError:  # the None reached an op after the break: the result is lost all the same
        outcome = "lost"
    except Exception as error:  # noqa: BLE001  # dynamo's own error (2.6) or assertion (2.10): the answer, not a failure
        outcome = f"raises: {one_line(error)}"
    torch_api.reset_compile_state()
    return outcome


if __name__ == "__main__":
    shared = _alias_reproducer()
    print(f"torch {torch.__version__}: the compiled step's new momentum buffer "
          + ("shares the grad's storage (the bug is present)" if shared else "has storage of its own (no aliasing)"))
    one_buffer = _shared_lazy_state_reproducer()
    print(f"torch {torch.__version__}: two counters a compiled step makes after a dynamo-disabled call "
          + ("are one buffer (the bug is present)" if one_buffer else "are two buffers (no aliasing)"))
    writes = optimizer_attribute_writes_under_dynamo()
    print(f"torch {torch.__version__}: `self.count += 1` in an optimizer's compiled step "
          + {"dropped": "is lost (the bug is present)", "kept": "is written back (no dropped writes)"}.get(
              writes, f"is not traced: dynamo {writes}"))
    cast_lost = loses_writes_through_cast()
    print(f"torch {torch.__version__}: a key set on `typing.cast(dict, d)` in a compiled function "
          + ("is lost (the bug is present)" if cast_lost else "is written back (no lost writes)"))
    yield_from = yield_from_under_dynamo()
    print(f"torch {torch.__version__}: `u = yield from gen()` in a compiled step "
          + {"lost": "traces u as None, a TypeError that breaks the graph (the bug is present)",
             "kept": "keeps gen's result"}.get(yield_from, f"is not traced: dynamo {yield_from}"))
