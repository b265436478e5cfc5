"""Metamorphic properties: green on torch.optim, and each planted fault caught by its property."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import cases_from
from warm import run_pytest

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.spec import SpecError

PROPERTIES = ("elementwise", "maximize", "dtypes", "determinism", "zero_lr")


def fuzz_case(tmp_path, text):
    (fuzz,) = [c for c in cases_from(tmp_path, text) if "-fuzz-" in c.id]
    return fuzz


@pytest.mark.parametrize("optimizer", ["torch.optim.SGD", "torch.optim.Adam", "torch.optim.RMSprop"])
def test_every_property_holds_for_torch_optim(tmp_path, ci_profile, optimizer):
    fuzz = fuzz_case(tmp_path, f"""
optimizer: {optimizer}
kwargs: {{lr: 0.01}}
cases:
  - name: default
  - name: foreach_maximize
    kwargs: {{foreach: true, maximize: true}}
fuzz:
""" + "".join(f"  {p}: {{examples: {{ci: 8}}}}\n" for p in PROPERTIES))
    assert fuzz.checks == tuple(f"fuzz_{p}" for p in PROPERTIES)
    for check in fuzz.checks:
        summary = CHECKS[check].run(fuzz, RunCache())
        assert summary.startswith("8 examples (profile ci") and " 0 moved" not in summary, (check, summary)


FAULTS = {  # planted optimizer -> (property, unused, cases, what the failure must say)
    "SkipZeroDimSGD": ("elementwise", "", "", "*elementwise: params[[]0[]], 0-d, did not move while the same value as a one-element param did*"),
    "ReshapeSGD": ("elementwise", "", "", "*elementwise: params[[]0[]], a * view of shape *, did not move while a contiguous 1-d copy of it did*"),
    "UpcastMomentumSGD": ("dtypes", "", "", "*dtypes: params[[]0[]]*torch.bfloat16: state[[]'momentum_buffer'[]] is torch.float32: the state is silently upcast*"),
    "PositionalSGD": ("elementwise", "", "", "*elementwise: permuting the params of the group (order [[]1, 0[]]) did not permute the updates*"),
    "ForeachMaximizeSGD": ("maximize", "", "cases: [{name: loop}, {name: foreach, kwargs: {foreach: true}}]",
                           "*maximize: stepping with maximize=True on grad g differs from maximize=False on -g*"),
    "UnseededNoiseSGD": ("determinism", "", "", "*determinism: two runs from the same seed * are not bitwise equal*"),
    "LrFreeDecaySGD": ("zero_lr", "", "", "*zero_lr: params[[]0[]]* moved at lr=0*"),
    "ViewUpdateSGD": ("determinism", "", "", "  at *planted.py:* in _update (the optimizer's doing)"),
}


def test_each_planted_fault_is_caught_by_its_property_with_a_shrunk_reproducer(pytester):
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    for name, (prop, _, cases, _) in FAULTS.items():
        pytester.makefile(".yaml", **{name.lower(): f"""
optimizer: planted:{name}
kwargs: {{lr: 0.1}}
{cases}
fuzz: {{{prop}: {{examples: {{ci: 20}}}}}}
checks: [fuzz_{prop}]
"""})
    result = run_pytest(pytester, "--optim-spec", ".", "--hypothesis-profile", "ci", "-p", "no:randomly")
    result.assert_outcomes(failed=len(FAULTS))
    out = result.stdout.str()
    for name, (prop, _, _, expected) in FAULTS.items():  # each call matches from the top of the output
        result.stdout.fnmatch_lines([f"{name.lower()}-fuzz-cpu fuzz_{prop}: falsified*minimal example:",
                                     "    case=load_case(*), params=Params(*)", expected])
    assert "Traceback" not in out


def test_the_shrunk_example_is_minimal(pytester):
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    pytester.makefile(".yaml", skip0="optimizer: planted:SkipZeroDimSGD\nkwargs: {lr: 0.1}\nfuzz: {elementwise: {examples: {ci: 20}}}\n"
                      "checks: [fuzz_elementwise]\n")
    result = run_pytest(pytester, "--optim-spec", "skip0.yaml", "--hypothesis-profile", "ci", "-p", "no:randomly")
    result.stdout.fnmatch_lines(["    case=load_case('skip0.yaml', 'skipzerodimsgd-default-cpu'), params=Params(Param(()))"])


def test_maximize_needs_the_constructor_to_take_it(tmp_path):
    with pytest.raises(SpecError, match=r"spec.yaml:3: \[fuzz.maximize\] the maximize property sets 'maximize'"):
        cases_from(tmp_path, "optimizer: planted:PlainSGD\nfuzz:\n  maximize: {}\n")  # (LBFGS took none until torch 2.14)


def test_min_dims_above_max_dims_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match=r"min_dims 3 is above max_dims 2"):
        cases_from(tmp_path, "optimizer: torch.optim.SGD\nfuzz:\n  elementwise: {min_dims: 3, max_dims: 2}\n")


def test_an_optimizer_compiling_its_own_step_is_fuzzed_past_dynamos_recompile_limit(tmp_path, ci_profile):
    # each example's new shapes recompile the optimizer's own fullgraph function: past the limit of 8 it
    # raised "torch's doing" in every eager property of adv_optm's compiled_optimizer cases
    fuzz = fuzz_case(tmp_path, "optimizer: planted:SelfCompilingStaticSGD\nkwargs: {lr: 0.01}\n"
                               "fuzz:\n  determinism: {examples: {ci: 20}, max_params: 4}\n")
    assert CHECKS["fuzz_determinism"].run(fuzz, RunCache()).startswith("20 examples")


def test_allow_views_false_draws_contiguous_params_only(tmp_path, ci_profile):
    """luminamoon's LuminaV refuses non-contiguous params on purpose: fuzz drew a strided view and was red
    "two runs from one seed differ" with its ValueError. init now writes `allow_views: false` for it."""
    spec = "optimizer: planted:ContiguousOnlySGD\nkwargs: {lr: 0.1}\nfuzz:\n  determinism: {examples: {ci: 20}%s}\n"
    assert CHECKS["fuzz_determinism"].run(fuzz_case(tmp_path, spec % ", allow_views: false"), RunCache()).startswith("20 examples")
    with pytest.raises(AssertionError, match="requires contiguous parameters"):
        CHECKS["fuzz_determinism"].run(fuzz_case(tmp_path, spec % ""), RunCache())


def test_init_proposes_the_properties_the_constructor_allows(tmp_path, ci_profile):
    from pytest_optimtest.__main__ import main as cli

    adam, plain = tmp_path / "adam.yaml", tmp_path / "plain.yaml"
    assert cli(["init", "torch.optim.Adam", "-o", str(adam)]) == 0
    assert cli(["init", "planted:PlainSGD", "-o", str(plain)]) == 0
    text = adam.read_text()
    for prop in ("determinism", "dtypes", "maximize", "zero_lr"):
        assert f"\n  {prop}: {{examples: " in text
    assert "\n  # elementwise: {examples: " in text  # init cannot know: proposed, commented out
    assert "maximize" not in plain.read_text().split("fuzz:")[1].split("laws:")[0]  # PlainSGD takes no maximize
    (fuzz,) = [c for c in cases_from(tmp_path, text) if c.id.endswith("-fuzz-cpu")]
    for check in fuzz.checks:  # what init proposes holds for the optimizer it was written for
        CHECKS[check].run(fuzz, RunCache())
