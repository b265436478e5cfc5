"""The distributed and zero checks: real ranks (gloo on CPU), planted rank faults, teardown."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import cases_from, needs_fsdp2_on_cpu, one_case, run_planted_spec
from warm import run_pytest

from pytest_optimtest.checks import CHECKS, NotApplicable
from pytest_optimtest.harness.ranks import RankFailure, RankJob, RankPools
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.vacuity import Diverged, Vacuous, require_beyond_amplified_rounding
from pytest_optimtest.spec import SpecError


def run(check, case, runs=None):
    return CHECKS[check].run(case, runs or RunCache())


def failure(check, case, runs=None) -> AssertionError:
    with pytest.raises(AssertionError) as info:
        run(check, case, runs)
    return info.value


def spec(optimizer, kwargs="{lr: 0.1}", distributed="{}", checks="[distributed, zero]"):
    return f"optimizer: {optimizer}\nkwargs: {kwargs}\ndistributed: {distributed}\nchecks: {checks}\n"


def test_adam_with_a_scheduler_matches_ddp_and_zero(tmp_path):
    (case,) = [c for c in cases_from(tmp_path, """
optimizer: torch.optim.Adam
cases:
  - name: tensor_lr
    kwargs: {lr: {tensor: 0.01}}
    schedulers: true
schedulers:
  OneCycleLR: {max_lr: 0.02, cycle_momentum: false, steps_per_epoch: 1, epochs: 10}
checks: [distributed, zero]
""")]
    assert case.id == "adam-tensor_lr-onecyclelr-cpu" and case.checks == ("distributed", "zero")
    runs = RunCache()
    assert "DDP on 2 gloo ranks" in run("distributed", case, runs)
    assert "loads into a plain optimizer" in run("zero", case, runs)
    assert runs.cases_run == 1  # one set of ranks feeds both checks


def test_rank_dependent_update_is_reported(tmp_path):
    case = one_case(tmp_path, spec("planted:RankNoiseSGD", checks="[distributed]"))
    message = str(failure("distributed", case))
    assert "rank 1 vs rank 0: param" in message
    assert "unseeded generator" in message


def test_global_random_draws_are_consistent_across_seeded_ranks(tmp_path):
    # NoisySGD draws from torch's default generator, which every rank seeds alike: no rank fault, and
    # eager DDP matches one process. The one-process compiled run draws differently (inductor's RNG):
    # parity's red, so DDP's compiled half is blocked by it, not a second red.
    case = one_case(tmp_path, spec("planted:NoisySGD", checks="[distributed]"))
    with pytest.raises(NotApplicable, match="differs from eager already .* eager DDP on 2 ranks matches one process"):
        CHECKS["distributed"].run(case, RunCache())


def test_compiled_only_drift_is_parities_red_not_ddps(tmp_path):
    case = one_case(tmp_path, spec("planted:CompiledOnlyDrift", checks="[distributed]"))
    with pytest.raises(NotApplicable, match=r"in one process the compiled train step \(forward, backward and step\) differs from "
                                            r"eager already \(\d+ params\): no compiled reference for DDP's"):
        CHECKS["distributed"].run(case, RunCache())


def test_zero_catches_an_optimizer_that_couples_params(tmp_path):
    # Clipping by the norm of every grad in the optimizer: ZeRO's shards each see only their own.
    case = one_case(tmp_path, spec("planted:ItemClipSGD", checks="[zero]"))
    assert "ZeRO vs unsharded on rank" in str(failure("zero", case))


def test_zero_is_vacuous_where_the_optimizer_rounds_otherwise_beside_same_shaped_params_and_red_where_it_couples_them(tmp_path):
    """microsoft/dion's Muon stacks same-shaped matrices into one compiled bf16 Newton-Schulz: ZeRO, whose shards
    hold one matrix each, was red at float32's tolerance, "the optimizer's doing", with no diagnosis."""
    with pytest.raises(Vacuous, match=r"vacuous: not comparable with the unsharded optimizer at the case's tolerance, its "
                                      r"arithmetic rounds otherwise beside params of the same shape(.|\n)*ZeRO vs unsharded"):
        CHECKS["zero"].run(one_case(tmp_path, spec("planted_unseen:ShapeBatchedSGD", checks="[zero]")), RunCache())
    (tmp_path / "coupled").mkdir()
    message = str(failure("zero", one_case(tmp_path / "coupled", spec("planted_unseen:ShapeStackNormSGD", checks="[zero]"))))
    assert "beside a param of its shape differs with that param's values" in message, message


def test_zero_leaves_the_dtype_cast_to_state_dicts_red_and_reports_the_rest(tmp_path):
    """GPAAdamW: a bool flag on the group's first param; zero's red listed torch's cast of it, state_dict's red too."""
    case = one_case(tmp_path, spec("planted_production:FirstParamFlagSGD", checks="[state_dict, zero]"))
    assert "'flag']: dtype torch.float32 != reference torch.bool" in str(failure("state_dict", case))
    message = str(failure("zero", case))
    assert "(less 1 dtype cast(s) by torch's load_state_dict, state_dict's red)" in message, message
    assert "['flag']: only in loaded run" in message and "dtype torch.float32" not in message, message


def test_an_optimizer_refusing_what_zero_hands_it_is_zeros_one_red_and_ddp_still_runs(tmp_path):
    # RMSGD: ZeRO hands the class param groups, whose `requires_grad` it reads; the ranks crashed, both items red
    case = one_case(tmp_path, spec("planted_unseen:NoGroupsSGD"))
    runs = RunCache()
    assert run("distributed", case, runs)
    message = str(failure("zero", case, runs))
    assert "ZeroRedundancyOptimizer(optimizer_class=planted_unseen:NoGroupsSGD) on 2 ranks raised building it: " \
           "AttributeError: 'dict' object has no attribute 'requires_grad'" in message
    assert "planted_unseen.py" in message and "(optimizer's doing)" in message


def test_a_step_that_raises_only_under_zero_is_zeros_one_red_and_ddp_still_runs(tmp_path):
    # truegrad's Sign: ZeRO's ranks raised while training, which failed the rank job that ran DDP too, so the
    # distributed check was red with ZeRO's error (called torch's) instead of its own verdict
    case = one_case(tmp_path, spec("planted_unseen:WholeModelOnlySGD"))
    runs = RunCache()
    assert run("distributed", case, runs)
    message = str(failure("zero", case, runs))
    assert "ValueError: WholeModelOnlySGD needs all 4 params of the model" in message and "planted_unseen.py" in message


def test_a_blow_up_that_amplifies_ddps_reduction_order_is_diverged_not_red(tmp_path):
    # OptiRoulette's SGD pick grew 2.6, 569, 2e9 over DDP's three steps: the grads DDP averages over ranks
    # round otherwise than one process's, the growth amplifies that, and DDP was red at 1e-7 of the scale.
    # The reference now sums the shards' grads as DDP does; the compiled one-process run still rounds its own
    case = one_case(tmp_path, spec("torch.optim.SGD", kwargs="{lr: 0.3, momentum: 0.9}", checks="[distributed]"))
    with pytest.raises(Diverged, match=r"grew \S+x over 3 one-process eager train steps, which amplifies a rounding "
                                       r"difference .* within eps x growth"):
        run("distributed", case)


def test_amplified_rounding_excuses_only_a_difference_within_eps_times_the_growth():
    initial = {"w": torch.ones(3)}
    grown = {"w": torch.tensor([1e6, -2e6, 3e5])}
    rounded = {"w": grown["w"] * (1 + 1e-5)}  # 1e-5 of the scale, within eps (1.2e-7) x growth (2e6)
    with pytest.raises(Diverged, match="grew 2e\\+06x"):
        require_beyond_amplified_rounding("c", initial, [(grown, rounded)], "over 3 steps")
    wrong = {"w": grown["w"] * 1.5}  # half the scale: the optimizer's arithmetic, whatever the growth
    require_beyond_amplified_rounding("c", initial, [(grown, rounded), (grown, wrong)], "over 3 steps")
    barely = {"w": torch.tensor([10.0, -20.0, 3.0])}  # grew 20x: rounding stays near an ulp, so any difference counts
    require_beyond_amplified_rounding("c", initial, [(barely, {"w": barely["w"] * (1 + 1e-6)})], "over 3 steps")
    require_beyond_amplified_rounding("c", initial, [], "over 3 steps")  # nothing differs: nothing to excuse


def test_an_optimizer_that_regroups_its_params_is_named_when_zero_refuses_it(tmp_path):
    # gefen's Gefen makes a group per param: ZeRO's "Mismatch between number of source and destination parameter
    # groups" was called torch's doing
    case = one_case(tmp_path, spec("planted_unseen:GroupPerParamSGD", checks="[zero]"))
    message = str(failure("zero", case))
    assert "Mismatch between number of source and destination parameter groups, raised in ZeroRedundancyOptimizer" in message
    assert "diagnosis: GroupPerParamSGD makes 4 param groups of the 1 it is given" in message and "the optimizer's doing" in message
    assert "torch's doing" not in message, message


def test_an_optimizer_that_sets_its_own_lr_is_named_when_zero_steps_otherwise(tmp_path):
    # OptiRoulette scales the lr of the optimizer it picks; ZeRO writes the given lr back: "ZeRO vs unsharded", unexplained
    case = one_case(tmp_path, spec("planted_unseen:SelfScalingSGD", kwargs="{lr: 0.01}", checks="[zero]"))
    message = str(failure("zero", case))
    assert "ZeRO vs unsharded on rank 0" in message
    assert "diagnosis: the optimizer's groups end with other hyperparameters unsharded than under ZeRO (group 0 lr: " \
           "unsharded 0.1, ZeRO 0.01)" in message, message


def test_a_state_dict_zero_cannot_consolidate_is_zeros_one_red_said_the_optimizers_and_ddp_still_runs(tmp_path):
    # Magma's state_dict holds its base's under a key of its own: ZeRO's KeyError killed both items' ranks, "torch's doing"
    case = one_case(tmp_path, "optimizer: planted_run_model:MaskingWrapper\nparams: wrapped\n"
                              'kwargs: {optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.1}}}\n')
    runs = RunCache()
    assert run("distributed", case, runs)
    message = str(failure("zero", case, runs))
    assert "on 2 ranks raised saving its consolidated state_dict on rank 0: KeyError: 'param_groups'" in message, message
    assert "MaskingWrapper.state_dict() holds ['base', 'steps']: its state_dict is not torch.optim's" in message, message
    assert "(torch's doing)" not in message  # ZeRO's frame raised the KeyError, over the optimizer's state_dict


@needs_fsdp2_on_cpu
def test_a_state_dict_zero_and_dcp_cannot_read_is_one_red_said_the_optimizers(pytester):
    """Lookahead's state_dict is {'optimizer', 'lookahead', ...}: ZeRO's KeyError 'param_groups' and DCP's
    KeyError 'state' (which DCP's red called torch's doing) are one root cause, the optimizer's."""
    result, alone = run_planted_spec(pytester, ("planted.py", "planted_run_model.py"), "optimizer: planted_run_model:"
                                     "NestedStateDictSGD\nkwargs: {lr: 0.05}\nfsdp: {compiled: false}\nchecks: [zero, checkpoint]\n")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*blocked by the same error in zero: its state_dict is not torch.optim's*"])
    told = alone
    assert "diagnosis: NestedStateDictSGD.state_dict() holds ['optimizer', 'settings']: its state_dict is not" in told
    assert "(torch's doing)" not in told


def test_a_step_that_swaps_its_params_storage_is_one_red_naming_it_in_every_regime_that_holds_storage(pytester):
    # truegrad's Sign `p.set_(o)`s each param: DDP's replicas drift apart, ZeRO's DDP reducer stalls and the
    # in-backward run differs; three reds without a word of why, one root cause
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    pytester.makefile(".yaml", s="optimizer: planted_unseen:StorageSwapSGD\nkwargs: {lr: 0.01}\n"
                                 "checks: [in_backward, distributed, zero]\n")
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rfs",
                                           "--optim-report", "r.json")
    result.assert_outcomes(failed=1, skipped=2)
    out = result.stdout.str()
    assert "the optimizer's eager step replaces the storage of 4 param(s) (0.weight, 0.bias, 1.weight, ...) with " \
           "`p.set_()` or `p.data = ...`" in out, out
    assert out.count("blocked by the same cause in in_backward: its step replaces its params' storage") == 2, out
    report = json.loads((pytester.path / "r.json").read_text())
    kinds = sorted(r["verdict"]["kind"] for r in report["items"])
    assert kinds == ["blocked", "blocked", "root_cause"], kinds


def test_crashed_rank_fails_at_once_and_leaves_no_process(tmp_path):
    case = one_case(tmp_path, spec("planted:CrashOnRank1", distributed="{timeout_s: 600}", checks="[distributed]"))
    error = failure("distributed", case)
    assert isinstance(error, RankFailure)
    assert "rank 1 failed (exit code 3)" in str(error)  # not the 600 s timeout: the others were killed
    _assert_gone(error.pids)


def test_ranks_that_die_together_are_each_named():
    pools = RankPools()
    with pytest.raises(RankFailure) as failed:
        pools.run(RankJob("planted:every_rank_exits", 3, 2, "gloo", 60))
    # each named with its own exit code, whichever the harness polled first (the ranks take the job at their own pace)
    assert re.search(r"rank 0 failed.*\(exit code 3\)", str(failed.value)), str(failed.value)
    assert re.search(r"rank 1 failed.*\(exit code 4\)", str(failed.value)), str(failed.value)
    _assert_gone(failed.value.pids)


def test_a_rank_killed_by_a_signal_is_told_with_the_signal_and_the_line_it_was_running():
    # DeepSpeed's CPU Adam under FSDP2: "rank 0 failed (exit code -11)", the line only deep in the log's tail
    pools = RankPools()
    with pytest.raises(RankFailure) as failed:
        pools.run(RankJob("planted:rank_segfault", None, 2, "gloo", 120))
    assert re.search(r"rank 1 failed \(killed by signal SIGSEGV \(exit code -11\) at \S*planted\.py:\d+ in rank_segfault\)",
                     str(failed.value)), str(failed.value)
    _assert_gone(failed.value.pids)


def test_a_ranks_job_that_raises_is_told_with_its_line_and_whose_doing():
    pools = RankPools()
    with pytest.raises(RankFailure) as failed:
        pools.run(RankJob("planted:rank_raise", None, 2, "gloo", 60))
    # Lookahead's and Magma's DDP steps raised on the ranks: the failure was the ranks' logs, no owner
    assert re.search(r"rank 1 failed \(exit code 1\): its job raised KeyError: 'momentun'\n\s+raised at \S*planted\.py:\d+ in "
                     r"_update \(optimizer's doing\)", str(failed.value)), str(failed.value)
    _assert_gone(failed.value.pids)


def test_a_rank_that_fails_outside_its_job_says_whose_doing_not_the_optimizers(monkeypatch):
    """A rank that died loading its job (an edit of the plugin's files mid-run: an ImportError in its own
    checks) was red "the optimizer's, by this check's verdict"."""
    ghost = types.ModuleType("ghost_module_of_this_process")
    ghost.Payload = type("Payload", (), {"__module__": ghost.__name__})
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)  # picklable here; the ranks cannot import it
    pools = RankPools()
    with pytest.raises(RankFailure) as failed:
        pools.run(RankJob("planted:rank_pid", ghost.Payload(), 2, "gloo", 60))
    assert re.search(r"rank \d failed \(exit code 1\): it raised outside its job, at \S*rank_worker\.py:\d+ in main: pytest-optimtest's "
                     r"doing \(a bug of ours", str(failed.value)), str(failed.value)
    _assert_gone(failed.value.pids)


def test_hung_rank_times_out_and_leaves_no_process(tmp_path):
    case = one_case(tmp_path, spec("planted:HangOnRank1", distributed="{timeout_s: 15}", checks="[distributed]"))
    error = failure("distributed", case)
    assert isinstance(error, RankFailure)
    assert "did not finish within 15s" in str(error)
    if hasattr(signal, "SIGUSR1"):  # asked for its stack before the kill: where it hung, in the optimizer's code
        assert re.search(r"rank 1 was at \S*planted\.py:\d+ in _update \(the optimizer's code\)", str(error)), str(error)
    _assert_gone(error.pids)


def test_a_session_keeps_its_ranks_until_a_job_fails():
    pools, job = RankPools(), RankJob("planted:rank_pid", None, 2, "gloo", 60)
    first = pools.run(job)
    assert [total for _, total in first] == [1, 1]
    assert pools.run(job) == first  # the same processes, still in one group
    with pytest.raises(RankFailure, match=r"rank 1 failed \(exit code 3\)"):
        pools.run(RankJob("planted:rank_exit", 3, 2, "gloo", 60))
    _assert_gone([pid for pid, _ in first])  # a failed job ends its pool
    fresh = pools.run(job)
    assert {pid for pid, _ in fresh}.isdisjoint(pid for pid, _ in first)
    pools.close()
    _assert_gone([pid for pid, _ in fresh])


def test_ranks_compile_in_process_unless_the_user_says_otherwise(monkeypatch):
    # a torch with Triton would otherwise start a compile process per core in each rank of each xdist worker
    job = RankJob("planted:rank_compile_threads", None, 2, "gloo", 60)
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    pools = RankPools()
    assert pools.run(job) == [1, 1]
    pools.close()
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    pools = RankPools()
    assert pools.run(job) == [2, 2]
    pools.close()


def test_the_suite_compiles_in_process():
    # conftest.py sets it before anything imports inductor, which reads it once
    import torch._inductor.config

    assert torch._inductor.config.compile_threads == int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])


def _assert_gone(pids):
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cuda_case_needs_a_gpu_per_rank(tmp_path):
    (case,) = [c for c in cases_from(tmp_path, spec("torch.optim.SGD") + "devices: [cuda]\n")]
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 GPUs")
    with pytest.raises(NotApplicable, match="needs 2 CUDA devices"):
        run("distributed", case)


def test_distributed_cases_default_to_the_first_and_scheduler_variants_come_along(tmp_path):
    cases = cases_from(tmp_path, """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
    schedulers: true
schedulers:
  StepLR: {step_size: 1}
closure: [false, true]
""")
    with_distributed = [c.id for c in cases if "distributed" in c.checks]
    assert with_distributed == ["sgd-default-cpu"]
    cases = cases_from(tmp_path, """
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
    schedulers: true
schedulers:
  StepLR: {step_size: 1}
distributed: {cases: [momentum]}
""")
    assert [c.id for c in cases if "zero" in c.checks] == ["sgd-momentum-steplr-cpu"]


@pytest.mark.parametrize("section, where, says", [
    ("{cases: [defualt]}", "distributed.cases[0]", "did you mean 'default'"),
    ("{batch: 7}", "distributed", "does not split evenly across world_size 2"),
    ("{world_size: 1}", "distributed.world_size", "greater than or equal to 2"),
])
def test_bad_distributed_section_names_line_and_key(tmp_path, section, where, says):
    with pytest.raises(SpecError) as info:
        cases_from(tmp_path, f"optimizer: torch.optim.SGD\nkwargs: {{lr: 0.1}}\ndistributed: {section}\n")
    text = str(info.value)
    assert "spec.yaml:3" in text and where in text and says in text


def test_xdist_workers_run_ranks_side_by_side(pytester):
    # Two 2-rank runs on two xdist workers at once (a case each): the store binds port 0, so ports never collide.
    pytester.makefile(".yaml", sgd="""
optimizer: torch.optim.SGD
kwargs: {lr: 0.1}
cases:
  - name: default
  - name: momentum
    kwargs: {momentum: 0.9}
distributed: {cases: [default, momentum], iterations: 2}
checks: [distributed]
""")
    result = pytester.runpytest_subprocess("--optim-spec", "sgd.yaml", "-n", "2", "-p", "no:randomly", "--optim-report", "r.json")
    result.assert_outcomes(passed=2)
    assert len({r["worker"] for r in json.loads((pytester.path / "r.json").read_text())["items"]}) == 2  # side by side


class _Store:
    """A process group store's set/wait, in one process."""

    def __init__(self, times_out: bool = False) -> None:
        self.keys: dict[str, str] = {}
        self.waited: list[str] = []
        self.times_out = times_out

    def set(self, key, value):
        self.keys[key] = value

    def wait(self, keys, timeout):
        self.waited.extend(keys)
        if self.times_out or not all(k in self.keys for k in keys):
            raise RuntimeError("Socket Timeout")


def _ordered(monkeypatch, store, compile_fx, cache_hits=lambda: 0):
    from pytest_optimtest.harness import rank_compile, torch_api

    monkeypatch.setattr(torch_api, "process_group_store", lambda: store)
    monkeypatch.setattr(torch_api, "inductor_backend", lambda: compile_fx)
    monkeypatch.setattr(torch_api, "compile_cache_hits", cache_hits)
    monkeypatch.setattr(rank_compile, "_waiting", rank_compile._Waiting())  # what this process learned: none yet
    return rank_compile


def test_rank_ordered_inductor_compiles_each_graph_on_rank_zero_first(monkeypatch):
    store, compiled = _Store(), []
    hits = lambda: len(compiled) - len(set(compiled))  # noqa: E731  # a graph compiled before is found in the cache
    rank_compile = _ordered(monkeypatch, store, lambda graph, inputs: compiled.append(graph) or f"compiled {graph}", hits)
    zero, one = rank_compile.rank_ordered_inductor(0, "run"), rank_compile.rank_ordered_inductor(1, "run")
    assert [zero("g0", []), zero("g1", [])] == ["compiled g0", "compiled g1"]
    assert set(store.keys) == {"optimtest-compiled/run/0", "optimtest-compiled/run/1"} and not store.waited
    assert [one("g0", []), one("g1", [])] == ["compiled g0", "compiled g1"]  # after rank 0's: inductor's cache has them
    assert store.waited == ["optimtest-compiled/run/0", "optimtest-compiled/run/1"]
    assert compiled == ["g0", "g1", "g0", "g1"]


def test_a_rank_stops_waiting_for_rank_zero_once_its_graph_missed_the_cache_all_the_same(monkeypatch):
    """torch 2.13 keys a DTensor graph by each rank's DeviceMesh: every rank misses, and waiting
    would only queue the ranks' full compiles one after another."""
    store = _Store()
    rank_compile = _ordered(monkeypatch, store, lambda graph, inputs: f"compiled {graph}")  # no compile ever hits
    zero, one = rank_compile.rank_ordered_inductor(0, "run"), rank_compile.rank_ordered_inductor(1, "run")
    zero("g0", []), zero("g1", [])
    assert [one("g0", []), one("g1", [])] == ["compiled g0", "compiled g1"]
    assert store.waited == ["optimtest-compiled/run/0"]
    assert rank_compile.rank_ordered_inductor(1, "next run")("g0", []) == "compiled g0" and len(store.waited) == 1


def test_rank_ordered_inductor_compiles_anyway_when_rank_zero_never_compiles_the_graph(monkeypatch):
    store = _Store(times_out=True)
    rank_compile = _ordered(monkeypatch, store, lambda graph, inputs: "compiled")
    assert rank_compile.rank_ordered_inductor(1, "run", wait_s=0.01)("g", []) == "compiled"


def test_rank_zero_releases_the_others_when_its_compile_raises(monkeypatch):
    store = _Store()

    def broken(graph, inputs):
        raise RuntimeError("inductor failed")

    rank_compile = _ordered(monkeypatch, store, broken)
    with pytest.raises(RuntimeError, match="inductor failed"):
        rank_compile.rank_ordered_inductor(0, "run")("g", [])
    assert store.keys == {"optimtest-compiled/run/0": "done"}


def test_ddps_reference_sums_the_shards_grads_as_ddp_does(tmp_path):
    # gradient_ascent's update amplifies a last-bit difference in a nearly vanishing grad: against a
    # one-process backward over the whole batch, DDP's grads (the shards' summed) were a red of 8e-5
    case = one_case(tmp_path, spec("planted_unseen:LastBitSGD", kwargs="{lr: 0.01}", checks="[distributed]"))
    try:
        verdict = run("distributed", case)
    except NotApplicable as exc:  # the compiled one-process run may round its own grads otherwise: not DDP's to judge
        assert "eager DDP on 2 ranks matches one process" in str(exc)
    else:
        assert "DDP on 2 gloo ranks" in str(verdict)


def test_a_difference_within_what_one_ulp_grows_into_is_not_comparable():
    from pytest_optimtest.harness.vacuity import Vacuous, require_beyond_amplified_ulp

    reference = {"w": torch.tensor([1.0, 2.0, 3.0])}
    nudged = {"w": torch.tensor([1.0, 2.0 + 2e-4, 3.0])}  # one ulp after step 1 grew to 2e-4 by the last
    with pytest.raises(Vacuous, match=r"differ by at most 6.\d+e-05, and the one-process run itself moves by 0.0002"):
        require_beyond_amplified_ulp("c", reference, nudged, {"w": torch.tensor([1.0, 2.0 + 6.8e-5, 3.0])}, "over 3 steps")
    # beyond the margin: a fault, whatever the rounding
    require_beyond_amplified_ulp("c", reference, nudged, {"w": torch.tensor([1.0, 2.0 + 1e-3, 3.0])}, "over 3 steps")
    require_beyond_amplified_ulp("c", reference, reference, {"w": torch.tensor([1.0, 2.0 + 1e-6, 3.0])}, "over 3 steps")


def test_the_nudged_reference_shows_how_much_the_update_amplifies_one_ulp(tmp_path):
    # gradient_ascent's compiled step over DTensor params differed from one process by 7e-5 at one element, and the
    # red blamed torch.compile; one ulp nudged into the params after the first step grows as large there
    from pytest_optimtest.harness.fsdp_run import train_whole

    def spread(optimizer):
        folder = tmp_path / optimizer.split(":")[1]
        folder.mkdir()
        case = one_case(folder, spec(optimizer, kwargs="{lr: 0.01}", checks="[fsdp]"))
        batches = [torch.randn(8, 10) for _ in range(3)]
        plain, nudged = train_whole(case, batches), train_whole(case, batches, nudged=True)
        return max(float((plain.params[n] - nudged.params[n]).abs().max()) for n in plain.params)

    assert spread("planted:PlainSGD") < 1e-6  # SGD carries an ulp as an ulp
    assert spread("planted_unseen:LastBitSGD") > 1e-5  # a step that reads the grads' last bit amplifies it
