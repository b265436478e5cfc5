"""Expansion of specs into cases: ids, grid, schedulers, devices, isolation."""

from __future__ import annotations

import json

import torch
from helpers import cases_from, write_spec

from pytest_optimtest.__main__ import main as cli
from pytest_optimtest.spec.values import build_kwargs

SPEC = """
optimizer: torch.optim.Adam
devices: [cpu, cuda]
grid:
  amsgrad: [false, true]
  foreach: {values: [false, true], devices: [cuda]}
cases:
  - name: default
  - name: tensor_lr
    kwargs: {lr: {tensor: 0.01}, betas: [{tensor: 0.9}, {tensor: 0.99}], capturable: true}
    devices: [cuda]
    schedulers: true
schedulers:
  StepLR: {step_size: 1}
  LambdaLR: {lr_lambda: {constant: 10}}
kernel_counts:
  "2.13":
    cpu: 8
    cuda: {"*": 8, "*-foreach-cuda": 2, adam-default-amsgrad-foreach-cuda: 3}
"""


def test_ids_cross_cases_grid_schedulers_and_devices(tmp_path):
    ids = [c.id for c in cases_from(tmp_path, SPEC)]
    assert ids[:6] == [
        "adam-default-cpu", "adam-default-amsgrad-cpu",
        "adam-default-cuda", "adam-default-foreach-cuda", "adam-default-amsgrad-cuda", "adam-default-amsgrad-foreach-cuda",
    ]
    assert "adam-tensor_lr-amsgrad-foreach-steplr-cuda" in ids and "adam-tensor_lr-lambdalr-cuda" in ids
    assert not any(i.startswith("adam-tensor_lr") and i.endswith("-cpu") for i in ids)
    assert len(ids) == len(set(ids)) == 6 + 4 * 2


def test_ids_are_stable_across_loads(tmp_path):
    assert [c.id for c in cases_from(tmp_path, SPEC)] == [c.id for c in cases_from(tmp_path, SPEC)]


def test_kernel_expectations_exact_then_glob_then_star(tmp_path):
    by_id = {c.id: c.expected["kernel_count"] for c in cases_from(tmp_path, SPEC, version="2.13")}
    assert by_id["adam-default-cpu"].count == 8
    assert by_id["adam-default-foreach-cuda"].count == 2
    assert by_id["adam-default-amsgrad-foreach-cuda"].count == 3
    assert "spec.yaml:17 kernel_counts['2.13'].cpu['*']" in by_id["adam-default-cpu"].where
    other = {c.id: c.expected["kernel_count"] for c in cases_from(tmp_path, SPEC, version="9.9")}
    assert other["adam-default-cpu"].count is None and "add kernel_counts['9.9'].cpu" in other["adam-default-cpu"].where


def test_rules_hold_for_the_torch_versions_they_name(tmp_path):
    # a torch bug seen on one release is an expected failure there, and a failure anywhere else
    text = ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nxfail:\n  - torch: ['2.11']\n    checks: [parity]\n"
            "    reason: torch 2.11 breaks the graph\nskip:\n  - torch: ['2.11', '2.12']\n    reason: not on these\n")
    (on_211,) = cases_from(tmp_path, text, "2.11")
    (on_213,) = cases_from(tmp_path, text, "2.13")
    assert on_211.xfail == {"parity": "torch 2.11 breaks the graph"} and "parity" in on_211.skip
    assert on_213.xfail == {} and on_213.skip == {}


def test_every_build_makes_fresh_tensors(tmp_path):
    # PyTorch hands one tensor lr to all scheduler variants and the eager scheduler mutates it.
    cases = [c for c in cases_from(tmp_path, SPEC) if c.scheduler]
    a, b = (build_kwargs(c.kwargs, "cpu") for c in cases[:2])
    assert a["lr"] is not b["lr"] and a["betas"][0] is not b["betas"][0]
    a["lr"].fill_(123.0)
    assert build_kwargs(cases[0].kwargs, "cpu")["lr"].item() == torch.tensor(0.01).item()
    assert isinstance(a["betas"], tuple)


def test_cli_schema_and_check(tmp_path, capsys):
    assert cli(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    optimizer_spec, hook_order_spec, fuzz_spec = (schema["$defs"][ref["$ref"].rpartition("/")[2]] for ref in schema["anyOf"])
    assert "optimizer" in optimizer_spec["required"] and "recompile" in optimizer_spec["properties"]
    assert {"distributed", "fuzz"} <= set(optimizer_spec["properties"])
    assert "expected" in hook_order_spec["properties"] and "kind" in hook_order_spec["required"]
    assert "max_leaves" in fuzz_spec["properties"] and "kind" in fuzz_spec["required"]
    good = write_spec(tmp_path, SPEC, "good.yaml")
    bad = write_spec(tmp_path, "optimizer: torch.optim.Adamm\n", "bad.yaml")
    assert cli(["check", str(good)]) == 0
    assert cli(["check", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "ok: " in out and "bad.yaml:1: [optimizer]" in out


def test_once_per_optimizer_checks_take_the_closure_variant_where_every_case_needs_one(tmp_path):
    """A step that must have a closure (LBFGS's, SAM's) still gets its laws and other once-per-optimizer
    checks, on its closure variant; a spec with a plain variant keeps them there."""
    laws = "laws: {untouched: true}\ncases:\n  - name: a\n  - name: b\n"
    only = {c.id: c.checks for c in cases_from(tmp_path, f"optimizer: torch.optim.LBFGS\nclosure: [true]\n{laws}")}
    assert "law_untouched" in only["lbfgs-a-closure-cpu"] and "state_dict" in only["lbfgs-a-closure-cpu"]
    assert "law_untouched" not in only["lbfgs-b-closure-cpu"]
    both = {c.id: c.checks for c in cases_from(tmp_path, f"optimizer: torch.optim.SGD\nkwargs: {{lr: 0.1}}\nclosure: [true, false]\n{laws}")}
    assert "law_untouched" in both["sgd-a-cpu"] and "law_untouched" not in both["sgd-a-closure-cpu"]


def test_loading_a_spec_draws_nothing_from_the_users_rngs(tmp_path):
    # the loader constructs the optimizer (a constructor that draws: adv_optm's spectral-norm vectors) and builds the
    # model a names selector needs (its init draws from torch's RNG): a guest leaves the session's RNGs as they were
    import planted_run_model

    torch.manual_seed(1234)
    torch_rng, own_rng = torch.get_rng_state(), planted_run_model._NOISE.get_state()
    cases_from(tmp_path, "optimizer: planted_run_model:ConstructorDrawSGD\nkwargs: {lr: 0.1}\n"
                         "params:\n  - {names: ['0.*'], lr: 0.05}\n  - {}\n")
    assert torch.get_rng_state().equal(torch_rng) and planted_run_model._NOISE.get_state().equal(own_rng)
