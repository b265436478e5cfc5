"""Plugin behaviour through pytester: collection, ids, filtering, skips, errors.

Runs that compile use a subprocess: an in-process run drops the inductor modules it
imported, and torch cannot register their operator libraries twice.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch
from warm import run_pytest

from pytest_optimtest.harness.torch_api import torch_version

SGD_SPEC = f"""
optimizer: torch.optim.SGD
kwargs: {{lr: 0.1}}
devices: [cpu, cuda]
cases:
  - name: default
  - name: momentum
    kwargs: {{momentum: 0.9}}
checks: [parity, kernel_count]
kernel_counts:
  "{torch_version()}": {{cpu: 4}}
xfail:
  - cases: "*-momentum-*"
    checks: [kernel_count]
    reason: momentum creates its buffer in step 1, so the count differs
"""


@pytest.fixture
def specs(pytester):
    def write(**files: str):
        for name, text in files.items():
            path = pytester.path / "specs" / f"{name}.yaml"
            path.parent.mkdir(exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip())
        return pytester.path / "specs"

    return write


def test_collects_readable_stable_ids(pytester, specs):
    specs(sgd=SGD_SPEC)
    result = pytester.runpytest_inprocess("--optim-spec", "specs", "--optim-device", "cpu,cuda", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "specs/sgd.yaml::sgd-default-cpu::parity",
        "specs/sgd.yaml::sgd-default-cpu::kernel_count",
        "specs/sgd.yaml::sgd-default-cuda::parity",
        "specs/sgd.yaml::sgd-momentum-cpu::parity",
        "*8 tests collected*",
    ])


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a machine without CUDA")
def test_absent_devices_are_not_generated_and_the_header_says_so(pytester, specs, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")  # the spec's own devices, not the suite's CPU default
    specs(sgd=SGD_SPEC)
    result = pytester.runpytest_inprocess("--optim-spec", "specs", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "optimtest: 4 items of cuda cases not generated, no CUDA device on this machine "
        "(--optim-device cuda lists them as skips)",
        "*4 tests collected*",
    ])
    assert "-cuda::" not in result.stdout.str()


def test_runs_only_specs_not_testpaths(pytester, specs):
    specs(sgd=SGD_SPEC)
    pytester.makepyfile(test_other="def test_x(): pass")
    result = pytester.runpytest_inprocess("--optim-spec", "specs", "--collect-only", "-q")
    assert "test_other.py" not in result.stdout.str()


def test_device_filter_and_k_selection(pytester, specs):
    specs(sgd=SGD_SPEC)
    result = pytester.runpytest_inprocess("--optim-spec", "specs", "--optim-device", "cpu", "-k", "momentum", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["specs/sgd.yaml::sgd-momentum-cpu::parity", "*2/4 tests collected (2 deselected)*"])


@pytest.mark.parametrize("arg, expected", [
    ("specs/sgd.yaml::sgd-momentum-cpu", ["specs/sgd.yaml::sgd-momentum-cpu::parity", "specs/sgd.yaml::sgd-momentum-cpu::kernel_count"]),
    ("specs/sgd.yaml::sgd-momentum-cpu::kernel_count", ["specs/sgd.yaml::sgd-momentum-cpu::kernel_count"]),
])
def test_node_ids_select_a_case_or_one_check(pytester, specs, arg, expected):
    # items are the file's children (`case::check`); a node id below the file must still select
    specs(sgd=SGD_SPEC)
    result = pytester.runpytest_inprocess(arg, "--optim-spec", "specs", "--optim-device", "cpu", "--collect-only", "-q")
    assert [line for line in result.stdout.lines if "::" in line] == expected
    everything = pytester.runpytest_inprocess("--optim-spec", "specs", "--optim-device", "cpu", "--collect-only", "-q")
    assert set(expected) <= set(everything.stdout.lines)  # the same ids, collected either way


def test_ini_option(pytester, specs):
    specs(sgd=SGD_SPEC)
    pytester.makeini("[pytest]\noptim_spec = specs\n")
    result = pytester.runpytest_inprocess("--optim-device", "cpu,cuda", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*8 tests collected*"])


def test_full_run_passes_skips_cuda_and_applies_xfail(pytester, specs):
    specs(sgd=SGD_SPEC)
    result = run_pytest(pytester, "--optim-spec", "specs", "--optim-device", "cpu,cuda", "-rsx")
    if torch.cuda.is_available():  # cuda cases run: parity passes, kernel_count has no cuda count to compare
        result.assert_outcomes(passed=5, skipped=2, xfailed=1)
        result.stdout.fnmatch_lines(["*no expected kernel count for torch * on cuda*", "*momentum creates its buffer*"])
    else:
        result.assert_outcomes(passed=3, skipped=4, xfailed=1)
        result.stdout.fnmatch_lines(["*cuda case: no CUDA device on this machine*", "*momentum creates its buffer*"])


def test_broken_spec_is_an_error_of_that_file_only(pytester, specs):
    specs(sgd=SGD_SPEC.replace("devices: [cpu, cuda]", "devices: [cpu]"), broken="optimizer: torch.optim.Adamm\n")
    result = run_pytest(pytester, "--optim-spec", "specs", "-k", "default or error")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*invalid optimizer spec: *broken.yaml:1: [[]optimizer[]] *did you mean 'Adam'*"])
    assert "Traceback" not in result.stdout.str()


# SGD that drifts under torch.compile only: a planted fault of the optimizer's
DRIFT = """
    import torch
    class Drift(torch.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})
        @torch.no_grad()
        def step(self, closure=None):
            for p in self.param_groups[0]["params"]:
                p.add_(p.grad, alpha=-0.1)
                if torch.compiler.is_compiling():
                    p.mul_(1.001)
"""


def test_planted_fault_fails_through_the_plugin(pytester, specs):
    pytester.makepyfile(drift=DRIFT)
    specs(drift=f'optimizer: drift:Drift\nchecks: [parity, kernel_count]\nkernel_counts: {{"{torch_version()}": {{cpu: 99}}}}\n')
    result = run_pytest(pytester, "--optim-spec", "specs")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*compiled step differs from eager after 6 steps:*",
        "*param[[]'0.weight'[]]: *elements differ; max abs diff*",
        "*expected 99 generated kernels, observed *. If the change is intended, set *drift.yaml:3 kernel_counts*",
    ])


def test_a_required_package_that_fails_to_import_is_that_specs_error_naming_the_packages_line(pytester):
    """torchao 0.18 on torch 2.6 raises AttributeError while it imports: the spec error called it 'a bug of
    pytest-optimtest'. It is the package's, at its `requires` entry (or its `optimizer`), and no skip."""
    pytester.makepyfile(builtforanothertorch="import torch\n\ntorch.utils._pytree.no_such_function_here(int)\n")
    pytester.syspathinsert()
    base = "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
    pytester.makefile(".yaml", required=base + "requires: [torch, builtforanothertorch]\n",
                      named="optimizer: builtforanothertorch:Opt\n", fine=base)
    result = pytester.runpytest_inprocess("--optim-spec", ".", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)
    said = ("*importing builtforanothertorch raised AttributeError: module 'torch.utils._pytree' has no attribute "
            "'no_such_function_here' at *builtforanothertorch.py:3 in <module>: the package's doing, not the spec's*")
    result.stdout.fnmatch_lines(["*invalid optimizer spec: *named.yaml:1: [[]optimizer[]] *" + said.lstrip("*"),
                                 "*invalid optimizer spec: *required.yaml:4: [[]requires[[]1[]][]] " + said.lstrip("*")])
    assert "bug of pytest-optimtest" not in result.stdout.str()


def test_a_spec_whose_requirement_is_missing_is_one_skip_saying_which(pytester):
    base = "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n"
    pytester.makefile(".yaml", absent_module=base + "requires: [no_such_package]\n",
                      absent_name=base + 'requires: ["torch.optim:NoSuchOptimizer"]\n',
                      present=base + 'requires: ["torch.optim:SGD", torch]\nchecks: [parity]\n')
    collected = pytester.runpytest_inprocess("--optim-spec", ".", "--collect-only", "-q")
    collected.stdout.fnmatch_lines(["present.yaml::sgd-default-cpu::parity"])  # met: the spec's items are generated
    assert "present.yaml::requires" not in collected.stdout.str()
    result = pytester.runpytest_inprocess("--optim-spec", ".", "-rs", "-k", "requires")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*requires no_such_package (No module named 'no_such_package'): not available here*",
                                 "*requires torch.optim:NoSuchOptimizer (the installed torch * has no torch.optim.NoSuchOptimizer): not available here*"])


def test_an_xfail_rule_with_match_fails_an_item_that_fails_otherwise(pytester, specs):
    """An xfail passed whatever the failure: bitsandbytes' AdamW8bit, expected to fail for inductor's frozen storage,
    failed on torch 2.9 to 2.11 for dynamo's AttributeMutation assertion, and pytest counted it as expected."""
    pytester.makepyfile(drift=DRIFT)
    rule = "xfail:\n  - checks: [parity]\n    reason: compiled differs\n    match: {match}\n"
    specs(right="optimizer: drift:Drift\nchecks: [parity]\n" + rule.format(match="'compiled step differs from eager'"),
          wrong="optimizer: drift:Drift\nchecks: [parity]\n" + rule.format(match="'frozen storage'"),
          plain="optimizer: drift:Drift\nchecks: [parity]\n" + rule.replace("    match: {match}\n", ""))
    result = run_pytest(pytester, "--optim-spec", "specs", "--optim-device", "cpu", "-rxf")
    result.assert_outcomes(failed=1, xfailed=2)
    out = result.stdout.str()
    assert re.search(r"FAILED specs/wrong\.yaml::drift-default-cpu::parity", out), out
    assert re.search(r"drift-default-cpu: it failed, but not as its xfail rule in \S*wrong\.yaml expects \(match: "
                     r"'frozen storage'; reason: compiled differs\); it failed so:\n.*compiled step differs from eager", out), out


@pytest.mark.parametrize("rule, said", [
    ("xfail: [{checks: [parity], reason: r, match: '(unclosed'}]", r"xfail\[0\]\.match.*not a regular expression"),
    ("skip: [{checks: [parity], reason: r, match: x}]", r"skip\[0\]\.match"),
])
def test_a_bad_match_is_the_specs_error_at_its_key(tmp_path, rule, said):
    from pytest_optimtest.spec import SpecError, load_spec

    path = tmp_path / "s.yaml"
    path.write_text(f"optimizer: torch.optim.SGD\nkwargs: {{lr: 0.1}}\n{rule}\n")
    with pytest.raises(SpecError) as error:
        load_spec(path)
    assert re.search(said, str(error.value)), str(error.value)
