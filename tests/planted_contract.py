"""Optimizers that break one law of round two each (issue 34), written the ways real optimizer
code has gone wrong; each is ForeachSGD (tests/planted_laws.py) but for its one fault."""

from __future__ import annotations

import random
from collections import OrderedDict, defaultdict

import torch

from planted_laws import ForeachSGD


class CorrectSGD(ForeachSGD):
    """ForeachSGD as it is: built in a session instead of ForeachSGD, whose step torch would then hook,
    so that every planted subclass calling super().step() would fire its hooks twice (torch's doing)."""


class HookedBaseSGD(ForeachSGD):
    """ForeachSGD under another name: building one makes torch hook HookedBaseSGD.step."""


class LoggingSGD(HookedBaseSGD):
    """A correct subclass that calls super().step(): its hooks fire twice once a HookedBaseSGD exists."""

    def step(self, closure=None):
        return super().step(closure)


class ClipsGradSGD(ForeachSGD):
    """Clips p.grad in place before stepping: the caller's grads are changed."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.clamp_(-0.5, 0.5)
        super().step()
        return loss


class DropsLossSGD(ForeachSGD):
    """Calls the closure and forgets to return its loss."""

    @torch.no_grad()
    def step(self, closure=None):
        super().step(closure)


class FixedParamsSGD(ForeachSGD):
    """Steps only the params it was built with: a group added later never moves."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self._built_with = {id(p) for g in self.param_groups for p in g["params"]}

    @torch.no_grad()
    def step(self, closure=None):
        added = [(p, p.grad) for g in self.param_groups for p in g["params"] if id(p) not in self._built_with]
        for p, _ in added:
            p.grad = None
        try:
            return super().step(closure)
        finally:
            for p, grad in added:
                p.grad = grad


class DefaultDecaySGD(ForeachSGD):
    """Reads weight decay from the constructor's defaults, not the param's group."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            group["_own_weight_decay"], group["weight_decay"] = group["weight_decay"], self.defaults["weight_decay"]
        try:
            return super().step(closure)
        finally:
            for group in self.param_groups:
                group["weight_decay"] = group.pop("_own_weight_decay")


class CachedMomentumSGD(ForeachSGD):
    """Copies each group's momentum into state on its first step and uses that copy for ever."""

    @torch.no_grad()
    def step(self, closure=None):
        cached = self.state.setdefault("momentum of group", {})
        for index, group in enumerate(self.param_groups):
            cached.setdefault(index, group["momentum"])
            group["_own_momentum"], group["momentum"] = group["momentum"], cached[index]
        try:
            return super().step(closure)
        finally:
            for group in self.param_groups:
                group["momentum"] = group.pop("_own_momentum")


class SharedCounterAdam(torch.optim.Optimizer):
    """Adam with one step counter for all params: a param that starts late gets the others' bias correction."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})
        self.t = 0

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.t += 1
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (state["exp_avg_sq"] / (1 - beta2 ** self.t)).sqrt_().add_(group["eps"])
                p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1 ** self.t))
        return loss


class HistorySGD(ForeachSGD):
    """Appends every step's grad norm to the state: memory that climbs."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p].setdefault("norms", []).append(float(p.grad.norm()))
        return loss


class PythonRandomSGD(ForeachSGD):
    """Skips an update now and then by Python's random: seeding torch does not reproduce it."""

    def _lr(self, group):
        return group["lr"] * (0.0 if random.random() < 0.2 else 1.0)


class ReseedingSGD(ForeachSGD):
    """SaLSA's step: it reseeds a global RNG (SaLSA: NumPy's, with int(time.time())), here Python's with 0, so a
    user whose session seeded it so sees no change across a step."""

    def _lr(self, group):
        random.seed(0)
        return group["lr"]


class InstanceStepSGD(ForeachSGD):
    """Replaces `step` on the instance (as `self.step = torch.compile(self.step)` does): torch's hooks never fire."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self.step = self._plain_step

    def _plain_step(self, closure=None):
        return ForeachSGD.step.__wrapped__(self, closure)


class InitialValueSGD(ForeachSGD):
    """A hyperparameter read only when a param's state is made (an accumulator's start): correct, and
    assigning it later changes only state made after it."""

    def __init__(self, params, lr=0.01, initial=0.5, **kwargs):
        super().__init__(params, lr=lr, **kwargs)
        for group in self.param_groups:
            group.setdefault("initial", initial)
        self.defaults["initial"] = initial

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and "scale" not in self.state[p]:
                    self.state[p]["scale"] = torch.full_like(p, group["initial"])
        loss = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(self.state[p]["scale"] * p.grad, alpha=group["lr"])
        return loss


class GlobalNormSGD(torch.optim.Optimizer):
    """Steps every param by its grad over the norm of all grads (coupled groups, by design), each
    group with its own weight decay: correct."""

    def __init__(self, params, lr=0.01, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def _decay(self, group):
        return group["weight_decay"]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])) if grads else 1.0
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad / norm + self._decay(group) * p, alpha=-group["lr"])
        return loss


class GlobalNormFirstGroupSGD(GlobalNormSGD):
    """GlobalNormSGD reading every group's weight decay from the first group."""

    def _decay(self, group):
        return self.param_groups[0]["weight_decay"]


class StallingSGD(torch.optim.Optimizer):
    """SGD scaled by `decay` that stops moving after seven steps: as momo's Polyak step size does wherever
    the loss it is given is not positive. A value assigned after step 7 can change nothing visible."""

    def __init__(self, params, lr=0.01, decay=0.5):
        super().__init__(params, {"lr": lr, "decay": decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["t"] = state.get("t", 0) + 1
                if state["t"] <= 7:
                    p.add_(p.grad, alpha=-group["lr"] * group["decay"])


class NoOptimizerInitSGD(ForeachSGD):
    """timm's Lookahead: it skips torch.optim.Optimizer.__init__ on purpose and sets what it uses itself (the
    step hooks' dicts among them), so registering a state_dict hook raises AttributeError."""

    def __init__(self, params, lr=0.01, momentum=0.9, weight_decay=0.0, foreach=False, maximize=False):
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self.defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "foreach": foreach,
                         "maximize": maximize}
        self.state = defaultdict(dict)
        self.param_groups = []
        params = list(params)
        for group in params if params and isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(dict(group))
