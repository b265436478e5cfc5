"""Optimizers that break one conformance law each, written the ways users write them
(subclasses, lazy state, stateless); and a correct one, for init's proposed laws."""

from __future__ import annotations

import torch


class ForeachSGD(torch.optim.Optimizer):
    """Correct SGD with momentum and weight decay, a for-loop path and a foreach path."""

    def __init__(self, params, lr=0.01, momentum=0.9, weight_decay=0.0, foreach=False, maximize=False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "foreach": foreach,
                                  "maximize": maximize})

    def _lr(self, group):
        return group["lr"]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [-p.grad if group["maximize"] else p.grad for p in params]
            if group["weight_decay"]:
                grads = [g.add(p, alpha=group["weight_decay"]) for g, p in zip(grads, params)]
            bufs = []
            for p, g in zip(params, grads):
                state = self.state[p]
                state["step"] = state.get("step", 0) + 1
                if "buf" not in state:
                    state["buf"] = g.clone()
                bufs.append(state["buf"])
            if group["foreach"] and params:
                self._foreach(params, grads, bufs, group)
            else:
                for p, g, buf in zip(params, grads, bufs):
                    if self.state[p]["step"] > 1:
                        buf.mul_(group["momentum"]).add_(g)
                    p.add_(buf, alpha=-self._lr(group))
        return loss

    def _foreach(self, params, grads, bufs, group):
        later = [b for p, b in zip(params, bufs) if self.state[p]["step"] > 1]
        later_grads = [g for p, g in zip(params, grads) if self.state[p]["step"] > 1]
        if later:
            torch._foreach_mul_(later, group["momentum"])
            torch._foreach_add_(later, later_grads)
        torch._foreach_add_(params, bufs, alpha=-self._lr(group))


class ForeachDriftSGD(ForeachSGD):
    """Its foreach path scales the update by 1.001: eager and compiled share it, parity is green."""

    def _foreach(self, params, grads, bufs, group):
        super()._foreach(params, [g * 1.001 for g in grads], bufs, group)


class LateForeachDriftSGD(ForeachSGD):
    """Its foreach path goes wrong only from step 9 on: beyond a 7-step run, in reach of --optim-horizon."""

    def _foreach(self, params, grads, bufs, group):
        late = any(self.state[p]["step"] > 8 for p in params)
        super()._foreach(params, [g * 1.01 for g in grads] if late else grads, bufs, group)


class WarmupDelaySGD(ForeachSGD):
    """Correct, but its first 8 steps are a warm-up at lr 0: over the laws' 7 steps nothing moves."""

    def _lr(self, group):
        return 0.0 if max(self.state[p].get("step", 0) for p in group["params"]) <= 8 else group["lr"]


class DecayWithoutGradSGD(ForeachSGD):
    """Applies weight decay to every param, also those whose grad is None."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.mul_(1 - group["lr"] * 0.1)
        return super().step(closure)


class EagerStateSGD(ForeachSGD):
    """Creates every param's momentum buffer on the first step, grad or not (lazy state gone wrong)."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].setdefault("buf", torch.zeros_like(p))
        return super().step(closure)


class ConstructorLrSGD(ForeachSGD):
    """Reads the lr it was constructed with, not the group's: per-group lrs and schedulers do nothing."""

    def __init__(self, params, lr=0.01, **kwargs):
        super().__init__(params, lr, **kwargs)
        self.lr = lr

    def _lr(self, group):
        return self.lr


class PositiveLrSGD(ForeachSGD):
    """GPAAdamW's shape: its step asserts a positive lr, on purpose (it divides by the largest lr seen)."""

    def _lr(self, group):
        assert group["lr"] > 0, f"lr must be positive, got {group['lr']}"
        return group["lr"]


class PositiveConstructorLrSGD(ConstructorLrSGD):
    """Refuses lr 0 as PositiveLrSGD does, and reads the lr it was constructed with, not the group's."""

    def _lr(self, group):
        assert group["lr"] > 0, f"lr must be positive, got {group['lr']}"
        return self.lr


class AscendingSGD(torch.optim.Optimizer):
    """Stateless, and adds the gradient: it climbs."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=group["lr"])
        return loss


class ConjugateSGD(ForeachSGD):
    """Steps complex params along the conjugate gradient: the imaginary part goes the wrong way."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.is_complex():
                    p.grad = p.grad.conj()
        return super().step(closure)


class InPlaceLrSGD(torch.optim.Optimizer):
    """SGD with bias correction that divides its lr in place (fairseq's Adamax: `step_size = group["lr"];
    step_size /= bias_correction`): a float lr is rebound, a tensor lr is the group's own, changed each step."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            step_size = group["lr"]
            step_size /= 1.5
            for p in group["params"]:
                if p.grad is not None:
                    p.sub_(p.grad * step_size)
