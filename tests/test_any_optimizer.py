"""Optimizers outside torch.optim's contract: no torch.optim.Optimizer base, no zero_grad, a step that
shards badly. What torch's own APIs refuse them is said once, at the spec or as not applicable."""

from __future__ import annotations

import pytest
from helpers import cases_from, needs_fsdp2_on_cpu, one_case

from pytest_optimtest.checks import CHECKS, NotApplicable, Verdict
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.vacuity import Blocked
from pytest_optimtest.spec import SpecError


def test_a_closure_case_steps_an_optimizer_without_zero_grad(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_unseen:PlainObjectSGD\nkwargs: {lr: 0.01}\nclosure: [true]\nchecks: [parity]\n")
    assert isinstance(CHECKS["parity"].run(case, RunCache()), Verdict)


def test_torch_schedulers_over_an_optimizer_that_is_not_a_torch_optimizer_are_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match=r"spec.yaml:6: \[schedulers.StepLR\] torch's StepLR takes a torch.optim.Optimizer "
                                        r"and PlainObjectSGD is not one \(its bases: none\)"):
        cases_from(tmp_path, "optimizer: planted_unseen:PlainObjectSGD\nkwargs: {lr: 0.01}\nclosure: [true]\n"
                             "cases: [{name: default, schedulers: true}]\nschedulers:\n  StepLR: {step_size: 1}\n")


def test_dcp_checkpoint_is_not_applicable_to_an_optimizer_that_is_not_a_torch_optimizer(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_unseen:PlainObjectSGD\nkwargs: {lr: 0.01}\nchecks: [checkpoint]\n"
                              "closure: [true]\n")
    with pytest.raises(NotApplicable, match="get_optimizer_state_dict takes a torch.optim.Optimizer, and PlainObjectSGD is not one"):
        CHECKS["checkpoint"].run(case, RunCache())


def test_a_state_dict_round_trip_is_not_applicable_to_an_optimizer_without_one(tmp_path):
    """psgd's Affine and LRA: 'an error inside pytest-optimtest (a bug of ours)', AttributeError 'state_dict'."""
    case = one_case(tmp_path, "optimizer: planted_unseen:PlainObjectSGD\nkwargs: {lr: 0.01}\nchecks: [state_dict]\n"
                              "closure: [true]\n")
    with pytest.raises(NotApplicable, match="PlainObjectSGD has no state_dict or load_state_dict .*: a checkpoint can neither"):
        CHECKS["state_dict"].run(case, RunCache())


@needs_fsdp2_on_cpu
def test_a_sharded_run_that_differs_from_one_process_is_fsdps_red_not_checkpoints(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_unseen:ShardNormSGD\nkwargs: {lr: 0.01}\nchecks: [fsdp, checkpoint]\n"
                              "fsdp: {compiled: false}\n")
    runs = RunCache()
    try:
        with pytest.raises(AssertionError, match="eager sharded: param"):
            CHECKS["fsdp"].run(case, runs)
        with pytest.raises(Blocked, match="blocked by fsdp: the state loads as saved, but the eager step over params sharded"):
            CHECKS["checkpoint"].run(case, runs)
    finally:
        runs.close()


def test_init_does_not_split_params_into_an_argument_that_takes_an_optimizer():
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:BaseOptimizerSAM")
    assert "  - {argument: optim}" not in text
    assert ("# the constructor requires 'params' and 'optim' and refused matrices to one and the rest to the other "
            "(ValueError: it constructs so, but its step raises AttributeError: 'list' object has no attribute 'step', at ") in text
    assert "planted_unseen.py:" in text  # where the step raised: the optimizer's line


def test_a_param_group_added_by_a_law_carries_the_options_of_the_spec_group_that_takes_its_params(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_run_model:UseMuonGroupsSGD\nkwargs: {}\nchecks: [law_add_param_group]\n"
                              "params:\n  - {min_ndim: 2, use_muon: true}\n  - {use_muon: false}\n")
    assert isinstance(CHECKS["law_add_param_group"].run(case, RunCache()), Verdict)


def test_dynamo_traces_init_group_only_within_and_again_each_time():
    """The _init_group diagnosis patches dynamo for its rerun alone, as often as cases fail."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    from pytest_optimtest.harness import torch_api

    def dispatch() -> tuple:  # torch 2.13's call_method, or 2.15's declarative method table
        return OptimizerVariable.call_method, vars(OptimizerVariable).get("tp_methods")

    shortcut = dispatch()
    for _ in range(2):
        with torch_api.init_group_traced():
            assert any(now is not before for now, before in zip(dispatch(), shortcut))
        assert all(now is before for now, before in zip(dispatch(), shortcut))
