"""The peer: PyTorch's compiled-optimizer test recipe, written independently of the plugin.

Per case (test_compiled_optimizers.py's shape): a fresh inductor cache and dynamo reset, a model
and a deep copy with equal grads, the eager optimizer and a second one whose raw step (torch.optim's
wrappers peeled off) is compiled with fullgraph=True, two steps of each side by side, params
compared, then inductor's generated kernel count read. The cases are exactly the torch.optim CPU
cases the shipped specs give parity to (closure and scheduler variants included: the recipe
steps the scheduler after each step, as PyTorch's does).

    python bench/peer.py                  # cold: a fresh inductor cache per case, as the recipe
    python bench/peer.py --shared-cache   # warm: TORCHINDUCTOR_CACHE_DIR, filled by a run before
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def torch_optim_cpu_cases() -> list:
    sys.path.insert(0, str(ROOT))
    from pytest_optimtest.checks import CHECKS

    cases = []
    for path in sorted((ROOT / "specs" / "torch_optim").glob("*.yaml")):
        cases += [c for c in CHECKS.cases(path) if getattr(c, "device", None) == "cpu" and "parity" in c.checks]
    return cases


def peer_case(case, fresh: bool = True) -> tuple[float, int, bool]:
    """(seconds, kernels, params equal) for one case under the recipe; a fresh inductor cache unless
    `fresh` is False (then the process's TORCHINDUCTOR_CACHE_DIR: the warm measurement)."""
    import contextlib

    from torch._inductor.utils import fresh_cache  # PyTorch's own: a temp cache dir, in-memory caches cleared

    with fresh_cache() if fresh else contextlib.nullcontext():
        return _timed_case(case)


def _timed_case(case) -> tuple[float, int, bool]:
    import torch
    import torch._dynamo
    import torch._inductor.metrics as metrics
    import torch.optim.lr_scheduler as lr_scheduler

    from pytest_optimtest.spec.values import build_kwargs, resolve

    start = time.perf_counter()
    torch._dynamo.reset()
    metrics.reset()
    torch.manual_seed(case.seed)
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    inputs = torch.randn(10, 10)
    model(inputs).pow(2).sum().backward()
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters()):
        q.grad = p.grad.clone()
    cls = resolve(case.optimizer)
    opt, opt_c = cls(model.parameters(), **build_kwargs(case.kwargs, "cpu")), cls(twin.parameters(), **build_kwargs(case.kwargs, "cpu"))
    raw = type(opt_c).step
    while hasattr(raw, "__wrapped__"):
        raw = raw.__wrapped__

    def closure_of(m, o):
        def closure():
            o.zero_grad()
            loss = m(inputs).pow(2).sum()
            loss.backward()
            return loss
        return closure

    eager_closure = closure_of(model, opt) if case.closure else None
    compiled_closure = closure_of(twin, opt_c) if case.closure else None
    fn = torch.compile(lambda: raw(opt_c, compiled_closure) if compiled_closure else raw(opt_c), backend="inductor",
                       fullgraph=not case.closure)
    schedulers = []
    if case.scheduler:
        scheduler_cls = getattr(lr_scheduler, case.scheduler)
        schedulers = [scheduler_cls(o, **build_kwargs(case.scheduler_kwargs, "cpu")) for o in (opt, opt_c)]
    with torch.no_grad():
        for _ in range(2):
            fn()
            opt.step(eager_closure) if eager_closure else opt.step()
            for s in schedulers:
                s.step(1.0) if isinstance(s, lr_scheduler.ReduceLROnPlateau) else s.step()
    equal = all(torch.allclose(p, q, atol=case.tolerance.atol, rtol=case.tolerance.rtol)
                for p, q in zip(model.parameters(), twin.parameters()))
    return time.perf_counter() - start, metrics.generated_kernel_count, equal


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    fresh = "--shared-cache" not in sys.argv  # warm runs: the environment's cache dir, filled by an earlier run
    cases = torch_optim_cpu_cases()
    total, unequal, errors = 0.0, [], []
    for case in cases:
        try:
            seconds, _, equal = peer_case(case, fresh)
        except Exception as exc:  # the recipe's own limits (fullgraph refused): counted, timed no further
            errors.append(f"{case.id}: {type(exc).__name__}")
            continue
        total += seconds
        if not equal:
            unequal.append(case.id)
    print(f"PEER cases={len(cases)} seconds={total:.1f} unequal={len(unequal)} errors={len(errors)}")
    for line in errors[:20]:
        print("  error:", line)


if __name__ == "__main__":
    main()
