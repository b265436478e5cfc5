"""signSGD with momentum (Bernstein et al., 2018): every element moves by exactly lr per step."""

import torch


class SignSGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0):
        if lr <= 0 or not 0 <= momentum < 1:
            raise ValueError(f"invalid lr {lr} or momentum {momentum}")
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                direction = p.grad
                if group["momentum"]:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    buf = state["momentum_buffer"]
                    buf.mul_(group["momentum"]).add_(p.grad)
                    direction = buf
                p.add_(torch.sign(direction), alpha=-group["lr"])
        return loss
