"""The one runner: what a run records, for each part of a Regime."""

from __future__ import annotations

import pytest
import torch
from helpers import one_case, run_check

from pytest_optimtest.harness import torch_api
from pytest_optimtest.harness.compare import snapshot_differences
from pytest_optimtest.harness.isolation import steps_kept
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.runner import Regime, run
from pytest_optimtest.harness.vacuity import NotApplicable

SPEC = """
optimizer: {optimizer}
kwargs: {kwargs}
"""


def case_of(tmp_path, optimizer="torch.optim.Adam", kwargs="{lr: 0.01}"):
    return one_case(tmp_path, SPEC.format(optimizer=optimizer, kwargs=kwargs))


def test_an_eager_run_records_a_snapshot_a_step_and_keeps_no_param_alive(tmp_path):
    case = case_of(tmp_path)
    result = run(case, Regime(steps=3, every_step=True))
    assert result.steps == 3 and len(result.snapshots) == 3
    assert result.moved and result.failure is None and result.draws == ()
    assert result.graphs == 0 and result.not_compiled() is None  # eager: nothing to compile, nothing missing
    assert all(int(s["step"]) == 3 for s in result.final.state.values())
    assert result.param_refs and result.params_alive() == 0


def test_a_compiled_run_counts_the_closures_graphs_apart_from_the_steps(tmp_path):
    case = case_of(tmp_path)
    plain = run(case, Regime(compiled=True, steps=2))
    with_closure = run(case, Regime(compiled=True, closure=True, closure_graph_break=True, steps=2))
    assert plain.step_graphs >= 1 and plain.closure.graphs == 0
    assert with_closure.closure.graphs >= 1 and with_closure.closure_calls == 2
    assert with_closure.step_graphs >= 1 and with_closure.graph_breaks
    assert snapshot_differences(run(case, Regime(steps=2)).final, plain.final, case.tolerance) == []


def test_missing_grads_leave_those_params_alone_at_that_step(tmp_path):
    case = case_of(tmp_path, "torch.optim.SGD", "{lr: 0.1}")
    result = run(case, Regime(missing_grads=((), "all", (0,)), every_step=True))
    first, second, third = (s.params for s in result.snapshots)
    assert all(torch.equal(first[n], second[n]) for n in first)  # every grad None: nothing moves
    name = next(iter(first))
    assert torch.equal(second[name], third[name]) and any(not torch.equal(second[n], third[n]) for n in first if n != name)


def test_a_run_resumed_from_a_checkpoint_continues_the_uninterrupted_one(tmp_path):
    case = case_of(tmp_path)
    whole = run(case, Regime(steps=4, checkpoint_at=2))
    assert whole.checkpoint is not None and whole.checkpoint.step == 2
    resumed = run(case, Regime(steps=2, resume=whole.checkpoint))
    assert snapshot_differences(whole.final, resumed.final, case.tolerance) == []
    reloaded = run(case, Regime(steps=4, load_at=(2, whole.checkpoint)))  # loading its own state mid-run changes nothing
    assert snapshot_differences(whole.final, reloaded.final, case.tolerance) == []


def test_recorded_failures_say_where_the_run_stopped(tmp_path):
    refused = run(case_of(tmp_path), Regime(kwargs=(("lr", -1.0),), failures="record"))
    assert refused.failure is not None and refused.failure.phase == "constructs"
    assert isinstance(refused.failure.error, ValueError)
    with pytest.raises(ValueError):
        run(case_of(tmp_path), Regime(kwargs=(("lr", -1.0),)))
    typo = run(case_of(tmp_path, "planted_run_model.TypoSGD", "{lr: 0.1}"), Regime(failures="record"))
    assert typo.failure is not None and typo.failure.phase == "steps" and typo.failure.step == 1
    assert isinstance(typo.failure.error, KeyError) and typo.steps == 0


def test_a_step_that_requires_a_closure_is_not_applicable_without_one(tmp_path):
    case = case_of(tmp_path, "torch.optim.LBFGS", "{lr: 0.1}")
    with pytest.raises(NotApplicable, match="requires a closure"):
        run(case, Regime(closure=False))
    assert run(case, Regime(closure=True, steps=1)).closure_calls >= 1


def test_equal_regimes_of_a_case_are_one_run(tmp_path):
    case, runs = case_of(tmp_path), RunCache()
    first = runs.run(case, Regime(steps=2))
    assert runs.run(case, Regime(steps=2)) is first
    assert runs.run(case, Regime(steps=3)) is not first
    runs.release(case)
    assert runs.run(case, Regime(steps=2)) is not first


def test_the_comparison_compares_an_objects_fields_not_its_identity():
    """A param group may hold an object of the optimizer's (kron_torch's ProbScheduler): two runs
    never hold the same one, so identity equality would call every such run different."""
    from pytest_optimtest.harness.compare import value_differences
    from pytest_optimtest.spec.schema import Tolerance

    class Schedule:  # callable, holding a function bound to itself, as kron's holds its compiled schedule
        def __init__(self, p: float) -> None:
            self.p, self.steps, self._schedule = p, 3, self.__call__

        def __call__(self, n: int) -> float:
            return self.p * n

    tol = Tolerance(atol=1e-5, rtol=1e-6)
    assert value_differences("g", {"s": Schedule(0.5)}, {"s": Schedule(0.5)}, tol) == []
    assert value_differences("g", {"s": Schedule(0.5)}, {"s": Schedule(0.7)}, tol) == ["g['s'].__dict__['p']: compiled 0.7 != eager 0.5"]


def test_the_comparison_takes_a_0d_tensor_and_a_number_for_the_same_number():
    """mcnn's ManifoldAdam keeps an int 'step', which torch's Adam.__setstate__ makes a tensor on load:
    the state_dict round trip and ZeRO's consolidated load were red over 4 vs tensor(4.)."""
    from pytest_optimtest.harness.compare import value_differences
    from pytest_optimtest.spec.schema import Tolerance

    tol = Tolerance(atol=1e-5, rtol=1e-6)
    assert value_differences("s", {"step": 4}, {"step": torch.tensor(4.0)}, tol) == []
    assert value_differences("s", {"step": 4}, {"step": torch.tensor(5.0)}, tol) == ["s['step']: compiled 5.0 != eager 4.0"]
    assert value_differences("s", {"m": 1.0}, {"m": torch.ones(1)}, tol) != []  # a 1-element vector is no number
    assert value_differences("s", {"f": True}, {"f": torch.tensor(1.0)}, tol) != []


def test_the_comparison_walks_a_deque_of_tensors_as_a_sequence():
    """sky-optimizer keeps its L-BFGS history in deques of tensors, whose `==` raises "Boolean value of
    Tensor with more than one value is ambiguous": every law and ZeRO item of it was red as the plugin's bug."""
    from collections import deque

    from pytest_optimtest.harness.compare import value_differences
    from pytest_optimtest.harness.snapshot import freeze
    from pytest_optimtest.spec.schema import Tolerance

    tol = Tolerance(atol=1e-5, rtol=1e-6)
    history = deque([torch.ones(2, 3), torch.zeros(2, 3)])
    assert value_differences("s", {"h": history}, {"h": deque(t.clone() for t in history)}, tol) == []
    moved = deque([torch.ones(2, 3), torch.full((2, 3), 0.5)])
    assert value_differences("s", {"h": history}, {"h": moved}, tol)[0].startswith("s['h'][1]: 6/6 elements differ")
    assert value_differences("s", {"h": history}, {"h": deque([torch.ones(2, 3)])}, tol) == [
        "s['h']: 1 items in the compiled run, 2 in the eager run"]
    frozen = freeze(history)  # a snapshot holds a copy, not the live deque that later steps append to
    history.append(torch.ones(1))
    history[0].add_(1)
    assert isinstance(frozen, deque) and len(frozen) == 2 and frozen[0].eq(1).all()


def test_package_generators_are_the_optimizer_packages_module_level_ones_and_dicts_of_them(monkeypatch):
    import sys
    import types

    from pytest_optimtest.harness.devices import package_generators

    module = types.ModuleType("fakeoptpkg.util")
    module.noise = torch.Generator()
    module.per_device = {"cpu": torch.Generator(), "note": 1}  # adv_optm's `_generators`, one per device
    monkeypatch.setitem(sys.modules, "fakeoptpkg.util", module)
    optimizer_cls = type("Opt", (), {"__module__": "fakeoptpkg.optim"})
    assert set(package_generators(optimizer_cls)) == {"fakeoptpkg.util.noise", "fakeoptpkg.util.per_device['cpu']"}
    assert package_generators(torch.optim.SGD) == {}  # torch's own RNG is seeded by torch.manual_seed


def test_package_generators_read_module_globals_that_a_gc_callback_shrinks_meanwhile():
    """dynamo writes its `__resume_at_*` functions into the step's module globals and deletes them from a weakref
    callback when their compiled code dies, at whatever allocation runs the GC. Read item by item, the globals
    changed size midway: 1 in 12 nested sessions on torch 2.6, a case 'blocked by constructs: RuntimeError:
    dictionary changed size during iteration (devices.py in generators_in)'."""
    import gc

    from pytest_optimtest.harness.devices import generators_in

    # more entries than CPython keeps spare pairs for (2000), so that reading them allocates, as a busy process does
    namespace = {f"__resume_at_{i}": i for i in range(4000)} | {"noise": torch.Generator(), "per_device": {"cpu": torch.Generator()}}
    dying = [name for name in namespace if name.startswith("__resume_at_")]

    def cleanup_hook(phase: str, info: dict) -> None:  # as dynamo's, at each collection while any is left
        if phase == "start" and dying:
            del namespace[dying.pop()]

    def collecting_often(read):
        threshold = gc.get_threshold()
        gc.callbacks.append(cleanup_hook)
        gc.set_threshold(3)  # a collection every third allocation
        try:
            return read()
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(cleanup_hook)

    with pytest.raises(RuntimeError, match="dictionary changed size during iteration"):
        collecting_often(lambda: list(namespace.items()))  # the hazard, as generators_in read the globals before
    assert set(collecting_often(lambda: generators_in(namespace, "m."))) == {"m.noise", "m.per_device['cpu']"}


def test_seed_all_seeds_torchs_generator_and_calls_torch_manual_seed_only_for_an_accelerator(monkeypatch):
    from pytest_optimtest.harness import devices

    calls, manual_seed = [], torch.manual_seed
    # torch.manual_seed queues a lazy seed for each absent accelerator, with a stack capture: per step, that was 7% of the main job
    monkeypatch.setattr(torch, "manual_seed", lambda seed: calls.append(seed) or manual_seed(seed))
    devices.seed_all(7)
    first = torch.rand(3)
    devices.seed_all(7)
    assert torch.equal(torch.rand(3), first)
    assert calls == ([7, 7] if devices.accelerator_present() else [])


def test_an_attribute_optimizer_init_sets_missing_in_torchs_code_is_the_optimizers_doing():
    from planted_run_model import InitSkippingLookahead

    from pytest_optimtest.harness.blame import blame

    param = torch.nn.Parameter(torch.ones(2))
    with steps_kept(InitSkippingLookahead):  # the patch below is process-wide: not for the next test
        optimizer = InitSkippingLookahead(torch.optim.SGD([param], lr=0.1))
        optimizer.zero_grad()  # torch.optim patches the class's step with its hook wrapper here
        param.grad = torch.ones(2)
        with pytest.raises(AttributeError) as raised:
            optimizer.step()
    found = blame(raised.value)
    assert found.owner == "optimizer" and "without calling its __init__" in found.note, found


def test_a_class_step_torch_optim_patches_during_a_run_is_the_classes_own_again_after_it():
    """torch.optim wraps a class's step process-wide (eve's Lookahead: on zero_grad, after which its
    step raises): a run gives the classes back, so no run's outcome depends on which ran before it,
    and a subclass built while its torch.optim base is unwrapped keeps no step of the plugin's."""
    from planted_run_model import InitSkippingLookahead

    class Skipping(InitSkippingLookahead):  # a class of this test's own: the planted one may be patched already
        def step(self, closure=None):
            return super().step(closure)

    class NoStepOfItsOwn(torch.optim.SGD):
        pass

    param = torch.nn.Parameter(torch.ones(2))
    own = vars(Skipping)["step"]
    with steps_kept(Skipping):
        Skipping(torch.optim.SGD([param], lr=0.1)).zero_grad()
        assert vars(Skipping)["step"] is not own  # torch's patch happened
    assert vars(Skipping)["step"] is own
    with steps_kept(NoStepOfItsOwn), torch_api.torch_optim_bases_unwrapped(NoStepOfItsOwn):
        NoStepOfItsOwn([param], lr=0.1)
        assert "step" in vars(NoStepOfItsOwn)  # torch hooked the raw base step it inherited, on the subclass
    assert "step" not in vars(NoStepOfItsOwn)


def test_a_step_that_waits_before_it_moves_climbs_the_eager_rungs_and_one_that_never_moves_does_not(tmp_path):
    """The eager probe is given the steps a compiled run takes before it calls a case unmoved: a red
    for an optimizer that moves from step 5 (eve's RAdam) would be the plugin's, not the optimizer's."""
    from pytest_optimtest.harness.ladder import probe_eager

    late = probe_eager(case_of(tmp_path, "planted_run_model:LateSGD", "{lr: 0.1}"))
    assert late.failure is None and late.steps == 8, late
    idle = probe_eager(case_of(tmp_path, "planted_run_model:IdleSGD", "{lr: 0.1}"))
    assert idle.failure is not None and idle.failure.rung == "eager_moves" and "8 eager steps" in idle.failure.cause


def test_a_state_dict_layout_names_what_departs_from_torch_optims_which_zero_and_dcp_read():
    from pytest_optimtest.harness.state_dict_layout import state_dict_layout

    class Shaped:
        def __init__(self, state_dict):
            self._state_dict = state_dict

        def state_dict(self):
            if isinstance(self._state_dict, Exception):
                raise self._state_dict
            return self._state_dict

    plain = state_dict_layout(torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1))
    assert plain is not None and plain.torch_optims and plain.unkeyed == []
    magma = state_dict_layout(Shaped({"base": {}, "steps": 3}))  # a wrapper's layout of its own
    assert magma is not None and not magma.torch_optims and magma.keys == ["base", "steps"]
    dog = state_dict_layout(Shaped({"state": {0: {}, "_first_step": True}, "param_groups": []}))
    assert dog is not None and dog.torch_optims and dog.unkeyed == ["_first_step"]
    assert state_dict_layout(Shaped(RuntimeError("its own"))) is None


def test_compiles_inside_a_run_skip_dynamos_guard_latency_metric_and_the_user_keeps_it(monkeypatch):
    """dynamo times each new guard set after flushing the CPU's caches (~20 ms a compile, for a metric
    no check reads): skipped inside isolated(), torch's own function back outside."""
    import torch._dynamo.guards as guards

    from pytest_optimtest.harness.isolation import isolated

    timed = []
    monkeypatch.setattr(guards, "profile_guard_manager", lambda *args: timed.append(args) or 0.0)
    monkeypatch.setattr(guards.guards_log, "isEnabledFor", lambda level: True)  # torch 2.6 times guards under debug logging only
    users = guards.profile_guard_manager
    with isolated():
        torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    assert timed == [] and guards.profile_guard_manager is users
    torch._dynamo.reset()
    torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))
    assert len(timed) == 1  # outside a run, dynamo measures as it always does
    torch._dynamo.reset()


def test_a_swapped_storage_is_seen_even_where_the_allocator_hands_back_the_freed_address(tmp_path):
    # judged by addresses alone, a storage freed by the swap and reused for its replacement looked unswapped
    case = case_of(tmp_path, "planted_unseen:FreeThenAllocSGD", "{lr: 0.01}")
    for _ in range(10):  # without the held storages, about half of these runs missed a param or two
        result = run(case, Regime(steps=1))
        assert len(result.swapped) == 4, result.swapped


def test_a_run_resumed_from_a_checkpoint_steps_on_the_grads_the_run_had_where_its_steps_wrote_them(tmp_path):
    # zij's AdamWScheduleFree writes p.grad in place: over one backward's grads its next step reads the written grad,
    # and a run resumed on fresh grads differed: the state_dict round trip was red for grads_untouched's cause
    case = case_of(tmp_path, "planted_unseen:GradHalvingSGD", "{lr: 0.01}")
    whole = run(case, Regime(steps=4, checkpoint_at=2))
    resumed = run(case, Regime(steps=2, resume=whole.checkpoint))
    assert snapshot_differences(whole.final, resumed.final, case.tolerance) == []



def test_a_frame_dynamo_resumed_after_a_graph_break_is_named_by_the_users_function():
    # DeepSpeed's SingleDeviceMuon asserts in its compiled Newton-Schulz after a graph break: init's note read
    # "in torch_dynamo_resume_in_zeropower_via_gram_newtonschulz_at_100"
    from pytest_optimtest.harness.blame import blame

    def orthogonalize(x):
        torch._dynamo.graph_break()
        assert x.ndim == 2, "matrices only"
        return x

    torch._dynamo.reset()
    with pytest.raises(AssertionError) as raised:
        torch.compile(orthogonalize, backend="eager")(torch.ones(3))
    torch._dynamo.reset()
    assert blame(raised.value).where.endswith("in orthogonalize (resumed after a graph break)"), blame(raised.value)


@pytest.mark.parametrize("check", ["law_determinism", "parity", "state_dict"])
def test_an_attribute_that_numbers_the_instance_is_no_difference_between_runs(tmp_path, check):
    # DeepSpeed's CPUAdam, CPUAdagrad, CPULion: "optimizer attribute['opt_id']: second 9 != first 10", red in
    # law_determinism and law_equivalent, where two optimizers built alike step alike
    case = one_case(tmp_path, "optimizer: planted_unseen:InstanceNumberedSGD\nkwargs: {lr: 0.1}\n")
    run_check(check, case)


def test_a_decorated_step_is_judged_tensorless_by_the_code_it_wraps():
    # DeepSpeed's CPU optimizers: a `@torch.no_grad()` step whose body names torch was judged by the decorator's frame,
    # and a step that calls a C++ kernel dynamo skips was called "torch's doing, dynamo's heuristic" with a closure
    from planted_unseen import TorchlessStepSGD

    class NoGradStep(TorchlessStepSGD):
        @torch.no_grad()
        def step(self, closure=None):
            with torch.enable_grad():
                return super().step(closure)

    param = torch.nn.Parameter(torch.ones(2))
    assert torch_api.frame_skipped_without_tensors(TorchlessStepSGD([param], lr=0.1).step)
    assert not torch_api.frame_skipped_without_tensors(NoGradStep([param], lr=0.1).step)


def test_a_red_shows_a_long_exception_message_cut_saying_how_much_was_left_out():
    # pybind11's "incompatible function arguments" lists every tensor it was given: a red of 600 lines
    from pytest_optimtest.harness.blame import bounded_message

    shown = bounded_message(TypeError("adam_update(): incompatible function arguments.\n" + "tensor([0.1, 0.2])\n" * 500))
    assert shown.startswith("TypeError: adam_update(): incompatible function arguments.\n")
    assert len(shown.splitlines()) == 13 and shown.endswith("more characters of the message)"), shown
    assert bounded_message(ValueError("short")) == "ValueError: short"
