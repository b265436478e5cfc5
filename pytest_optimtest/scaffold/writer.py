"""`python -m pytest_optimtest init mypkg.optim:Lion`: a starter spec from the optimizer's constructor.

Every boolean flag of the constructor becomes a case with the flag flipped (one flag a case,
not a product: 2^n cases for n flags would be too many to start with); flags torch.optim
uses for device-specific paths (capturable, fused, differentiable) are left out with a
comment, since they need CUDA or autograd through the step. The spec is checked by
expanding it before it is written.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import torch

from ..harness.blame import one_line
from ..harness.devices import unavailable_reason
from ..items import missing_requirements
from ..spec.values import mesh_arguments, mesh_form, optimizer_class_problem, resolve, takes_keyword
from .constructor import (_constructible, _lr_refusal, _rejection, _required_fills, _required_instances, _seed_fill,
                          _stored_flags, _wrapped_base, _wrapper_refusal)
from .cuda import _cpu_switches, _cuda_defaults_case, _cuda_need, _cuda_only_spec
from .laws import _claims_refuted, _laws, _laws_on_by_default_failing, _properties
from .lines import _head, _scalar, _skip_lines, _too_slow
from .params_form import _params_form, _refused_wrapper_spec, _unconstructible_spec
from .probe import _PROBE_BACKWARD, _PROBE_CLOSURE, _PROBE_SLOW, _PROBE_STEP_CLOSURE, _stepped
from .regimes import (_draws_random, _low_precision, _moving_lr, _probed_state_dtype, _refusal, _shape_claims,
                      _state_dtype_lines, _unmoved_without_lr, _with, _zero_lr_problem)
from .step_protocol import (_closure_line, _grad_mode_lines, _gradient_free, _in_train_mode, _moves_only_given_closure,
                            _steps_only_given_closure, _train_mode_problem)


DEVICE_FLAGS = ("capturable", "fused", "differentiable")


def starter_spec(optimizer: str) -> tuple[str, str]:
    """(file name, YAML text) of a starter spec for the optimizer at `optimizer`. What the optimizer
    prints while it is tried goes to stderr: `init -o -` writes the spec itself to stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        return contextvars.copy_context().run(_starter_spec, optimizer)  # the protocol it finds is this spec's alone


def _mesh_kwarg(cls: type) -> tuple[str, list[str]]:
    """(the kwargs text, the notes) that give FSDP2's mesh to the one constructor argument that takes a
    DeviceMesh (Dion's `distributed_mesh`: its step refuses DTensor params without it); where several
    do, a note to pick the one FSDP2 shards over. The probes build with the default, as whole-param runs do."""
    meshes = mesh_arguments(cls)
    if len(meshes) == 1:
        form = mesh_form(cls, meshes[0])
        what = "the mesh" if form == "device_mesh" else "the ProcessGroup of the mesh"
        return f", {meshes[0]}: {{{form}: fsdp}}", [
            f"{meshes[0]}: {what} the fsdp and checkpoint checks shard over, None in every other run (its annotation "
            f"takes {'a DeviceMesh' if form == 'device_mesh' else 'a ProcessGroup, not a DeviceMesh'})"]
    if meshes:
        return "", [f"its constructor takes the meshes {', '.join(meshes)}: give the one FSDP2 shards over as `<name>: "
                    "{device_mesh: fsdp}` in kwargs, or the fsdp and checkpoint checks skip saying so (docs/specs.md)"]
    return "", []


def _starter_spec(optimizer: str) -> tuple[str, str]:
    cls = resolve(optimizer)
    problem = optimizer_class_problem(optimizer, cls)
    if problem is not None:
        raise ValueError(problem)
    params = inspect.signature(cls.__init__).parameters
    defaults = {n: p.default for n, p in params.items() if n not in ("self", "params") and p.default is not inspect.Parameter.empty}
    flags = [n for n, v in defaults.items() if isinstance(v, bool) or (v is None and n in ("foreach", "maximize"))]
    default_lr = defaults.get("lr", 1e-3)
    default_lr = default_lr if isinstance(default_lr, float) and default_lr > 0 else 1e-3
    has_lr = takes_keyword(cls, "lr")
    # The constructor's default, at most 0.01: the test models diverge over the in-backward checks'
    # six steps at SGD-like defaults such as 0.1, and a diverged run is a failed (not a passed) check.
    lr = min(default_lr, 1e-2)
    lr_refusal = _lr_refusal(cls, lr) if has_lr else None
    has_lr = has_lr and lr_refusal is None
    name = cls.__name__.lower()
    instances, instance_lines, instance_notes = _required_instances(cls)
    guessed = {"lr": lr} if has_lr else {}  # the kwargs the probes below start from, until lr is probed
    wraps = _wrapped_base(cls, guessed)
    refused = _wrapper_refusal(cls, guessed) if wraps is None else None
    if refused is not None:  # a wrapper that says why it will not wrap SGD so: its words, not a params form to find
        return f"{name}.yaml", _refused_wrapper_spec(optimizer, cls, guessed, refused)
    if wraps is not None:  # a wrapper over an optimizer instance (Lookahead, Magma): its base carries the params
        argument, wrapped, shown_value = wraps
        instances, instance_lines, instance_notes = {argument: wrapped, **instances}, {argument: shown_value, **instance_lines}, [
            f"{argument}: torch.optim.SGD over the params (init's guess for the optimizer it wraps): put yours", *instance_notes]
    probed: Any = functools.partial(cls, **instances) if instances else cls
    fills, fill_notes = _required_fills(probed, guessed, "wrapped" if wraps else "list")
    fill_notes = [*instance_notes, *fill_notes]
    probe: Any = functools.partial(probed, **fills) if fills else probed  # what every probe below constructs
    train_problem = _train_mode_problem(probe, guessed)
    if train_problem is not None:  # schedule-free's: every probe below, as every run of the spec, steps in train mode
        probe = _in_train_mode(probe)
    cuda_need = _cuda_need(probe, guessed)
    cpu_switches: dict[str, Any] = {}
    if cuda_need is not None:  # its defaults want a GPU this machine lacks: its CPU path, where flags give one
        found = _cpu_switches(probe, guessed)
        if found is None:
            return f"{name}.yaml", _cuda_only_spec(optimizer, cls, {**guessed, **fills}, fill_notes, cuda_need)
        cpu_switches, probe = found, functools.partial(probe, **found)
        fills = {**fills, **found}
        flags = [f for f in flags if f not in found]
    form, factory, form_lines = _params_form(probe, guessed, wraps[0] if wraps else None)
    if factory is None:  # nothing to probe: no params form or model of the plugin's constructs it
        return f"{name}.yaml", _unconstructible_spec(optimizer, cls, guessed, form, form_lines)
    slow = _PROBE_SLOW.get()
    if slow is not None:  # every probe after would wait as long: a spec that skips, saying why
        lines = form_lines if any(line.startswith("skip:") for line in form_lines) else [*form_lines, *_skip_lines(*_too_slow(slow))]
        return f"{name}.yaml", "\n".join([*_head(optimizer, cls, {**guessed, **fills}, fill_notes), *lines,
                                          "cases:", "  - name: default", "devices: [cpu, cuda]", ""])
    _PROBE_BACKWARD.set(next((line.split()[1] for line in form_lines if line.startswith("backward: ")), "plain"))
    _PROBE_CLOSURE.set(_moves_only_given_closure(probe, form, guessed, factory))
    _PROBE_STEP_CLOSURE.set(_steps_only_given_closure(probe, form, guessed, factory))
    seeded = _seed_fill(probe, form, guessed, factory)
    if seeded is not None:  # its own generator, seeded from the OS unless given a seed: runs would never compare
        fills, fill_notes, probe = {**fills, **seeded[0]}, [*fill_notes, seeded[1]], functools.partial(probe, **seeded[0])
    bf16_only = any(line.startswith("dtypes: [bfloat16]") for line in form_lines)
    dtype = torch.bfloat16 if bf16_only else torch.float32
    lr, lr_note = (_moving_lr(probe, form, factory, lr, max(default_lr, 1e-2), dtype) if has_lr
                   else (lr, _unmoved_without_lr(probe, form, factory, dtype)))
    low_precision_lines, bf16_lr = ([], lr) if bf16_only else _low_precision(probe, form, factory, lr if has_lr else None, max(default_lr, 1e-2))
    state_dtype = _probed_state_dtype(probe, form, factory, lr if has_lr else None)
    base = {"lr": lr} if has_lr else {}  # the kwargs every case starts from, once lr has moved
    stored, dropped = _stored_flags(probe, form, base, ("foreach", "maximize"), factory)
    base_problem = _stepped(probe, form, base, factory, steps=1)[1]  # the default case's own error: no option's refusal
    flag_cases = [(flag, value, *_constructible(probe, base, {flag: value}, defaults, form, factory,
                                                 {"lr": lr} if lr_refusal else {}, base_problem)) for flag, value in
                  ((f, not defaults[f] if isinstance(defaults[f], bool) else True) for f in flags if f not in DEVICE_FLAGS)]
    every_case = [base, *({**base, **kwargs} for _, _, kwargs, _ in flag_cases if kwargs is not None)]
    stored -= {flag for flag, _, kwargs, _ in flag_cases if kwargs is None}  # no law or property over a refused flag
    closure_line = _closure_line(probe, form, factory, base, dtype)
    needs_closure = closure_line.startswith("closure: [true]")
    shapes, shape_notes = _shape_claims(probe, form, every_case, dtype, needs_closure)
    draws = _draws_random(probe, form, base, dtype, factory)
    gradient_free = _gradient_free(probe, form, base, factory)
    claimed: list[tuple[int, ...]] = [(4, 3)] + ([] if shapes.get("min_dims") == 2 else [(5,)])
    zero_lr_refusal = _zero_lr_problem(probe, form, base, claimed, dtype, needs_closure) if has_lr else None
    # the property draws over every case (zij's AdaGC: fixed_decay's decay ignores lr); the laws run the default case's
    fuzz_zero_lr_refusal = zero_lr_refusal or (next(
        (f"{problem}{_with(kwargs, base)}" for kwargs in every_case[1:]
         if (problem := _zero_lr_problem(probe, form, kwargs, claimed, dtype, needs_closure)) is not None), None)
        if has_lr else None)
    mesh_fill, mesh_notes = _mesh_kwarg(cls)
    fill_notes = [*fill_notes, *mesh_notes]
    shown_fills = ("".join(f", {k}: {_scalar(v)}" for k, v in fills.items()) + "".join(f", {k}: {v}" for k, v in instance_lines.items())
                   + mesh_fill)
    tensor_lr_refusal = _rejection(probe, base, {"lr": torch.tensor(lr)}, form, factory, base_problem) if has_lr else None
    lines = [
        f"# Starter spec for {cls.__module__}.{cls.__name__}, written by `python -m pytest_optimtest init`.",
        f"# Run it: pytest --optim-spec {name}.yaml   Then: pytest --optim-spec {name}.yaml --optim-update-expected",
        f"optimizer: {optimizer}",
        (f"kwargs: {{lr: {lr!r}{shown_fills}}}" + (f"  # {lr_note}" if lr_note else "")) if has_lr
        else f"kwargs: {{{shown_fills.removeprefix(', ')}}}  # " + (
            f"{cls.__name__} refuses an lr with its other defaults ({lr_refusal}): its cases leave lr out" if lr_refusal
            else f"{cls.__name__} takes no lr: fill in the kwargs a case needs") + (f"; {lr_note}" if lr_note else ""),
        *[f"# {note}" for note in fill_notes],
        *form_lines,
        *([f"setup: pytest_optimtest.setups:train_mode  # its step raises outside train mode ({train_problem}): "
           "every optimizer the runs build is put in it"] if train_problem is not None else []),
        "cases:",
        "  - name: default",
        *_cuda_defaults_case(defaults, cpu_switches, cuda_need[0] if cuda_need else ""),
    ]
    names = {"default", "tensor_lr", "scheduled", "low_precision", "cuda_defaults"}
    for flag, value, kwargs, note in flag_cases:
        if kwargs is None:
            lines.append(f"  # left out: {flag}: {value}: {note}")
            continue
        shown = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in kwargs.items())
        lines += [f"  - name: {_case_name(flag if value else f'no_{flag}', names)}", f"    kwargs: {{{shown}}}"
                  + (f"  # {note}" if note else "")]
    skipped = [f for f in flags if f in DEVICE_FLAGS]
    if skipped:
        lines.append(f"# left out: {', '.join(skipped)} (CUDA or autograd-through-step paths; add cases with devices: [cuda])")
    if dropped:
        lines.append(f"# left out of the laws and properties: {', '.join(dropped)}: the constructor accepts it and keeps it "
                     "nowhere (not in its defaults, param groups or attributes), so a law over it would compare identical runs")
    schedules = has_lr and issubclass(cls, torch.optim.Optimizer)  # torch's schedulers take nothing else
    if has_lr and tensor_lr_refusal is None:  # a tensor lr, and the schedulers that change lr, need an lr
        lines += ["  - name: tensor_lr", f"    kwargs: {{lr: {{tensor: {lr!r}}}}}", *(["    schedulers: true"] if schedules else [])]
    elif has_lr:
        lines += [f"  # left out: tensor_lr: a tensor lr is refused ({tensor_lr_refusal})",
                  *(["  - name: scheduled", "    schedulers: true"] if schedules else [])]
    lines += [
        *low_precision_lines,
        *(["schedulers:", "  StepLR: {step_size: 1, gamma: 0.5}", "  CosineAnnealingLR: {T_max: 10}"] if schedules else
          [f"# no schedulers: torch's LR schedulers take a torch.optim.Optimizer, and {cls.__name__} is not one"] if has_lr else []),
        closure_line,
        *_grad_mode_lines(probe, form, factory, base, dtype, needs_closure),
        *(["fallback_random: true  # its step draws from torch's RNG: compiled with inductor's fallback_random, the draws "
           "match eager's (per-param regimes, in-backward, ZeRO, FSDP, still draw in another order)"] if draws else []),
        "devices: [cpu, cuda]",
        "kernel_counts: {}  # fill in with --optim-update-expected",
        *_state_dtype_lines(state_dtype),
        *[f"# {note}" for note in shape_notes],
        *(_properties(probe, state_dtype == "param", stored - ({"maximize"} if gradient_free else set()), shapes,
                      fuzz_zero_lr_refusal, has_lr, _refusal(probe, form, base, [(4, 3)], torch.float64, needs_closure))
          if form != "model" else
          ["# fuzz: none: its constructor takes the model itself, and the properties step loose params of drawn shapes"]),
        # the tensor_lr law pins its lr at every dtype: bf16's, where that is larger, keeps it from being vacuous there
        # a wrapper's lr is its base's, where the laws set it (spec.values.with_kwarg): param_groups holds over
        # the base's groups; the tensor_lr variant is left to the user's base, which init does not know
        *_laws(probe, max(lr, bf16_lr or lr) if has_lr else _base_lr(wraps), factory, stored,
               "allow_empty" not in shapes, "allow_views" not in shapes, tensor_lr=tensor_lr_refusal is None and has_lr,
               gradient_free=gradient_free, zero_lr_refusal=zero_lr_refusal),
    ]
    return f"{name}.yaml", "\n".join(lines) + "\n"


def _base_lr(wraps: tuple[str, Any, str] | None) -> float | None:
    """The lr of the base optimizer init gives a wrapper, or None where it is no wrapper."""
    return None if wraps is None else wraps[1].kwargs.get("lr")


def _case_name(text: str, taken: set[str]) -> str:
    """A case name the schema accepts (lowercase letters, digits, underscores), made from a kwarg's
    name (OPTAMI's `CG_subsolver`), and not one of `taken`, which it joins."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "case"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def write_starter_spec(optimizer: str, output: Path | None) -> int:
    """Write the starter spec of `optimizer` to `output` (stdout for "-"); 0 on success. What the optimizer
    prints while init constructs and steps it is held back and said in one line at the end."""
    out, err, printed = sys.stdout, sys.stderr, io.StringIO()
    try:
        with _held(printed):
            return _write_starter_spec(optimizer, output, out, err)
    finally:
        _say_printed(printed, err)


def _write_starter_spec(optimizer: str, output: Path | None, out: TextIO, err: TextIO) -> int:
    from ..cases import project_registry
    from ..spec import SpecError

    try:
        filename, text = starter_spec(optimizer)
    except (ImportError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return 1
    except Exception as exc:  # a probe that met what it did not foresee: said in a line, never a traceback
        print(f"error: init could not probe {optimizer}: {one_line(exc)} (please report it to pytest-optimtest "
              "with the optimizer's package)", file=err)
        return 1
    if output is not None and str(output) == "-":
        out.write(text)
        return 0
    path = output or Path(filename)
    if path.exists():
        print(f"error: {path} exists; pass -o to write elsewhere", file=err)
        return 1
    text = text.replace(f"--optim-spec {filename} ", f"--optim-spec {path} ")  # the "Run it" line names the file written
    path.write_text(text)
    try:
        spec, locator = project_registry(path).load_spec(path)
        missing = missing_requirements(spec, locator)
        if missing:  # what init could not import, the user installs: until then every item skips saying so
            print(f"wrote {path}: it {missing}, so its items skip until it is installed", file=out)
            return 0
        cases = project_registry(path).expand(spec, locator)
    except SpecError as exc:  # a constructor that rejects a flipped flag: say which, keep the file to edit
        print(f"wrote {path}, but it does not validate yet: {exc}", file=err)
        return 1
    # a CUDA-only spec's: none here; nor a case whose skip says its runs cannot be done (a step past PROBE_SECONDS)
    runnable = next((case for case in cases if unavailable_reason(case.device) is None and hasattr(case, "checks")
                     and set(case.checks) - set(case.skip)), None)
    seen = _laws_on_by_default_failing(project_registry(path), runnable) if runnable is not None else []
    refuted = _claims_refuted(project_registry(path), runnable) if runnable is not None else {}
    for law, saw in refuted.items():  # a claim init proposed and saw broken is the user's to make, not init's
        commented = f"  # {law}: true  # uncomment if it claims this: init saw it broken on its first case: {saw}"
        text = re.sub(rf"^  {law}: true  #.*$", commented.replace("\\", "\\\\"), text, flags=re.MULTILINE)
    if seen or refuted:
        path.write_text(text + "\n".join(seen) + ("\n" if seen else ""))
    failed = sum(line.startswith("  #   ") for line in seen)
    print(f"wrote {path}: {len(cases)} cases" + (f"; {failed} law(s) on by default failed on its first case "
                                                 "(commented at the end)" if seen else ""), file=out)
    return 0


@contextlib.contextmanager
def _held(printed: io.StringIO) -> Iterator[None]:
    """What the optimizer prints while init constructs and steps it, held back: dozens of probes
    would repeat a banner in every one (sky-optimizer's, nine lines a construction), and with
    `-o -` it would land in the spec written to stdout."""
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        yield


def _say_printed(printed: io.StringIO, err: TextIO) -> None:
    """One line on `err` saying how much the optimizer printed while probed, its first line quoted."""
    lines = printed.getvalue().splitlines()
    if lines:
        first = next((line.strip() for line in lines if line.strip()), "")
        print(f"note: the optimizer printed {len(lines)} line(s) while init probed it, not shown (the first: "
              f"{first[:120]!r})", file=err)
