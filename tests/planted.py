"""Optimizers with planted faults, each caught by a check in the test suite.

They build on `PlainSGD` rather than torch.optim.SGD: calling the decorated
torch.optim step from a subclass inserts a graph break under fullgraph=True.
"""

from __future__ import annotations

import math
import os
import time

import torch


class PlainSGD(torch.optim.Optimizer):
    """SGD written the simple way a third-party optimizer is."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._update()
        return loss


class CompiledOnlyDrift(PlainSGD):
    """Matches SGD eagerly; under torch.compile nudges the last parameter."""

    def _update(self) -> None:
        super()._update()
        if torch.compiler.is_compiling():
            self.param_groups[0]["params"][-1].add_(1e-3)


class EagerOnlyCounter(PlainSGD):
    """Writes an attribute only eagerly: the shape of dynamo dropping an attribute write."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.calls = 0

    def _update(self) -> None:
        if not torch.compiler.is_compiling():
            self.calls += 1
        super()._update()


class NeverCompiled(PlainSGD):
    """Its step is excluded from dynamo: without fullgraph, a 'compiled' step that silently runs eagerly."""

    step = torch.compiler.disable(PlainSGD.step)


class PrintingSGD(PlainSGD):
    """Breaks its own graph once a step (a print, which dynamo resumes after), then updates compiled."""

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        print("stepping")
        with torch.no_grad():
            self._update()
        return loss


class NoisySGD(PlainSGD):
    """SGD plus gaussian noise: draws random numbers inside step."""

    def _update(self) -> None:
        super()._update()
        for p in self.param_groups[0]["params"]:
            p.add_(torch.randn_like(p), alpha=0.01)


class SharedCountSGD(PlainSGD):
    """Its step size decays with a count shared by every instance: per-parameter
    optimizers in backward advance it several times per step."""

    steps_taken = 0  # class attribute: the planted fault

    def _update(self) -> None:
        type(self).steps_taken += 1
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.param_groups[0]["lr"] / type(self).steps_taken)


class NeedsClosure(PlainSGD):
    """Like LBFGS: step takes a required closure."""

    def step(self, closure):
        return super().step(closure)


class FloatScheduleSGD(PlainSGD):
    """Decays its step size with a Python float in its param group, rewritten every step (the
    shape of OneCycleLR writing float betas): dynamo guards on param-group values, so every
    step recompiles."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            group["scale"] = 1.0

    def _update(self) -> None:
        for group in self.param_groups:
            group["scale"] *= 0.9
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] * group["scale"])


class ItemClipSGD(PlainSGD):
    """Clips by the gradient norm read back with .item(): a graph break inside step."""

    def _update(self) -> None:
        grads = [p.grad for g in self.param_groups for p in g["params"]]
        norm = torch.stack([g.norm() for g in grads]).norm().item()
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] / max(1.0, norm))


DEEP_KEPT: list = []


class DeeplyKeptSGD(PlainSGD):
    """Keeps its params a dozen containers below a module global, past the depth the leak check
    searches: out of its sight, as dynamo's compile cache is out of gc's."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        box: list = [p for g in self.param_groups for p in g["params"]]
        for _ in range(12):
            box = [box]
        DEEP_KEPT.append(box)


def _project(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if torch.dot(p.flatten(), g.flatten()) > 0:  # a branch on a tensor's value: the graph breaks here
        return g - 0.01 * p
    return g


class ProjectingSGD(PlainSGD):
    """Calls a helper of its module that breaks the graph, as pytorch-optimizer's AdamP does: dynamo's
    compiled graphs, installed as globals of this module, then keep the params alive (torch's leak)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(_project(p, p.grad), alpha=-group["lr"])


KEPT_PARAMS: list = []  # the planted leak: a module-level list the optimizer appends to


class GlobalRefSGD(PlainSGD):
    """Remembers every param it was given in a module-level list."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        KEPT_PARAMS.extend(p for g in self.param_groups for p in g["params"])


class CallsTwice(torch.nn.Module):
    """Calls its submodule twice in forward: a hook-order spec written for one call catches it."""

    def __init__(self):
        super().__init__()
        self.foo = torch.nn.Linear(10, 10)

    def forward(self, x):
        return self.foo(self.foo(x)).relu_()


class LoopItemModel(torch.nn.Sequential):
    """Reads a Python number off each layer's output in a loop: dynamo gives up on the forward's frame
    (a graph break in a loop) and runs it eagerly, a frame of the closure's, not of the step's."""

    def forward(self, x):
        for layer in self:
            x = layer(x)
            if x.abs().max().item() > 1e6:
                x = x / 2
        return x


def loop_item_model(device: str = "cpu") -> torch.nn.Module:
    return LoopItemModel(*[torch.nn.Linear(10, 10, device=device) for _ in range(2)])


class RankNoiseSGD(PlainSGD):
    """SGD plus noise from its own generator, seeded from the OS: every DDP rank draws different
    numbers, so the replicas drift apart."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.generator = torch.Generator()
        self.generator.seed()

    def _update(self) -> None:
        super()._update()
        for p in self.param_groups[0]["params"]:
            p.add_(torch.randn(p.shape, generator=self.generator), alpha=1e-3)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


class CrashOnRank1(PlainSGD):
    """Rank 1's process dies in its first step (exit code 3)."""

    def _update(self) -> None:
        if _rank() == 1:
            os._exit(3)
        super()._update()


class HangOnRank1(PlainSGD):
    """Rank 1 never returns from its first step; rank 0 then waits in the next all-reduce."""

    def _update(self) -> None:
        if _rank() == 1:
            time.sleep(3600)
        super()._update()


class FirstDimSGD(PlainSGD):
    """Scales each update by 1/rows, reading p.shape[0]: fine until a 0-d parameter arrives."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] / max(1, p.shape[0]))


class FlatViewSGD(PlainSGD):
    """Flattens each param with `.view(-1)` (RelativisticAdam's scaling): a transposed param raises."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.view(-1).add_(p.grad.reshape(-1), alpha=-group["lr"])


# Faults that eager and compiled share: caught by the metamorphic properties, not by parity.

class SkipZeroDimSGD(PlainSGD):
    """Skips 0-d params (a `for row in p` style loop that never runs on a scalar)."""

    def _update(self) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is not None and p.dim() > 0:
                p.add_(p.grad, alpha=-self.param_groups[0]["lr"])


class ReshapeSGD(PlainSGD):
    """Updates `p.reshape(-1)` in place: for a non-contiguous view, reshape copies, so the update is lost."""

    def _update(self) -> None:
        for p in self.param_groups[0]["params"]:
            p.reshape(-1).add_(p.grad.reshape(-1), alpha=-self.param_groups[0]["lr"])


class UpcastMomentumSGD(PlainSGD):
    """SGD with momentum whose buffer is always float32, whatever the param's dtype."""

    def _update(self) -> None:
        for p in self.param_groups[0]["params"]:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
            buf = state["momentum_buffer"].mul_(0.9).add_(p.grad)
            p.add_(buf.to(p.dtype), alpha=-self.param_groups[0]["lr"])


class PositionalSGD(PlainSGD):
    """Scales each param's lr by its position in the group."""

    def _update(self) -> None:
        for i, p in enumerate(self.param_groups[0]["params"]):
            p.add_(p.grad, alpha=-self.param_groups[0]["lr"] * (1 + 0.5 * i))


class ForeachMaximizeSGD(torch.optim.Optimizer):
    """SGD with `maximize` and `foreach`; the foreach path forgets maximize."""

    def __init__(self, params, lr=0.1, maximize=False, foreach=False):
        super().__init__(params, {"lr": lr, "maximize": maximize, "foreach": foreach})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            if group["foreach"]:
                torch._foreach_add_(params, grads, alpha=-group["lr"])
            else:
                for p, g in zip(params, grads):
                    p.add_(-g if group["maximize"] else g, alpha=-group["lr"])


class UnseededNoiseSGD(RankNoiseSGD):
    """SGD plus noise from a generator seeded by the OS: torch.manual_seed does not control it."""


class LrFreeDecaySGD(PlainSGD):
    """Weight decay applied as `p *= 1 - wd`, without lr: params shrink at lr=0."""

    def _update(self) -> None:
        super()._update()
        for p in self.param_groups[0]["params"]:
            p.mul_(1 - 0.01)


class IgnoresClosureSGD(PlainSGD):
    """Takes a closure and never calls it."""

    @torch.no_grad()
    def step(self, closure=None):
        self._update()
        return None


class PickySGD(PlainSGD):
    """A flag its constructor always rejects: `init` must leave that case out, saying why."""

    def __init__(self, params, lr=0.1, exotic=False):
        if exotic:
            raise ValueError("exotic mode is not implemented")
        super().__init__(params, lr)


class GroupStepSGD(PlainSGD):
    """Counts steps in its param groups: dynamo then writes back the whole group dict, with the
    'capturable' key it injects (torch's doing, not this optimizer's)."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
        super()._update()


class PowStepSGD(PlainSGD):
    """zij's AdaGC shape: an int step count in its groups fed to math.pow (a bias correction), which
    dynamo specializes: every step recompiles, and the count round-trips through state_dict."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            correction = 1.0 - math.pow(0.9, group["step"])
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * correction)


class LazyStateSGD(PlainSGD):
    """SGD with momentum whose buffer is created inside `step`, as most third-party optimizers do."""

    def _update(self) -> None:
        for p in self.param_groups[0]["params"]:
            state = self.state[p]
            if "buf" not in state:
                state["buf"] = torch.zeros_like(p)
            state["buf"].mul_(0.9).add_(p.grad)
            p.add_(state["buf"], alpha=-self.param_groups[0]["lr"])


class KeepsRecompilingSGD(PlainSGD):
    """Appends to a Python list on every step and loops over it: a new guard failure each step."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.history = []

    def _update(self) -> None:
        self.history.append(1.0)
        scale = 0.0
        for h in self.history:
            scale += h
        for p in self.param_groups[0]["params"]:
            p.add_(p.grad, alpha=-self.param_groups[0]["lr"] / scale)


class ClippedSGD(torch.optim.SGD):
    """The usual subclass: clip the grads, then `super().step()`. Correct, and compiles fullgraph
    once torch.optim's own `_use_grad` graph breaks are out of the way."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.clamp_(-1.0, 1.0)
        return super().step(closure)


class LazyCloneMomentumSGD(PlainSGD):
    """Momentum whose buffer is created inside `step` from the first grad (correct, and clear of
    the zeros_like aliasing bug that LazyStateSGD's pattern hits in inductor)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = p.grad.detach().clone()
                else:
                    state["buf"].mul_(0.9).add_(p.grad)
                p.add_(state["buf"], alpha=-group["lr"])


class SkipZeroGradSGD(PlainSGD):
    """Returns early when every grad is zero, read back with .item(): a graph break outside any
    loop (dynamo resumes after it), and correct in every respect (None grads, in backward, sharded)."""

    def _update(self) -> None:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads or torch.stack([g.abs().sum() for g in grads]).sum().item() == 0:
            return
        super()._update()


def rank_pid(payload, rank: int, world_size: int) -> tuple[int, int]:
    """A rank job: (this process's pid, the all-reduced sum of the ranks)."""
    import torch.distributed as dist

    total = torch.tensor([rank])
    dist.all_reduce(total)
    return os.getpid(), int(total)


def rank_compile_threads(payload, rank: int, world_size: int) -> int:
    """A rank job: the number of compile processes inductor would start in this rank."""
    import torch._inductor.config

    return torch._inductor.config.compile_threads


def rank_raise(payload: None, rank: int, world_size: int) -> None:
    """A rank job: rank 1's optimizer raises in its step (its own code); rank 0 waits in an all-reduce."""
    import torch.distributed as dist

    if rank == 1:
        param = torch.nn.Parameter(torch.ones(2))
        param.grad = torch.ones(2)
        TypoSGDOnRank([param]).step()
    dist.all_reduce(torch.zeros(1))


class TypoSGDOnRank(PlainSGD):
    def _update(self) -> None:
        raise KeyError("momentun")


def rank_exit(payload: int, rank: int, world_size: int) -> None:
    """A rank job: rank 1 exits with code `payload`; rank 0 waits in an all-reduce."""
    import torch.distributed as dist

    if rank == 1:
        os._exit(payload)
    dist.all_reduce(torch.zeros(1))


def rank_segfault(payload: None, rank: int, world_size: int) -> None:
    """A rank job: rank 1 dereferences a null pointer (a native kernel given a DTensor's storage); rank 0 waits."""
    import ctypes

    import torch.distributed as dist

    if rank == 1:
        ctypes.string_at(0)
    dist.all_reduce(torch.zeros(1))


def every_rank_exits(payload: int, rank: int, world_size: int) -> None:
    """A rank job: every rank exits, rank r with code `payload + r`, rank 1 a moment after rank 0 (both
    from one barrier: the ranks take a job at their own pace)."""
    import time

    import torch.distributed as dist

    dist.barrier()
    time.sleep(0.2 * rank)
    os._exit(payload + rank)


class ViewUpdateSGD(PlainSGD):
    """Flattens each param with .view(), which a transposed param refuses (AdamP's and SGDP's bug)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.view(-1).sub_(group["lr"] * p.grad.reshape(-1))


def _sgd_update(p: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    p.add_(grad, alpha=-lr)


class SelfCompilingStaticSGD(PlainSGD):
    """Compiles its per-param update itself, static shapes and fullgraph (adv_optm's compiled_optimizer):
    each new param shape recompiles it, and past dynamo's recompile limit fullgraph raises."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self._update_one = torch.compile(_sgd_update, fullgraph=True, dynamic=False)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update_one(p, p.grad, group["lr"])


class ContiguousOnlySGD(PlainSGD):
    """LuminaV's shape: steps params through raw pointers, so it refuses a non-contiguous one, on purpose."""

    def _update(self) -> None:
        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                if not p.is_contiguous():
                    raise ValueError(f"ContiguousOnlySGD requires contiguous parameters: call .contiguous() on parameter {i}")
        super()._update()


class AssertsContiguousSGD(PlainSGD):
    """Adams_ZeRO's shape: its constructor asserts each param is contiguous (it keeps a flat view of it)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                assert p.is_contiguous(), "All parameters must be contiguous"
