"""The public strategies: blueprints build what they say, and their reprs are code."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_optimtest import load_case
from pytest_optimtest.harness.in_backward_run import tie
from pytest_optimtest.strategies import (
    MLP, DictOf, Inputs, Lin, ListOf, Param, Params, Seq, inputs, mlps, module_trees, param_lists, spec_cases,
)

NAMESPACE = {"Param": Param, "Params": Params, "MLP": MLP, "Inputs": Inputs, "Lin": Lin, "Seq": Seq,
             "ListOf": ListOf, "DictOf": DictOf, "load_case": load_case}
FAST = settings(max_examples=40, deadline=None, derandomize=True)


@FAST
@given(st.one_of(param_lists(), mlps(), mlps(tied=True), module_trees(), inputs(3)))
def test_every_blueprint_repr_is_code_that_rebuilds_it(blueprint):
    assert eval(repr(blueprint), NAMESPACE) == blueprint


@FAST
@given(param_lists())
def test_params_build_their_shapes_and_layouts_with_grads(blueprint):
    tensors = blueprint.build(seed=3)
    assert [tuple(t.shape) for t in tensors] == [p.shape for p in blueprint.params]
    for t, p in zip(tensors, blueprint.params):
        assert t.is_leaf and t.requires_grad and t.grad is not None and t.grad.shape == t.shape  # as a model's param
        if p.layout != "contiguous" and t.numel() > 1 and all(s > 1 for s in t.shape[-2:]):
            assert not t.is_contiguous()
    again = blueprint.build(seed=3)
    assert all(torch.equal(a, b) for a, b in zip(tensors, again))


def test_shapes_cover_scalars_one_element_empty_and_views():
    seen = set()

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(param_lists())
    def collect(blueprint):
        for p in blueprint.params:
            seen.add("0-d" if p.shape == () else "one" if p.shape == (1,) else "empty" if 0 in p.shape else p.layout)

    collect()
    assert {"0-d", "one", "empty", "transposed", "strided", "contiguous"} <= seen


def test_transposed_param_is_a_view_like_seed_003s_shampoo_buffer():
    t = Param((3, 5), "transposed").build()
    assert t.shape == (3, 5) and t.stride() == (1, 3)


@FAST
@given(mlps(tied=True))
def test_tied_mlps_tie_equal_shapes(blueprint):
    model = blueprint()
    (group,) = blueprint.tie_names()
    tie(model, group)
    shared = dict(model.named_parameters(remove_duplicate=False))
    assert len({id(shared[n]) for n in group}) == 1
    model(torch.randn(2, blueprint.in_features)).sum().backward()


@FAST
@given(module_trees())
def test_module_trees_run_and_nest_containers(tree):
    model = tree.build()
    out = model(torch.randn(2, 4))
    assert out.shape == (2, 4)


@FAST
@given(spec_cases("specs/torch_optim/adam.yaml", check="parity"))
def test_spec_cases_draw_plain_cases_with_a_loadable_repr(case):
    assert case.device == "cpu" and not case.closure and case.scheduler is None
    assert eval(repr(case), NAMESPACE).id == case.id
