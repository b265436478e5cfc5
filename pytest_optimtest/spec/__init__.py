"""Spec files: schema, loading with line numbers, expansion into cases. Imports no check:
expansion takes the registry of checks it expands for."""

from __future__ import annotations

from .case import Case
from .kernel_table import KernelExpectation
from .errors import SpecError, did_you_mean
from .expand import expand
from .loader import load_spec
from .schema import Spec, json_schema

__all__ = ["Case", "KernelExpectation", "Spec", "SpecError", "did_you_mean", "expand", "json_schema", "load_spec"]
