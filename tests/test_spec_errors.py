"""Every kind of bad spec input: a SpecError naming file, line and key path."""

from __future__ import annotations

import pytest
from helpers import cases_from

from pytest_optimtest.spec import SpecError


def error_of(tmp_path, text) -> SpecError:
    with pytest.raises(SpecError) as info:
        cases_from(tmp_path, text)
    return info.value


def test_yaml_syntax_error(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1\ncases: []\n")
    assert err.line == 3 and "YAML syntax error" in str(err) and "spec.yaml:3" in str(err)


def test_empty_file(tmp_path):
    err = error_of(tmp_path, "# nothing here\n")
    assert "empty spec" in str(err) and err.line == 1


def test_unknown_key_suggests_close_match(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\ntolerence: {atol: 1, rtol: 1}\n")
    assert err.line == 3 and err.key == "tolerence"
    assert "unknown key 'tolerence'" in str(err) and "did you mean 'tolerance'" in str(err)


def test_unknown_key_in_a_case(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\ncases:\n  - name: a\n    kwarg: {lr: 0.1}\n")
    assert err.line == 4 and err.key == "cases[0].kwarg" and "did you mean 'kwargs'" in str(err)


def test_misspelt_optimizer(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.Adamm\n")
    assert err.line == 1 and err.key == "optimizer" and "did you mean 'Adam'" in str(err)


@pytest.mark.parametrize(("path", "said"), [
    ("torch.optim.Optimizer", "'torch.optim.Optimizer' does not implement `step` (torch.optim.Optimizer's raises NotImplementedError)"),
    ("torch.optim.sgd:sgd", "'torch.optim.sgd:sgd' is a function, not an optimizer class: name the class whose instances step; "
     "a factory that returns one"),
    ("torch.nn.Linear", "'torch.nn.Linear' is a class without a `step` method, not an optimizer class"),
    ("planted_unseen:FusedBackwardSGD", "'planted_unseen:FusedBackwardSGD' does not implement `step`: it updates through "
     "`fused_backward(loss, lr)`, a protocol of its own (the plugin's runs call step(), as torch.optim's training loop "
     "does): not supported"),
    ("torch.float32", "'torch.float32' is a dtype, not an optimizer class"),
])
def test_what_names_no_optimizer_class_says_what_it_is(tmp_path, path, said):
    """A factory function that returns an optimizer (absgd's ABSGD), a base class, a module's other objects:
    the loader and init say what the path names and what to name instead."""
    from pytest_optimtest.spec.values import optimizer_class_problem, resolve

    problem = optimizer_class_problem(path, resolve(path))
    assert problem is not None and said in problem, problem
    err = error_of(tmp_path, f"optimizer: {path}\n")
    assert err.line == 1 and err.key == "optimizer" and said in str(err)


def test_unimportable_optimizer_module(tmp_path):
    err = error_of(tmp_path, "optimizer: nopkg.optim:Lion\n")
    assert err.key == "optimizer" and "cannot import module 'nopkg.optim'" in str(err)


def test_misspelt_scheduler(tmp_path):
    err = error_of(tmp_path, """
        optimizer: torch.optim.SGD
        kwargs: {lr: 0.1}
        schedulers:
          StepLR: {step_size: 1}
          CosineAnnealingLr: {T_max: 3}
        """)
    assert err.line == 5 and err.key == "schedulers.CosineAnnealingLr" and "did you mean 'CosineAnnealingLR'" in str(err)


def test_kwarg_the_constructor_does_not_take(tmp_path):
    err = error_of(tmp_path, """
        optimizer: torch.optim.Adam
        cases:
          - name: a
            kwargs: {lr: 0.1, betaz: [0.9, 0.99]}
        """)
    assert err.line == 4 and err.key == "cases[0].kwargs.betaz" and "did you mean 'betas'" in str(err)


def test_kwarg_value_the_constructor_rejects(tmp_path):
    err = error_of(tmp_path, """
        optimizer: torch.optim.Adam
        cases:
          - name: ok
          - name: negative
            kwargs: {lr: -1.0}
        """)
    assert err.key.startswith("cases[1]") and err.line in (4, 5)
    assert "rejects these kwargs" in str(err) and "Invalid learning rate" in str(err)


def test_wrong_type(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nsteps: two\n")
    assert err.line == 3 and err.key == "steps" and "valid integer" in str(err)


def test_bad_tagged_value(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: {tensr: 0.1}}\n")
    assert err.key == "kwargs.lr" and "{tensor: ...}" in str(err)


def test_unknown_check(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [parity, kernel_cnt]\n")
    assert err.key == "checks[1]" and "did you mean 'kernel_count'" in str(err)


def test_unquoted_torch_version(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nkernel_counts:\n  2.13: {cpu: 4}\n")
    assert err.key == "kernel_counts" and "quote torch versions" in str(err)


def test_unquoted_torch_version_in_a_rule(tmp_path):
    err = error_of(tmp_path, "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n"
                             "xfail:\n  - torch: [2.10]\n    reason: a torch bug\n")
    assert err.line == 4 and err.key.startswith("xfail[0].torch") and "quote torch versions: '2.1'" in str(err)


def test_duplicate_ids_are_an_error(tmp_path):
    # PyTorch's own matrix names 'default' and 'non-default lr' alike, and one silently replaces the other.
    err = error_of(tmp_path, """
        optimizer: torch.optim.SGD
        kwargs: {lr: 0.1}
        grid:
          nesterov: [false]
        cases:
          - name: same
          - name: same
            kwargs: {lr: 0.01}
        """)
    assert err.line == 7 and "duplicate test id 'sgd-same-cpu'" in str(err) and "cases[0]" in str(err)
