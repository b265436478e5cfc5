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
    python specs/ecosystem/repro/repro.py compile optimi:Lion 6 bfloat16
        the compile mode over params of that dtype (its difference judged at the dtype's precision)
    python specs/ecosystem/repro/repro.py fsdp came_pytorch:CAME [compiled]
        3 steps over params sharded by FSDP2 on 2 gloo ranks (every rank sees the whole batch), eager
        or torch.compile'd; prints what a rank raised, and where, or the first difference from the
        same steps over whole params in one process (params and state, gathered with full_tensor)
    python specs/ecosystem/repro/repro.py checkpoint dadaptation:DAdaptAdam
        the eager sharded run saves model and optimizer with torch.distributed.checkpoint after 3
        steps and takes 3 more; one process loads the checkpoint into whole params, takes the same 3
        steps, and prints the first difference from the run that never stopped, or what raised
"""

import copy
import gc
import importlib
import logging
import os
import socket
import sys
import tempfile
import time
import traceback
import weakref

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from pytest_optimtest.checks.leak import _holders  # the no_leak check's own search for what keeps a param alive
from pytest_optimtest.harness.snapshot import frozen_tensor  # a copy, torchao's quantized state by its values
from pytest_optimtest.harness.torch_api import dcp_load, dcp_save, full_tensor, map_local  # DTensor and DCP, as the checks use them
from pytest_optimtest.spec.schema import DEFAULT_TOLERANCES

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


def new_model(path, dtype=torch.float32):
    """Two Linear layers; wide ones for torchao and bitsandbytes, which keep low-bit state only for
    params of 4096 elements or more (on each rank's shard too)."""
    torch.manual_seed(0)
    width = 1024 if path.split(".")[0] in ("torchao", "bitsandbytes") else 10
    return torch.nn.Sequential(torch.nn.Linear(10, width), torch.nn.Linear(width, 10)).to(dtype)


def model_with_grads(path, dtype=torch.float32):
    model = new_model(path, dtype)
    model(torch.randn(10, 10, dtype=dtype)).pow(2).sum().backward()
    return model


def twin_of(model):
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters()):
        q.grad = p.grad.clone()
    return twin


def first_difference(a, b, where="", rtol=1.3e-6):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {tuple(b.shape)} {b.dtype} != {tuple(a.shape)} {a.dtype}"
        return None if torch.allclose(a.double(), b.double(), atol=1e-5, rtol=rtol, equal_nan=True) else \
            f"{where}: max abs diff {(a.double() - b.double()).abs().max().item():.3g}"
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys(), key=str):
            found = first_difference(a.get(k), b.get(k), f"{where}[{k!r}]", rtol)
            if found:
                return found
        return None
    return None if a == b or (a != a and b != b) else f"{where}: {b!r} != {a!r}"


def compile_mode(path, steps, dtype=torch.float32):
    model = model_with_grads(path, dtype)
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
    rtol = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")].rtol  # the plugin's default at this dtype
    print("first difference (compiled, then eager) after", steps, "steps:", first_difference(eager, compiled, rtol=rtol) or "none")


def leak_mode(path):
    model = model_with_grads(path)
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
    model = model_with_grads(path)
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


STEPS = 3


def batch(step):
    return torch.randn(10, 10, generator=torch.Generator().manual_seed(100 + step))


def train(model, opt, step, first, last):
    """Steps first..last-1, each on its batch; returns what raised, with the frame that raised it."""
    for i in range(first, last):
        try:
            model(batch(i)).pow(2).sum().backward()
            step()
            opt.zero_grad()
        except Exception as exc:
            return f"step {i + 1} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} at {where(exc)}"
    return None


def where(exc):
    """The last frame outside torch (the optimizer's line, not the dispatcher's), and torch's last if deeper."""
    frames = traceback.extract_tb(exc.__traceback__)
    torch_dir = os.path.dirname(torch.__file__)
    outside = [f for f in frames if not f.filename.startswith(torch_dir) and f.filename != __file__]
    shown = [outside[-1]] if outside else []
    if frames and frames[-1] not in shown:
        shown.append(frames[-1])
    return ", then ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in shown)


def whole(value):
    if isinstance(value, torch.Tensor):  # a DTensor copied shard by shard, then gathered
        return full_tensor(map_local(value, frozen_tensor))
    return {k: whole(v) for k, v in value.items()} if isinstance(value, dict) else value


def trained(model, opt):
    """Params and state by param name, gathered whole (a collective under FSDP2)."""
    names = {p: n for n, p in model.named_parameters()}
    return {"params": {n: whole(p) for n, p in model.named_parameters()},
            "state": {names.get(p, str(p)): whole(dict(s)) for p, s in opt.state.items()},
            "groups": {i: whole({k: v for k, v in g.items() if k != "params"}) for i, g in enumerate(opt.param_groups)}}


def sharded(path, rank, port):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    model = new_model(path)
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, make(path, model.parameters())


def fsdp_rank(rank, path, compiled, port, out):
    model, opt = sharded(path, rank, port)
    error = train(model, opt, torch.compile(opt.step) if compiled else opt.step, 0, STEPS)
    result = {"error": error} if error else trained(model, opt)
    torch.save(result, f"{out}.{rank}")
    torch.distributed.destroy_process_group()


def checkpoint_rank(rank, path, port, out):
    model, opt = sharded(path, rank, port)
    error = train(model, opt, opt.step, 0, STEPS)
    if not error:
        try:
            dcp_save(model, opt, f"{out}.dcp")  # get_model_state_dict, get_optimizer_state_dict, dcp.save
        except Exception as exc:
            error = f"dcp.save of get_optimizer_state_dict raised {type(exc).__name__}: {str(exc).splitlines()[0]}"
    error = error or train(model, opt, opt.step, STEPS, 2 * STEPS)
    torch.save({"error": error} if error else trained(model, opt), f"{out}.{rank}")
    torch.distributed.destroy_process_group()


def on_two_ranks(target, *args):
    """(rank 0's result, the files' prefix) of target(rank, *args, port, out) on 2 spawned processes,
    a minute at most."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(tempfile.mkdtemp(), "rank")
    context = mp.start_processes(target, args=(*args, port, out), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + 60
    try:
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):  # False while a rank still runs
            if time.monotonic() >= deadline:
                for process in context.processes:
                    process.kill()
                return {"error": "a rank did not finish within 60 s (hung in a collective)"}, out
    except Exception as exc:  # a rank died or raised outside the step
        return {"error": str(exc).strip().splitlines()[-1]}, out
    return torch.load(f"{out}.0", weights_only=False), out


def fsdp_mode(path, compiled):
    result, _ = on_two_ranks(fsdp_rank, path, compiled)
    how = "compiled" if compiled else "eager"
    if "error" in result:
        print(f"{how}, sharded on 2 ranks: {result['error']}")
        return
    model = new_model(path)
    opt = make(path, model.parameters())
    error = train(model, opt, opt.step, 0, STEPS)
    reference = {"error": error} if error else trained(model, opt)
    print(f"{how}, sharded on 2 ranks vs whole params in one process, after {STEPS} steps: first difference (sharded, "
          "then whole):", first_difference(reference, result) or "none")


def checkpoint_mode(path):
    never_stopped, out = on_two_ranks(checkpoint_rank, path)
    if "error" in never_stopped:
        print("sharded run on 2 ranks:", never_stopped["error"])
        return
    model = new_model(path)
    opt = make(path, model.parameters())
    for p in model.parameters():  # the state DCP loads into: what one zero-grad step creates
        p.grad = torch.zeros_like(p)
    try:
        opt.step()
        opt.zero_grad()
        dcp_load(model, opt, f"{out}.dcp")  # dcp.load with no process group, then set_{model,optimizer}_state_dict
    except Exception as exc:
        print(f"loading at one process raised {type(exc).__name__}: {str(exc).splitlines()[0]} at {where(exc)}")
        return
    error = train(model, opt, opt.step, STEPS, 2 * STEPS)
    resumed = {"error": error} if error else trained(model, opt)
    print(f"resumed at one process from 2 ranks' checkpoint, {STEPS} steps on, vs the run that never stopped: "
          "first difference (resumed, then never stopped):", first_difference(never_stopped, resumed) or "none")


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "compile":
        compile_mode(path, int(sys.argv[3]) if len(sys.argv) > 3 else 6,
                     getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.float32)
    elif mode == "leak":
        leak_mode(path)
    elif mode == "fsdp":
        fsdp_mode(path, len(sys.argv) > 3 and sys.argv[3] == "compiled")
    elif mode == "checkpoint":
        checkpoint_mode(path)
    else:
        load_mode(path)
