"""Conformance laws: what PyTorch's test_optim.py checks of torch.optim, for any optimizer, each
a check of its own that a spec declares under `laws` (README: conformance laws)."""

from __future__ import annotations

from .complex_params import LAW_COMPLEX
from .descent import LAW_DESCENT
from .equivalence import LAW_EQUIVALENT
from .param_groups import LAW_PARAM_GROUPS
from .untouched import LAW_UNTOUCHED

LAWS = [LAW_EQUIVALENT, LAW_UNTOUCHED, LAW_PARAM_GROUPS, LAW_DESCENT, LAW_COMPLEX]

__all__ = ["LAWS"]
