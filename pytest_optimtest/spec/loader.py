"""Read a spec file: YAML with line numbers, validated into a `Spec`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from .errors import SpecError, did_you_mean, key_path
from .schema import HookOrderFuzzSpec, HookOrderSpec, Spec

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


def to_plain(node: Any) -> Any:
    """ruamel's commented containers and scalar subclasses -> plain Python values."""
    if isinstance(node, dict):
        return {to_plain(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    for kind in (bool, int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node


def load_spec(path: str | Path) -> tuple[Spec | HookOrderSpec | HookOrderFuzzSpec, Locator]:
    """Parse and validate one spec file; raise `SpecError` on any bad input."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(path, None, "", f"cannot read spec: {exc.strerror}") from None
    try:
        root = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(path, line, "", f"YAML syntax error: {exc.problem or exc}") from None
    locator = Locator(path, root)
    if root is None:
        raise SpecError(path, 1, "", "empty spec: expected a mapping with at least 'optimizer'")
    if not isinstance(root, CommentedMap):
        raise SpecError(path, _line_of(root) or 1, "", f"a spec is a mapping, not {type(root).__name__}")
    kind = root.get("kind")
    if kind is not None and kind not in KINDS:
        raise locator.error(("kind",), f"unknown kind {kind!r}{did_you_mean(str(kind), KINDS)}; "
                                       f"one of {', '.join(KINDS)}, or none for an optimizer spec")
    schema = KINDS.get(kind, Spec)
    try:
        spec = schema.model_validate(to_plain(root))
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
        return locator.error(parts, f"unknown key {parts[-1]!r}{did_you_mean(str(parts[-1]), allowed)}")
    message = err["msg"]
    if err["type"] != "value_error" and "input" in err:
        message += f", got {err['input']!r}"
    return locator.error(parts, message.removeprefix("Value error, "))


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
