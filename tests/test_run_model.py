"""The run model's verdicts (issues 32 and 38): one root cause is one red, the checks that need a
failed rung are blocked by it, vacuous comparisons are skips that strict mode fails, a diverged run
is not compared, and a closure's graphs are not the step's. One subprocess session over planted
optimizers (tests/planted_run_model.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SPECS = {
    "typo": "optimizer: planted_run_model:TypoSGD\nkwargs: {lr: 0.1}\n"
            "checks: [parity, kernel_count, recompile, graph_breaks, in_backward, in_backward_no_hook]\n",
    "idle": "optimizer: planted_run_model:IdleSGD\nkwargs: {lr: 0.1}\nchecks: [parity, in_backward, in_backward_no_hook]\n",
    "explode": "optimizer: planted_run_model:ExplodingSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "untraced": "optimizer: planted_run_model:UntracedStepSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\nclosure: [true]\n",
    "rounds": "optimizer: planted:PlainSGD\nkwargs: {lr: 1.0e-7}\ndtypes: [bfloat16]\nchecks: [parity, in_backward]\n",
}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--optim-spec", "specs", "-v", "-rs", "-n", "0", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=root, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    root = tmp_path_factory.mktemp("run_model")
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, root / module)
    (root / "specs").mkdir()
    for name, text in SPECS.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    result = _run(root, "--optim-report", "report.json")
    return result.stdout, json.loads((root / "report.json").read_text()), root


def _outcomes(out: str, case: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(rf"::{re.escape(case)}::(\w+) (PASSED|FAILED|SKIPPED|ERROR)", out)}


def test_a_step_that_raises_is_one_red_and_blocks_the_rest_of_its_case(session):
    out, report, _ = session
    outcomes = _outcomes(out, "typosgd-default-cpu")
    assert sorted(outcomes.values()) == ["FAILED"] + ["SKIPPED"] * 5, outcomes
    assert outcomes["parity"] == "FAILED"
    assert "root cause of this case: its ladder's rung 'eager_steps' failed" in out
    assert "KeyError: 'momentun'" in out and "planted_run_model.py:" in out  # the optimizer's file and line
    assert re.search(r"SKIPPED \[5\] .*: blocked by eager_steps: at eager step 1: KeyError: 'momentun' \(\S*planted_run_model.py:17", out)
    [cause] = [c for c in report["root_causes"] if c["optimizer"].endswith("TypoSGD")]
    assert (cause["rung"], cause["red"], cause["blocked"]) == ("eager_steps", 1, 5)
    assert "planted_run_model.py" in cause["where"]
    assert "TypoSGD: 1 root cause, 1 red in 1 case(s), blocks 5 items: eager_steps" in out


def test_a_step_that_moves_nothing_is_one_red_not_a_vacuous_pass_per_check(session):
    out, report, _ = session
    outcomes = _outcomes(out, "idlesgd-default-cpu")
    assert outcomes == {"parity": "FAILED", "in_backward": "SKIPPED", "in_backward_no_hook": "SKIPPED"}, outcomes
    assert "the optimizer's step moved nothing" in out
    kinds = {r["check"]: (r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "idlesgd-default-cpu"}
    assert kinds == {"parity": "root_cause", "in_backward": "blocked", "in_backward_no_hook": "vacuous"}


def test_a_diverged_run_is_not_compared_and_strict_mode_fails_it(session):
    out, report, root = session
    assert _outcomes(out, "explodingsgd-default-cpu") == {"parity": "SKIPPED"}
    assert re.search(r"explodingsgd-default-cpu: diverged: reference param '\S+' grew from scale", out)
    [item] = [r for r in report["items"] if r["case"] == "explodingsgd-default-cpu"]
    assert item["verdict"]["kind"] == "vacuous"
    assert "vacuous item(s): their comparison proved nothing" in out
    strict = _run(root, "--optim-strict", "-k", "explodingsgd")
    assert strict.returncode == 1 and "vacuous, and strict mode fails it" in strict.stdout


def test_graphs_of_the_closure_are_not_the_steps(session):
    out, _, _ = session
    assert _outcomes(out, "untracedstepsgd-default-closure-cpu") == {"parity": "FAILED"}
    assert re.search(r"the step captured no graph of its own; the closure's \d+ graph\(s\) are not the step's", out)


def test_updates_that_round_away_at_low_precision_are_vacuous_not_red(session):
    out, report, _ = session
    outcomes = _outcomes(out, "plainsgd-default-bfloat16-cpu")
    assert outcomes == {"parity": "SKIPPED", "in_backward": "SKIPPED"}, outcomes
    assert "left every bfloat16 param bitwise unchanged (its updates round away at bfloat16)" in out
    assert {(r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "plainsgd-default-bfloat16-cpu"} == {"vacuous"}
