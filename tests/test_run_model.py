"""The run model's verdicts (issues 32 and 38): one root cause is one red, the checks that need a
failed rung are blocked by it, vacuous comparisons are skips that strict mode fails, a diverged run
is not compared, and a closure's graphs are not the step's. One subprocess session over planted
optimizers (tests/planted_run_model.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SPECS = {
    "typo": "optimizer: planted_run_model:TypoSGD\nkwargs: {lr: 0.1}\n"
            "checks: [parity, kernel_count, recompile, graph_breaks, in_backward, in_backward_no_hook, compile_time]\n",
    "idle": "optimizer: planted_run_model:IdleSGD\nkwargs: {lr: 0.1}\nchecks: [parity, in_backward, in_backward_no_hook, law_descent]\n"
            "laws: {descent: true}\n",
    "explode": "optimizer: planted_run_model:ExplodingSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n",
    "untraced": "optimizer: planted_run_model:UntracedStepSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\nclosure: [true]\n",
    "untracedfsdp": "optimizer: planted_run_model:UntracedStepSGD\nname: untracedfsdp\nkwargs: {lr: 0.1}\nchecks: [parity, fsdp]\n",
    "raisedist": "optimizer: planted_unseen:CompiledOnlyRaise\nname: raisedist\nkwargs: {lr: 0.1}\nchecks: [parity, distributed, zero]\n",
    "raisefsdp": "optimizer: planted_unseen:CompiledOnlyRaise\nname: raisefsdp\nkwargs: {lr: 0.1}\nchecks: [parity, fsdp]\n",
    "trainmode": "optimizer: planted_run_model:TrainModeSGD\nkwargs: {lr: 0.01}\nsetup: pytest_optimtest.setups:train_mode\n"
                 "checks: [parity, in_backward, in_backward_tied, in_backward_two_optimizers, in_backward_no_hook, zero]\n",
    "closureloss": "optimizer: planted_run_model:ClosureLossSGD\nkwargs: {lr: 0.1}\nclosure: [false, true]\n"
                   "checks: [parity, closure_graph_break]\n",
    "rankkill": "optimizer: planted_run_model:RankKillingSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp, checkpoint]\nfsdp: {compiled: false}\n",
    "noisydist": "optimizer: planted:NoisySGD\nname: noisydist\nkwargs: {lr: 0.1}\nchecks: [parity, distributed]\n",
    "rounds": "optimizer: planted:PlainSGD\nkwargs: {lr: 1.0e-7}\ndtypes: [bfloat16]\nchecks: [parity, in_backward]\n",
    "noisy": "optimizer: planted:NoisySGD\nkwargs: {lr: 0.1}\nchecks: [parity, none_grads, state_dict, in_backward]\n",
    "noisyx": "optimizer: planted:NoisySGD\nname: noisyx\nkwargs: {lr: 0.1}\nchecks: [parity, none_grads]\n"
              "xfail:\n  - checks: [parity, none_grads]\n    reason: \"its step draws random numbers\"\n",
    "chain": "optimizer: planted_run_model:RoundingChainSGD\nkwargs: {lr: 0.01}\ndtypes: [bfloat16]\nchecks: [parity]\n"
             "tolerance: {bfloat16: {atol: 0, rtol: 0}}\n",
    "chainregimes": "optimizer: planted_run_model:RoundingChainSGD\nname: chainregimes\nkwargs: {lr: 0.01}\ndtypes: [bfloat16]\n"
                    "checks: [none_grads, closure_graph_break, state_dict]\ntolerance: {bfloat16: {atol: 0, rtol: 0}}\n",
    "growing": "optimizer: planted_run_model:RoundingGrowingSGD\nkwargs: {lr: 0.01}\nchecks: [parity, none_grads, state_dict]\n",
    "offset": "optimizer: planted_run_model:CompiledOffsetSGD\nkwargs: {lr: 0.01}\nchecks: [parity, none_grads]\n",
    "internalchain": "optimizer: planted_run_model:InternalBf16ChainSGD\nkwargs: {lr: 0.01}\nchecks: [parity]\n",
    "named": "optimizer: planted_unseen:NamedParamsSGD\nkwargs: {lr: 0.1}\nparams: named\nchecks: [law_param_groups]\n"
             "laws: {param_groups: true}\n",
    "groupcount": "optimizer: planted_run_model:GroupCountingSGD\nkwargs: {lr: 0.1}\nchecks: [fsdp]\n",
    "noclosure": "optimizer: planted_unseen:NoClosureSGD\nkwargs: {lr: 0.1}\nchecks: [checkpoint]\n",
    "coarse": "optimizer: planted_run_model:CoarseLrSGD\nkwargs: {lr: 0.01}\nchecks: [law_param_groups]\n"
              "laws: {param_groups: true}\n",
    "refusing": "optimizer: planted_run_model:ClosureRefusingSGD\nkwargs: {lr: 0.1}\nclosure: [false]\n"
                "checks: [law_grads_untouched, law_closure_loss, law_descent, law_hooks, closure_graph_break]\nlaws: {descent: true}\n",
    "randominit": "optimizer: planted_run_model:RandomInitSGD\nkwargs: {lr: 0.1}\nchecks: [law_determinism, fuzz_determinism]\n"
                  "fuzz: {determinism: {examples: {ci: 3, dev: 3}}}\n",
    "nanloss": "optimizer: planted_run_model:NanAfterOneStepSGD\nkwargs: {lr: 0.1}\nchecks: [law_closure_loss]\n",
    "inner": "optimizer: planted_run_model:InnerBackwardSGD\nkwargs: {lr: 0.1}\ngrad_mode: enabled\n"
             "checks: [parity, law_grads_untouched, law_determinism, in_backward, fuzz_determinism]\nfuzz: {determinism: {examples: {ci: 3, dev: 3}}}\n",
    "nonegrad": "optimizer: planted_run_model:NoneGradRefusingSGD\nkwargs: {lr: 0.01}\nlaws: {untouched: true}\n"
                "checks: [parity, none_grads, law_untouched, in_backward, in_backward_two_optimizers]\n",
    "noneassert": "optimizer: planted_run_model:NoneGradAssertingSGD\nkwargs: {lr: 0.01}\nlaws: {untouched: true}\n"
                  "checks: [parity, none_grads, law_untouched, in_backward, in_backward_two_optimizers]\n",
    "flagclosure": "optimizer: planted_run_model:ClosureFlagSGD\nkwargs: {lr: 0.1}\nchecks: [parity, fuzz_determinism]\n"
                   "cases: [{name: default}, {name: needs_closure, kwargs: {needs_closure: true}}]\n"
                   "fuzz: {determinism: {examples: {ci: 5, dev: 5}}}\n",
    "backwardflag": "optimizer: planted_run_model:BackwardFlagSGD\nkwargs: {lr: 0.01}\nclosure: [true]\nlaws: {descent: true}\n"
                    "checks: [parity, closure_graph_break, state_dict, law_descent, law_closure_loss]\n",
}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--optim-spec", "specs", "-v", "-rs", "-n", "0", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=root, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    root = tmp_path_factory.mktemp("run_model")
    for module in ("planted.py", "planted_run_model.py", "planted_unseen.py"):
        shutil.copy(TESTS / module, root / module)
    (root / "specs").mkdir()
    for name, text in SPECS.items():
        (root / "specs" / f"{name}.yaml").write_text(text)
    result = _run(root, "--optim-report", "report.json")
    return result.stdout, json.loads((root / "report.json").read_text()), root


def _outcomes(out: str, case: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(rf"::{re.escape(case)}::(\w+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL)", out)}


def test_a_step_that_calls_its_closure_with_a_backward_flag_is_served_by_every_run(session):
    out, _, _ = session  # torchzero's closure(backward=False): the loss alone, grads untouched; compiled steps pass it on too
    outcomes = _outcomes(out, "backwardflagsgd-default-closure-cpu")
    assert outcomes == dict.fromkeys(("parity", "closure_graph_break", "state_dict", "law_descent", "law_closure_loss"), "PASSED"), outcomes


def test_one_error_raised_in_several_checks_of_a_case_is_one_red(session):
    out, report, _ = session
    outcomes = _outcomes(out, "nonegradrefusingsgd-default-cpu")
    assert outcomes["parity"] == outcomes["in_backward"] == "PASSED", outcomes  # every grad set: nothing raises
    assert sorted(outcomes.values()).count("FAILED") == 1, outcomes
    assert "blocked by the same error in " in out and "AttributeError: 'NoneType' object has no attribute 'shape'" in out
    [cause] = [c for c in report["root_causes"] if c["optimizer"].endswith("NoneGradRefusingSGD")]
    assert (cause["red"], cause["blocked"]) == (1, 2), cause
    asserting = _outcomes(out, "nonegradassertingsgd-default-cpu")  # the optimizer's own assert: the same rule
    assert sorted(asserting.values()).count("FAILED") == 1 and "AssertionError: every param needs a grad" in out, asserting


def test_a_property_draws_no_case_whose_eager_step_fails_one_root_cause_is_one_red(session):
    out, _, _ = session
    assert _outcomes(out, "closureflagsgd-needs_closure-cpu") == {"parity": "FAILED"}
    assert _outcomes(out, "closureflagsgd-default-cpu") == {"parity": "PASSED"}
    assert _outcomes(out, "closureflagsgd-fuzz-cpu") == {"fuzz_determinism": "PASSED"}, out


def test_a_propertys_record_is_its_optimizers_so_the_table_gives_it_that_row(session):
    _, report, _ = session
    optimizers = {r["optimizer"] for r in report["items"] if r["case"] == "closureflagsgd-fuzz-cpu"}
    assert optimizers == {"planted_run_model:ClosureFlagSGD"}


def test_a_step_that_raises_is_one_red_and_blocks_the_rest_of_its_case(session):
    out, report, _ = session
    outcomes = _outcomes(out, "typosgd-default-cpu")
    assert sorted(outcomes.values()) == ["FAILED"] + ["SKIPPED"] * 6, outcomes
    assert outcomes["parity"] == "FAILED"
    assert "root cause of this case: its ladder's rung 'eager_steps' failed" in out
    assert "KeyError: 'momentun'" in out and "planted_run_model.py:" in out  # the optimizer's file and line
    assert re.search(r"SKIPPED \[6\] .*: blocked by eager_steps: at eager step 1: KeyError: 'momentun' \(\S*planted_run_model.py:\d+ in _update\)", out)
    [cause] = [c for c in report["root_causes"] if c["optimizer"].endswith("TypoSGD")]
    assert (cause["rung"], cause["red"], cause["blocked"]) == ("eager_steps", 1, 6)
    assert "planted_run_model.py" in cause["where"]
    assert "TypoSGD: 1 root cause, 1 red in 1 case(s), blocks 6 items: eager_steps" in out


def test_a_step_that_moves_nothing_is_one_red_not_a_vacuous_pass_per_check(session):
    out, report, _ = session
    outcomes = _outcomes(out, "idlesgd-default-cpu")
    assert outcomes == {"parity": "FAILED", "in_backward": "SKIPPED", "in_backward_no_hook": "SKIPPED", "law_descent": "SKIPPED"}, outcomes
    assert "the optimizer's step moved nothing" in out
    kinds = {r["check"]: (r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "idlesgd-default-cpu"}
    assert kinds == {"parity": "root_cause", "in_backward": "blocked", "in_backward_no_hook": "vacuous", "law_descent": "blocked"}


def test_a_diverged_run_is_not_compared_and_strict_mode_fails_it(session):
    out, report, root = session
    assert _outcomes(out, "explodingsgd-default-cpu") == {"parity": "SKIPPED"}
    assert re.search(r"explodingsgd-default-cpu: diverged: reference param '\S+' grew from scale", out)
    [item] = [r for r in report["items"] if r["case"] == "explodingsgd-default-cpu"]
    assert item["verdict"]["kind"] == "vacuous"
    assert "vacuous item(s): their comparison proved nothing" in out
    strict = _run(root, "--optim-strict", "-k", "explodingsgd")
    assert strict.returncode == 1 and "vacuous, and strict mode fails it" in strict.stdout


def test_the_laws_give_a_closure_only_where_the_spec_declares_closure_variants(session):
    out, _, _ = session
    outcomes = _outcomes(out, "closurerefusingsgd-default-cpu")
    assert outcomes == {"law_grads_untouched": "PASSED", "law_closure_loss": "SKIPPED", "law_descent": "PASSED",
                        "law_hooks": "PASSED", "closure_graph_break": "SKIPPED"}, out
    assert "law closure_loss: the spec declares no closure variant (`closure: [false]`" in out
    assert "the spec declares `closure: [false]` (its step refuses a closure): there is no step(closure) to compile" in out


def test_what_a_constructor_draws_comes_from_the_cases_seed_in_every_run(session):
    """torch_pso draws its particles in its constructor: the determinism law built its two optimizers at
    two RNG states, so two runs "with the same seeds" differed, a red that was the plugin's."""
    out, _, _ = session
    assert _outcomes(out, "randominitsgd-default-cpu") == {"law_determinism": "PASSED"}, out[-3000:]
    assert _outcomes(out, "randominitsgd-fuzz-cpu") == {"fuzz_determinism": "PASSED"}


def test_a_step_that_returns_its_closures_nan_loss_returns_its_closures_loss(session):
    out, _, _ = session
    assert _outcomes(out, "nanafteronestepsgd-default-cpu") == {"law_closure_loss": "PASSED"}, out[-3000:]


def test_a_step_that_runs_autograd_itself_steps_with_grad_on_and_its_inner_optimizers_compare_by_state(session):
    out, _, _ = session
    assert _outcomes(out, "innerbackwardsgd-default-cpu") == {"parity": "PASSED", "law_grads_untouched": "PASSED",
                                                                  "law_determinism": "PASSED", "in_backward": "SKIPPED"}, out
    assert "_apply_optimizer_in_backward steps it inside autograd's backward, where grad is off" in out
    assert _outcomes(out, "innerbackwardsgd-fuzz-cpu") == {"fuzz_determinism": "PASSED"}, out


def test_graphs_of_the_closure_are_not_the_steps(session):
    out, _, _ = session
    assert _outcomes(out, "untracedstepsgd-default-closure-cpu") == {"parity": "FAILED"}
    assert re.search(r"the step captured no graph of its own; the closure's \d+ graph\(s\) are not the step's", out)


def test_a_sharded_compiled_step_that_captured_no_graph_is_not_a_second_red(session):
    out, _, _ = session
    assert _outcomes(out, "untracedfsdp-default-cpu") == {"parity": "FAILED", "fsdp": "SKIPPED"}
    assert "captured no graph of the step over DTensor params, so the compiled comparison did not happen" in out


def test_ddps_compiled_half_of_a_step_that_compiles_wrong_anyway_is_blocked_not_a_second_red(session):
    out, _, _ = session
    assert _outcomes(out, "noisydist-default-cpu") == {"parity": "FAILED", "distributed": "SKIPPED"}
    assert "in one process the compiled train step (forward, backward and step) differs from eager already" in out


def test_a_compiled_train_step_that_raises_as_the_compiled_step_does_is_blocked_and_zero_still_runs(session):
    out, _, _ = session
    assert _outcomes(out, "raisedist-default-cpu") == {"parity": "FAILED", "distributed": "SKIPPED", "zero": "PASSED"}, out
    assert re.search(r"SKIPPED \[1\] .*: blocked by compiled_steps: CompiledStepOnlyError: only the compiled step raised.*; eager DDP on 2 ranks "
                     r"matches one process", out), out


def test_a_step_that_compiles_nothing_of_its_own_given_a_closure_is_its_closure_cases_one_red(session):
    out, _, _ = session
    assert _outcomes(out, "closurelosssgd-default-cpu") == {"parity": "PASSED", "closure_graph_break": "SKIPPED"}, out
    assert _outcomes(out, "closurelosssgd-default-closure-cpu") == {"parity": "FAILED"}, out
    assert re.search(r"SKIPPED \[1\] .*: blocked by graph_captured: .*\(case closurelosssgd-default-closure-cpu, whose parity "
                     r"item is that red\)", out), out


def test_a_sharded_compiled_step_that_raises_as_the_compiled_step_does_is_blocked_not_a_second_red(session):
    """adancfgd's AdaFGD: dynamo's InternalTorchDynamoError over whole params (parity's red) was fsdp's red
    too, "the same step over whole params in one process does not" raise: it does, compiled."""
    out, _, _ = session
    assert _outcomes(out, "raisefsdp-default-cpu") == {"parity": "FAILED", "fsdp": "SKIPPED"}, out
    assert re.search(r"SKIPPED \[1\] .*: blocked by compiled_steps: .*only the compiled step raised.*; the eager step over "
                     r"the same shards matches one process", out), out


def test_the_specs_setup_runs_on_the_optimizers_torch_builds_too(session):
    # schedule-free's train mode: _apply_optimizer_in_backward and ZeroRedundancyOptimizer build the optimizer
    # themselves, which then raised "not in train mode", the optimizer's error by the red
    out, _, _ = session
    assert set(_outcomes(out, "trainmodesgd-default-cpu").values()) == {"PASSED"}, out


def test_ranks_that_die_in_the_sharded_run_are_fsdps_one_red_and_block_checkpoint(session):
    out, _, _ = session
    assert _outcomes(out, "rankkillingsgd-default-cpu") == {"fsdp": "FAILED", "checkpoint": "SKIPPED"}, out
    # every rank exits; which one the harness sees first is a race
    assert re.search(r"SKIPPED \[1\] .*: blocked by fsdp: rank [01] failed \(exit code 3\)", out), out


def test_updates_that_round_away_at_low_precision_are_vacuous_not_red(session):
    out, report, _ = session
    outcomes = _outcomes(out, "plainsgd-default-bfloat16-cpu")
    assert outcomes == {"parity": "SKIPPED", "in_backward": "SKIPPED"}, outcomes
    assert "left every bfloat16 param bitwise unchanged (its updates round away at bfloat16)" in out
    assert {(r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "plainsgd-default-bfloat16-cpu"} == {"vacuous"}


@pytest.mark.parametrize("optimizer, present, absent", [
    ("planted_run_model:NoLrSGD", ["kwargs: {}  # NoLrSGD takes no lr"], ["{lr:", "tensor_lr", "StepLR", "param_groups: true"]),
    ("planted_run_model:SparseStateSGD", ["kwargs: {lr:"], []),
    ("planted_run_model:Bf16OnlySGD", ["dtypes: [bfloat16]  # its step refuses float32 params"], ["fill in `params`", "low_precision"]),
    ("planted_run_model:MatrixAndVectorSGD", ["determinism: {examples: {ci: 10, dev: 20}, min_dims: 1, allow_empty: false}",
                                              "  empty: false", "# fuzz draws no param of shape () (min_dims: 1)"], []),
    ("planted_run_model:RequiredMomentumSGD", ["momentum: 0.9}", "# momentum: 0.9: init's guesses for what the constructor requires"], []),
    ("planted_run_model:ClosureAssertingSGD", ["closure: [true]  # its step raises without a closure (AssertionError: "
                                               "ClosureAssertingSGD.step requires a closure, at ", "planted_run_model.py:"],
     ["fill in `params`", "its step raised at this lr"]),  # the laws' probe gives it a closure too (torchlab's SAM)
    ("planted_run_model:ClosureOnlyEmptyRefusingSGD", ["allow_empty: false}", "# fuzz draws no param of shape (0, 3) "
                                                       "(allow_empty: false): its step refused one alone: ValueError"], []),
    ("planted_run_model:LookaheadWrapper", ["params: wrapped  # it wraps an optimizer instance, `base_optimizer`",
                                            'kwargs: {base_optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}}'],
     ["fill in `params`"]),
    ("planted_run_model:MaskingWrapper", ["params: wrapped", 'optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}'],
     ["fill in `params`"]),
    ("planted_run_model:InitSkippingLookahead", ["params: wrapped", "base_optimizer: {optimizer:"],
     ["does not validate"]),
    ("planted:PlainSGD", ["closure: [false, true]"], []),
    ("planted_run_model:ClosureRefusingSGD", ["closure: [false]  # its step raises given a closure (AssertionError: "
                                              "Closure is not supported, at "], []),
    ("planted_run_model:InnerBackwardSGD", ["grad_mode: enabled  # its step raises under no_grad (RuntimeError: element 0"],
     []),
    ("planted_run_model:SparseOnlySGD", ["skip:  # its step refuses dense grads (RuntimeError: SparseOnlySGD does not support "
                                         "dense gradients, at ", "in _update) and steps sparse ones", "a sparse-gradient optimizer"], ["fill in `params`"]),
    # torchzero's lb, ub: equal guesses were refused as an empty range, and the spec blamed the optimizer for it
    ("planted_run_model:BoundedSearchSGD", ["lb: 0.1, ub: 0.9", "closure: [true]"], ["Bounds are not consistent", "skip:"]),
    # torchzero's ScipyDE: equal bounds step, to one point whatever the loss; apart, the search is under test
    ("planted_run_model:EmptyBoxSGD", ["lb: -1.0, ub: 1.0}"], ["lb: 0.9", "skip:"]),
    ("planted_run_model:CountedSGD", ["kwargs: {lr: 0.001, iters: 10}", "# iters: 10: init's guesses"], ["fill them in"]),
    # IVON's `ess: float`, required after lr: a hyperparameter guessed, not a second params argument; where no guess
    # steps (its step wants a protocol of its own), the first that constructs, so the spec loads and its runs show the error
    ("planted_run_model:SampleSizeSGD", ["kwargs: {lr: 0.001, ess: 0.9}", "# ess: 0.9: init's guesses"], ["argument: ess"]),
    # torch-clip's ClippedSSTM(params, lr, L): an unannotated positional number, told from a second params argument by
    # its stepping given one (init asked for `argument: L` param groups, and the spec did not load)
    ("planted_run_model:LipschitzSGD", ["kwargs: {lr: 0.001, L: 0.9}", "# L: 0.9: init's guesses"], ["argument: L", "does not validate"]),
    ("planted_run_model:LossValueSGD", ["skip:  # its step takes the loss's value as `loss`, not a closure",
                                        "step(loss)), a protocol of its own"], ["fill in `params`"]),
    # the zero_lr property draws over every case: a flag whose decay ignores lr leaves it out (zij's AdaGC)
    ("planted:ContiguousOnlySGD", ["determinism: {examples: {ci: 10, dev: 20}, allow_views: false}",
                                   "# fuzz draws no non-contiguous param (allow_views: false): its step refused a transposed "
                                   "one: ValueError: ContiguousOnlySGD requires contiguous parameters",
                                   "  views: false  # its step refuses a non-contiguous param on purpose"], []),
    # Adams_ZeRO's `assert p.is_contiguous()`: a claim as much as a raise is; fuzz and descent drew views and were red
    # torchopt's optimizers: each group a tuple of its params, no lr in it to scale
    ("planted_unseen:TupleGroupsSGD", ["# param_groups: left out: its param groups are its params alone"], ["  param_groups: true"]),
    ("planted:AssertsContiguousSGD", ["allow_views: false", "  views: false"], []),
    ("planted:FlatViewSGD", ["determinism: {examples: {ci: 10, dev: 20}}"], ["allow_views", "views: false"]),  # a .view accident: a bug, no claim
    ("planted_run_model:FixedDecaySGD", ["  - name: fixed_decay", "# zero_lr: left out: at lr 0 a step moved params "
                                         "(its step size does not scale with lr, or a decay ignores it) with fixed_decay=True"],
     ["  zero_lr: {"]),
    ("planted_run_model:SampledProtocolSGD", ["skip:  # its step raised TypeError", "it defines sampled_params, a context manager",
                                              "its `sampled_params` context around forward and backward"], ["fill in `params`"]),
    # text probed from the optimizer goes into the spec as one line, a reason quoted as YAML reads it (polystep's
    # dict-of-tensors closure argument and a quoted refusal broke the YAML); an optimizer without `state` is probed
    ("planted_run_model:TensorArgClosureSGD", ["skip:  # its step calls its closure with arguments (a dict): "], []),
    ("planted_run_model:QuotedRefusalSGD", ['it raises, on purpose: RuntimeError: call \\"prepare()\\" before step'], []),
    ("planted_run_model:NoStateWrapper", ["params: wrapped", "optimizer: {optimizer: \"torch.optim.SGD\""], ["fill in `params`"]),
    # schedule-free's protocol: train() before stepping, which the spec's setup gives every run (it was skipped)
    ("planted_run_model:TrainModeSGD", ["setup: pytest_optimtest.setups:train_mode  # its step raises outside train mode "
                                        "(RuntimeError: Optimizer was not in train mode", "  zero_lr: {"], ["skip:"]),
    ("planted_run_model:SampledContextSGD", ["kwargs: {lr: 0.001, ess: 0.9}", "(it constructs so; no guess of",
                                             "# one step over the default model raises (TypeError"], ["argument: ess", "fill them in"]),
    ("planted_run_model:LrDividingSGD", ["# zero_lr: left out: at lr 0 a step raised ZeroDivisionError"], ["  zero_lr: {"]),
    ("planted_run_model:FixedStepSGD", ["# zero_lr: left out: at lr 0 a step moved params",
                                        "# param_groups: left out: at lr 0 a step moved params"], ["  zero_lr: {", "  param_groups: true"]),
    # a search by its closure's loss (swarmtorch's PSO keeps `maximize` through **kwargs): no property over negated grads
    ("planted_unseen:LossSearch", ["# untouched: left out"], ["  maximize: {", "  untouched: true"]),
    ("planted_run_model:ScalarDroppingSGD", ["(min_dims: 1): its step refused one alone: ValueError"], []),
    ("planted_run_model:FlaggedSGD", ["(min_dims: 1): its step refused one alone with per_row=True: TypeError"], []),
    ("planted_run_model:StackingSGD", ["determinism: {examples: {ci: 10, dev: 20}, min_dims: 1}",
                                       "its step refused one beside a matrix: IndexError"], []),
    ("planted:NoisySGD", ["fallback_random: true  # its step draws from torch's RNG"], []),
    ("planted:PlainSGD", [], ["fallback_random", "grad_mode"]),
    ("planted_run_model:NoLrFlaggedSGD", ["  - name: nesterov", "    kwargs: {nesterov: true}"], ["{lr:", "rejects it"]),
    ("planted_run_model:ArgumentClosureSGD", ["skip:  # its step calls its closure with arguments (probes=a dict): "
                                              "TypeError: closure() takes no arguments, or one bool saying whether to run "
                                              "backward; it was given (probes=dict)", "a protocol of its own"], ["fill in `params`"]),
    # torchzero's closure(backward=False): the plugin's closures take the flag (builder.backward_flag)
    ("planted_run_model:BackwardFlagSGD", ["closure: [true]"], ["skip:", "protocol"]),
    ("planted_run_model:EpochScheduledSGD", ["num_epochs: 10, num_batches_per_epoch: 10}"], []),
    ("planted_run_model:UseMuonGroupsSGD", ["params:  # matrices in a group with use_muon: true", "  - {min_ndim: 2, use_muon: true}",
                                            "  - {use_muon: false}"], ["fill in `params`"]),
    ("planted_run_model:EmptyRefusingMuonGroupsSGD", ["  - {min_ndim: 2, use_muon: true}", "allow_empty: false}",
                                                      "# fuzz draws no param of shape (0, 3) (allow_empty: false): its step "
                                                      "refused one alone: ValueError: use_muon params need both sides"],
     ["init steps loose params only"]),
    ("planted_run_model:ConfigSGD", ['kwargs: {cfg: {call: "planted_run_model:SGDConfig"}}', "# cfg: SGDConfig() with its defaults"],
     ["does not validate"]),
    ("planted_run_model:SharpnessAware", ['kwargs: {base: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}}',
                                         "# base: torch.optim.SGD over the same params"], ["does not validate", "fill in `params`"]),
    ("planted_run_model:FloatLrSGD", ["# left out: tensor_lr: a tensor lr is refused (TypeError: lr must be a float)",
                                      "  - name: scheduled\n    schedulers: true"], ["tensor_lr: [", "{tensor:"]),
    ("planted_run_model:MatrixOnlyConstructorSGD", ["model: pytest_optimtest.models:two_linear_no_bias  # its constructor "
                                                    "refuses 1-D params", "  - name: nesterov", "  min_ndim: 2"],
     ["fill in `params`", "left out: nesterov"]),
    ("planted_run_model:MatrixOnlyBf16SGD", ["model: pytest_optimtest.models:two_linear_no_bias  # its constructor refuses",
                                            "dtypes: [bfloat16]  # its step refuses float32 params"], ["fill in `params`"]),
    ("planted_run_model:SingleTensorOnlySGD", ["# left out: foreach: True: SingleTensorOnlySGD rejects it: ValueError: "
                                               "_multi_tensor_sgd not implemented yet"], ["foreach: [{foreach: false}"]),
    ("planted_run_model:RelativeStepSGD", ["kwargs: {}  # RelativeStepSGD refuses an lr with its other defaults (ValueError: "
                                           "Cannot combine manual `lr`", "kwargs: {relative_step: false, lr: 0.001}  # with lr: 0.001"],
     ["tensor_lr", "low_precision\n    kwargs: {lr"]),
    ("planted_run_model:LossClosureSGD", ["backward: by_step  # its step differentiates the loss its closure returns",
                                          "psgd's protocol", "closure: [true]"], ["fill in `params`", "skip:"]),
    ("planted_run_model:WarmupFirstSGD", ["# one step over the default model raises (KeyError: 'gsnr', at ", "planted_run_model.py:",
                                          "where it reads 'gsnr' from its param groups, fill in `params` groups that set it"],
     ["skip:", "psgd's protocol", "left out: tensor_lr", "zero_lr: left out"]),  # a step that moves nothing without grads does not
    # differentiate the closure's loss; and a tensor lr raising the default case's own error is no refusal of it
    ("planted_run_model:SwallowingSGD", ["# left out of the laws and properties: foreach, maximize: the constructor accepts it"],
     ["foreach: [{foreach: false}", "  maximize:"]),
    # the fourteenth unseen set: a wrapper refusing without a None-default it names (DropGrad), and constructors that
    # refuse every params form, each told what it takes instead of "fill in `params`" (infty, gdtuo, ecoint8, CGDs)
    ("planted_run_model:DropRateWrapper", ["params: wrapped", "drop_rate: 0.9", "# drop_rate: 0.9: init's guesses"], ["skip:"]),
    ("planted_run_model:ModelArgsSAM", ["it takes arguments init has no guess for (base_optimizer, model, args): give them "
                                        "under kwargs", "and remove this skip"], ["fill in `params`"]),
    ("planted_run_model:HyperparameterOnly", ["it takes no params: its first argument, `alpha`, is a number (default 0.01)",
                                              "not supported\"}"], ["fill in `params`", "remove this skip"]),
    ("planted_run_model:LayersSGD", ["objects of its own kind in its first argument, `layers`"], ["fill in `params`"]),
    ("planted_run_model:MinMaxGame", ["its constructor takes two sets of params (max_params, min_params) and its step the "
                                      "loss itself (step(loss))"], ["does not validate"]),
    ("planted_run_model:AscentSGD", ["  # descent: true  # uncomment if it claims this: init saw it broken on its first "
                                     "case: AssertionError: ", "law descent broken"], ["  descent: true"]),
])
def test_init_probes_instead_of_guessing_and_every_spec_it_writes_loads(tmp_path, monkeypatch, capsys, optimizer, present, absent):
    from pytest_optimtest.scaffold import write_starter_spec

    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, tmp_path / module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "spec.yaml"
    assert write_starter_spec(optimizer, path) == 0, capsys.readouterr().err
    text = path.read_text()
    assert "Traceback" not in capsys.readouterr().err
    assert "# Run it:" not in text or f"# Run it: pytest --optim-spec {path} " in text  # the file -o wrote, not <class>.yaml
    for line in present:
        assert line in text, text
    for line in absent:
        assert line not in text, text


@pytest.mark.parametrize("wrapper", ["LookaheadWrapper", "MaskingWrapper"])
def test_a_wrapper_over_an_optimizer_instance_is_specified_by_init_and_runs_green(pytester, wrapper):
    """Lookahead and Magma take the optimizer they wrap, not params: `params: wrapped` builds their base
    over the params in every construction (in backward's per-param ones and ZeRO's shards included)."""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    init = pytester.run(sys.executable, "-m", "pytest_optimtest", "init", f"planted_run_model:{wrapper}", "-o", "w.yaml")
    assert init.ret == 0, init.stderr.str()
    result = pytester.runpytest_subprocess("--optim-spec", "w.yaml", "-n", "0", "-p", "no:randomly", "-rfs", "-k",
                                           "default and (parity or graph_breaks or in_backward or law_descent or law_untouched) "
                                           "and not two_optimizers")  # Lookahead counts steps: torch's double step, said
    outcomes = result.parseoutcomes()
    # graph_breaks: the base's torch.optim step is compiled raw, as the optimizer's own is (TopoAdamW's red)
    assert outcomes.get("passed", 0) >= 6 and not outcomes.get("failed") and not outcomes.get("error"), result.stdout.str()
    # both count their steps, so torch's double step in backward is their one red there, said (MaskingWrapper has no step hooks)
    double = pytester.runpytest_subprocess("--optim-spec", "w.yaml", "-n", "0", "-p", "no:randomly", "-k", "default and two_optimizers")
    double.assert_outcomes(failed=1)
    assert "step() ran 2 times in one backward" in double.stdout.str() and "an error inside pytest-optimtest" not in double.stdout.str()


def test_params_wrapped_without_a_base_optimizer_to_carry_them_is_a_spec_error(pytester):
    pytester.makepyfile(planted=(TESTS / "planted.py").read_text(), planted_run_model=(TESTS / "planted_run_model.py").read_text())
    pytester.makefile(".yaml", w="optimizer: planted_run_model:LookaheadWrapper\nparams: wrapped\nkwargs: {k: 2}\n")
    result = pytester.runpytest_subprocess("--optim-spec", "w.yaml", "-n", "0")
    result.stdout.fnmatch_lines(["*w.yaml:*`params: wrapped` gives LookaheadWrapper no params of its own, and no kwarg is the base optimizer*"])


def test_parity_is_the_one_red_of_a_compiled_only_difference_in_whatever_order_the_items_run(pytester):
    pytester.makeconftest("def pytest_collection_modifyitems(items):\n    items.reverse()  # as pytest-randomly may\n")
    pytester.makepyfile(planted=(TESTS / "planted.py").read_text())
    pytester.makefile(".yaml", noisy="optimizer: planted:NoisySGD\nkwargs: {lr: 0.1}\nchecks: [parity, none_grads]\n")
    result = pytester.runpytest_subprocess("--optim-spec", "noisy.yaml", "-n", "0", "-p", "no:randomly", "-v")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*::none_grads SKIPPED*", "*::parity FAILED*"])


def test_a_law_over_a_kwarg_the_constructor_swallows_is_vacuous_not_green(pytester):
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    pytester.makefile(".yaml", swallow="optimizer: planted_run_model:SwallowingSGD\nkwargs: {lr: 0.1}\nchecks: [law_equivalent]\n"
                      "laws:\n  equivalent:\n    foreach: [{foreach: false}, {foreach: true}]\n")
    result = pytester.runpytest_subprocess("--optim-spec", "swallow.yaml", "-n", "0", "-p", "no:randomly", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*vacuous: law equivalent[[]foreach[]]: SwallowingSGD accepted foreach and kept it nowhere*"])


def test_diagnoses_belong_to_the_run_and_a_compiled_only_difference_is_one_red(session):
    out, report, _ = session
    outcomes = _outcomes(out, "noisysgd-default-cpu")
    assert outcomes == {"parity": "FAILED", "none_grads": "SKIPPED", "state_dict": "SKIPPED", "in_backward": "SKIPPED"}, outcomes
    rng = "the optimizer draws random numbers in its step, and inductor's RNG is not eager's"
    parity = out[out.index("[parity] noisysgd-default-cpu"):]
    assert rng in parity[:parity.index("\n___")]
    # per-param stepping lands the draws elsewhere: a comparison that proves nothing, so vacuous, not a second red
    assert re.search(r"SKIPPED .*noisysgd-default-cpu: vacuous: not comparable: the optimizer draws from torch's global "
                     r"RNG \(as it makes its state or steps\), and in_backward steps params in another order", out)
    [record] = [r for r in report["items"] if r["case"] == "noisysgd-default-cpu" and r["check"] == "none_grads"]
    assert record["verdict"]["kind"] == "blocked" and record["verdict"]["rung"] == "compiled_matches", record["verdict"]
    assert rng in record["verdict"]["cause"]
    assert "blocked by compiled_matches: the compiled step differs from eager after" in out


def test_a_check_blocked_by_a_declared_failure_is_an_xfail_not_a_blocked_skip(session):
    out, report, _ = session
    assert _outcomes(out, "noisyx-default-cpu") == {"parity": "XFAIL", "none_grads": "XFAIL"}
    kinds = {r["check"]: (r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "noisyx-default-cpu"}
    assert kinds == {"parity": "root_cause", "none_grads": "blocked"}
    assert re.search(r"specs/noisyx\.yaml +0 +0 +2 +0 +0 +0 ", out), "the table counts no blocked item"


def test_a_low_precision_difference_is_called_inductors_rounding_only_when_emulate_precision_casts_removes_it(session):
    out, _, _ = session
    import torch

    assert _outcomes(out, "roundingchainsgd-default-bfloat16-cpu") == {"parity": "FAILED"}
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) not in {(2, 13), (2, 14)}:
        # only on 2.13 and 2.14 does emulate_precision_casts make this chain round as eager does; on 2.11 and
        # 2.15 (CPU; 2.12 and older not run) 4 values still differ: so the difference is not called rounding,
        # and aot_eager names inductor
        assert "with inductor's emulate_precision_casts=True the step still differs" in out
        assert "torch's doing (inductor's rounding" not in out
        return
    assert "torch's doing (inductor's rounding at bfloat16): inductor computes the step's pointwise chain in float32" in out


def test_inductors_rounding_in_checks_other_than_parity_is_one_red_said_torchs(session):
    # gefen's bf16 codebook: none_grads and closure_graph_break each red "the optimizer's, by this check's verdict"
    out, report, _ = session
    import torch

    outcomes = _outcomes(out, "chainregimes-default-bfloat16-cpu")
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) not in {(2, 13), (2, 14)}:
        return  # emulate_precision_casts does not make this chain round as eager there (the test above)
    assert outcomes == {"none_grads": "FAILED", "closure_graph_break": "SKIPPED", "state_dict": "SKIPPED"}, outcomes
    assert "run again with emulate_precision_casts=True, none_grads passes, so the difference is that rounding" in out
    assert out.count("blocked by the same cause in none_grads: torch's doing (inductor's rounding at bfloat16)") == 2
    kinds = {r["check"]: (r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "chainregimes-default-bfloat16-cpu"}
    assert kinds == {"none_grads": "root_cause", "closure_graph_break": "blocked", "state_dict": "blocked"}, kinds


def test_low_precision_math_inside_a_float32_step_is_checked_with_emulate_precision_casts_too(session):
    out, _, _ = session
    import torch

    assert _outcomes(out, "internalbf16chainsgd-default-cpu") == {"parity": "FAILED"}
    said = "torch's doing (inductor's rounding of the step's own low-precision math (its params are float32))"
    if tuple(int(v) for v in torch.__version__.split(".")[:2]) not in {(2, 13), (2, 14)}:
        assert said not in out  # as for the bf16 chain above: there the rerun does not remove the difference
        return
    assert said in out


def test_a_float32_difference_that_scales_with_precision_is_vacuous_and_one_that_does_not_is_red(session):
    out, report, _ = session
    growing = _outcomes(out, "roundinggrowingsgd-default-cpu")
    assert growing == {"parity": "SKIPPED", "none_grads": "SKIPPED", "state_dict": "SKIPPED"}, growing
    assert "not comparable at float32: over float64 params the compiled" in out
    kinds = {r["check"]: (r["verdict"] or {}).get("kind") for r in report["items"] if r["case"] == "roundinggrowingsgd-default-cpu"}
    assert kinds == {"parity": "vacuous", "none_grads": "vacuous", "state_dict": "vacuous"}, kinds
    offset = _outcomes(out, "compiledoffsetsgd-default-cpu")  # the same at float64: a value computed otherwise
    assert offset == {"parity": "FAILED", "none_grads": "SKIPPED"}, offset


def test_regimes_share_the_one_comparison_and_the_steps_signature(session):
    out, _, _ = session
    assert _outcomes(out, "groupcountingsgd-default-cpu") == {"fsdp": "PASSED"}  # dynamo's `capturable` is not compared
    assert _outcomes(out, "noclosuresgd-default-cpu") == {"checkpoint": "PASSED"}  # DCP's step(closure=None)
    assert _outcomes(out, "namedparamssgd-default-cpu") == {"law_param_groups": "SKIPPED"}
    assert re.search(r"NamedParamsSGD refuses param groups \(of named params\)", out)


def test_every_pass_carries_its_evidence_as_data(pytester):
    pytester.makefile(".yaml", adam="optimizer: torch.optim.Adam\nkwargs: {lr: 0.01}\nsteps: 3\n"
                      "checks: [parity, recompile, graph_breaks, none_grads, state_dict, in_backward, law_untouched, "
                      "law_descent, law_equivalent, law_param_groups]\n"
                      "laws: {untouched: true, descent: true, param_groups: true, equivalent: {foreach: [{foreach: false}, {foreach: true}]}}\n")
    result = pytester.runpytest_subprocess("--optim-spec", "adam.yaml", "-n", "0", "-p", "no:randomly", "--optim-report", "r.json")
    result.assert_outcomes(passed=10)
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    assert {r["check"]: bool(r["evidence"]) for r in items} == dict.fromkeys([r["check"] for r in items], True)
    parity = next(r["evidence"] for r in items if r["check"] == "parity")
    assert parity["step_graphs"] >= 1 and parity["closure_graphs"] == 0 and parity["moved_tolerances"] >= 10
    equivalent = next(r["evidence"] for r in items if r["check"] == "law_equivalent")
    assert equivalent["foreach"]["reached_optimizer"] == ["foreach"]


def test_a_changed_lr_that_rounds_to_the_same_update_is_widened_before_it_is_called_ignored(session):
    out, _, _ = session
    assert _outcomes(out, "coarselrsgd-default-cpu") == {"law_param_groups": "PASSED"}


def test_one_cause_seen_through_two_generated_files_is_one_root_cause():
    from pytest_optimtest.report import Results, root_cause_lines

    def item(case, kind, path, outcome):
        cause = f"CompiledStepOnlyError: NameError ({path}:388 in call (torch))"
        return {"spec": "s.yaml", "case": case, "check": "parity", "optimizer": "pkg:Opt", "outcome": outcome,
                "verdict": {"kind": kind, "rung": "compiled_steps", "cause": cause, "where": f"{path}:388 in call (torch)"}}

    results = Results([item("a", "root_cause", "/tmp/torchinductor_u/i7/ci75.py", "failed"),
                       item("b", "root_cause", "/tmp/torchinductor_u/4c/c4cf.py", "xfailed"),
                       item("b", "blocked", "/tmp/torchinductor_u/4c/c4cf.py", "skipped")])
    [cause] = results.root_causes()
    assert (cause["red"], cause["xfailed"], cause["blocked"], cause["cases"]) == (2, 1, 1, ["a", "b"])
    assert root_cause_lines(results) == ["optimtest: pkg:Opt: 1 root cause, 2 red (1 of them xfailed) in 2 case(s), blocks 1 "
                                         "items: compiled_steps: CompiledStepOnlyError: NameError (<code inductor generated> "
                                         "in call (torch)) (<code inductor generated> in call (torch))"]


def test_one_mechanism_that_differs_by_other_numbers_in_each_case_is_one_root_cause():
    from pytest_optimtest.report import Results, root_cause_lines

    def item(case, cause, rung="compiled_matches"):
        return {"spec": "s.yaml", "case": case, "check": "parity", "optimizer": "torch.optim.Muon", "outcome": "xfailed",
                "verdict": {"kind": "root_cause", "rung": rung, "cause": cause, "where": ""}}

    differs = "the compiled step differs from eager after 6 steps ({} difference(s), first: param['0.weight']: {}/100 " \
              "elements differ; max abs diff {} at index (0, 5) (eager 0.083276637, compiled {}))"
    results = Results([item("a", differs.format(2, 98, "0.000528", "0.0838")),
                       item("b", differs.format(1, 21, "1.3e-02", "-0.13")),
                       item("c", "the compiled step raised KeyError: 'sum'", rung="compiled_steps")])
    grouped, other = results.root_causes()
    assert (grouped["red"], grouped["cases"], grouped["cause"]) == (2, ["a", "b"], differs.format(2, 98, "0.000528", "0.0838"))
    assert other["cases"] == ["c"] and not other["numbers_differ"]
    assert root_cause_lines(results)[0].endswith("(its numbers differ per case; the first case's shown)")


def test_a_step_that_captures_no_graph_is_one_root_cause_in_plain_and_closure_cases():
    from pytest_optimtest.report import Results, root_cause_lines

    def item(case, cause):
        return {"spec": "s.yaml", "case": case, "check": "parity", "optimizer": "adamr:AdamR", "outcome": "failed",
                "verdict": {"kind": "root_cause", "rung": "graph_captured", "cause": cause, "where": ""}}

    results = Results([item("adamr-default-cpu", "torch.compile captured no graph of the step (it ran eagerly or traced "
                                                 "to no tensor operation)"),
                       item("adamr-default-closure-cpu", "the step captured no graph of its own; the closure's 1 graph(s) "
                                                         "are not the step's (the step ran eagerly around a compiled closure)")])
    [cause] = results.root_causes()
    assert (cause["red"], cause["cases"]) == (2, ["adamr-default-closure-cpu", "adamr-default-cpu"])
    assert root_cause_lines(results) == ["optimtest: adamr:AdamR: 1 root cause, 2 red in 2 case(s), blocks 0 items: "
                                         "graph_captured: torch.compile captured no graph of the step (it ran eagerly or "
                                         "traced to no tensor operation)"]


def test_a_checks_diagnoses_are_its_own_not_those_of_the_checks_that_failed_before_it():
    from types import SimpleNamespace

    from pytest_optimtest.harness.diagnosis import run_diagnoses

    run = SimpleNamespace(diagnoses=["compiled with aot_eager ... differs too"])
    zero = run_diagnoses("zero", run, ("torch",))
    in_backward = run_diagnoses("in_backward", run, ("torch",))
    assert run.diagnoses == ["compiled with aot_eager ... differs too"]
    assert any("zero steps params" in line for line in zero)
    assert not any("zero steps params" in line for line in in_backward)
    assert run_diagnoses("law_equivalent", None, ("torch",)) == []  # an eager law: no compiled run's diagnosis


def test_every_red_says_whose_doing_it_is_and_how_to_see_it_again(session):
    out, _, _ = session
    noisy = out[out.index("[parity] noisysgd-default-cpu"):]
    noisy = noisy[:noisy.index("\n___")]
    assert "reproduce: pytest --optim-spec specs/noisy.yaml -k 'noisysgd-default-cpu and parity'" in noisy
    idle = out[out.index("[parity] idlesgd-default-cpu"):]
    idle = idle[:idle.index("\n___")]
    assert "whose doing: the optimizer's, by this check's verdict" in idle
    assert "reproduce: pytest --optim-spec specs/idle.yaml -k 'idlesgd-default-cpu and parity'" in idle


def test_a_red_that_lists_dynamos_graph_breaks_names_the_call_that_broke_in_its_reported_reason():
    """eve's RAdam: a deprecated addcmul_ overload in the param loop skips the whole frame; the
    reason the JSON report and the table carry must keep the list, and the list must name the call."""
    import torch
    import torch._dynamo

    from pytest_optimtest.harness import torch_api
    from pytest_optimtest.report import _verdict_text

    def step(tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            t.addcmul_(0.5, t, t)

    def wrapper(tensors: list[torch.Tensor]) -> None:  # as torch.optim's profiling wrapper calls a step
        step(tensors)

    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="deprecated"):
        torch.compile(wrapper, backend="eager")([torch.ones(2), torch.ones(3)])
    [summary] = [torch_api.graph_break_summary(reason) for reason in torch_api.graph_break_counts()]
    torch._dynamo.reset()
    assert "addcmul_" in summary
    body = ["root cause of this case: its ladder's rung 'graph_captured' failed", "c-cpu: not compiled: ...; dynamo's graph "
            "breaks:", f"    - {summary}", "whose doing: the optimizer's", "reproduce: pytest ..."]
    assert _verdict_text(body) == f"{body[0]} {body[1]} - {summary}"
    assert _verdict_text(["a: differs:", "  x", "  y", "  z", "  w", "more"]) == "a: differs: x / y / z"
    assert _verdict_text(["one", "two", "three"]) == "one two"


def test_a_reported_reason_keeps_what_a_fuzz_example_raised_and_a_list_of_lists():
    """RelativisticAdam's `.view` over a transposed param: the JSON report and the table said the
    example, not the error it raised nor where; TopologicalAdamV4's zero red said nothing after its
    first line (its lists are headed by a line indented by one space)."""
    from pytest_optimtest.report import _verdict_text

    body = ["c-fuzz-cpu fuzz_determinism: falsified (hypothesis profile 'dev', 43 examples run); minimal example:",
            "    case=load_case('s.yaml', 'c-default-cpu'), params=Params(Param((2, 2), 'transposed'))",
            "RuntimeError: view size is not compatible with input tensor's size and stride",
            "  at /site-packages/opt/optimizer.py:122 in _scale (the optimizer's doing)", "rerun: pytest ...", "pin it ..."]
    assert _verdict_text(body) == " ".join([body[0], body[1].strip(), body[2], body[3].strip()])
    verdict = ["c: maximize must flip the update's sign; minimal example:", "    params=Params(Param(()))", "rerun: pytest ..."]
    assert _verdict_text(verdict) == " ".join([verdict[0], verdict[1].strip()])  # a property's own verdict: nothing raised
    zero = ["c: ZeroRedundancyOptimizer over 2 ranks, 3 steps:", " ZeRO vs unsharded on rank 0:", "    param['1.weight']: differ",
            "    param['1.bias']: differ", " ZeRO vs unsharded on rank 1:", "whose doing: the optimizer's"]
    assert _verdict_text(zero) == f"{zero[0]} ZeRO vs unsharded on rank 0: / param['1.weight']: differ / param['1.bias']: differ"


def test_an_optimizer_that_skipped_optimizer_init_is_one_red_wherever_torch_reads_what_init_sets(pytester):
    """eve's Lookahead: the step's hooks, state_dict's hooks, the ranks' DDP step and DCP's save each
    raise an AttributeError of their own, at lines of their own; one root cause, one red."""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    init = pytester.run(sys.executable, "-m", "pytest_optimtest", "init", "planted_run_model:InitSkippingLookahead", "-o", "w.yaml")
    assert init.ret == 0, init.stderr.str()
    result = pytester.runpytest_subprocess(
        "--optim-spec", "w.yaml", "-n", "0", "-p", "no:randomly", "-rfs", "-k",
        "default and not closure and not low_precision and (closure_graph_break or law_grads_untouched or state_dict "
        "or distributed or zero or checkpoint or law_hooks)")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("skipped", 0) >= 4 and not outcomes.get("passed"), out
    assert "diagnosis: torch.optim.Optimizer's" in out and "running as a compiled step" not in out, out
    causes = [line for line in out.splitlines() if line.startswith("optimtest: planted_run_model:InitSkippingLookahead:")]
    assert len(causes) == 1 and "1 root cause, 1 red in 1 case(s), blocks 5 items" in causes[0], causes
    assert "never called torch.optim.Optimizer.__init__" in causes[0]


def test_a_reds_reported_reason_carries_its_diagnosis_whose_doing_it_is():
    """PILOT's in_backward_two_optimizers red is torch's double step in backward: the JSON report,
    the table and record.py's xfails must say so, not only what differed."""
    from pytest_optimtest.report import _reason

    class Report:
        longreprtext = ("[in_backward_two_optimizers] p-cpu (w.yaml:3)\np-cpu: in-backward params differ after step 2:\n"
                        "    param['w']: 99/100 elements differ\n    param['b']: 10/10 elements differ\n"
                        "  diagnosis: torch's doing: each optimizer's step() ran 2 times in one backward\n"
                        "reproduce: pytest --optim-spec w.yaml -k 'p-cpu and in_backward_two_optimizers'")

    assert _reason(Report(), "failed") == ("p-cpu: in-backward params differ after step 2: param['w']: 99/100 elements differ / "
                                           "param['b']: 10/10 elements differ diagnosis: torch's doing: each optimizer's "
                                           "step() ran 2 times in one backward")


def test_one_error_raised_at_two_lines_of_one_function_is_one_red(pytester):
    """DoG reads p.grad without asking in two list comprehensions of its step: none_grads meets it at one
    line (a grad gone at step 2), law_untouched at the other (a param without a grad at step 1)."""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    pytester.makefile(".yaml", s="optimizer: planted_run_model:TwoPlacesNoneGradSGD\nkwargs: {lr: 0.01}\nlaws: {untouched: true}\n")
    result = pytester.runpytest_subprocess("--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rfs", "-k",
                                           "default and not closure and (none_grads or law_untouched)")
    out = result.stdout.str()
    result.assert_outcomes(failed=1, skipped=1)
    assert "blocked by the same error in" in out and "AttributeError: 'NoneType' object has no attribute 'detach'" in out, out


def test_a_torch_function_called_with_arguments_it_does_not_take_is_the_optimizers_doing():
    """agc_optims' Adam_AGC calls torch's functional adam() without `maximize`: torch's decorator frame
    raises the TypeError, and the red said "torch's doing"."""
    import torch

    from planted_run_model import OldSignatureAdam

    from pytest_optimtest.harness.blame import blame

    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'maximize'") as raised:
        OldSignatureAdam([param], lr=0.1).step()
    found = blame(raised.value)
    assert "torch" in found.innermost and "planted_run_model.py" in found.where  # torch's frame raised it
    assert found.owner == "optimizer" and "calls torch's adam() with arguments that torch" in found.note
    with pytest.raises(TypeError) as own:
        torch.optim.SGD([param], lr=0.1).step(1)  # torch's own code, no optimizer frame: not the optimizer's
    assert blame(own.value).owner != "optimizer"

