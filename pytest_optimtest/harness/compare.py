"""Compare two runs' values and say exactly what differed and where."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..spec.schema import Tolerance
from .snapshot import SEQUENCES, is_numpy, own_object, stateful


LABELS = ("eager", "compiled")


def tensor_difference(where: str, expected: torch.Tensor, actual: torch.Tensor, tol: Tolerance,
                      labels: tuple[str, str] = LABELS) -> str | None:
    """None when close; otherwise which element differs and by how much. `labels` name the two runs."""
    ref, new = labels
    if expected.shape != actual.shape:
        return f"{where}: shape {tuple(actual.shape)} != {ref} {tuple(expected.shape)}"
    if expected.dtype != actual.dtype:
        return f"{where}: dtype {actual.dtype} != {ref} {expected.dtype}"
    if expected.numel() == 0:
        return None
    e, a = expected.detach().double().cpu(), actual.detach().double().cpu()
    same = (e == a) | (e.isnan() & a.isnan())  # equal infinities too: inf - inf is NaN
    abs_diff = (e - a).abs().masked_fill(same, 0).nan_to_num(nan=float("inf"))
    allowed = tol.atol + tol.rtol * e.abs()
    bad = abs_diff > allowed
    if not bad.any() or _within_error_rate(bad, abs_diff, e, tol):
        return None
    rel_diff = abs_diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(abs_diff.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape)) if e.dim() else ()
    return (
        f"{where}: {int(bad.sum())}/{e.numel()} elements differ; max abs diff {abs_diff.max().item():.3g} "
        f"at index {index} ({ref} {e.flatten()[worst].item():.8g}, {new} {a.flatten()[worst].item():.8g}), "
        f"max rel diff {rel_diff.max().item():.3g}; allowed atol={tol.atol:g} rtol={tol.rtol:g}"
        + (f", {tol.error_rate:g} of the elements at the tensor's scale" if tol.error_rate else "")
    )


def _within_error_rate(bad: torch.Tensor, abs_diff: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> bool:
    """The elements beyond tolerance are at most `error_rate` of the tensor, each within
    tolerance of the tensor's largest magnitude (see Tolerance)."""
    if not tol.error_rate or int(bad.sum()) > int(tol.error_rate * expected.numel()):
        return False
    return bool((abs_diff <= tol.atol + tol.rtol * expected.abs().max()).all())


def value_differences(where: str, expected: Any, actual: Any, tol: Tolerance,
                      labels: tuple[str, str] = LABELS) -> list[str]:
    """All differences between two (nested) values; tensors within tolerance, the rest exactly."""
    ref, new = labels
    if _scalar_pair(expected, actual):  # a 0-d tensor and a number alike (torch's Adam.__setstate__ makes an int
        return value_differences(where, float(expected), float(actual), tol, labels)  # 'step' a tensor on load)
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return [f"{where}: {new} {_short(actual)} but {ref} {_short(expected)}"]
        found = tensor_difference(where, expected, actual, tol, labels)
        return [found] if found else []
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}[{k!r}]: missing in {new} run" for k in expected if k not in actual]
        out += [f"{where}[{k!r}]: only in {new} run" for k in actual if k not in expected]
        for key in [k for k in expected if k in actual]:
            out += value_differences(f"{where}[{key!r}]", expected[key], actual[key], tol, labels)
        return out
    if isinstance(expected, SEQUENCES) and isinstance(actual, SEQUENCES):
        if len(expected) != len(actual):
            return [f"{where}: {len(actual)} items in the {new} run, {len(expected)} in the {ref} run"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in value_differences(f"{where}[{i}]", e, a, tol, labels)]
    if is_numpy(expected) or is_numpy(actual):  # NumPy values (RMSGD keeps its metrics in arrays): compared as tensors
        with contextlib.suppress(TypeError, ValueError, RuntimeError):  # an object array is compared as any object below
            return value_differences(where, torch.as_tensor(expected), torch.as_tensor(actual), tol, labels)
    if isinstance(expected, float) and isinstance(actual, float):
        ok = expected == actual or (expected != expected and actual != actual) \
            or abs(expected - actual) <= tol.atol + tol.rtol * abs(expected)
        return [] if ok else [f"{where}: {new} {actual!r} != {ref} {expected!r}"]
    if stateful(expected) and type(expected) is type(actual):
        return value_differences(f"{where}.state_dict()", expected.state_dict(), actual.state_dict(), tol, labels)
    if _by_identity(expected) and type(expected) is type(actual):  # two runs' objects are never the same object:
        return value_differences(f"{where}.__dict__", _state(expected), _state(actual), tol, labels)  # compare state
    return [] if _equal(expected, actual) else [f"{where}: {new} {_short(actual)} != {ref} {_short(expected)}"]


def _scalar_pair(expected: Any, actual: Any) -> bool:
    """One side a 0-d real tensor, the other a Python int or float: the same number either way."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def scalar(v: Any) -> bool:
        return isinstance(v, torch.Tensor) and v.dim() == 0 and not v.is_complex() and v.dtype != torch.bool
    return (scalar(expected) and number(actual)) or (number(expected) and scalar(actual))


def _equal(expected: Any, actual: Any) -> bool:
    """`==`, where a value's `==` may answer elementwise (an array-like of a package's own)."""
    result = expected == actual
    if isinstance(result, bool):
        return result
    try:
        return bool(result)
    except (TypeError, ValueError, RuntimeError):  # an ambiguous truth value: equal where every element is
        return all(bool(x) for x in getattr(result, "flat", result))


def _by_identity(value: Any) -> bool:
    """An instance whose class keeps object's identity equality and whose state is plain data to
    compare instead (a schedule object in a param group, say; one level deep, so no cycle is followed)."""
    return own_object(value) and not any(hasattr(field, "__dict__") and not isinstance(field, torch.Tensor)
                                         for field in _state(value).values())


def _state(value: Any) -> dict[str, Any]:
    """An object's fields, less its callables (behaviour, often bound to the object itself)."""
    return {name: field for name, field in vars(value).items() if not callable(field)}


def non_finite(params: dict[str, torch.Tensor]) -> list[str]:
    """Names of params holding NaN or inf: a diverged run compares NaN with NaN, vacuously."""
    return [n for n, p in params.items() if p.is_floating_point() and not bool(p.isfinite().all())]


def max_movement(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], tol: Tolerance) -> float:
    """Largest parameter change over all elements, in units of the comparison tolerance."""
    best = 0.0
    for name, b in before.items():
        if b.numel() == 0:
            continue
        b64, a64 = b.double().cpu(), after[name].double().cpu()
        ratio = ((a64 - b64).abs() / (tol.atol + tol.rtol * b64.abs()).clamp_min(1e-30)).nan_to_num(nan=0.0, posinf=1e30)
        best = max(best, float(ratio.max()))
    return best


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


# Keys dynamo itself writes into param groups it traces: OptimizerVariable._set_capturable in
# torch/_dynamo/variables/optimizer.py sets 'capturable' = True on the groups of a CUDA optimizer
# whose state is not yet created (eager keeps False), and on every group's tracker, so a step that
# writes anything into a group gets the whole dict written back, that key included (even on CPU).
DYNAMO_GROUP_KEYS = {"capturable": True}
_ABSENT = object()


def _dynamo_wrote(key: str, value: Any) -> bool:
    """Whether a group's `value` at `key` is what dynamo writes there (by type first: a group may hold
    anything, an array whose `==` answers elementwise included)."""
    written = DYNAMO_GROUP_KEYS.get(key, _ABSENT)
    return written is not _ABSENT and type(value) is type(written) and value == written


def dynamo_group_keys(eager: Any, compiled: Any) -> list[str]:
    """The group keys where the compiled run holds the value dynamo writes and eager does not: torch's doing."""
    return [f"param_groups[{i}][{key!r}]" for i, (e, c) in enumerate(zip(eager.groups, compiled.groups))
            for key in DYNAMO_GROUP_KEYS if _dynamo_wrote(key, c.get(key, _ABSENT)) and not _dynamo_wrote(key, e.get(key, _ABSENT))]


def group_differences(reference: list[dict[str, Any]], other: list[dict[str, Any]], tol: Tolerance,
                      labels: tuple[str, str] = LABELS) -> list[str]:
    """Differences between two runs' param groups; a key that dynamo writes (see DYNAMO_GROUP_KEYS)
    where the other run holds its value and the reference does not is torch's, not the optimizer's."""
    groups = [{k: (e[k] if k in e else v) if _dynamo_wrote(k, v) else v for k, v in c.items() if k in e or not _dynamo_wrote(k, v)}
              for e, c in zip(reference, other)] + other[len(reference):]
    return value_differences("param_groups", reference, groups, tol, labels)


def snapshot_differences(eager: Any, compiled: Any, tol: Tolerance, labels: tuple[str, str] = LABELS) -> list[str]:
    """Every difference between two OptimizerSnapshots (or anything with params, state, groups
    and optionally attrs): the one comparison every check makes between two runs."""
    return (
        value_differences("param", eager.params, compiled.params, tol, labels)
        + value_differences("state", eager.state, compiled.state, tol, labels)
        + group_differences(eager.groups, compiled.groups, tol, labels)
        + value_differences("optimizer attribute", *_run_attributes(eager, compiled), tol, labels)
    )


def instance_attributes(eager: Any, compiled: Any) -> set[str]:
    """The attributes two runs' constructors set to different scalars: they name the instance, not its run
    (DeepSpeed's `opt_id`, a count of the optimizers made, which its C++ kernels key their state by)."""
    first, second = getattr(eager, "constructed", {}), getattr(compiled, "constructed", {})
    return {k for k in first.keys() & second.keys() if not _equal(first[k], second[k])}


def _run_attributes(eager: Any, compiled: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both snapshots' attributes, less those that name the instance."""
    named = instance_attributes(eager, compiled)
    first, second = getattr(eager, "attrs", {}), getattr(compiled, "attrs", {})
    return {k: v for k, v in first.items() if k not in named}, {k: v for k, v in second.items() if k not in named}


def median_ratio(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float | None:
    """The median over the elements of the tensors both hold of other / reference (where reference is not
    ~0): how two runs' values relate when one is a multiple of the other (gradients summed, not averaged)."""
    pairs = [(reference[n].double().flatten(), other[n].double().flatten()) for n in reference
             if n in other and reference[n].shape == other[n].shape]
    if not pairs:
        return None
    w, s = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
    kept = w.abs() > 1e-6 * w.abs().max()
    return float((s[kept] / w[kept]).median()) if kept.any() else None


def listed(problems: list[str], limit: int = 8) -> str:
    """Problems one a line, at most `limit` of them."""
    shown = problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])
    return "\n  " + "\n  ".join(shown)
