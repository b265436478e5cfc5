"""The regimes init probes before writing cases: an lr that moves the params, bf16 params, the state's dtype,
the shapes the step accepts, RNG use."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from ..checks.laws.section import Laws
from ..harness.blame import one_line
from ..harness.builder import step_on_grads
from ..harness.compare import max_movement
from ..harness.snapshot import SEQUENCES
from ..spec.schema import DEFAULT_TOLERANCES
from .probe import _construct, _PROBE_BACKWARD, _PROBE_CLOSURE, _located, _probe_run, _raised_on_purpose, _raising_line, _stepped


_DTYPE_WORDS = re.compile(r"bfloat16|bf16|float16|fp16|half|float32|fp32|float64|dtype|precision", re.IGNORECASE)


def _refuses_dtype(problem: str) -> bool:
    """Whether a probe's error is the optimizer refusing the params' dtype on purpose: its own `raise` or
    `assert` statement, naming dtypes ("SOAP supports float32/float64 parameters"), not an op that failed on them."""
    line = _raising_line(problem).strip()
    return line.startswith(("raise", "assert")) and bool(_DTYPE_WORDS.search(problem.split(", at ")[0] + " " + line))


MOVEMENT = 20.0  # tolerances the params must move (model: two steps; laws: their steps): twice the checks' min_movement
# Past the cap (`most`: SGD-like steps diverge at 0.1 over the in-backward checks' six steps), lr is raised up to this
# only while the params move under the checks' min_movement (MOVEMENT / 2), more at each lr, and never past BEYOND_CAP
# tolerances (vissl's LARS moved 17.7 at the cap and 177 at 1.0, where law descent broke; it was green at 0.1): a step scaled
# by a trust ratio (mmpretrain's LARS: lr x eta x |w| / |g|, eta 1e-3) moves 1 tolerance at lr 0.01, and its items
# were vacuous at the cap
SCALE_FREE_MOST = 1.0
BEYOND_CAP = 10 * MOVEMENT


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


def _state_tensors(state: Any) -> list[torch.Tensor]:
    """Every tensor in the optimizer's state, however it nests it (dicts, lists, a tensor as a
    param's whole state); a tensor's own `.values()` (sparse layouts) is not a container's."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _state_tensors(v)]
    if isinstance(state, SEQUENCES):
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
    """(lr, note): the smallest of lr, 10 lr, ... (up to `most`, past it as SCALE_FREE_MOST says) at which the
    params move MOVEMENT default tolerances (see _movement), so the checks compare a step that did something (an
    optimizer idle on its first step, or one whose step grows from a tiny d0, barely moves at a small lr)."""
    tried: list[str] = []
    movements: list[float | None] = []
    while True:
        moved = _movement(cls, form, factory, lr, dtype)
        before = movements[-1] if movements else None
        if before is not None and lr > most * (1 + 1e-9) and not (moved is not None and before < moved <= BEYOND_CAP):
            lr = float(f"{lr / 10:g}")  # past the cap it raised nothing, or moved too far: the lr before stands
            moved = before
            break
        movements.append(moved)
        tried.append(f"{lr:g}: {moved:.3g}" if moved is not None else f"{lr:g}: raised")
        if moved is None or moved >= MOVEMENT or lr * 10 > SCALE_FREE_MOST * (1 + 1e-9):
            break
        if lr * 10 > most * (1 + 1e-9) and not (moved and moved < MOVEMENT / 2):
            break  # past the cap only where the checks would call every comparison vacuous (under their min_movement)
        lr = float(f"{lr * 10:g}")
    if len(tried) == 1 and moved is not None and moved >= MOVEMENT:
        return lr, ""
    if moved is not None and moved >= MOVEMENT:
        return lr, f"raised until the params move {MOVEMENT:g} tolerances, the model's and the laws' (lr: tolerances {', '.join(tried)})"
    if moved is None and len(tried) == 1:  # what raised is said where the spec's first step is probed
        return lr, "its step raised at this lr, so how far it moves the params is unknown"
    if all(m == 0 for m in movements):  # no lr moves them: its step wants more than grads (DeepSpeed's ZenFlow)
        if dtype != torch.float32 and _movement(cls, form, factory, lr, torch.float32):
            # it steps, by less than the dtype resolves: mmpretrain's LARS, a relative step of lr x eta (1e-3)
            return lr, (f"its updates round away at every lr tried ({', '.join(tried)}), where float32 params move: each "
                        f"is under {str(dtype).removeprefix('torch.')}'s resolution, as pure-{str(dtype).removeprefix('torch.')} "
                        "training with it would be; until this case's lr moves its params, its items are vacuous (skipped "
                        "and counted): raise it, or drop the case")
        return lr, _unmoved(f"at every lr tried ({', '.join(tried)})")
    return lr, (f"the params move under {MOVEMENT:g} tolerances at every lr tried (lr: tolerances "
                f"{', '.join(tried)}): raise lr or steps, or the checks will call their comparisons vacuous")


def _unmoved(where: str) -> str:
    return (f"its steps left every param bitwise unchanged {where}: it does not step params given only their grads, as "
            "torch.optim's are (it may step only params a framework marks, or wait for state it is handed, or do nothing "
            "on purpose); fill in what it needs, else each case is one red, 'the optimizer's step moved nothing'")


def _unmoved_without_lr(cls: type, form: Any, factory: Any, dtype: torch.dtype = torch.float32) -> str:
    """The note for a constructor without lr whose defaults step no param at all (llm-foundry's NoOp), else ''."""
    moved, problem = _stepped(cls, form, {}, factory, steps=2, dtype=dtype)
    return _unmoved("with its defaults") if problem is None and moved == 0 else ""


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
            optimizer = _construct(cls, form, model, {"lr": lr})
            for _ in range(Laws.model_fields["steps"].default):
                for p in model.parameters():
                    p.grad = torch.randn_like(p)
                step_on_grads(optimizer, model.parameters(), with_closure)
        except Exception:  # noqa: BLE001  # the model probe's own run reports what the step raised
            continue
        tolerance = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")]
        return max_movement(before, {n: p.detach() for n, p in model.named_parameters()}, tolerance)
    return None


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
        step_on_grads(_construct(cls, form, params, {**base, "lr": 0.0}), params, needs_closure, _PROBE_BACKWARD.get())
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
        step_on_grads(_construct(cls, form, params, kwargs), params, needs_closure, _PROBE_BACKWARD.get())
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
