"""A check is one module: its section, expectations and metrics reach the schema, expansion, the
plugin, the command line, load_case and the JSON report through the registry alone."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field
from warm import run_module, run_pytest_in

from pytest_optimtest.cases import load_case, project_registry
from pytest_optimtest.checks import BUILTIN, CHECKS, Check, Registry
from pytest_optimtest.spec import SpecError

ROOT = Path(__file__).resolve().parents[1]

# One module, as a built-in check would be written: its section, what it expects of each case,
# its run and its metric. (The test registers it from a conftest, the path a project takes; a
# built-in one is the same module plus one line in checks/__init__.py's BUILTIN.)
MODULE = '''
from pydantic import BaseModel, ConfigDict, Field

from pytest_optimtest import Check


class StepBound(BaseModel):
    """The largest element move allowed per step, in units of lr."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    per_step: float = Field(1.0, gt=0)


def validate(section, spec):
    if "lr" not in spec.spec.kwargs:
        raise spec.error(("step_bound",), "step_bound needs an lr in the spec's kwargs")


def expect(section, case):
    return section.per_step * {"cpu": 1.0}.get(case.device, 1.0)


def run(case, runs):
    run = runs.compiled(case)
    moved = max(float((run.compiled.params[n] - p).abs().max()) for n, p in run.initial_params.items())
    bound = run.steps * case.kwargs["lr"] * case.expected["step_bound"]
    assert moved <= bound, f"{case.id}: moved {moved:.3g} > {bound:.3g}"
    return f"moved {moved:.3g} <= {bound:.3g}"


def metrics(case, runs):
    run = runs.peek("compiled", case)
    return {} if run is None else {"bound": case.expected["step_bound"], "gate": {"step bound": case.expected["step_bound"]}}


CHECK = Check("step_bound", run, "no element moves more than per_step x lr a step", "no_closure",
              prerequisites=("parity",), section=StepBound, validate=validate, expect=expect, metrics=metrics)
'''

CONFTEST = '''
from stepbound import CHECK


def pytest_optimtest_checks():
    return [CHECK]
'''

SPEC = """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
checks: [parity, step_bound]
step_bound: {per_step: 50.0}
"""


def _properties(schema: dict) -> dict:
    """The optimizer spec's top-level keys in a JSON Schema (the first branch of the spec kinds)."""
    first = schema["anyOf"][0]
    return schema["$defs"][first["$ref"].rpartition("/")[2]]["properties"] if "$ref" in first else first["properties"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "stepbound.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "sgd.yaml").write_text(SPEC.lstrip())
    return tmp_path


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_module(cwd, "pytest_optimtest", list(args), timeout=300)


def test_a_check_module_validates_through_load_case_and_the_cli(project: Path) -> None:
    case = load_case(project / "specs" / "sgd.yaml", "sgd-default-cpu")
    assert case.checks == ("parity", "step_bound")
    assert case.sections["step_bound"].per_step == 50.0 and case.expected["step_bound"] == 50.0
    assert "step_bound" in _properties(project_registry(project).json_schema())

    ok = _cli(project, "check", "specs/sgd.yaml")
    assert ok.returncode == 0 and "ok: specs/sgd.yaml: 1 cases" in ok.stdout
    (project / "specs" / "sgd.yaml").write_text(SPEC.replace("per_step: 50.0", "per_stp: 50.0").lstrip())
    bad = _cli(project, "check", "specs/sgd.yaml")
    assert bad.returncode == 1
    assert "specs/sgd.yaml:4: [step_bound.per_stp] unknown key 'per_stp' (did you mean 'per_step'?)" in bad.stdout
    with pytest.raises(SpecError, match=r"sgd.yaml:4: \[step_bound.per_stp\] unknown key"):
        load_case(project / "specs" / "sgd.yaml", "sgd-default-cpu")
    (project / "specs" / "sgd.yaml").write_text(SPEC.replace("kwargs: {lr: 0.1}", "kwargs: {momentum: 0.0}").lstrip())
    assert "[step_bound] step_bound needs an lr in the spec's kwargs" in _cli(project, "check", "specs/sgd.yaml").stdout


def test_a_check_module_runs_through_the_plugin_with_its_metric_in_the_report(project: Path) -> None:
    result = run_pytest_in(project, "--optim-spec", "specs", "-p", "no:randomly", "-n", "0", "-v", "--optim-report",
                           "report.json", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "sgd-default-cpu::step_bound PASSED" in result.stdout
    items = json.loads((project / "report.json").read_text())["items"]
    (bound,) = [i for i in items if i["check"] == "step_bound"]
    assert bound["metrics"] == {"bound": 50.0, "gate": {"step bound": 50.0}}


def test_without_its_registration_the_section_is_an_unknown_key_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "sgd.yaml").write_text(SPEC.lstrip())
    with pytest.raises(SpecError, match="unknown key 'step_bound'; if it is the section of a check of your own, "
                                        "register that check"):
        load_case(tmp_path / "sgd.yaml", "sgd-default-cpu")


class _Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(1.0, gt=0)


def test_one_line_in_the_builtin_list_adds_a_section_to_the_schema() -> None:
    check = Check("budget", lambda case, runs: "", "d", section=_Budget)
    registry = Registry([*BUILTIN, check])
    assert "budget" in _properties(registry.json_schema())
    assert "budget" not in _properties(CHECKS.json_schema())
    assert ("budget", _Budget) in registry.sections


def test_every_builtin_section_key_is_in_the_json_schema() -> None:
    schema = CHECKS.json_schema()
    properties = _properties(schema)
    for key in ("kernel_counts", "recompile", "graph_breaks", "compile_budget_s", "cudagraphs", "in_backward",
                "distributed", "fuzz", "cases", "grid"):
        assert key in properties, key
    # the bare-number shorthand stays, beside counts keyed by release
    assert [form["type"] for form in schema["$defs"]["GraphBreaks"]["anyOf"]] == ["integer", "object"]
