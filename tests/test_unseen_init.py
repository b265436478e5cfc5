"""Init's specs and verdicts on optimizers written the ways other packages write them
(tests/planted_unseen.py), each in a session or a probe of its own; the verdicts of the one session
over all of them are tests/test_unseen.py's."""

from __future__ import annotations

import gc
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import planted_unseen
from helpers import dynamo_writes_capturable, failure_of, guard_failures_name_their_line, one_case, run_check
from warm import run_init, run_pytest

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.run_cache import RunCache
from pytest_optimtest.harness.runner import Regime, running
from pytest_optimtest.harness.vacuity import Vacuous

TESTS = Path(__file__).resolve().parent


def test_state_kept_in_an_object_whose_state_dict_takes_arguments_is_compared_by_its_fields():
    """flashoptim's FlashAdam, FlashAdamW, FlashLion: every item was "an error inside pytest-optimtest" (the
    snapshot called `_MaybeQuantizedTensor.state_dict()`, which takes the entry's name)."""
    from planted_unseen import WrappedStateSGD

    from pytest_optimtest.harness.compare import snapshot_differences
    from pytest_optimtest.harness.snapshot import snapshot
    from pytest_optimtest.spec.schema import Tolerance

    def stepped(scale: float) -> object:
        model = torch.nn.Linear(3, 2)
        optimizer = WrappedStateSGD(model.parameters(), lr=0.1)
        for p in model.parameters():
            p.grad = torch.full_like(p, scale)
        optimizer.step()
        return snapshot(optimizer, {p: name for name, p in model.named_parameters()})

    taken = stepped(1.0)
    assert set(taken.state["weight"]["momentum"]) == {"<_QuantizedState>"}, taken.state
    differences = snapshot_differences(taken, stepped(2.0), Tolerance(atol=1e-6, rtol=0.0))
    assert any("['momentum']['<_QuantizedState>']['_data']" in d for d in differences), differences


@pytest.mark.parametrize("workers", ["2", "0"])
def test_a_hanging_and_a_process_killing_optimizer_are_contained_under_xdist_and_serially(tmp_path, workers):
    """Each fails its own items, with where it hung or what it was doing when its process died;
    the other spec passes and the report is written. Serially, the supervisor runs the session again."""
    import subprocess

    for module in ("planted.py", "planted_unseen.py"):
        shutil.copy(TESTS / module, tmp_path / module)
    specs = {"hang": "optimizer: planted_unseen:HangingSGD\nkwargs: {lr: 0.1}\nchecks: [parity, kernel_count]\ntimeout_s: 6\n",
             "exit": "optimizer: planted_unseen:ExitingSGD\nkwargs: {lr: 0.1}\nchecks: [parity, kernel_count]\n",
             "plain": "optimizer: planted:PlainSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"}
    for name, text in specs.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    result = subprocess.run([sys.executable, "-m", "pytest", "--optim-spec", ".", "-n", workers, "-p", "no:randomly",
                             "-p", "no:cacheprovider", "--optim-report", "report.json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode == 1, out[-3000:] + result.stderr[-2000:]
    assert "timed out after 6s in check 'parity', step 1" in out, out[-3000:]
    assert re.search(r"hung at .*planted_unseen\.py:\d+ in _update", out), out[-3000:]
    if workers == "0":
        assert "optimtest: the session's process died (exit code 3) in check 'parity', step 1; running the session again" in result.stderr
        assert "crashed: the process running this case died in check 'parity', step 1" in out
        assert "the supervisor ran the session again, and this case is not run again" in out
    else:
        assert "worker 'gw" in out and "crashed while running 'exit.yaml::exitingsgd-default-cpu::" in out
        assert "the process running this case died (exit code 3) in check 'parity', step 1" in out
        assert "crashed: the process running this case died in check 'parity', step 1" in out
    outcomes = {(r["case"], r["check"]): r["outcome"] for r in json.loads((tmp_path / "report.json").read_text())["items"]}
    assert outcomes[("plainsgd-default-cpu", "parity")] == "passed"
    assert outcomes[("hangingsgd-default-cpu", "parity")] == "failed"  # the one red of its root cause
    assert outcomes[("hangingsgd-default-cpu", "kernel_count")] == "skipped"  # blocked by it
    assert outcomes[("exitingsgd-default-cpu", "kernel_count")] == "failed"


def test_a_constructor_that_splits_its_params_is_named_as_such_not_blamed_on_the_kwargs(tmp_path):
    from helpers import cases_from

    from pytest_optimtest.spec import SpecError

    with pytest.raises(SpecError, match=r"spec.yaml:1: \[optimizer\] SplitParamsSGD's constructor requires 'matrix_params', "
                                        r"'params': name the argument each param group goes to: `params: \[\{min_ndim: 2, "
                                        r"argument: matrix_params\}, \{argument: params\}\]`"):
        cases_from(tmp_path, "optimizer: planted_unseen:SplitParamsSGD\nkwargs: {lr: 0.1}\n")
    spec = ("optimizer: planted_unseen:SplitParamsSGD\nkwargs: {lr: 0.1}\n"
            "params:\n  - {min_ndim: 2, argument: matrix_params}\n  - {argument: params}\n")
    assert [c.id for c in cases_from(tmp_path, spec)] == ["splitparamssgd-default-cpu"]


@pytest.mark.parametrize(("spec", "message"), [
    ("optimizer: planted_unseen:NamedParamsSGD\nkwargs: {lr: 0.1}\n",
     r"spec.yaml:1: \[optimizer\] NamedParamsSGD refuses a plain list of params \(AttributeError: .*\) and takes named "
     r"params: set `params: named` in the spec"),
    ("optimizer: planted_unseen:ModelSGD\nkwargs: {lr: 0.1}\n",
     r"\[optimizer\] ModelSGD refuses a plain list of params .* and takes the model itself: set `params: model`"),
    ("optimizer: planted:PlainSGD\nkwargs: {lr: 0.1}\nparams: model\n",
     r"spec.yaml:3: \[params\] PlainSGD refuses the model itself .* and takes a plain list of params: remove `params`"),
    ("optimizer: planted:PlainSGD\nparams:\n  - {names: '*.kernel', lr: 0.1}\n  - {}\n",
     r"spec.yaml:3: \[params\[0\]\] on the model pytest_optimtest.models:two_linear: group 0 \(names: \['\*.kernel'\]\) "
     r"selects none of the model's params \['0.weight \(2-D\)'"),
    ("optimizer: planted:PlainSGD\nparams:\n  - {ndim: 2}\n",
     r"spec.yaml:2: \[params\] on the model .*: no group takes \['0.bias', '1.bias'\]; add a group without names"),
    ("optimizer: planted:PlainSGD\nparams:\n  - {ndim: 1, lr: {tensr: 1}}\n  - {}\n",
     r"spec.yaml:3: \[params\[0\].lr\] a mapping value must be one of"),
    ("optimizer: planted:PlainSGD\nin_backward:\n  groups: [{params: ['*.kernel']}]\n",
     r"spec.yaml:3: \[in_backward.groups\[0\].params\[0\]\] '\*.kernel' matches none of the model's params"),
])
def test_a_params_form_the_optimizer_or_model_refuses_is_a_spec_error_at_its_key(tmp_path, spec, message):
    from helpers import cases_from

    from pytest_optimtest.spec import SpecError

    with pytest.raises(SpecError, match=message):
        cases_from(tmp_path, spec)


@pytest.mark.parametrize(("optimizer", "line"), [
    ("planted_unseen:NamedParamsSGD", "params: named  # it refuses a plain list of params"),
    ("planted_unseen:ModelSGD", "params: model  # it refuses a plain list of params"),
    ("planted_unseen:SplitParamsSGD", "  - {min_ndim: 2, argument: matrix_params}\n  - {argument: params}\n"),
    ("planted_unseen:MatrixOnlySGD", "model: pytest_optimtest.models:two_linear_no_bias  # its step refuses 1-D params: "
                                     "AssertionError: MatrixOnlySGD steps matrices only"),
])
def test_init_writes_how_the_constructor_takes_its_params_and_the_spec_validates(tmp_path, capsys, optimizer, line):
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec(optimizer, tmp_path / "spec.yaml") == 0, capsys.readouterr().err
    assert line in (tmp_path / "spec.yaml").read_text()


def test_init_names_cases_after_capitalised_flags_as_the_schema_allows(tmp_path, capsys):
    """OPTAMI's DampedNewton(CG_subsolver=True): init wrote `name: no_CG_subsolver`, which its own loader refused."""
    from pytest_optimtest.scaffold import write_starter_spec
    from pytest_optimtest.scaffold.writer import _case_name

    assert write_starter_spec("planted_unseen:CapitalFlagSGD", tmp_path / "spec.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "spec.yaml").read_text()
    assert "  - name: no_cg_subsolver\n    kwargs: {CG_subsolver: false}" in text
    assert "  - name: verbose\n    kwargs: {Verbose: true}" in text
    taken = {"default"}
    assert [_case_name(t, taken) for t in ("Nesterov", "nesterov", "--", "default")] == ["nesterov", "nesterov_2", "case", "default_2"]


def test_a_create_graph_run_leaves_no_grad_that_holds_its_params(tmp_path):
    """torchlab's AdaHessian was no_leak's red, "4 of 4 params outlive the model": the grads a
    backward(create_graph=True) leaves hold their params through autograd's graph (torch's documented
    cycle, out of gc's reach). A training loop's zero_grad drops them; the run does too. (Compiled, this
    planted step's graph break leaves dynamo's global holding them: torch's, named by no_leak.)"""
    case = one_case(tmp_path, "optimizer: planted_unseen:HessianScaledSGD\nkwargs: {lr: 0.1}\nbackward: create_graph\n")
    with running(case, Regime(closure=True, steps=2)) as run:
        gc.collect()
        assert run.params_alive() == 0, f"{run.params_alive()} of {len(run.param_refs)} params alive"


def test_steps_that_differentiate_their_closures_graph_are_run_by_their_protocol(pytester):
    """AdaHessian, Sophia-H, psgd's Kron, OPTAMI's DampedNewton: init wrote a skip ("not supported") or a
    spec whose every item was red with "element 0 of tensors does not require grad". Now init finds the
    protocol, and the runs that can serve it (closure steps, grad on) pass; those that set grads by hand
    are not applicable, saying why, and are never red. (One session over the three specs.)"""
    protocols = {"s0": ("planted_unseen:HessianScaledSGD", "create_graph"), "s1": ("planted_unseen:LossDifferentiatingSGD", "by_step"),
                 "s2": ("planted_unseen:DotHessianSGD", "create_graph")}
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    for name, (optimizer, protocol) in protocols.items():
        # init in its own process: in this one, pytester's sys.modules snapshot would drop what the probes import
        assert run_init(pytester, "init", optimizer, "-o", f"{name}.yaml").ret == 0
        text = (pytester.path / f"{name}.yaml").read_text()
        assert f"\nbackward: {protocol}  # its step differentiates " in text and "\nclosure: [true]" in text
        assert "\nskip:" not in text and "\nfuzz:" not in text  # no property steps on grads set by hand
        vectors = "Dot" in optimizer  # LCG's shape: torch.dot over each grad, so a model of vectors and laws over them
        assert ("\nmodel: pytest_optimtest.models:two_diagonal  # its step refuses matrices: RuntimeError: 1D tensors "
                "expected" in text) is vectors and ("\n  max_ndim: 1  # its step refuses matrices" in text) is vectors, text
        (pytester.path / f"{name}.yaml").write_text(text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    result = run_pytest(pytester, *(arg for name in protocols for arg in ("--optim-spec", f"{name}.yaml")),
                                           "-n", "0", "-p", "no:randomly", "-v", "-k", "default and (parity or law_)",
                                           "--optim-report", "r.json")
    out = result.stdout.str()
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    assert "does not require grad" not in out and "double backward" not in out, out[-3000:]
    assert result.parseoutcomes().get("failed", 0) == out.count("its ladder's rung 'graph_captured' failed"), out[-3000:]
    for name, (_, protocol) in protocols.items():
        lines = [line for line in out.splitlines() if f"{name}.yaml" in line]
        # compiled, the step's autograd call breaks the graph: parity passes where the rest compiles (torch 2.13),
        # or says that nothing compiled (2.15); never a red of the protocol itself
        (parity,) = [item for item in items if item["spec"] == f"{name}.yaml" and item["check"] == "parity"]
        assert parity["outcome"] == "passed" or "its ladder's rung 'graph_captured' failed" in parity["reason"], parity
        assert any("-default-closure-cpu::law_descent PASSED" in line for line in lines), out[-3000:]
        assert any(f"the spec's `backward: {protocol}` (a step that differentiates the graph its closure made) and this "
                   "run's grads set by hand, which have no graph behind them: not applicable" == item["reason"]
                   for item in items if item["spec"] == f"{name}.yaml"), out[-3000:]


def test_a_step_over_vectors_alone_gets_a_model_and_laws_of_vectors(pytester):
    """ncg's LCG (torch.dot of each grad) skipped whole: every model the plugin shipped held matrices, and
    the laws' params and descent problem did too. init now writes the vector model and `max_ndim: 1`,
    and every law it proposes runs over vectors."""
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    assert run_init(pytester, "init", "planted_unseen:DotNormalizedSGD", "-o", "s.yaml").ret == 0
    text = (pytester.path / "s.yaml").read_text()
    assert "\nmodel: pytest_optimtest.models:two_diagonal  # its step refuses matrices: RuntimeError: 1D tensors expected" in text
    assert "\n  max_ndim: 1  # its step refuses matrices" in text and "\nbackward:" not in text, text
    (pytester.path / "s.yaml").write_text(text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-rs", "-v",
                                           "-k", "default and not closure and (parity or law_)")
    out = result.stdout.str()
    assert result.ret == 0 and "1D tensors expected" not in out, out[-3000:]
    for law in ("law_descent", "law_untouched", "law_param_groups", "law_late_joiners"):
        result.stdout.fnmatch_lines([f"*-default-cpu::{law} PASSED*"])


@pytest.mark.parametrize("planted, comment, reason", [
    ("ObjectiveSGD", "skip:  # its step takes an object as `objective`, not a closure: given one it raised AttributeError: "
                     "'function' object has no attribute 'closure'",
     "its step takes an object of its own protocol as `objective` (it calls methods of it)"),
    ("EpochStepSGD", "skip:  # its step takes a value as `epoch`, not a closure: given one it raised TypeError: unsupported "
                     "operand type(s) for %: 'function' and 'int'",
     "its step takes a value of its own as `epoch` (step(epoch, ...)"),
])
def test_a_step_whose_first_argument_is_no_closure_is_skipped_saying_so_not_red(pytester, planted, comment, reason):
    """torch_numopt's step(objective) calls objective.closure(), SpawnGD's step(epoch, closure=None) computes
    epoch % 2: each took its first argument for a required closure, every case was one red, "the optimizer's
    code raised", and init's comment said to fill in param groups or kwargs. What they take is no closure
    function, which is all the plugin's runs give."""
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    assert run_init(pytester, "init", f"planted_unseen:{planted}", "-o", "s.yaml").ret == 0
    text = (pytester.path / "s.yaml").read_text()
    assert comment in text and reason in text, text
    assert "use_muon" not in text and "fill in the kwargs" not in text, text
    result = run_pytest(pytester, "--optim-spec", "s.yaml", "-n", "0", "-p", "no:randomly", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and set(outcomes) == {"skipped"}, outcomes


def test_a_step_its_constructor_sets_with_arguments_of_its_own_is_skipped_saying_so_not_red(pytester):
    """DeepSpeed's ZenFlowCPUAdam sets `self.step = self._sequential_step`, step(step_id, closure=None): init read
    the class's step(closure=None) and wrote a spec whose every case was one red, "torch raised it" at torch's
    no_grad wrapper, and the closure case handed its closure over as step_id."""
    shutil.copy(Path(__file__).parent / "planted.py", pytester.path / "planted.py")
    shutil.copy(Path(__file__).parent / "planted_unseen.py", pytester.path / "planted_unseen.py")
    assert run_init(pytester, "init", "planted_unseen:InstanceStepSGD", "-o", "s.yaml").ret == 0
    text = (pytester.path / "s.yaml").read_text()
    assert "its step takes step(step_id), a protocol of its own" in text, text
    pytester.makefile(".yaml", hand="optimizer: planted_unseen:InstanceStepSGD\nkwargs: {lr: 0.1}\nchecks: [parity, none_grads]\n"
                                    "closure: [false, true]\n")
    result = run_pytest(pytester, "--optim-spec", "hand.yaml", "-n", "0", "-p", "no:randomly", "-rs")
    assert result.parseoutcomes() == {"skipped": 3}, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*its step (InstanceStepSGD._sequential_step) requires step_id: a step protocol of its own*"])


def test_init_says_a_step_that_moves_nothing_at_any_lr_wants_more_than_grads(tmp_path, capsys):
    """DeepSpeed's ZenFlowSelectiveAdamW steps only the params its engine marked: init said "raise lr or steps"
    of params that stayed bitwise unchanged at every lr."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:MarkedParamsSGD", tmp_path / "a.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "a.yaml").read_text()
    assert "its steps left every param bitwise unchanged at every lr tried" in text, text
    assert "raise lr or steps" not in text


def test_init_says_a_step_without_lr_that_moves_nothing_wants_more_than_grads(tmp_path, capsys):
    """llm-foundry's NoOp takes no lr and steps nothing: init measured movement only over lrs, and its spec said
    nothing of the red every case would be."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:NoOpWithoutLr", tmp_path / "a.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "a.yaml").read_text()
    assert re.search(r"\nkwargs: \{\}  # NoOpWithoutLr takes no lr: .*; its steps left every param bitwise unchanged with "
                     r"its defaults: .*'the optimizer's step moved nothing'\n", text), text


def test_init_finds_the_rng_use_of_a_step_that_requires_a_closure(tmp_path):
    """torch_pso's steps draw and need a closure: init's RNG probe stepped without one, saw the step raise,
    and wrote no `fallback_random` (each case's parity then red, saying to set it)."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:NoisyClosureSGD")
    assert "\nfallback_random: true  # its step draws from torch's RNG" in text, text


def test_init_probes_an_optimizer_that_compiles_itself_as_a_test_item_runs_it():
    """microsoft/dion's optimizers compile their own update with fullgraph: init's probes, one process for
    dozens of shapes, dtypes and lrs, ran into dynamo's recompile limit and left out what a test item (from
    a reset) steps: tensor_lr, the dtypes and zero_lr properties, a fuzz shape, each "refused" by the limit."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:OwnCompiledUpdateSGD")
    assert "RecompileLimit" not in text and "left out" not in text, text
    assert "\n  - name: tensor_lr" in text and "\n  dtypes: {" in text and "\n  zero_lr: {" in text, text


def test_init_proposes_no_property_for_a_constructor_that_takes_the_model(tmp_path):
    """SIRFShampoo takes the model: every property it was proposed was red "falsified" by its constructor's
    NotApplicable (the properties step loose params), blamed on the optimizer."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:ModelSGD")
    assert "\n# fuzz: none: its constructor takes the model itself" in text and "\nfuzz:" not in text, text


def test_law_param_shapes_follow_min_and_max_ndim_and_a_contradiction_is_a_spec_error(tmp_path):
    from helpers import cases_from

    from pytest_optimtest.harness.law_runs import law_shape
    from pytest_optimtest.spec import SpecError

    assert law_shape((6, 5), 0, 1) == (30,) and law_shape((0, 3), 0, 1) == (0,) and law_shape((4,), 2, None) == (1, 4)
    assert law_shape((6, 5), 3, 2) == (6, 5) and law_shape((6, 5), 0, None) == (6, 5)
    base = "optimizer: planted_unseen:DotNormalizedSGD\nkwargs: {lr: 0.1}\nlaws:\n  untouched: true\n"
    with pytest.raises(SpecError, match=r"spec.yaml:3: \[laws\] .*min_ndim 2 is over max_ndim 1"):
        cases_from(tmp_path, base + "  min_ndim: 2\n  max_ndim: 1\n")
    with pytest.raises(SpecError, match=r"\[laws\] .*view_as_real twin has one more dimension"):
        cases_from(tmp_path, base + "  complex: true\n  max_ndim: 1\n")


def test_a_backward_protocol_without_a_closure_is_a_spec_error_naming_the_key(tmp_path):
    from helpers import cases_from

    from pytest_optimtest.spec import SpecError

    spec = ("optimizer: planted_unseen:HessianScaledSGD\nkwargs: {lr: 0.1}\nbackward: create_graph\n"
            "closure: [false, true]\n")
    with pytest.raises(SpecError, match=r"spec.yaml:4: \[closure\] .*backward: create_graph steps only with a closure"):
        cases_from(tmp_path, spec)
    cases = cases_from(tmp_path, spec.replace("closure: [false, true]\n", ""))
    assert cases and all(case.closure and case.backward == "create_graph" for case in cases)


def test_init_says_what_to_fill_in_when_no_params_form_or_model_steps(tmp_path):
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:MuonStyleSGD")
    assert "# one step over the default model raises (KeyError: 'use_muon', at " in text
    assert "planted_unseen.py:" in text and "in _update): where it reads 'use_muon' from its param groups, fill in `params` groups that set it" in text  # where it raised, the optimizer's line


def test_init_calls_a_steps_own_error_the_optimizers_and_says_params_only_for_what_params_can_give(tmp_path):
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:UnboundStepSGD")
    assert "# one step over the default model raises (UnboundLocalError: " in text, text
    assert "the optimizer's own error, which every case's runs show once, with its line" in text and "use_muon" not in text


def test_a_step_that_refuses_on_purpose_to_be_driven_as_torch_optims_is_skipped_saying_so(tmp_path):
    """torch_constrained's ExtraSGD raises "Need to call extrapolation before calling step." by a `raise` of
    its own: a protocol it enforces, where init called it the optimizer's own error (one red per case)."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:ExtrapolationFirstSGD")
    assert "skip:  # its step refuses, on purpose, to step as torch.optim's steps are driven: RuntimeError: Need to call " \
           "extrapolation before calling step." in text, text
    assert "its step needs a protocol of its own (it raises, on purpose: RuntimeError: Need to call extrapolation" in text
    _, accidental = starter_spec("planted_unseen:UnboundStepSGD")  # an error no `raise` of its own made: its red
    assert "\nskip:" not in accidental


def test_an_lr_taken_through_kwargs_that_the_step_refuses_is_left_out(tmp_path):
    """torchmin's Minimizer(params, **kwargs) hands its kwargs to minimize(), which refuses `lr`: init's
    guessed lr made every step raise, and hid the step's protocol behind that error."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:KwargsOptionsSGD")
    assert "kwargs: {}  # KwargsOptionsSGD refuses an lr with its other defaults (its step refuses it: TypeError: " \
           "_settings() got an unexpected keyword argument 'lr'" in text, text
    assert "# one step over the default model raises" not in text
    assert cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))


def test_a_required_argument_that_takes_no_params_is_given_as_an_object_made_for_each_run(tmp_path):
    """POGO's shape (params, base_optimizer, lr): init and the loader say to give the second argument
    under kwargs, not only to split the params; `{call: ...}` makes the object anew for every run."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import starter_spec
    from pytest_optimtest.spec import SpecError
    from pytest_optimtest.spec.values import build_kwargs

    _, text = starter_spec("planted_run_model:BaseDelegatingSGD")
    assert "else give 'base' under kwargs (an object: {import: \"pkg.mod:attr\"}; an instance: {call: " in text, text
    with pytest.raises(SpecError, match=r"\[optimizer\] .* or, where 'base' takes no params of its own, give it under kwargs"):
        cases_from(tmp_path, "optimizer: planted_run_model:BaseDelegatingSGD\nkwargs: {lr: 0.1}\n")
    given = 'optimizer: planted_run_model:BaseDelegatingSGD\nkwargs: {lr: 0.1, base: {call: "planted_run_model:UnitBase"}}\n'
    (case,) = cases_from(tmp_path, given)
    first, second = (build_kwargs(case.kwargs, "cpu")["base"] for _ in range(2))
    assert type(first).__name__ == "UnitBase" and first is not second
    for target, message in (("planted_run_model:UnitBse", r"has no attribute 'UnitBse'.*did you mean 'UnitBase'"),
                            ("math:pi", r"\[kwargs.base\] \{call: 'math:pi'\} names a float, which cannot be called")):
        with pytest.raises(SpecError, match=message):
            cases_from(tmp_path, given.replace("planted_run_model:UnitBase", target))


def test_a_constructor_that_refuses_every_params_form_is_named_as_such_not_blamed_on_the_kwargs(tmp_path, capsys):
    """AdamSLS's shape (a list of lists of params): the spec's params are at fault, not its kwargs."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec
    from pytest_optimtest.spec import SpecError

    refused = (r"\[optimizer\] ListOfListsSGD refuses a plain list of params and every other params form \(TypeError: "
               r"can only concatenate list \(not \"Parameter\"\) to list\), with these kwargs or none: give it `params`")
    with pytest.raises(SpecError, match=refused):
        cases_from(tmp_path, "optimizer: planted_run_model:ListOfListsSGD\nkwargs: {lr: 0.1}\n")
    # init's spec loads, and skips every test saying what to fill in (it did not load before)
    assert write_starter_spec("planted_run_model:ListOfListsSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "it takes params in a form init could not find: give `params` groups" in text  # in the comment and the skip
    cases = cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    assert cases and all(case.skip for case in cases)


def test_whose_file_a_frame_is_by_folder_not_by_name_prefix(tmp_path):
    """torch_optimizer/ is an optimizer package, not torch; a package installed under the
    standard library's folder (site-packages, dist-packages) is not the standard library."""
    import json
    from pathlib import Path

    import torch

    from pytest_optimtest.harness.blame import _PYTHON, _kind

    beside_torch = Path(torch.__file__).resolve().parent.parent / "torch_optimizer" / "adamp.py"
    assert _kind(str(beside_torch)) == "optimizer"
    assert _kind(torch.__file__) == "torch"
    assert _kind(json.__file__) == "python"
    assert _kind(str(Path(_PYTHON) / "site-packages" / "mypkg" / "optim.py")) == "optimizer"
    assert _kind(str(Path(_PYTHON) / "dist-packages" / "mypkg" / "optim.py")) == "optimizer"


def test_four_cases_that_segfault_under_xdist_are_four_failed_items_and_the_session_goes_on(tmp_path):
    """Worker after worker dies in a case (a null pointer read in the step): xdist replaces each,
    and the session ends with every item's result (xdist's own loadscope dies on a KeyError at the
    third replacement: INTERNALERROR, exit code 3, half the results lost). Four replacements pass
    that third one; each costs a fresh worker's imports."""
    import subprocess

    for module in ("planted.py", "planted_unseen.py"):
        shutil.copy(TESTS / module, tmp_path / module)
    crashing = "".join(f"  - {{name: crash{i}, kwargs: {{crash: true}}}}\n" for i in range(1, 5))
    (tmp_path / "seg.yaml").write_text("optimizer: planted_unseen:SegfaultingSGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n"
                                       f"cases:\n  - name: fine\n{crashing}")
    result = subprocess.run([sys.executable, "-m", "pytest", "--optim-spec", "seg.yaml", "-n", "4", "-p", "no:randomly",
                             "-p", "no:cacheprovider", "--optim-report", "report.json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode == 1 and "INTERNALERROR" not in out + result.stderr, out[-3000:] + result.stderr[-2000:]
    reds = [line.split(" ")[1] for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    assert sorted(reds) == [f"seg.yaml::segfaultingsgd-crash{i}-cpu::parity" for i in range(1, 5)], out[-3000:]  # each once
    for i in range(1, 5):  # each crash names the signal, and the check and step it died in (CI's summary lines repeat it whole)
        assert (f"crashed while running 'seg.yaml::segfaultingsgd-crash{i}-cpu::parity': the process running this case "
                "died (killed by signal SIGSEGV) in check 'parity', step 1") in out, out[-3000:]
    assert "reproduce: pytest --optim-spec seg.yaml -k 'segfaultingsgd-crash1-cpu and parity' -n 0" in out
    assert re.search(r"^seg\.yaml +1 +4 ", out, re.M), out[-3000:]  # the per-spec summary: 1 passed, 4 failed
    outcomes = {r["case"]: r["outcome"] for r in json.loads((tmp_path / "report.json").read_text())["items"]}
    assert outcomes == {"segfaultingsgd-fine-cpu": "passed", **{f"segfaultingsgd-crash{i}-cpu": "failed" for i in range(1, 5)}}


def test_init_writes_a_spec_that_loads_and_skips_for_a_constructor_that_takes_a_model_of_its_kind(pytester):
    """LoRA-Pro's AdamW takes a model with LoRA pairs: init wrote a spec that did not load, naming the list's
    error (`'list' object has no attribute 'modules'`) where the model's says what it wants."""
    for module in ("planted.py", "planted_unseen.py"):
        shutil.copy(TESTS / module, pytester.path / module)
    result = run_init(pytester, "init", "planted_unseen:LoraPairsSGD", "-o", "s.yaml")
    assert result.ret == 0, result.stderr.str()
    text = (pytester.path / "s.yaml").read_text()
    assert "params: model\n# its constructor takes a model, and refused the plugin's (RuntimeError: LoraPairsSGD: no " \
           "(lora_A, lora_B) pairs found on the model.)" in text, text
    # as init wrote it; the skip removed (the loader names the model's error at the key); with a model it takes
    unskipped = text.split("skip:")[0].replace("devices: [cpu, cuda]", "devices: [cpu]")
    (pytester.path / "unskipped.yaml").write_text(unskipped)
    (pytester.path / "modelled.yaml").write_text(unskipped + "model: planted_unseen:lora_model\nchecks: [parity]\n")
    run = run_pytest(pytester, "--optim-spec", "s.yaml", "--optim-spec", "unskipped.yaml", "--optim-spec", "modelled.yaml",
                                        "-n", "0", "-p", "no:randomly", "-q", "-rs", "--optim-report", "r.json")
    run.stdout.fnmatch_lines(["*LoraPairsSGD refused every params form and model the plugin has; it takes a model of its own kind*"])
    run.stdout.fnmatch_lines(["*unskipped.yaml:*LoraPairsSGD takes a model and refuses the spec's `model: "
                              "pytest_optimtest.models:two_linear` (RuntimeError: LoraPairsSGD: no (lora_A, lora_B)*"])
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    outcomes = {spec: {item["outcome"] for item in items if item["spec"] == spec} for spec in ("s.yaml", "modelled.yaml")}
    assert outcomes["s.yaml"] == {"skipped"} and "passed" in outcomes["modelled.yaml"] and "failed" not in outcomes["modelled.yaml"], \
        (outcomes, run.outlines)


def test_init_closes_over_a_step_that_moves_only_given_a_closure(tmp_path):
    """swarmtorch's PSO returns at once without a closure: init wrote `closure: [false, true]` and probed
    its lr without one (the params moved 0 tolerances at every lr), so half its items proved nothing."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:ClosureSearchSGD")
    assert "\nclosure: [true]  # its step moves the params only given a closure" in text, text
    assert "move under" not in text  # its lr probe stepped with the closure
    _, plain = starter_spec("planted:PlainSGD")
    assert "\nclosure: [false, true]" in plain


def test_init_seeds_an_optimizer_whose_own_generator_is_seeded_from_the_os(tmp_path):
    """pyperch's GA draws from a torch.Generator of its own, seeded from the OS unless given `random_state`:
    every run differed from its twin (determinism and parity red on every case)."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:OwnGeneratorSGD")
    assert "kwargs: {lr: 0.01, random_state: 0}" in text and "# random_state: 0: two runs from one torch seed differ " \
           "without it" in text, text
    assert cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    _, seeded = starter_spec("planted_unseen:NoisyClosureSGD")  # torch's global RNG: fallback_random, no seed argument
    assert "random_state" not in seeded


def test_a_dependency_the_step_imports_is_a_requirement_not_a_protocol(tmp_path):
    """swarmtorch's CMA-ES imports `cma` when it steps: init called its ImportError, a `raise` of its own, a
    protocol the plugin does not support, and every item skipped saying so; it is a module to install."""
    from pytest_optimtest.items import missing_requirements
    from pytest_optimtest.scaffold import starter_spec
    from pytest_optimtest.cases import project_registry

    _, text = starter_spec("planted_unseen:LazyImportSGD")
    assert "\nrequires: [optimtest_missing_dependency]  # its step imports optimtest_missing_dependency, not installed " \
           "here (ModuleNotFoundError: No module named 'optimtest_missing_dependency'" in text, text
    assert "\nskip:" not in text and "protocol of its own" not in text
    (tmp_path / "spec.yaml").write_text(text)
    spec, _ = project_registry(tmp_path / "spec.yaml").load_spec(tmp_path / "spec.yaml")
    assert "requires optimtest_missing_dependency (No module named" in (missing_requirements(spec) or "")


def test_init_proposes_no_untouched_law_for_a_search_by_the_closures_loss(tmp_path):
    """pyperch's GA and RHC move every param whatever its grad: the untouched law init proposed was red on
    each, "weight decay or momentum applied without a grad?"; a decay without a grad keeps the law."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:LossSearch")
    assert "\n  # untouched: left out: its step moves params whose grad is None (it searches by its closure's loss" in text
    assert "\n  untouched: true" not in text
    _, decaying = starter_spec("planted_laws:DecayWithoutGradSGD")  # moves grad-less params on grads alone: a red to see
    assert "\n  untouched: true" in decaying, decaying


def test_init_bounds_fuzz_by_the_dimensions_and_dtypes_the_step_takes(tmp_path):
    """GefenMuon and torchium's Shampoo refuse 3-D params and Gefen float64 ones: the fuzz properties init
    proposed drew them and were falsified, blamed on the optimizer, for shapes it never claimed."""
    from pytest_optimtest.scaffold import starter_spec

    _, text = starter_spec("planted_unseen:UpToMatricesSGD")
    assert "# fuzz draws no param of shape (2, 3, 4) (max_dims: 2): its step refused one alone: RuntimeError: t() " \
           "expects a tensor with <= 2 dimensions" in text, text
    assert "  determinism: {examples: {ci: 10, dev: 20}, max_dims: 2}" in text
    _, text = starter_spec("planted_unseen:NoFloat64SGD")
    assert "\n  # dtypes: left out: it draws float64 params, and its step refused them (ValueError: NoFloat64SGD state " \
           "dtype is undefined for torch.float64" in text, text
    _, plain = starter_spec("planted:PlainSGD")
    assert "max_dims" not in plain


def test_a_wrapper_sharing_its_inner_optimizers_state_is_told_why_its_state_dict_round_trip_differs(tmp_path):
    """torchlab's Ranger shares RAdam's state and groups (`self.state = base.state`) and keeps torch's
    load_state_dict, which rebinds both: a loaded Ranger steps RAdam from fresh state. The red said no why."""
    case = one_case(tmp_path, "optimizer: planted_unseen:AliasingLookahead\nkwargs: {lr: 0.1}\n")
    with pytest.raises(AssertionError) as red:
        CHECKS["state_dict"].run(case, RunCache())
    assert "state['0.weight']['momentum_buffer']" in str(red.value)
    assert "diagnosis: the optimizer's doing: AliasingLookahead's state and param_groups are its base_optimizer's " \
           "(self.state = base_optimizer.state; self.param_groups = base_optimizer.param_groups), and torch's " \
           "Optimizer.load_state_dict, which it does not override, rebinds" in str(red.value), str(red.value)
    plain = one_case(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1, momentum: 0.9}\n")
    assert "round trip both ways equal" in CHECKS["state_dict"].run(plain, RunCache())


@pytest.mark.skipif(torch.cuda.is_available(), reason="init probes for a CPU path only where there is no GPU")
def test_init_gives_an_optimizer_whose_defaults_need_cuda_its_cpu_switches_and_a_cuda_case(tmp_path, capsys):
    """flashoptim's five optimizers: init called "Quantization requires a CUDA device." a params form it could not
    find, and skipped them all."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:CudaDefaultsSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "kwargs: {lr: 0.01, quantize: false, master_bits: null}" in text, text
    assert "  - name: cuda_defaults  # its defaults need CUDA (NotImplementedError: Quantization requires a CUDA device." in text
    assert "    kwargs: {quantize: true, master_bits: 24}\n    devices: [cuda]" in text
    assert "\nskip:" not in text and "name: no_quantize" not in text
    cases = cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    assert cases and not any(case.skip for case in cases)


@pytest.mark.skipif(torch.cuda.is_available(), reason="init probes for a CPU path only where there is no GPU")
@pytest.mark.parametrize("optimizer, said", [
    ("planted_unseen:CudaKernelSGD", r"Unsupported: Observed exception, at .*planted_unseen\.py:\d+ in _cuda_kernel"),
    ("planted_unseen:NoDriverSGD", r"RuntimeError: 0 active drivers \(\[\]\)\. There should only be one\., at "),
    ("planted_unseen:Bf16GpuSGD", r"RuntimeError: Weights should be on gpu, at .*planted_unseen\.py:\d+ in _update"),
    ("planted_unseen:CpuBackendRefusingSGD", r"ValueError: This op had not been implemented on CPU backend\., at "),
    ("planted_unseen:NoUsableKernelAdam", r"AssertionError: No usable kernel found for _KernelLoader on the current "
                                          r"machine\., at .*planted_unseen\.py:\d+ in load"),
])
def test_init_writes_a_cuda_only_spec_for_an_optimizer_that_needs_cuda_to_step(tmp_path, capsys, optimizer, said):
    """muonium's Muon, and Triton's kernels ("0 active drivers"): init called them the optimizer's own error and a
    protocol of its own; DeepSpeed's FusedLamb, whose constructor refuses the CPU backend, a params form it could
    not find, in a spec that skipped on the GPU too."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec(optimizer, tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert re.search(r"# it needs CUDA, and init ran without a GPU: " + said, text), text
    assert "devices: [cuda]" in text and "\nskip:" not in text and "laws on by default failed" not in capsys.readouterr().out
    assert [case.device for case in cases_from(tmp_path, text)] == ["cuda"]  # the spec loads; its one case is CUDA's


def test_init_says_a_constructor_whose_own_call_raises_is_no_params_form_to_fill_in(tmp_path, capsys):
    """ColossalAI 0.5's GaLoreAdamW8bit and DistGaloreAwamW pass bitsandbytes 0.50's Optimizer2State a keyword it
    dropped: init said they take "params in a form init could not find" and to give `params` groups."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:StaleKeywordSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert re.search(r"its constructor raises in a call of its own \(TypeError: _OldBase.__init__\(\) got an unexpected "
                     r"keyword argument 'percentile_clipping', at .*planted_unseen\.py:\d+ in __init__\): the function "
                     r"it calls does not take those arguments", text), text
    assert "form init could not find" not in text and "give `params`" not in text
    assert all(case.skip for case in cases_from(tmp_path, text))  # a spec that loads, and says why each item skips


def test_init_names_an_argument_the_constructor_uses_at_its_default_none(tmp_path, capsys):
    """Megatron's HybridDeviceOptimizer calls its `cpu_optimizer_cls` argument, default None, as it constructs:
    init said it takes "params in a form init could not find" and to give `params` groups."""
    from helpers import cases_from, run_check

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:UnsetFactorySGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert re.search(r"its constructor uses inner_cls, left at its default None \(TypeError: 'NoneType' object is not "
                     r"callable, at .*planted_unseen\.py:\d+ in _build\): give inner_cls under kwargs", text), text
    assert "form init could not find" not in text and "give `params`" not in text
    assert all(case.skip for case in cases_from(tmp_path, text))  # a spec that loads, and says why each item skips
    text = text.replace("kwargs: {lr: 0.001}", 'kwargs: {lr: 0.001, inner_cls: {import: "torch.optim:SGD"}}')
    given = [c for c in cases_from(tmp_path, text.partition("\nskip:")[0] + "\n") if c.device == "cpu"]
    assert "descent 1.857 ->" in run_check("law_descent", given[0])  # given it, the spec's runs step the optimizer


def test_init_probes_the_step_of_an_optimizer_that_never_called_optimizer_init(tmp_path, capsys):
    """torchrec's placeholder optimizers never call Optimizer.__init__ and raise NotImplementedError in step: init's
    probe made its grads through the closure, whose zero_grad() raised first (no `defaults`), and its spec ran 18
    cases, each red with NotImplementedError."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:PlaceholderSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "'defaults'" not in text, text
    assert re.search(r"skip:  # its step refuses, on purpose, .*: NotImplementedError, at .*planted_unseen\.py:\d+ in step",
                     text), text
    assert all(case.skip for case in cases_from(tmp_path, text))


def test_init_calls_a_removed_torch_function_the_optimizers_own_error(tmp_path, capsys):
    """deepchem's KFACOptimizer calls torch.symeig, which torch removed, on a line that reads what its forward hook
    sets: init said to call the hook's method first in `setup:`, then, as the message names "the matrix", to fill
    in a model."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:RemovedApiSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "setup:" not in text and "fill in a `model`" not in text, text
    if "is now removed" in text:  # torch.symeig still there to raise so (2.6 to 2.15)
        assert re.search(r"# one step over the default model raises \(RuntimeError: .* is now removed.*\): it calls what "
                         r"torch [\d.]+ removed or deprecated: the optimizer's own error", text), text


def test_init_names_the_method_a_framework_calls_before_the_first_step(tmp_path, capsys):
    """ColossalAI's DistributedLamb, DistributedCAME and DistributedAdaFactor read in their step what only their
    setup_distributed() makes: init said to fill in kwargs, or param groups that set the key 140376217080112 (an id)."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:SetUpFirstSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert re.search(r"\nskip:  # its step raised: AttributeError: 'SetUpFirstSGD' object has no attribute 'is_dist', at "
                     r".*planted_unseen\.py:\d+ in _update\n  - \{reason: \"its step reads self\.is_dist, which its method "
                     r"setup_distributed\(\) sets: .* give `setup:` a function that calls it \(docs/specs\.md\), and remove "
                     r"this skip", text), text  # a protocol unmet is no red of the optimizer's


def test_init_finds_an_optimizer_whose_constructor_takes_bf16_params_only(tmp_path, capsys):
    """mpadam's MPAdam and MPAdamW: "Weight type should be either float16 or bfloat16" in the constructor read as
    "refused every params form", and init skipped every item."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:Bf16ConstructorSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "dtypes: [bfloat16]  # its constructor refuses float32 params and takes bf16 ones: ValueError: Weight type " \
           "should be either float16 or bfloat16" in text, text
    assert "\nskip:" not in text and "refused every params form" not in text
    cases = cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    assert cases and {case.dtype for case in cases if hasattr(case, "dtype")} == {"bfloat16"}  # fuzz's cases have none
    assert not any(case.skip for case in cases)


@pytest.mark.parametrize(("planted", "bf16_case"), [("Float32OnlySGD", False), ("NumpyRoundTripSGD", True)])
def test_init_leaves_out_the_bf16_case_of_a_step_that_refuses_bf16_on_purpose(tmp_path, capsys, planted, bf16_case):
    """sweepx's SOAP raises "supports float32/float64 parameters" in its step: init wrote a bf16 case, red at every
    item; an op that fails over bf16 (NumPy has no bf16) is no refusal, and its case stays to show it."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec(f"planted_unseen:{planted}", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert ("- name: low_precision" in text) is bf16_case, text
    assert ("# left out: low_precision: its step refuses bf16 params (TypeError: Float32OnlySGD supports float32/float64 "
            "parameters, got torch.bfloat16, at ") in text or bf16_case, text


def test_init_says_a_constructor_wants_positional_arguments_no_spec_gives(tmp_path, capsys):
    """torchzero's Optimizer(params, *modules): init's skip told the user to fill in `params` groups."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:ModularSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "it takes positional arguments after its params (*modules), which a spec cannot give" in text, text
    assert "ModularSGD takes positional arguments after its params (*modules) and refused construction" in text
    assert "fill in `params`" not in text
    assert all(case.skip for case in cases_from(tmp_path, text))  # it loads, and says why nothing runs


def test_init_stops_a_probe_whose_step_runs_for_minutes_and_the_spec_says_why(tmp_path, capsys, monkeypatch):
    """torchzero's ScipyDE, given bounds around the params, searched for minutes in each of init's probes: init ran
    past ten minutes."""
    import time

    from helpers import cases_from

    from pytest_optimtest import scaffold
    from pytest_optimtest.scaffold import probe

    monkeypatch.setattr(probe, "PROBE_SECONDS", 1.0)
    monkeypatch.setattr(probe, "COLD_STEP_FACTOR", 2)
    token = probe._PROBE_COLD.set(True)  # as in a fresh `init` process: its first step gets 2 s
    start = time.monotonic()
    try:
        assert scaffold.write_starter_spec("planted_unseen:SlowSearchSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    finally:
        probe._PROBE_COLD.reset(token)
    assert time.monotonic() - start < 60
    text = (tmp_path / "init.yaml").read_text()
    assert "skip:  # its step does not finish in time: ProbeTimeout: one step ran past 2 s, and init stopped it" in text, text
    assert ("one step over the plugin's model (two Linear(10, 10), 220 params) ran past init's limit (ProbeTimeout: one "
            "step ran past 2 s, and init stopped it): every run would time out") in text
    assert all(case.skip for case in cases_from(tmp_path, text))


def test_a_traced_codes_own_error_points_at_its_line_and_is_its_doing():
    """dynamo's `Unsupported: Observed exception` (fullgraph) ends the Python traceback in torch's compile wrapper;
    the line that raised is in its user stack (muonium's `assert d_in.is_cuda` read "torch's doing" at the caller)."""
    from planted_unseen import _cuda_kernel

    from pytest_optimtest.harness.blame import blame

    with pytest.raises(Exception) as info:  # noqa: PT011  # dynamo's exception class is torch's to choose
        _cuda_kernel(torch.zeros(2), torch.ones(2), 0.1)
    found = blame(info.value)
    assert found.where.endswith("in _cuda_kernel") and "planted_unseen.py" in found.where, found
    assert found.owner == "optimizer"


@pytest.mark.parametrize("optimizer, taken", [("planted_unseen:TwoPlayerSGD", "step(f, g)"),
                                              ("planted_unseen:LossTensorSGD", "step(f)")])
def test_init_writes_a_spec_that_loads_and_skips_for_a_step_that_takes_losses(tmp_path, capsys, optimizer, taken):
    """torch_cgd's CGD, CGD_CG (two players' params and losses) and ACGD: init wrote specs that did not load."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec(optimizer, tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert f"its step takes {taken}, a protocol of its own" in text, text
    cases = cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    assert cases and all(case.skip for case in cases)


def test_shard_shaped_state_is_found_inside_an_object_of_the_optimizers_own():
    """flashoptim keeps exp_avg as `_MaybeQuantizedTensor._data`: its FSDP2 red (a plain (5, 10) tensor added to a
    DTensor) and checkpoint's (saved (5, 10), loaded (10, 10)) were two reds of one cause."""
    from planted_unseen import _QuantizedState

    from pytest_optimtest.harness.snapshot import tensors_in as _tensors_in

    data = torch.zeros(5, 10)
    found = _tensors_in({"exp_avg": _QuantizedState(data), "steps": [torch.ones(1)]})
    assert [(where, tensor is data) for where, tensor in found] == [("['exp_avg']._data", True), ("['steps'][0]", False)]
    assert _tensors_in(_QuantizedState(data)) == [("._data", data)]


def test_init_writes_a_spec_that_loads_for_a_constructor_that_refuses_a_zero_param(tmp_path, capsys):
    """emerging_optimizers' MuonHyperball: the spec check built it over a 2x2 matrix of zeros, which it refuses,
    and called that the spec's params form: init's spec did not load."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:NormCheckedSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "init.yaml").read_text()
    assert "\nskip:" not in text and "refuses a plain list" not in text, text
    cases = cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]"))
    assert cases and not any(case.skip for case in cases)


def test_init_gives_the_first_step_of_its_process_time_to_compile_what_the_optimizer_compiles(tmp_path, capsys, monkeypatch):
    """emerging_optimizers' PSGDPro: its first step compiled its own torch.compile'd functions on a cold cache past
    init's 30 s, and init skipped every item saying each run would time out; a warm step takes no time."""
    from helpers import cases_from

    from pytest_optimtest import scaffold
    from pytest_optimtest.scaffold import probe

    monkeypatch.setattr(probe, "PROBE_SECONDS", 1.0)
    token = probe._PROBE_COLD.set(True)  # as in a fresh `init` process
    try:
        assert scaffold.write_starter_spec("planted_unseen:SlowFirstStepSGD", tmp_path / "init.yaml") == 0, capsys.readouterr().err
    finally:
        probe._PROBE_COLD.reset(token)
    text = (tmp_path / "init.yaml").read_text()
    assert "\nskip:" not in text and "ran past" not in text, text
    assert not any(case.skip for case in cases_from(tmp_path, text.replace("devices: [cpu, cuda]", "devices: [cpu]")))


def test_init_names_a_module_the_constructor_imports_and_a_value_it_refuses(tmp_path, capsys):
    """gram_newton_schulz's Muon (its constructor imports quack) was told to give `params` groups, and
    emerging_optimizers' SinkhornMuon (it refuses negative entries) that it takes positional arguments."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:ImportingConstructorSGD", tmp_path / "a.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "a.yaml").read_text()
    assert "requires: [quack_kernels_not_installed]  # its constructor imports quack_kernels_not_installed" in text, text
    assert "params` groups" not in text
    from pytest_optimtest.items import missing_requirements

    spec, _ = CHECKS.load_spec(tmp_path / "a.yaml")  # the session skips its items at collection, saying so
    assert "requires quack_kernels_not_installed (No module named 'quack_kernels_not_installed')" in missing_requirements(spec)
    assert write_starter_spec("planted_unseen:NonNegativeParamsSGD", tmp_path / "b.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "b.yaml").read_text()
    assert "params unlike those of the plugin's models, whose values it checks (ValueError: Parameter with shape" in text, text
    assert "positional arguments" not in text
    assert all(case.skip for case in cases_from(tmp_path, text))


def test_init_probes_state_dtype_and_rng_with_the_closure_a_step_asserts_it_was_given(tmp_path, capsys):
    """momo's Momo and MomoAdam (`step(closure=None, loss=None)` asserts one was given): init wrote
    `closure: [true]` and then "init could not tell" the state dtype, its probe stepped without one."""
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:AssertedClosureSGD", tmp_path / "a.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "a.yaml").read_text()
    assert "closure: [true]  # its step raises without a closure" in text, text
    assert "state_dtype: param  # over bf16 params two steps kept its state in bf16" in text, text
    assert "could not tell" not in text


def test_init_calls_an_optimizer_told_its_rank_distributed_not_a_question_of_kwargs(tmp_path, capsys):
    """decent_optim_wrapper's DecentOptimWrapper(optimizer, rank, world_size, local_world_size, topology):
    init's skip asked for the four under kwargs, which no spec can give one process."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:RankedGossipSGD", tmp_path / "a.yaml") == 0, capsys.readouterr().err
    text = (tmp_path / "a.yaml").read_text()
    assert "its rank in a process group (rank, world_size, topology): a distributed optimizer" in text, text
    assert "remove this skip" not in text
    assert all(case.skip for case in cases_from(tmp_path, text))


def test_init_calls_a_step_that_needs_a_comms_backend_distributed_not_a_question_of_the_model(tmp_path, capsys):
    """DeepSpeed's Muon: "DeepSpeed backend not set, please initialize it using init_process_group()", raised in
    deepspeed.comm's get_world_size, read as a shape problem ("size" in the raising function's name), and init
    asked for a model whose params it steps."""
    from helpers import cases_from

    from pytest_optimtest.scaffold import write_starter_spec

    for planted in ("OwnCommsBackendSGD", "OwnCommsMuonHybrid"):  # the second takes `use_muon` groups only
        assert write_starter_spec(f"planted_unseen:{planted}", tmp_path / f"{planted}.yaml") == 0, capsys.readouterr().err
        text = (tmp_path / f"{planted}.yaml").read_text()
        assert "its step needs an initialized torch.distributed process group" in text, text
        assert "fill in a `model`" not in text and "laws on by default failed" not in capsys.readouterr().out
        assert all(case.skip for case in cases_from(tmp_path, text))


def test_a_load_that_recompiles_on_the_group_key_dynamo_writes_says_it_is_torchs(tmp_path):
    """geoopt's RiemannianSGD (`if "step" not in group`): loading eager's state_dict, which lacks the
    `capturable` key dynamo writes into compiled groups, recompiled twice on the groups' length: a red that
    named no owner."""
    case = one_case(tmp_path, "optimizer: planted_unseen:GroupStepCountSGD\nkwargs: {lr: 0.01}\n")
    if not dynamo_writes_capturable(planted_unseen.GroupStepCountSGD):  # torch 2.15: no key, no recompile, green
        assert "round trip both ways equal" in run_check("state_dict", case)
        return
    message = failure_of("state_dict", case)
    assert "caused 2 recompiles of the step, the spec allows 1" in message and "len(step.__self__.param_groups[0])" in message
    assert "torch's doing (dynamo), met by this optimizer: dynamo writes `capturable` into the param groups" in message


def test_a_load_that_recompiles_on_a_group_key_the_step_assigns_says_so(tmp_path):
    """pyro's ClippedAdam assigns `group["lr"]` at every step: the same length guard as a key's presence test,
    and the diagnosis said the step tested a key's presence."""
    case = one_case(tmp_path, "optimizer: planted_unseen:LrDecayingSGD\nkwargs: {lr: 0.01}\n")
    if not dynamo_writes_capturable(planted_unseen.LrDecayingSGD):  # torch 2.15: no key, no recompile, green
        assert "round trip both ways equal" in run_check("state_dict", case)
        return
    message = failure_of("state_dict", case)
    assert "len(step.__self__.param_groups[0])" in message, message
    assert 'group["lr"] *= group["lrd"]' in message or not guard_failures_name_their_line(), message  # the guard's line, where torch gives it
    assert "the step tests a key's presence in its groups or assigns one of their keys (the guard's line above)" in message


def test_a_closure_graph_break_difference_that_float64_removes_is_vacuous_not_red(tmp_path):
    """pyro's AdagradRMSProp and sweepx's Shampoo: step(closure) compiled with a graph break differed from eager in
    the last bits of an accumulator (a matrix root), grown by their arithmetic, and the red said "the optimizer's";
    parity tests that at float64, this check did not."""
    case = one_case(tmp_path, "optimizer: planted_unseen:SquaredGradSumSGD\nkwargs: {lr: 0.1}\n")
    with pytest.raises(Vacuous, match=r"vacuous: not comparable at float32: over float64 params the compiled "
                                      r"step\(closure\) with its graph break matches eager(.|\n)*at float32: state\["):
        run_check("closure_graph_break", case)


def test_a_frame_dynamo_gave_up_on_is_named_where_no_graph_was_captured(tmp_path):
    """momo's Momo (`.item()` inside its loop over the groups): "not compiled" listed only the closure's graph
    breaks, not the one that made dynamo run the step's frame eagerly, and so found nothing that pointed at it."""
    case = one_case(tmp_path, "optimizer: planted_unseen:ItemInLoopSGD\nkwargs: {lr: 0.01}\nclosure: [false]\n")
    message = failure_of("parity", case)
    assert "not compiled" in message, message
    # dynamo's reason: "Unsupported Tensor.item() call with capture_scalar_outputs=False" (2.13), "Tensor.item" (2.6)
    assert re.search(r"dynamo gave up on a frame and ran it eagerly, at a graph break it could not resume after \(one inside a "
                     r"loop\): [^;]*Tensor\.item", message), message


def test_init_holds_back_what_the_optimizer_prints_and_says_so_in_one_line(tmp_path, capsys):
    """sky-optimizer prints a nine-line banner at every construction: init's probes printed it four
    thousand lines deep, and with `-o -` it would have been written into the spec on stdout."""
    from pytest_optimtest.cases import project_registry
    from pytest_optimtest.scaffold import write_starter_spec

    assert write_starter_spec("planted_unseen:BannerSGD", Path("-")) == 0
    out, err = capsys.readouterr()
    assert "revolutionary" not in out and out.startswith("# Starter spec for planted_unseen.BannerSGD"), out[:500]
    (tmp_path / "spec.yaml").write_text(out)
    project_registry(tmp_path).load_spec(tmp_path / "spec.yaml")  # stdout is the spec alone: it loads
    assert err.count("\n") == 1 and "note: the optimizer printed" in err and "'BannerSGD initialized'" in err, err
