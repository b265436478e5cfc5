"""Model factories a spec can name in `model:`; each is called as factory(device=...)."""

from __future__ import annotations

import torch

IN_FEATURES = 10


def two_linear(device: str = "cpu") -> torch.nn.Module:
    """PyTorch's compiled-optimizer model: two Linear(10, 10) layers with biases."""
    return torch.nn.Sequential(*[torch.nn.Linear(IN_FEATURES, IN_FEATURES, device=device) for _ in range(2)])


def two_linear_no_bias(device: str = "cpu") -> torch.nn.Module:
    """Two Linear(10, 10) layers without biases: only 2-D params (Muon's requirement)."""
    return torch.nn.Sequential(
        *[torch.nn.Linear(IN_FEATURES, IN_FEATURES, bias=False, device=device) for _ in range(2)]
    )


def low_bit_state_mlp(device: str = "cpu") -> torch.nn.Module:
    """Linear(10, 1024) and Linear(1024, 10): weights of 10240 elements, whose halves on two ranks
    still hold 5120 (a multiple of 256). bitsandbytes and torchao keep the state of a param under
    4096 elements in float32, so their 8-bit, 4-bit and fp8 state is only tested on a model like this."""
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, 1024, device=device), torch.nn.Linear(1024, IN_FEATURES, device=device))


class Diagonal(torch.nn.Module):
    """y = x * weight + bias over the last dim: a layer whose params are all 1-D."""

    def __init__(self, features: int, device: str = "cpu") -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(features, device=device).uniform_(0.5, 1.5))
        self.bias = torch.nn.Parameter(torch.empty(features, device=device).uniform_(-0.5, 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


def two_diagonal(device: str = "cpu") -> torch.nn.Module:
    """Two Diagonal(10) layers: only 1-D params, for steps that take vectors alone (ncg's LCG takes
    torch.dot of each param's grad). The product of the layers' weights gives a nonzero Hessian."""
    return torch.nn.Sequential(*[Diagonal(IN_FEATURES, device=device) for _ in range(2)])
