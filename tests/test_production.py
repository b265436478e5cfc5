"""The regimes where optimizers break in production: the dtype axis and state_dtype contract,
FSDP2-sharded params (fsdp) and DCP checkpoints resumed at another world size (checkpoint)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import cases_from, failure_of, needs_fsdp2_on_cpu, one_case, run_check, run_planted_spec, run_pytest
from planted_unseen import GradAttributeSGD

from pytest_optimtest.checks import CHECKS, NotApplicable
from pytest_optimtest.harness.compare import tensor_difference
from pytest_optimtest.harness import torch_api
from pytest_optimtest.harness.compiled_run import CompiledStepOnlyError
from pytest_optimtest.harness.ranks import RankFailure
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.snapshot import snapshot
from pytest_optimtest.spec import SpecError
from pytest_optimtest.spec.schema import DEFAULT_TOLERANCES, Tolerance


# The dtype axis

def test_dtypes_cross_the_cases_and_float32_ids_stay_as_they_were(tmp_path):
    cases = cases_from(tmp_path, """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
tolerance: {atol: 1.0e-4, rtol: 1.0e-5}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
    dtypes: [float32, bfloat16]
    tolerance: {bfloat16: {atol: 1.0e-3, rtol: 2.0e-2}}
  - name: double
    dtypes: [float64]
laws: {untouched: true}
""")
    by_id = {c.id: c for c in cases}
    assert list(by_id) == ["sgd-default-cpu", "sgd-momentum-cpu", "sgd-momentum-bfloat16-cpu", "sgd-double-float64-cpu"]
    assert by_id["sgd-momentum-bfloat16-cpu"].dtype == "bfloat16"
    assert by_id["sgd-default-cpu"].tolerance == Tolerance(atol=1e-4, rtol=1e-5)  # a bare tolerance is float32's
    assert by_id["sgd-momentum-bfloat16-cpu"].tolerance == Tolerance(atol=1e-3, rtol=2e-2)  # the case's, for its dtype
    assert by_id["sgd-double-float64-cpu"].tolerance == DEFAULT_TOLERANCES["float64"]
    # once-per-optimizer checks run once per dtype: on the first case that runs at it
    assert [c.id for c in cases if "law_untouched" in c.checks] == ["sgd-default-cpu", "sgd-momentum-bfloat16-cpu",
                                                                     "sgd-double-float64-cpu"]


@pytest.mark.parametrize("text, where, says", [
    ("dtypes: [bf16]\n", "dtypes[0]", "'float32', 'bfloat16', 'float16' or 'float64'"),
    ("tolerance: {bfloat16: {atol: 1}, half: {atol: 1, rtol: 1}}\n", "tolerance", ""),
    ("state_dtype: fp32\n", "state_dtype", "'param' or 'float32'"),
    ("fsdp: {cases: [defualt]}\n", "fsdp.cases[0]", "no case named 'defualt'"),
])
def test_bad_dtype_and_fsdp_keys_name_line_and_key(tmp_path, text, where, says):
    with pytest.raises(SpecError) as info:
        cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n" + text)
    message = str(info.value)
    assert "spec.yaml:3" in message and where in message and says in message


def test_a_case_may_run_its_own_checks(tmp_path):
    text = ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [parity, recompile]\n"
            "cases: [{name: default}, {name: bf16, dtypes: [bfloat16], checks: [parity]}]\n")
    by_id = {c.id: c for c in cases_from(tmp_path, text)}
    assert by_id["sgd-default-cpu"].checks == ("parity", "recompile")
    assert by_id["sgd-bf16-bfloat16-cpu"].checks == ("parity",)
    with pytest.raises(SpecError, match=r"spec.yaml:4: \[cases\[1\]\.checks\[0\]\] unknown check 'parityy'"):
        cases_from(tmp_path, text.replace("checks: [parity]}", "checks: [parityy]}"))


def test_low_precision_tolerance_allows_cancelling_elements_at_the_tensors_scale():
    expected = torch.tensor([1.0, 0.001, 0.001, 0.001] * 5)
    cancelled = expected.clone()
    cancelled[1] += 0.004  # 4x its own value, but under rtol of the tensor's largest (1.0)
    bf16 = DEFAULT_TOLERANCES["bfloat16"]
    assert tensor_difference("p", expected, cancelled, bf16) is None
    assert "1/20 elements differ" in tensor_difference("p", expected, cancelled, Tolerance(atol=1e-5, rtol=1.6e-2))
    beyond_scale = expected.clone()
    beyond_scale[1] += 0.05
    assert "1/20 elements differ" in tensor_difference("p", expected, beyond_scale, bf16)
    too_many = expected.clone()
    too_many[expected < 1] += 0.004  # 15 of 20 elements: over the 25% error rate
    assert "15/20 elements differ" in tensor_difference("p", expected, too_many, bf16)


def _spec(optimizer: str, extra: str = "", dtypes: str = "[bfloat16]") -> str:
    return f"optimizer: {optimizer}\nkwargs: {{lr: 0.01}}\ndtypes: {dtypes}\n{extra}"


def test_a_step_whose_compiled_form_rejects_bf16_fails_parity_at_bf16_only(tmp_path):
    fp32, bf16 = cases_from(tmp_path, _spec("planted_production:CompiledUpcastSGD", "checks: [parity]\n",
                                            "[float32, bfloat16]"))
    assert "equal" in run_check("parity", fp32)
    with pytest.raises(CompiledStepOnlyError) as info:
        run_check("parity", bf16)
    assert "only the compiled step raised" in str(info.value) and "expected dtype torch.bfloat16" in str(info.value)


def test_state_dtype_contract(tmp_path):
    case = one_case(tmp_path, _spec("planted_production:MomentumSGD", "state_dtype: param\nchecks: [state_dtype]\n"))
    assert "state tensors in the params' bfloat16" in run_check("state_dtype", case)
    case = one_case(tmp_path, _spec("planted_production:MomentumSGD", "state_dtype: float32\nchecks: [state_dtype]\n"))
    message = failure_of("state_dtype", case)
    assert "state['momentum_buffer'] of '0.weight' is torch.bfloat16, not torch.float32" in message
    assert "training stalls" in message
    case = one_case(tmp_path, _spec("planted:UpcastMomentumSGD", "state_dtype: param\nchecks: [state_dtype]\n"))
    assert "upcast" in failure_of("state_dtype", case)


def test_state_dtype_makes_no_item_where_it_cannot_tell_the_contracts_apart(tmp_path):
    undeclared = cases_from(tmp_path, _spec("torch.optim.SGD", dtypes="[float32, bfloat16]"))
    assert not any("state_dtype" in c.checks for c in undeclared)
    declared = cases_from(tmp_path, _spec("torch.optim.SGD", "state_dtype: param\n", "[float32, bfloat16]"))
    assert [c.id for c in declared if "state_dtype" in c.checks] == ["sgd-default-bfloat16-cpu"]


def test_torch_optim_adam_passes_every_check_at_bf16(tmp_path):
    case = one_case(tmp_path, _spec("torch.optim.Adam", "state_dtype: param\nchecks: [parity, state_dtype, in_backward]\n"))
    runs = RunCache()
    for check in case.checks:
        assert run_check(check, case, runs)


# FSDP2 and resharded checkpoints (2 gloo ranks)

def _fsdp(optimizer: str, section: str = "{}", checks: str = "[fsdp, checkpoint]") -> str:
    return f"optimizer: {optimizer}\nkwargs: {{lr: 0.05}}\nfsdp: {section}\nchecks: {checks}\n"


@needs_fsdp2_on_cpu
def test_adam_with_a_tensor_lr_resumes_at_one_process_and_at_two_ranks(tmp_path):
    case = one_case(tmp_path, "optimizer: torch.optim.Adam\nkwargs: {lr: {tensor: 0.01}}\n"
                              "fsdp: {load_world_sizes: [1, 2], recompiles: 0}\nchecks: [fsdp, checkpoint]\n")
    runs = RunCache()
    said = run_check("fsdp", case, runs)
    assert "eager and compiled over DTensor params on 2 ranks" in said and "0 recompiles" in said
    assert "loaded at world size 1, 2" in run_check("checkpoint", case, runs)
    assert runs.cases_run == 1  # one sharded run feeds both checks
    runs.close()


@needs_fsdp2_on_cpu
def test_a_global_norm_summed_per_shard_passes_whole_and_fails_sharded(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:LocalNormSGD", checks="[parity, fsdp]"))
    assert "equal" in run_check("parity", case)
    message = failure_of("fsdp", case)
    assert "eager sharded: param['0.weight']" in message and "2 gloo ranks" in message


@needs_fsdp2_on_cpu
def test_an_optimizer_that_cannot_take_dtensor_params_fails_with_its_own_line(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:NumpySGD", checks="[fsdp]"))
    message = failure_of("fsdp", case)
    assert ".numpy() is not supported for tensor subclasses" in message
    assert "planted_production.py" in message and "(optimizer's doing)" in message


@needs_fsdp2_on_cpu
def test_an_optimizer_that_takes_its_mesh_gets_fsdps_where_the_spec_asks_and_is_skipped_saying_so_where_not(tmp_path):
    """microsoft/dion's optimizers refuse DTensor params unless constructed with the mesh they are sharded over:
    fsdp was red ("Must create optimizer with DeviceMesh"), the optimizer's doing, where no spec could give it."""
    without = one_case(tmp_path, _fsdp("planted_production:MeshSGD", checks="[fsdp, checkpoint]"))
    runs = RunCache()
    for check in ("fsdp", "checkpoint"):
        with pytest.raises(NotApplicable, match=r"takes `distributed_mesh` .* `kwargs: \{distributed_mesh: \{device_mesh: fsdp\}\}`"):
            run_check(check, without, runs)
    runs.close()
    (tmp_path / "mesh").mkdir()
    given = one_case(tmp_path / "mesh", "optimizer: planted_production:MeshSGD\nkwargs: {lr: 0.05, distributed_mesh: {device_mesh: fsdp}}\n"
                                        "fsdp: {load_world_sizes: [1, 2]}\nchecks: [fsdp, checkpoint]\n")
    runs = RunCache()
    assert "over DTensor params on 2 ranks" in run_check("fsdp", given, runs)
    assert "loaded at world size 1, 2" in run_check("checkpoint", given, runs)
    runs.close()


def test_init_gives_fsdps_mesh_to_the_one_argument_that_takes_a_mesh_and_the_spec_loads(tmp_path):
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_production:MeshSGD")
    assert ", distributed_mesh: {device_mesh: fsdp}}" in text.split("\nkwargs: ", 1)[1].splitlines()[0], text
    assert cases_from(tmp_path, text)


@needs_fsdp2_on_cpu
def test_an_argument_that_takes_a_process_group_gets_the_meshs_group_from_init_and_fsdp_passes(tmp_path):
    """Adams_ZeRO's `process_group: ProcessGroup | None`: init gave it `{device_mesh: fsdp}`, a DeviceMesh, and
    fsdp was red "Group DeviceMesh(...) is not registered", called torch's doing."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_production:GroupSGD")
    assert ", process_group: {process_group: fsdp}}" in text.split("\nkwargs: ", 1)[1].splitlines()[0], text
    assert "takes a ProcessGroup, not a DeviceMesh" in text
    case = one_case(tmp_path, "optimizer: planted_production:GroupSGD\nkwargs: {lr: 0.05, process_group: {process_group: fsdp}}\n"
                              "checks: [fsdp]\n")
    assert "over DTensor params on 2 ranks" in run_check("fsdp", case)


@pytest.mark.parametrize("value", ["{device_mesh: world}", "{device_mesh: [fsdp]}", "{process_group: world}"])
def test_a_device_mesh_value_names_only_fsdps_mesh(tmp_path, value):
    path = tmp_path / "spec.yaml"
    path.write_text(f"optimizer: planted_production:MeshSGD\nkwargs: {{distributed_mesh: {value}}}\n")
    with pytest.raises(SpecError, match=r"spec.yaml:2.*distributed_mesh.*\{(device_mesh|process_group): \.\.\.\} takes one of fsdp"):
        cases_from(tmp_path, path.read_text())


@needs_fsdp2_on_cpu
def test_a_sharded_step_that_raises_is_fsdps_one_red_and_blocks_checkpoint(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:NumpySGD", checks="[fsdp, checkpoint]"))
    runs = RunCache()
    assert ".numpy() is not supported for tensor subclasses" in failure_of("fsdp", case, runs)
    with pytest.raises(NotApplicable, match=r"blocked by fsdp: the eager step over FSDP2-sharded \(DTensor\) params raised"):
        run_check("checkpoint", case, runs)


@needs_fsdp2_on_cpu
def test_a_state_key_made_after_the_first_step_is_dropped_by_a_dcp_reload(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:LateStateSGD", "{compiled: false}"))
    runs = RunCache()
    assert "equal one process" in run_check("fsdp", case, runs)
    message = failure_of("checkpoint", case, runs)
    assert "state['0.weight']['previous']: missing in loaded at one process" in message
    assert "Create every state key on the first step" in message


@needs_fsdp2_on_cpu
def test_a_save_that_steps_a_stateless_optimizer_is_dcps_doing_and_one_red(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:GroupCountingSGD", "{compiled: false}"))
    runs = RunCache()
    assert "equal one process" in run_check("fsdp", case, runs)
    message = failure_of("checkpoint", case, runs)
    assert "saving changed the optimizer it saved: param_groups[0]['step']: right after saving 4 != before saving 3" in message
    assert "torch's doing (DCP), met by this optimizer" in message and "_init_optim_state" in message
    assert "right after loading" not in message and "resumed at" not in message  # loads as saved, resumes as never stopped


@needs_fsdp2_on_cpu
def test_a_save_that_steps_a_stateless_optimizer_reading_partial_norms_is_still_dcps_doing(tmp_path):
    """thermoclaw's EPTOv5: the save's step changed what it saved, and the red's root cause was "its step
    reads numbers off partial DTensors", which change the groups but not what a save does."""
    from pytest_optimtest.checks.fsdp import PARTIAL_READS
    from pytest_optimtest.harness.blame import KnownCause

    case = one_case(tmp_path, _fsdp("planted_production:GroupCountingNormReadingSGD", "{compiled: false}"))
    runs = RunCache()
    assert "param_groups[0]['last_norm']" in failure_of("fsdp", case, runs)  # each rank's own partial norm
    with pytest.raises(AssertionError) as info:
        run_check("checkpoint", case, runs)
    assert "saving changed the optimizer it saved: param_groups[0]['step']" in str(info.value)
    assert "torch's doing (DCP), met by this optimizer" in str(info.value)
    assert not (isinstance(info.value, KnownCause) and info.value.mechanism == PARTIAL_READS), str(info.value)


@needs_fsdp2_on_cpu
def test_an_error_a_dcp_load_and_a_law_both_raise_is_one_red(pytester):
    """AdaBayes divides by lr: DCP's load at one process steps at lr 0 to create state, and so does the
    param_groups law's zero-lr group; one root cause, one red, the other item blocked by it."""
    result, alone = run_planted_spec(pytester, ("planted.py", "planted_production.py"), "optimizer: planted_production:"
                                     "LrDividingSGD\nkwargs: {lr: 0.05}\nfsdp: {compiled: false}\nlaws: {param_groups: true}\n"
                                     "checks: [law_param_groups, checkpoint]\n")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*blocked by the same error in *: ZeroDivisionError: float division by zero*"])
    # the load, not DCP's save, met lr 0 (the state is there when saving)
    assert re.search(r"loading at one process \(whole params\) raised.*ZeroDivisionError", alone), alone


@needs_fsdp2_on_cpu
def test_a_state_entry_whose_type_follows_its_values_is_named_where_dcps_load_refuses_it(tmp_path):
    """catalyst's Lamb: trust_ratio is a tensor, or the int 1 where a norm is 0 (as on the zero grads DCP makes a fresh
    optimizer's state with): the red gave DCP's planner's words and no cause."""
    message = failure_of("checkpoint", one_case(tmp_path, _fsdp("planted_production:NormRatioSGD", "{compiled: false}")))
    assert "Invalid checkpoint metadata for optim.state.0.weight.ratio" in message, message
    assert ("diagnosis: state 'ratio' of param '0.weight' is a tensor in the checkpoint and a Python value (not a tensor) "
            "in the optimizer made to load it, whose state DCP makes with one step on zero grads at lr 0") in message, message
    assert "the optimizer's doing (keep each state entry one type" in message


def test_state_saved_as_a_list_is_read_by_the_load_diagnoses():
    """fastai's Optimizer (no torch.optim.Optimizer) saves its per-param state as a list: state_dict's probe for state
    torch's load rebuilds took it for torch.optim's {index: entry} and raised inside the plugin ("a bug of ours")."""
    from collections import deque

    from pytest_optimtest.harness.diagnosis import state_load_rebuilds, strings_lost_on_load

    assert state_load_rebuilds([{"mode": "diag"}]) and state_load_rebuilds([{"h": deque(maxlen=3)}])
    assert not state_load_rebuilds([{"m": torch.zeros(2)}]) and not state_load_rebuilds(None)
    assert strings_lost_on_load({"state": [{"mode": "diag"}]}, {"state": [{"mode": "x"}]}) == [
        "state[0]['mode']: 'diag' came back as 'x'"]


def test_an_error_zeros_ranks_and_a_law_both_raise_is_one_red(pytester):
    """fastai's Optimizer keys its groups' hyperparameters by the groups it was given: over dict groups its step
    raises, on ZeRO's ranks and in law group_hyperparameters alike; each was a red of its own."""
    for module in ("planted.py", "planted_production.py"):
        shutil.copy(Path(__file__).parent / module, pytester.path / module)
    pytester.makefile(".yaml", s="optimizer: planted_production:ListGroupsSGD\nkwargs: {lr: 0.05}\ndevices: [cpu]\n"
                      "laws: {}\nchecks: [zero, law_group_hyperparameters]\n")
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rfs")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["optimtest: planted_production:ListGroupsSGD: 1 root cause, 1 red in 1 case(s), blocks 1 items:*",
                                 "*blocked by the same error in *unhashable type: 'dict'*"])


@needs_fsdp2_on_cpu
def test_state_made_in_the_constructor_is_named_where_dcp_drops_the_rest(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:ConstructorSeedMomentumSGD", "{compiled: false}"))
    message = failure_of("checkpoint", case)
    assert "state['0.weight']['momentum_buffer']: missing in loaded at one process" in message
    assert "the optimizer's doing: it holds state before its first step (0.weight: seed" in message
    assert "Create every state key on the first step" not in message


@needs_fsdp2_on_cpu
def test_state_made_for_one_param_before_any_step_is_the_optimizers_doing_where_dcps_strict_load_raises(tmp_path):
    case = one_case(tmp_path, _fsdp("planted_production:FirstParamStateSGD", "{compiled: false}"))
    message = failure_of("checkpoint", case)  # GPAAdamW: this red said "torch's doing"
    # DCP's strict load says so from torch 2.10; before, it raised a bare KeyError of the param's name
    assert re.search(r"loading at one process \(whole params\) raised: (RuntimeError: Missing optimizer state for "
                     r"parameter '0\.bias'|KeyError: '0\.bias')", message), message
    assert "(the optimizer's doing, though torch raised it: see the diagnosis)" in message and "(torch's doing)" not in message
    assert "the optimizer's doing: it holds state before its first step (0.weight: calls)" in message


def test_dcps_missing_state_is_its_message_or_before_2_10_a_key_error_in_its_split():
    def _split_optim_state_dict(state: dict[str, int]) -> int:  # torch < 2.10 indexed the loaded state by name
        return state["0.bias"]

    def elsewhere(state: dict[str, int]) -> int:
        return state["0.bias"]

    def raised(function: Callable[[dict[str, int]], int]) -> BaseException:
        with pytest.raises(KeyError) as info:
            function({})
        return info.value

    assert torch_api.dcp_missing_state(raised(_split_optim_state_dict))
    assert not torch_api.dcp_missing_state(raised(elsewhere))
    assert torch_api.dcp_missing_state(RuntimeError("Missing optimizer state for parameter '0.bias' in checkpoint."))
    assert not torch_api.dcp_missing_state(KeyError("0.bias"))  # never raised: no frame to say where


@needs_fsdp2_on_cpu
def test_state_kept_as_a_state_tensors_grad_is_named_where_a_dcp_resume_differs(tmp_path):
    """adancfgd's AdaFGD keeps the last grad as `state['param_prev'].grad`: DCP saves values, not attributes, so
    the resumed run steps with the grad its load-time init step left (zeros), a red that said no why."""
    case = one_case(tmp_path, _fsdp("planted_unseen:GradAttributeSGD", "{compiled: false}"))
    message = failure_of("checkpoint", case)
    assert "resumed at one process (whole params), 3 steps on: param['0.weight']" in message, message
    assert "diagnosis: the optimizer keeps state as attributes of its state tensors (state['prev'].grad of 0.weight, " \
           "state['prev'].grad of 0.bias, state['prev'].grad of 1.weight, ...), and torch.distributed.checkpoint saves " \
           "a tensor's values, not its attributes" in message, message


def test_tensor_attributes_names_a_state_tensors_grad_and_python_attributes_only():
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    optimizer = GradAttributeSGD([p, q], lr=0.1)
    p.grad, q.grad = torch.ones(2), torch.ones(3)
    optimizer.step()
    optimizer.state[q]["prev"].grad = None
    optimizer.state[q]["prev"].note = "kept here"
    assert snapshot(optimizer, {p: "p", q: "q"}).tensor_attributes == ("state['prev'].grad of p", "state['prev'].note of q")
    plain = torch.optim.Adam([p], lr=0.1)
    plain.step()
    assert snapshot(plain, {p: "p"}).tensor_attributes == ()


# The crash is seen when rank 1 exits, so its timeout only bounds a slow start: 15 s was not enough under a
# loaded suite on torch 2.15 (both ranks still starting); the hang waits out its timeout whatever the load.
@needs_fsdp2_on_cpu
@pytest.mark.parametrize("optimizer, timeout_s, says", [("CrashOnRank1", 120, r"rank 1 failed \(exit code 3\)"),
                                                        ("HangOnRank1", 15, r"did not finish within 15s")])
def test_a_crashed_or_hung_rank_fails_the_fsdp_item_and_leaves_no_process(tmp_path, optimizer, timeout_s, says):
    case = one_case(tmp_path, _fsdp(f"planted:{optimizer}", checks="[fsdp]") + f"distributed: {{timeout_s: {timeout_s}}}\n")
    with pytest.raises(RankFailure, match=says) as info:
        run_check("fsdp", case)
    for pid in info.value.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@needs_fsdp2_on_cpu
def test_gradients_fsdp2_summed_are_torchs_one_red_not_the_optimizers(tmp_path):
    # torch 2.8's FSDP2 on gloo sums the ranks' gradients: before this rung, every optimizer's fsdp and
    # checkpoint items were red with "whose doing: the optimizer's"
    case = one_case(tmp_path, _fsdp("torch.optim.Adam", "{compiled: false}", "[fsdp, checkpoint]")
                    + "model: planted_production:summed_grads\n")
    runs = RunCache()
    message = failure_of("fsdp", case, runs)
    assert "FSDP2 gave the optimizer other gradients on 2 gloo ranks than one process gives it, before the optimizer's " \
           "first step (they are 2x the one-process grads, the world size: the ranks' gradients were summed" in message
    assert "'s doing (FSDP2's gradient reduction)" in message and "grad['0.weight']" in message
    with pytest.raises(NotApplicable, match="blocked by fsdp: FSDP2 gave the optimizer other gradients"):
        run_check("checkpoint", case, runs)


@needs_fsdp2_on_cpu
def test_a_model_fully_shard_refuses_is_not_the_optimizers_failure(tmp_path):
    case = one_case(tmp_path, _fsdp("torch.optim.SGD", checks="[fsdp]") + "model: planted_production:scalar_scale\n")
    with pytest.raises(NotApplicable, match="fully_shard refuses the spec's model planted_production:scalar_scale"):
        run_check("fsdp", case)


def test_fsdp_runs_the_first_case_unless_named(tmp_path):
    text = "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\ncases: [{name: a}, {name: b}]\n"
    assert [c.id for c in cases_from(tmp_path, text) if "fsdp" in c.checks] == ["sgd-a-cpu"]
    named = [c.id for c in cases_from(tmp_path, text + "fsdp: {cases: [b]}\n") if "checkpoint" in c.checks]
    assert named == ["sgd-b-cpu"]


def test_init_raises_its_bf16_lr_until_the_laws_params_move_too(tmp_path):
    """The laws step params of randn magnitude, where bf16's relative tolerance is widest: at Adam's
    default lr 0.001 they move about 4 tolerances in 7 steps and the laws call themselves vacuous."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("torch.optim:Adam")
    case = next(c for c in cases_from(tmp_path, text) if c.dtype == "bfloat16" and "law_equivalent" in c.checks)
    assert case.kwargs["lr"] > 1e-3
    assert "agree step by step" in run_check("law_equivalent", case)
    run_check("law_param_groups", case)


class QuantizedState(torch.Tensor):
    """A wrapper tensor subclass that, like torchao's 8-bit optimizer state, has no storage of its
    own and implements only detach: clone raises NotImplementedError."""

    @staticmethod
    def __new__(cls, values):
        return torch.Tensor._make_wrapper_subclass(cls, values.shape, dtype=values.dtype)

    def __init__(self, values):
        self.values = values

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:
            return args[0]
        raise NotImplementedError(f"QuantizedState: {func}")

    def dequantize(self):
        return self.values.clone()


def test_state_a_tensor_subclass_cannot_clone_is_compared_by_its_values_and_has_no_storage_to_alias():
    from pytest_optimtest.harness.snapshot import storage_aliases
    from pytest_optimtest.harness.snapshot import frozen_tensor

    values = torch.randn(3, 2)
    state = QuantizedState(values)
    assert torch.equal(frozen_tensor(state), values) and type(frozen_tensor(state)) is torch.Tensor
    model = torch.nn.Linear(2, 3, bias=False)
    model.weight.grad = torch.zeros_like(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.state[model.weight]["exp_avg"] = state
    assert storage_aliases(optimizer, model) == set()


@pytest.mark.parametrize("check", ["fsdp", "checkpoint"])
def test_a_torch_whose_cpu_stream_records_no_events_skips_fsdp_saying_why(tmp_path, monkeypatch, check):
    from pytest_optimtest.harness import torch_api

    monkeypatch.setattr(torch_api, "fsdp2_runs_on_cpu", lambda: False)  # torch 2.6: FSDP2 raises in foreach_all_gather
    case = next(c for c in cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n") if check in c.checks)
    with pytest.raises(NotApplicable, match=r"FSDP2 cannot shard on CPU in torch .*torch.cpu.Stream"):
        CHECKS[check].run(case, RunCache())
