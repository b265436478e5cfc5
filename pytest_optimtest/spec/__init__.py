"""Spec files: schema, loading with line numbers, expansion into cases."""

from .case import Case, KernelExpectation
from .errors import SpecError
from .expand import expand
from .loader import load_spec
from .schema import Spec, json_schema

__all__ = ["Case", "KernelExpectation", "Spec", "SpecError", "expand", "json_schema", "load_spec"]
