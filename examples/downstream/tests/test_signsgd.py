"""The project's own tests, using pytest-optimtest's fixtures over its spec's cases."""

import pytest
import torch

from pytest_optimtest import assert_no_recompiles, assert_optim_parity, count_kernels


@pytest.mark.optim_spec("specs/signsgd.yaml", case="signsgd-default-*")  # momentum: see the xfail in the spec
def test_compiled_step_matches_eager_without_recompiling(compiled_optimizer):
    opt = compiled_optimizer
    with count_kernels() as kernels:
        opt.step()  # compiles
    opt.eager.step()
    assert kernels.count > 0, "the first compiled step generated no kernel"
    with assert_no_recompiles():
        opt.step()
    opt.eager.step()
    assert_optim_parity(opt.eager, opt.optimizer)


@pytest.mark.optim_spec("specs/signsgd.yaml", case="signsgd-default-cpu")
def test_changing_lr_recompiles_and_says_why(compiled_optimizer):
    opt = compiled_optimizer
    opt.step()
    opt.optimizer.param_groups[0]["lr"] = 0.5
    with pytest.raises(AssertionError, match=r"param_groups\[0\]\['lr'\] == 0.01"):
        with assert_no_recompiles():
            opt.step()


def test_the_model_hooks_fire_in_call_order(hook_recorder):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    events = hook_recorder(model, lambda: torch.randn(3, 4))
    assert [e.short() for e in events][:3] == ["pre_fw  Sequential [P-]", "pre_fw  Sequential.0 [P-]", "post_fw Sequential.0 [P-]"]
