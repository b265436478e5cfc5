"""The run model's verdicts (issues 32 and 38) that each take a session or a spec of their own: init's
probes, one root cause across generated files and cases, what a red's reported reason carries. The
verdicts of the one session over all planted optimizers are tests/test_run_model.py's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from warm import run_init, run_pytest

from pytest_optimtest.harness.torch_api import fsdp2_runs_on_cpu

TESTS = Path(__file__).resolve().parent


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
                                            'kwargs: {base_optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}}',
                                            "  param_groups: true  # each group's own lr"],  # its base's groups, its base's lr
     ["fill in `params`", "tensor_lr:"]),
    ("planted_run_model:MaskingWrapper", ["params: wrapped", 'optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}',
                                          "  param_groups: true  # each group's own lr"],
     ["fill in `params`", "tensor_lr:"]),
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
    # the twenty-first unseen set: allennlp's HuggingfaceAdafactor takes named params alone; its lr was judged in a list
    ("planted_run_model:NamedRelativeStepSGD", ["kwargs: {}  # NamedRelativeStepSGD refuses an lr with its other defaults "
                                                "(ValueError: Cannot combine manual `lr`", "params: named"],
     ["skip:", "give `model:`"]),
    ("planted_run_model:KeywordOnlySGD", ["it takes keyword arguments alone: give its params by name, in `params` groups "
                                          "with `argument` (docs/specs.md), and under kwargs what it requires that init has "
                                          "no guess for (peer)"], ["form init could not find"]),
    ("planted_run_model:RankShardedSGD", ["it takes an initialized torch.distributed process group as it constructs "
                                          "(ValueError: Default process group has not been initialized", "not supported\"}"],
     ["give `model:`", "and remove this skip"]),
    ("planted_run_model:AccumulatingWrapper", ["params: wrapped", 'kwargs: {optimizer: {optimizer: "torch.optim.SGD"',
                                               "its constructor refuses, on purpose, to wrap torch.optim.SGD with its other "
                                               "defaults: RuntimeError: AccumulatingWrapper does not support a single worker "
                                               "without grad accumulation., at ", "give under kwargs the settings it asks for"],
     ["form init could not find", "give `params`"]),
    ("planted_run_model:TrustRatioSGD", ["  - name: low_precision", "# at bf16: its updates round away at every lr tried (",
                                         "where float32 params move: each is under bfloat16's resolution"],
     ["does not step params given only their grads"]),
    # mmpretrain's LARS moved 1.2 tolerances at init's cap of lr 0.01, and six of its items were vacuous
    ("planted_run_model:LayerwiseTrustSGD", ["kwargs: {lr: 0.1}  # the params move under 20 tolerances at every lr tried (lr: "
                                             "tolerances 0.001: 0.12, 0.01: 1.22, 0.1: 12.2)"], []),
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


def test_wrappers_over_an_optimizer_instance_are_specified_by_init_and_run_green(pytester):
    """Lookahead and Magma take the optimizer they wrap, not params: `params: wrapped` builds their base
    over the params in every construction (in backward's per-param ones and ZeRO's shards included).
    (One session over both wrappers' specs.)"""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    wrappers = ("LookaheadWrapper", "MaskingWrapper")
    for wrapper in wrappers:
        init = run_init(pytester, "init", f"planted_run_model:{wrapper}", "-o", f"{wrapper}.yaml")
        assert init.ret == 0, init.stderr.str()
    result = run_pytest(pytester, *(arg for wrapper in wrappers for arg in ("--optim-spec", f"{wrapper}.yaml")),
                                           "-n", "0", "-p", "no:randomly", "-rfs", "--optim-report", "r.json", "-k",
                                           "default and (parity or graph_breaks or in_backward or law_descent or law_untouched "
                                           "or law_param_groups)")
    out = result.stdout.str()
    assert "an error inside pytest-optimtest" not in out, out
    for wrapper in wrappers:
        items = [item for item in json.loads((pytester.path / "r.json").read_text())["items"] if item["spec"] == f"{wrapper}.yaml"]
        green = [item for item in items if item["check"] != "in_backward_two_optimizers"]
        # graph_breaks: the base's torch.optim step is compiled raw, as the optimizer's own is (TopoAdamW's red)
        assert sum(item["outcome"] == "passed" for item in green) >= 6, (wrapper, out)
        assert not [item for item in green if item["outcome"] in ("failed", "error")], (wrapper, out)
        # init proposes the law over its base's groups (the wrapper takes no lr), and it holds
        assert [item["outcome"] for item in items if item["check"] == "law_param_groups"] == ["passed"], (wrapper, out)
        # both count their steps, so torch's double step in backward is their one red there, said (MaskingWrapper has no step hooks)
        (double,) = [item for item in items if item["check"] == "in_backward_two_optimizers"]
        assert double["outcome"] == "failed" and "step() ran 2 times in one backward" in double["reason"], (wrapper, double)


def test_params_wrapped_without_a_base_optimizer_to_carry_them_is_a_spec_error(pytester):
    pytester.makepyfile(planted=(TESTS / "planted.py").read_text(), planted_run_model=(TESTS / "planted_run_model.py").read_text())
    pytester.makefile(".yaml", w="optimizer: planted_run_model:LookaheadWrapper\nparams: wrapped\nkwargs: {k: 2}\n")
    result = run_pytest(pytester, "--optim-spec", "w.yaml", "-n", "0")
    result.stdout.fnmatch_lines(["*w.yaml:*`params: wrapped` gives LookaheadWrapper no params of its own, and no kwarg is the base optimizer*"])


def test_parity_is_the_one_red_of_a_compiled_only_difference_in_whatever_order_the_items_run(pytester):
    pytester.makeconftest("def pytest_collection_modifyitems(items):\n    items.reverse()  # as pytest-randomly may\n")
    pytester.makepyfile(planted=(TESTS / "planted.py").read_text())
    pytester.makefile(".yaml", noisy="optimizer: planted:NoisySGD\nkwargs: {lr: 0.1}\nchecks: [parity, none_grads]\n")
    result = run_pytest(pytester, "--optim-spec", "noisy.yaml", "-n", "0", "-p", "no:randomly", "-v")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*::none_grads SKIPPED*", "*::parity FAILED*"])


def test_a_law_over_a_kwarg_the_constructor_swallows_is_vacuous_not_green(pytester):
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    pytester.makefile(".yaml", swallow="optimizer: planted_run_model:SwallowingSGD\nkwargs: {lr: 0.1}\nchecks: [law_equivalent]\n"
                      "laws:\n  equivalent:\n    foreach: [{foreach: false}, {foreach: true}]\n")
    result = run_pytest(pytester, "--optim-spec", "swallow.yaml", "-n", "0", "-p", "no:randomly", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*vacuous: law equivalent[[]foreach[]]: SwallowingSGD accepted foreach and kept it nowhere*"])


def test_every_pass_carries_its_evidence_as_data(pytester):
    pytester.makefile(".yaml", adam="optimizer: torch.optim.Adam\nkwargs: {lr: 0.01}\nsteps: 3\n"
                      "checks: [parity, recompile, graph_breaks, none_grads, state_dict, in_backward, law_untouched, "
                      "law_descent, law_equivalent, law_param_groups]\n"
                      "laws: {untouched: true, descent: true, param_groups: true, equivalent: {foreach: [{foreach: false}, {foreach: true}]}}\n")
    result = run_pytest(pytester, "--optim-spec", "adam.yaml", "-n", "0", "-p", "no:randomly", "--optim-report", "r.json")
    result.assert_outcomes(passed=10)
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    assert {r["check"]: bool(r["evidence"]) for r in items} == dict.fromkeys([r["check"] for r in items], True)
    parity = next(r["evidence"] for r in items if r["check"] == "parity")
    assert parity["step_graphs"] >= 1 and parity["closure_graphs"] == 0 and parity["moved_tolerances"] >= 10
    equivalent = next(r["evidence"] for r in items if r["check"] == "law_equivalent")
    assert equivalent["foreach"]["reached_optimizer"] == ["foreach"]


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


def test_a_mechanism_met_in_two_rungs_is_one_root_cause(pytester):
    """catalyst's Lookahead never calls Optimizer.__init__: its closure case's eager step raised, and its plain case's
    closure_graph_break; each was red, which is right, but the report named two root causes."""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    pytester.makefile(".yaml", look='optimizer: planted_run_model:InitSkippingLookahead\n'
                      'kwargs: {base_optimizer: {optimizer: "torch.optim.SGD", kwargs: {lr: 0.01}}}\nparams: wrapped\n'
                      "closure: [false, true]\ndevices: [cpu]\nchecks: [parity, closure_graph_break]\n")
    result = run_pytest(pytester, "--optim-spec", "look.yaml", "-n", "0", "-p", "no:randomly", "--optim-report", "r.json")
    result.assert_outcomes(failed=2, passed=1)
    causes = json.loads((pytester.path / "r.json").read_text())["root_causes"]
    assert [(c["cause"], c["red"], c["cases"]) for c in causes] == [
        ("the optimizer never called torch.optim.Optimizer.__init__", 2,
         ["initskippinglookahead-default-closure-cpu", "initskippinglookahead-default-cpu"])], causes
    result.stdout.fnmatch_lines(["*InitSkippingLookahead: 1 root cause, 2 red in 2 case(s)*"])


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
    init = run_init(pytester, "init", "planted_run_model:InitSkippingLookahead", "-o", "w.yaml")
    assert init.ret == 0, init.stderr.str()
    result = run_pytest(pytester,
        "--optim-spec", "w.yaml", "-n", "0", "-p", "no:randomly", "-rfs", "-k",
        "default and not closure and not low_precision and (closure_graph_break or law_grads_untouched or state_dict "
        "or distributed or zero or checkpoint or law_hooks)")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("skipped", 0) >= 4 and not outcomes.get("passed"), out
    assert "diagnosis: torch.optim.Optimizer's" in out and "running as a compiled step" not in out, out
    causes = [line for line in out.splitlines() if line.startswith("optimtest: planted_run_model:InitSkippingLookahead:")]
    blocked = 5 if fsdp2_runs_on_cpu() else 4  # checkpoint's item is not applicable where FSDP2 cannot shard on CPU
    assert len(causes) == 1 and f"1 root cause, 1 red in 1 case(s), blocks {blocked} items" in causes[0], causes
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


def test_record_writes_a_root_cause_over_every_item_it_can_claim():
    """A rung's root cause is red on whichever item of its case meets it first: record.py's xfail covers
    the items it blocked too, so another selection's claimant is xfailed, not an unrecorded red."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("record", TESTS.parent / "specs" / "ecosystem" / "record.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    item = {"spec": "specs/ecosystem/p/o.yaml", "case": "o-default-cpu", "device": "cpu", "reason": "it raised"}
    records = [{**item, "check": "parity", "outcome": "failed", "verdict": {"kind": "root_cause", "rung": "eager_steps"}},
               {**item, "check": "state_dict", "outcome": "skipped", "verdict": {"kind": "blocked", "rung": "eager_steps"}},
               {**item, "check": "law_descent", "outcome": "skipped", "verdict": {"kind": "blocked", "rung": "eager_steps"}},
               {**item, "check": "no_leak", "outcome": "passed", "verdict": None},
               {**item, "check": "law_hooks", "outcome": "failed", "verdict": {"kind": "failed"}}]
    lines = record.rules(records, "2.13")["specs/ecosystem/p/o.yaml"]
    assert "    checks: [parity, state_dict, law_descent]" in lines and "    checks: [law_hooks]" in lines, lines
    assert not any("no_leak" in line for line in lines), lines


def test_one_error_raised_at_two_lines_of_one_function_is_one_red(pytester):
    """DoG reads p.grad without asking in two list comprehensions of its step: none_grads meets it at one
    line (a grad gone at step 2), law_untouched at the other (a param without a grad at step 1)."""
    for module in ("planted.py", "planted_run_model.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    pytester.makefile(".yaml", s="optimizer: planted_run_model:TwoPlacesNoneGradSGD\nkwargs: {lr: 0.01}\nlaws: {untouched: true}\n")
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rfs", "-k",
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
