"""Checks on real torch.compile runs: passing cases and planted faults."""

from __future__ import annotations

import re
import types

import pytest
import torch
from helpers import failure_of, one_case, run_check

from pytest_optimtest.checks import CHECKS, NotApplicable, Vacuous
from pytest_optimtest.harness.compiled_run import run_compiled
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.snapshot import unsaved_generators
from pytest_optimtest.harness.torch_api import torch_version

SGD = """
optimizer: {optimizer}
kwargs: {kwargs}
{extra}
"""


def case_for(tmp_path, optimizer="torch.optim.SGD", kwargs="{lr: 0.1}", extra=""):
    return one_case(tmp_path, SGD.format(optimizer=optimizer, kwargs=kwargs, extra=extra))


def run(check, case):
    return CHECKS[check].run(case, RunCache())


def test_sgd_parity_and_kernel_count_pass(tmp_path):
    case = case_for(tmp_path, extra=f'kernel_counts: {{"{torch_version()}": {{cpu: 4}}}}')
    runs = RunCache()
    assert "params" in CHECKS["parity"].run(case, runs)
    assert CHECKS["kernel_count"].run(case, runs) == "4 kernels"
    assert runs.cases_run == 1  # one compiled run fed both checks


def test_drift_only_when_compiled_is_caught(tmp_path):
    case = case_for(tmp_path, optimizer="planted:CompiledOnlyDrift")
    with pytest.raises(AssertionError) as info:
        run("parity", case)
    message = str(info.value)
    assert "param['1.bias']" in message and "max abs diff 0.006" in message  # 0.001 a step, 6 steps and "max rel diff" in message


def test_wrong_expected_kernel_count_names_file_and_line(tmp_path):
    case = case_for(tmp_path, extra=f'kernel_counts:\n  "{torch_version()}":\n    cpu: 5')
    with pytest.raises(AssertionError) as info:
        run("kernel_count", case)
    message = str(info.value)
    assert "expected 5 generated kernels, observed 4" in message
    assert f"spec.yaml:5 kernel_counts['{torch_version()}'].cpu['*'] to 4" in message


def test_missing_kernel_expectation_is_not_a_pass(tmp_path):
    with pytest.raises(NotApplicable, match=r"no expected kernel count .* observed 4"):
        run("kernel_count", case_for(tmp_path))


def test_dropped_attribute_write_is_caught(tmp_path):
    with pytest.raises(AssertionError, match=r"optimizer attribute\['calls'\]: compiled 0 != eager 6"):
        run("parity", case_for(tmp_path, optimizer="planted:EagerOnlyCounter"))


def test_step_that_never_compiles_is_reported_not_compiled(tmp_path):
    with pytest.raises(AssertionError, match="not compiled: torch.compile captured no graph") as info:
        run("parity", case_for(tmp_path, optimizer="planted:NeverCompiled", extra="closure: [true]"))
    breaks = str(info.value).split("graph breaks: ")[1]
    assert "disable" in breaks  # the step's own (2.13: "`torch.compiler.disable()`d function"; 2.6: "torch._dynamo.disable()")
    assert "planted.py:" in breaks and "builder.py" not in breaks, breaks  # at the step's definition, not our call of it
    assert "zero_grad" not in breaks and "backward" not in breaks  # the plugin's closure's: not the step's


def test_a_closure_cases_graph_breaks_are_the_steps_own(tmp_path):
    run = run_compiled(case_for(tmp_path, optimizer="planted:PrintingSGD", extra="closure: [true]"))
    assert run.closure.graphs and run.step_graph_count
    # print's alone (its wording is dynamo's, and differs by release); not the closure's zero_grad, backward nor call
    [only] = run.break_lines()
    assert "print" in only and "planted.py:74)" in only, only


def test_a_closure_frame_dynamo_gives_up_on_is_not_the_steps(tmp_path):
    run = run_compiled(case_for(tmp_path, extra="closure: [true]\nmodel: planted:loop_item_model"))
    assert run.closure.frames_given_up  # the model's forward: a graph break in its loop
    assert not run.frames_given_up and not run.graph_breaks, run.break_lines()  # SGD's step compiles whole


def test_params_that_do_not_move_make_a_vacuous_comparison(tmp_path):
    with pytest.raises(Vacuous, match="vacuous comparison: .* moved at most 0 tolerances"):
        run("parity", case_for(tmp_path, kwargs="{lr: 0.0}"))


def test_param_group_entries_are_compared(tmp_path):
    case = case_for(tmp_path, kwargs="{lr: {tensor: 0.1}}", extra="schedulers: {StepLR: {step_size: 1, gamma: 0.5}}\ncases: [{name: t, schedulers: true}]")
    assert case.scheduler == "StepLR"
    assert "params" in run("parity", case)


def test_random_optimizer_matches_with_fallback_random(tmp_path):
    case = case_for(tmp_path, optimizer="planted:NoisySGD", extra="fallback_random: true")
    if tuple(int(n) for n in torch_version().split(".")) < (2, 13):
        # torch 2.11 (CPU and CUDA; 2.12 not run): fallback_random leaves the compiled noise different,
        # aot_eager matches eager, so the difference is inductor's and the plugin says so
        with pytest.raises(AssertionError, match=r"torch's doing \(inductor\): compiled with aot_eager"):
            run("parity", case)
        return
    assert "params" in run("parity", case)


def test_closure_variant_matches(tmp_path):
    case = case_for(tmp_path, kwargs="{lr: 0.01}", extra="closure: [true]")  # lr 0.1 diverges in 6 closure steps
    # a closure-only spec's one case takes the once-per-optimizer checks and laws too (test_expand.py)
    assert case.id == "sgd-default-closure-cpu" and case.checks[0] == "parity" and "law_closure_loss" in case.checks
    assert "params" in run("parity", case)


def test_the_capturable_key_dynamo_adds_to_groups_is_named_as_torchs_not_failed(tmp_path):
    case = one_case(tmp_path, "optimizer: planted:GroupStepSGD\nkwargs: {lr: 0.1}\n")
    summary = CHECKS["parity"].run(case, RunCache())
    if "capturable" not in summary and tuple(int(n) for n in torch_version().split(".")) >= (2, 15):
        pytest.skip("torch 2.15's dynamo adds no capturable key to the groups of this step (it passes plainly)")
    assert "torch's dynamo added param_groups[0]['capturable'] = True" in summary, summary


def test_a_subclass_calling_super_step_compiles_fullgraph_and_matches(tmp_path):
    import torch

    wrapped = vars(torch.optim.SGD)["step"]
    case = one_case(tmp_path, "optimizer: planted:ClippedSGD\nkwargs: {lr: 0.1, momentum: 0.9}\n")
    runs = RunCache()
    assert "equal" in CHECKS["parity"].run(case, runs)
    CHECKS["recompile"].run(case, runs)
    assert CHECKS["graph_breaks"].run(case, runs) == "0 graph breaks"
    assert vars(torch.optim.SGD)["step"] is wrapped  # torch.optim is restored after the case


def test_a_vendored_copy_of_torch_optims_step_wrapper_is_unwrapped_like_torchs(tmp_path):
    # AdamZ vendors torch's Optimizer: its copy of the wrapper's two graph breaks were counted as the step's
    case = one_case(tmp_path, "optimizer: planted_unseen:VendoredWrapperSGD\nkwargs: {lr: 0.1}\n")
    runs = RunCache()
    assert "equal" in CHECKS["parity"].run(case, runs)
    assert CHECKS["graph_breaks"].run(case, runs) == "0 graph breaks"


def test_compile_time_times_the_cases_own_path_where_its_foreach_path_raises_compiled(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_unseen:CompiledForeachRaisingSGD\nkwargs: {lr: 0.1}\n")
    verdict = CHECKS["compile_time"].run(case, RunCache())
    assert verdict.startswith("first step over 100 tensors") and "its foreach step raised compiled" in verdict
    assert "TorchRuntimeError" in verdict.evidence["foreach_raised"], verdict.evidence


def test_an_object_in_a_group_is_compared_as_it_was_when_snapshotted_and_numpy_arrays_as_values(tmp_path):
    # RMSGD: a metrics object holding the params and NumPy arrays; its `==` answered elementwise (a bug of ours)
    case = one_case(tmp_path, "optimizer: planted_unseen:MetricsInGroupSGD\nkwargs: {lr: 0.1}\n")
    assert "equal" in CHECKS["parity"].run(case, RunCache())


def test_a_state_dict_round_trip_that_loses_an_object_holding_params_says_it_is_the_optimizers_doing(tmp_path):
    # RMSGD: load_state_dict deep-copies the saved groups, so the loaded metrics hold copies of the other run's params
    case = one_case(tmp_path, "optimizer: planted_unseen:MetricsInGroupSGD\nkwargs: {lr: 0.1}\n")
    message = failure_of("state_dict", case)
    assert "param_groups[0]['metrics']['<_Metrics>']['params'][0]: loaded tensor(" in message, message
    assert "diagnosis: the optimizer's param groups refer to its params (param_groups[0]['metrics']), and " \
           "load_state_dict deep-copies" in message and "the optimizer's doing" in message


def test_a_state_dict_round_trip_that_loses_an_attribute_says_it_is_not_saved(tmp_path):
    from pytest_optimtest.harness.diagnosis import optimizer_attribute_writes_under_dynamo

    case = one_case(tmp_path, "optimizer: planted_unseen:UnsavedCounterSGD\nkwargs: {lr: 0.1}\n")
    writes = optimizer_attribute_writes_under_dynamo()
    if writes.startswith("raises"):  # torch 2.10: its compiled step raises on `self.global_step += 1`: no round trip to judge
        with pytest.raises(Exception, match=re.escape(writes.split(": ", 2)[2])):
            run_check("state_dict", case)
        return
    message = failure_of("state_dict", case)
    assert "eager after loading compiled's state_dict: optimizer attribute['global_step']: loaded 2 != reference 4" in message
    assert "diagnosis: an attribute of the optimizer's own is not in its state_dict" in message, message


def test_a_state_dict_round_trip_that_restarts_an_unsaved_generator_says_so_and_a_saved_one_passes(tmp_path):
    # timm's Adahessian draws its probes from `self.generator`, which its state_dict leaves out
    case = one_case(tmp_path, "optimizer: planted_unseen:UnsavedGeneratorSGD\nkwargs: {lr: 0.1}\n")
    message = failure_of("state_dict", case)
    assert "eager after loading compiled's state_dict: param['0.weight']" in message, message
    assert "diagnosis: the optimizer draws from a torch.Generator of its own (self.generator) whose state its state_dict " \
           "does not hold" in message and "the optimizer's doing" in message
    saved = one_case(tmp_path, "optimizer: planted_unseen:SavedGeneratorSGD\nkwargs: {lr: 0.1}\n")
    assert "round trip both ways equal" in run_check("state_dict", saved)


def test_unsaved_generators_are_those_drawn_from_that_no_saved_byte_tensor_holds():
    optimizer = types.SimpleNamespace(fresh=torch.Generator().manual_seed(1),
                                      per_device={"cpu": torch.Generator().manual_seed(2)}, kept=torch.Generator())
    torch.rand(3, generator=optimizer.per_device["cpu"])
    torch.rand(3, generator=optimizer.kept)
    saved = {"state": {}, "param_groups": [], "extra": [{"rng": optimizer.kept.get_state()}]}
    assert unsaved_generators(optimizer, saved) == ("self.per_device['cpu']",)


def test_a_state_dict_round_trip_that_casts_float32_state_to_bf16_names_torchs_load_cast(tmp_path):
    # atiny keeps float32 state over bf16 params; torch's load_state_dict casts it to the param's dtype
    case = one_case(tmp_path, "optimizer: planted:UpcastMomentumSGD\nkwargs: {lr: 0.1}\ndtypes: [bfloat16]\n")
    message = failure_of("state_dict", case)
    assert "['momentum_buffer']: dtype torch.bfloat16 != reference torch.float32" in message, message
    assert "diagnosis: torch's Optimizer.load_state_dict casts every state tensor but 'step' (integer ones too) to its param's " \
           "dtype" in message


def test_a_law_over_groups_is_not_applicable_to_a_constructor_refusing_them_whatever_it_raises(tmp_path):
    # RMSGD reads `requires_grad` off each entry of its params: AttributeError for a group dict
    case = one_case(tmp_path, "optimizer: planted_unseen:NoGroupsSGD\nkwargs: {lr: 0.1}\n")
    with pytest.raises(NotApplicable, match=r"NoGroupsSGD refuses param groups \(as dicts\): AttributeError"):
        CHECKS["law_group_hyperparameters"].run(case, RunCache())


def test_super_step_keeps_torch_optims_grad_mode_where_grad_is_on(tmp_path):
    # in-backward steps run inside backward hooks with grad enabled: the base step must still
    # run under the grad mode torch.optim's wrapper sets (no_grad), or its in-place ops fail
    case = one_case(tmp_path, "optimizer: planted:ClippedSGD\nkwargs: {lr: 0.1, momentum: 0.9}\n")
    assert "equal" in CHECKS["in_backward"].run(case, RunCache())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cudagraphs run on a CUDA device; this machine has none")
def test_cudagraphs_records_one_graph_per_graph_dynamo_compiled(tmp_path):
    assert "1 graph(s) recorded" in run("cudagraphs", case_for(tmp_path, "torch.optim.Adam", extra="devices: [cuda]"))
    # a step that breaks the graph compiles several graphs, each recorded once: no re-record, no failure
    broken = case_for(tmp_path, "planted:SkipZeroGradSGD", extra="devices: [cuda]")
    assert "one per compiled graph" in run("cudagraphs", broken) and "1 graph(s)" not in run("cudagraphs", broken)


def test_capturable_flipped_by_dynamo_on_cuda_groups_is_torchs_doing():
    # OptimizerVariable._set_capturable sets capturable=True on a CUDA optimizer with no state yet; eager keeps False
    from types import SimpleNamespace

    from pytest_optimtest.harness.compare import dynamo_group_keys, snapshot_differences
    from pytest_optimtest.spec.schema import Tolerance

    def snap(capturable):
        return SimpleNamespace(params={}, state={}, attrs={}, groups=[{"lr": 0.1, "capturable": capturable}])

    eager, compiled = snap(False), snap(True)
    assert snapshot_differences(eager, compiled, Tolerance(atol=1e-5, rtol=1e-6)) == []
    assert dynamo_group_keys(eager, compiled) == ["param_groups[0]['capturable']"]
    assert snapshot_differences(snap(True), snap(False), Tolerance(atol=1e-5, rtol=1e-6))  # the other way round is the optimizer's


def test_a_recompile_limit_hit_in_the_optimizers_own_compile_is_named_its_doing():
    # adv_optm's compiled_optimizer compiles its update itself, fullgraph: past dynamo's limit that raises in torch
    import torch

    from pytest_optimtest.items import failure_text

    torch._dynamo.reset()
    add_one = torch.compile(lambda x: x + 1, fullgraph=True, dynamic=False)
    with pytest.raises(Exception) as info:
        for rank in range(1, 16):  # a new rank recompiles every call
            add_one(torch.ones([1] * rank))
    torch._dynamo.reset()
    text = failure_text(info.value, None)
    assert text.startswith("dynamo's recompile limit (8), hit by a torch.compile in the optimizer's own code at "), text
    assert "test_checks.py" in text and "the optimizer's doing" in text


def test_zero_names_no_hyperparameter_after_the_param_names_its_own_groups_carry():
    """GefenMuon's ZeRO red blamed 'other hyperparameters' on the param names ZeRO's own groups carry."""
    from pytest_optimtest.checks.distributed import _hyperparameters_apart

    unsharded = {"param_groups": [{"params": [0, 1], "lr": 0.1, "param_names": ["a", "b"]}]}
    assert _hyperparameters_apart(unsharded, {"param_groups": [{"params": [0], "lr": 0.1, "param_names": ["a"]}]}) is None
    told = _hyperparameters_apart(unsharded, {"param_groups": [{"params": [0], "lr": 0.2, "param_names": ["a"]}]})
    assert told is not None and "group 0 lr: unsharded 0.1, ZeRO 0.2" in told and "param_names" not in told
