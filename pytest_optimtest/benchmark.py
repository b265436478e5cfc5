"""--optim-benchmark: eager and compiled step time per plain case, through pytest-benchmark's
own `benchmark` fixture, so its JSON, --benchmark-compare and histograms apply."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .spec import Case


def benchmark_items(parent: pytest.Collector, case: Case, prefix: str = "") -> Iterator[pytest.Item]:
    for compiled in (False, True):
        name = "benchmark_compiled" if compiled else "benchmark_eager"

        def test(benchmark: Any, compiled: bool = compiled) -> None:
            from .harness.devices import unavailable_reason

            reason = unavailable_reason(case.device)
            if reason:
                pytest.skip(reason)
            run_benchmark(benchmark, case, compiled)

        test.__name__ = name
        item = pytest.Function.from_parent(parent, name=prefix + name, callobj=test)
        yield item


def run_benchmark(benchmark: Any, case: Case, compiled: bool) -> None:
    """Time `optimizer.step()` (compiled: the compiled raw step, warmed up first) on the case's model."""
    from .harness.builder import compile_step, step_grad_mode
    from .harness.isolation import isolated_case
    from .harness.builder import first_backward, make_optimizer, seeded_model

    with isolated_case(case):
        model = seeded_model(case)
        opt = make_optimizer(case, model)
        first_backward(case, model)  # once it is built, as the runs do
        step = compile_step(opt) if compiled else opt.step
        with step_grad_mode(case):
            step()  # compile, and create the optimizer state, outside the timing
            step()
            benchmark.extra_info.update({"case": case.id, "compiled": compiled, "spec": case.spec_path})
            benchmark.group = case.id
            benchmark(step)
