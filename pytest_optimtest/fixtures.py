"""Fixtures for other repos' tests; the plugin registers them.

    @pytest.mark.optim_spec("specs/lion.yaml", case="lion-default-*")
    def test_lion_compiles(compiled_optimizer):
        compiled_optimizer.step()
        with assert_no_recompiles():
            compiled_optimizer.step()
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .harness.devices import selected_devices, unavailable_reason

if TYPE_CHECKING:  # this module is loaded in every session: torch and the spec code load on use
    import torch

    from .checks import Registry
    from .spec import Case, SpecError

MARKER = "optim_spec"


def parametrize_from_marker(metafunc: pytest.Metafunc, marker: Any) -> None:
    """Parametrize `optim_case` over the marker's cases; a marker naming none errors its test alone."""
    from .session import registry_for  # the session and spec code import torch: loaded on use
    from .spec import SpecError

    try:
        cases = cases_for_marker(marker, Path(str(metafunc.definition.path)), metafunc.config.rootpath,
                                 registry_for(metafunc.config))
    except (SpecError, ValueError) as exc:  # this test errors at setup; the rest of the session runs
        metafunc.parametrize("optim_case", [MarkerError(spec_error_text(exc))], ids=["invalid-optim_spec"], indirect=True)
        return
    devices = selected_devices(metafunc.config)
    cases = [c for c in cases if devices is None or c.device in devices]
    metafunc.parametrize("optim_case", cases, ids=[c.id for c in cases], indirect=True)


def cases_for_marker(marker: Any, test_file: Path, rootdir: Path, registry: Registry | None = None) -> list[Case]:
    """The cases `@pytest.mark.optim_spec(path, case=glob)` names: path relative to the test
    file's folder, else to the rootdir; ValueError/SpecError when it names nothing."""
    from .cases import load_cases  # the spec code imports torch: loaded when a test uses the marker

    if not marker.args:
        raise ValueError("@pytest.mark.optim_spec needs a spec path: optim_spec('specs/lion.yaml', case='*')")
    raw = Path(marker.args[0])
    path = next((p for p in (test_file.parent / raw, rootdir / raw, raw) if p.is_file()), None)
    if path is None:
        raise ValueError(f"@pytest.mark.optim_spec: no spec file {str(raw)!r} next to {test_file.name} or under {rootdir}")
    pattern = marker.kwargs.get("case", "*")
    cases = [c for c in load_cases(path, registry) if fnmatch.fnmatchcase(c.id, pattern)]
    if not cases:
        raise ValueError(f"@pytest.mark.optim_spec: no case of {path} matches {pattern!r}")
    return cases


@dataclass(frozen=True)
class MarkerError:
    """Stands in for the cases of a marker that names none; its test errors with `message`."""

    message: str


@pytest.fixture
def optim_case(request: pytest.FixtureRequest) -> Case:
    """The current spec case; parametrize with @pytest.mark.optim_spec(path, case=glob)."""
    if not hasattr(request, "param"):
        pytest.fail("optim_case needs @pytest.mark.optim_spec('path.yaml', case='glob') on the test", pytrace=False)
    case = request.param
    if isinstance(case, MarkerError):
        pytest.fail(case.message, pytrace=False)
    reason = unavailable_reason(case.device)
    if reason:
        pytest.skip(reason)
    return case


@dataclass
class CompiledOptimizer:
    """A case's model (with grads), its optimizer, `step()` compiled as PyTorch's tests do, and
    an eager twin (same model copy, same grads) to compare with."""

    case: Case
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step: Any
    eager_model: torch.nn.Module
    eager: torch.optim.Optimizer


@pytest.fixture
def compiled_optimizer(optim_case: Case) -> Iterator[CompiledOptimizer]:
    """The current case compiled: `compiled_optimizer.step()` runs the compiled step under the spec's
    grad mode (no_grad unless it says `grad_mode: enabled`);
    dynamo and inductor state is fresh for the test and restored after."""
    from .harness.builder import compile_step, require_graph_free_grads, step_grad_mode
    from .harness.isolation import isolated_case
    from .harness.builder import first_backward, make_optimizer, seeded_model
    from .harness.vacuity import NotApplicable

    try:
        require_graph_free_grads(optim_case.backward)  # its step() runs on the grads one backward left
    except NotApplicable as exc:
        pytest.skip(str(exc))
    with isolated_case(optim_case):
        model = seeded_model(optim_case)
        eager_model = copy.deepcopy(model)
        opt, eager = make_optimizer(optim_case, model), make_optimizer(optim_case, eager_model)
        inputs, loss_fn = first_backward(optim_case, model)  # once both are built, as the runs do
        loss_fn(eager_model(inputs)).backward()
        compiled = compile_step(opt)

        def step() -> None:
            with step_grad_mode(optim_case):
                compiled()

        yield CompiledOptimizer(optim_case, model, opt, step, eager_model, eager)


@pytest.fixture
def hook_recorder():
    """`record_hook_order(model, inputs, ...)`: ModTracker's events for any model."""
    from .harness.hook_recorder import record_hook_order

    return record_hook_order


def spec_error_text(exc: SpecError | ValueError) -> str:
    return f"invalid @pytest.mark.optim_spec: {exc}"
