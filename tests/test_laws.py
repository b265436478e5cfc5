"""The conformance laws: each planted optimizer (tests/planted_laws.py) breaks one law and is
caught by that law alone, with a message that names it; a correct optimizer with the laws
`init` proposes stays green; --optim-horizon reaches a bug that starts late."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest
from helpers import item_outcome, one_case, run_check, run_verbose
from warm import run_module

from pytest_optimtest.harness.law_runs import coupling, lr_scaled
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.observed_run import observed_run

TESTS = Path(__file__).resolve().parent
LAW_CHECKS = "checks: [law_equivalent, law_untouched, law_param_groups, law_descent, law_complex]\n"
ALL_LAWS = """laws:
  equivalent:
    foreach: [{foreach: false}, {foreach: true}]
    tensor_lr: [{lr: 0.01}, {lr: {tensor: 0.01}}]
  untouched: true
  param_groups: true
  descent: true
  complex: true
"""
BREAKS = {  # planted optimizer -> the one law it breaks, and what its message says
    "ForeachDriftSGD": ("law_equivalent", r"law equivalent\[foreach\] broken: \{foreach: true\} must run like "
                                          r"\{foreach: false\} .* they differ after step 2 of 7"),
    "DecayWithoutGradSGD": ("law_untouched", r"law untouched broken: a param whose grad is None must not move; 'frozen' "
                                             r"\(grad None at step 1\) moved"),
    "EagerStateSGD": ("law_untouched", r"law untouched broken: a param that has had no grad yet must get no new state; "
                                       r"'frozen' got \['buf'\] by step 1"),
    "ConstructorLrSGD": ("law_param_groups", r"law param_groups broken: a group whose lr is 0 must not move"),
    "ConjugateSGD": ("law_complex", r"law complex broken: a complex param must step like its view_as_real twin; they "
                                    r"differ after step 1 of 7"),
}
LAWS = ("law_equivalent", "law_untouched", "law_param_groups", "law_descent", "law_complex")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("laws")
    shutil.copy(TESTS / "planted_laws.py", root)
    (root / "specs").mkdir()
    for name in [*BREAKS, "ForeachSGD", "LateForeachDriftSGD"]:
        (root / "specs" / f"{name.lower()}.yaml").write_text(f"optimizer: planted_laws:{name}\nkwargs: {{lr: 0.01}}\n"
                                                             + LAW_CHECKS + ALL_LAWS)
    (root / "specs" / "decaying.yaml").write_text("optimizer: planted_laws:ForeachSGD\nname: decaying\n"
                                                  "kwargs: {lr: 0.01, weight_decay: 0.1}\nchecks: [law_untouched]\n"
                                                  "laws: {untouched: true, zero_grads: true}\n")
    (root / "specs" / "gradless.yaml").write_text("optimizer: planted_laws:DecayWithoutGradSGD\nname: gradless\n"
                                                  "kwargs: {lr: 0.01}\nlaws: {untouched: true}\n"
                                                  "checks: [law_untouched, law_late_joiners, in_backward, in_backward_two_optimizers]\n")
    (root / "specs" / "ascendingsgd.yaml").write_text("optimizer: planted_laws:AscendingSGD\nkwargs: {lr: 0.01}\n"
                                                      "checks: [law_descent]\nlaws: {descent: true}\n")
    return run_verbose(root, "--optim-spec", "specs")


@pytest.mark.parametrize("planted", sorted(BREAKS))
def test_each_planted_optimizer_is_caught_by_the_law_it_breaks_and_no_other(session, planted):
    law, message = BREAKS[planted]
    name = planted.lower()
    outcomes = {check: item_outcome(session, name, check) for check in LAWS}
    assert outcomes.pop(law) == "FAILED"
    assert set(outcomes.values()) == {"PASSED"}, outcomes
    assert re.search(message, session), message


def test_an_optimizer_that_climbs_breaks_descent(session):
    assert item_outcome(session, "ascendingsgd", "law_descent") == "FAILED"
    assert re.search(r"law descent broken: 20 closure steps on a convex least-squares problem must lower its loss; it "
                     r"went from [\d.]+ to [\d.]+", session)


def test_zero_grads_catches_a_decay_that_moves_params_without_gradient(session):
    assert item_outcome(session, "decaying", "law_untouched") == "FAILED"
    assert re.search(r"law zero_grads broken: with every grad zero from fresh state, no param may move; \['weight', "
                     r"'bias', .*\] moved at step 1", session)


def test_a_correct_optimizer_obeys_every_law(session):
    assert {item_outcome(session, "foreachsgd", check) for check in LAWS} == {"PASSED"}


def test_a_bug_that_starts_late_is_in_reach_of_the_horizon(session, tmp_path):
    assert item_outcome(session, "lateforeachdriftsgd", "law_equivalent") == "PASSED"  # 7 steps: not yet
    shutil.copy(TESTS / "planted_laws.py", tmp_path)
    (tmp_path / "late.yaml").write_text("optimizer: planted_laws:LateForeachDriftSGD\nkwargs: {lr: 0.01}\n"
                                        "checks: [law_equivalent]\n" + ALL_LAWS)
    out = run_verbose(tmp_path, "--optim-spec", "late.yaml", "--optim-horizon", "10")
    assert "late.yaml::lateforeachdriftsgd-default-cpu::law_equivalent FAILED" in out
    assert "they differ after step 9 of 10" in out


def test_a_law_lengthens_its_horizon_to_a_measurable_move_before_calling_it_vacuous(tmp_path):
    from helpers import one_case

    from pytest_optimtest.checks import CHECKS, Vacuous
    from pytest_optimtest.harness.run_cache import RunCache

    laws = ("checks: [law_untouched, law_equivalent, law_param_groups]\n"
            "laws: {untouched: true, param_groups: true, equivalent: {foreach: [{foreach: false}, {foreach: true}]}}\n")
    # nothing moves over the laws' 7 steps (a warm-up at lr 0), so the laws take 14
    case = one_case(tmp_path, "optimizer: planted_laws:WarmupDelaySGD\nkwargs: {lr: 0.01}\n" + laws)
    assert "over 14 steps" in CHECKS["law_untouched"].run(case, RunCache())
    assert "foreach (2 variants, 14 steps) agree" in CHECKS["law_equivalent"].run(case, RunCache())
    assert "over 14 steps" in CHECKS["law_param_groups"].run(case, RunCache())
    # an optimizer that never moves is vacuous once 8x the steps moved nothing either
    still = one_case(tmp_path, "optimizer: planted_laws:ForeachSGD\nkwargs: {lr: 0.0}\n" + laws)
    for law in ("law_untouched", "law_equivalent", "law_param_groups"):
        with pytest.raises(Vacuous, match=r"in 7 steps.*up to 8x as many steps tried"):
            CHECKS[law].run(still, RunCache())


def test_an_optimizer_that_refuses_lr_0_on_purpose_is_held_to_the_rest_of_the_param_groups_law(tmp_path):
    from pytest_optimtest.checks import CHECKS
    from pytest_optimtest.harness.run_cache import RunCache

    law = "checks: [law_param_groups]\nlaws: {param_groups: true}\n"
    case = one_case(tmp_path, "optimizer: planted_laws:PositiveLrSGD\nkwargs: {lr: 0.01}\n" + law)
    verdict = CHECKS["law_param_groups"].run(case, RunCache())  # GPAAdamW: its assert was the law's red
    assert re.search(r"a group at lr 0 not run: the optimizer refuses lr 0 on purpose \(AssertionError: lr must be positive, "
                     r"got 0.0, at \S*planted_laws.py:\d+\); changing one group's lr changed that group's next update only", verdict)
    reading = one_case(tmp_path, "optimizer: planted_laws:PositiveConstructorLrSGD\nkwargs: {lr: 0.01}\n" + law)
    with pytest.raises(AssertionError, match=r"law param_groups broken: scaling group 0's lr .* stepped exactly as with the old lr"):
        CHECKS["law_param_groups"].run(reading, RunCache())


def test_the_laws_init_proposes_for_a_correct_optimizer_pass(tmp_path):
    shutil.copy(TESTS / "planted_laws.py", tmp_path)
    init = run_module(tmp_path, "pytest_optimtest", ["init", "planted_laws:ForeachSGD", "-o", "spec.yaml"], timeout=300)
    assert init.returncode == 0, init.stderr
    text = (tmp_path / "spec.yaml").read_text()
    assert "foreach: [{foreach: false}, {foreach: true}]" in text and "param_groups: true" in text
    assert "state_dtype: param" in text  # its momentum buffer follows the param's dtype, as init saw at bf16
    out = run_verbose(tmp_path, "--optim-spec", "spec.yaml", "-k", "law_")
    assert re.search(r"26 passed", out), out[-3000:]  # four laws and the nine on by default, at float32 and bf16
    assert "FAILED" not in out


@pytest.mark.parametrize(("laws", "message"), [
    ("laws:\n  equivalent:\n    foreach: [{foreach: true}]\n", r"\[laws.equivalent\] .*needs two or more kwargs variants"),
    ("laws:\n  equivalent:\n    fused: [{fused: false}, {fusd: true}]\n",
     r"spec.yaml:5: \[laws.equivalent.fused\[1\].fusd\] SGD takes no argument 'fusd'"),
    ("checks: [law_descent]\n", r"\[checks\[0\]\] 'law_descent' checks a claim the spec does not make: declare it under 'laws'"),
])
def test_a_malformed_or_undeclared_law_is_a_spec_error_at_its_key(tmp_path, laws, message):
    from helpers import cases_from

    from pytest_optimtest.spec import SpecError

    with pytest.raises(SpecError, match=message):
        cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n" + laws)


def test_laws_not_declared_make_no_items(tmp_path):
    from helpers import cases_from

    case = cases_from(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nlaws: {descent: true}\n")[0]
    assert "law_descent" in case.checks and "law_equivalent" not in case.checks and "law_complex" not in case.checks


def test_descent_steps_contiguous_params_only_where_the_laws_say_views_false(tmp_path):
    """luminamoon's LuminaV refuses a non-contiguous param on purpose (raw pointers): fuzz had `allow_views: false`
    for it, but descent's transposed param was red still, "the optimizer's code raised ValueError"."""
    from helpers import one_case

    from pytest_optimtest.checks import CHECKS
    from pytest_optimtest.harness.run_cache import RunCache

    spec = "optimizer: planted:ContiguousOnlySGD\nkwargs: {lr: 0.1}\nlaws: {descent: true%s}\n"
    with pytest.raises(AssertionError, match=r"raised over the law's non-contiguous \(transposed\) param, and steps with both "
                       r"params contiguous: ValueError: ContiguousOnlySGD requires contiguous parameters(.|\n)*it refuses them on "
                       r"purpose \(at \S*planted.py:\d+\): declare `laws: \{views: false\}`"):
        CHECKS["law_descent"].run(one_case(tmp_path, spec % ""), RunCache())
    verdict = CHECKS["law_descent"].run(one_case(tmp_path, spec % ", views: false"), RunCache())
    assert "(contiguous params only: views: false)" in verdict and "descent" in verdict, verdict


def test_a_step_that_mishandles_a_non_contiguous_param_is_descents_red_saying_so(tmp_path):
    """Distributed Shampoo `.view`s each param in its constructor: descent's red was its RuntimeError, with no word
    of the transposed param the law gave it."""
    from pytest_optimtest.checks import CHECKS
    from pytest_optimtest.harness.run_cache import RunCache

    case = one_case(tmp_path, "optimizer: planted:ViewUpdateSGD\nkwargs: {lr: 0.1}\nlaws: {descent: true}\n")
    with pytest.raises(AssertionError, match=r"law descent broken: the optimizer raised over the law's non-contiguous \(transposed\) "
                       r"param, and steps with both params contiguous: RuntimeError: view size is not compatible(.|\n)*in "
                       r"_update \(optimizer's doing\)\n  a param handled as if contiguous"):
        CHECKS["law_descent"].run(case, RunCache())


@pytest.mark.parametrize(("optimizer", "couples", "evidence"), [
    ("planted_unseen:GlobalNormSGD", True, r"its update couples params: after 1 step\(s\) on the same grads, param 'weight'"),
    ("planted_run_model:RunawaySearchSGD", None, r"unknown: the probe's runs diverged at step 1"),
    ("planted:PlainSGD", False, None),
    ("planted_unseen:ShapeStackNormSGD", True, r"param 'weight' stepped beside a param of its shape differs with that param's values"),
    ("planted_unseen:ShapeBatchedSGD", True, r"its arithmetic rounds otherwise beside params of the same shape: after 1 step"),
])
def test_the_coupling_probe_shows_coupling_from_runs_that_have_not_diverged(tmp_path, optimizer, couples, evidence):
    """The law params have a shape each: an optimizer that batches same-shaped params (microsoft/dion's) is
    probed beside a param of the first one's shape too, and beside another, to tell coupled values from rounding."""
    found = coupling(one_case(tmp_path, f"optimizer: {optimizer}\nkwargs: {{lr: 0.1}}\n"), 0)
    if couples is False:
        assert found is None
        return
    assert found is not None and found.couples is couples and re.search(evidence, found.evidence), found
    assert found.rounding == ("Batched" in optimizer), found


def test_a_step_that_reseeds_a_global_rng_is_seen_even_where_it_was_already_so_seeded(tmp_path):
    case = one_case(tmp_path, "optimizer: planted_contract:ReseedingSGD\nkwargs: {lr: 0.01}\n")
    random.seed(0)
    observed = observed_run(case, 3, 0, case.tolerance, 0.0)
    assert observed.run.rng_reseeded[:1] == ["step 1 reseeded Python's random"], observed.run.rng_reseeded
    assert observed.run.rng_used == []  # it reads nothing of the stream: its runs are the same whatever the state


def test_a_step_that_moves_gradless_params_is_one_red_not_three(session):
    """torchopt's AdaMax and RAdam: law untouched's red, then late_joiners and two optimizers in backward
    (whose extra step() calls come with grad None) red again over the same moves."""
    assert item_outcome(session, "gradless", "law_untouched") == "FAILED"
    for check in ("law_late_joiners", "in_backward_two_optimizers"):
        assert item_outcome(session, "gradless", check) == "SKIPPED", check
    assert "blocked by law_untouched: its step moves params whose grad is None, so the joiners moved before they joined" in session
    assert "blocked by law_untouched: its step moves params whose grad is None, and each optimizer's step() runs again" in session


def test_a_spec_raises_dynamos_recompile_limit_for_an_optimizer_whose_own_compile_needs_more(tmp_path):
    """microsoft/dion compiles its own updates with fullgraph, and its training script sets the limit to 100: law
    param_groups, whose runs take several shapes and lrs, was red at torch's default of 8 with no way to say so."""
    from pytest_optimtest.checks import CHECKS
    from pytest_optimtest.harness import torch_api
    from pytest_optimtest.harness.run_cache import RunCache

    spec = "optimizer: planted_unseen:OwnCompiledUpdateSGD\n{}kwargs: {{lr: 0.1}}\nlaws: {{param_groups: true}}\n"
    with pytest.raises(Exception) as raised:
        CHECKS["law_param_groups"].run(one_case(tmp_path, spec.format("")), RunCache())
    assert torch_api.is_recompile_limit_error(raised.value), raised.value
    (tmp_path / "raised").mkdir()
    verdict = CHECKS["law_param_groups"].run(one_case(tmp_path / "raised", spec.format("recompile_limit: 1000\n")), RunCache())
    assert "changing one group's lr changed that group's next update only" in verdict


def test_the_coupling_probe_tells_state_kept_for_several_params_on_one_from_a_coupled_update(tmp_path):
    # DeepSpeed's FusedAdam counts a group's steps on its last param: ZeRO's red said "a norm, line search or
    # statistic taken over all its params" of params that moved alike
    found = coupling(one_case(tmp_path, "optimizer: planted_unseen:LastParamCounterSGD\nkwargs: {lr: 0.1}\n"), 0)
    assert found is not None and found.couples, found
    assert found.evidence.startswith("its state couples params") and "['state']['step']" in found.evidence, found.evidence


def test_a_wrappers_laws_move_its_base_optimizers_lr_groups_and_hyperparameters(tmp_path):
    """Lookahead takes no lr, momentum or params of its own; its base optimizer holds them. The laws over
    groups were skipped "refuses param groups: got multiple values for argument 'optimizer'", those over
    hyperparameters vacuous "the constructor takes no such argument", and at bf16 no lr was raised."""
    case = one_case(tmp_path, "optimizer: planted_run_model:LookaheadWrapper\nparams: wrapped\n"
                              'kwargs: {base_optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01, momentum: 0.5}}}\n'
                              "laws: {param_groups: true}\n")
    runs = RunCache()
    assert "an lr-0 group stayed" in run_check("law_param_groups", case, runs)
    grouped = run_check("law_group_hyperparameters", case, runs)
    assert "momentum" in grouped and "dampening" in grouped, grouped
    assert "momentum" in run_check("law_changed_hyperparameters", case, runs)
    scaled = lr_scaled(case, 10.0)
    assert scaled.kwargs["base_optimizer"]["kwargs"]["lr"] == 0.1 and "lr" not in scaled.kwargs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_norm_over_every_group_is_coupling_at_bf16_too_not_a_group_that_reads_another_value(tmp_path, dtype):
    """sweepx's SAM, once its base's hyperparameters were reachable: at bf16 its global norm moved equal groups
    less than a tolerance from two optimizers and the moved group more, and the law was red, the optimizer's."""
    case = one_case(tmp_path, "optimizer: planted_run_model:GlobalNormSAM\nparams: wrapped\nclosure: [true]\n"
                              'kwargs: {base_optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}}\n'
                              f"dtypes: [{dtype}]\n")
    assert "weight_decay" in run_check("law_group_hyperparameters", case)


def test_a_tensor_lr_the_step_writes_in_place_is_named_in_the_equivalence_red(tmp_path):
    """fairseq's Adamax and OpenNMT's AdaFactor compute a step size from group['lr'] in place: a tensor lr shrinks each
    step; law equivalent[tensor_lr] said the params differ, and not why."""
    case = one_case(tmp_path, "optimizer: planted_laws:InPlaceLrSGD\nkwargs: {lr: 0.01}\ndevices: [cpu]\n"
                              "checks: [law_equivalent]\nlaws: {equivalent: {tensor_lr: [{lr: 0.01}, {lr: {tensor: 0.01}}]}}\n")
    with pytest.raises(AssertionError) as raised:
        run_check("law_equivalent", case)
    assert re.search(r"diagnosis: group 0's lr took another course under \{lr: \{'tensor': 0\.01\}\} \(0\.01, 0\.006667, "
                     r".*\) than under \{lr: 0\.01\} \(0\.01, 0\.01, .*the optimizer's doing", str(raised.value)), raised.value
