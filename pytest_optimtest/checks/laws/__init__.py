"""Conformance laws: what PyTorch's test_optim.py checks of torch.optim, for any optimizer, each
a check of its own that a spec declares under `laws` (docs/laws.md)."""

from __future__ import annotations

from .complex_params import LAW_COMPLEX
from .descent import LAW_DESCENT
from .equivalence import LAW_EQUIVALENT
from .param_groups import LAW_PARAM_GROUPS
from .untouched import LAW_UNTOUCHED
from .grads_untouched import LAW_GRADS_UNTOUCHED
from .closure_loss import LAW_CLOSURE_LOSS
from .add_param_group import LAW_ADD_PARAM_GROUP
from .group_hyperparameters import LAW_GROUP_HYPERPARAMETERS
from .changed_hyperparameters import LAW_CHANGED_HYPERPARAMETERS
from .late_joiners import LAW_LATE_JOINERS
from .bounded_state import LAW_BOUNDED_STATE
from .determinism import LAW_DETERMINISM
from .hooks import LAW_HOOKS

LAWS = [LAW_EQUIVALENT, LAW_UNTOUCHED, LAW_PARAM_GROUPS, LAW_DESCENT, LAW_COMPLEX,
        # round two (issue 34): on by default, each turned off with its reason under laws.off
        LAW_GRADS_UNTOUCHED, LAW_CLOSURE_LOSS, LAW_ADD_PARAM_GROUP, LAW_GROUP_HYPERPARAMETERS,
        LAW_CHANGED_HYPERPARAMETERS, LAW_LATE_JOINERS, LAW_BOUNDED_STATE, LAW_DETERMINISM, LAW_HOOKS]

__all__ = ["LAWS"]
