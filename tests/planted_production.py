"""Optimizers that break where production runs them (low precision, sharded params, resharded
checkpoints) and nowhere else; each is caught by one check."""

from __future__ import annotations

import torch
from planted import PlainSGD


class MomentumSGD(PlainSGD):
    """SGD with a momentum buffer in the param's dtype: correct, and what torch.optim.SGD keeps."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(0.9).add_(p.grad)
                p.add_(buf, alpha=-group["lr"])


class CompiledUpcastSGD(MomentumSGD):
    """A compiled-only fast path that lerps the float32 grad into a buffer of the param's dtype:
    one dtype at float32, a dtype mix that lerp_ rejects at bf16."""

    def _update(self) -> None:
        if not torch.compiler.is_compiling():
            return super()._update()
        for group in self.param_groups:
            for p in group["params"]:
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad.float() * 10, 0.1)  # = 0.9 buf + g, in one kernel
                p.add_(buf, alpha=-group["lr"])


class LocalNormSGD(PlainSGD):
    """Normalizes the update by the global grad norm, summed over each param's local shard to save
    a collective: right over whole params, wrong over FSDP2's DTensor shards."""

    def _update(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            local = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params]
            norm = torch.stack([g.pow(2).sum() for g in local]).sum().sqrt()
            for p, g in zip(params, local):
                update = g / (norm + 1e-8)
                (p.to_local() if hasattr(p, "to_local") else p).add_(update, alpha=-group["lr"])


class NumpySGD(PlainSGD):
    """Takes the grad through numpy (a CPU-only trick): a DTensor has no numpy()."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                grad = torch.from_numpy(p.grad.numpy())
                p.add_(grad, alpha=-group["lr"])


class LateStateSGD(MomentumSGD):
    """Adds the previous buffer to the update, kept from its second step on: torch.distributed.checkpoint
    loads into the state that one zero-grad step creates, so that key is dropped on load."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                elif "previous" not in state:
                    state["previous"] = state["momentum_buffer"].clone()
                else:
                    state["previous"].copy_(state["momentum_buffer"])
                buf = state["momentum_buffer"]
                buf.mul_(0.9).add_(p.grad)
                p.add_(buf, alpha=-group["lr"])
                if "previous" in state:
                    p.add_(state["previous"], alpha=-group["lr"])


class LrDividingSGD(PlainSGD):
    """Divides by its lr (AdaBayes' exp(-lr**2 / lr_sgd)): a group at lr 0 raises ZeroDivisionError, in the
    param_groups law's zero-lr group and in the step DCP's load takes at lr 0 alike."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    buffer = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))  # state: DCP's save steps nothing
                    buffer.mul_(0.9).add_(p.grad)
                    p.add_(buffer, alpha=-group["lr"] ** 2 / group["lr"])


class GroupCountingSGD(PlainSGD):
    """Keeps its step count in its param groups and no per-param state (BouncingDecayer's shape): DCP's
    get_optimizer_state_dict steps an optimizer with empty state at lr 0, so each save counts a step."""

    def __init__(self, params, lr=0.1):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "step": 0})

    def _update(self) -> None:
        for group in self.param_groups:
            group["step"] += 1
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] / group["step"])


class GroupCountingNormReadingSGD(GroupCountingSGD):
    """GroupCountingSGD that also keeps the grads' norm, read as a Python number, in its groups (thermoclaw's
    EPTO's `_last_grad_norm`): a partial DTensor's value under FSDP2, each rank's own."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["last_norm"] = sum(float(p.grad.norm().item()) for p in group["params"])
        super()._update()


class ConstructorSeedMomentumSGD(MomentumSGD):
    """Seeds each param's state in its constructor (APOLLO's shape): DCP takes that for initialized
    state, and its momentum buffers have nowhere to load into."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for index, p in enumerate(group["params"]):
                self.state[p]["seed"] = index


class FirstParamStateSGD(MomentumSGD):
    """Keeps state its group shares on the group's first param, made before any step (GPAAdamW's
    train(), schedule-free's): DCP takes that for initialized state and makes none for the other params,
    and its strict load then finds no entry for them."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            self.state[group["params"][0]]["calls"] = torch.zeros(())


class FirstParamFlagSGD(MomentumSGD):
    """Keeps a bool flag its group shares on the group's first param (GPAAdamW's train mode): torch's load
    casts it to the param's dtype, and under ZeRO each rank's shard has a first param of its own."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            self.state[group["params"][0]].setdefault("flag", torch.tensor(True))
        return super().step(closure)


def scalar_scale(device: str = "cpu") -> torch.nn.Module:
    """A model with a 0-d param (a learned scale): FSDP2 shards params along dim 0, and has none here."""

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(10, 10, device=device)
            self.scale = torch.nn.Parameter(torch.tensor(1.0, device=device))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) * self.scale

    return Scaled()


class _RankScaledGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by the world size when ranks run: the
    gradients torch 2.8's FSDP2 hands the optimizer on gloo, whose reduce-scatter sums them."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        ranks = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        return grad * ranks


def summed_grads(device: str = "cpu") -> torch.nn.Module:
    """Two Linear(10, 10) layers whose grads on N ranks are N times the one-process grads."""

    class Summed(torch.nn.Sequential):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _RankScaledGrad.apply(super().forward(x))

    return Summed(*[torch.nn.Linear(10, 10, device=device) for _ in range(2)])


class GroupSGD(MomentumSGD):
    """Correct momentum SGD that asks its process group for the world size, as a ZeRO optimizer does
    (Adams_ZeRO's `process_group: ProcessGroup | None`): a DeviceMesh there raises in torch.distributed."""

    def __init__(self, params, process_group: torch.distributed.ProcessGroup | None = None, lr=0.1):
        super().__init__(params, lr)
        if torch.distributed.is_initialized():
            self.world_size = torch.distributed.get_world_size(process_group)


class MeshSGD(MomentumSGD):
    """Correct momentum SGD that takes the mesh its DTensor params are sharded over and refuses them
    without it (Dion's `distributed_mesh`); a plain run gives it None."""

    def __init__(self, params, distributed_mesh: torch.distributed.device_mesh.DeviceMesh | None = None, lr=0.1):
        super().__init__(params, lr)
        self.distributed_mesh = distributed_mesh

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if isinstance(p, torch.distributed.tensor.DTensor) and self.distributed_mesh is None:
                    raise RuntimeError("Must create optimizer with DeviceMesh if using DTensor parameters.")
                if isinstance(p, torch.distributed.tensor.DTensor) and p.device_mesh != self.distributed_mesh:
                    raise RuntimeError("the params are sharded over another mesh than the optimizer's")
        super()._update()


class NormRatioSGD(MomentumSGD):
    """Keeps a trust ratio in state, the int 1 where a norm is 0 and a tensor elsewhere (catalyst's Lamb): the zero
    grads DCP steps a fresh optimizer on make it an int where the checkpoint holds a tensor, and DCP's load refused
    it with its planner's words alone."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                norm = p.grad.norm()
                ratio = 1 if norm == 0 else p.detach().norm() / norm
                self.state[p]["ratio"] = ratio
                p.add_(p.grad * (-group["lr"] * float(ratio)))


class ListGroupsSGD(torch.optim.Optimizer):
    """Takes its param groups as lists of params and keys its hyperparameters by them (fastai's Optimizer): it
    constructs over torch.optim's dict groups, and its step raises TypeError (unhashable dict). ZeRO, which hands it
    dict groups on each rank, and law group_hyperparameters each made that a red of its own."""

    def __init__(self, params, lr: float = 0.01) -> None:
        self.given = list(params)
        super().__init__(self.given, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        rates = {id(p) if isinstance(p, torch.Tensor) else p: self.defaults["lr"] for p in self.given}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-rates.get(id(p), group["lr"]))

