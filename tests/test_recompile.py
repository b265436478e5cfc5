"""Recompile, graph-break and the once-per-optimizer compile checks, on real torch.compile runs."""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from collections import Counter

import pytest
from helpers import cases_from, guard_failures_name_their_line, one_case, torch_before
from ruamel.yaml import YAML

from pytest_optimtest import update
from pytest_optimtest.checks import CHECKS, compile_time
from pytest_optimtest.harness import torch_api
from pytest_optimtest.harness.compiled_run import CompiledStepOnlyError
from pytest_optimtest.harness.containment import CaseTimedOut, deadline
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.torch_api import torch_version
from pytest_optimtest.harness.vacuity import Blocked, Vacuous
from pytest_optimtest.spec.releases import for_release, release_update


def run(check, case):
    return CHECKS[check].run(case, RunCache())


def failure(check, case) -> str:
    with pytest.raises(AssertionError) as info:
        run(check, case)
    return str(info.value)


def spec(optimizer="torch.optim.SGD", kwargs="{lr: 0.1}", extra=""):
    return f"optimizer: {optimizer}\nkwargs: {kwargs}\n{extra}\n"


def test_lr_change_recompiles_once_with_declared_kernels(tmp_path):
    case = one_case(tmp_path, spec(extra=f"""
recompile:
  perturbations:
    - set_lr: 0.02
      kernel_counts: {{"{torch_version()}": {{cpu: 4}}}}
"""))
    assert "set_lr: 1 recompile(s), 4 kernels (as declared)" in run("recompile", case)


def test_wrong_recompile_count_lists_dynamos_reason(tmp_path):
    case = one_case(tmp_path, spec(extra="recompile:\n  perturbations:\n    - {set_lr: 0.02, recompiles: 0}\n"))
    message = failure("recompile", case)
    assert "perturbation 0 (set_lr: 0.02) caused 1 recompiles, expected 0" in message
    assert "param_groups[0]['lr'] == 0.1" in message  # dynamo's failed guard, with the old value


def test_wrong_recompile_kernel_count_names_the_entry(tmp_path):
    case = one_case(tmp_path, spec(extra=f"""
recompile:
  perturbations:
    - set_lr: 0.02
      kernel_counts: {{"{torch_version()}": {{cpu: 99}}}}
"""))
    message = failure("recompile", case)
    assert "generated 4 kernels, expected 99" in message
    assert f"recompile.perturbations[0].kernel_counts['{torch_version()}'].cpu['*']" in message


def test_replacing_a_state_tensor_recompiles_on_its_identity(tmp_path):
    case = one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}", "recompile:\n  perturbations:\n    - replace_state: exp_avg\n"))
    assert "replace_state: 1 recompile(s)" in run("recompile", case)


def test_unknown_state_key_is_reported_with_the_keys_there_are(tmp_path):
    case = one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}", "recompile:\n  perturbations:\n    - replace_state: exp_avgg\n"))
    message = failure("recompile", case)
    assert "perturbation 0 (replace_state: exp_avgg) cannot be made: replace_state: no state tensor 'exp_avgg'" in message
    assert "'exp_avg'" in message and "'exp_avg_sq'" in message


@pytest.mark.parametrize("perturbation", ["clear_state: true", "add_param_group: {lr: 0.05}", "set_group: {maximize: true}"])
def test_other_perturbations_recompile(tmp_path, perturbation):
    case = one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}", f"recompile:\n  perturbations:\n    - {perturbation}\n"))
    assert "1 recompile(s)" in run("recompile", case)


def test_a_perturbation_nothing_guards_is_reported(tmp_path):
    case = one_case(tmp_path, spec("planted:PlainSGD", extra="recompile:\n  perturbations:\n    - clear_state: true\n"))
    assert "caused no recompile, expected 1" in failure("recompile", case)


def test_momentum_buffer_settles_in_the_default_warmup_and_a_declared_one_is_held_to(tmp_path):
    base = spec(kwargs="{lr: 0.1, momentum: 0.9}", extra="recompile:\n  perturbations: [{set_lr: 0.02}]\n")
    summary = run("recompile", one_case(tmp_path, base))
    assert summary.startswith("warm-up 2 compile(s) in 3 steps until settled") and "len(step.__self__.state" in summary
    declared = base.replace("recompile:\n", "recompile:\n  warmup: {steps: 2, compiles: 2}\n")
    assert run("recompile", one_case(tmp_path, declared)).startswith("warm-up 2 compile(s) (recompiled for: ")
    too_strict = base.replace("recompile:\n", "recompile:\n  warmup: {steps: 2, compiles: 1}\n")
    message = failure("recompile", one_case(tmp_path, too_strict))
    assert "warm-up (2 steps) compiled the step 2 times, the spec allows 1" in message and "len(step.__self__.state" in message
    too_short = base.replace("recompile:\n", "recompile:\n  warmup: {steps: 1}\n")
    assert "step 2 recompiled in the steady state" in failure("recompile", one_case(tmp_path, too_short))


def test_planted_float_rewritten_every_step_never_settles(tmp_path):
    message = failure("recompile", one_case(tmp_path, spec("planted:FloatScheduleSGD")))
    assert "the step recompiled on each of 4 warm-up steps and never settled" in message
    assert "['scale']" in message  # dynamo's guard names the key
    assert "planted.py" in message or not guard_failures_name_their_line()  # and a line of ours, where torch gives lines


SCHEDULED = """
optimizer: torch.optim.Adam
kwargs: {{lr: {{tensor: 0.01}}}}
cases: [{{name: tensor_lr, schedulers: true}}]
schedulers:
  OneCycleLR: {{max_lr: 0.02, steps_per_epoch: 1, epochs: 20, cycle_momentum: {cycle}}}
recompile:
  schedulers: {{{declared}}}
"""


def test_scheduler_steps_between_compiled_steps_do_not_recompile(tmp_path):
    case = one_case(tmp_path, SCHEDULED.format(cycle="false", declared=""))
    assert case.id == "adam-tensor_lr-onecyclelr-cpu"
    assert "4 steady steps, 0 recompile(s)" in run("recompile", case)


def test_scheduler_writing_float_betas_recompiles_with_reason(tmp_path):
    """The reported OneCycleLR problem: cycling momentum writes Adam's betas as new floats."""
    message = failure("recompile", one_case(tmp_path, SCHEDULED.format(cycle="true", declared="")))
    assert "step 3 recompiled in the steady state" in message and "param_groups[0]['betas'][0] ==" in message


def test_declared_scheduler_recompiles_must_match_exactly(tmp_path):
    message = failure("recompile", one_case(tmp_path, SCHEDULED.format(cycle="true", declared="OneCycleLR: 1")))
    assert "stepping OneCycleLR between 4 compiled steps caused 4 recompiles, the spec declares 1" in message
    assert message.count("['betas'][0] ==") >= 4  # every recompile's guard failure is listed
    assert "4 recompile(s)" in run("recompile", one_case(tmp_path, SCHEDULED.format(cycle="true", declared="OneCycleLR: 4")))


def test_graph_break_in_step_fails_with_dynamos_reason(tmp_path):
    message = failure("graph_breaks", one_case(tmp_path, spec("planted:ItemClipSGD")))
    assert "1 graph breaks compiling the step, the spec declares 0" in message and "Tensor.item" in message
    assert run("graph_breaks", one_case(tmp_path, spec("planted:ItemClipSGD", extra="graph_breaks: 1"))) == "1 graph breaks"


def test_graph_break_names_the_user_line_and_a_fake_call_type_error_eager_never_met_is_torchs(tmp_path):
    """microsoft/dion's Muon takes its update by `yield from`: the red said 'TypeError when making fake tensor call',
    no line, with a hint to check the eager code (which ran), and called it the optimizer's doing."""
    from pytest_optimtest.harness.diagnosis import yield_from_under_dynamo

    message = failure("graph_breaks", one_case(tmp_path, spec("planted:ItemClipSGD")))
    assert re.search(r"Tensor\.item\b.* \(at \S*planted.py:\d+\)", message), message
    case = one_case(tmp_path, spec("planted_unseen:YieldFromSGD"))
    traced = yield_from_under_dynamo()
    if traced == "kept":  # a torch that keeps the result: no break to judge
        assert run("graph_breaks", case) == "0 graph breaks"
    elif traced.startswith("raises"):  # torch 2.6 and 2.10: dynamo raises tracing it, so the compiled step raises: parity's red, torch's
        kind, _, text = traced.removeprefix("raises: ").partition(": ")
        with pytest.raises(CompiledStepOnlyError, match=rf"only the compiled step raised, at step 1: {re.escape(kind)}:\s*"
                           rf"{re.escape(text)}(.|\n)*the difference is torch.compile's"):
            run("parity", case)
    else:
        message = failure("graph_breaks", case)
        # torch 2.9 breaks at the call of the function it skips inlining, and names that function: both lines are said
        assert re.search(r"TypeError when making fake tensor call \(.*planted_unseen.py:\d+.*\): .*NoneType.*torch's doing", message), message
        assert "Hint: Your code may result in an error" not in message, message


def test_a_skipped_inlining_with_no_reason_takes_the_failure_that_made_dynamo_skip_it():
    """torch 2.9 counts a break "SKIPPED INLINING <code object f ...>: " and nothing more; the TypeError that made it
    skip f is counted under inline_call alone."""
    skipped = 'SKIPPED INLINING <code object _update at 0x7f31af65efb0, file "/opt/opt.py", line 12>: '
    failure = "TypeError when making fake tensor call\n  Developer debug context: TypeError <f>: got NoneType"
    cause = torch_api.skipped_inlining_cause(skipped, Counter({skipped: 2, failure: 2}))
    assert cause.startswith("TypeError when making fake tensor call (inlining _update, /opt/opt.py:12, which dynamo then skipped)\n")
    assert torch_api.fake_call_type_error(cause) == "got NoneType"
    logged = [f"Graph break in user code at /opt/base.py:34\nGraph Break Reason: {skipped}\nUser code traceback: ..."]
    assert torch_api.break_site(cause, logged) == "/opt/base.py:34"
    said = skipped + "Tensor.item() consumed"  # one that says why stays as it is, and so does one with no failure to take
    assert torch_api.skipped_inlining_cause(said, Counter({failure: 1})) == said
    assert torch_api.skipped_inlining_cause(skipped, Counter({skipped: 1})) == skipped


def test_graph_breaks_keyed_by_release_and_update_mode_writes_only_the_running_ones(tmp_path):
    version = torch_version()
    keyed = one_case(tmp_path, spec("planted:ItemClipSGD", extra=f'graph_breaks: {{"{version}": 1, "*": 0}}'))
    assert run("graph_breaks", keyed) == "1 graph breaks"
    other = one_case(tmp_path, spec("planted:ItemClipSGD", extra='graph_breaks: {"2.99": 1, "*": 0}'))
    assert "1 graph breaks compiling the step, the spec declares 0" in failure("graph_breaks", other)
    with pytest.raises(Exception, match=r"\[graph_breaks\] counts are keyed by torch releases like '2.13'"):
        one_case(tmp_path, spec(extra='graph_breaks: {"2.x": 1}'))
    # update mode: a spec's one count becomes a mapping with this release apart; a keyed one gets this release's key
    for written, after in (("graph_breaks: 0", {"*": 0, version: 1}), ('graph_breaks: {"2.99": 3}', {"2.99": 3, version: 1})):
        path = tmp_path / "breaks.yaml"
        path.write_text(spec("planted:ItemClipSGD", extra=written))
        case = one_case(tmp_path, path.read_text())
        metrics = CHECKS["graph_breaks"].metrics(case, _ran(case))
        planned = update.plan([{"spec": str(path), "case": case.id, "check": "graph_breaks", "metrics": metrics}])
        update.apply(planned.changes)
        assert YAML(typ="safe").load(path.read_text())["graph_breaks"] == after, path.read_text()
    # what the release observes as written changes nothing
    case = one_case(tmp_path, path.read_text())
    metrics = CHECKS["graph_breaks"].metrics(case, _ran(case))
    assert update.plan([{"spec": str(path), "case": case.id, "check": "graph_breaks", "metrics": metrics}]).changes == []


def test_perturbation_recompiles_keyed_by_release_and_update_mode_writes_only_the_running_ones(tmp_path):
    version = torch_version()
    perturbation = "recompile:\n  perturbations:\n    - {{set_lr: 0.02, recompiles: {}}}\n"
    keyed = one_case(tmp_path, spec(extra=perturbation.format(f'{{"{version}": 1, "*": 0}}')))
    assert "set_lr: 1 recompile(s)" in run("recompile", keyed)
    with pytest.raises(Exception, match=r"\[recompile.perturbations\[0\].recompiles\] counts are keyed by torch releases like '2.13'"):
        one_case(tmp_path, spec(extra=perturbation.format('{"2.x": 1}')))
    # another release's count does not hold here; update mode adds this release's, leaving the others
    path = tmp_path / "recompiles.yaml"
    path.write_text(spec(extra=perturbation.format('{"2.99": 1, "*": 0}')))
    other, runs = one_case(tmp_path, path.read_text()), RunCache()
    with pytest.raises(AssertionError, match="caused 1 recompiles, expected 0"):
        CHECKS["recompile"].run(other, runs)
    metrics = CHECKS["recompile"].metrics(other, runs)
    update.apply(update.plan([{"spec": str(path), "case": other.id, "check": "recompile", "metrics": metrics}]).changes)
    written = YAML(typ="safe").load(path.read_text())["recompile"]["perturbations"][0]["recompiles"]
    assert written == {"2.99": 1, "*": 0, version: 1}


def test_a_release_keyed_count_resolves_and_updates_for_the_running_release_only():
    assert (for_release({"2.11": 2, "*": 0}, "2.11", 5), for_release({"2.11": 2, "*": 0}, "2.13", 5)) == (2, 0)
    assert (for_release({"2.11": 2}, "2.13", None), for_release(3, "2.13", None)) == (None, 3)
    path = ["graph_breaks"]
    # one count for every release: kept while this release agrees, else a mapping with the old count as '*'
    assert release_update(path, 0, 0, "2.13", 0) == {"path": path, "declared": 0, "observed": 0}
    assert release_update(path, 0, 2, "2.13", 0)["observed"] == {"*": 0, "2.13": 2}
    # nothing declared yet (an observed-only perturbation): the first count is every release's
    assert release_update(path, None, 1, "2.13", None)["observed"] == 1
    # keyed: this release's own key, and none where '*' already says what it saw
    assert release_update(path, {"2.11": 2}, 1, "2.13", 0) == {"path": [*path, "2.13"], "declared": None, "observed": 1}
    assert release_update(path, {"2.11": 2, "*": 1}, 1, "2.13", 0)["observed"] is None


def _ran(case):
    runs = RunCache()
    CHECKS["parity"].run(case, runs)
    return runs


def test_torch_optim_step_has_no_graph_break(tmp_path):
    assert run("graph_breaks", one_case(tmp_path, spec("torch.optim.Adam"))) == "0 graph breaks"


def test_nothing_compiled_is_not_a_pass(tmp_path):
    case = one_case(tmp_path, spec("planted:NeverCompiled"))
    assert "not compiled" in failure("recompile", case)
    assert "disable" in failure("graph_breaks", case)  # dynamo says why it did not trace (its wording varies by release)


def test_none_grads_match_eager_step_counters_included(tmp_path):
    assert "6 iterations" in run("none_grads", one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}")))


def test_none_grads_names_the_iteration_that_differs(tmp_path):
    message = failure("none_grads", one_case(tmp_path, spec("planted:CompiledOnlyDrift")))
    assert "after iteration 1 of 6" in message and "param['1.bias']" in message


def test_closure_with_graph_break_matches_eager(tmp_path):
    result = run("closure_graph_break", one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}")))
    assert "2 steps equal" in result and "graph breaks: 0" not in result


def test_state_dict_round_trip_and_recompile_allowance(tmp_path):
    assert "1 recompile(s) of the step after load" in run("state_dict", one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}")))
    strict = one_case(tmp_path, spec("torch.optim.Adam", "{lr: 0.01}", "recompile: {load_state_dict: 0}"))
    message = failure("state_dict", strict)
    assert "caused 1 recompiles of the step, the spec allows 0" in message and "0/0:" in message


def test_state_dict_round_trip_catches_a_compiled_only_difference(tmp_path):
    message = failure("state_dict", one_case(tmp_path, spec("planted:CompiledOnlyDrift")))
    assert "compiled after loading eager's state_dict" in message


def test_params_are_freed_after_a_torch_optim_compile(tmp_path):
    assert run("no_leak", one_case(tmp_path, spec("torch.optim.Adam"))) == "all 4 params freed once dropped"


def test_planted_global_reference_is_named(tmp_path, monkeypatch):
    class NamelessShim:  # what Cython registers as sys.modules['cython.parallel']: no __name__
        pass

    monkeypatch.setitem(sys.modules, "nameless.shim", NamelessShim())
    message = failure("no_leak", one_case(tmp_path, spec("planted:GlobalRefSGD")))
    assert "leak: 4 of 4 params outlive" in message and "the global planted.KEPT_PARAMS" in message


def test_params_dynamos_own_globals_hold_are_named_torchs_leak(tmp_path):
    # the holder is found up the referrer chain, and dynamo's own globals are named as torch's
    case = one_case(tmp_path, spec("planted:ProjectingSGD"))
    try:
        summary = run("no_leak", case)
    except AssertionError as red:
        message = str(red)
    else:
        if not torch_before("2.13"):
            raise AssertionError(f"no leak found ({summary}): torch 2.13 and later keep the params in a global of dynamo's")
        pytest.skip(f"torch {torch_version()}'s dynamo keeps no global that holds the compiled step's params: nothing to name")
    assert "held by: the global planted.__compiled_fn_" in message and "torch's doing" in message


def test_a_leak_that_only_a_dynamo_reset_frees_is_named_as_torchs(tmp_path, monkeypatch):
    # heavyball's and pytorch-optimizer's MADGRAD params are held out of gc's sight until torch._dynamo.reset()
    # (specs/ecosystem); simulated: a holder past the search's depth that the reset clears
    import planted

    from pytest_optimtest.harness import torch_api

    case = one_case(tmp_path, spec("planted:DeeplyKeptSGD"))
    try:
        assert "frees them" not in failure("no_leak", case)  # not cleared by the reset: no claim about torch
        reset = torch_api.reset_compile_state
        monkeypatch.setattr(torch_api, "reset_compile_state", lambda: (reset(), planted.DEEP_KEPT.clear()))
        message = failure("no_leak", case)
        assert "leak: 4 of 4 params" in message and "torch._dynamo.reset() frees them, torch's doing" in message
    finally:
        planted.DEEP_KEPT.clear()


def test_compile_time_is_reported_and_fails_only_past_the_budget(tmp_path):
    assert "(no budget set)" in run("compile_time", one_case(tmp_path, spec("planted:PlainSGD")))
    message = failure("compile_time", one_case(tmp_path, spec("planted:PlainSGD", extra="compile_budget_s: 0.000001")))
    assert "over the budget of 1e-06s" in message and "100 tensors" in message
    # foreach is what the smoke test times, except where the case is fused (torch.optim refuses both);
    # torch runs a fused step eagerly under torch.compile (2.13 CPU, 2.11 CUDA): nothing compiled, nothing
    # timed, so vacuous (in a session the case's ladder blocks it first: its own step captures no graph either)
    with pytest.raises(Vacuous) as fused:
        run("compile_time", one_case(tmp_path, spec(kwargs="{lr: 0.1, fused: true}")))
    assert "captured no graph of the step over 100 tensors" in str(fused.value) and "together" not in str(fused.value)


def test_a_compile_past_the_report_wait_is_reported_as_such_not_a_red_timeout(tmp_path, monkeypatch):
    """zij's AdaGC (no foreach: a 100-param loop unrolled) was still compiling at the case's 900 s timeout,
    a red "hung" item, where without a budget the check only reports."""
    waits = []

    @contextlib.contextmanager
    def deadline_passed(seconds):  # the alarm as it fires once the compile has run past the wait, without a real signal
        waits.append(seconds)
        yield
        raise CaseTimedOut("timed out", seconds)

    monkeypatch.setattr(compile_time, "deadline", deadline_passed)
    verdict = run("compile_time", one_case(tmp_path, spec("planted:PlainSGD")))
    assert "still compiling after 300s, stopped (no budget set: reported, not judged" in verdict, verdict
    assert waits == [300.0]
    with pytest.raises(AssertionError, match=r"still compiling after 300s, stopped: over the budget of 60s"):
        run("compile_time", one_case(tmp_path, spec("planted:PlainSGD", extra="compile_budget_s: 60")))


def test_the_cases_own_timeout_firing_inside_compile_time_is_that_timeout_not_a_report(tmp_path, monkeypatch):
    @contextlib.contextmanager
    def outer_fired(seconds):  # the case's 120 s deadline, nearer than the check's wait, fires in the compile
        yield
        raise CaseTimedOut("timed out after 120s", 120.0)

    monkeypatch.setattr(compile_time, "deadline", outer_fired)
    with pytest.raises(CaseTimedOut, match="after 120s"):
        run("compile_time", one_case(tmp_path, spec("planted:PlainSGD")))


def test_a_nested_deadline_never_extends_the_outer_one():
    start = time.monotonic()
    with pytest.raises(CaseTimedOut) as fired, deadline(0.2), deadline(30):  # compile_time's wait inside a case's timeout
        while time.monotonic() - start < 10:
            time.sleep(0.01)
    assert fired.value.seconds == 0.2 and time.monotonic() - start < 5
    with deadline(30), deadline(0.01):
        pass
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # nothing left armed


def test_once_per_optimizer_checks_go_to_the_first_case_only(tmp_path):
    cases = cases_from(tmp_path, """
optimizer: torch.optim.SGD
devices: [cpu, cuda]
grid: {foreach: [false, true]}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
  - name: tensor_lr
    kwargs: {lr: {tensor: 0.01}}
    schedulers: true
schedulers: {StepLR: {step_size: 1}}
closure: [false, true]
""")
    by_id = {c.id: c.checks for c in cases}
    assert "none_grads" in by_id["sgd-default-cpu"] and "none_grads" in by_id["sgd-default-cuda"]
    assert all("none_grads" not in checks for cid, checks in by_id.items() if cid not in ("sgd-default-cpu", "sgd-default-cuda"))
    assert "cudagraphs" in by_id["sgd-momentum-foreach-cuda"] and "cudagraphs" not in by_id["sgd-momentum-cpu"]
    assert "recompile" in by_id["sgd-tensor_lr-steplr-cpu"] and "graph_breaks" not in by_id["sgd-tensor_lr-steplr-cpu"]
    assert by_id["sgd-momentum-closure-cpu"] == ("parity",)


def test_perturbation_needs_exactly_one_action(tmp_path):
    from helpers import write_spec

    from pytest_optimtest.spec import SpecError

    path = write_spec(tmp_path, spec(extra="recompile:\n  perturbations:\n    - {set_lr: 0.1, clear_state: true}\n"))
    with pytest.raises(SpecError) as info:
        CHECKS.load_spec(path)
    assert info.value.line == 5 and "exactly one of" in str(info.value)


def test_params_freed_only_by_the_cycle_collector_are_reported_not_failed(tmp_path):
    # dynamo lifts a third-party optimizer's params into the GraphModule, whose graph/node cycle
    # holds them until gc runs: not a leak
    summary = run("no_leak", one_case(tmp_path, spec("planted:PlainSGD")))
    if summary == "all 4 params freed once dropped" and torch_before("2.13"):
        pytest.skip(f"torch {torch_version()}'s GraphModule holds the params in no cycle: the cycle collector frees none")
    assert summary.startswith("all 4 params freed once dropped; 4 of them only by gc.collect()"), summary


def test_a_step_that_never_calls_its_closure_is_named(tmp_path):
    message = failure("closure_graph_break", one_case(tmp_path, spec("planted:IgnoresClosureSGD")))
    assert "planted:IgnoresClosureSGD.step(closure) never called the closure in 2 eager steps" in message


def test_an_undeclared_perturbation_is_observed_not_assumed(tmp_path):
    # PlainSGD keeps no state: clearing it recompiles nothing, and nothing was declared
    summary = run("recompile", one_case(tmp_path, spec("planted:PlainSGD")))
    assert "clear_state: 0 recompile(s) (observed, not declared: --optim-update-expected writes it)" in summary
    declared = one_case(tmp_path, spec("planted:PlainSGD", extra="recompile:\n  perturbations:\n    - clear_state: true\n"))
    assert "perturbation 0 (clear_state: True) caused no recompile, expected 1" in failure("recompile", declared)


def test_lazily_created_state_settles_in_the_default_warmup(tmp_path):
    summary = run("recompile", one_case(tmp_path, spec("planted:LazyStateSGD")))
    assert summary.startswith("warm-up 2 compile(s) in 3 steps until settled (recompiled for: "), summary


def test_a_step_that_never_settles_fails_with_dynamos_reasons(tmp_path):
    message = failure("recompile", one_case(tmp_path, spec("planted:KeepsRecompilingSGD")))
    assert "the step recompiled on each of 4 warm-up steps and never settled" in message, message
    assert "history" in message


def test_recompiles_after_a_state_dict_load_of_a_step_that_never_settles_are_not_a_second_red(tmp_path):
    """zij's AdaGC keeps an int `step` in its groups: the recompile check's red was state_dict's too ("loading
    a state_dict caused 2 recompiles"), though the step recompiles as often without any load."""
    runs = RunCache()
    with pytest.raises(Blocked, match=r"blocked by recompile: the compiled step recompiles on every warm-up step without any load"):
        CHECKS["state_dict"].run(one_case(tmp_path, spec("planted:PowStepSGD")), runs)


def test_the_perturbations_compile_only_for_a_selected_recompile_check(tmp_path):
    case = one_case(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nrecompile:\n  perturbations:\n    - set_lr: 0.02\n")
    runs = RunCache()
    runs.perturbed = set()
    assert "equal" in CHECKS["parity"].run(case, runs)
    run = runs.peek("compiled", case)
    assert not run.perturbed and run.perturbations == []
    with pytest.raises(RuntimeError, match="skipped the perturbations"):
        CHECKS["recompile"].run(case, runs)
    runs = RunCache()
    CHECKS["recompile"].run(case, runs)
    assert runs.peek("compiled", case).perturbations[0].step.recompiles


def test_a_perturbation_the_step_cannot_take_is_the_recompile_checks_alone(tmp_path):
    """COCOB makes its state in __init__: after the default clear_state its compiled step raises. That
    run's steps before the perturbation stand (parity passes over them); the recompile check says the
    observe-only perturbation was not observed, and fails where the spec declared it, naming where."""
    runs = RunCache()
    case = one_case(tmp_path, spec("planted_run_model:InitStateSGD"))
    assert CHECKS["parity"].run(case, runs)
    said = str(CHECKS["recompile"].run(case, runs))
    assert "not observed: perturbation 0 (clear_state: True), or the compiled step after it, raised KeyError: 'origin' at " in said
    assert "planted_run_model.py" in said and "(the optimizer's code)" in said
    declared = one_case(tmp_path, spec("planted_run_model:InitStateSGD",
                                       extra="recompile:\n  perturbations:\n    - {clear_state: true, recompiles: 1}\n"))
    runs = RunCache()
    assert CHECKS["parity"].run(declared, runs)
    with pytest.raises(AssertionError, match=r"perturbation 0 \(clear_state: True\), or the compiled step after it, raised "
                                             r"KeyError: 'origin' at .*planted_run_model.py:\d+ in _update"):
        CHECKS["recompile"].run(declared, runs)
