"""Hypothesis strategies for optimizer tests: parameters, models, module trees, inputs. Public
through `pytest_optimtest.strategies` (which adds `spec_cases`; see its docstring for use); the
checks draw from here. Every strategy draws a blueprint whose repr is the code that rebuilds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

LAYOUTS = ("contiguous", "transposed", "strided")


@dataclass(frozen=True)
class Param:
    """A parameter of `shape`: contiguous, a transposed view (the last two dims swapped, as seed
    003's shampoo test), or a strided view (every other element of a wider buffer)."""

    shape: tuple[int, ...]
    layout: str = "contiguous"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout == "transposed" and len(self.shape) < 2:
            raise ValueError("a transposed view needs at least 2 dims")
        if self.layout == "strided" and len(self.shape) < 1:
            raise ValueError("a strided view needs at least 1 dim")

    def __repr__(self) -> str:
        return f"Param({self.shape!r})" if self.layout == "contiguous" else f"Param({self.shape!r}, {self.layout!r})"

    def build(self, device: str = "cpu", generator: torch.Generator | None = None,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A leaf tensor of this shape, layout and dtype, drawn in float32 from `generator`, that
        requires grad as a model's param does (an optimizer may skip params that do not)."""
        return self._values(device, generator, dtype).detach().requires_grad_()  # detach keeps a view's strides

    def _values(self, device: str, generator: torch.Generator | None, dtype: torch.dtype) -> torch.Tensor:
        shape = self.shape
        if self.layout == "transposed":
            base = torch.randn(*shape[:-2], shape[-1], shape[-2], generator=generator)
            return base.to(device, dtype).transpose(-1, -2)
        if self.layout == "strided":
            base = torch.randn(*shape[:-1], 2 * shape[-1], generator=generator)
            return base.to(device, dtype)[..., ::2]
        return torch.randn(shape, generator=generator).to(device, dtype)


@dataclass(frozen=True)
class Params:
    """A list of parameters, each with a gradient; what an optimizer steps."""

    params: tuple[Param, ...]

    def __init__(self, *params: Param) -> None:
        object.__setattr__(self, "params", tuple(params))

    def __repr__(self) -> str:
        return f"Params({', '.join(map(repr, self.params))})"

    def build(self, device: str = "cpu", seed: int = 0, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
        """The tensors, seeded, each with a `.grad` of its own shape."""
        generator = torch.Generator().manual_seed(seed)
        tensors = [p.build(device, generator, dtype) for p in self.params]
        for t in tensors:
            t.grad = torch.randn(t.shape, generator=generator).to(device, dtype)
        return tensors


@dataclass(frozen=True)
class MLP:
    """Linear layers of `widths` (widths[0] is the input size) with a tanh between them;
    `ties` are groups of layer indices whose weights are one shared Parameter."""

    widths: tuple[int, ...]
    bias: bool = True
    ties: tuple[tuple[int, ...], ...] = ()

    def __repr__(self) -> str:
        extra = ("" if self.bias else ", bias=False") + (f", ties={self.ties!r}" if self.ties else "")
        return f"MLP({self.widths!r}{extra})"

    @property
    def in_features(self) -> int:
        return self.widths[0]

    def __call__(self, device: str = "cpu") -> torch.nn.Sequential:
        """The model (untied; see `tie_names`)."""
        layers: list[torch.nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(self.widths, self.widths[1:])):
            if i:
                layers.append(torch.nn.Tanh())
            layers.append(torch.nn.Linear(n_in, n_out, bias=self.bias, device=device))
        return torch.nn.Sequential(*layers)

    def tie_names(self) -> list[list[str]]:
        """Each tie group as parameter names of the built model, e.g. [['2.weight', '4.weight']]."""
        return [[f"{2 * i}.weight" for i in group] for group in self.ties]


@dataclass(frozen=True)
class Inputs:
    """A batch of `shape`, seeded; `requires_grad` makes every module's input need a gradient."""

    shape: tuple[int, ...]
    requires_grad: bool = False

    def __repr__(self) -> str:
        return f"Inputs({self.shape!r}" + (", requires_grad=True)" if self.requires_grad else ")")

    def build(self, device: str = "cpu", seed: int = 0) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(self.shape, generator=generator).to(device).requires_grad_(self.requires_grad)


# Module trees: containers ModTracker sees through. ModuleList and ModuleDict are never called
# themselves; the blocks holding them call their children in order.

TREE_WIDTH = 4


class _ListBlock(torch.nn.Module):
    def __init__(self, children: list[torch.nn.Module]) -> None:
        super().__init__()
        self.items = torch.nn.ModuleList(children)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.items:
            x = module(x)
        return x


class _DictBlock(torch.nn.Module):
    def __init__(self, children: dict[str, torch.nn.Module]) -> None:
        super().__init__()
        self.items = torch.nn.ModuleDict(children)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.items.values():
            x = module(x)
        return x


@dataclass(frozen=True)
class Lin:
    """A Linear(4, 4) leaf."""

    def __repr__(self) -> str:
        return "Lin()"

    def build(self) -> torch.nn.Module:
        return torch.nn.Linear(TREE_WIDTH, TREE_WIDTH)


@dataclass(frozen=True)
class Seq:
    """An nn.Sequential of subtrees."""

    children: tuple[Any, ...] = field(default=())

    def __init__(self, *children: Any) -> None:
        object.__setattr__(self, "children", tuple(children))

    def __repr__(self) -> str:
        return f"Seq({', '.join(map(repr, self.children))})"

    def build(self) -> torch.nn.Module:
        return torch.nn.Sequential(*(c.build() for c in self.children))


@dataclass(frozen=True)
class ListOf:
    """A block calling an nn.ModuleList of subtrees in order."""

    children: tuple[Any, ...] = field(default=())

    def __init__(self, *children: Any) -> None:
        object.__setattr__(self, "children", tuple(children))

    def __repr__(self) -> str:
        return f"ListOf({', '.join(map(repr, self.children))})"

    def build(self) -> torch.nn.Module:
        return _ListBlock([c.build() for c in self.children])


@dataclass(frozen=True)
class DictOf:
    """A block calling an nn.ModuleDict of subtrees in key order."""

    children: tuple[tuple[str, Any], ...] = field(default=())

    def __init__(self, **children: Any) -> None:
        object.__setattr__(self, "children", tuple(children.items()))

    def __repr__(self) -> str:
        return f"DictOf({', '.join(f'{k}={v!r}' for k, v in self.children)})"

    def build(self) -> torch.nn.Module:
        return _DictBlock({k: c.build() for k, c in self.children})


def tree_input(requires_grad: bool = True) -> torch.Tensor:
    """An input for any module tree (a 2 x 4 batch)."""
    return torch.randn(2, TREE_WIDTH, requires_grad=requires_grad)


# Strategies


def shapes(max_dims: int = 3, max_side: int = 4, allow_empty: bool = True,
           min_dims: int = 0) -> st.SearchStrategy[tuple[int, ...]]:
    """Tensor shapes: 0-d `()`, one-element `(1,)`, empty (a 0 side) and small n-d shapes."""
    side = st.integers(0 if allow_empty else 1, max_side)
    return st.lists(side, min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def params(draw: Any, max_dims: int = 3, max_side: int = 4, allow_empty: bool = True,
           layouts: tuple[str, ...] = LAYOUTS, min_dims: int = 0) -> Param:
    """One `Param`: a shape from `shapes()` and a layout its dims allow."""
    shape = draw(shapes(max_dims, max_side, allow_empty, min_dims))
    allowed = [lay for lay in layouts
               if lay == "contiguous" or (lay == "strided" and shape) or (lay == "transposed" and len(shape) >= 2)]
    return Param(shape, draw(st.sampled_from(allowed or ["contiguous"])))


def param_lists(min_size: int = 1, max_size: int = 4, **kwargs: Any) -> st.SearchStrategy[Params]:
    """`Params`: 1-4 parameters from `params(**kwargs)`; shrinks towards fewer, smaller, contiguous ones."""
    return st.lists(params(**kwargs), min_size=min_size, max_size=max_size).map(lambda ps: Params(*ps))


@st.composite
def mlps(draw: Any, max_depth: int = 3, max_width: int = 6, in_features: int | None = None,
         bias: bool | None = None, tied: bool = False) -> MLP:
    """`MLP`s of 1..max_depth layers. tied=True: at least two layers share one weight (the tied
    layers get equal square shapes; the other layers vary)."""
    depth = draw(st.integers(2 if tied else 1, max_depth))
    width = st.integers(1, max_width)
    widths = [in_features or draw(width)] + [draw(width) for _ in range(depth)]
    ties: tuple[tuple[int, ...], ...] = ()
    if tied:
        group = draw(st.lists(st.integers(0, depth - 1), min_size=2, max_size=depth, unique=True).map(sorted))
        square = widths[0] if (in_features and group[0] == 0) else draw(width)
        for i in group:  # layer i maps widths[i] -> widths[i + 1]; a shared weight needs both equal
            widths[i] = widths[i + 1] = square
        ties = (tuple(group),)
    return MLP(tuple(widths), draw(st.booleans()) if bias is None else bias, ties)


def inputs(in_features: int, max_batch: int = 4, requires_grad: bool | None = False) -> st.SearchStrategy[Inputs]:
    """`Inputs` of shape (batch, in_features)."""
    grad = st.booleans() if requires_grad is None else st.just(requires_grad)
    return st.builds(lambda b, g: Inputs((b, in_features), g), st.integers(1, max_batch), grad)


def module_trees(max_leaves: int = 6, max_children: int = 3) -> st.SearchStrategy[Any]:
    """Nested `Seq`, `ListOf` and `DictOf` trees of `Lin` leaves."""
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        some = st.lists(children, min_size=1, max_size=max_children)
        return st.one_of(
            some.map(lambda c: Seq(*c)),
            some.map(lambda c: ListOf(*c)),
            some.map(lambda c: DictOf(**{chr(ord("a") + i): v for i, v in enumerate(c)})),
        )

    return st.recursive(st.just(Lin()), extend, max_leaves=max_leaves)
