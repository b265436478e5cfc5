"""This project's own check, registered next to pytest-optimtest's built-in ones: it owns the
spec section `bounded_update` and reports a metric."""

import pydantic

from pytest_optimtest import Check


class BoundedUpdate(pydantic.BaseModel):
    """The spec's `bounded_update:` section."""

    model_config = pydantic.ConfigDict(extra="forbid")
    slack: float = pydantic.Field(1e-5, ge=0, description="relative allowance over steps x lr")


def check_bounded_update(case, runs):
    """signSGD moves every element by exactly lr per step: at most steps * lr in all."""
    run = runs.compiled(case)  # the eager and compiled runs parity already made
    bound = run.steps * case.kwargs["lr"] * (1 + case.sections["bounded_update"].slack)
    moved = largest_move(run)
    assert moved <= bound, f"{case.id}: an element moved {moved:.6g}, more than {run.steps} steps x lr = {bound:.6g}"
    return f"largest move {moved:.4g} <= {bound:.4g}"


def largest_move(run):
    return max(float((run.compiled.params[n] - p).abs().max()) for n, p in run.initial_params.items())


def bounded_update_metrics(case, runs):
    run = runs.peek("compiled", case)
    return {} if run is None else {"largest_move": largest_move(run)}


def pytest_optimtest_checks():
    return [Check("bounded_update", check_bounded_update, "every element moves at most lr per step",
                  prerequisites=("parity",), section=BoundedUpdate, metrics=bounded_update_metrics)]
