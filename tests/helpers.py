"""Build cases from YAML text, for unit tests of checks and expansion; run a spec session verbosely, or
serially over planted optimizers."""

from __future__ import annotations

import functools
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from warm import run_pytest, run_pytest_in

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.torch_api import fsdp2_runs_on_cpu, guard_failures, recording_recompiles, torch_version
from pytest_optimtest.spec import Case


needs_fsdp2_on_cpu = pytest.mark.skipif(
    not fsdp2_runs_on_cpu(), reason=f"torch {torch_version()}'s FSDP2 cannot shard on CPU (torch.cpu.Stream records no "
    "events), so the plugin skips fsdp and checkpoint saying so (test_production's test_a_torch_whose_cpu_stream_records_no_"
    "events_skips_fsdp_saying_why) and what this test is about does not arise")


def torch_before(release: str) -> bool:
    """Whether the installed torch is older than `release` ('2.13'): for behaviour of torch's that the suite has
    seen change between the floor (2.6) and that release, on the releases the suite is run on."""
    return tuple(map(int, torch_version().split("."))) < tuple(map(int, release.split(".")))


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def cases_from(tmp_path: Path, text: str, version: str | None = None) -> list[Case]:
    return CHECKS.cases(write_spec(tmp_path, text), version or torch_version())


def one_case(tmp_path: Path, text: str) -> Case:
    (case,) = cases_from(tmp_path, text)
    return case


def run_check(check: str, case: Case, runs: RunCache | None = None) -> Any:
    """What check `check` says of `case` (its verdict), over `runs` or runs of its own."""
    return CHECKS[check].run(case, runs or RunCache())


def failure_of(check: str, case: Case, runs: RunCache | None = None) -> str:
    """The red check `check` gives `case`; the test fails where the check does not fail."""
    with pytest.raises(AssertionError) as info:
        run_check(check, case, runs)
    return str(info.value)


def run_verbose(root: Path, *args: str) -> str:
    """A verbose, in-process (no rank subprocesses), unshuffled pytest session in `root`: its stdout."""
    return run_pytest_in(root, "-v", "-rsP", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", *args).stdout


def item_outcome(out: str, spec: str, check: str) -> str:
    """PASSED, FAILED, SKIPPED or ERROR of `<spec>-default-cpu::<check>` in a verbose session's output."""
    match = re.search(rf"specs/[a-z_]*\.yaml::{spec}-default-cpu::{check} (PASSED|FAILED|SKIPPED|ERROR)", out)
    assert match, f"{spec} {check} not in the output:\n{out[-3000:]}"
    return match.group(1)


def run_planted_spec(pytester: Any, modules: tuple[str, ...], spec: str, *args: str) -> tuple[Any, str]:
    """Run `spec` (a spec file's text, written as s.yaml beside copies of the planted `modules`) serially:
    (the whole run, the red its checkpoint check gives alone, with no other check's runs before it; run in
    this process, on the worker's kept ranks: a second session would cost a torch import and two ranks)."""
    for module in modules:
        shutil.copy(Path(__file__).parent / module, pytester.path / module)
    pytester.makefile(".yaml", s=spec)
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rfs", *args)
    (case,) = cases_from(pytester.path, spec)
    return result, failure_of("checkpoint", case)


def dynamo_writes_capturable(optimizer_cls: Any) -> bool:
    """Whether the installed torch's dynamo leaves `capturable` in the param groups of this optimizer's compiled
    step (OptimizerVariable._set_capturable: torch 2.13's does; 2.15's sets it only around `_init_group`)."""
    import torch

    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    optimizer = optimizer_cls([param], lr=0.01)
    torch.compile(optimizer.step)()
    return "capturable" in optimizer.param_groups[0]


@functools.cache
def guard_failures_name_their_line() -> bool:
    """Whether the installed torch's dynamo ends a failed guard with the source line that made it (`len(d) == 1
    # return x * len(d)  # helpers.py:N`): 2.13's does, 2.6's names the guard alone. Probed once, in this file."""
    import torch

    def scaled(x: torch.Tensor, d: dict) -> torch.Tensor:
        return x * len(d)

    compiled = torch.compile(scaled, backend="eager")
    with recording_recompiles() as messages:
        compiled(torch.ones(2), {"a": 1})
        compiled(torch.ones(2), {"a": 1, "b": 2})
    torch._dynamo.reset()
    return any("helpers.py:" in line for message in messages for line in guard_failures(message))
