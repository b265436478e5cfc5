"""ModTracker hook order: the recorder, derived orders, readable diffs, and planted faults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import one_case, write_spec
from warm import run_pytest

from pytest_optimtest import record_hook_order
from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness import hook_recorder
from pytest_optimtest.harness.hook_recorder import derive_hook_order
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.models.modtracker import Bar, Checkpointed, Mod, dict_10x10, rand_10x10, randn_2x8
from pytest_optimtest.spec import SpecError

SPECS = Path(__file__).resolve().parent.parent / "specs" / "modtracker"


def run(case):
    return CHECKS["hook_order"].run(case, RunCache())


def test_recorder_returns_the_events_in_order():
    events = record_hook_order(Bar(), rand_10x10)
    assert [(e.kind, e.module, e.in_parents, e.is_bw) for e in events] == [
        ("pre_fw", "Bar", True, False), ("pre_fw", "Bar.foo", True, False),
        ("post_fw", "Bar.foo", True, False), ("post_fw", "Bar", True, False),
        ("pre_bw", "Bar", True, True), ("pre_bw", "Bar.foo", True, True),
        ("post_bw", "Bar", True, True), ("post_bw", "Bar.foo", True, True),
    ]
    assert repr(events[0]) == "HookEvent('pre_fw', 'Bar', in_parents=True, is_bw=False)"
    assert events.after_backward == [(False, frozenset({"Global"}))]


def test_dropping_the_model_needs_a_factory():
    with pytest.raises(TypeError, match="factory"):
        record_hook_order(Bar(), rand_10x10, drop_model_before_backward=True)
    events = record_hook_order(Bar, rand_10x10, drop_model_before_backward=True)
    assert [e.module for e in events[4:]] == [None] * 4


@pytest.mark.parametrize("model, inputs", [(Bar, rand_10x10), (Mod, dict_10x10), (lambda: Checkpointed(3, 8), randn_2x8)],
                         ids=["bar", "nested_dict_list", "no_grad_input"])
def test_derived_order_equals_modtracker(model, inputs):
    observed = [e for e in record_hook_order(model(), inputs, iterations=2) if not e.is_mark]
    assert [e.short() for e in observed] == [e.short() for e in derive_hook_order(model(), inputs, iterations=2)]


def test_shipped_specs_reproduce_pytorchs_tests(pytester):
    for spec in SPECS.glob("*.yaml"):
        shutil.copy(spec, pytester.path / spec.name)
    result = run_pytest(pytester, "--optim-spec", ".", "-v")
    result.assert_outcomes(passed=7)  # the six seed tests and the fuzzed module trees
    result.stdout.fnmatch_lines(["*activation_checkpointing.yaml::activation_checkpointing::hook_order PASSED*"])
    result.stdout.fnmatch_lines(["*fuzzed_module_trees.yaml::fuzzed_module_trees::fuzz_hook_order PASSED*"])


USER_HOOKS = (SPECS / "user_hooks.yaml").read_text()


def test_submodule_called_twice_is_shown_side_by_side(tmp_path):
    text = USER_HOOKS.replace("Bar", "CallsTwice").replace("pytest_optimtest.models.modtracker:CallsTwice", "planted:CallsTwice")
    case = one_case(tmp_path, text)
    with pytest.raises(AssertionError) as info:
        run(case)
    message = str(info.value)
    assert ">>   3  post_fw CallsTwice [P-]" in message  # expected column at the divergence
    assert "≠ pre_fw  CallsTwice.foo [P-]" in message  # observed: the second call
    assert "first divergence at event 3; 8 events expected, 12 observed" in message
    assert "spec.yaml:" in message.splitlines()[0]  # where the written sequence is


def test_user_hook_registered_in_the_wrong_order_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(hook_recorder, "KINDS", ("post_fw", "pre_fw", "pre_bw", "post_bw"))  # pre/post swapped
    with pytest.raises(AssertionError) as info:
        run(one_case(tmp_path, USER_HOOKS))
    message = str(info.value)
    assert ">>   0  pre_fw  Bar [P-]" in message and "≠ post_fw Bar [P-]" in message


def test_derived_expectation_catches_a_wrong_after_backward_state(tmp_path):
    case = one_case(tmp_path, """
kind: hook_order
name: bw
model: pytest_optimtest.models.modtracker:Bar
inputs: pytest_optimtest.models.modtracker:rand_10x10
after_backward: {is_bw: true}
""")
    with pytest.raises(AssertionError, match="after backward 1, tracker.is_bw=False"):
        run(case)


def test_no_sequence_for_this_torch_is_a_skip_that_shows_the_observed_events(tmp_path):
    from pytest_optimtest.checks import NotApplicable

    case = one_case(tmp_path, USER_HOOKS.replace("expected:\n", 'expected:\n  "2.1":\n').replace("  - [", "    - ["))
    with pytest.raises(NotApplicable) as info:
        run(case)
    assert "no expected sequence for this torch version" in str(info.value) and "pre_fw  Bar [P-]" in str(info.value)


def test_update_mode_records_the_running_releases_order_and_keeps_the_others(pytester):
    """One spec keyed by another release (no entry for this one: a skip), one with a single wrong order for
    every release (a red); one update session over both, then one that passes both."""
    from pytest_optimtest.harness.torch_api import torch_version

    wrong = "\n".join(line for line in USER_HOOKS.splitlines() if "post_fw" not in line) + "\n"  # the post_fw events dropped
    texts = {"keyed": wrong.replace("expected:\n", 'expected:\n  "2.1":\n').replace("  - [", "    - ["), "unkeyed": wrong}
    for name, text in texts.items():
        (pytester.path / f"{name}.yaml").write_text(text)
    specs = ("--optim-spec", "keyed.yaml", "--optim-spec", "unkeyed.yaml")
    result = run_pytest(pytester, *specs, "--optim-update-expected")
    result.assert_outcomes(skipped=1, failed=1)  # no entry for this release, and a wrong one
    for name in texts:
        result.stdout.fnmatch_lines([f"optimtest: updated {name}.yaml: expected*{torch_version()}*"])
    result.stdout.fnmatch_lines(["whose doing: torch's ModTracker or the spec's model, by this check's verdict*"])  # no optimizer to blame
    for name, kept in (("keyed", '  "2.1":\n'), ("unkeyed", '  "*":\n')):
        updated = (pytester.path / f"{name}.yaml").read_text()
        assert updated.startswith(texts[name].split("expected:")[0])  # the comments and keys before it as they were
        assert f'"{torch_version()}":\n    - [pre_fw, ' in updated and "post_fw" in updated
        assert kept + "    - [pre_fw, " in updated  # the other releases' order, as it was
    run_pytest(pytester, *specs).assert_outcomes(passed=2)


def test_update_mode_writes_parents_where_the_spec_compares_them(tmp_path):
    from pytest_optimtest.checks import NotApplicable
    from pytest_optimtest.checks.modtracker import hook_order_metrics
    from pytest_optimtest.harness.torch_api import torch_version

    text = (SPECS / "module_hierarchy.yaml").read_text().replace("expected:\n", 'expected:\n  "2.1":\n').replace("\n  - {", "\n    - {")
    case, runs = one_case(tmp_path, text), RunCache()
    with pytest.raises(NotApplicable):
        CHECKS["hook_order"].run(case, runs)
    (update,) = hook_order_metrics(case, runs)["updates"]
    assert update["path"] == ["expected", torch_version()] and update["declared"] is None
    assert update["observed"][0] == {"event": "mark:fw", "module": None, "in_parents": False, "is_bw": False,
                                     "parents": ["Global", "Mod", "Mod.c.0"]}


def test_bad_event_is_a_spec_error_with_its_line(tmp_path):
    path = write_spec(tmp_path, USER_HOOKS.replace("[post_fw, Bar, true, false]", "[post_forward, Bar, true, false]"))
    with pytest.raises(SpecError) as info:
        CHECKS.load_spec(path)
    assert info.value.line == 11 and "expected[3].event" in str(info.value)


def test_unknown_model_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError) as info:
        one_case(tmp_path, USER_HOOKS.replace("models.modtracker:Bar", "models.modtracker:Barr"))
    assert info.value.line == 5 and "model" in str(info.value)


def test_mark_outside_a_recording_is_a_no_op():
    hook_recorder.mark("anything")
    torch.nn.Linear(2, 2)(torch.ones(2))


def test_the_derived_order_follows_whether_this_torch_ends_backward_with_post_bw(monkeypatch):
    from pytest_optimtest.harness import torch_api

    fires_here = torch_api.mod_tracker_ends_backward_with_post_bw()

    def derived(fires: bool) -> list[str]:
        monkeypatch.setattr(torch_api, "mod_tracker_ends_backward_with_post_bw", lambda: fires)
        return [e.short() for e in derive_hook_order(torch.nn.Linear(2, 2), torch.ones(1, 2))]

    # torch 2.11 and later fire post_bw as backward ends for a module whose input needs no grad; 2.6 does not
    assert derived(True)[-1].startswith("post_bw") and not any(e.startswith("post_bw") for e in derived(False))
    # the probe says what this torch's ModTracker does
    assert [e.short() for e in record_hook_order(torch.nn.Linear(2, 2), torch.ones(1, 2))] == derived(fires_here)
