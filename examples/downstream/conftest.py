"""This project's own check, registered next to pytest-optimtest's built-in ones."""

from pytest_optimtest import Check


def check_bounded_update(case, runs):
    """signSGD moves every element by exactly lr per step: at most steps * lr in all."""
    run = runs.compiled(case)  # the eager and compiled runs parity already made
    bound = run.steps * case.kwargs["lr"] * (1 + 1e-5)
    moved = max(float((run.compiled.params[n] - p).abs().max()) for n, p in run.initial_params.items())
    assert moved <= bound, f"{case.id}: an element moved {moved:.6g}, more than {run.steps} steps x lr = {bound:.6g}"
    return f"largest move {moved:.4g} <= {bound:.4g}"


def pytest_optimtest_checks():
    return [Check("bounded_update", check_bounded_update, "every element moves at most lr per step",
                  prerequisites=("parity",))]
