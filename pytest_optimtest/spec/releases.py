"""Counts a spec keys by torch release where releases differ: one count for every release, or a
mapping such as {"2.11": 2, "*": 0} ('*' for the releases without an entry of their own)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from .schema import MAX_COMPILES, check_torch_version


def check_release_keys(value: Any) -> Any:
    """A mapping's keys are quoted releases or '*'."""
    if isinstance(value, dict):
        for version in value:
            if version != "*":
                check_torch_version(version, "counts are keyed by torch releases")
    return value


CompileCount = Annotated[int, Field(ge=0, le=MAX_COMPILES)]
ReleaseCounts = Annotated[CompileCount | dict[str, CompileCount], BeforeValidator(check_release_keys)]
"""A spec's count of compiles or graph breaks: one for every release, or keyed by release."""


def for_release(written: int | dict[str, int] | None, version: str, default: int | None) -> int | None:
    """The value for the running release: its own entry, else '*', else `default`."""
    if isinstance(written, dict):
        return written.get(version, written.get("*", default))
    return written


def release_update(path: list[Any], written: Any, observed: Any, version: str, default: Any) -> dict[str, Any]:
    """Update mode's entry for such a value: the running release's own count, leaving the other
    releases' as written (one count for all becomes a mapping with it under '*' once this release
    differs; a release that sees what '*' says gets no key of its own)."""
    if isinstance(written, dict):
        own = observed if version in written or observed != written.get("*", default) else None
        return {"path": [*path, version], "declared": written.get(version), "observed": own}
    if written is None or observed == written:  # nothing declared yet: the first count is every release's
        return {"path": path, "declared": written, "observed": observed}
    return {"path": path, "declared": written, "observed": {"*": written, version: observed}}
