"""Standalone reproducer of the mechanisms the ecosystem specs xfail: plain torch, no plugin.

    python specs/ecosystem/repro/repro.py compile pytorch_optimizer:AdaBelief [steps]
        compiles the optimizer's step (no fullgraph) beside an eager twin; prints the graphs
        captured, dynamo's graph-break and recompile reasons, the first compiled-vs-eager
        difference (params, state, param_groups), or the exception the compiled step raised
    python specs/ecosystem/repro/repro.py leak torch_optimizer:AdamP
        drops model, optimizer and compiled step; prints the params still alive after gc.collect()
        and the types of what holds them, then whether torch._dynamo.reset() frees them
    python specs/ecosystem/repro/repro.py load pytorch_optimizer:AdaBelief
        loads an eager optimizer's state_dict into the compiled one; prints the recompiles it causes
"""

import copy
import gc
import importlib
import logging
import sys
import weakref

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from pytest_optimtest.checks.leak import _holders  # the no_leak check's own search for what keeps a param alive

recompiles = []
logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: recompiles.append(r.getMessage())})())
torch._logging.set_logs(recompiles=True)
logging.getLogger("torch._dynamo.guards.__recompiles").propagate = False


def make(path, params):
    module, name = path.split(":")
    opt = getattr(importlib.import_module(module), name)(params, lr=0.01)
    if hasattr(opt, "train"):  # schedule-free: step only in train mode
        opt.train()
    return opt


def model_with_grads():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    model(torch.randn(10, 10)).pow(2).sum().backward()
    return model


def twin_of(model):
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters()):
        q.grad = p.grad.clone()
    return twin


def first_difference(a, b, where=""):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return None if torch.allclose(a, b, atol=1e-5, rtol=1.3e-6, equal_nan=True) else \
            f"{where}: max abs diff {(a - b).abs().max().item():.3g}"
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            found = first_difference(a.get(k), b.get(k), f"{where}[{k!r}]")
            if found:
                return found
        return None
    return None if a == b or (a != a and b != b) else f"{where}: compiled {b!r} != eager {a!r}"


def compile_mode(path, steps):
    model = model_with_grads()
    twin = twin_of(model)
    opt, opt_c = make(path, model.parameters()), make(path, twin.parameters())
    step = torch.compile(opt_c.step)
    try:
        with torch.no_grad():
            for i in range(steps):
                step()
                opt.step()
    except Exception as exc:
        print(f"compiled step {i + 1} raised {type(exc).__name__}: {str(exc).splitlines()[0]}")
    print("graphs captured:", counters["stats"]["unique_graphs"])
    for reason, n in counters["graph_break"].items():
        print(f"graph break ({n}x): {reason.splitlines()[0]}")
    for message in recompiles:
        print("recompile:", next((l.strip() for l in message.splitlines() if l.strip().startswith("- ")), message))
    eager = {"params": dict(model.named_parameters()), "state": {i: s for i, s in enumerate(opt.state.values())},
             "groups": {i: {k: v for k, v in g.items() if k != "params"} for i, g in enumerate(opt.param_groups)}}
    compiled = {"params": dict(twin.named_parameters()), "state": {i: s for i, s in enumerate(opt_c.state.values())},
                "groups": {i: {k: v for k, v in g.items() if k != "params"} for i, g in enumerate(opt_c.param_groups)}}
    print("first difference after", steps, "steps:", first_difference(eager, compiled) or "none")


def leak_mode(path):
    model = model_with_grads()
    refs = [weakref.ref(p) for p in model.parameters()]
    opt = make(path, model.parameters())
    step = torch.compile(opt.step)
    with torch.no_grad():
        step()
        step()
    del model, opt, step
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    print(f"{len(alive)} of {len(refs)} params alive after gc.collect()")
    if alive:
        print("held by:", _holders(alive[0]))
    del alive  # before the reset: this list would keep them alive itself
    torch._dynamo.reset()
    gc.collect()
    print(f"{sum(r() is not None for r in refs)} alive after torch._dynamo.reset() and gc.collect()")


def load_mode(path):
    model, twin = model_with_grads(), None
    twin = twin_of(model)
    opt, opt_c = make(path, model.parameters()), make(path, twin.parameters())
    step = torch.compile(opt_c.step)
    with torch.no_grad():
        step(), step(), opt.step(), opt.step()
        seen = len(recompiles)
        opt_c.load_state_dict(opt.state_dict())
        step(), step()
    for message in recompiles[seen:]:
        print("recompile after load:", next((l.strip() for l in message.splitlines() if l.strip().startswith("- ")), message))


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "compile":
        compile_mode(path, int(sys.argv[3]) if len(sys.argv) > 3 else 6)
    elif mode == "leak":
        leak_mode(path)
    else:
        load_mode(path)
