"""Optimizers written as packages the plugin was never tuned on write them (issue: verdicts that
hold on optimizers nobody here has seen). Each is correct, or wrong in one named way."""

from __future__ import annotations

import collections
import functools
import math
import time
import typing

import torch

from planted import PlainSGD


class InfAttributeSGD(PlainSGD):
    """Correct SGD that keeps an infinite float attribute and an inf state tensor (a running minimum)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.best_loss = math.inf

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    if "floor" not in state:
                        state["floor"] = torch.full_like(p, -math.inf)
                    p.add_(p.grad, alpha=-group["lr"])


class ParamKeyedGroupSGD(PlainSGD):
    """Correct SGD with a per-param scale kept in its group, keyed by the group's Parameters."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            group["scales"] = {p: 1.0 for p in group["params"]}

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * group["scales"][p])


class NoClosureSGD(PlainSGD):
    """Correct SGD whose step takes no closure at all."""

    @torch.no_grad()
    def step(self):  # type: ignore[override]
        self._update()


class MatrixOnlySGD(PlainSGD):
    """A Muon-style optimizer that refuses 1-D params with its own assert."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                assert p.ndim == 2, "MatrixOnlySGD steps matrices only"
                p.add_(p.grad, alpha=-group["lr"])


class KeyErrorSGD(PlainSGD):
    """Raises from its own code on every step."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["nonexistent"]


class CompiledOnlyRaise(PlainSGD):
    """Takes another path under torch.compile, one that adds mismatched shapes: only the compiled step raises."""

    def _update(self) -> None:
        if torch.compiler.is_compiling():
            for p in self.param_groups[0]["params"]:
                p.add_(torch.ones(p.numel() + 1))
        super()._update()


class FirstStepIdleSGD(PlainSGD):
    """ADOPT-style: the first step only records the grad's scale; params move from the second step on."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "scale" not in state:
                    state["scale"] = p.grad.abs().mean().clamp_min(1e-8)
                    continue
                p.add_(p.grad / state["scale"], alpha=-group["lr"])


class HangingSGD(PlainSGD):
    """Waits forever in its step (as a collective waiting on a rank that is gone)."""

    def _update(self) -> None:
        import threading

        threading.Event().wait()


class ExitingSGD(PlainSGD):
    """Kills its own process in its step (as a native crash does)."""

    def _update(self) -> None:
        import os

        os._exit(3)


class SegfaultingSGD(PlainSGD):
    """Dereferences a null pointer in its step where `crash` is set (as a custom kernel's bug does)."""

    def __init__(self, params, lr=0.1, crash=False):
        super().__init__(params, lr)
        self.crash = crash

    def _update(self) -> None:
        if self.crash:
            import ctypes

            ctypes.string_at(0)
        super()._update()


class SplitParamsSGD(PlainSGD):
    """Takes its matrices and its other params as two arguments (as Muon hybrids do)."""

    def __init__(self, matrix_params, params, lr=0.1):
        super().__init__([*matrix_params, *params], lr)


class NamedParamsSGD(PlainSGD):
    """Takes (name, param) pairs and exempts biases from weight decay by name, as many packages do."""

    def __init__(self, named_params, lr=0.1, weight_decay=0.01):
        named = list(named_params)
        decay = [p for name, p in named if not name.lower().endswith("bias")]
        rest = [p for name, p in named if name.lower().endswith("bias")]
        torch.optim.Optimizer.__init__(self, [{"params": decay, "weight_decay": weight_decay},
                                              {"params": rest, "weight_decay": 0.0}], {"lr": lr})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(p.grad, alpha=-group["lr"])


class ModelSGD(PlainSGD):
    """Takes the model itself (as optimizers that read its structure do)."""

    def __init__(self, model, lr=0.1):
        super().__init__(model.parameters(), lr)


class MuonStyleSGD(PlainSGD):
    """Muon-style hybrid: groups flagged `use_muon` hold matrices only (its own assert) and take a
    normalized step; the other groups a plain one."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if group["use_muon"]:
                    assert p.ndim == 2, "use_muon groups take matrices only"
                    p.add_(p.grad / p.grad.norm().clamp_min(1e-8), alpha=-group["lr"])
                else:
                    p.add_(p.grad, alpha=-group["lr"])


class StepCountingSGD(PlainSGD):
    """Counts its steps and keeps the last loss on itself, as many packages do: torch 2.13's dynamo
    drops both writes inside a compiled step."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.steps_taken = 0

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        self.steps_taken += 1
        self.last_loss = loss
        return loss


class PeriodicPullSGD(PlainSGD):
    """Lookahead's shape: a counter on itself says when the params are pulled halfway back to a slow copy
    in its state. torch 2.13's dynamo drops the counter's write in a compiled step, so the pull never comes."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.count = 0
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["slow"] = p.detach().clone()

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        self.count += 1
        if self.count % 2 == 0:
            for group in self.param_groups:
                for p in group["params"]:
                    slow = self.state[p]["slow"]
                    slow.lerp_(p, 0.5)
                    p.copy_(slow)
        return loss


class ClosureLossSGD(PlainSGD):
    """Stashes the closure's loss on itself, checks it with .item() (a graph break) and reads it back in
    its update: compiled, the write is dropped at the break and the read raises."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.closure_loss = loss
        if loss is not None and not math.isfinite(loss.item()):
            raise ValueError("the closure's loss is not finite")
        self._update()
        return loss

    def _update(self) -> None:
        scale = 1.0 if self.closure_loss is None else 0.5
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] * scale)


class FiniteLossSGD(PlainSGD):
    """Correct SGD that refuses a closure's loss that is not finite (a guard many optimizers keep): at an lr
    the model diverges under, its step raises once the run has blown up (ClosureLossSGD, on torch 2.6,
    whose dynamo keeps the attribute: the red said "the optimizer's doing")."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            if not math.isfinite(loss.item()):
                raise ValueError("the closure's loss is not finite")
        self._update()
        return loss


class InitGroupCountingSGD(PlainSGD):
    """Counts its steps in `_init_group`, as torch.optim's layout invites (ACFGM keeps its previous iterates
    there): dynamo runs _init_group once while tracing, so the compiled count stops moving."""

    def _init_group(self, group, params):
        for p in group["params"]:
            if p.grad is not None:
                state = self.state[p]
                state["step"] = state.get("step", torch.tensor(0.0)) + 1
                params.append(p)

    def _update(self) -> None:
        for group in self.param_groups:
            params: list = []
            self._init_group(group, params)
            for p in params:
                p.add_(p.grad / self.state[p]["step"], alpha=-group["lr"])


class PlainObjectSGD:
    """No torch.optim.Optimizer and no zero_grad: a step(closure) over a list of params (psgd's shape)."""

    def __init__(self, params, lr=0.1):
        self.params = list(params)
        self.lr = lr

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure()
        for p in self.params:
            p.add_(p.grad, alpha=-self.lr)
        return loss


class ShardNormSGD(PlainSGD):
    """Scales each param's step by its grad's norm over `to_local()`: over FSDP2 shards, each shard's norm."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                p.add_(p.grad, alpha=-group["lr"] / max(float(local.norm()), 1e-8))


class BaseOptimizerSAM(PlainSGD):
    """Takes the optimizer it wraps as a second required argument and keeps whatever it is given, as
    SAM does: split params across both arguments, it constructs and its step raises."""

    def __init__(self, params, optim, rho=0.05):
        torch.optim.Optimizer.__init__(self, params, {"rho": rho})
        self.optim = optim

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure()
        self.optim.step()
        return loss


def _use_grad_copy(func):
    """A package's copy of torch.optim's `_use_grad_for_differentiable` (AdamZ vendors torch's Optimizer)."""

    def _use_grad(self, *args, **kwargs):
        prev_grad = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(False)
            torch._dynamo.graph_break()
            ret = func(self, *args, **kwargs)
        finally:
            torch._dynamo.graph_break()
            torch.set_grad_enabled(prev_grad)
        return ret

    functools.update_wrapper(_use_grad, func)
    return _use_grad


class VendoredWrapperSGD(PlainSGD):
    """Its step under a copy of torch.optim's graph-breaking wrapper, as under torch's own."""

    step = _use_grad_copy(PlainSGD.step)


class CompiledForeachRaisingSGD(PlainSGD):
    """Its foreach path raises under torch.compile only (AdamZ's vendored foreach Adam does)."""

    def __init__(self, params, lr=0.1, foreach=None):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "foreach": foreach})

    def _update(self) -> None:
        for group in self.param_groups:
            params = group["params"]
            if group["foreach"] and torch.compiler.is_compiling():  # scalars of the wrong shape: fake tensors refuse them
                scalars = torch.full((len(params), 1), -group["lr"])
                torch._foreach_addcdiv_(params, [p.grad for p in params], [torch.ones_like(p) for p in params], scalars)
                continue
            for p in params:
                p.add_(p.grad, alpha=-group["lr"])


class _Metrics:
    """RMSGD's shape: a callable object in a param group, holding the params, and a NumPy array in the group."""

    def __init__(self, params):
        self.params = list(params)

    def __call__(self):
        return len(self.params)


class MetricsInGroupSGD(PlainSGD):
    def __init__(self, params, lr=0.1):
        import numpy  # the optimizer's own dependency, as RMSGD's

        params = list(params)
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "metrics": _Metrics(params),
                                                      "lr_vector": numpy.repeat(lr, len(params))})


class NoGroupsSGD(PlainSGD):
    """Takes a list of params and refuses param groups (RMSGD reads `requires_grad` off each entry)."""

    def __init__(self, params, lr=0.1):
        params = list(params)
        if any(not p.requires_grad for p in params):
            raise ValueError("frozen params are not supported")
        super().__init__(params, lr)


class UnsavedCounterSGD(PlainSGD):
    """Correct SGD that counts its steps in an attribute its state_dict leaves out (GaLoreAdamW's
    `_global_step`), counted after a graph break, as GaLoreAdamW's is, so that compiled and eager agree."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.global_step = 0

    def _update(self) -> None:
        super()._update()
        torch._dynamo.graph_break()
        self.global_step += 1


ShapeRecord = collections.namedtuple("ShapeRecord", ["rows", "scale"])


class ShapeKeepingSGD(PlainSGD):
    """Correct SGD whose state keeps its param's shape (a torch.Size, as QUTEN's does) and a namedtuple."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    state["shape"] = p.shape
                    state["record"] = ShapeRecord(p.shape[0], torch.ones(()))
                    p.add_(p.grad, alpha=-group["lr"])



class GlobalNormSGD(PlainSGD):
    """Correct by design, and coupled: every update is divided by the norm of all its params' grads
    (FANoS's temperature, NCG's line search, PILOT's statistics are as global): a param's step
    depends on the others."""

    def _update(self) -> None:
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.stack([g.norm() for g in grads]).norm() + 1e-8 if grads else 1.0
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad / norm, alpha=-group["lr"])


class FlagInStateSGD(PlainSGD):
    """DoG's state_dict: correct steps, and a flag of its own saved under 'state' beside the params' entries."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self._first_step = True

    def _update(self) -> None:
        super()._update()
        self._first_step = False

    def state_dict(self):
        state_dict = super().state_dict()
        state_dict["state"]["_first_step"] = self._first_step
        return state_dict

    def load_state_dict(self, state_dict):
        self._first_step = state_dict["state"].pop("_first_step")
        super().load_state_dict(state_dict)


class CapitalFlagSGD(PlainSGD):
    """Flags named as OPTAMI's DampedNewton names them (`CG_subsolver`): init's case names must still load."""

    def __init__(self, params, lr=0.1, CG_subsolver=True, Verbose=False):  # the package's spelling
        super().__init__(params, lr)
        for group in self.param_groups:
            group.update(CG_subsolver=CG_subsolver, Verbose=Verbose)


class HessianScaledSGD(PlainSGD):
    """AdaHessian's protocol: the step differentiates p.grad (a Hessian-vector product), so its closure
    must call backward(create_graph=True). Correct: scales each grad by its curvature along ones."""

    def _update(self) -> None:
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        curvature = torch.autograd.grad([p.grad for p in params], params, [torch.ones_like(p) for p in params])
        for group in self.param_groups:
            for p, h in zip(params, curvature):
                p.sub_(group["lr"] * p.grad / (h.abs() + 1.0))


class LossDifferentiatingSGD(PlainSGD):
    """psgd's protocol: the closure returns the loss without backward and the step differentiates it,
    twice (a Newton-like step along the grad). Correct."""

    def step(self, closure):
        loss = closure()
        params = [p for group in self.param_groups for p in group["params"]]
        grads = torch.autograd.grad(loss, params, create_graph=True)
        curvature = torch.autograd.grad(grads, params, grads)
        with torch.no_grad():
            for group in self.param_groups:
                for p, g, h in zip(params, grads, curvature):
                    p.sub_(group["lr"] * g / (h.abs() + 1.0))
        return loss.detach()


class DotNormalizedSGD(PlainSGD):
    """A step over vectors alone (torch.dot of each grad, as ncg's LCG takes): its grad scaled to unit
    length. Correct; over a matrix it raises torch.dot's "1D tensors expected"."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(group["lr"] * p.grad / (torch.dot(p.grad, p.grad).sqrt() + 1.0))


class DotHessianSGD(PlainSGD):
    """LCG's shape: differentiates each p.grad (so its closure needs backward(create_graph=True)) and
    takes torch.dot over it (so vectors alone). Correct: a curvature-scaled step along the grad."""

    def _update(self) -> None:
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        curvature = torch.autograd.grad([p.grad for p in params], params, [p.grad.detach() for p in params])
        for group in self.param_groups:
            for p, h in zip(params, curvature):
                p.sub_(group["lr"] * p.grad / (torch.dot(p.grad, h).abs().sqrt() + 1.0))


class ObjectiveSGD(PlainSGD):
    """torch_numopt's protocol: the step takes an object whose methods it calls (`objective.closure()`
    makes the loss and grads), not a closure function."""

    def step(self, objective):
        objective.closure()
        self._update()


class EpochStepSGD(PlainSGD):
    """SpawnGD's protocol: step(epoch, closure=None) takes the epoch first and steps by its parity."""

    def step(self, epoch, closure=None):
        scale = 1.0 if epoch % 2 == 0 else 0.5
        for group in self.param_groups:
            for p in group["params"]:
                p.sub_(group["lr"] * scale * p.grad)


class UnboundStepSGD(PlainSGD):
    """Its step reads a name it binds only under a flag it never sets (NixOptimizer's UnboundLocalError)."""

    def _update(self) -> None:
        if self.defaults.get("warm", False):
            scale = 1.0
        for group in self.param_groups:
            for p in group["params"]:
                p.sub_(group["lr"] * scale * p.grad)


class ExtrapolationFirstSGD(PlainSGD):
    """torch_constrained's extragradient protocol: `extrapolation()` must be called before each step,
    which refuses on purpose otherwise."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.extrapolated = False

    def extrapolation(self) -> None:
        self.extrapolated = True

    def step(self, closure=None):
        if not self.extrapolated:
            raise RuntimeError("Need to call extrapolation before calling step.")
        self.extrapolated = False
        return super().step(closure)


def _settings(momentum: float = 0.0) -> float:
    return momentum


class KwargsOptionsSGD(PlainSGD):
    """Takes its options through **kwargs and hands them to a function of its own at each step (torchmin's
    Minimizer hands them to minimize()), which refuses an `lr`; steps at a fixed lr of 0.1."""

    def __init__(self, params, **options):
        super().__init__(params, 0.1)
        self.options = options

    def _update(self) -> None:
        _settings(**self.options)
        super()._update()


class NoisyClosureSGD(PlainSGD):
    """Its step requires a closure and draws noise from torch's RNG (torch_pso's particles)."""

    def step(self, closure):
        loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.sub_(group["lr"] * (p.grad + 0.01 * torch.randn_like(p)))
        return loss


class LoraPairsSGD(PlainSGD):
    """Takes a model and steps only its LoRA pairs (LoRA-Pro's AdamW): the plugin's models have none."""

    def __init__(self, model: torch.nn.Module, lr=0.1):
        pairs = [m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "lora_B")]
        if not pairs:
            raise RuntimeError("LoraPairsSGD: no (lora_A, lora_B) pairs found on the model.")
        super().__init__([p for m in pairs for p in (m.lora_A, m.lora_B)], lr)


class ClosureSearchSGD(PlainSGD):
    """Gradient-free in spirit (swarmtorch's PSO): without a closure its step returns at once; given one,
    it evaluates it and steps."""

    @torch.no_grad()
    def step(self, closure=None):
        if closure is None:
            return None
        return super().step(closure)


class OwnGeneratorSGD(PlainSGD):
    """Noisy SGD drawing from a generator of its own, seeded from the OS unless given `random_state`
    (pyperch's GA, SA, RHC)."""

    def __init__(self, params, lr=0.1, random_state=None):
        super().__init__(params, lr)
        self.generator = torch.Generator()
        self.generator.seed() if random_state is None else self.generator.manual_seed(random_state)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    noise = torch.randn(p.shape, generator=self.generator, dtype=p.dtype)
                    p.sub_(group["lr"] * (p.grad + 0.01 * noise))


class _LoraLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lora_A = torch.nn.Parameter(torch.randn(2, 10) * 0.1)
        self.lora_B = torch.nn.Parameter(torch.randn(10, 2) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.lora_A.t() @ self.lora_B.t()


def lora_model(device: str = "cpu") -> torch.nn.Module:
    """The model LoraPairsSGD takes: one LoRA pair, 10 features in and out."""
    return _LoraLinear().to(device)


class LazyImportSGD(PlainSGD):
    """Imports a dependency only when it steps (swarmtorch's CMA-ES and `cma`), one not installed."""

    def _update(self) -> None:
        import optimtest_missing_dependency  # noqa: F401  # the point: a module that is not installed

        super()._update()


class LossSearch(PlainSGD):
    """A search by the closure's loss, no grads (pyperch's hill climbing): shifts each param by +-lr and
    keeps the better (the worse under `maximize`); its step requires the closure."""

    def __init__(self, params, lr=0.1, maximize=False):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "maximize": maximize})

    @torch.no_grad()
    def step(self, closure):
        sign = -1.0 if self.param_groups[0]["maximize"] else 1.0
        best = sign * float(closure())
        for group in self.param_groups:
            for p in group["params"]:
                for shift in (group["lr"], -2 * group["lr"]):
                    p.add_(shift)
                    loss = sign * float(closure())
                    if loss < best:
                        best = loss
                        break
                else:
                    p.add_(group["lr"])
        return torch.tensor(sign * best)


class NoFloat64SGD(PlainSGD):
    """Quantizes its state for float32 and bf16 grads only (gefen's): float64 is refused."""

    def _update(self) -> None:
        if any(p.dtype == torch.float64 for g in self.param_groups for p in g["params"]):
            raise ValueError("NoFloat64SGD state dtype is undefined for torch.float64")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                    buf.mul_(0.9).add_(p.grad)
                    p.add_(buf, alpha=-group["lr"])


class UpToMatricesSGD(PlainSGD):
    """Transposes each grad (a Shampoo-like preconditioner): params of 3 or more dimensions are refused."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad.t().t(), alpha=-group["lr"])


class WholeModelOnlySGD(PlainSGD):
    """Steps only when it holds every param of the model (a norm over the whole model, say): the shard that
    ZeroRedundancyOptimizer hands each rank makes its step raise, while DDP and one process run."""

    def _update(self) -> None:
        if sum(len(g["params"]) for g in self.param_groups) < 4:
            raise ValueError("WholeModelOnlySGD needs all 4 params of the model")
        super()._update()


class StorageSwapSGD(PlainSGD):
    """SGD that swaps each param's storage for its update's (truegrad's Sign: `p.set_(o)`) instead of
    updating it in place: DDP's gradient buckets keep viewing the storage it dropped."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.set_(p - group["lr"] * p.grad)


class GroupPerParamSGD(PlainSGD):
    """Makes one param group per param of those it is given (gefen's Gefen): ZeroRedundancyOptimizer,
    which syncs its groups into the optimizer's one to one, refuses it in torch's own assert."""

    def __init__(self, params, lr=0.1):
        given = list(params)
        flat = [p for g in given for p in (g["params"] if isinstance(g, dict) else [g])]
        torch.optim.Optimizer.__init__(self, [{"params": [p]} for p in flat], {"lr": lr})


class SelfScalingSGD(PlainSGD):
    """Scales the lr it is given tenfold, but not a param group's own (OptiRoulette adjusts the lr of the
    optimizer it picks): ZeroRedundancyOptimizer hands it groups that carry the lr, so ZeRO steps otherwise."""

    def __init__(self, params, lr=0.1):
        given = list(params)
        own = any(isinstance(g, dict) and "lr" in g for g in given)
        super().__init__(given, lr if own else lr * 10)


class FreeThenAllocSGD(PlainSGD):
    """Swaps each param's storage after dropping the old one: the allocator often hands the new storage the
    freed address, so a swap judged by addresses alone goes unseen (stop 60's CI: 3 of 4 params named)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    updated = p.detach() - group["lr"] * p.grad
                    p.set_(torch.empty(0))
                    p.set_(torch.empty_like(updated).copy_(updated))


class GradAttributeSGD(PlainSGD):
    """Keeps the previous grad as the `.grad` of a state tensor (adancfgd's `state['param_prev'].grad`) and
    steps with the mean of it and the new one: no checkpoint saves a tensor's attributes."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["prev"] = torch.zeros_like(p)
                    state["prev"].grad = p.grad.clone()
                p.add_(state["prev"].grad + p.grad, alpha=-group["lr"] / 2)
                state["prev"].copy_(p)
                state["prev"].grad = p.grad.clone()


class AliasingLookahead(torch.optim.Optimizer):
    """torchlab's Ranger (a Lookahead over RAdam): its state and param_groups are its inner optimizer's, and it
    keeps torch's load_state_dict, which rebinds both, so a loaded copy steps its inner optimizer from fresh state.
    (Its slow weights are in that state and it syncs every step: nothing else differs after a load.)"""

    def __init__(self, params, lr=0.1, alpha=0.5):
        self.base_optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
        super().__init__(self.base_optimizer.param_groups, {"alpha": alpha})
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.base_optimizer.step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                slow = self.state[p].setdefault("slow", p.detach().clone())
                slow.add_(p - slow, alpha=0.5)
                p.copy_(slow)
        return loss


class GradHalvingSGD(PlainSGD):
    """SGD with momentum that halves each p.grad in place (schedule-free's and adancfgd's steps write p.grad):
    over one backward's grads, each step reads what the last one wrote."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.grad.mul_(0.5)
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(0.9).add_(p.grad)
                p.add_(buf, alpha=-group["lr"])


class IntFlagSGD(PlainSGD):
    """Correct SGD that keeps an int64 flag in its state (trasmuon's `E_ref_initialized`): torch's
    load_state_dict casts it to the params' float dtype, in a state_dict round trip and in ZeRO's
    consolidated load alike (one root cause)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    state.setdefault("initialized", torch.ones((), dtype=torch.int64))
                    p.add_(p.grad * state["initialized"], alpha=-group["lr"])


class TensorLrCacheSGD(PlainSGD):
    """Correct SGD that caches a tensor lr's value in an attribute of its own, which a float lr never
    creates (Gefen's `_lr_scalar_cache`): the runs are the same, the attribute only one variant's."""

    def _update(self) -> None:
        for group in self.param_groups:
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                self._lr_cache = (lr, lr.item())
                lr = self._lr_cache[1]
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)


class CudaDefaultsSGD(PlainSGD):
    """SGD whose defaults need a GPU (flashoptim's FlashAdam: quantized state, error-correction bits and a
    fused step, each refused without CUDA), and which steps on CPU with them switched off."""

    def __init__(self, params, lr=0.1, quantize: bool = True, master_bits: int | None = 24, check: bool = False):
        if not torch.cuda.is_available() and (quantize or master_bits is not None):
            raise NotImplementedError("Quantization requires a CUDA device.")
        super().__init__(params, lr)


@torch.compile(backend="eager", fullgraph=True)
def _cuda_kernel(p: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    assert p.is_cuda and grad.is_cuda  # a Triton kernel's wrapper (muonium's gram_)
    p.add_(grad, alpha=-lr)


class CudaKernelSGD(PlainSGD):
    """SGD whose step runs a kernel compiled with fullgraph that asserts CUDA tensors (muonium's Muon):
    on CPU, dynamo raises `Unsupported: Observed exception` from torch's compile wrapper."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    _cuda_kernel(p, p.grad, group["lr"])


class TwoPlayerSGD:
    """A two-player game's optimizer (torch_cgd's CGD): params of each player, an lr by another name, and a
    step that takes each player's loss."""

    def __init__(self, x_params, y_params, learning_rate):
        self.x_params, self.y_params, self.eta = list(x_params), list(y_params), learning_rate

    def zero_grad(self) -> None:
        for p in [*self.x_params, *self.y_params]:
            p.grad = None

    def step(self, f, g) -> None:
        for loss, params in ((f, self.x_params), (g, self.y_params)):
            for p, grad in zip(params, torch.autograd.grad(loss, params, retain_graph=True)):
                p.data.add_(grad, alpha=-self.eta)


class LossTensorSGD(PlainSGD):
    """A step that takes the loss tensor and differentiates it itself (torch_cgd's ACGD.step(f: Tensor))."""

    def step(self, f: torch.Tensor) -> None:  # type: ignore[override]
        params = [p for group in self.param_groups for p in group["params"]]
        for p, grad in zip(params, torch.autograd.grad(f, params)):
            p.data.add_(grad, alpha=-self.defaults["lr"])


class NoDriverSGD(PlainSGD):
    """A step that launches a Triton kernel, which finds no GPU driver here (triton_muon_adamw's TritonAdamW):
    a `raise` of Triton's, which init read as a protocol the optimizer enforces."""

    def _update(self) -> None:
        raise RuntimeError("0 active drivers ([]). There should only be one.")


class ShardMomentumSGD(PlainSGD):
    """SGD with momentum kept as a plain tensor of the rank's shard (trasmuon's TrasMuon under FSDP2): its
    step reads `to_local()`, so the state is no DTensor, and DCP saves each rank's own piece."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                local = p.to_local() if hasattr(p, "to_local") else p
                grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                state = self.state[p]
                if "momentum" not in state:
                    state["momentum"] = grad.clone()
                else:
                    state["momentum"].mul_(0.9).add_(grad)
                local.add_(state["momentum"], alpha=-group["lr"])


class _QuantizedState:
    """A state value that is no tensor and whose state_dict takes the entry's name (flashoptim's
    _MaybeQuantizedTensor)."""

    def __init__(self, data: torch.Tensor) -> None:
        self._data = data

    def state_dict(self, name: str) -> dict[str, torch.Tensor]:
        return {name: self._data}


class WrappedStateSGD(PlainSGD):
    """SGD with momentum kept inside an object of its own (flashoptim's FlashAdam): the snapshot called its
    `state_dict()`, which takes a name, and every item was red as the plugin's own error."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum" not in state:
                    state["momentum"] = _QuantizedState(torch.zeros_like(p))
                state["momentum"]._data = state["momentum"]._data * 0.9 + p.grad
                p.add_(state["momentum"]._data, alpha=-group["lr"])


class PartialNormSGD(PlainSGD):
    """SGD scaled by the grads' global norm read as a Python number (H3's Lipschitz estimate): over FSDP2's
    DTensor params, `g.norm().item()` is each rank's norm of its own shard."""

    def _update(self) -> None:
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        scale = 1.0 / (1.0 + sum(float(g.norm().item()) ** 2 for g in grads) ** 0.5)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * scale)


class Bf16ConstructorSGD(PlainSGD):
    """Mixed-precision Adam's constructor (mpadam's MPAdam): it refuses params that are not half precision."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        if any(p.dtype not in (torch.float16, torch.bfloat16) for g in self.param_groups for p in g["params"]):
            raise ValueError("Weight type should be either float16 or bfloat16")


class Bf16GpuSGD(Bf16ConstructorSGD):
    """mpadam's MPAdam whole: bf16 params only, and a step that moves its master weights to the GPU."""

    def _update(self) -> None:
        if any(not p.is_cuda for g in self.param_groups for p in g["params"]):
            raise RuntimeError("Weights should be on gpu")
        super()._update()


class CpuBackendRefusingSGD(PlainSGD):
    """DeepSpeed's FusedLamb and FusedLion: the constructor loads a kernel that the CPU accelerator lacks, and says
    so in its own words ("had not been implemented on CPU backend"), naming neither CUDA nor a GPU."""

    def __init__(self, params, lr=0.1):
        raise ValueError("This op had not been implemented on CPU backend.")


class InstanceNumberedSGD(PlainSGD):
    """DeepSpeed's CPU optimizers: each instance takes the next number of a class-wide count (`opt_id`), which
    its C++ kernels key their state by; two optimizers built alike differ in it, however alike they step."""

    made = 0

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.opt_id = InstanceNumberedSGD.made
        InstanceNumberedSGD.made += 1


class InstanceStepSGD(PlainSGD):
    """DeepSpeed's ZenFlowCPUAdam: its constructor sets `self.step = self._sequential_step`, a step(step_id,
    closure=None) that ZeRO-Offload's engine calls, over the class's step(closure=None)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.step = self._sequential_step

    @torch.no_grad()
    def _sequential_step(self, step_id, closure=None):
        if not isinstance(step_id, int):  # what pybind11 says of a C++ kernel's int argument given something else
            raise TypeError(f"adam_update(): incompatible function arguments.\nInvoked with: {step_id!r}")
        return super().step(closure)


class MarkedParamsSGD(PlainSGD):
    """DeepSpeed's ZenFlowSelectiveAdamW: steps only the params its engine marked (`selected_grad`), and skips
    every other one without a word."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if hasattr(p, "selected_grad"):
                    p.add_(p.selected_grad, alpha=-group["lr"])


class LastParamCounterSGD(PlainSGD):
    """DeepSpeed's FusedAdam: counts the group's steps in `state['step']` of whichever param its loop ended on."""

    def _update(self) -> None:
        for group in self.param_groups:
            state = {}
            for p in group["params"]:
                state = self.state[p]
                state.setdefault("step", 0)
                p.add_(p.grad, alpha=-group["lr"])
            if state:
                state["step"] += 1


class ModularSGD(PlainSGD):
    """torchzero's Optimizer(params, *modules): the update is the chain of modules given after the params."""

    def __init__(self, params, *modules, lr=0.1):
        if not modules:
            raise RuntimeError("Empty list of modules passed to `ModularSGD`")
        super().__init__(params, lr)


class SlowSearchSGD(PlainSGD):
    """A global search in every step (torchzero's ScipyDE over the model's 220 params): minutes a step."""

    def _update(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(0.05)
        super()._update()


class TupleGroupsSGD:
    """Momentum SGD written as torchopt writes its optimizers: no torch.optim.Optimizer, each param group
    a tuple of its params (no settings of its own), the state in `state_groups`, a tuple as state_dict."""

    def __init__(self, params, lr=0.1, momentum=0.9):
        self.lr, self.momentum = lr, momentum
        self.param_groups: list[tuple] = []
        self.state_groups: list[tuple] = []
        self.add_param_group(params)

    def add_param_group(self, params) -> None:
        group = tuple(_tensor_leaves(params))  # a pytree's leaves, as torchopt flattens what it is given
        self.param_groups.append(group)
        self.state_groups.append(tuple(torch.zeros_like(p) for p in group))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group:
                p.grad = None

    def state_dict(self) -> tuple:
        return tuple(self.state_groups)

    def load_state_dict(self, state_dict) -> None:
        self.state_groups[:] = list(state_dict)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, buffers in zip(self.param_groups, self.state_groups):
            for p, buffer in zip(group, buffers):
                if p.grad is not None:
                    buffer.mul_(self.momentum).add_(p.grad)
                    p.add_(buffer, alpha=-self.lr)
        return loss


def _tensor_leaves(tree):
    if isinstance(tree, torch.Tensor):
        return [tree]
    values = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, (list, tuple)) else []
    return [leaf for value in values for leaf in _tensor_leaves(value)]


class SelfReducingSGD(PlainSGD):
    """Correct SGD that averages its grads across the ranks itself when torch.distributed is up (as
    Adams_ZeRO shards and gathers its params): under DDP the average of equal grads changes nothing;
    under ZeRO each rank's instance holds other params, so its collectives cannot match."""

    def _update(self) -> None:
        import torch.distributed as dist  # looked up at call time, as optimizers that use it do

        if dist.is_available() and dist.is_initialized():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
                        p.grad.div_(dist.get_world_size())
        super()._update()


class NoGradViewMasterSGD(PlainSGD):
    """Correct SGD whose state holds a flat view of each param made under no_grad, after which its
    constructor writes the param in place with grad mode on (Adams_ZeRO's `master_param = p.view(-1)`):
    autograd then refuses to read the view's history (`.is_leaf`, `.grad`) and raises."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                with torch.no_grad():
                    self.state[p]["flat"] = p.view(-1)
                p.detach().mul_(1.0)


class StringStateSGD(PlainSGD):
    """Correct SGD that keeps a setting as a str in each param's state (fanos's `preconditioner_kind`) and
    dispatches on it: torch's load_state_dict gives the str back as a generator's text, and the step after
    a load raises KeyError in the optimizer's frame."""

    def _update(self) -> None:
        scales = {"plain": 1.0}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    kind = self.state[p].setdefault("kind", "plain")
                    p.add_(p.grad, alpha=-group["lr"] * scales[kind])


class PartialNormStateSGD(PlainSGD):
    """SGD that keeps each grad's squared norm, read as a Python number, in its state (mctorch's conjugate
    gradient: `state['ograd_ograd'] = torch.sum(grad * grad).item()`): over FSDP2's DTensor grads each rank
    keeps its own shard's, so both the sharded run and the state a checkpoint saves differ by rank."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["grad_grad"] = torch.sum(p.grad * p.grad).item()
                    p.add_(p.grad, alpha=-group["lr"] / (1.0 + self.state[p]["grad_grad"]) ** 0.5)



class LastBitSGD(PlainSGD):
    """SGD plus a step read off each grad's last bit: gradient_ascent's update, at a grad that nearly
    vanishes, turns the last bit into a difference of 1e-4 as this does everywhere. Correct in the one
    sense the check needs: equal grads give equal params; so DDP's reference needs DDP's grads, bitwise."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    last_bit = (p.grad.float().view(torch.int32) & 1).to(p.dtype)
                    p.sub_(group["lr"] * (p.grad + 0.01 * last_bit))


class GroupIndexStateSGD(PlainSGD):
    """DoWG's state: keyed by the group's index (`state[0]['x0']`) beside its params, which torch's
    state_dict saves as indices too; on load the group's entry is read back as param 0's."""

    def _update(self) -> None:
        for index, group in enumerate(self.param_groups):
            start = self.state[index].setdefault("x0", [p.detach().clone() for p in group["params"]])
            for p, p0 in zip(group["params"], start):
                if p.grad is not None:
                    p.add_(p.grad + 0.1 * (p - p0), alpha=-group["lr"])


class ParamsHeldStateDictSGD(PlainSGD):
    """gradient_equilibrum's state_dict: its param groups as they are, the params themselves in them, not
    their indices; its load takes them as its own groups, so a loaded optimizer steps the saved copies."""

    def state_dict(self):
        return {"state": self.state, "param_groups": self.param_groups}

    def load_state_dict(self, state_dict):
        self.param_groups = state_dict["param_groups"]


class DroppingSGD(PlainSGD):
    """DropGrad's way: each grad element kept with probability 0.1 (drawn from torch's RNG), so a small
    param is sometimes left where it was; stepped one param at a time in backward, other draws land on it."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    kept = torch.bernoulli(torch.full_like(p.grad, 0.1))
                    p.add_(p.grad * kept, alpha=-group["lr"])


class TorchlessStepSGD(PlainSGD):
    """gradient_equilibrum's step: it names no torch module, so once the closure (torch.optim's zero_grad,
    which dynamo will not trace) breaks its graph, dynamo skips the step's frame and it runs eagerly."""

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad.data, alpha=-group["lr"])
        return loss


class GradlessIndexSGD(PlainSGD):
    """torch-clip's ClippedSSTM: its step indexes a list of the grads there are by param position, an
    IndexError where a grad is None (none_grads' red), which two optimizers in backward meet as well."""

    def _update(self) -> None:
        for group in self.param_groups:
            norms = [p.grad.norm() for p in group["params"] if p.grad is not None]
            scales = [1.0 + norms[i] for i in range(len(group["params"]))]  # IndexError where a grad is None
            for p, scale in zip(group["params"], scales):
                p.add_(p.grad / scale, alpha=-group["lr"])


class NormCheckedSGD(PlainSGD):
    """emerging_optimizers' MuonHyperball: its constructor refuses a param of zero norm (it keeps each
    param's norm as the radius it steps on)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                if p.norm().item() == 0:
                    raise ValueError("NormCheckedSGD requires all parameters to have non-zero norm")


class CastStateSGD(PlainSGD):
    """homeadam's HomeAdam: `state = cast(dict[str, Any], self.state[p])` before writing its state, a
    momentum SGD here. Eager, correct; compiled, torch 2.13's dynamo loses the writes (no state is kept)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = typing.cast(dict[str, typing.Any], self.state[p])
                    if "momentum" not in state:
                        state["momentum"] = torch.zeros_like(p)
                    state["momentum"].mul_(0.9).add_(p.grad)
                    p.add_(state["momentum"], alpha=-group["lr"])


class TorchRaisesOverGroupsSGD(PlainSGD):
    """emerging_optimizers' LaProp: over two groups with other betas, its step raised inside torch (dynamo's
    "Guard failed on the same frame it was created", from a function the step compiles itself). Here torch's
    own `torch._assert` raises where the groups' momenta differ."""

    def __init__(self, params, lr=0.1, momentum=0.5):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "momentum": momentum})

    def _update(self) -> None:
        torch._assert(len({g["momentum"] for g in self.param_groups}) == 1, "one momentum for every group")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                    buf.mul_(group["momentum"]).add_(p.grad)
                    p.add_(buf, alpha=-group["lr"])


class InPlaceNormClampSGD(PlainSGD):
    """emerging_optimizers' ObliqueSGD: it clamps a norm in place, which over FSDP2's sharded params is a
    Partial DTensor that DTensor will not change placement of in place ("use the out-of-place version")."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    norm = p.grad.norm()
                    norm.clamp_min_(1e-8)
                    p.add_(p.grad / norm, alpha=-group["lr"])


class ReducedNormSGD(PlainSGD):
    """llm-foundry's DecoupledClipLion: it all-reduces each grad's squared norm across ranks, written for local
    shards; over FSDP2's DTensor params the norm is already the whole param's, and DTensor registers no c10d
    collective: "Operator c10d.allreduce_.default does not have a sharding strategy registered"."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    norm = torch.linalg.vector_norm(p.grad) ** 2
                    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
                        torch.distributed.all_reduce(norm)
                    p.add_(p.grad / (norm.sqrt() + 1), alpha=-group["lr"])


class PlainScalarStateSGD(PlainSGD):
    """timm's NvNovoGrad: a 0-d state made by torch.zeros([]), not from the param, written in place with a
    reduction of the grad: over FSDP2's DTensor params DTensor's dispatch raises a bare AssertionError."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    norm = self.state[p].setdefault("norm", torch.zeros([]))
                    norm.copy_(p.grad.pow(2).sum())
                    p.add_(p.grad / (norm.sqrt() + 1.0), alpha=-group["lr"])


def _momentum_update(p, buf, lr):
    buf.mul_(0.9).add_(p.grad)
    torch._dynamo.graph_break()  # emerging_optimizers' Muon: a call dynamo cannot trace, between two halves of the update
    p.add_(buf, alpha=-lr)


class FramesSGD(PlainSGD):
    """emerging_optimizers' Muon family: its step graph breaks, so dynamo compiles it as several frames,
    each guarding on the state tensors a load replaces: the load recompiles each of them once."""

    def _init_group(self, group, params, bufs):  # as torch.optim's: dynamo marks the state it makes static
        for p in group["params"]:
            if p.grad is not None:
                if "momentum" not in self.state[p]:
                    self.state[p]["momentum"] = torch.zeros_like(p)
                params.append(p)
                bufs.append(self.state[p]["momentum"])

    def _update(self) -> None:
        for group in self.param_groups:
            params, bufs = [], []
            self._init_group(group, params, bufs)
            for p, buf in zip(params, bufs):
                _momentum_update(p, buf, group["lr"])


class SlowFirstStepSGD(PlainSGD):
    """emerging_optimizers' PSGDPro: its first step in a process compiles functions it compiles itself (over
    30 s on a cold inductor cache), and every step after is quick."""

    compiled = False

    def _update(self) -> None:
        if not SlowFirstStepSGD.compiled:
            time.sleep(2.5)
            SlowFirstStepSGD.compiled = True
        super()._update()


class ImportingConstructorSGD(PlainSGD):
    """gram_newton_schulz's Muon: its constructor imports a package of CUDA kernels (quack) that is not installed."""

    def __init__(self, params, lr=0.1):
        import quack_kernels_not_installed  # noqa: F401

        super().__init__(params, lr)


class NonNegativeParamsSGD(PlainSGD):
    """emerging_optimizers' SinkhornMuon(*args, **kwargs): its constructor refuses params with negative entries."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for group in self.param_groups:
            for p in group["params"]:
                if p.min() < 0:
                    raise ValueError(f"Parameter with shape {p.shape} contains negative values: entries must be non-negative")


class Float32NormStateSGD(PlainSGD):
    """hakuli's Hakuli: a float32 norm kept in state over bf16 params (`prev_norm`), compared in place each
    step; torch's load_state_dict casts it to bf16, which the compiled step guards on: it recompiles."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    previous = state.get("prev_norm", torch.zeros((), dtype=torch.float32, device=p.device))
                    p.add_(p.grad * (1 + 0 * previous), alpha=-group["lr"])  # a graph input, as hakuli's ratio reads it
                    state["prev_norm"] = p.grad.float().norm()  # rebound each step: float32 again after a load


class FusedBackwardSGD(torch.optim.Optimizer):
    """lomo-optim's Lomo: no step; `fused_backward(loss, lr)` runs backward, and hooks it registered on the
    params update each one as its grad arrives (a protocol of its own, not torch.optim's loop)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    def fused_backward(self, loss, lr):
        loss.backward()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-lr)


class AssertedClosureSGD(PlainSGD):
    """momo's Momo: `step(closure=None, loss=None)` asserts one of them was given (a Polyak step reads the
    loss's value); an average of the grads in the params' dtype as its state."""

    def step(self, closure=None, loss=None):
        assert (closure is not None) or (loss is not None), "Either loss tensor or closure must be passed."
        return super().step(closure) if closure is not None else (self._update() or loss)

    @torch.no_grad()
    def _update(self) -> None:
        for group in self.param_groups:
            for p in (p for p in group["params"] if p.grad is not None):
                average = self.state[p].setdefault("grad_average", torch.zeros_like(p)).lerp_(p.grad, 0.1)
                p.sub_(average, alpha=group["lr"])


class RankedGossipSGD(torch.optim.Optimizer):
    """decent_optim_wrapper's DecentOptimWrapper: told its rank and world size, it averages params with its
    neighbours' over a process group it asserts is initialized."""

    def __init__(self, params, rank, world_size, topology, lr=0.1):
        assert torch.distributed.is_initialized(), "torch.distributed is not initialized."
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        raise NotImplementedError("never constructed outside a process group")


def get_world_size() -> int:
    """deepspeed.comm's: asserts its own backend was set up (deepspeed.init_distributed) before anything reads it."""
    raise AssertionError("DeepSpeed backend not set, please initialize it using init_process_group()")


class OwnCommsBackendSGD(PlainSGD):
    """DeepSpeed's Muon: its step splits the update across ranks read off a comms backend of the package's own,
    whose error names no "process group" but `init_process_group()`, raised in a function named get_world_size."""

    def _update(self) -> None:
        get_world_size()


class OwnCommsMuonHybrid(torch.optim.Optimizer):
    """DeepSpeed's MuonWithAuxAdam (Keller Jordan's): takes groups flagged `use_muon` and nothing else, and its step
    reads the world size off DeepSpeed's comms backend."""

    def __init__(self, param_groups):
        for group in param_groups:
            assert "use_muon" in group  # a plain list: Tensor.__contains__ refuses the str
            group.setdefault("lr", 0.02)
        super().__init__(param_groups, {})

    def step(self, closure=None):
        get_world_size()


class GroupStepCountSGD(PlainSGD):
    """geoopt's RiemannianSGD: `if "step" not in group: group["step"] = 0` then `group["step"] += 1`, a key
    its groups get on the first step (dynamo guards the group's length); no state at its default momentum 0."""

    def _update(self) -> None:
        for group in self.param_groups:
            if "step" not in group:
                group["step"] = 0
            group["step"] += 1
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


class LrDecayingSGD(PlainSGD):
    """pyro's ClippedAdam: `group["lr"] *= group["lrd"]` at every step, an assignment to a key of its groups
    (dynamo guards the group's length for it, as for a key's presence test), and a Python int step in state."""

    def __init__(self, params, lr=0.01, lrd=1.0):  # pyro's default: no decay
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "lrd": lrd})

    def _update(self) -> None:
        for group in self.param_groups:
            group["lr"] *= group["lrd"]
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    state["step"] = state.get("step", 0) + 1  # a Python int, as pyro's
                    p.add_(p.grad, alpha=-group["lr"])


class ItemInLoopSGD(PlainSGD):
    """momo's Momo: a Polyak step size read as a Python number (`t1.item()`) inside its loop over the param
    groups; dynamo cannot resume after a graph break inside a loop, so it runs the whole frame eagerly."""

    def _update(self) -> None:
        for group in self.param_groups:
            norm = torch.zeros(())
            for p in group["params"]:
                if p.grad is not None:
                    norm = norm + (p.grad * p.grad).sum()
            scale = min(1.0, 1.0 / (float(norm.item()) + 1e-8))
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * scale)


class SquaredGradSumSGD(PlainSGD):
    """pyro's AdagradRMSProp: an accumulator of squared grads, large, whose last bits differ where the step
    and the closure are compiled (rounding, which torch.compile allows; float64 shows it), grown here by a
    cancellation: (g^2 + 1) - 1 keeps what rounding left of g^2 beside 1."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    total = self.state[p].setdefault("sum", torch.zeros_like(p))
                    total.add_((p.grad * p.grad * 1e-3 + 1.0) - 1.0)
                    p.addcdiv_(p.grad, total.sqrt() + 1e-3, value=-group["lr"])


class UnsavedGeneratorSGD(PlainSGD):
    """SGD with noise from a torch.Generator of its own, kept as an attribute its state_dict leaves out
    (timm's Adahessian draws its Hutchinson probes so): a resumed run draws from the seed again."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.generator = torch.Generator().manual_seed(7)

    def _update(self) -> None:
        super()._update()
        torch._dynamo.graph_break()  # the update above stays one graph, whatever dynamo makes of the draws
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(torch.rand(p.shape, generator=self.generator).to(p.dtype), alpha=1e-2)


class SavedGeneratorSGD(UnsavedGeneratorSGD):
    """UnsavedGeneratorSGD that saves its generator's state in its state_dict (pyperch's way): correct."""

    def state_dict(self):
        saved = super().state_dict()
        saved["generator"] = self.generator.get_state()
        return saved

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.generator.set_state(state_dict.pop("generator"))
        super().load_state_dict(state_dict)


class Float32OnlySGD(PlainSGD):
    """SGD that refuses bf16 params on purpose, saying which dtypes it takes (sweepx's SOAP)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.dtype not in (torch.float32, torch.float64):
                    raise TypeError(f"Float32OnlySGD supports float32/float64 parameters, got {p.grad.dtype}")
        super()._update()


class NumpyRoundTripSGD(PlainSGD):
    """SGD whose step goes through NumPy, which has no bf16: torch's error over bf16 params, not a refusal."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(torch.from_numpy(p.grad.numpy() * group["lr"]))


@torch.compile(fullgraph=True, dynamic=False, backend="eager")
def _scaled_grad(grad: torch.Tensor, lr: float) -> torch.Tensor:
    return grad * lr


class OwnCompiledUpdateSGD(PlainSGD):
    """Correct SGD whose update is a fullgraph torch.compile of its own (Dion's Newton-Schulz): each
    param shape, dtype and lr is a compile of its own, and a test item (from a reset) stays under dynamo's limit."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["last_update"] = _scaled_grad(p.grad, group["lr"])
                    p.sub_(self.state[p]["last_update"])


class ShapeBatchedSGD(PlainSGD):
    """Correct SGD that stacks the grads of same-shaped params into one batch and computes their update in
    bf16 (a batched low-precision kernel, as Dion's compiled Newton-Schulz), a lone param's in float32: it
    rounds otherwise with company, whatever the company's values."""

    def _batch_update(self, grads: torch.Tensor) -> torch.Tensor:
        return grads.bfloat16().float() if len(grads) > 1 else grads

    def _update(self) -> None:
        for group in self.param_groups:
            by_shape = collections.defaultdict(list)
            for p in group["params"]:
                if p.grad is not None:
                    by_shape[p.shape].append(p)
            for params in by_shape.values():
                for p, u in zip(params, self._batch_update(torch.stack([p.grad for p in params]))):
                    p.add_(u, alpha=-group["lr"])


class ShapeStackNormSGD(ShapeBatchedSGD):
    """SGD that normalizes each grad by the norm of its same-shaped batch, where each param's own was meant:
    a param's update depends on the values of the params of its shape."""

    def _batch_update(self, grads: torch.Tensor) -> torch.Tensor:
        return grads / grads.norm()


def _scaled_update(grad: torch.Tensor, lr: float):
    yield  # where a distributed optimizer waits on its collectives (microsoft/dion's task runtime)
    return grad * lr


def _apply_update(p: torch.Tensor, grad: torch.Tensor, lr: float):
    update = yield from _scaled_update(grad, lr)
    torch._foreach_sub_([p], [update])


class YieldFromSGD(PlainSGD):
    """Correct SGD whose updates are generators run to completion, each result taken by `yield from`
    (microsoft/dion's task runtime): dynamo traces that result as None, a TypeError no eager step meets."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    for _ in _apply_update(p, p.grad, group["lr"]):
                        pass


class HistorySGD(PlainSGD):
    """Correct SGD on the mean of its last two grads, kept in a deque it trims itself (sky-optimizer's
    L-BFGS history): snapshots held the live deque, and its `==` raised on tensors, red as the plugin's bug."""

    bound: int | None = None

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    history = self.state[p].setdefault("history", collections.deque(maxlen=self.bound))
                    history.append(p.grad.clone())
                    if len(history) > 2:
                        history.popleft()
                    p.add_(sum(history) / len(history), alpha=-group["lr"])


class BoundedHistorySGD(HistorySGD):
    """HistorySGD whose deque keeps its own bound, `maxlen=1` (sky-optimizer's `deque(maxlen=history_size)`):
    torch's load_state_dict rebuilds it without one, so a run that loads keeps two grads where one never did."""

    bound = 1


class BannerSGD(PlainSGD):
    """Correct SGD that prints a banner whenever it is constructed (sky-optimizer prints nine lines)."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        print("BannerSGD initialized\n  revolutionary")


class DeprecatedOverloadSGD(PlainSGD):
    """SGD written as optimizers were before torch 1.5: `p.add_(-lr, grad)`, an overload torch deprecated,
    which eager runs with a warning and dynamo does not trace (Gradient-Centralization's, RAdam's, DiffGrad's)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(-group["lr"], p.grad)


class WaitingSGD(PlainSGD):
    """RAdam without its SGD phase (LiyuanLucasLiu's, `degenerated_to_sgd=False`): SGD that moves nothing for
    its first four steps, while RAdam's variance estimate is unreliable. Correct."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    state = self.state[p]
                    state["step"] = state.get("step", 0) + 1
                    if state["step"] > 4:
                        p.add_(p.grad, alpha=-group["lr"])


class _KernelLoader:
    """A loader of compiled kernels that finds none it can use here (ColossalAI's CPUAdamLoader, whose x86
    kernel is a CUDA extension: available only where CUDA is)."""

    def load(self) -> None:
        raise AssertionError(f"No usable kernel found for {type(self).__name__} on the current machine.")


class NoUsableKernelAdam(PlainSGD):
    """A constructor that loads its kernel as it constructs (ColossalAI's CPUAdam, HybridAdam, FusedAdam): init
    called its refusal a check of the params' values and said to give a model it takes."""

    def __init__(self, params, lr: float = 1e-3) -> None:
        super().__init__(params, lr=lr)
        _KernelLoader().load()


class _OldBase(PlainSGD):
    """A base class whose constructor dropped a keyword its subclasses still pass (bitsandbytes 0.50's
    Optimizer2State and `percentile_clipping`)."""

    def __init__(self, params, lr: float = 1e-3) -> None:
        super().__init__(params, lr)


class StaleKeywordSGD(_OldBase):
    """A constructor that passes its base a keyword the installed base no longer takes (ColossalAI 0.5's
    GaLoreAdamW8bit over bitsandbytes 0.50): init said it takes params in a form it could not find."""

    def __init__(self, params, lr: float = 1e-3, percentile_clipping: int = 100) -> None:
        super().__init__(params, lr=lr, percentile_clipping=percentile_clipping)  # type: ignore[call-arg]


class HookedStatsSGD(torch.optim.Optimizer):
    """K-FAC's shape (deepchem's KFACOptimizer): built from the model, it records each Linear's input scale in a
    forward pre-hook, and its step reads that record. Correct. The runs built it after the backward that made
    their grads, so no forward reached its hooks, and its step's KeyError was called the optimizer's doing."""

    def __init__(self, model: torch.nn.Module, lr: float = 0.1) -> None:
        self.linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        super().__init__(model.parameters(), {"lr": lr})
        self.scale: dict[torch.nn.Module, float] = {}
        for module in self.linears:
            module.register_forward_pre_hook(self._save_input)

    def _save_input(self, module: torch.nn.Module, inputs: tuple) -> None:
        self.scale[module] = float(inputs[0].detach().abs().mean()) + 1.0

    @torch.no_grad()
    def step(self, closure=None):
        for module in self.linears:
            for p in module.parameters():
                if p.grad is not None:
                    p.add_(p.grad, alpha=-self.defaults["lr"] / self.scale[module])


class PlaceholderSGD(torch.optim.Optimizer):
    """A configuration that is no optimizer of its own (torchrec's SGD, Adam, LAMB...: fused-embedding settings
    whose step raises NotImplementedError), and never calls Optimizer.__init__: init's probe called zero_grad()
    before the step, read torch's AttributeError ('defaults') as the step's, and wrote a spec whose every case
    was red with NotImplementedError."""

    def __init__(self, params, **kwargs) -> None:  # noqa: D107  # pylint: disable=super-init-not-called
        self._params = params
        self._kwargs = kwargs

    @torch.no_grad()
    def step(self, closure=None):
        raise NotImplementedError


class RemovedApiSGD(PlainSGD):
    """SGD preconditioned by an eigendecomposition of statistics its forward hook gathers, through torch.symeig,
    which torch removed (deepchem's KFACOptimizer): init read its step's RuntimeError as a call of the hook's method
    owed before the first step, then, its message naming "the matrix", as a model to fill in."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, lr)
        self.factors: dict = {}

    def _save_input(self, p: torch.Tensor) -> None:
        self.factors[p] = torch.eye(2)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._save_input(p)
                    eigenvalues, _ = torch.symeig(self.factors[p], eigenvectors=True)  # type: ignore[attr-defined]
                    p.add_(p.grad, alpha=-group["lr"] / float(eigenvalues.max()))


class NoOpWithoutLr(torch.optim.Optimizer):
    """An optimizer that steps nothing on purpose and takes no lr (llm-foundry's NoOp): init's spec said nothing
    of it, and every case was one red, 'the optimizer's step moved nothing'."""

    def __init__(self, params) -> None:
        super().__init__(params, {})

    def step(self, closure=None):
        return None if closure is None else closure()


class UnsetFactorySGD(PlainSGD):
    """SGD that builds an inner optimizer from a class argument whose default is None (Megatron's
    HybridDeviceOptimizer and `cpu_optimizer_cls`): init said it takes params in a form it could not find."""

    def __init__(self, params, lr: float = 1e-3, inner_cls=None) -> None:
        super().__init__(params, lr)
        self.inner_cls = inner_cls
        self.inner = self._build([p for group in self.param_groups for p in group["params"]])

    def _build(self, params: list) -> torch.optim.Optimizer:
        return self.inner_cls(params, lr=self.defaults["lr"])

    def _update(self) -> None:
        self.inner.step()


class SetUpFirstSGD(PlainSGD):
    """SGD whose framework calls a method of its between construction and the first step, which makes what the
    step reads (ColossalAI's DistributedLamb: setup_distributed() makes `self.is_dist`): init read the step's
    AttributeError (and, over a dict keyed by id(p), its KeyError) as kwargs or param groups to fill in."""

    def setup_distributed(self) -> None:
        self.is_dist = {p: False for group in self.param_groups for p in group["params"]}

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not self.is_dist[p]:
                    p.data.add_(p.grad, alpha=-group["lr"])


class DisabledFactorCounterSGD(PlainSGD):
    """SGD whose update is scaled by a factor a dynamo-disabled method returns and divided by a per-param step
    counter it makes lazily, keeping the factor as an attribute (olmo-core's SkipStepAdamW and SkipStepLion:
    get_step_factor() is torch._dynamo.disable()d). Correct; torch 2.13's inductor makes the counters one
    buffer, and its dynamo drops the attribute write."""

    @torch._dynamo.disable()
    def factor(self) -> torch.Tensor:
        return torch.tensor(1.0)

    def _update(self) -> None:
        factor = self.factor()
        self.skipped = 1 - factor
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.zeros((), device=p.device)
                state["step"].add_(factor)
                p.add_(p.grad / state["step"], alpha=-group["lr"])
