"""In-backward checks on real torch: passing optimizers and planted faults."""

from __future__ import annotations

import pytest
from helpers import one_case

from pytest_optimtest.checks import CHECKS, NotApplicable
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.vacuity import Diverged, Vacuous

IN_BACKWARD = ["in_backward", "in_backward_tied", "in_backward_two_optimizers", "in_backward_no_hook"]


def case_for(tmp_path, optimizer, kwargs="{lr: 0.1}", extra=""):
    return one_case(tmp_path, f"optimizer: {optimizer}\nkwargs: {kwargs}\n{extra}\n")


def run(check, case):
    return CHECKS[check].run(case, RunCache())


@pytest.mark.parametrize("check", IN_BACKWARD)
@pytest.mark.parametrize("optimizer", ["torch.optim.SGD", "torch.optim.Adam", "torch.optim.RMSprop"])
def test_stateful_optimizers_match_in_backward(tmp_path, optimizer, check):
    assert run(check, case_for(tmp_path, optimizer, "{lr: 0.01}"))


def test_seed_kwargs_for_weights_and_biases(tmp_path):
    case = case_for(tmp_path, "torch.optim.SGD", extra="""data: ones  # the seed's sum loss: lr 1.0 would diverge on a squared loss
in_backward:
  groups:
    - {params: ["*weight"], kwargs: {lr: 1.0}}
    - {params: ["*bias"], kwargs: {lr: 0.5}}""")
    assert "6 steps equal" in run("in_backward", case)


def test_shared_count_across_instances_is_caught(tmp_path):
    with pytest.raises(AssertionError, match=r"in-backward params differ from the reference after step 1"):
        run("in_backward", case_for(tmp_path, "planted:SharedCountSGD"))


def test_tied_weight_updated_twice_is_caught(tmp_path):
    # Naming both aliases of the tied weight hands it to the in-backward optimizer twice.
    case = case_for(tmp_path, "torch.optim.SGD", "{lr: 0.01}", extra="""in_backward:
  groups:
    - {params: ["0.weight", "1.weight"]}
    - {params: ["*bias"]}""")
    assert run("in_backward", case)  # untied, the two names are two params: fine
    with pytest.raises(AssertionError, match=r"param\['0.weight'\]: .* differ"):
        run("in_backward_tied", case)


def test_random_optimizer_needs_per_parameter_reference(tmp_path):
    with pytest.raises(AssertionError, match="differ from the reference"):
        run("in_backward", case_for(tmp_path, "planted:NoisySGD", "{lr: 0.01}"))
    case = case_for(tmp_path, "planted:NoisySGD", "{lr: 0.01}", extra="in_backward: {per_parameter: draws random numbers in step}")
    assert "one optimizer per param in hook order, because draws random numbers in step" in run("in_backward", case)


def test_an_optimizer_coupling_params_is_not_compared_with_one_optimizer_a_group(tmp_path):
    # Ranger21 without normgc: in-backward equals one optimizer per param, not one per group, by design
    case = case_for(tmp_path, "planted_contract:GlobalNormSGD", "{lr: 0.01}")
    with pytest.raises(Vacuous, match=r"vacuous: not comparable with one optimizer a group: in-backward differs from it "
                                            r"\(param\['\S+'\]: .*equals one optimizer per param stepped in hook order"):
        run("in_backward", case)
    case = case_for(tmp_path, "planted_contract:GlobalNormSGD", "{lr: 0.01}", extra="in_backward: {per_parameter: a global norm}")
    assert "one optimizer per param in hook order, because a global norm" in run("in_backward", case)


def test_in_backward_says_which_coupling_makes_it_vacuous(tmp_path):
    """microsoft/dion's Muon: vacuous "the optimizer couples params (a norm ...) or draws random numbers", where
    it batches same-shaped matrices into a bf16 computation, and draws nothing."""
    with pytest.raises(Vacuous, match=r"_apply_optimizer_in_backward builds: its update couples params: after \d+ step"):
        run("in_backward", case_for(tmp_path, "planted_contract:GlobalNormSGD", "{lr: 0.01}"))
    with pytest.raises(Vacuous, match=r"_apply_optimizer_in_backward builds: its arithmetic rounds otherwise beside params of the same shape"):
        run("in_backward", case_for(tmp_path, "planted_unseen:ShapeBatchedSGD", "{lr: 0.01}"))


def test_a_recompile_limit_hit_by_in_backwards_many_optimizers_is_said_and_not_blamed_on_the_double_step(tmp_path):
    from planted_run_model import SelfCompilingSGD

    SelfCompilingSGD.instances = 0
    case = case_for(tmp_path, "planted_run_model:SelfCompilingSGD", "{lr: 0.01}")
    with pytest.raises(AssertionError) as info:
        run("in_backward_two_optimizers", case)
    message = str(info.value)
    assert "the step raised FailOnRecompileLimitHit" in message and "hit by a torch.compile in the optimizer's own code" in message
    assert "ran 2 times in one backward" not in message


def test_closure_optimizers_are_not_applicable(tmp_path):
    with pytest.raises(NotApplicable, match="requires a closure"):
        run("in_backward", case_for(tmp_path, "planted:NeedsClosure"))


def test_no_hook_keeps_params(tmp_path):
    verdict = run("in_backward_no_hook", case_for(tmp_path, "torch.optim.Adam", "{lr: 0.01}"))
    assert verdict.startswith("unhooked params untouched, hooked params moved")
    assert verdict.evidence["unhooked_moved_tolerances"] == 0.0 and verdict.evidence["hooked_moved_tolerances"] > 10


def test_untieable_model_is_not_applicable(tmp_path):
    case = case_for(tmp_path, "torch.optim.SGD", extra="in_backward: {tie: [[a.weight, b.weight]]}")
    with pytest.raises(NotApplicable, match=r"no parameters named \['a.weight', 'b.weight'\]"):
        run("in_backward_tied", case)


def test_diverged_run_is_not_a_pass(tmp_path):
    with pytest.raises(Diverged, match=r"diverged: reference param '\S+' grew from scale .* at step \d"):
        run("in_backward", case_for(tmp_path, "torch.optim.SGD", "{lr: 1.0}"))


def test_a_step_that_raises_on_the_second_optimizers_grad_none_is_torchs_double_step(tmp_path):
    # where the spec runs none_grads, the same raise is its red: two optimizers raises it unwrapped, one red (test_unseen)
    case = case_for(tmp_path, "planted_run_model:RaisingWithoutGradSGD", "{lr: 0.01}",
                    "checks: [in_backward, in_backward_two_optimizers]")
    with pytest.raises(AssertionError, match=r"the step raised AttributeError: .*\n  diagnosis: torch's doing: with two optimizers "
                                             r"applied to a param, each optimizer's step\(\) ran 2 times in one backward"):
        run("in_backward_two_optimizers", case)
    (tmp_path / "with_none_grads").mkdir()
    with pytest.raises(AttributeError):
        run("in_backward_two_optimizers", case_for(tmp_path / "with_none_grads", "planted_run_model:RaisingWithoutGradSGD",
                                                   "{lr: 0.01}"))


def test_an_optimizer_drawing_from_its_packages_own_generator_is_seeded_per_step_and_not_compared_by_draw_order(tmp_path):
    # adv_optm keeps a module-level torch.Generator: runs reseed it as they reseed torch's RNG, so eager and compiled
    # draw alike; per-param regimes draw in another order, which the session calls not comparable; the user's
    # generator is left as it was
    import planted_run_model

    from pytest_optimtest.harness.diagnosis import not_comparable
    from pytest_optimtest.harness.ladder import MOVES

    before = planted_run_model._NOISE.get_state()
    case = case_for(tmp_path, "planted_run_model:OwnGeneratorSGD", "{lr: 0.01}")
    runs = RunCache()
    assert "equal" in CHECKS["parity"].run(case, runs)
    from helpers import cases_from  # two runs from one seed draw alike from its generator, seeded per step in each

    (fuzz,) = [c for c in cases_from(tmp_path, "optimizer: planted_run_model:OwnGeneratorSGD\nkwargs: {lr: 0.01}\n"
                                               "fuzz: {determinism: {examples: 3}}\n") if c.id.endswith("-fuzz-cpu")]
    assert CHECKS["fuzz_determinism"].run(fuzz, runs)
    runs.ladder(case).first_failure(MOVES)
    assert "generator planted_run_model._NOISE" in runs.ladder(case).draws
    with pytest.raises(AssertionError, match="differ from the reference") as info:
        CHECKS["in_backward"].run(case, runs)
    verdict = not_comparable("in_backward", case.id, runs.ladder(case).draws, info.value)
    assert verdict is not None and "draws from a torch.Generator of its own package (planted_run_model._NOISE)" in str(verdict)
    assert planted_run_model._NOISE.get_state().equal(before)
    # drawn as the constructor makes its state (adv_optm's spectral-norm vectors): per-param optimizers draw in another order
    case = case_for(tmp_path, "planted_run_model:ConstructorDrawSGD", "{lr: 0.01}")
    runs = RunCache()
    runs.ladder(case).first_failure(MOVES)
    assert "generator planted_run_model._NOISE" in runs.ladder(case).draws
    assert planted_run_model._NOISE.get_state().equal(before)
