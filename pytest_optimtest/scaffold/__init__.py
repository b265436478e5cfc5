"""`python -m pytest_optimtest init`: a starter spec written from what probing the optimizer found (writer.py)."""

from .writer import starter_spec, write_starter_spec

__all__ = ["starter_spec", "write_starter_spec"]
