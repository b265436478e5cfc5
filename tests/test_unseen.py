"""Verdicts that hold on optimizers the plugin was never tuned on: one pytester session over
planted optimizers written the ways other packages write them (tests/planted_unseen.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import needs_fsdp2_on_cpu, one_case, torch_before
from warm import run_pytest_in

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.diagnosis import guards_a_cast_state_dtype
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.torch_api import torch_version

TESTS = Path(__file__).resolve().parent

SPECS = {
    "twin_a": "optimizer: twin_a:AdamW8bit\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "twin_b": "optimizer: twin_b:AdamW8bit\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "inf": "optimizer: planted_unseen:InfAttributeSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "keyed": "optimizer: planted_unseen:ParamKeyedGroupSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "noclosure": "optimizer: planted_unseen:NoClosureSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\nclosure: [false, true]\n",
    "epochstep": "optimizer: planted_unseen:EpochStepSGD\nkwargs: {lr: 0.1}\nchecks: [parity, law_descent]\n"
                 "closure: [false, true]\nlaws: {descent: true}\n",
    "matrix": "optimizer: planted_unseen:MatrixOnlySGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "keyerror": "optimizer: planted_unseen:KeyErrorSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "compiledonly": "optimizer: planted_unseen:CompiledOnlyRaise\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "idle": "optimizer: planted_unseen:FirstStepIdleSGD\nkwargs: {lr: 0.1}\nchecks: [in_backward_no_hook]\n",
    "plain": "optimizer: planted:PlainSGD\nkwargs: {lr: 0.1}\nchecks: [in_backward_no_hook]\n",
    "lazy": "optimizer: planted:LazyStateSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "noisy": "optimizer: planted:NoisySGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "named": "optimizer: planted_unseen:NamedParamsSGD\nkwargs: {lr: 0.1}\nparams: named\nchecks: [parity, in_backward]\n",
    "model": "optimizer: planted_unseen:ModelSGD\nkwargs: {lr: 0.1}\nparams: model\nchecks: [parity, zero]\n",
    "modelfuzz": "optimizer: planted_unseen:ModelSGD\nname: modelfuzz\nkwargs: {lr: 0.1}\nparams: model\n"
                 "checks: [fuzz_determinism, fuzz_zero_lr]\nfuzz: {determinism: {examples: {ci: 3, dev: 3}}, "
                 "zero_lr: {examples: {ci: 3, dev: 3}}}\n",
    "muon": "optimizer: planted_unseen:MuonStyleSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
            "params:\n  - {min_ndim: 2, use_muon: true}\n  - {use_muon: false}\n",
    "split": "optimizer: planted_unseen:SplitParamsSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
             "params:\n  - {min_ndim: 2, argument: matrix_params}\n  - {argument: params}\n",
    "matrices": "optimizer: planted_unseen:MatrixOnlySGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
                "model: pytest_optimtest.models:two_linear_no_bias\n",
    "counting": "optimizer: planted_unseen:StepCountingSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
                "cases:\n  - name: a\n  - name: b\n    kwargs: {lr: 0.05}\n",
    "tinycount": "optimizer: planted_unseen:StepCountingSGD\nkwargs: {lr: 1.0e-7}\nchecks: [parity, none_grads]\n",
    "initgroup": "optimizer: planted_unseen:InitGroupCountingSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "stash": "optimizer: planted_unseen:ClosureLossSGD\nkwargs: {lr: 0.01}\nchecks: [parity]\nclosure: [true]\n",
    "shapekeeping": "optimizer: planted_unseen:ShapeKeepingSGD\nkwargs: {lr: 0.1}\nchecks: [law_equivalent]\n"
                    "laws:\n  equivalent:\n    tensor_lr: [{lr: 0.1}, {lr: {tensor: 0.1}}]\n",
    "lrcache": "optimizer: planted_unseen:TensorLrCacheSGD\nkwargs: {lr: 0.1}\nchecks: [law_equivalent]\n"
               "laws:\n  equivalent:\n    tensor_lr: [{lr: 0.1}, {lr: {tensor: 0.1}}]\n",
    "shardmomentum": "optimizer: planted_unseen:ShardMomentumSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp, checkpoint]\n",
    "partialnorm": "optimizer: planted_unseen:PartialNormSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp, checkpoint]\n",
    "partialstate": "optimizer: planted_unseen:PartialNormStateSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp, checkpoint]\n",
    "objectlazy": "optimizer: planted_unseen:WrappedStateSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "intflag": "optimizer: planted_unseen:IntFlagSGD\nkwargs: {lr: 0.1}\nchecks: [state_dict, zero]\n",
    "tuplegroups": "optimizer: planted_unseen:TupleGroupsSGD\nkwargs: {lr: 0.1}\nchecks: [parity, zero, law_param_groups]\n"
                   "laws: {param_groups: true}\n",
    "stringstate": "optimizer: planted_unseen:StringStateSGD\nkwargs: {lr: 0.1}\nchecks: [state_dict, zero, checkpoint]\n",
    "heldparams": "optimizer: planted_unseen:ParamsHeldStateDictSGD\nkwargs: {lr: 0.1}\nchecks: [state_dict, checkpoint]\n",
    "dropping": "optimizer: planted_unseen:DroppingSGD\nkwargs: {lr: 0.1}\nfallback_random: true\nchecks: [parity, in_backward_no_hook]\n",
    "torchless": "optimizer: planted_unseen:TorchlessStepSGD\nkwargs: {lr: 0.1}\nclosure: [true]\nchecks: [parity]\n",
    "gradlessindex": "optimizer: planted_unseen:GradlessIndexSGD\nkwargs: {lr: 0.01}\n"
                     "checks: [none_grads, in_backward, in_backward_two_optimizers]\n",
    "groupindex": "optimizer: planted_unseen:GroupIndexStateSGD\nkwargs: {lr: 0.1}\nchecks: [state_dict]\n",
    "selfreducing": "optimizer: planted_unseen:SelfReducingSGD\nkwargs: {lr: 0.1}\nchecks: [zero]\n",
    "noviewhistory": "optimizer: planted_unseen:NoGradViewMasterSGD\nkwargs: {lr: 0.1}\nchecks: [law_untouched]\n"
                     "laws: {untouched: true}\n",
    "ignoresclosure": "optimizer: planted:IgnoresClosureSGD\nkwargs: {lr: 0.1}\nchecks: [law_descent, law_closure_loss, closure_graph_break]\n"
                      "laws: {descent: true}\n",
    "coupled": "optimizer: planted_unseen:GlobalNormSGD\nkwargs: {lr: 0.1}\nchecks: [law_late_joiners, zero]\n",
    "flaginstate": "optimizer: planted_unseen:FlagInStateSGD\nkwargs: {lr: 0.1}\nchecks: [checkpoint, zero]\n",
    "caststate": "optimizer: planted_unseen:CastStateSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "groupsraise": "optimizer: planted_unseen:TorchRaisesOverGroupsSGD\nkwargs: {lr: 0.1}\nchecks: [law_group_hyperparameters]\n",
    "normclamp": "optimizer: planted_unseen:InPlaceNormClampSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp]\nfsdp: {compiled: false}\n",
    "hookedstats": "optimizer: planted_unseen:HookedStatsSGD\nparams: model\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "removedapi": "optimizer: planted_unseen:RemovedApiSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "reducednorm": "optimizer: planted_unseen:ReducedNormSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp]\nfsdp: {compiled: false}\n",
    "plainscalar": "optimizer: planted_unseen:PlainScalarStateSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp]\nfsdp: {compiled: false}\n",
    "frames": "optimizer: planted_unseen:FramesSGD\nkwargs: {lr: 0.01}\nchecks: [graph_breaks, state_dict]\n",
    "normchecked": "optimizer: planted_unseen:NormCheckedSGD\nkwargs: {lr: 0.1}\nchecks: [law_descent]\nlaws: {descent: true}\n",
    "f32norm": "optimizer: planted_unseen:Float32NormStateSGD\nkwargs: {lr: 0.1}\ndtypes: [bfloat16]\nchecks: [state_dict]\n"
               "recompile: {load_state_dict: 0}\n",
    "history": "optimizer: planted_unseen:HistorySGD\nkwargs: {lr: 0.1}\nchecks: [parity, state_dict, law_determinism]\n",
    "deprecated": "optimizer: planted_unseen:DeprecatedOverloadSGD\nkwargs: {lr: 0.1}\nchecks: [parity, recompile]\n",
    "waiting": "optimizer: planted_unseen:WaitingSGD\nkwargs: {lr: 0.1}\nchecks: [parity, distributed, zero]\n",
    "boundedhistory": "optimizer: planted_unseen:BoundedHistorySGD\nkwargs: {lr: 0.1}\nchecks: [state_dict, zero]\n",
    "wrapper": "optimizer: planted_run_model:SharpnessAware\nclosure: [true]\nchecks: [parity, law_descent, law_untouched, state_dict, no_leak, fuzz_determinism]\n"
               "laws: {descent: true, untouched: true}\nfuzz: {determinism: {examples: 3}}\nkwargs: {base: {optimizer: torch.optim.SGD, kwargs: {lr: 0.01, momentum: 0.5}}}\n",
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:

    root = tmp_path_factory.mktemp("unseen")
    for module in ("planted.py", "planted_unseen.py", "planted_run_model.py", "twin_a.py", "twin_b.py"):
        shutil.copy(TESTS / module, root / module)
    (root / "specs").mkdir()
    for name, text in SPECS.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    result = run_pytest_in(root, "--optim-spec", "specs", "-v", "-rs", "-n", "0", "-p", "no:randomly", "-p",
                           "no:cacheprovider", "--optim-report", "report.json")
    return result.stdout, json.loads((root / "report.json").read_text())


# torch 2.6's dynamo breaks on deque(iterable, maxlen) and gives up on the step's frame (2.13 traces it)
DEQUE_UNTRACED = "deque() with more than 1 arg not supported"


def _outcome(out: str, node: str) -> str:
    match = re.search(rf"{re.escape(node)} (PASSED|FAILED|SKIPPED|ERROR)", out)
    assert match, f"{node} not in the output"
    return match.group(1)


def _expect(out: str, node: str, outcome: str) -> None:
    """That `node` had `outcome`; where it failed instead, its failure text is the message (a nested
    session's red is otherwise seen as 'FAILED' alone, and a rare one lost)."""
    found = _outcome(out, node)
    assert found == outcome, _failure(out, node) if found == "FAILED" else f"{node}: {found}"


def _failure(out: str, node: str) -> str:
    """The failure text of a node (it starts with `[check] case-id (file:line)`), up to the next section."""
    case, check = node.split("::")[1:]
    start = out.index(f"[{check}] {case} (")
    end = out.find("\n___", start + 1)
    return out[start:end if end > 0 else None]


def test_two_spec_files_with_one_case_id_keep_their_own_runs(session):
    out, report = session
    _expect(out, "specs/twin_a.yaml::adamw8bit-default-cpu::parity", "PASSED")
    _expect(out, "specs/twin_b.yaml::adamw8bit-default-cpu::parity", "FAILED")
    by_spec = {r["spec"]: r["outcome"] for r in report["items"] if r["case"] == "adamw8bit-default-cpu"}
    assert by_spec == {"specs/twin_a.yaml": "passed", "specs/twin_b.yaml": "failed"}


def test_equal_infinities_and_param_keyed_containers_compare_equal(session):
    out, _ = session
    _expect(out, "specs/inf.yaml::infattributesgd-default-cpu::parity", "PASSED")
    _expect(out, "specs/keyed.yaml::paramkeyedgroupsgd-default-cpu::parity", "PASSED")


def test_a_state_that_keeps_shapes_and_namedtuples_is_compared_by_the_equivalence_law(session):
    out, _ = session  # QUTEN keeps p.shape in its state: the law rebuilt the tuple with tensors in it and raised
    _expect(out, "specs/shapekeeping.yaml::shapekeepingsgd-default-cpu::law_equivalent", "PASSED")


def test_a_state_that_keeps_a_deque_of_tensors_is_snapshot_and_compared_item_by_item(session):
    out, _ = session  # sky-optimizer's L-BFGS history: every law and ZeRO item was "an error inside pytest-optimtest"
    if DEQUE_UNTRACED in out:  # torch 2.6: the step runs eagerly, so only the eager law compares the deque
        failure = _failure(out, "specs/history.yaml::historysgd-default-cpu::parity")
        assert "not compiled" in failure and DEQUE_UNTRACED in failure, failure
        _expect(out, "specs/history.yaml::historysgd-default-cpu::law_determinism", "PASSED")
        return
    for check in ("parity", "state_dict", "law_determinism"):
        _expect(out, f"specs/history.yaml::historysgd-default-cpu::{check}", "PASSED")


def test_a_deque_bound_that_torchs_load_drops_is_one_red_of_torchs(session):
    out, report = session  # sky-optimizer's deque(maxlen=history_size): torch's _cast rebuilds it unbounded
    if DEQUE_UNTRACED in out:  # torch 2.6: state_dict's compiled run captures no graph (its own red); ZeRO's names the bound
        zero = _failure(out, "specs/boundedhistory.yaml::boundedhistorysgd-default-cpu::zero")
        assert "state[0]['history']: a deque of maxlen 1 came back with maxlen None" in zero, zero
        assert "torch's Optimizer.load_state_dict does not give back the bound" in zero, zero
        return
    _expect(out, "specs/boundedhistory.yaml::boundedhistorysgd-default-cpu::state_dict", "FAILED")
    _expect(out, "specs/boundedhistory.yaml::boundedhistorysgd-default-cpu::zero", "SKIPPED")
    failure = _failure(out, "specs/boundedhistory.yaml::boundedhistorysgd-default-cpu::state_dict")
    assert "state[0]['history']: a deque of maxlen 1 came back with maxlen None" in failure, failure
    assert "drops a deque's maxlen" in failure and "torch's doing" in failure, failure
    assert "blocked by the same error in state_dict: torch's load_state_dict rebuilds a deque without its maxlen" in out


def test_a_step_on_an_overload_torch_deprecated_is_one_red_that_names_it_and_the_fix(session):
    out, _ = session  # Gradient-Centralization's, RAdam's, DiffGrad's `p.add_(-lr, grad)`: "captured no graph", no why
    _expect(out, "specs/deprecated.yaml::deprecatedoverloadsgd-default-cpu::parity", "FAILED")
    _expect(out, "specs/deprecated.yaml::deprecatedoverloadsgd-default-cpu::recompile", "SKIPPED")
    failure = _failure(out, "specs/deprecated.yaml::deprecatedoverloadsgd-default-cpu::parity")
    assert "the step calls add_(number, tensor...), an overload torch deprecated" in failure, failure
    assert "the optimizer's doing (write add_(tensor..., alpha=number))" in failure, failure
    assert "by this check's verdict" not in failure, failure


@pytest.mark.parametrize("reason, method", [
    ("Unhandled args for method\n  Explanation: ...\n  Developer debug context: call_method TensorVariable() add_ "
     "[ConstantVariable(float: -0.1), TensorVariable()] {}", "add_"),  # torch 2.13's wording
    ("Unhandled args for method\n  Developer debug context: call_method TensorVariable() add_ [ConstantVariable(float: -0.1), "
     "LazyVariableTracker(realized: TensorVariable())] {}", "add_"),  # 2.10's
    ("unhandled args for add_: TensorVariable.method_add_() takes 2 positional arguments but 3 were given", "add_"),  # 2.6's
    ("unhandled args for addcmul_: TensorVariable.method_addcmul_() takes 3 positional arguments but 4 were given", "addcmul_"),
    ("unhandled args for add_: TensorVariable.method_add_() got an unexpected keyword argument 'beta'", None),
    ("unhandled args for mul_: TensorVariable.method_mul_() takes 2 positional arguments but 3 were given", None),
])
def test_a_deprecated_overload_is_recognised_in_each_releases_wording(reason, method):
    from pytest_optimtest.harness.torch_api import deprecated_overload_call

    assert deprecated_overload_call(reason) == method


@pytest.mark.parametrize("failures, identity", [
    (["3/0: ___check_obj_id(L['buf'], 139846295434352)"], True),  # a state tensor the load replaced
    (["3/0: Cache line invalidated because buf got deallocated"], True),  # torch 2.6: that tensor's death, said so
    (["3/0: Cache line invalidated because buf got deallocated", "3/1: L['lr'] == 0.1"], False),
])
def test_a_split_off_frames_identity_recompile_is_recognised_in_each_releases_wording(failures, identity):
    from pytest_optimtest.harness.torch_api import identity_guards_only

    message = "Recompiling function torch_dynamo_resume_in_step_at_12 in x.py:12\n    triggered by the following guard failure(s):\n"
    assert identity_guards_only(message + "".join(f"    - {line}\n" for line in failures)) is identity


def test_a_step_that_waits_before_it_moves_is_given_the_steps_and_its_empty_first_trace_is_named(session):
    out, report = session  # LiyuanLucasLiu's RAdam waits 4 steps: DDP and ZeRO were vacuous over 3, parity bare "no graph"
    failure = _failure(out, "specs/waiting.yaml::waitingsgd-default-cpu::parity")
    assert "torch.compile captured no graph of the step" in failure, failure
    assert "torch's doing (dynamo): its eager step moved no param in 2 steps and moved them within 8 (it waits)" in failure, failure
    assert "pytorch/pytorch#144820" in failure and "by this check's verdict" not in failure, failure
    steps = {r["check"]: (r["outcome"], (r["evidence"] or {}).get("steps_compared")) for r in report["items"]
             if r["case"] == "waitingsgd-default-cpu" and r["check"] != "parity"}
    assert steps == {"distributed": ("passed", 8), "zero": ("passed", 8)}, steps  # the spec's 3 raised to the 8 it needed


def test_a_step_that_never_calls_its_closure_is_one_red_closure_loss_not_descent_too(session):
    out, _ = session  # Ranger and RangerVA comment their closure call out: descent's closure steps then moved nothing
    _expect(out, "specs/ignoresclosure.yaml::ignoresclosuresgd-default-cpu::law_closure_loss", "FAILED")
    _expect(out, "specs/ignoresclosure.yaml::ignoresclosuresgd-default-cpu::law_descent", "PASSED")
    # bregman's LinBreg and AdaBreg: closure_graph_break was a second red of the same cause
    outcomes = {check: _outcome(out, f"specs/ignoresclosure.yaml::ignoresclosuresgd-default-cpu::{check}")
                for check in ("law_closure_loss", "closure_graph_break")}
    assert sorted(outcomes.values()) == ["FAILED", "SKIPPED"], outcomes
    red = next(check for check, outcome in outcomes.items() if outcome == "FAILED")
    assert f"the same error in {red}" in out


def test_an_attribute_only_one_equivalent_variant_keeps_is_no_difference_in_the_run(session):
    out, _ = session  # Gefen and GefenMuon: `_lr_scalar_cache`, kept only under a tensor lr, was their tensor_lr red
    _expect(out, "specs/lrcache.yaml::tensorlrcachesgd-default-cpu::law_equivalent", "PASSED")


@needs_fsdp2_on_cpu
def test_state_kept_as_plain_tensors_of_the_shards_is_one_red_in_fsdp_and_checkpoint_saying_so(session):
    out, _ = session  # trasmuon's momentum (5, 10) of (10, 10): fsdp's red, and DCP's size mismatch on load a second
    outcomes = {check: _outcome(out, f"specs/shardmomentum.yaml::shardmomentumsgd-default-cpu::{check}")
                for check in ("fsdp", "checkpoint")}
    assert outcomes == {"fsdp": "FAILED", "checkpoint": "SKIPPED"}, outcomes
    assert "the same error in fsdp: its state is plain tensors of the ranks' shards" in out
    assert "diagnosis: its state is plain tensors of the ranks' shards, not DTensors (state['0.weight']['momentum'] (5, 10) " \
           "of (10, 10)" in out


@needs_fsdp2_on_cpu
def test_a_number_read_off_a_partial_dtensor_is_named_where_the_step_reads_it(session):
    out, _ = session  # h3-optimizer's Lipschitz estimate: float(g.norm(2).item() ** 2) over FSDP2's DTensor grads
    outcomes = {check: _outcome(out, f"specs/partialnorm.yaml::partialnormsgd-default-cpu::{check}")
                for check in ("fsdp", "checkpoint")}
    assert outcomes == {"fsdp": "FAILED", "checkpoint": "SKIPPED"}, outcomes
    assert re.search(r"diagnosis: its step reads a Python number \(item\(\), float\(\)\) off a DTensor that is a partial "
                     r"reduction, not yet reduced across the ranks \(\S*planted_unseen\.py:\d+ in <genexpr>: "
                     r"`scale = 1\.0 / \(1\.0 \+ sum\(float\(g\.norm\(\)\.item\(\)\)", out)


def test_state_cast_by_torchs_load_is_one_red_in_state_dict_and_zero(session):
    out, _ = session  # trasmuon's int64 flags came back float32 from the round trip and from ZeRO's consolidated load
    outcomes = {check: _outcome(out, f"specs/intflag.yaml::intflagsgd-default-cpu::{check}") for check in ("state_dict", "zero")}
    assert sorted(outcomes.values()) == ["FAILED", "SKIPPED"], outcomes
    red = next(check for check, outcome in outcomes.items() if outcome == "FAILED")
    assert f"the same error in {red}" in out
    assert "casts every state tensor but 'step' (integer ones too) to its param's dtype" in out


def test_an_optimizer_that_couples_params_is_not_held_to_laws_that_step_them_apart_and_zero_says_why(session):
    out, _ = session  # FANoSChain, NCG, PILOT, QUTEN, PSD: five packages' late_joiners reds were this premise
    _expect(out, "specs/coupled.yaml::globalnormsgd-default-cpu::law_late_joiners", "SKIPPED")
    assert re.search(r"law late_joiners does not apply: its update couples params: after \d+ step\(s\)", out)
    _expect(out, "specs/coupled.yaml::globalnormsgd-default-cpu::zero", "FAILED")
    assert "ZeroRedundancyOptimizer gives each rank's optimizer its shard of the params alone" in out


@needs_fsdp2_on_cpu
def test_a_state_dict_entry_that_is_no_params_is_the_optimizers_doing_when_dcp_cannot_save_it(session):
    out, _ = session  # DoG and LDoG: DCP's KeyError on '_first_step' read "torch's doing"
    _expect(out, "specs/flaginstate.yaml::flaginstatesgd-default-cpu::checkpoint", "FAILED")
    assert "FlagInStateSGD.state_dict() keeps '_first_step' under 'state'" in out and "the optimizer's doing" in out
    # ZeRO's consolidation drops it (and this load raises for want of it): the same root cause, one red (madgrad_wd's 'k')
    _expect(out, "specs/flaginstate.yaml::flaginstatesgd-default-cpu::zero", "SKIPPED")
    assert "blocked by the same error in checkpoint: its state_dict keeps entries under 'state' that are no param's" in out


def test_a_step_without_a_closure_parameter_is_not_applicable_to_closure_cases(session):
    out, _ = session
    _expect(out, "specs/noclosure.yaml::noclosuresgd-default-cpu::parity", "PASSED")
    _expect(out, "specs/noclosure.yaml::noclosuresgd-default-closure-cpu::parity", "SKIPPED")
    assert re.search(r"NoClosureSGD\.step\(self\) takes no closure \(.*planted_unseen\.py:\d+\)", out)


def test_a_step_that_takes_a_value_where_the_closure_goes_is_not_applicable_not_red(session):
    """SpawnGD's step(epoch, closure=None): its required first argument read as a closure, so the closure
    case was red "the optimizer's code raised TypeError ... 'function' and 'int'", the optimizer's doing,
    and the plain case said to give the spec a closure."""
    out, _ = session
    for item in ("default-cpu::parity", "default-cpu::law_descent", "default-closure-cpu::parity"):
        assert _outcome(out, f"specs/epochstep.yaml::epochstepsgd-{item}") == "SKIPPED", item
    assert "its step takes a value of its own as `epoch`, its first argument, where the plugin's closure runs put " \
           "their closure (given one, it raised TypeError: unsupported operand type(s) for %: 'function' and 'int')" in out
    assert "EpochStepSGD.step requires a closure, and this run steps without one, if its required `epoch` is one: " \
           "give the spec `closure: [true]`" in out


def test_the_optimizers_own_assert_and_exceptions_point_at_its_file_and_line(session):
    out, _ = session
    matrix = _failure(out, "specs/matrix.yaml::matrixonlysgd-default-cpu::parity")
    assert "the optimizer's code raised AssertionError: MatrixOnlySGD steps matrices only" in matrix
    assert re.search(r"at .*planted_unseen\.py:\d+ in _update \(the optimizer's doing", matrix)
    keyerror = _failure(out, "specs/keyerror.yaml::keyerrorsgd-default-cpu::parity")
    assert "the optimizer's code raised KeyError: 'nonexistent'" in keyerror
    assert 'group["nonexistent"]' in keyerror  # the user's line, from the traceback excerpt
    assert "torch.__trace" not in out


def test_a_step_that_refuses_the_loss_of_a_blown_up_run_is_diverged_not_red(tmp_path):
    """An optimizer that raises on a non-finite loss, at an lr the model diverges under (by step 5 at 0.1): its
    error was parity's red, "the optimizer's doing"; the run had blown up before it, so nothing was compared."""
    from pytest_optimtest.harness.vacuity import Diverged

    case = one_case(tmp_path, "optimizer: planted_unseen:FiniteLossSGD\nkwargs: {lr: 0.1}\nclosure: [true]\n")
    told = r"diverged: param '\S+' grew from scale .* before eager step \d, which then raised ValueError: the closure's loss is not finite"
    with pytest.raises(Diverged, match=told + ": not comparable; lower the case's lr"):
        CHECKS["parity"].run(case, RunCache())
    # the eager rungs of a case whose own steps reach the blow-up: vacuous, not the case's red
    longer = one_case(tmp_path, "optimizer: planted_unseen:FiniteLossSGD\nkwargs: {lr: 0.1}\nclosure: [true]\nsteps: 8\n")
    failure = RunCache().ladder(longer).first_failure(("constructs", "eager_steps"))
    assert failure is not None and failure.vacuous and re.search(told, failure.cause), failure


def test_a_step_that_raises_only_when_compiled_says_so(session):
    out, _ = session
    text = _failure(out, "specs/compiledonly.yaml::compiledonlyraise-default-cpu::parity")
    assert "only the compiled step raised, at step 1: TorchRuntimeError" in text
    assert "the eager step ran the same step without error" in text


def test_attribute_writes_that_dynamo_drops_are_torchs_doing_with_a_reproducer_and_one_root_cause(session):
    from pytest_optimtest.harness.diagnosis import optimizer_attribute_writes_under_dynamo

    out, report = session
    writes = optimizer_attribute_writes_under_dynamo()
    if writes == "kept":  # a torch whose dynamo writes them back: both pass
        _expect(out, "specs/counting.yaml::stepcountingsgd-a-cpu::parity", "PASSED")
        _expect(out, "specs/stash.yaml::closurelosssgd-default-closure-cpu::parity", "PASSED")
        return
    if writes.startswith("raises"):  # torch 2.10: dynamo asserts on the write, so each compiled step raises: torch's
        for node in ("specs/counting.yaml::stepcountingsgd-a-cpu::parity", "specs/stash.yaml::closurelosssgd-default-closure-cpu::parity"):
            failure = _failure(out, node)
            assert "only the compiled step raised, at step 1: " in failure, failure
            assert "torch's doing (dynamo): the installed torch's dynamo raises on an attribute write" in failure, failure
        return
    counting = _failure(out, "specs/counting.yaml::stepcountingsgd-a-cpu::parity")
    stash = _failure(out, "specs/stash.yaml::closurelosssgd-default-closure-cpu::parity")
    assert "optimizer attribute['steps_taken']: compiled 0 != eager" in counting
    assert "torch's doing (dynamo): the installed torch drops attribute writes on a torch.optim.Optimizer" in counting
    assert "the compiled optimizer's last_loss, steps_taken differ for that reason" in counting
    assert "python -m pytest_optimtest.harness.diagnosis" in counting and "whose doing: the optimizer's" not in counting
    assert "'ClosureLossSGD' object has no attribute 'closure_loss'" in stash
    assert "torch's doing (dynamo): the step reads an attribute of the optimizer that eager's step sets" in stash
    # one root cause over its cases, those of specs/tinycount.yaml included (their reproducers name other cases)
    [cause] = [c for c in report["root_causes"] if c["optimizer"].endswith("StepCountingSGD")]
    assert cause["cases"] == ["stepcountingsgd-a-cpu", "stepcountingsgd-b-cpu", "stepcountingsgd-default-cpu"]
    assert cause["red"] == 3


def test_at_bf16_a_dropped_attribute_write_leads_the_diagnoses_not_the_rounding_it_ruled_out(tmp_path):
    """Lookahead's bf16 parity red led with "with emulate_precision_casts=True the step still differs", a
    mechanism ruled out, and its root cause said no more; the fp32 case's named dynamo's dropped write."""
    from pytest_optimtest.harness.diagnosis import optimizer_attribute_writes_under_dynamo

    writes = optimizer_attribute_writes_under_dynamo()
    if writes != "dropped":
        pytest.skip(f"torch {torch.__version__}'s dynamo does not drop optimizer attribute writes ({writes}): nothing to diagnose")
    case = one_case(tmp_path, "optimizer: planted_unseen:PeriodicPullSGD\ndtypes: [bfloat16]\nchecks: [parity]\n")
    with pytest.raises(AssertionError) as info:
        CHECKS["parity"].run(case, RunCache())
    diagnoses = [line.strip() for line in str(info.value).splitlines() if line.strip().startswith("diagnosis: ")]
    assert diagnoses[0].startswith("diagnosis: torch's doing (dynamo): the installed torch drops attribute writes"), diagnoses
    assert any("emulate_precision_casts=True the step still differs" in line for line in diagnoses[1:]), diagnoses


def test_per_step_work_in_init_group_that_dynamo_runs_once_is_torchs_doing(session):
    out, _ = session
    if _outcome(out, "specs/initgroup.yaml::initgroupcountingsgd-default-cpu::parity") == "PASSED":
        return  # a torch whose dynamo traces _init_group at every step
    text = _failure(out, "specs/initgroup.yaml::initgroupcountingsgd-default-cpu::parity")
    assert "torch's doing (dynamo): dynamo runs the optimizer's `_init_group` once, while tracing" in text
    assert "with dynamo tracing it like any method the" in text and "whose doing: the optimizer's" not in text


def test_a_difference_where_the_params_barely_moved_is_a_red_not_vacuous(session):
    from pytest_optimtest.harness.diagnosis import optimizer_attribute_writes_under_dynamo

    out, _ = session
    writes = optimizer_attribute_writes_under_dynamo()
    if writes == "kept":  # then nothing differs and the tiny lr makes parity vacuous
        _expect(out, "specs/tinycount.yaml::stepcountingsgd-default-cpu::parity", "SKIPPED")
        return
    if writes.startswith("raises"):  # torch 2.10: the compiled step raises on the write, whatever the lr
        assert "torch's doing (dynamo)" in _failure(out, "specs/tinycount.yaml::stepcountingsgd-default-cpu::parity")
        return
    tiny = _failure(out, "specs/tinycount.yaml::stepcountingsgd-default-cpu::parity")
    assert "optimizer attribute['steps_taken']: compiled 0 != eager" in tiny and "torch's doing (dynamo)" in tiny
    _expect(out, "specs/tinycount.yaml::stepcountingsgd-default-cpu::none_grads", "SKIPPED")  # blocked: one red


def test_an_optimizer_idle_on_its_first_step_makes_the_no_hook_check_vacuous_not_failed(session):
    out, _ = session
    _expect(out, "specs/idle.yaml::firststepidlesgd-default-cpu::in_backward_no_hook", "SKIPPED")
    assert "vacuous: one ordinary step leaves" in out
    _expect(out, "specs/plain.yaml::plainsgd-default-cpu::in_backward_no_hook", "PASSED")


def test_parity_failures_name_their_mechanism_and_owner(session):
    out, report = session
    lazy = _failure(out, "specs/lazy.yaml::lazystatesgd-default-cpu::parity")
    assert "diagnosis: torch's doing: in the compiled run state['buf'] of" in lazy
    assert "shares storage with 0.bias.grad" in lazy and "python -m pytest_optimtest.harness.diagnosis" in lazy
    assert "the difference is in the graph dynamo traced" not in lazy, lazy  # the aliasing is that difference (Dion's MuonReference)
    # the same aliasing, the state tensor an attribute of an object of the optimizer's own: no diagnosis before
    nested = _failure(out, "specs/objectlazy.yaml::wrappedstatesgd-default-cpu::parity")
    assert "diagnosis: torch's doing: in the compiled run state['momentum']._data of" in nested, nested
    noisy = _failure(out, "specs/noisy.yaml::noisysgd-default-cpu::parity")
    assert "diagnosis: the optimizer draws random numbers in its step" in noisy and "fallback_random: true" in noisy
    if tuple(int(n) for n in torch_version().split(".")) >= (2, 13):
        assert "rerun so, it matches eager: the RNG is the whole difference" in noisy
    else:  # torch 2.11 (2.12 not run): fallback_random leaves the compiled noise different, and aot_eager names inductor
        assert "rerun so, it still differs" in noisy and "torch's doing (inductor)" in noisy
    assert ("diagnosis: torch's doing (inductor): compiled with aot_eager (dynamo and AOTAutograd, no inductor) the 7 steps "
            "match eager" in lazy)
    assert "reproduce: pytest --optim-spec specs/lazy.yaml -k 'lazystatesgd-default-cpu and parity'" in lazy
    (record,) = [r for r in report["items"] if r["case"] == "lazystatesgd-default-cpu"]
    assert record["metrics"]["diagnoses"][0].startswith("torch's doing")


def test_optimizers_that_take_named_params_groups_by_shape_or_the_model_are_built_as_the_spec_says(session):
    out, _ = session
    for node in ("named.yaml::namedparamssgd-default-cpu::parity", "model.yaml::modelsgd-default-cpu::parity",
                 "muon.yaml::muonstylesgd-default-cpu::parity", "matrices.yaml::matrixonlysgd-default-cpu::parity",
                 "split.yaml::splitparamssgd-default-cpu::parity"):
        _expect(out, f"specs/{node}", "PASSED")
    _expect(out, "specs/named.yaml::namedparamssgd-default-cpu::in_backward", "SKIPPED")
    assert "takes its params as named (the spec's `params`)" in out
    _expect(out, "specs/model.yaml::modelsgd-default-cpu::zero", "SKIPPED")
    for prop in ("fuzz_determinism", "fuzz_zero_lr"):  # a property's draws are loose params: not applicable, not falsified
        assert _outcome(out, f"specs/modelfuzz.yaml::modelfuzz-fuzz-cpu::{prop}") == "SKIPPED", out[-3000:]
    assert "falsified" not in out


def test_a_wrapper_steps_a_base_optimizer_built_over_its_own_params_in_every_run(session, tmp_path):
    """SAM's shape: `{optimizer: ..., kwargs}` builds the base optimizer over the params the wrapper is
    given, anew for each construction, so that compiled and eager runs each step their own."""
    from helpers import cases_from

    from pytest_optimtest.harness.param_forms import construct
    from pytest_optimtest.models import two_linear
    from pytest_optimtest.spec import SpecError
    from pytest_optimtest.spec.values import build_kwargs, resolve

    out, _ = session
    _expect(out, "specs/wrapper.yaml::sharpnessaware-default-closure-cpu::parity", "PASSED")
    for check in ("law_descent", "law_untouched", "state_dict", "no_leak"):  # a step that must have a closure gets one
        _expect(out, f"specs/wrapper.yaml::sharpnessaware-default-closure-cpu::{check}", "PASSED")
    _expect(out, "specs/wrapper.yaml::sharpnessaware-fuzz-cpu::fuzz_determinism", "PASSED")
    case = cases_from(tmp_path, SPECS["wrapper"])[0]
    model = two_linear()
    wrapper = construct(resolve(case.optimizer), "list", model, build_kwargs(case.kwargs, "cpu"), "cpu")
    assert isinstance(wrapper.base, torch.optim.SGD) and wrapper.base.defaults["momentum"] == 0.5
    assert [id(p) for p in wrapper.base.param_groups[0]["params"]] == [id(p) for p in model.parameters()]
    assert wrapper.base.param_groups is not wrapper.param_groups
    for value, message in (("{optimizer: torch.optim.SDG}", r"has no attribute 'SDG'.*did you mean 'SGD'"),
                           ("{optimizer: torch.optim.SGD, lr: 0.1}", r"takes no other keys; got \['lr'\]"),
                           ("{optimizer: torch.optim.SGD, kwargs: [0.1]}", r"kwargs is a mapping"),
                           ("{optimizer: torch.optim.SGD, kwargs: {lr: {tensor: x}}}", r"\{tensor: \.\.\.\} takes a number")):
        with pytest.raises(SpecError, match=r"\[kwargs.base\] .*" + message):
            cases_from(tmp_path, SPECS["wrapper"].replace("{optimizer: torch.optim.SGD, kwargs: {lr: 0.01, momentum: 0.5}}", value))


def test_an_optimizer_whose_groups_are_its_params_alone_is_compared_and_told_what_does_not_apply(session):
    out, _ = session  # torchopt's eight optimizers: every check was "a bug of ours" ('tuple' has no attribute 'items')
    assert "inside pytest-optimtest" not in _section(out, "tuplegroups")
    _expect(out, "specs/tuplegroups.yaml::tuplegroupssgd-default-cpu::parity", "PASSED")
    _expect(out, "specs/tuplegroups.yaml::tuplegroupssgd-default-cpu::zero", "SKIPPED")
    assert "ZeroRedundancyOptimizer takes a torch.optim.Optimizer class, and TupleGroupsSGD is not one" in out
    _expect(out, "specs/tuplegroups.yaml::tuplegroupssgd-default-cpu::law_param_groups", "SKIPPED")
    assert "TupleGroupsSGD keeps each param group as its params alone" in out


def test_an_optimizer_that_runs_collectives_itself_is_not_wrapped_in_zero(session):
    out, _ = session  # Adams_ZeRO under ZeRO: garbage params, and a hang under FSDP2
    _expect(out, "specs/selfreducing.yaml::selfreducingsgd-default-cpu::zero", "SKIPPED")
    assert re.search(r"the optimizer calls torch\.distributed\.all_reduce itself, at \S*planted_unseen\.py:\d+ in "
                     r"_update: `dist\.all_reduce\(p\.grad\)`", out)


def test_state_holding_a_view_autograd_refuses_to_read_is_snapshotted(session):
    out, _ = session  # Adams_ZeRO: every check was "a bug of ours" reading the view's .grad
    _expect(out, "specs/noviewhistory.yaml::nogradviewmastersgd-default-cpu::law_untouched", "PASSED")


def _section(out: str, spec: str) -> str:
    """Every line of the session's output that names the spec."""
    return "\n".join(line for line in out.splitlines() if f"specs/{spec}.yaml" in line)


def test_a_str_state_that_torchs_load_rebuilds_is_one_red_of_torchs_in_state_dict_and_zero(session):
    out, _ = session  # fanos's preconditioner_kind came back '<generator object ...>': KeyError blamed on the optimizer
    outcomes = {check: _outcome(out, f"specs/stringstate.yaml::stringstatesgd-default-cpu::{check}") for check in ("state_dict", "zero", "checkpoint")}
    assert sorted(outcomes.values()) == ["FAILED", "SKIPPED", "SKIPPED"], outcomes
    assert "torch's Optimizer.load_state_dict does not give back the optimizer's str state: state[0]['kind']: 'plain' came back as " \
           "'<generator object" in out
    assert "KeyError" not in _failure(out, "specs/stringstate.yaml::stringstatesgd-default-cpu::"
                                      + next(c for c, o in outcomes.items() if o == "FAILED"))


@needs_fsdp2_on_cpu
def test_a_number_read_off_a_partial_dtensor_into_state_is_one_red_in_fsdp_and_checkpoint(session):
    out, _ = session  # mctorch's and mcnn's ConjugateGradient: the checkpoint's load red again over the same numbers
    outcomes = {check: _outcome(out, f"specs/partialstate.yaml::partialnormstatesgd-default-cpu::{check}")
                for check in ("fsdp", "checkpoint")}
    assert sorted(outcomes.values()) == ["FAILED", "SKIPPED"], outcomes
    assert "blocked by the same error in " in out and "its step reads numbers off partial DTensors" in out


def test_state_under_an_int_key_that_is_no_param_is_named_on_the_state_dict_red(session):
    # DoWG keeps its group's state under the group's index, 0, which torch's state_dict also gives param 0: the red
    # said only "results differ"
    out, _ = session
    node = "specs/groupindex.yaml::groupindexstatesgd-default-cpu::state_dict"
    _expect(out, node, "FAILED")
    assert ("diagnosis: the optimizer keeps state under int keys that are no params (<state key 0>), and torch's "
            "state_dict saves each param's state under the param's index") in " ".join(_failure(out, node).split())


def test_a_state_dict_holding_the_params_themselves_is_one_red_of_the_optimizers(session):
    # gradient_equilibrum's state_dict returns its param groups with the params in them: the state_dict red said only
    # "results differ", and DCP's KeyError over a DTensor was a second red, its line the plugin's
    out, _ = session
    node = "specs/heldparams.yaml::paramsheldstatedictsgd-default-cpu::"
    _expect(out, node + "state_dict", "FAILED")
    assert ("diagnosis: ParamsHeldStateDictSGD.state_dict() holds its param groups' params themselves, not their indices"
            in " ".join(_failure(out, node + "state_dict").split()))
    _expect(out, node + "checkpoint", "SKIPPED")


def test_a_param_a_random_draw_left_unmoved_in_backward_is_not_a_red(session):
    # DropGrad keeps each grad element with a drawn probability: stepped a param at a time in backward, its draws land
    # elsewhere, and a bias whose every element was dropped was in_backward_no_hook's red
    out, _ = session
    _expect(out, "specs/dropping.yaml::droppingsgd-default-cpu::in_backward_no_hook", "SKIPPED")
    assert ("vacuous: not comparable: the optimizer draws from torch's global RNG (as it makes its state or steps), and "
            "in_backward_no_hook steps params in another order") in out


def test_a_step_dynamo_skips_as_tensorless_after_the_closures_break_is_named_torchs(session):
    # gradient_equilibrum's step names no torch module: after the closure's graph break dynamo skipped its frame
    # (has_tensor_in_frame), and the red said "the optimizer's, by this check's verdict"
    out, _ = session
    node = "specs/torchless.yaml::torchlessstepsgd-default-closure-cpu::parity"
    _expect(out, node, "FAILED")
    text = " ".join(_failure(out, node).split())
    assert "torch's doing, dynamo's heuristic: after the closure's graph break the step is a frame of its own" in text, text
    assert "nothing above points at torch" not in text


def test_a_step_that_raises_without_grads_is_none_grads_red_alone(session, tmp_path):
    # ClippedSSTM's IndexError where a grad is None: none_grads' red, and again in two optimizers in backward, whose
    # later step() calls come with grad None (noticed in stop 64); whichever of the two runs first


    out, _ = session
    node = "specs/gradlessindex.yaml::gradlessindexsgd-default-cpu::"
    _expect(out, node + "none_grads", "FAILED")
    _expect(out, node + "in_backward_two_optimizers", "SKIPPED")
    case = one_case(tmp_path, SPECS["gradlessindex"])
    with pytest.raises(IndexError):  # as none_grads' run raises it, unwrapped: the session's same error, one red
        CHECKS["in_backward_two_optimizers"].run(case, RunCache())  # none_grads not run yet


def test_state_dynamo_loses_through_typing_cast_is_torchs_doing_on_the_parity_red(session):
    """homeadam's three optimizers: `cast(dict[str, Any], self.state[p])`, and torch 2.13's dynamo wrote none of
    the compiled step's state back; the red said only that aot_eager differs too."""
    from pytest_optimtest.harness.diagnosis import loses_writes_through_cast

    out, _ = session
    node = "specs/caststate.yaml::caststatesgd-default-cpu::parity"
    failure = _failure(out, node) if _outcome(out, node) == "FAILED" else ""
    if "Unexpected type in sourceless builder types.GenericAlias" in failure:  # torch 2.6's dynamo cannot trace dict[str, Any]
        assert "not compiled" in failure and "planted_unseen.py:" in failure, failure
        return
    if not loses_writes_through_cast():  # a torch whose dynamo writes them back: the step compiles right,
        # but for torch's aliasing bug, where the release has it (2.10: the lazily made buffer aliases the grad)
        assert not failure or ("torch's doing: in the compiled run state['momentum']" in failure and "shares storage" in failure), failure
        return
    assert "torch's doing (dynamo): the installed torch loses writes into a dict that passed through typing.cast" in failure
    assert "['momentum']" in failure and "python -m pytest_optimtest.harness.diagnosis" in failure


def test_a_law_whose_two_group_step_raised_inside_torch_says_it_is_torchs_doing(session):
    """emerging_optimizers' LaProp: its step over two groups raised inside torch; the law's red named the
    optimizer's line and no owner."""
    out, _ = session
    failure = _failure(out, "specs/groupsraise.yaml::torchraisesovergroupssgd-default-cpu::law_group_hyperparameters")
    assert "raised AssertionError: one momentum for every group" in failure
    assert "(torch's doing; one optimizer with that value for all params did not)" in failure


@needs_fsdp2_on_cpu
def test_an_op_dtensor_refuses_as_the_optimizer_writes_it_is_the_optimizers_doing(session):
    """emerging_optimizers' ObliqueSGD and ObliqueAdam: `norm.clamp_min_(eps)` over FSDP2's shards raised in DTensor's
    Python code, which told it to use the out-of-place op; the red called it torch's doing."""
    out, _ = session
    failure = _failure(out, "specs/normclamp.yaml::inplacenormclampsgd-default-cpu::fsdp")
    if "aten.clamp_min_.default does not have a sharding strategy registered" in failure:  # torch 2.10's DTensor: no such op
        assert "(torch's doing)" in failure, failure
        return
    assert "in-place operations that require placement changes are not supported" in failure
    assert "(optimizer's doing)" in failure and "torch's doing" not in failure, failure


def test_an_optimizer_that_hooks_the_model_sees_a_forward_before_its_first_step(session):
    """deepchem's KFACOptimizer records each layer's input in forward hooks it registers as it constructs: the runs
    built it after the backward that made their grads, and its step's KeyError (no record) was its red."""
    out, _ = session
    _expect(out, "specs/hookedstats.yaml::hookedstatssgd-default-cpu::parity", "PASSED")


def test_a_torch_function_torch_removed_is_the_optimizers_doing(session):
    """deepchem's KFACOptimizer calls torch.symeig, which torch keeps only to raise that it was removed: the red
    said "torch's doing, or its verdict on the optimizer's code"."""
    out, _ = session
    failure = _failure(out, "specs/removedapi.yaml::removedapisgd-default-cpu::parity")
    if "is now removed" not in failure:  # a torch without torch.symeig at all: an AttributeError of the optimizer's
        assert "the optimizer's code raised AttributeError" in failure, failure
        return
    assert "the optimizer's code raised RuntimeError: This function was deprecated" in failure, failure
    assert "diagnosis: its _update calls what torch" in failure and "torch.symeig(self.factors[p]" in failure, failure


@needs_fsdp2_on_cpu
def test_a_collective_over_a_dtensor_is_the_optimizers_doing_not_torchs(session):
    """llm-foundry's DecoupledClipLion and DecoupledAdaLRLion all-reduce a grad's norm, written for local shards;
    DTensor registers no c10d collective, and the red called its NotImplementedError torch's doing."""
    out, _ = session
    failure = _failure(out, "specs/reducednorm.yaml::reducednormsgd-default-cpu::fsdp")
    assert "Operator c10d.allreduce_.default does not have a sharding strategy registered" in failure, failure
    assert "(optimizer's doing)" in failure and "torch's doing" not in failure, failure
    assert "passes a DTensor to a collective (c10d.allreduce_)" in failure and "to_local()" in failure, failure


@needs_fsdp2_on_cpu
def test_a_plain_state_tensor_written_with_a_dtensor_is_the_optimizers_doing_not_torchs(session):
    """timm's NvNovoGrad and monai's Novograd: `exp_avg_sq.copy_(norm)`, a state made by torch.zeros([]) beside
    FSDP2's DTensor params; torch 2.13's DTensor dispatch raises a bare AssertionError, and the red said
    "AssertionError: ... (torch's doing)", nothing more."""
    out, _ = session
    node = "specs/plainscalar.yaml::plainscalarstatesgd-default-cpu::fsdp"
    if torch_before("2.10"):  # 2.9's DTensor takes that write, and the sharded run equals one process's
        _expect(out, node, "PASSED")
        return
    failure = _failure(out, node)
    assert "(optimizer's doing)" in failure and "torch's doing" not in failure, failure
    assert "DTensor's dispatch refuses the in-place op at _update's line (`norm.copy_(p.grad.pow(2).sum())`)" in failure


def test_recompiles_of_frames_a_graph_break_split_off_are_the_breaks_red_not_state_dicts(session):
    """emerging_optimizers' Muon family: a graph break splits the step into frames that take state tensors as
    inputs, guarded by identity; a load recompiled each once a param, and state_dict was red beside graph_breaks
    for that one cause."""
    out, report = session
    _expect(out, "specs/frames.yaml::framessgd-default-cpu::graph_breaks", "FAILED")
    _expect(out, "specs/frames.yaml::framessgd-default-cpu::state_dict", "PASSED")
    (item,) = [i for i in report["items"] if i["nodeid"] == "specs/frames.yaml::framessgd-default-cpu::state_dict"]
    assert item["evidence"]["recompiles_after_load"] <= 1 and item["evidence"]["recompiles_after_load_split_off"] > 0, item


def test_descent_starts_elsewhere_for_a_constructor_that_refuses_a_zero_param(session):
    """emerging_optimizers' MuonHyperball refuses a param of zero norm: law descent, whose problem starts at
    zero, was red for the optimizer's constructor."""
    out, _ = session
    _expect(out, "specs/normchecked.yaml::normcheckedsgd-default-cpu::law_descent", "PASSED")


def test_a_state_dtype_guard_is_read_in_each_releases_spelling_of_its_source():
    mismatch = "' dtype mismatch. expected Float, actual BFloat16"
    keys = "list(dict.keys(step.__self__.state))[0]"
    assert guards_a_cast_state_dtype(f"- 0/1: tensor 'step.__self__.state[{keys}]['prev_norm']{mismatch}")  # 2.13
    assert guards_a_cast_state_dtype(f"- 0/1: tensor 'dict.__getitem__(step.__self__.state, {keys})['prev_norm']{mismatch}")  # 2.7
    assert not guards_a_cast_state_dtype(f"- 0/1: tensor 'step.__self__.param_groups[0]['lr']{mismatch}")
    assert not guards_a_cast_state_dtype(f"- 0/1: tensor 'L['grads'][0]{mismatch}")


def test_a_load_that_recompiles_on_a_state_dtype_torch_cast_says_so(session):
    """hakuli's Hakuli at bf16: its float32 `prev_norm` came back bf16 from torch's load, rebound float32 by the
    next step; only the compiled step's dtype guard saw it, and the red listed the guard and no cause."""
    out, _ = session
    failure = _failure(out, "specs/f32norm.yaml::float32normstatesgd-default-bfloat16-cpu::state_dict")
    assert "['prev_norm']' dtype mismatch. expected Float, actual BFloat16" in failure
    assert "casts every state tensor but 'step' (integer ones too) to its param's dtype" in failure


def _inductor_shares_lazy_counters() -> bool:
    """Plain torch: whether the installed inductor makes per-param counters a step creates after a
    dynamo-disabled call one buffer (torch 2.13 does)."""
    from planted_unseen import DisabledFactorCounterSGD

    model = torch.nn.Linear(3, 2)
    optimizer = DisabledFactorCounterSGD(model.parameters())
    step = torch.compile(optimizer.step)
    for _ in range(2):
        model.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        step()
    torch._dynamo.reset()
    weight, bias = (optimizer.state[p]["step"] for p in model.parameters())
    return weight.untyped_storage().data_ptr() == bias.untyped_storage().data_ptr()


def test_state_tensors_inductor_made_one_buffer_are_named_and_the_rest_of_the_difference_is_inductors(tmp_path):
    """olmo-core's SkipStepAdamW: inductor made its per-param step counters one buffer, and parity's red named only
    the attribute dynamo drops, then said of all 17 differences that aot_eager has them too ("not in inductor's
    code"), where aot_eager differed in the attribute alone."""
    if not _inductor_shares_lazy_counters():
        pytest.skip(f"torch {torch.__version__}'s inductor keeps the counters apart: nothing to name")
    case = one_case(tmp_path, "optimizer: planted_unseen:DisabledFactorCounterSGD\nkwargs: {lr: 0.05}\n")
    with pytest.raises(AssertionError) as red:
        CHECKS["parity"].run(case, RunCache())
    text = str(red.value)
    assert re.search(r"torch's doing: in the compiled run state\['step'\] of \S+ shares storage with state\['step'\] of "
                     r"\S+.*where eager's state does not: the compiled step made those state tensors", text), text
    assert "not in inductor's code" not in text
    if "optimizer attribute['skipped']" in text:  # the releases whose dynamo drops the write
        assert re.search(r"aot_eager \(no inductor\) the step differs from eager in optimizer attribute\['skipped'\] "
                         r"alone: those are in the graph dynamo traced; the other \d+ values \(param\[.*\) match eager "
                         r"there, so inductor's code makes them: torch's doing \(inductor\)", text), text
