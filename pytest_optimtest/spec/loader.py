"""Read a spec file: YAML with line numbers, validated into a `Spec`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import MappingEndEvent, MappingStartEvent, SequenceEndEvent, SequenceStartEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import SpecError, did_you_mean, key_path
from .schema import HookOrderFuzzSpec, HookOrderSpec, SectionModels, Spec, spec_model

KINDS = {"hook_order": HookOrderSpec, "hook_order_fuzz": HookOrderFuzzSpec}


@dataclass
class Locator:
    """Maps key paths of a loaded YAML document to 1-based line numbers."""

    path: str
    root: Any

    def line(self, parts: tuple[object, ...]) -> int | None:
        node, line = self.root, _line_of(self.root)
        for part in parts:
            if isinstance(node, CommentedMap) and part in node:
                line = node.lc.key(part)[0] + 1
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                line = node.lc.item(part)[0] + 1
                node = node[part]
            else:
                break
        return line

    def error(self, parts: tuple[object, ...], message: str) -> SpecError:
        return SpecError(self.path, self.line(parts), key_path(parts), message)


def _line_of(node: Any) -> int | None:
    lc = getattr(node, "lc", None)
    return lc.line + 1 if lc is not None and lc.line is not None else None


MAX_BYTES = 1 << 20  # the largest shipped spec is 12 KB
MAX_NODES = 20_000  # YAML nodes as written
MAX_VALUES = 100_000  # scalars and containers once aliases are expanded
MAX_DEPTH = 32


class _Budget:
    """Counts the values `to_plain` produces, so an alias bomb fails fast instead of hanging."""

    def __init__(self, path: str) -> None:
        self.path, self.left = path, MAX_VALUES

    def spend(self, parts: tuple[object, ...], locator: Locator | None) -> None:
        self.left -= 1
        if self.left < 0:
            raise _too_big(self.path, parts, locator, f"the spec expands to more than {MAX_VALUES:,} values "
                                                       "(YAML aliases repeat what they point to)")
        if len(parts) > MAX_DEPTH:
            raise _too_big(self.path, parts, locator, f"nested more than {MAX_DEPTH} levels deep")


def _too_big(path: str, parts: tuple[object, ...], locator: Locator | None, message: str) -> SpecError:
    return locator.error(parts[:MAX_DEPTH], message) if locator else SpecError(path, None, key_path(parts), message)


def to_plain(node: Any, budget: _Budget | None = None, locator: Locator | None = None,
             parts: tuple[object, ...] = ()) -> Any:
    """ruamel's commented containers and scalar subclasses -> plain Python values (bounded)."""
    if budget is not None:
        budget.spend(parts, locator)
    if isinstance(node, dict):
        return {_scalar(k): to_plain(v, budget, locator, (*parts, _key(k))) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v, budget, locator, (*parts, i)) for i, v in enumerate(node)]
    return _scalar(node)


def _key(key: Any) -> object:
    return key if isinstance(key, (str, int)) and not isinstance(key, bool) else repr(key)


def _scalar(node: Any) -> Any:
    for kind in (bool, int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(path, None, "", f"cannot read spec: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise SpecError(path, None, "", f"spec file is larger than {MAX_BYTES // 1024} KiB; is it a spec?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(path, line, "", f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}") from None


def _prescan(path: str, text: str) -> None:
    """Bound nodes and nesting on the event stream before building anything: the parser is a
    state machine, while the composer recurses and the round-trip loader takes ~0.1 ms a node."""
    depth = 0
    for count, event in enumerate(YAML(typ="rt").parse(text)):
        line = event.start_mark.line + 1 if event.start_mark else None
        if count > MAX_NODES:
            raise SpecError(path, line, "", f"more than {MAX_NODES:,} YAML nodes; the shipped specs have a few hundred")
        if isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise SpecError(path, line, "", f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (MappingEndEvent, SequenceEndEvent)):
            depth -= 1


def _parse(path: str, text: str) -> Any:
    try:
        _prescan(path, text)
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SpecError(path, mark.line + 1 if mark else None, "", f"YAML syntax error: {exc.problem or exc}") from None
    except YAMLError as exc:  # ReaderError (a control character), ...: no problem_mark, maybe a position
        position = getattr(exc, "position", None)
        line = text[:position].count("\n") + 1 if isinstance(position, int) else None
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        raise SpecError(path, line, "", f"not readable as YAML: {reason}") from None
    except RecursionError:
        raise SpecError(path, None, "", "nested too deeply to parse") from None
    except SpecError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        digits = max(re.finditer(r"\d+", text), key=lambda m: len(m.group()), default=None)
        if digits is None or "digits" not in str(exc):
            raise _unconstructible(path, text, exc) from None
        line = text[:digits.start()].count("\n") + 1
        raise SpecError(path, line, "", f"a number of {len(digits.group()):,} digits is too large for a spec") from None
    except Exception as exc:  # ruamel.yaml's own failure on a scalar it resolved (`+_` as an int: IndexError)
        raise _unconstructible(path, text, exc) from None


def _unconstructible(path: str, text: str, exc: Exception) -> SpecError:
    """The scalar ruamel.yaml could not turn into a value, found by constructing each one alone
    (the document is parsed already, and its size bounded by _prescan)."""
    yaml = YAML(typ="rt")
    stack: list[tuple[Any, tuple[object, ...]]] = [(yaml.compose(text), ())]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, ScalarNode):
            try:
                yaml.constructor.construct_object(node, deep=True)
            except Exception:
                return SpecError(path, node.start_mark.line + 1, key_path(parts),
                                 f"not readable as YAML: the value {_short(node.value)!r} "
                                 f"(tag {node.tag}) fails in ruamel.yaml: {type(exc).__name__}: {exc}")
        elif isinstance(node, SequenceNode):
            stack += [(item, (*parts, i)) for i, item in reversed(list(enumerate(node.value)))]
        elif isinstance(node, MappingNode):
            for key, value in reversed(node.value):
                name = key.value if isinstance(key, ScalarNode) else "?"
                stack += [(value, (*parts, name)), (key, parts)]
    return SpecError(path, None, "", f"not readable as YAML: {type(exc).__name__}: {exc}")


def load_spec(path: str | Path, sections: SectionModels = ()
              ) -> tuple[Spec | HookOrderSpec | HookOrderFuzzSpec, Locator]:
    """Parse and validate one spec file; raise `SpecError` on any bad input, in bounded time.

    `sections` ((spec key, pydantic model) pairs) are the checks' own top-level keys an
    optimizer spec may also have; every other unknown key is still an error. A registry
    (`pytest_optimtest.checks.Registry`) passes its own: `registry.load_spec(path)`."""
    path = str(path)
    root = _parse(path, _read(path))
    locator = Locator(path, root)
    if root is None:
        raise SpecError(path, 1, "", "empty spec: expected a mapping with at least 'optimizer'")
    if not isinstance(root, CommentedMap):
        raise SpecError(path, _line_of(root) or 1, "", f"a spec is a mapping, not {type(root).__name__}")
    plain = to_plain(root, _Budget(path), locator)
    kind = plain.get("kind")
    if kind is not None and (not isinstance(kind, str) or kind not in KINDS):
        raise locator.error(("kind",), f"unknown kind {kind!r}{did_you_mean(str(kind), KINDS)}; "
                                       f"one of {', '.join(KINDS)}, or none for an optimizer spec")
    schema: Any = KINDS[kind] if kind is not None else spec_model(sections)
    try:
        spec = schema.model_validate(plain)
    except pydantic.ValidationError as exc:
        raise _first_error(exc, locator, schema) from None
    return spec, locator


def _first_error(exc: pydantic.ValidationError, locator: Locator, schema: Any) -> SpecError:
    # The deepest error is the most specific one (a union reports one error per branch);
    # union branch tags like 'list[HookEventSpec]' are not keys of the file.
    err = max(exc.errors(include_url=False), key=lambda e: len(e["loc"]))
    parts = tuple(p for p in err["loc"] if isinstance(p, int) or (isinstance(p, str) and "[" not in p))
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(parts[:-1], schema)
        hint = did_you_mean(str(parts[-1]), allowed)
        if len(parts) == 1 and not hint:
            hint = ("; if it is the section of a check of your own, register that check (a pytest_optimtest_checks() "
                    "hook in a conftest.py above this spec, or the pytest_optimtest.checks entry-point group)")
        return locator.error(parts, f"unknown key {parts[-1]!r}{hint}")
    message = err["msg"]
    if err["type"] != "value_error" and "input" in err:
        message += f", got {_short(repr(err['input']))}"
    return locator.error(parts, message.removeprefix("Value error, "))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _allowed_keys(parts: tuple[object, ...], model: Any) -> list[str]:
    for part in parts:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        model = _model_in(field.annotation)
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
