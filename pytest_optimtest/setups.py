"""Ready-made `setup:` callables for specs: run on each optimizer the checks build."""

from __future__ import annotations

from typing import Any


def train_mode(optimizer: Any) -> None:
    """`optimizer.train()`: schedule-free optimizers (schedulefree, heavyball's SF*) step only in train mode."""
    optimizer.train()
