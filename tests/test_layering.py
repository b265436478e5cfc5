"""Check modules are judgments over runs: they ask harness/ for runs and compare them, and never
build an optimizer, compile or step one themselves (issue 32: a fix made once in the runner holds
for every check). Read from the source, so a check that starts building its own run fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parent.parent / "pytest_optimtest" / "checks"

# What builds or steps a run: the runner's business (harness/), never a check's.
BUILDERS = {"make_optimizer", "compile_step", "seeded_model", "first_backward", "build_model", "make_twins", "make_closure",
            "construct", "make_model", "with_setup", "run_ranks", "raw_step"}
STEPPING_CALLS = {"step", "compile", "backward", "apply_optimizer_in_backward", "zero_grad"}


def _modules() -> list[Path]:
    return sorted(p for p in CHECKS.rglob("*.py") if p.name != "__init__.py")


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in BUILDERS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STEPPING_CALLS:
            found.append(f"line {node.lineno}: calls .{node.func.attr}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS:
            found.append(f"line {node.lineno}: calls {node.func.id}()")
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(CHECKS)))
def test_check_module_only_judges(path: Path) -> None:
    assert _violations(path) == [], f"{path.name} builds or steps a run itself; ask harness/ for the run instead"


def test_the_rule_sees_a_check_that_steps(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from ..harness.builder import make_optimizer\n\ndef check(case, runs):\n"
                       "    opt = make_optimizer(case, [])\n    opt.step()\n")
    assert _violations(planted) == ["line 1: imports make_optimizer", "line 4: calls make_optimizer()",
                                    "line 5: calls .step()"]
