"""Kwarg values in specs: plain YAML, plus tagged forms.

- ``{tensor: 0.01}`` or ``{tensor: [0.9, 0.99]}``: a float32 tensor, made on the case's device
- ``{import: "mypkg.mod:attr"}``: a Python object by import path
- ``{call: "mypkg.mod:attr"}``: what calling that object with no arguments returns, made anew for
  every run (an instance such as POGO's `base_optimizer=pogo.base.SGD()`)
- ``{constant: 10}``: a function returning 10 for any argument (LambdaLR's ``lr_lambda``)
- ``{optimizer: "torch.optim.SGD", kwargs: {lr: 0.1}}``: that optimizer over the same params as
  the optimizer under test, built when it is (a wrapper's base optimizer, as SAM's ``optim``);
  `bind_base_optimizers` builds it
- ``{device_mesh: fsdp}``: the DeviceMesh an FSDP2 run shards the params over, None in a run whose
  params are whole (Dion's ``distributed_mesh``, which its step over DTensor params requires)
- ``{process_group: fsdp}``: that mesh's ProcessGroup, None likewise (an argument that takes a
  ProcessGroup and no DeviceMesh: Adams_ZeRO's ``process_group``)

YAML lists become tuples, as PyTorch's optimizers expect (``betas``, ``etas``).
Every call of `build_value` makes new objects, so no two runs share a tensor.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import traceback
from collections.abc import Iterator
from typing import Any

FORMS = ("tensor", "import", "call", "constant", "optimizer", "device_mesh", "process_group")
MESH_FORMS = ("device_mesh", "process_group")  # forms that give an FSDP2 run's mesh (or its group)
MESHES = ("fsdp",)  # what {device_mesh: ...} and {process_group: ...} name: the mesh of FSDP2's runs
_SHARDING_MESH: contextvars.ContextVar[Any] = contextvars.ContextVar("sharding_mesh", default=None)
# how a required argument that is an object, not params, is given (for messages)
KWARG_OBJECTS = ('an object: {import: "pkg.mod:attr"}; an instance: {call: "pkg.mod:factory"}; an optimizer over the '
                 'same params: {optimizer: "pkg.mod:Class", kwargs: {...}}')


class BaseOptimizer:
    """A kwarg that is an optimizer over the same params as the optimizer under test: built by
    `bind_base_optimizers` when those params are known."""

    def __init__(self, path: str, kwargs: dict[str, Any]):
        self.path, self.kwargs = path, kwargs

    def build(self, params: list[Any]) -> Any:
        return resolve(self.path)(params, **self.kwargs)

    def __repr__(self) -> str:
        return f"BaseOptimizer({self.path!r}, {self.kwargs!r})"

    def spec_text(self) -> str:
        """The value as a spec gives it."""
        kwargs = ", ".join(f"{name}: {value}" for name, value in self.kwargs.items())
        return f'{{optimizer: "{self.path}", kwargs: {{{kwargs}}}}}'


# What init proposes, and a load error suggests, for the optimizer a wrapper wraps: SGD at the lr torch.optim's tests step
DEFAULT_BASE = BaseOptimizer("torch.optim.SGD", {"lr": 0.01})


def wrapped_optimizer_argument(cls: Any) -> str | None:
    """The name of `cls`'s first argument where it is the optimizer instance a wrapper wraps (Lookahead's
    `base_optimizer`, Magma's `optimizer: Optimizer`): required, and its name or annotation says so."""
    first = next(iter(inspect.signature(cls).parameters.values()), None)
    if first is None or first.default is not first.empty:
        return None
    annotated = inspect.isclass(first.annotation) and any(base.__name__ == "Optimizer" for base in first.annotation.__mro__)
    return first.name if annotated or "optim" in first.name.lower() else None


@contextlib.contextmanager
def sharding_mesh(mesh: Any) -> Iterator[None]:
    """`{device_mesh: fsdp}` builds `mesh` in the block (an FSDP2 run's; None: params whole)."""
    token = _SHARDING_MESH.set(mesh)
    try:
        yield
    finally:
        _SHARDING_MESH.reset(token)


def mesh_arguments(cls: Any) -> list[str]:
    """The constructor's arguments annotated as a DeviceMesh or ProcessGroup (Dion's `distributed_mesh`,
    its legacy `outer_shard_mesh`): where an FSDP2 run's mesh would go. By the annotation's text: it
    may be a string, and importing torch.distributed is not init's to do."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if "DeviceMesh" in str(p.annotation) or "ProcessGroup" in str(p.annotation)]


def mesh_form(cls: Any, name: str) -> str:
    """The value form that gives argument `name` FSDP2's mesh: `device_mesh` where its annotation takes a
    DeviceMesh (Dion's `DeviceMesh | ProcessGroup`), `process_group` where it takes a ProcessGroup alone."""
    try:
        annotation = str(inspect.signature(cls).parameters[name].annotation)
    except (TypeError, ValueError, KeyError):
        return "device_mesh"
    return "device_mesh" if "DeviceMesh" in annotation or "ProcessGroup" not in annotation else "process_group"


def gives_a_mesh(raw: Any) -> bool:
    """Whether a spec value is one of the forms that give FSDP2's mesh or its group."""
    return isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in MESH_FORMS


class Constant:
    """A picklable ``lambda *_: value`` with a readable repr."""

    def __init__(self, value: Any):
        self.value = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.value

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


def value_problem(raw: Any) -> str | None:
    """Why `raw` is not a valid kwarg value, or None."""
    if isinstance(raw, list):
        return next((p for p in map(value_problem, raw) if p), None)
    if not isinstance(raw, dict):
        return None
    if "optimizer" in raw:
        return _base_optimizer_problem(raw)
    if len(raw) != 1 or next(iter(raw)) not in FORMS:
        return ("a mapping value must be one of {tensor: ...}, {import: ...}, {call: ...}, {constant: ...}, "
                f"{{device_mesh: fsdp}}, {{process_group: fsdp}}, {{optimizer: ..., kwargs: {{...}}}}; got keys {sorted(raw)}")
    form, arg = next(iter(raw.items()))
    if form in MESH_FORMS and arg not in MESHES:
        return f"{{{form}: ...}} takes one of {', '.join(MESHES)} (the mesh FSDP2's runs shard over), got {arg!r}"
    if form == "tensor" and not _is_numeric(arg):
        return f"{{tensor: ...}} takes a number or a (nested) list of numbers, got {arg!r}"
    if form in ("import", "call"):
        try:
            found = resolve(arg)
        except ImportError as exc:
            return str(exc)
        if form == "call" and not callable(found):
            return f"{{call: {arg!r}}} names a {type(found).__name__}, which cannot be called"
    return None


def _base_optimizer_problem(raw: dict[str, Any]) -> str | None:
    if not set(raw) <= {"optimizer", "kwargs"}:
        return f"{{optimizer: ..., kwargs: {{...}}}} takes no other keys; got {sorted(set(raw) - {'optimizer', 'kwargs'})}"
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        return f"{{optimizer: ...}}'s kwargs is a mapping of argument names to values, got {kwargs!r}"
    try:
        found = resolve(raw["optimizer"])
    except ImportError as exc:
        return str(exc)
    if not callable(found):
        return f"{{optimizer: {raw['optimizer']!r}}} names a {type(found).__name__}, which cannot be called"
    return next((p for p in map(value_problem, kwargs.values()) if p), None)


def _is_numeric(arg: Any) -> bool:
    if isinstance(arg, list):
        return all(map(_is_numeric, arg))
    return isinstance(arg, (int, float)) and not isinstance(arg, bool)


def build_value(raw: Any, device: str) -> Any:
    """Materialise a checked spec value; new tensors every call."""
    if isinstance(raw, list):
        return tuple(build_value(v, device) for v in raw)
    if isinstance(raw, dict) and "optimizer" in raw:
        return BaseOptimizer(raw["optimizer"], build_kwargs(raw.get("kwargs", {}), device))
    if isinstance(raw, dict):
        (form, arg), = raw.items()
        if form == "tensor":
            import torch

            return torch.tensor(arg, dtype=torch.float32, device=device)
        if form == "import":
            return resolve(arg)
        if form == "call":
            return resolve(arg)()
        if form == "device_mesh":
            return _SHARDING_MESH.get()
        if form == "process_group":
            mesh = _SHARDING_MESH.get()
            return None if mesh is None else mesh.get_group()
        return Constant(arg)
    return raw


def build_kwargs(raw: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: build_value(v, device) for k, v in raw.items()}


def bind_base_optimizers(kwargs: dict[str, Any], params: list[Any]) -> dict[str, Any]:
    """`kwargs` with each BaseOptimizer built over `params` (a plain list: the optimizer under test's
    param groups are its own dicts, which two optimizers must not share)."""
    return {k: v.build(list(params)) if isinstance(v, BaseOptimizer) else v for k, v in kwargs.items()}


def optimizer_class_problem(path: str, obj: Any) -> str | None:
    """Why what `path` names cannot be a spec's `optimizer` (a class whose instances step), or None."""
    if inspect.isclass(obj):
        step = getattr(obj, "step", None)
        if step is None:
            return f"{path!r} is a class without a `step` method, not an optimizer class"
        if getattr(step, "__module__", "") == "torch.optim.optimizer" and step.__qualname__ == "Optimizer.step":
            updates = _loss_taking_methods(obj)
            if updates:  # LOMO's fused_backward(loss, lr): it updates params in backward hooks, never in step
                return (f"{path!r} does not implement `step`: it updates through {updates[0]}, a protocol of its own "
                        "(the plugin's runs call step(), as torch.optim's training loop does): not supported")
            return f"{path!r} does not implement `step` (torch.optim.Optimizer's raises NotImplementedError): name a subclass that does"
        return None
    if callable(obj):
        return (f"{path!r} is a {type(obj).__name__}, not an optimizer class: name the class whose instances step; a "
                "factory that returns one (absgd's ABSGD returns torch.optim.SGD with momentum 0.9) is specified by "
                "that class and the kwargs the factory passes it")
    return f"{path!r} is a {type(obj).__name__}, not an optimizer class"


def _loss_taking_methods(cls: type) -> list[str]:
    """`name(signature)` of the public methods `cls` defines (not torch.optim.Optimizer) that take a `loss`."""
    found = []
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch.") or klass is object:
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            arguments = [*inspect.signature(member).parameters][1:]
            if "loss" in arguments:
                found.append(f"`{name}({', '.join(arguments)})`")
    return found


class PackageImportFailed(ImportError):
    """A module that raised something other than ImportError while importing (a package built for
    another torch: torchao 0.18 on torch 2.6 calls a `torch.utils._pytree` function 2.6 lacks)."""

    def __init__(self, module_name: str, exc: Exception) -> None:
        import torch  # the release the package failed on, named in the message; torch is imported by now

        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
        first = (str(exc).splitlines() or [""])[0][:300]
        super().__init__(f"importing {module_name} raised {type(exc).__name__}: {first}{where}: the package's doing, not "
                         f"the spec's (a package that does not support torch {torch.__version__} fails so)")


def import_module(name: str) -> Any:
    """importlib.import_module, where any other error than ImportError that the module raises while it
    imports is a PackageImportFailed naming the package's line."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise
    except Exception as exc:  # noqa: BLE001  # whatever the package raises is the package's, said as such
        raise PackageImportFailed(name, exc) from exc


def resolve(path: str) -> Any:
    """'pkg.mod:attr' or 'pkg.mod.attr' -> the object; ImportError with a suggestion otherwise."""
    from .errors import did_you_mean

    if not isinstance(path, str) or not path.strip():
        raise ImportError(f"expected an import path like 'torch.optim.Adam' or 'mypkg.optim:Lion', got {path!r}")
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ImportError(f"expected an import path like 'torch.optim.Adam' or 'mypkg.optim:Lion', got {path!r}")
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import module {module_name!r} for {path!r}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise ImportError(f"{obj.__name__!r} has no attribute {part!r}{did_you_mean(part, public)}")
        obj = getattr(obj, part)
    return obj


@functools.lru_cache(maxsize=1024)
def takes_keyword(cls: type, name: str) -> bool:
    """Whether `cls(...)` accepts the keyword argument `name` (by name, or through **kwargs)."""
    import inspect

    params = inspect.signature(cls).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def base_holding(optimizer_cls: Any, kwargs: dict[str, Any], key: str) -> str | None:
    """The kwarg whose base optimizer (`{optimizer: ..., kwargs: {...}}`) takes `key` where the constructor
    itself does not: a wrapper's lr and momentum are its base's (Lookahead's), so a law that moves them moves them there."""
    if takes_keyword(optimizer_cls, key):
        return None
    return next((name for name, value in kwargs.items()
                 if isinstance(value, dict) and "optimizer" in value and takes_keyword(resolve(value["optimizer"]), key)), None)


def with_kwarg(optimizer_cls: Any, kwargs: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Spec kwargs with `key` set to `value`: the constructor's own, or its base optimizer's (`base_holding`)."""
    base = base_holding(optimizer_cls, kwargs, key)
    if base is None:
        return {**kwargs, key: value}
    inner = kwargs[base]
    return {**kwargs, base: {**inner, "kwargs": {**inner.get("kwargs", {}), key: value}}}


def kwarg_value(optimizer_cls: Any, kwargs: dict[str, Any], key: str) -> Any:
    """The spec's value of `key` where `with_kwarg` sets it, else the default of the constructor that takes
    it (None where neither has one)."""
    base = base_holding(optimizer_cls, kwargs, key)
    given, cls = (kwargs, optimizer_cls) if base is None else (kwargs[base].get("kwargs", {}), resolve(kwargs[base]["optimizer"]))
    if key in given:
        return given[key]
    try:
        parameter = inspect.signature(cls).parameters.get(key)
    except (TypeError, ValueError):
        return None
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


MODEL_ARGUMENT_NAMES = ("model", "module", "net", "network")


def takes_a_model(cls: Any) -> bool:
    """Whether the constructor's first argument is a model (`model: nn.Module`, LoRA-Pro's), by its
    annotation or its name: a constructor that then refuses every params form wants a model of its kind."""
    try:
        first = next((p for n, p in inspect.signature(cls).parameters.items() if n != "self"), None)
    except (TypeError, ValueError):  # a builtin or C constructor without a signature
        return False
    if first is None:
        return False
    annotation = first.annotation
    if isinstance(annotation, str):  # `from __future__ import annotations`: the name is what there is
        declared = annotation.rsplit(".", 1)[-1] == "Module"
    else:
        declared = inspect.isclass(annotation) and any(k.__name__ == "Module" and k.__module__.startswith("torch.nn")
                                                        for k in inspect.getmro(annotation))
    return declared or first.name in MODEL_ARGUMENT_NAMES
