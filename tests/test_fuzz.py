"""The Hypothesis properties: fuzz sections, profiles, shrinking to a reproducer, planted faults."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import cases_from
from warm import run_pytest
from hypothesis import settings

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.checks.hypothesis.fuzzed import nesting_problem
from pytest_optimtest.harness.hook_recorder import HookEvent
from pytest_optimtest.harness.hypothesis_runs import active_profile, property_settings
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.spec import SpecError


def fuzz_case(tmp_path, text):
    (fuzz,) = [c for c in cases_from(tmp_path, text) if "-fuzz-" in c.id]
    return fuzz


def test_profiles_are_registered_and_spec_counts_apply_per_profile(ci_profile):
    assert active_profile() == "ci"
    name, chosen = property_settings({"dev": 50})
    assert (name, chosen.max_examples, chosen.derandomize, chosen.database) == ("ci", 10, True, None)
    assert property_settings({"ci": 3})[1].max_examples == 3
    assert settings.get_profile("optimtest-nightly").max_examples == 1000


USER_TEST = """
from hypothesis import given, strategies as st

SEEN = []

@given(st.integers())
def test_users_own(n):
    SEEN.append(n)

def test_count():
    assert SEEN
    print("EXAMPLES", len(SEEN))
"""


@pytest.mark.parametrize("ci", [None, "true"])
def test_the_users_given_tests_keep_their_example_count_with_specs(pytester, monkeypatch, ci):
    """Hypothesis's own `ci` profile (100 examples) or its default (100) stay in force for the
    user's tests when the session also runs specs with properties (which use optimtest-ci/dev)."""
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
        monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    pytester.makepyfile(test_user=USER_TEST)
    pytester.makefile(".yaml", sgd="optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [fuzz_zero_lr]\n"
                                   "fuzz: {zero_lr: {examples: {ci: 2, dev: 2}}}\n")
    counts = []
    for args in ([], ["--optim-spec", "sgd.yaml"]):
        result = run_pytest(pytester, "test_user.py", *args, "-s", "-p", "no:randomly", "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str()[-2000:]
        counts.append(re.search(r"EXAMPLES \d+", result.stdout.str()).group(0))
        if args:
            result.assert_outcomes(passed=3)
    assert counts[0] == counts[1] == "EXAMPLES 100", counts


def test_fuzz_section_makes_one_case_per_device_drawing_plain_cases(tmp_path):
    fuzz = fuzz_case(tmp_path, """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
closure: [false, true]
fuzz:
  parity: {examples: 5}
  in_backward: {examples: {ci: 2, dev: 4}}
xfail:
  - {cases: "sgd-momentum-*", checks: [parity], reason: "planted"}
""")
    assert fuzz.id == "sgd-fuzz-cpu" and fuzz.checks == ("fuzz_parity", "fuzz_in_backward")
    assert [c.id for c in fuzz.drawable("parity")] == ["sgd-default-cpu"]
    assert [c.id for c in fuzz.drawable("in_backward")] == ["sgd-default-cpu", "sgd-momentum-cpu"]
    assert fuzz.settings["fuzz_in_backward"].examples == {"ci": 2, "dev": 4}


def test_a_fuzz_item_with_no_case_to_draw_is_still_its_optimizers(tmp_path):
    fuzz = fuzz_case(tmp_path, """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
dtypes: [bfloat16]
fuzz: {determinism: {examples: 2}}
""")
    assert fuzz.cases == () and fuzz.optimizer == "torch.optim.SGD"  # its report row is SGD's, not the item's id


@pytest.mark.parametrize("section, key, says", [
    ("{parity: {exampels: 3}}", "fuzz.parity.exampels", "did you mean 'examples'"),
    ("{parity: {examples: 0}}", "fuzz.parity.examples", "must be between 1 and 1000000"),
    ("{parity: {max_dims: -1}}", "fuzz.parity.max_dims", "greater than or equal to 0"),
])
def test_bad_fuzz_section_names_line_and_key(tmp_path, section, key, says):
    with pytest.raises(SpecError) as info:
        cases_from(tmp_path, f"optimizer: torch.optim.SGD\nkwargs: {{lr: 0.1}}\nfuzz: {section}\n")
    assert "spec.yaml:3" in str(info.value) and key in str(info.value) and says in str(info.value)


def test_parity_property_passes_on_adam_with_dynamic_shapes(tmp_path, ci_profile):
    fuzz = fuzz_case(tmp_path, """
optimizer: torch.optim.Adam
kwargs: {lr: 0.01}
cases:
  - name: default
  - name: amsgrad
    kwargs: {amsgrad: true, weight_decay: 0.1}
fuzz: {parity: {examples: {ci: 6}}}
""")
    summary = CHECKS["fuzz_parity"].run(fuzz, RunCache())
    assert summary.startswith("6 examples (profile ci") and "dynamic=True" in summary


def test_a_zero_dim_fault_is_found_by_the_ci_profile_and_shrunk_to_a_reproducer(pytester):
    # The planted optimizer reads p.shape[0]; the ci profile must find a 0-d param and shrink to it.
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    pytester.makefile(".yaml", firstdim="""
optimizer: planted:FirstDimSGD
kwargs: {lr: 0.1}
fuzz: {parity: {examples: {ci: 10}}}
checks: [fuzz_parity]
""")
    result = run_pytest(pytester, "--optim-spec", "firstdim.yaml", "--hypothesis-profile", "ci")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*falsified (hypothesis profile 'ci'*minimal example:",
        "    case=load_case('firstdim.yaml', 'firstdimsgd-default-cpu'), params=Params(Param(()))",
        "*IndexError*",
        "rerun: pytest --optim-spec *firstdim.yaml -k \"firstdimsgd-fuzz-cpu and fuzz_parity\" --hypothesis-profile ci",
        "    @example(case=load_case('firstdim.yaml', 'firstdimsgd-default-cpu'), params=Params(Param(())))",
    ])


def test_an_error_every_property_draws_into_is_one_red_and_blocks_the_others(pytester):
    """RelativisticAdam's `.view` raised over a transposed param in fuzz_determinism and in fuzz_zero_lr:
    one root cause, two reds; the JSON report's reason names the error and whose doing it is."""
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    pytester.makefile(".yaml", flatview="""
optimizer: planted:FlatViewSGD
kwargs: {lr: 0.1}
fuzz: {determinism: {examples: {ci: 20}}, zero_lr: {examples: {ci: 20}}}
checks: [fuzz_determinism, fuzz_zero_lr]
""")
    result = run_pytest(pytester, "--optim-spec", "flatview.yaml", "--hypothesis-profile", "ci", "-n", "0",
                                           "-p", "no:randomly", "-rfs", "--optim-report", "r.json")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*blocked by the same error in fuzz_*: RuntimeError: view size is not compatible*"])
    [red] = [r for r in json.loads((pytester.path / "r.json").read_text())["items"] if r["outcome"] == "failed"]
    assert "RuntimeError: view size is not compatible" in red["reason"] and "(the optimizer's doing)" in red["reason"]


def test_in_backward_property_finds_a_shared_step_count(tmp_path, ci_profile):
    # SharedCountSGD decays its step with a count shared by all instances: per-param optimizers break it.
    fuzz = fuzz_case(tmp_path, "optimizer: planted:SharedCountSGD\nkwargs: {lr: 0.1}\nfuzz: {in_backward: {examples: 10}}\n")
    with pytest.raises(AssertionError, match=r"(?s)minimal example:\n    case=load_case\(.*model=MLP\("):
        CHECKS["fuzz_in_backward"].run(fuzz, RunCache())


def test_in_backward_property_passes_on_tied_and_untied_mlps(tmp_path, ci_profile):
    fuzz = fuzz_case(tmp_path, "optimizer: torch.optim.Adam\nkwargs: {lr: 0.01}\nfuzz: {in_backward: {examples: 10}}\n")
    summary = CHECKS["fuzz_in_backward"].run(fuzz, RunCache())
    assert "10 examples" in summary and " 0 tied" not in summary


def test_hook_order_property_on_module_trees(tmp_path, ci_profile):
    path = tmp_path / "trees.yaml"
    path.write_text("kind: hook_order_fuzz\nname: trees\nexamples: {ci: 25}\n")

    (fuzz,) = CHECKS.cases(path)
    assert "25 module trees (profile ci)" in CHECKS["fuzz_hook_order"].run(fuzz, RunCache())


def ev(kind, module, is_bw=None):
    return HookEvent(kind, module, True, kind.endswith("bw") if is_bw is None else is_bw)


def test_nesting_accepts_shared_tensor_orders_and_rejects_broken_nesting():
    forward = [ev("pre_fw", "A"), ev("pre_fw", "A.b"), ev("post_fw", "A.b"), ev("post_fw", "A")]
    # A and A.b share input and output: A.b's pre_bw comes first, A's post_bw first (registration order).
    shared = [ev("pre_bw", "A.b"), ev("pre_bw", "A"), ev("post_bw", "A"), ev("post_bw", "A.b")]
    assert nesting_problem(forward + shared) is None
    crossed = [ev("pre_fw", "A"), ev("pre_fw", "A.b"), ev("post_fw", "A"), ev("post_fw", "A.b")]
    assert "post_fw A while A.b is open" in nesting_problem(crossed)
    apart = [ev("pre_bw", "A"), ev("post_bw", "A"), ev("pre_bw", "A.b"), ev("post_bw", "A.b")]
    assert "does not overlap its parent A" in nesting_problem(forward + apart)
    assert "is_bw" in nesting_problem([ev("pre_fw", "A", is_bw=True), ev("post_fw", "A")])


def test_an_example_that_raises_in_torchs_code_is_called_torchs_doing():
    """A falsifying example whose error comes from torch (inductor's generated code, seen on torch
    2.14 for a 0-size param) names torch, not the optimizer."""
    import torch

    from pytest_optimtest.harness.hypothesis_runs import _raised_at

    def step():  # the optimizer's line, then torch's
        torch.nn.functional.softmax(torch.ones(2), dim=5)

    try:
        step()
    except IndexError as exc:
        said = _raised_at(exc)
    assert "torch/nn/functional.py" in said and "torch's doing (raised in torch's code; the optimizer's last line before it: " in said
    assert "in step" in said


def test_state_held_as_views_of_a_buffer_made_under_no_grad_is_compared_not_raised_on():
    # Adams_ZeRO's state: views of a flat master buffer that requires grad, taken under no_grad;
    # reshaping such a view with grad on raises, in the plugin's code (it did, for fuzz_determinism)
    from types import SimpleNamespace

    from pytest_optimtest.checks.hypothesis.metamorphic import _state_differences
    from pytest_optimtest.spec.schema import Tolerance

    def optimizer_with_view_state(value: float):
        base = torch.zeros(4, requires_grad=True)
        with torch.no_grad():
            view = base[:2]
            base.add_(value)
        param = torch.nn.Parameter(torch.zeros(2))
        return SimpleNamespace(state={param: {"m": view}}), param

    (a, p_a), (b, p_b) = optimizer_with_view_state(1.0), optimizer_with_view_state(2.0)
    problems = _state_differences("params[0]", a, p_a, b, p_b, Tolerance(atol=0.0, rtol=0.0), ("first", "second"))
    assert len(problems) == 1 and "state['m']" in problems[0], problems
