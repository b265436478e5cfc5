"""Downstream adoption: fixtures, update mode, reports and the baseline gate, the registry,
init, benchmarks, and running under xdist, pytest-randomly, --junitxml and pytest-split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import cases_from
from warm import run_pytest

from pytest_optimtest.__main__ import main as cli
from pytest_optimtest.checks import CHECKS, Check, RegistryError
from pytest_optimtest.harness.torch_api import torch_version
from pytest_optimtest.report import Results, regressions
from pytest_optimtest.spec import SpecError

ROOT = Path(__file__).resolve().parent.parent
SGD = """\
# a comment the update must keep
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
checks: [parity, kernel_count, recompile, graph_breaks]
recompile:
  warmup: {steps: 2, compiles: 2}
  perturbations:
    - set_lr: 0.02  # keep me too
kernel_counts:
  "2.13": {cpu: {"*": 99, "sgd-nothing-*": 1}}
""".replace("2.13", torch_version())  # the running torch's table: update mode writes no other


def test_downstream_example_project_passes_with_its_fixtures_and_own_check(pytester):
    shutil.copytree(ROOT / "examples" / "downstream", pytester.path, dirs_exist_ok=True)
    result = run_pytest(pytester, "-p", "no:cacheprovider", "-rs")
    # tests/: 3 tests (one parametrized over one case); specs/: parity, kernel_count, recompile and
    # bounded_update on two cases, minus momentum's parity (xfailed: a torch bug) and its
    # bounded_update (skipped: its prerequisite parity did not pass).
    # On a torch the spec records no kernel counts for, its two kernel_count items skip saying so.
    unrecorded = 0 if f'"{torch_version()}": {{cpu:' in (ROOT / "examples" / "downstream" / "specs" / "signsgd.yaml").read_text() else 2
    result.assert_outcomes(passed=3 + 6 - unrecorded, xfailed=1, skipped=1 + unrecorded)
    result.stdout.fnmatch_lines(["*prerequisite 'parity' did not pass*"])


def test_a_third_party_check_owns_its_spec_section_and_reports_its_metric(pytester):
    shutil.copytree(ROOT / "examples" / "downstream", pytester.path, dirs_exist_ok=True)
    spec = pytester.path / "specs" / "signsgd.yaml"
    result = run_pytest(pytester, "-p", "no:cacheprovider", "specs", "--optim-report", "r.json", "-k", "bounded_update")
    records = json.loads((pytester.path / "r.json").read_text())["items"]
    assert [r["metrics"]["largest_move"] > 0 for r in records if r["check"] == "bounded_update" and r["outcome"] == "passed"] == [True]
    # a spec error is an item of its own that fails at once
    spec.write_text(spec.read_text().replace("bounded_update: {slack: 1.0e-5}", "bounded_update: {slak: 1.0e-5}"))
    result = run_pytest(pytester, "-p", "no:cacheprovider", "specs")
    result.stdout.fnmatch_lines(["*signsgd.yaml:9*bounded_update.slak*unknown key 'slak'*did you mean 'slack'*"])
    # the section is the check's: with the check not registered, the key is unknown to the spec
    (pytester.path / "conftest.py").write_text("")
    result = run_pytest(pytester, "-p", "no:cacheprovider", "specs")
    result.stdout.fnmatch_lines(["*unknown key 'bounded_update'*"])


def test_update_expected_rewrites_counts_keeping_comments_and_reports_stale(pytester):
    spec = pytester.makefile(".yaml", sgd=SGD)
    result = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-update-expected", "-p", "no:randomly")
    out = result.stdout.str()
    assert f"optimtest: updated sgd.yaml: kernel_counts['{torch_version()}'].cpu['*']: 99 -> 4" in out
    assert f"optimtest: updated sgd.yaml: kernel_counts['{torch_version()}'].cpu['sgd-momentum-cpu']: (none) -> 8" in out
    assert f"optimtest: stale: sgd.yaml: kernel_counts['{torch_version()}'].cpu['sgd-nothing-*'] matched no case in this run" in out
    text = spec.read_text()
    assert "# a comment the update must keep" in text and "# keep me too" in text
    assert "99" not in text and "kernel_counts:" in text.split("set_lr")[1]  # the perturbation's kernels too
    again = run_pytest(pytester, "--optim-spec", "sgd.yaml", "-p", "no:randomly")
    again.assert_outcomes(passed=8)


def test_update_expected_writes_no_count_from_a_step_that_compiled_nothing(pytester):
    # 0 kernels and 1 recompile are what a step dynamo skips shows, not counts to record
    shutil.copy(ROOT / "tests" / "planted.py", pytester.path / "planted.py")
    spec = pytester.makefile(".yaml", never="optimizer: planted:NeverCompiled\nkwargs: {lr: 0.1}\n"
                                            "checks: [kernel_count, recompile]\n"
                                            "recompile: {perturbations: [{set_lr: 0.02}]}\n")
    before = spec.read_text()
    result = run_pytest(pytester, "--optim-spec", "never.yaml", "--optim-update-expected", "-p", "no:randomly")
    result.assert_outcomes(failed=1, skipped=1)  # "not compiled": one root cause, and recompile blocked by it
    assert "optimtest: updated" not in result.stdout.str() and spec.read_text() == before


def test_update_expected_refuses_a_partial_run_unless_forced(pytester):
    spec = pytester.makefile(".yaml", sgd=SGD)
    before = spec.read_text()
    result = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-update-expected", "-k", "default")
    assert "--optim-update-expected refused: a partial run (-k 'default'" in result.stdout.str()
    assert spec.read_text() == before
    forced = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-update-expected", "-k", "default",
                                           "--optim-update-force")
    assert "optimtest: updated sgd.yaml: kernel_counts" in forced.stdout.str()
    assert spec.read_text() != before


def test_update_writes_globs_for_groups_of_cases_and_keeps_flow_style(tmp_path):
    from pytest_optimtest import update

    spec = tmp_path / "sgd.yaml"
    kept = ("optimizer: torch.optim.SGD\nkwargs: {betas: [{tensor: 0.9}, {tensor: 0.99}]}\n"
            "cases:\n  - name: x\n    schedulers: [StepLR,\n                 LinearLR]  # a flow list over two lines\n")
    spec.write_text(kept)
    # torch 2.11's CUDA counts for sgd.yaml's shape: 17 single-tensor cases at 4, 17 foreach at 1,
    # and the momentum-like cases apart
    observed = {f"sgd-c{i}-cuda": 4 for i in range(17)} | {f"sgd-c{i}-foreach-cuda": 1 for i in range(17)}
    observed |= {"sgd-momentum-cuda": 8, "sgd-nesterov-cuda": 8, "sgd-momentum-foreach-cuda": 5,
                 "sgd-momentum-nesterov-foreach-cuda": 2, "sgd-momentum-lr_tensor-foreach-cuda": 2}
    entry = {"table": ["kernel_counts"], "version": "2.11", "device": "cuda", "pattern": None, "count": None}
    records = [{"spec": str(spec), "case": case, "check": "kernel_count", "metrics": {"kernel_tables": [
        {**entry, "observed": n}]}} for case, n in observed.items()]
    planned = update.plan(records)
    assert [str(c).split(": ", 1)[1] for c in planned.changes] == [
        "kernel_counts['2.11'].cuda['*']: (none) -> 4",
        "kernel_counts['2.11'].cuda['*-foreach-*']: (none) -> 1",
        "kernel_counts['2.11'].cuda['sgd-momentum-cuda']: (none) -> 8",
        "kernel_counts['2.11'].cuda['sgd-momentum-foreach-cuda']: (none) -> 5",
        "kernel_counts['2.11'].cuda['sgd-momentum-lr_tensor-foreach-cuda']: (none) -> 2",
        "kernel_counts['2.11'].cuda['sgd-momentum-nesterov-foreach-cuda']: (none) -> 2",
        "kernel_counts['2.11'].cuda['sgd-nesterov-cuda']: (none) -> 8",
    ]
    update.apply(planned.changes)
    text = spec.read_text()
    assert text.startswith(kept)  # what was not changed is not laid out anew by ruamel
    # the table written gives every case its observed count, by the spec's own resolution rules
    from ruamel.yaml import YAML

    from pytest_optimtest.spec.kernel_table import kernel_expectation
    from pytest_optimtest.spec.loader import Locator

    table = YAML(typ="safe").load(text)["kernel_counts"]
    for case, n in observed.items():
        assert kernel_expectation(table, ("kernel_counts",), Locator(str(spec), None), case, "cuda", "2.11").count == n
    # a second run that observes the same changes nothing
    assert update.plan([{**r, "metrics": {"kernel_tables": [{**r["metrics"]["kernel_tables"][0], **_entry_for(
        table, r["case"])}]}} for r in records]).changes == []


def _entry_for(table, case):
    from pytest_optimtest.spec.kernel_table import kernel_expectation
    from pytest_optimtest.spec.loader import Locator

    k = kernel_expectation(table, ("kernel_counts",), Locator("x", None), case, "cuda", "2.11")
    return {"pattern": k.pattern, "count": k.count}


GATED = "default and (parity or recompile)"  # the items that carry the gate's numbers (kernels, recompiles)


def test_report_markdown_and_baseline_gate(pytester, monkeypatch):
    pytester.makefile(".yaml", sgd=SGD.replace('"*": 99', '"*": 8').replace("sgd-momentum", "x"))
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # a baseline that holds none of these items: the gate compares nothing and says no regression
    (pytester.path / "unrelated.json").write_text(json.dumps({"items": []}))
    first = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-report", "base.json", "-k", GATED,
                                          "--optim-baseline", "unrelated.json")
    first.stdout.fnmatch_lines(["*optimtest summary per spec*", "spec * passed * kernels * speedup", "sgd.yaml *"])
    assert first.ret == 0
    first.stdout.fnmatch_lines(["optimtest: no regression against unrelated.json (generated kernels, recompiles, *"])
    report = json.loads((pytester.path / "base.json").read_text())
    parity = next(r for r in report["items"] if r["check"] == "parity" and r["case"] == "sgd-default-cpu")
    assert parity["outcome"] == "passed" and parity["metrics"]["kernels"] > 0 and "compile_s" in parity["metrics"]
    assert "| `sgd.yaml` |" in summary.read_text()
    for item in report["items"]:  # pretend the saved run needed fewer kernels and recompiles
        gate = item["metrics"].get("gate", {})
        for label in ("generated kernels", "recompiles"):
            if label in gate:
                gate[label] -= 1
    (pytester.path / "old.json").write_text(json.dumps(report))
    gated = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-baseline", "old.json", "-k", GATED)
    assert gated.ret == 1
    out = gated.stdout.str()
    assert "regression(s) against old.json:" in out
    assert "  sgd-default-cpu [parity]: generated kernels 3 -> 4" in out  # SGD's step: 4 kernels on 2.13 CPU
    assert "  sgd-default-cpu [recompile]: recompiles 0 -> 1" in out
    # the gate's other verdicts, on that run's records without another session: nothing grew against
    # the run itself; a baseline without gate numbers (an older report) fails, never passes silently
    this_run = Results(records=json.loads((pytester.path / "base.json").read_text())["items"])
    assert regressions(pytester.path / "base.json", this_run) == []
    for item in report["items"]:
        item["metrics"].pop("gate", None)
    (pytester.path / "older.json").write_text(json.dumps(report))
    assert any("the baseline holds no gate numbers for it" in line for line in regressions(pytester.path / "older.json", this_run))


def test_registry_rejects_unknown_dependencies_and_duplicates():
    with pytest.raises(RegistryError, match="depends on unknown checks"):
        CHECKS.with_checks([Check("mine", lambda c, r: "", "d", prerequisites=("nope",))])
    with pytest.raises(RegistryError, match="already registered"):
        CHECKS.with_checks([Check("parity", lambda c, r: "", "d")])
    with pytest.raises(RegistryError, match="cannot depend on itself"):
        CHECKS.with_checks([Check("me", lambda c, r: "", "d", apply_after=("me",))])
    with pytest.raises(RegistryError, match="both own the section 'in_backward' with different models"):
        CHECKS.with_checks([Check("mine", lambda c, r: "", "d", section=dict, section_key="in_backward")])


def test_checks_come_after_their_prerequisites_and_a_missing_one_is_a_spec_error(tmp_path):
    case = cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [kernel_count, in_backward_tied, in_backward, parity]\n")[0]
    order = case.checks
    assert set(order) == {"kernel_count", "in_backward_tied", "in_backward", "parity"}
    assert order.index("parity") < order.index("kernel_count") and order.index("in_backward") < order.index("in_backward_tied")
    with pytest.raises(SpecError, match=r"spec.yaml:3: \[checks\] check 'in_backward_tied' needs 'in_backward'"):
        cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [in_backward_tied]\n")


def test_a_failed_prerequisite_skips_with_its_reason(pytester):
    shutil.copy(ROOT / "tests" / "planted.py", pytester.path / "planted.py")
    pytester.makefile(".yaml", shared="optimizer: planted:SharedCountSGD\nkwargs: {lr: 0.1}\n"
                                      "checks: [in_backward, in_backward_tied]\n")
    result = run_pytest(pytester, "--optim-spec", "shared.yaml", "-rs", "-p", "randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*prerequisite 'in_backward' did not pass: InBackwardDifference: sharedcountsgd-default-cpu: "
                                 "in-backward params differ*"])


def test_third_party_checks_register_through_an_entry_point(pytester):
    dist = pytester.path / "mychecks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mychecks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pytest_optimtest.checks]\nfinite = mychecks:FINITE\n")
    pytester.makepyfile(mychecks="""
        from pytest_optimtest import Check

        def check_finite(case, runs):
            run = runs.compiled(case)
            assert all(bool(p.isfinite().all()) for p in run.compiled.params.values())
            return "finite"

        FINITE = Check("finite", check_finite, "compiled params stay finite", apply_after=("parity",))
    """)
    pytester.makefile(".yaml", sgd="optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [finite, parity]\n")
    result = run_pytest(pytester, "--optim-spec", "sgd.yaml", "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*sgd-default-cpu::parity PASSED*", "*sgd-default-cpu::finite PASSED*"])


def test_init_writes_a_spec_that_validates(tmp_path, capsys):
    out = tmp_path / "adam.yaml"
    assert cli(["init", "torch.optim.Adam", "-o", str(out)]) == 0
    text = out.read_text()
    assert "optimizer: torch.optim.Adam" in text and "  - name: amsgrad\n    kwargs: {amsgrad: true}" in text
    assert "left out: capturable, differentiable" in text
    assert "wrote" in capsys.readouterr().out
    assert cli(["init", "torch.optim.Adam", "-o", str(out)]) == 1  # never overwrites
    assert cli(["init", "torch.optim.Adamm", "-o", str(tmp_path / "x.yaml")]) == 1
    assert "did you mean 'Adam'" in capsys.readouterr().err


def test_init_fixes_or_drops_what_the_constructor_rejects(tmp_path, capsys):
    sgd, picky = tmp_path / "sgd.yaml", tmp_path / "picky.yaml"
    assert cli(["init", "torch.optim.SGD", "-o", str(sgd)]) == 0  # validates: every case constructs
    assert "    kwargs: {nesterov: true, momentum: 0.9}  # with momentum: 0.9, since alone it is rejected" in sgd.read_text()
    assert cli(["init", "planted:PickySGD", "-o", str(picky)]) == 0
    text = picky.read_text()
    assert "  # left out: exotic: True: PickySGD rejects it: ValueError: exotic mode is not implemented" in text
    assert "name: exotic" not in text


def test_benchmark_items_use_pytest_benchmark(pytester, monkeypatch):
    # under an outer xdist run, the inner pytest would inherit the worker's variable and
    # pytest-benchmark would leave the JSON to a controller that does not exist
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makefile(".yaml", sgd="optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n")
    result = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--optim-benchmark", "--benchmark-json", "bench.json",
                                           "--benchmark-min-rounds", "3", "--benchmark-max-time", "0.05")
    result.assert_outcomes(passed=3)
    data = json.loads((pytester.path / "bench.json").read_text())
    assert sorted(b["extra_info"]["compiled"] for b in data["benchmarks"]) == [False, True]
    assert {b["group"] for b in data["benchmarks"]} == {"sgd-default-cpu"}


SPLIT_SPEC = """\
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
  - name: nesterov
    kwargs: {momentum: 0.9, nesterov: true}
checks: [parity, kernel_count, graph_breaks]
"""


def test_xdist_collects_identically_and_compiles_each_case_once(pytester):
    pytester.makefile(".yaml", sgd=SPLIT_SPEC)
    result = pytester.runpytest_subprocess("--optim-spec", "sgd.yaml", "-n", "2", "--optim-report", "r.json",
                                           "--junitxml", "junit.xml")
    result.assert_outcomes(passed=6, skipped=3)  # kernel_count: no expectation in this spec, reported as a skip
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    workers = {}
    for item in items:
        workers.setdefault(item["case"], set()).add(item["worker"])
    assert all(len(w) == 1 for w in workers.values()), workers  # loadscope: a case's checks share one compile
    junit = (pytester.path / "junit.xml").read_text()
    assert junit.count("<testcase") == 9 and 'name="parity' in junit and "sgd-default-cpu" in junit


def test_random_order_runs_every_check_once_per_case_and_pytest_split_shards_by_the_durations(pytester):
    pytester.makefile(".yaml", sgd=SPLIT_SPEC)
    result = run_pytest(pytester, "--optim-spec", "sgd.yaml", "--store-durations", "-p", "randomly", "--randomly-seed", "3")
    result.assert_outcomes(passed=6, skipped=3)
    # one compiled run per case, whatever the order (runs are freed after a case's last item)
    result.stdout.fnmatch_lines(["*Using --randomly-seed=3*", "optimtest: 3 case runs*"])
    assert "sgd.yaml::sgd-default-cpu::parity" in (pytester.path / ".test_durations").read_text()
    seen = []
    for group in ("1", "2"):
        # every shard must see the same order: a fixed seed when pytest-randomly is installed (collecting
        # in process: it compiles nothing, and a subprocess would import torch again for it)
        shard = pytester.runpytest_inprocess("--optim-spec", "sgd.yaml", "--splits", "2", "--group", group,
                                             "--collect-only", "-q", "-p", "randomly", "--randomly-seed", "1")
        seen += [line for line in shard.outlines if line.startswith("sgd.yaml::")]
    assert len(seen) == 9 and len(set(seen)) == 9  # every item once, across the two shards


def test_a_bad_marker_fails_its_own_module_only(pytester):
    pytester.makefile(".yaml", sgd="optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n")
    pytester.makepyfile(
        test_bad="""
            import pytest

            @pytest.mark.optim_spec("sgd.yaml", case="nothing-*")
            def test_case(optim_case):
                pass

            def test_unmarked(optim_case):
                pass
        """,
        test_good="""
            import pytest

            @pytest.mark.optim_spec("sgd.yaml")
            def test_case(optim_case):
                assert optim_case.id == "sgd-default-cpu"
        """,
    )
    result = run_pytest(pytester, "test_bad.py", "test_good.py")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines([
        "*invalid @pytest.mark.optim_spec: @pytest.mark.optim_spec: no case of *sgd.yaml matches 'nothing-*'*",
        "*optim_case needs @pytest.mark.optim_spec*",
    ])


def test_init_specs_of_correct_optimizers_of_every_common_shape_pass(pytester):
    # A subclass calling super().step(), a stateless SGD, state created inside step: scaffolded
    # with no hand edits, they must pass, but for the one law the subclass breaks: it clips p.grad
    # in place (law grads_untouched, on by default). (Closure and scheduler variants left out for time.)
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    for name in ("ClippedSGD", "PlainSGD", "LazyCloneMomentumSGD"):
        assert cli(["init", f"planted:{name}", "-o", str(pytester.path / f"{name.lower()}.yaml")]) == 0
    # Left out: compile_time (a timing smoke test, 6 s a spec) and the rank-based checks (8-10 s a spec;
    # tests/test_production.py and test_distributed.py hold them): nothing of a step's shape to find there
    zero = [arg for name in ("ClippedSGD", "PlainSGD", "LazyCloneMomentumSGD")
            for arg in ("--deselect", f"{name.lower()}.yaml::{name.lower()}-default-cpu::zero")]
    result = run_pytest(pytester, "--optim-spec", ".", "-k", "default and not closure and not (compile_time or distributed or "
                                           "fsdp or checkpoint)", *zero, "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 1 and outcomes.get("error", 0) == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["FAILED clippedsgd.yaml::clippedsgd-default-cpu::law_grads_untouched*"])
    result.stdout.fnmatch_lines(["*written by: clamp_ at *planted.py:* in step*"])
    assert outcomes["passed"] >= 30


def test_a_step_that_breaks_the_graph_gets_a_parity_verdict_and_an_honest_graph_breaks_failure(pytester):
    # .item() in step: not one graph, but the compiled step (breaks and all) computes what eager does
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    assert cli(["init", "planted:SkipZeroGradSGD", "-o", str(pytester.path / "skipzero.yaml")]) == 0
    # the compiled checks of the step (the rank-based and compile-time checks compile nothing of it that these don't)
    result = run_pytest(pytester, "--optim-spec", ".", "-k", "default and not closure and not (distributed or fsdp or "
                                           "checkpoint or compile_time)", "--deselect", "skipzero.yaml::skipzerogradsgd-default-cpu::zero",
                                           "-p", "no:randomly", "-rA")
    failed = [line for line in result.stdout.lines if line.startswith("FAILED")]
    if "SpeculationLog diverged" in result.stdout.str():  # torch 2.6's dynamo asserts retracing none_grads's step: its red, torch's
        result.stdout.fnmatch_lines(["torch raised it, at *torch/_dynamo/*", "AssertionError: ", "SpeculationLog diverged at index 0*"])
        failed = [line for line in failed if "::none_grads" not in line]
    assert failed and all("::graph_breaks" in line for line in failed), result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["PASSED *skipzerogradsgd-default-cpu::parity*"])
    result.stdout.fnmatch_lines(["*: 1 graph breaks compiling the step, the spec declares 0*"])


def test_compatibility_table_renders_one_row_per_optimizer_and_one_note_per_reason(tmp_path, capsys):
    items = [{"optimizer": "pkg:Good", "check": "parity", "case": "good-cpu", "outcome": "passed", "reason": "ok"},
             {"optimizer": "pkg:Bad", "check": "parity", "case": "bad-cpu", "outcome": "xfailed", "reason": "no graph"},
             {"optimizer": "pkg:Bad", "check": "recompile", "case": "bad-cpu", "outcome": "xfailed", "reason": "no graph"},
             {"optimizer": "pkg:Good", "check": "recompile", "case": "good-cpu", "outcome": "failed", "reason": "steady recompile"},
             {"optimizer": "pkg:Good", "check": "parity", "case": "good-bfloat16-cpu", "dtype": "bfloat16",
              "outcome": "passed", "reason": "ok"}]
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"torch": "2.13", "items": items}))
    assert cli(["table", str(report)]) == 0
    out = capsys.readouterr().out
    assert "| `pkg:Bad` | xfail [1] | xfail [1] |  |" in out and "| `pkg:Good` | pass | **FAIL** [2] | pass |" in out
    assert "| optimizer | parity | recompile | parity bfloat16 |" in out  # a dtype other than float32: its own column
    assert "1. `pkg:Bad` (bad-cpu): no graph" in out
    assert "passing every case, per check: parity 1, recompile 0, parity bfloat16 1" in out


def test_update_mode_and_gate_read_any_checks_metrics(tmp_path):
    # what a third-party check reports is written and gated like the built-in numbers
    from pytest_optimtest import report as reporting, update

    spec = tmp_path / "mine.yaml"
    spec.write_text("optimizer: torch.optim.SGD\nmine: {budget: 3}  # kept\n")

    def record(case, observed, kernels):
        table = {"table": ["kernel_counts"], "version": "2.13", "device": "cpu", "pattern": None, "count": None}
        return {"spec": str(spec), "case": case, "check": "mine", "metrics": {
            "updates": [{"path": ["mine", "budget"], "declared": 3, "observed": observed}],
            "kernel_tables": [{**table, "observed": kernels}], "gate": {"widgets": observed}}}

    planned = update.plan([record("a", 5, 2), record("b", 5, 2)])
    assert sorted(map(str, planned.changes)) == [f"{spec}: kernel_counts['2.13'].cpu['*']: (none) -> 2",
                                                 f"{spec}: mine.budget: 3 -> 5"]
    update.apply(planned.changes)
    assert "mine: {budget: 5}  # kept" in spec.read_text() and "'*': 2" in spec.read_text().replace('"', "'")
    assert update.plan([record("a", 5, 2), record("b", 6, 2)]).conflicts == [
        f"{spec}: mine.budget: cases disagree (a: 5, b: 6); not written"]

    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps({"items": [record("a", 5, 2)]}))
    grown = reporting.Results([record("a", 7, 2)])
    assert reporting.regressions(baseline, grown) == ["a [mine]: widgets 5 -> 7"]


def test_the_compiled_optimizer_fixture_skips_a_case_whose_step_differentiates_its_closures_graph(pytester):
    """Its step() runs on the grads one backward left: a `backward: create_graph` case cannot be served
    that way, and the user's test says why instead of failing in the optimizer."""
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    pytester.makefile(".yaml", hessian="optimizer: planted_unseen:HessianScaledSGD\nkwargs: {lr: 0.1}\n"
                                       "backward: create_graph\n")
    pytester.makepyfile(test_mine="""
        import pytest

        @pytest.mark.optim_spec("hessian.yaml")
        def test_step(compiled_optimizer):
            compiled_optimizer.step()
    """)
    result = run_pytest(pytester, "test_mine.py", "-rs", "-p", "no:randomly")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the spec's `backward: create_graph` (a step that differentiates the graph its closure "
                                 "made) and this run's grads set by hand, which have no graph behind them: not applicable*"])
