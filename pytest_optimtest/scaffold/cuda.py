"""Optimizers whose defaults want a GPU: found by what their CPU steps raise, and the switches that give them a
CPU path."""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch

from ..models import two_linear, two_linear_no_bias
from .lines import _head, _scalar
from .probe import _construct, _bf16_two_linear, _located, _raising_line, _stepped


# What an error raised without a GPU says when the code wants one: a check of its own (FlashAdam's "Quantization
# requires a CUDA device."), Triton finding no driver ("0 active drivers"), an assert on `is_cuda` (muonium's), a
# kernel the CPU lacks (DeepSpeed's FusedLamb: "This op had not been implemented on CPU backend."; ColossalAI's
# CPUAdam, whose kernel builds as a CUDA extension: "No usable kernel found for CPUAdamLoader on the current machine.").
_WANTS_CUDA = re.compile(r"\bcuda\b|is_cuda|\bgpus?\b|nvidia|active drivers|implemented (?:on|for) (?:the )?cpu\b"
                         r"|no usable kernel|on the current machine", re.IGNORECASE)


def _names_cuda(problem: str) -> bool:
    """Whether a probe's error (`_located`'s) says its code wants CUDA, by its message or by the line
    that raised it."""
    return bool(_WANTS_CUDA.search(problem.partition(", at ")[0]) or _WANTS_CUDA.search(_raising_line(problem)))


def _cpu_problems(cls: Any, kwargs: dict) -> tuple[list[str], tuple[str, Any] | None] | None:
    """(what constructing and stepping raised here, the first params form and model that constructed)
    over the plugin's forms and models, one step a model (its first form that constructs); None as
    soon as one steps."""
    problems, constructed = [], None
    for factory in (two_linear, two_linear_no_bias, _bf16_two_linear):  # the last for a bf16-only constructor
        dtype = torch.bfloat16 if factory is _bf16_two_linear else torch.float32
        for form in ("list", "named", "model"):
            try:
                _construct(cls, form, factory(), kwargs)
            except Exception as exc:  # noqa: BLE001  # the constructor's verdict; the next form is tried
                problems.append(_located(exc))
                continue
            problem = _stepped(cls, form, kwargs, factory, steps=1, dtype=dtype)[1]
            if problem is None:
                return None
            problems.append(problem)
            constructed = constructed or (form, factory)
            break
    return problems, constructed


def _cuda_need(cls: Any, kwargs: dict) -> tuple[str, tuple[str, Any] | None] | None:
    """(the error that says the optimizer wants CUDA, the params form and model it constructed with),
    where this machine has none and nothing of the plugin's steps it here (Triton kernels, quantized
    state kept on the GPU); None otherwise."""
    if torch.cuda.is_available():
        return None
    found = _cpu_problems(cls, kwargs)
    if found is None:
        return None
    problem = next((p for p in found[0] if _names_cuda(p)), None)
    return (problem, found[1]) if problem is not None else None


def _cpu_switches(cls: Any, kwargs: dict) -> dict[str, Any] | None:
    """The fewest of the constructor's switches that give it a CPU path, where they do: flags that default
    to True set False, optional settings set None (FlashAdam's quantize, fused and master_weight_bits)."""
    parameters = [p for p in inspect.signature(cls).parameters.values() if p.name not in kwargs]
    switches: dict[str, Any] = {p.name: False for p in parameters if p.default is True}
    switches |= {p.name: None for p in parameters if p.default not in (None, True, False, p.empty)
                 and ("Optional" in str(p.annotation) or "None" in str(p.annotation))}
    if not switches or _cpu_problems(cls, {**kwargs, **switches}) is not None:
        return None
    for name in list(switches):  # each one it steps without is the user's default, not a switch
        fewer = {k: v for k, v in switches.items() if k != name}
        if _cpu_problems(cls, {**kwargs, **fewer}) is None:
            switches = fewer
    return switches


def _cuda_defaults_case(defaults: dict[str, Any], switches: dict[str, Any], problem: str) -> list[str]:
    """The case that runs the constructor's own defaults where the CPU cases switched them off."""
    if not switches:
        return []
    shown = ", ".join(f"{k}: {_scalar(defaults[k])}" for k in switches)
    return [f"  - name: cuda_defaults  # its defaults need CUDA ({problem}): the other cases switch them off",
            f"    kwargs: {{{shown}}}", "    devices: [cuda]"]


def _cuda_only_spec(optimizer: str, cls: type, kwargs: dict, notes: list[str], need: tuple[str, Any]) -> str:
    """A spec that loads for an optimizer that needs CUDA on a machine without it: its cases run on
    cuda, over the params form and model it constructed with; init, run where there is a GPU, probes
    its step for the rest."""
    problem, constructed = need
    form, factory = constructed or ("list", two_linear)
    return "\n".join([
        *_head(optimizer, cls, kwargs, notes),
        *([] if form == "list" else [f"params: {form}"]),
        *(["dtypes: [bfloat16]  # its constructor refuses float32 params and takes bf16 ones"] if factory is _bf16_two_linear
          else [] if factory is two_linear else [f"model: pytest_optimtest.models:{factory.__name__}  # its constructor "
                                                 "refuses the default model's 1-D params"]),
        f"# it needs CUDA, and init ran without a GPU: {problem}",
        "# run init again on a machine with one for a spec whose step was probed (closure, dtypes, shapes, laws)",
        "cases:", "  - name: default", "devices: [cuda]", ""])
