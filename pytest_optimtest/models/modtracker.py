"""Models and inputs of PyTorch's ModTracker tests, for hook-order specs to name by import path."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from ..harness.hook_recorder import mark


class Foo(torch.nn.Module):
    """Takes and returns a dict: relu in place, then x @ x."""

    def forward(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        a = x["a"].relu_()
        mark("fw")  # PyTorch's test looks at tracker.parents here, and in backward through this hook
        a.register_hook(lambda grad: mark("bw"))
        return {"a": torch.mm(a, a)}


class Mod(torch.nn.Module):
    """A hierarchy through a plain attribute, a ModuleDict and a ModuleList, called out of order."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Foo()
        self.b = torch.nn.ModuleDict({"nest": Foo()})
        self.c = torch.nn.ModuleList([Foo()])

    def forward(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.b["nest"](self.a(self.c[0](x)))


class Bar(torch.nn.Module):
    """A Linear(10, 10) and an in-place relu."""

    def __init__(self) -> None:
        super().__init__()
        self.foo = torch.nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.foo(x).relu_()


class Checkpointed(torch.nn.Module):
    """Linear layers; with use_ac, every layer after the first runs under activation checkpointing."""

    def __init__(self, n_layers: int = 2, dim: int = 8, use_ac: bool = False) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(n_layers))
        self.use_ac = use_ac

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.linears):
            if i >= 1 and self.use_ac:
                x = checkpoint(block, x, preserve_rng_state=True, use_reentrant=False)
            else:
                x = block(x)
            x = torch.nn.functional.relu(x)
        return x


def dict_10x10() -> tuple[dict[str, torch.Tensor]]:
    """Mod's input: {'a': a non-leaf 10x10 tensor that requires grad}."""
    return ({"a": torch.randn(10, 10, requires_grad=True).clone()},)


def rand_10x10() -> torch.Tensor:
    return torch.rand(10, 10, requires_grad=True)


def rand_2() -> torch.Tensor:
    return torch.rand(2, requires_grad=True)


def randn_2x8() -> torch.Tensor:
    """The checkpointing test's input: needs no grad, so the first layer reports no post_bw."""
    return torch.randn(2, 8)
