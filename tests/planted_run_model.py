"""Optimizers for the run model's mechanisms (issues 32 and 38): each wrong in one way, or right
in a way that naive checks mistake for wrong (a diverging lr) or take as proof (a closure's graphs)."""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch.optim.optimizer import required

from planted import PlainSGD


class TypoSGD(PlainSGD):
    """A typo in the step: every step raises KeyError, so every check of every case would be red."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["momentun"])


class IdleSGD(PlainSGD):
    """Forgets to apply its update: the step runs and moves nothing."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad.mul(group["lr"])


class LateSGD(PlainSGD):
    """eve's RAdam without its SGD phase: no update until its variance estimate is trusted, at step 5."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["taken"] = group.get("taken", 0) + 1
            if group["taken"] >= 5:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"])


class ExplodingSGD(PlainSGD):
    """Correct arithmetic at an lr that makes the run blow up: params grow 1e4 times a step."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.mul_(1e4).add_(p.grad, alpha=-group["lr"])


def _eager_step(self, closure=None):
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    with torch.no_grad():
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
    return loss


class UntracedStepSGD(PlainSGD):
    """A step dynamo does not trace (its own frame runs eagerly), while the frames it calls, the
    closure's among them, still compile: a closure case shows graphs that are not the step's."""

    step = torch._dynamo.disable(_eager_step, recursive=False)


class SwallowingSGD(PlainSGD):
    """Accepts any keyword (foreach, maximize, ...) and never stores or reads it."""

    def __init__(self, params, lr=0.1, **kwargs):
        super().__init__(params, lr)


class NoLrSGD(PlainSGD):
    """A constructor without lr (CDoWG's shape): its step size comes from eps and the grads."""

    def __init__(self, params, eps=0.1):
        torch.optim.Optimizer.__init__(self, params, {"eps": eps})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["eps"])


class SparseStateSGD(PlainSGD):
    """Keeps a param's whole state as a sparse tensor (not a dict), which has a `.values()` of its own."""

    def _update(self) -> None:
        super()._update()
        for p in self.param_groups[0]["params"]:
            self.state[p] = p.detach().to_sparse()


class Bf16OnlySGD(PlainSGD):
    """Stochastic-rounding style: refuses params that are not bf16."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype != torch.bfloat16:
                    raise TypeError(f"Bf16OnlySGD steps bfloat16 params only, got {p.dtype}")
        super()._update()


class MatrixAndVectorSGD(PlainSGD):
    """Steps params with at least one dimension and one element: reshapes each to (rows, -1)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                rows = p.shape[0]
                p.add_(p.grad.reshape(rows, -1).reshape(p.shape), alpha=-group["lr"])


class RoundingChainSGD(PlainSGD):
    """Correct; its update is a chain of pointwise ops, which at bf16 eager rounds after each op and
    inductor rounds once (unless emulate_precision_casts)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in (p for p in group["params"] if p.grad is not None):
                u = p.grad * 1.7
                u = u / 1.3
                u = u * 0.37
                u = u * 3.1
                p.sub_(u * group["lr"])


class InternalBf16ChainSGD(PlainSGD):
    """Correct; over float32 params it computes its update in bf16 (as Muon's Newton-Schulz does), a
    chain that eager rounds after each op and inductor rounds once."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                u = p.grad.to(torch.bfloat16) * 1.7
                u = u / 1.3
                u = u * 0.37
                u = u * 3.1
                p.sub_(u.to(p.dtype) * group["lr"])


class GroupCountingSGD(PlainSGD):
    """Correct SGD that counts its steps in each param group (a write into the group inside step)."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["steps"] = group.get("steps", 0) + 1
        super()._update()


class CoarseLrSGD(PlainSGD):
    """Reads its group's lr, in coarse steps (as bf16 rounding does): lr 0.01 and 0.005 give one update."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(torch.sign(p.grad) * (1e-2 if group["lr"] >= 4e-3 else 1e-3 if group["lr"] > 0 else 0.0))


class RequiredMomentumSGD(PlainSGD):
    """QHM's constructor shape: hyperparameters default to torch.optim's `required` sentinel."""

    def __init__(self, params, lr=required, momentum=required):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "momentum": momentum})

    def _update(self) -> None:
        for group in self.param_groups:
            if group["momentum"] < 0.5:
                raise ValueError("momentum below 0.5 is not supported")
        super()._update()


class LrDividingSGD(PlainSGD):
    """Scales its update by a bound over lr, as AdaBound's final_lr / lr: lr 0 divides by zero."""

    def _update(self) -> None:
        for group in self.param_groups:
            bound = 0.1 / group["lr"]
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(group["lr"] * min(bound, 1.0) * p.grad)


class StackingSGD(PlainSGD):
    """Steps a 0-d param alone, but stacks its params' last dims when there are several, as optimizers
    that batch their params do: a 0-d param among others raises."""

    def _update(self) -> None:
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if len(params) > 1:
            sizes = [p.shape[-1] for p in params]  # IndexError for a 0-d param
            assert all(s >= 0 for s in sizes)
        super()._update()


class ScalarDroppingSGD(PlainSGD):
    """Keeps only params with at least one dimension, as Adam-mini's blocks do: a lone 0-d param leaves
    it with an empty parameter list, while a 0-d param beside a matrix is silently left alone."""

    def __init__(self, params, lr=0.01):
        kept = [p for p in params if p.dim() > 0]
        if not kept:
            raise ValueError("optimizer got an empty parameter list")
        super().__init__(kept, lr=lr)


class FixedStepSGD(PlainSGD):
    """Steps by a fixed amount along the grad's sign whatever lr is (lr only scales a decay): lr 0 moves params."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(1e-3 * torch.sign(p.grad) + group["lr"] * p)


class FlaggedSGD(PlainSGD):
    """Correct SGD, but its `per_row` flag steps each param row by row: a 0-d param then raises."""

    def __init__(self, params, lr=0.01, per_row=False):
        super().__init__(params, lr=lr)
        self.per_row = per_row

    def _update(self) -> None:
        if self.per_row:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        for row, grad in zip(p, p.grad):  # iterating a 0-d tensor raises TypeError
                            row.sub_(group["lr"] * grad)
            return
        super()._update()


class ClosureFlagSGD(PlainSGD):
    """Correct SGD; its `needs_closure` flag makes step() refuse to run without a closure (DolphinFlow's
    loss_aware_schedule)."""

    def __init__(self, params, lr=0.1, needs_closure=False):
        super().__init__(params, lr=lr)
        self.needs_closure = needs_closure

    @torch.no_grad()
    def step(self, closure=None):
        if self.needs_closure and closure is None:
            raise ValueError("needs_closure=True requires a closure to be passed to step()")
        return super().step(closure)


class CountedSGD(PlainSGD):
    """TAdam's constructor shape: a count that defaults to torch.optim's `required` and must exceed 1."""

    def __init__(self, params, iters=required, lr=1e-3):
        if not 1.0 < iters:
            raise ValueError(f"Invalid iters: {iters}")
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "iters": iters})


class UnitBase:
    """POGO's base-optimizer shape: an object (no params) the optimizer asks for each update."""

    def update(self, grad: torch.Tensor) -> torch.Tensor:
        return grad


class BaseDelegatingSGD(PlainSGD):
    """POGO's constructor shape: a second required positional argument that takes no params."""

    def __init__(self, params, base, lr):
        self.base = base.update  # a list of params has no such method
        torch.optim.Optimizer.__init__(self, params, {"lr": lr})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(self.base(p.grad), alpha=-group["lr"])


class ListOfListsSGD(PlainSGD):
    """AdamSLS's constructor shape: params as a list of lists, which no spec params form gives."""

    def __init__(self, params, lr=0.1):
        flat: list = []
        for group in params:
            flat = flat + group  # a Parameter is not a list: TypeError
        torch.optim.Optimizer.__init__(self, flat, {"lr": lr})


class InitStateSGD(PlainSGD):
    """COCOB's shape: its state is made in __init__, never lazily, so a step after the state is
    cleared raises KeyError; correct otherwise."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["origin"] = p.detach().clone()

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["origin"].add_(p.grad)  # KeyError once the state is cleared
                    p.add_(p.grad, alpha=-group["lr"])


class ClosureAssertingSGD(PlainSGD):
    """QQN's shape: `step(closure=None)` by signature, yet it asserts that it was given a closure."""

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is not None, "ClosureAssertingSGD.step requires a closure"
        with torch.enable_grad():
            loss = closure()
        self._update()
        return loss


class ClosureOnlyEmptyRefusingSGD(ClosureAssertingSGD):
    """QQN's shape in full: it asserts a closure, and its step raises on a 0-element param."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.numel() == 0:
                    raise ValueError("ClosureOnlyEmptyRefusingSGD cannot normalise an empty param")
                p.add_(p.grad, alpha=-group["lr"])


class SparseOnlySGD(PlainSGD):
    """SparseAdam's shape: its step refuses dense grads and steps sparse ones."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if not p.grad.is_sparse:
                        raise RuntimeError("SparseOnlySGD does not support dense gradients")
                    p.add_(p.grad.to_dense(), alpha=-group["lr"])


class ClosureRefusingSGD(PlainSGD):
    """Adams_ZeRO's shape: `step(closure=None)` by signature, yet it asserts that it was given none."""

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is None, "Closure is not supported"
        self._update()


class InnerBackwardSGD(PlainSGD):
    """Recursive's shape (optimal-pytorch): each param's state holds an inner optimizer over a
    tensor that requires grad, and the step runs autograd itself to feed it, so it raises under
    no_grad and steps as a training loop calls it; two runs' inner optimizers are twins by their
    state_dicts, never by identity."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                v = torch.zeros_like(p, requires_grad=True)
                self.state[p].update(v=v, inner=torch.optim.SGD([v], lr=1.0))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["inner"].zero_grad()
                (state["v"] * p.grad).sum().backward()  # d/dv = grad: v accumulates -grad
                state["inner"].step()
                with torch.no_grad():
                    p.add_(state["v"], alpha=group["lr"])
        return loss


class ClosureLossSGD(PlainSGD):
    """SGDOL's shape (optimal-pytorch): given a closure, its step reads the loss as a number inside
    its loop over params, a graph break within a loop, so it compiles whole without a closure and
    captures no graph of its own with one."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    scale = 1.0 if loss is None else 1.0 + 0.0 * loss.item()
                    p.add_(p.grad, alpha=-group["lr"] * scale)
        return loss


class RankKillingSGD(PlainSGD):
    """Dies on a rank (Adams_ZeRO hangs there in collectives of its own): the one sharded run that
    fsdp and checkpoint both read fails once."""

    def _update(self) -> None:
        if torch.distributed.is_initialized():
            import os  # only on a rank

            os._exit(3)
        super()._update()


class NoLrFlaggedSGD(NoLrSGD):
    """No lr, one boolean flag (SaLSA's shape): init's flag cases must not give it an lr."""

    def __init__(self, params, eps=0.1, nesterov=False):
        super().__init__(params, eps)
        self.defaults["nesterov"] = nesterov
        for group in self.param_groups:
            group.setdefault("nesterov", nesterov)


class ArgumentClosureSGD(PlainSGD):
    """Requires a closure and calls it with an argument of its own protocol (polystep's dict of
    tensors): torch.optim's closures take none, the plugin's one bool besides."""

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure(probes={"shift": torch.zeros(())})
        self._update()
        return loss


class BackwardFlagSGD(PlainSGD):
    """torchzero's closure protocol: `closure(False)` evaluates the loss alone, `closure(backward=True)`
    sets grads too. Correct: it steps on the grads, after checking the loss-only call left them be."""

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure(backward=True)
            held = [p.grad.clone() for group in self.param_groups for p in group["params"] if p.grad is not None]
            assert closure(False).grad_fn is None  # no graph: no backward will follow
        after = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        assert all(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True) for a, b in zip(held, after, strict=True)), \
            "closure(False) touched the grads"
        self._update()
        return loss


class EpochScheduledSGD(PlainSGD):
    """Needs its schedule's length, though its signature defaults it to None (Ranger21's shape)."""

    def __init__(self, params, lr=0.1, num_epochs=None, num_batches_per_epoch=None):
        super().__init__(params, lr)
        self.total_steps = num_epochs * num_batches_per_epoch


class UseMuonGroupsSGD(PlainSGD):
    """Takes only param groups flagged `use_muon` (Keller Jordan's MuonWithAuxAdam's shape)."""

    def __init__(self, param_groups):
        for group in param_groups:
            assert "use_muon" in group
        torch.optim.Optimizer.__init__(self, param_groups, {"lr": 0.01})

    def add_param_group(self, param_group):
        assert "use_muon" in param_group, "use_muon"
        super().add_param_group(param_group)


class EmptyRefusingMuonGroupsSGD(UseMuonGroupsSGD):
    """Takes use_muon-flagged groups and refuses an empty matrix in a use_muon group (Muon's
    Newton-Schulz divides by a side): fuzz must draw only what the flagged form steps."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if group["use_muon"] and p.numel() == 0:
                    raise ValueError(f"use_muon params need both sides, got {tuple(p.shape)}")
                p.add_(p.grad, alpha=-group["lr"])


@dataclasses.dataclass
class SGDConfig:
    lr: float = 0.01


class ConfigSGD(PlainSGD):
    """Takes its hyperparameters as one required config object (GaLoreAdamW's `cfg: GaLoreConfig`)."""

    def __init__(self, params, cfg: SGDConfig):
        torch.optim.Optimizer.__init__(self, params, {"lr": cfg.lr})


class SharpnessAware(torch.optim.Optimizer):
    """SAM's shape: a wrapper given a base optimizer over the same params, stepping it at the grad of
    a point `rho` uphill (the closure evaluates there), its state_dict holding the base's; correct,
    but for params that join later (as SAM's, its base optimizer never hears of them)."""

    def __init__(self, params, base: torch.optim.Optimizer, rho=0.05):
        super().__init__(params, {"rho": rho})
        self.base = base

    @torch.no_grad()
    def step(self, closure):
        loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            norm = torch.stack([p.grad.norm() for p in params]).norm()
            ups = [p.grad * (group["rho"] / norm) for p in params]
            torch._foreach_add_(params, ups)
            closure()
            torch._foreach_sub_(params, ups)
        self.base.step()
        return loss

    def state_dict(self):
        return {**super().state_dict(), "base": self.base.state_dict()}

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.base.load_state_dict(state_dict.pop("base"))
        super().load_state_dict(state_dict)


class FloatLrSGD(PlainSGD):
    """Refuses a tensor lr (RMSGD multiplies it with a NumPy array)."""

    def __init__(self, params, lr=0.01):
        if isinstance(lr, torch.Tensor):
            raise TypeError("lr must be a float")
        super().__init__(params, lr)


class MatrixOnlyConstructorSGD(PlainSGD):
    """Its constructor refuses any param that is not a matrix (EchoMuon routes the rest to AdamW)."""

    def __init__(self, params, lr=0.01, nesterov=False):
        params = list(params)
        if any(p.ndim != 2 for p in params):
            raise ValueError("only 2-D parameters; route the rest to AdamW")
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "nesterov": nesterov})


class MatrixOnlyBf16SGD(MatrixOnlyConstructorSGD):
    """Its constructor takes matrices only and its step bf16 params only: init's probes of the step
    must run over the model the constructor takes."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype != torch.bfloat16:
                    raise TypeError(f"MatrixOnlyBf16SGD steps bfloat16 params only, got {p.dtype}")
                p.add_(p.grad, alpha=-group["lr"])


_NOISE = torch.Generator().manual_seed(0)  # a module's own generator, as adv_optm keeps one


class OwnGeneratorSGD(PlainSGD):
    """Correct noisy SGD: each step adds noise drawn, at the end of the step before, from its module's
    own torch.Generator (not torch's global RNG; dynamo traces no draw from it: a graph break)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    noise = self.state[p].get("noise")
                    p.add_(p.grad if noise is None else p.grad + 0.01 * noise, alpha=-group["lr"])
        torch._dynamo.graph_break()
        self._draw()

    def _draw(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["noise"] = torch.randn(p.shape, generator=_NOISE).to(p)


class ConstructorDrawSGD(PlainSGD):
    """Correct; draws a fixed perturbation per param from its module's own generator as it makes its
    state in the constructor (adv_optm's spectral-norm vectors), then steps without drawing."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["v"] = torch.randn(p.shape, generator=_NOISE).to(p)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad + 0.01 * self.state[p]["v"], alpha=-group["lr"])


class FailOnRecompileLimitHit(Exception):
    """Named as dynamo's (torch._dynamo.exc): what a step compiling its own function raises past the recompile limit."""


class SelfCompilingSGD(PlainSGD):
    """Compiles its update itself, once per instance (adv_optm's compiled_optimizer): past 8 instances
    in one process dynamo's recompile limit is hit, as it is where in-backward builds one optimizer a param."""

    instances = 0

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        type(self).instances += 1
        self.compiles = type(self).instances

    def _update(self) -> None:
        if self.compiles > 8:
            raise FailOnRecompileLimitHit("Hard failure due to fullgraph=True")
        super()._update()


class SingleTensorOnlySGD(PlainSGD):
    """Takes and keeps foreach, and its foreach step is not written yet (SAdam's `_multi_tensor_sadam`)."""

    def __init__(self, params, lr=0.01, foreach=None):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "foreach": foreach})

    def _update(self) -> None:
        if any(group["foreach"] for group in self.param_groups):
            raise ValueError("_multi_tensor_sgd not implemented yet")
        super()._update()


class RelativeStepSGD(PlainSGD):
    """Refuses an lr unless relative_step is off, and then needs one (HF Adafactor's shape)."""

    def __init__(self, params, lr=None, relative_step=True):
        if lr is not None and relative_step:
            raise ValueError("Cannot combine manual `lr` and `relative_step=True` options")
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "relative_step": relative_step})

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                lr = 0.01 if group["relative_step"] else group["lr"]
                p.add_(p.grad * -lr)


class NoneGradRefusingSGD(PlainSGD):
    """Reads every param's grad without asking whether it has one (SM3's bug): any run that leaves a
    grad None raises the same AttributeError at the same line."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                shape = p.grad.shape
                p.add_(p.grad.reshape(shape), alpha=-group["lr"])


class TwoPlacesNoneGradSGD(PlainSGD):
    """DoG's bug: reads every param's grad without asking whether it has one, in its first step's
    branch and in the later steps' at another line: one root cause, raised at two lines."""

    def _update(self) -> None:
        for group in self.param_groups:
            group["taken"] = group.get("taken", 0) + 1
            if group["taken"] == 1:
                grads = [p.grad.detach() for p in group["params"]]
            else:
                grads = [p.grad.detach() for p in group["params"]]
            for p, grad in zip(group["params"], grads):
                p.add_(grad, alpha=-group["lr"])


class LossClosureSGD(PlainSGD):
    """Differentiates what its closure returns itself (psgd's protocol): a closure that already called
    backward leaves nothing to differentiate."""

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure()
            params = [p for g in self.param_groups for p in g["params"]]
            grads = torch.autograd.grad(loss, params)
        for p, g in zip(params, grads):
            p.add_(g, alpha=-self.param_groups[0]["lr"])
        return loss


class WarmupFirstSGD(PlainSGD):
    """Needs a `warmup_step()` of its own before its first step (SGD_boost: KeyError 'gsnr'), and skips
    grad-less params: given a closure that calls no backward it returns quietly, moving nothing."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"] * self.state[p]["gsnr"])


class RaisingWithoutGradSGD(PlainSGD):
    """Divides by its grad's norm without asking whether it has one (Ranger21's ZeroDivisionError)."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] / float(p.grad.norm()))


class NoneGradAssertingSGD(PlainSGD):
    """Asserts every param has a grad: its own AssertionError, raised in every check that leaves one without."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                assert p.grad is not None, "every param needs a grad"
                p.add_(p.grad, alpha=-group["lr"])


class LookaheadWrapper(torch.optim.Optimizer):
    """Lookahead's shape (timm's, eve's): built over an optimizer instance, not params; it shares the
    base's param groups and every `k` steps pulls the params back towards slow copies. Correct."""

    def __init__(self, base_optimizer, alpha=0.5, k=2):
        super().__init__(base_optimizer.param_groups, {"lookahead_alpha": alpha, "lookahead_k": k})  # timm's, as of 2021
        self.base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups  # shared: a scheduler's lr reaches the base
        for group in self.param_groups:
            group.setdefault("lookahead_alpha", alpha)
            group.setdefault("lookahead_k", k)
            group.setdefault("lookahead_step", 0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.base_optimizer.step(closure)
        for group in self.param_groups:
            group["lookahead_step"] += 1
            if group["lookahead_step"] % group["lookahead_k"]:
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                slow = self.state[p].setdefault("slow_buffer", p.detach().clone())
                slow.add_(p - slow, alpha=group["lookahead_alpha"])
                p.copy_(slow)
        return loss


class GlobalNormSAM(torch.optim.Optimizer):
    """sweepx's SAM shape: a wrapper over a base optimizer instance (no params of its own), stepping it at
    the grad of a point `rho` uphill along the grad normalized over every param of every group. Correct:
    that norm couples the groups, by design."""

    def __init__(self, base_optimizer, rho=0.05):
        super().__init__(base_optimizer.param_groups, base_optimizer.defaults)
        self.base_optimizer, self.rho = base_optimizer, rho

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            loss = closure()
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.cat([p.grad.flatten() for p in params]).norm()  # in the params' dtype, as sweepx's
        ups = [p.grad * (self.rho / (norm + 1e-12)) for p in params]
        torch._foreach_add_(params, ups)
        with torch.enable_grad():
            closure()
        torch._foreach_sub_(params, ups)
        self.base_optimizer.step()
        return loss


class MaskingWrapper:
    """Magma's shape: no torch.optim.Optimizer, its first argument the optimizer it wraps (annotated so);
    it halves every other step's update of its base, keeping its own per-param counter. Correct."""

    def __init__(self, optimizer: torch.optim.Optimizer, keep: float = 0.5):
        self.optimizer, self.keep = optimizer, keep
        self.steps = 0

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        before = [p.detach().clone() for g in self.param_groups for p in g["params"]]
        loss = self.optimizer.step(closure)
        self.steps += 1
        if self.steps % 2 == 0:
            for p, old in zip((p for g in self.param_groups for p in g["params"]), before):
                p.copy_(old + (p - old) * self.keep)
        return loss

    def state_dict(self):
        return {"base": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict["base"])
        self.steps = state_dict["steps"]


class InitSkippingLookahead(torch.optim.Optimizer):
    """eve's Lookahead: a torch.optim.Optimizer subclass that never calls Optimizer.__init__, so once
    zero_grad() patches its step with torch's hook wrapper, step() raises inside torch.optim."""

    def __init__(self, base_optimizer, alpha=0.5):
        self.base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups
        self.defaults = base_optimizer.defaults
        self.state = base_optimizer.state
        self.alpha = alpha

    def step(self, closure=None):
        return self.base_optimizer.step(closure)


class NestedStateDictSGD(PlainSGD):
    """Nests torch.optim's state_dict under a key of its own, beside its settings (Lookahead's
    {'optimizer', 'lookahead', 'lookahead_metadata'}): neither ZeRO nor DCP finds 'state' or 'param_groups'."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    buffer = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                    p.add_(buffer.mul_(0.9).add_(p.grad), alpha=-group["lr"])

    def state_dict(self):
        return {"optimizer": super().state_dict(), "settings": {"momentum": 0.9}}

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict["optimizer"])


class OldSignatureAdam(PlainSGD):
    """Calls torch.optim's functional adam() as torch 1.12 took it, without `maximize` (agc_optims' Adam_AGC):
    torch's dynamo-fallback decorator forwards the call, and the TypeError is raised in its frame."""

    def _update(self) -> None:
        from torch.optim.adam import adam  # torch's own functional step, as the optimizer imports it

        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            state = [self.state[p] for p in params]
            for entry, p in zip(state, params):
                entry.setdefault("exp_avg", torch.zeros_like(p))
                entry.setdefault("exp_avg_sq", torch.zeros_like(p))
                entry.setdefault("step", torch.tensor(0.0))
            adam(params, [p.grad for p in params], [e["exp_avg"] for e in state], [e["exp_avg_sq"] for e in state], [],
                 [e["step"] for e in state], amsgrad=False, beta1=0.9, beta2=0.999, lr=group["lr"], weight_decay=0.0, eps=1e-8)


class RoundingGrowingSGD(PlainSGD):
    """Correct; its compiled step rounds otherwise than eager, by ulps of the param's dtype (2000 a step:
    rounding as an amplifying step, a conjugate gradient's, grows it), past float32's tolerance; over
    float64 params the same difference stays far below it."""

    def _update(self) -> None:
        super()._update()
        if torch.compiler.is_compiling():
            for p in self.param_groups[0]["params"]:
                p.add_(p * (2000 * torch.finfo(p.dtype).eps))


class CompiledOffsetSGD(PlainSGD):
    """Wrong under torch.compile by a fixed relative 1e-3 whatever the dtype: no rounding's doing."""

    def _update(self) -> None:
        super()._update()
        if torch.compiler.is_compiling():
            for p in self.param_groups[0]["params"]:
                p.add_(p * 1e-3)


class RandomInitSGD(PlainSGD):
    """Draws from torch's RNG in its constructor, as torch_pso's particles are: an offset per param that
    its steps add. Deterministic given the seed its construction draws under."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr)
        self.offsets = [torch.rand_like(p) for group in self.param_groups for p in group["params"]]

    def _update(self) -> None:
        params = [p for group in self.param_groups for p in group["params"]]
        for p, offset in zip(params, self.offsets):
            if p.grad is not None:
                p.sub_(self.defaults["lr"] * (p.grad + 0.1 * offset))


class NanAfterOneStepSGD(PlainSGD):
    """Diverges on purpose: after its first step every param is NaN, so the closure's loss is NaN, and
    the step returns that loss as it should."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.fill_(float("nan"))


class SampleSizeSGD(PlainSGD):
    """IVON's constructor shape: a required positional hyperparameter annotated as a number after lr
    (`ess: float`), which is no second params argument."""

    def __init__(self, params, lr: float, ess: float, hess_init: float = 1.0):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "ess": ess, "hess_init": hess_init})


class SampledContextSGD(SampleSizeSGD):
    """IVON's protocol: its step reads grads its `sampled_params` context gathers around the backward,
    so a plain step raises whatever it is given."""

    def __init__(self, params, lr: float, ess: float):
        super().__init__(params, lr, ess)
        self.gathered = None

    def _update(self) -> None:
        self.gathered[0]  # TypeError: 'NoneType' object is not subscriptable, as IVON's `avg_grad`


class LossValueSGD(PlainSGD):
    """ELRA's protocol: its step takes the loss's value after backward, `step(loss: float)`, not a closure."""

    @torch.no_grad()
    def step(self, loss: float, scale: float | None = None):  # type: ignore[override]
        if not loss < 1e999:  # ELRA's check for an infinite loss: a closure given here raises TypeError
            return None
        self._update()
        return None


class SampledProtocolSGD(SampledContextSGD):
    """IVON's protocol in full: a `sampled_params` context that a training loop wraps around forward and
    backward gathers what the step reads; without it the step raises."""

    @contextlib.contextmanager
    def sampled_params(self, train: bool = False):
        yield
        self.gathered = [p.grad for group in self.param_groups for p in group["params"]]


class FixedDecaySGD(PlainSGD):
    """zij's AdaGC shape: a `fixed_decay` flag whose decay ignores lr, so at lr 0 that case still moves."""

    def __init__(self, params, lr=0.1, weight_decay=0.01, fixed_decay=False):
        torch.optim.Optimizer.__init__(self, params, {"lr": lr, "weight_decay": weight_decay, "fixed_decay": fixed_decay})

    def _update(self) -> None:
        for group in self.param_groups:
            decay = group["weight_decay"] if group["fixed_decay"] else group["lr"] * group["weight_decay"]
            for p in group["params"]:
                if p.grad is not None:
                    p.mul_(1.0 - decay).add_(p.grad, alpha=-group["lr"])


class TrainModeSGD(PlainSGD):
    """Schedule-free's protocol (zij's AdamWScheduleFree, schedulefree's): it steps only in train mode, which
    `train()` enters and `eval()` leaves; init skipped it as "a protocol of its own"."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.training = False

    def train(self) -> None:
        self.training = True

    def eval(self) -> None:
        self.training = False

    def _update(self) -> None:
        if not self.training:
            raise RuntimeError("Optimizer was not in train mode when step is called. Please insert .train() and .eval() calls")
        super()._update()


class TensorArgClosureSGD(PlainSGD):
    """polystep's PolyStepOptimizer: its step calls its closure with a dict of tensors, which init wrote into its
    spec's comment over many lines: a spec that did not load."""

    @torch.no_grad()
    def step(self, closure=None):
        if closure is None:
            raise ValueError("TensorArgClosureSGD needs a closure")
        closure({name: torch.full((20, 20), 7.0) for name in ("a", "b")})
        self._update()


class QuotedRefusalSGD(PlainSGD):
    """A step that refuses on purpose, its message in double quotes: init's skip reason, in double quotes, broke."""

    def _update(self) -> None:
        raise RuntimeError('call "prepare()" before step, then "step()"')


class NoStateWrapper:
    """emotigrad's EmotionalOptimizer: a plain object (no torch.optim.Optimizer, no `state`) over an optimizer
    instance; init's state-dtype probe read `.state` and init stopped with "could not probe"."""

    def __init__(self, optimizer: torch.optim.Optimizer, enabled: bool = True):
        self.optimizer, self.enabled = optimizer, enabled

    def step(self, loss=None):
        return self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none)


class BoundedSearchSGD(PlainSGD):
    """torchzero's ScipyDualAnnealing: required bounds, refused as an empty range, and a step that calls its
    closure with `backward=False` (a protocol of its own)."""

    def __init__(self, params, lb: float, ub: float, lr=0.1):
        super().__init__(params, lr)
        self.bounds = (lb, ub)

    def step(self, closure=None):
        if not self.bounds[0] < self.bounds[1]:
            raise ValueError("Bounds are not consistent min < max")
        if closure is None:
            raise TypeError("BoundedSearchSGD.step requires a closure")
        closure(False)
        return super().step()


class EmptyBoxSGD(PlainSGD):
    """SGD projected into the box [lb, ub] its constructor requires (scipy's DE in torchzero takes
    lb and ub): correct, and with lb = ub every step lands on that one point whatever the loss."""

    def __init__(self, params, lb: float, ub: float, lr=0.1):
        super().__init__(params, lr)
        self.box = (lb, ub)

    def _update(self) -> None:
        super()._update()
        for group in self.param_groups:
            for p in group["params"]:
                p.clamp_(*self.box)


class RunawaySearchSGD(PlainSGD):
    """torchzero's ScipyMinimize under a linear loss: a search over all params at once (so its update
    couples them) that runs off far past its start on the first step."""

    def _update(self) -> None:
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.stack([g.norm() for g in grads]).norm() + 1e-8
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad / norm, alpha=-1e12)


class LipschitzSGD(PlainSGD):
    """torch-clip's ClippedSSTM(params, lr, L): an lr and a Lipschitz constant, both required, positional
    and unannotated, which its constructor compares with numbers (a list there is a TypeError)."""

    def __init__(self, params, lr, L):
        if L < 0.0:
            raise ValueError(f"Invalid Lipschitz constant: {L}")
        super().__init__(params, lr)
        self.lipschitz = L


class DropRateWrapper:
    """DropGrad's shape: a wrapper over an optimizer instance whose constructor refuses without one of two
    None-default arguments, naming it ("Either drop_rate or params must be specified"): init wrote a spec
    that skipped, saying "fill in `params`"."""

    def __init__(self, optimizer: torch.optim.Optimizer, drop_rate: float | None = None, params: dict | None = None):
        if drop_rate is None and params is None:
            raise ValueError("Either drop_rate or params must be specified")
        self.optimizer, self.drop_rate = optimizer, drop_rate

    def step(self, closure=None):
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(1.0 - self.drop_rate / 2)
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none)


class ModelArgsSAM(PlainSGD):
    """infty's SAM: required arguments after params (a base optimizer, the model, a dict of settings) that
    init has no guess for; its skip said "fill in `params`"."""

    def __init__(self, params, base_optimizer, model, args, lr=0.01):
        super().__init__(params, lr)
        self.settings = {"rho": 0.1, **args}  # a number raises here: no guess of init's constructs it
        self.base_optimizer, self.model = base_optimizer, model
        self.param_groups = base_optimizer.param_groups


class HyperparameterOnly:
    """gradient-descent-the-ultimate-optimizer's SGD(alpha=0.01, mu=0.0): no params argument at all."""

    def __init__(self, alpha=0.01, mu=0.0):
        self.parameters = {"alpha": torch.tensor(alpha), "mu": torch.tensor(mu)}

    def step(self, params):
        for name in params:
            params[name] = params[name] - self.parameters["alpha"] * params[name].grad


class LayersSGD:
    """ecoint8's EcoSGDM(int8_layers): its first argument takes layers of its own kind and reads their
    `w_i8`, which params lack."""

    def __init__(self, layers, lr=0.01):
        self.weights = [layer.w_i8 for layer in layers]
        self.lr = lr

    def step(self, closure=None):
        return None


class MinMaxGame:
    """CGDs' ACGD(max_params, min_params).step(loss): a two-player game's protocol; init's spec did not
    load ("name the argument each param group goes to")."""

    def __init__(self, max_params, min_params, lr=1e-3):
        self.max_params, self.min_params, self.lr = list(max_params), list(min_params), lr

    def step(self, loss, trigger=0.0):
        grads = torch.autograd.grad(loss, self.max_params + self.min_params)
        with torch.no_grad():
            for p, g in zip(self.max_params, grads):
                p.add_(g, alpha=self.lr)
            for p, g in zip(self.min_params, grads[len(self.max_params):]):
                p.add_(g, alpha=-self.lr)


class AscentSGD(PlainSGD):
    """gradient_ascent's GradientAscent: it raises the loss by design; init proposed law descent for it."""

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=group["lr"])


class NamedRelativeStepSGD(RelativeStepSGD):
    """RelativeStepSGD over named params alone (allennlp's HuggingfaceAdafactor: `model_parameters`, (name, param)
    pairs): init judged the lr in a plain list, which it refuses whatever the lr, and wrote a spec that skipped,
    saying to give a model whose values it takes."""

    def __init__(self, model_parameters, lr=None, relative_step=True):
        named = list(model_parameters)
        _ = [name for name, _ in named]  # a plain list's params do not unpack: "too many values to unpack"
        super().__init__([p for _, p in named], lr, relative_step)


class KeywordOnlySGD(PlainSGD):
    """Takes keyword arguments alone, its params among them, and a peer of its own kind it requires (hivemind's
    Optimizer(*, dht, run_id, params, ...)): init said it takes params in a form it could not find."""

    def __init__(self, *, peer, params=None, lr: float = 1e-3) -> None:
        self.peer = peer
        super().__init__(params, lr)


class RankShardedSGD(PlainSGD):
    """Asks torch.distributed for its world size as it constructs, to shard its state over the ranks (fairscale's
    OSS): init read the ValueError as a check of the params' values and said to give a model whose values it takes."""

    def __init__(self, params, lr: float = 1e-3) -> None:
        self.world_size = torch.distributed.get_world_size()
        super().__init__(params, lr)


class AccumulatingWrapper(torch.optim.Optimizer):
    """Wraps an optimizer instance and refuses, on purpose, one worker that does not accumulate grads (fairscale's
    AdaScale): init took the refusal for a params form it could not find, and said to give `params` groups."""

    def __init__(self, optimizer: torch.optim.Optimizer, num_gradients_to_accumulate: int = 1) -> None:
        if num_gradients_to_accumulate < 2:
            raise RuntimeError("AccumulatingWrapper does not support a single worker without grad accumulation.")
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.defaults = optimizer.defaults
        self.state = optimizer.state

    def step(self, closure=None):
        return self.optimizer.step(closure)


class TrustRatioSGD(PlainSGD):
    """A layer-wise trust ratio, lr x eta x |w| / |g| with eta 1e-3 (mmpretrain's LARS): a relative step of 1e-5 at lr
    0.01, which bf16 params round away. init said of its bf16 case that it does not step params given only their
    grads, and that each case would be one red: it steps float32 params, and the bf16 items are vacuous."""

    def __init__(self, params, lr: float = 0.01) -> None:
        super().__init__(params, lr)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                ratio = 1e-5 * p.norm() / (p.grad.norm() + 1e-8)  # 1e-7 relative: none of 220 bf16 params moves
                p.add_(p.grad * (-group["lr"] * ratio))


class LayerwiseTrustSGD(PlainSGD):
    """A step of lr x eta x |w| / |g| x g with eta 1e-3 (mmpretrain's LARS): relative to each param, 1e-5 at lr 0.01,
    the most init gave an lr; its items compared steps that moved 1 tolerance, and were vacuous."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad * (-group["lr"] * 1e-3 * p.norm() / (p.grad.norm() + 1e-8)))

