"""bitsandbytes' compiled step on torch 2.13 CPU, with plain torch: no bitsandbytes.

    python specs/ecosystem/repro/frozen_storage.py

bitsandbytes' update_step runs `p.data = p.data.contiguous()` and then a custom op declared as
mutating p (Tensor(a1!) in its schema). Eager runs it; torch.compile fails in inductor with
"RuntimeError: cannot mutate tensors with frozen storage". Without the `.data` assignment it
compiles. Both are legal programs, so the failure is torch.compile's.
"""

import torch


@torch.library.custom_op("optimtest_repro::update", mutates_args=("g", "p"))
def update(g: torch.Tensor, p: torch.Tensor) -> None:
    p.add_(g, alpha=-0.1)


@update.register_fake
def _(g, p):
    return None


@torch.no_grad()
def step(p, data_assignment):
    if data_assignment:
        p.data = p.data.contiguous()
    p.grad = p.grad.contiguous()
    torch.ops.optimtest_repro.update(p.grad, p)


for data_assignment in (False, True):
    p = torch.nn.Parameter(torch.randn(3, 3))
    p.grad = torch.randn(3, 3)
    torch._dynamo.reset()
    try:
        torch.compile(step)(p, data_assignment)
        outcome = "compiles and runs"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
    print(f"p.data = p.data.contiguous() {'then' if data_assignment else 'left out, then'} the mutating op: {outcome}")
