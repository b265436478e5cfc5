"""Lines of YAML that init writes in more than one place."""

from __future__ import annotations

import json
from typing import Any


def _head(optimizer: str, cls: type, kwargs: dict, notes: list[str], objects: dict[str, str] | None = None) -> list[str]:
    """The first lines of a spec that init writes without probing the step further: who wrote it, the
    optimizer, its kwargs (`objects` first: values given as spec text, a wrapped base optimizer) and the notes on them."""
    shown = ", ".join([*(f"{k}: {v}" for k, v in (objects or {}).items()), *(f"{k}: {_scalar(v)}" for k, v in kwargs.items())])
    return [f"# Starter spec for {cls.__module__}.{cls.__name__}, written by `python -m pytest_optimtest init`.",
            f"optimizer: {optimizer}", f"kwargs: {{{shown}}}", *[f"# {note}" for note in notes]]


def _scalar(value: Any) -> str:
    """`value` as YAML reads it back: true, false, null, or the number."""
    return json.dumps(value) if value is None or isinstance(value, bool) else repr(value)


def _too_slow(problem: str) -> tuple[str, str]:
    """(comment, skip reason) for a step that ran past PROBE_SECONDS."""
    return (f"its step does not finish in time: {problem}",
            f"one step over the plugin's model (two Linear(10, 10), 220 params) ran past init's limit ({problem}): every "
            "run would time out; give it a `model` it steps quickly (a smaller one) and remove this skip")


def _skip_lines(comment: str, reason: str) -> list[str]:
    """The spec's `skip` rule for every test, with why in a comment."""
    return [f"skip:  # {comment}", f"  - {{reason: {json.dumps(reason)}}}"]
