"""The reference pages, generated from the code, never written by hand: every spec key from the
schema, every check from the registry, every command-line option from the plugin's parser.

A key, check or option without a description is `Undocumented`, so the docs build fails instead
of printing a blank row. `docs/hooks.py` renders these into the site; anything that can list
checks and `pytest_addoption` hooks can render its own (a project with checks of its own)."""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, RootModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from ruamel.yaml import YAML

from .checks.base import Check
from .checks.laws.section import ON_BY_DEFAULT, SECTION_KEY as LAWS_KEY
from .checks.registry import Registry
from .spec.schema import HookOrderFuzzSpec, HookOrderSpec, spec_model

AddOption = Callable[[Any], None]  # a pytest_addoption hook: (parser) -> None


class Undocumented(Exception):
    """Something the reference must describe has no description."""


# --- spec keys -------------------------------------------------------------------------------


Examples = dict[tuple[type, str], str]  # (model, key) -> a value some spec gives it, and that spec's file


def spec_keys(registry: Registry, example_specs: Iterable[Path] = ()) -> str:
    """Markdown: every key of an optimizer spec (these checks' sections included) and of the
    hook-order spec kinds, a table per model, nested models after the model that holds them; each
    key's example is the first value one of `example_specs` (the shipped specs) gives it."""
    optimizer = spec_model(registry.sections)
    roots: list[tuple[str, type[BaseModel]]] = [("Optimizer spec", optimizer), ("Hook-order spec", HookOrderSpec),
                                                ("Hook-order fuzz spec", HookOrderFuzzSpec)]
    examples: Examples = {}
    kinds: dict[str, type[BaseModel]] = {"hook_order": HookOrderSpec, "hook_order_fuzz": HookOrderFuzzSpec}
    for path in example_specs:
        data = YAML(typ="safe").load(path.read_text())
        if isinstance(data, dict):
            _harvest(kinds.get(str(data.get("kind")), optimizer), data, path.name, examples)
    out: list[str] = []
    seen: set[type] = set()
    for title, model in roots:
        out += _model_tables(model, title, seen, examples)
    return "\n".join(out)


def _harvest(model: type[BaseModel], value: dict, source: str, examples: Examples) -> None:
    """Record, for each key of `model` that `value` holds, the value as written (the first seen wins)."""
    for key, field in model.model_fields.items():
        if key not in value:
            continue
        shown = json.dumps(value[key], default=str)
        examples.setdefault((model, key), f"`{shown if len(shown) <= 60 else shown[:57] + '...'}` ({source})")
        given = value[key]
        nested = given if isinstance(given, list) else [given, *given.values()] if isinstance(given, dict) else []
        for inner in _models_in(field.annotation):
            for item in nested:
                if isinstance(item, dict):
                    _harvest(inner, item, source, examples)


def _model_tables(model: type[BaseModel], title: str, seen: set[type], examples: Examples) -> list[str]:
    seen.add(model)
    doc = (model.__doc__ or "").strip()
    lines = [f"## {title} {{#{_anchor(model)}}}", ""]
    if doc and model.__name__ != "Spec":
        lines += [doc, ""]
    lines += ["| key | type | default | description | example |", "| --- | --- | --- | --- | --- |"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for key, field in model.model_fields.items():
        description = _description(field, model, key)
        lines.append(f"| `{key}` | {_cell(_type(field.annotation))}{_bounds(field)} | {_cell(_default(field))} | "
                     f"{_cell(description)} | {_cell(examples.get((model, key), ''))} |")
        for inner in _models_in(field.annotation):
            if inner not in seen:
                nested.append((f"`{key}`", inner))
                seen.add(inner)
    lines.append("")
    for where, inner in nested:
        if issubclass(inner, RootModel):
            continue  # a bare value: its row above says it all
        lines += _model_tables(inner, f"{where}: {_words(inner.__name__)}", seen, examples)
    return lines


def _description(field: FieldInfo, model: type[BaseModel], key: str) -> str:
    if field.description:
        return field.description
    inner = _models_in(field.annotation)
    if inner and inner[0].__doc__:  # a key holding a model is described by the model's docstring
        return " ".join(inner[0].__doc__.split())
    raise Undocumented(f"spec key {key!r} of {model.__name__} has no description: give its Field a description")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, RootModel):
        return _type(annotation.model_fields["root"].annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{_words(annotation.__name__)}](#{_anchor(annotation)})"
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is tuple:
        return f"tuple of {', '.join(_type(a) for a in args)}"
    if origin is dict:
        return f"mapping {_type(args[0])} to {_type(args[1])}"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    bounds = {name: getattr(m, name) for m in field.metadata for name in ("ge", "gt", "le", "lt", "min_length")
              if getattr(m, name, None) is not None}
    shown = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}", "min_length": "at least {} item(s)"}
    return f" ({', '.join(shown[k].format(v) for k, v in bounds.items())})" if bounds else ""


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True) if field.default is PydanticUndefined else field.default
    if isinstance(value, BaseModel):
        return "its keys' defaults" if not isinstance(value, RootModel) else f"`{json.dumps(value.root)}`"
    try:
        return f"`{json.dumps(_plain(value))}`"
    except TypeError:
        return f"`{value!r}`"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_defaults=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- checks ----------------------------------------------------------------------------------

SCOPES = {
    "all": "every case and variant (closures, schedulers, dtypes)",
    "no_closure": "every variant without a closure",
    "plain": "every case's plain variant (no closure, no scheduler)",
    "primary": "once per spec, device and dtype: the first case's plain variant (its closure variant where the case steps with a closure only)",
    "distributed": "the cases `distributed.cases` names, with their scheduler variants",
    "hook_order": "hook-order specs (`kind: hook_order`)",
    "fuzz": "the spec's `fuzz` section (Hypothesis), one item per spec and device",
}


def checks(registry: Registry) -> str:
    """Markdown: every check of `registry`, in registration order, with what it runs on, the
    prerequisites it stands on, what a pass requires, what a red means and how to turn it off."""
    out = [_check_index(registry), ""]
    for check in registry.values():
        out += _check_entry(check)
    return "\n".join(out)


def _check_index(registry: Registry) -> str:
    rows = ["| check | what it proves |", "| --- | --- |"]
    rows += [f"| [`{c.name}`](#{c.name}) | {_cell(c.description)} |" for c in registry.values()]
    return "\n".join(rows)


def _check_entry(check: Check) -> list[str]:
    for what in ("description", "proves", "red"):
        if not getattr(check, what).strip():
            raise Undocumented(f"check {check.name!r} has no {what}: give its Check(...) a {what}=")
    where = SCOPES[check.scope]
    if check.devices:
        where += f"; devices: {', '.join(check.devices)}"
    if check.dtypes:
        where += f"; param dtypes: {', '.join(check.dtypes)}"
    rows = [("Runs on", where), ("On", _on(check)), ("Stands on", ", ".join(f"`{r}`" for r in check.ladder) or "nothing")]
    if check.prerequisites:
        rows.append(("Needs first", ", ".join(f"[`{p}`](#{p})" for p in check.prerequisites)))
    if check.section is not None:
        rows.append(("Spec key", f"`{check.key}`"))
    rows += [("A pass requires", check.proves), ("A red means", check.red), ("Turn it off", _off(check))]
    return [f"### {check.name} {{#{check.name}}}", "", check.description[0].upper() + check.description[1:] + ".", "",
            "| | |", "| --- | --- |", *(f"| {k} | {_cell(v)} |" for k, v in rows), ""]


def _on(check: Check) -> str:
    if check.scope == "fuzz":
        return "when the spec declares its property under `fuzz` (or is a `kind: hook_order_fuzz` spec)"
    if check.scope == "hook_order":
        return "every hook-order spec"
    if check.declared is None:
        return "by default"
    return f"when the spec claims it under `{check.key}` (a declaration is the claim)"


def _off(check: Check) -> str:
    law = check.name.removeprefix("law_")
    if check.key == LAWS_KEY and law in ON_BY_DEFAULT:
        return f"`laws: {{off: {{{law}: \"<why>\"}}}}` in the spec; for one run, `-k \"not {check.name}\"`"
    generic = (f"leave it out of the spec's `checks` list, or `skip: [{{checks: [{check.name}], reason: \"<why>\"}}]`; "
               f"for one run, `-k \"not {check.name}\"`")
    return generic if check.declared is None else f"leave it out of `{check.key}`; or {generic}"


# --- command line ----------------------------------------------------------------------------


class _Recorder:
    """Stands in for pytest's parser and its groups: records what a pytest_addoption hook adds."""

    def __init__(self) -> None:
        self.options: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []
        self.ini: list[tuple[str, str, dict[str, Any]]] = []
        self._group = "general"

    def getgroup(self, name: str, description: str = "", after: str | None = None) -> _Recorder:
        self._group = description or name
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        self.options.append((self._group, names, attrs))

    def addini(self, name: str, help: str, type: str | None = None, default: Any = None, **_: Any) -> None:  # noqa: A002
        self.ini.append((name, help, {"type": type, "default": default}))


def options(hooks: Iterable[AddOption]) -> str:
    """Markdown: every option and ini key the given pytest_addoption hooks add."""
    recorder = _Recorder()
    for hook in hooks:
        hook(recorder)
    rows = ["| option | value | default | what it does |", "| --- | --- | --- | --- |"]
    for _, names, attrs in recorder.options:
        help_text = attrs.get("help")
        if not help_text:
            raise Undocumented(f"option {'/'.join(names)} has no help")
        value = "" if attrs.get("action") in ("store_true", "store_false") else f"`{attrs.get('metavar') or 'VALUE'}`"
        default = attrs.get("default")
        shown = "" if default in (None, False, []) else f"`{default}`"
        rows.append(f"| `{', '.join(names)}` | {value} | {shown} | {_cell(help_text)} |")
    out = ["## pytest options", "", *rows, ""]
    if recorder.ini:
        out += ["## ini keys (`[tool.pytest.ini_options]`, pytest.ini)", "", "| key | type | what it does |", "| --- | --- | --- |"]
        for name, help_text, attrs in recorder.ini:
            if not help_text:
                raise Undocumented(f"ini key {name} has no help")
            out.append(f"| `{name}` | {attrs['type'] or 'string'} | {_cell(help_text)} |")
        out.append("")
    return "\n".join(out)


def commands(parser: argparse.ArgumentParser) -> str:
    """Markdown: every subcommand of `python -m pytest_optimtest`, with its arguments."""
    out = [f"## `{parser.prog}`", ""]
    for name, sub, help_text in _subcommands(parser):
        if not help_text:
            raise Undocumented(f"command {name!r} has no help")
        args = " ".join(_usage(a) for a in sub._actions if not isinstance(a, argparse._HelpAction))
        out += [f"### `{name}`", "", f"`{parser.prog} {name} {args}`".replace(" `", "`"), "", help_text + ".", ""]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or not action.help:
                continue
            out.append(f"- `{_usage(action)}`: {action.help}")
        out.append("")
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def _usage(action: argparse.Action) -> str:
    name = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if not action.option_strings:
        return name + ("..." if action.nargs in ("+", "*") else "")
    return f"[{'|'.join(action.option_strings)} {name}]"


# --- shared ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _anchor(model: type) -> str:
    return "spec-" + model.__name__.lower()


def _words(name: str) -> str:
    return "".join(f" {c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name)).strip()


__all__ = ["Undocumented", "checks", "commands", "options", "spec_keys"]
