"""Write specs/ecosystem/<package>/<class>.yaml from the table below.

The table is the source of truth: an optimizer's constructor kwargs, its `setup`, and the
expected failures verified on torch 2.13 CPU (each with the reproducer under repro/ that shows
the mechanism); a rule that names torch releases was seen on those and passes on the others
(the CI subset's specs, run on 2.6 to 2.15: docs/compatibility.md). Run
`python specs/ecosystem/generate.py` after editing it, where the `ecosystem` extra is installed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
# an xfail: (checks, verified mechanism), or with the torch releases (major.minor) it was seen failing on, where
# it passes on others (None: every release), and then what its failure must say (the spec's `match`)
Rule = tuple[list[str], str] | tuple[list[str], str, list[str] | None] | tuple[list[str], str, list[str] | None, str]
LAW_CHECKS = ["law_equivalent", "law_untouched", "law_param_groups", "law_descent"]
# issue 34's laws, on by default (a spec naming its checks names them too); their reds, as observed, in laws_on_by_default.json
ON_BY_DEFAULT = ["law_grads_untouched", "law_closure_loss", "law_add_param_group", "law_group_hyperparameters",
                 "law_changed_hyperparameters", "law_late_joiners", "law_bounded_state", "law_determinism", "law_hooks"]
CHECKS = ["parity", "recompile", "graph_breaks", "state_dict", "no_leak", *LAW_CHECKS, *ON_BY_DEFAULT, "fsdp", "checkpoint"]
# Issue 24's regimes: FSDP2 on 2 gloo ranks with a DCP checkpoint resumed in one process (the default case),
# and parity at bf16 params (a case of its own, running parity alone: the ecosystem's bf16 column).
LOW_PRECISION = ["cases:", "  - name: default", "  - name: low_precision", "    dtypes: [bfloat16]", "    checks: [parity]"]
PACKAGES = {  # import name -> (distribution, pinned version): the `ecosystem` extra
    "pytorch_optimizer": ("pytorch-optimizer", "4.1.0"),
    "torch_optimizer": ("torch-optimizer", "0.3.0"),
    "heavyball": ("heavyball", "3.2.1"),
    "lion_pytorch": ("lion-pytorch", "0.2.5"),
    "schedulefree": ("schedulefree", "1.4.1"),
    "prodigyopt": ("prodigyopt", "1.1.2"),
    "dadaptation": ("dadaptation", "3.2"),
    "came_pytorch": ("came-pytorch", "0.1.3"),
    "adan_pytorch": ("adan-pytorch", "0.1.0"),
    # Added by issue 25 ("verdicts that hold on optimizers nobody here has seen"): first run with
    # init's specs before anything was tuned; the closing note has the numbers.
    "optimi": ("torch-optimi", "0.3.3"),
    "adabelief_pytorch": ("adabelief-pytorch", "0.2.1"),
    "adam_atan2_pytorch": ("adam-atan2-pytorch", "0.4.1"),
    "madgrad": ("madgrad", "1.3"),
    "prodigyplus": ("prodigy-plus-schedule-free", "2.0.1"),
    # Added by issue 24: the low-bit optimizer state (8-bit, 4-bit, fp8) low-precision users run.
    "torchao": ("torchao", "0.18.0"),
    "bitsandbytes": ("bitsandbytes", "0.50.2"),
}
TRAIN = "pytest_optimtest.setups:train_mode"  # schedule-free optimizers step only in train mode
# torchao and bitsandbytes keep a param's state in float32 below 4096 elements: their low-bit state is
# only under test on a model with larger params (each rank's shard included, for fsdp).
LOW_BIT = {"model": "pytest_optimtest.models:low_bit_state_mlp"}

# (module, class, kwargs, extra spec keys)
OPTIMIZERS: list[tuple[str, str, dict, dict]] = [
    *[("torch_optimizer", name, {"lr": 0.01}, {}) for name in (
        "A2GradExp", "A2GradInc", "A2GradUni", "AccSGD", "AdaBelief", "AdaBound", "AdaMod", "AdamP", "AggMo",
        "Apollo", "DiffGrad", "Lamb", "MADGRAD", "NovoGrad", "PID", "QHAdam", "QHM", "RAdam", "SGDP", "SGDW",
        "SWATS", "Yogi")],
    *[("pytorch_optimizer", name, {"lr": 0.01}, {}) for name in (
        "ADOPT", "AdaBelief", "AdaBound", "AdaMax", "AdaNorm", "AdaPNM", "Adai", "AdamP", "Adan", "AvaGrad",
        "DiffGrad", "EXAdam", "FAdam", "Grams", "Kate", "LaProp", "Lamb", "Lion", "MADGRAD", "NovoGrad", "PNM",
        "Ranger", "SGDW", "SignSGD", "StableAdamW", "Tiger", "Yogi")],
    *[("heavyball", name, {"lr": 0.01}, {}) for name in ("AdamW", "ADOPT", "LaProp", "RMSprop", "SGD")],
    ("lion_pytorch", "Lion", {"lr": 0.001}, {}),
    *[("schedulefree", name, {"lr": 0.01}, {"setup": TRAIN}) for name in (
        "AdamWScheduleFree", "SGDScheduleFree", "RAdamScheduleFree")],
    ("prodigyopt", "Prodigy", {"lr": 1.0, "d0": 0.001}, {}),
    *[("dadaptation", name, {"lr": 1.0, "d0": 0.001}, {}) for name in (
        "DAdaptAdam", "DAdaptSGD", "DAdaptAdaGrad", "DAdaptAdan", "DAdaptLion")],
    ("came_pytorch", "CAME", {"lr": 0.001}, {}),
    ("adan_pytorch", "Adan", {"lr": 0.01}, {}),
    *[("optimi", name, {"lr": 0.01}, {}) for name in (
        "Adam", "AdamW", "Adan", "Lion", "RAdam", "Ranger", "SGD", "StableAdamW")],
    ("adabelief_pytorch", "AdaBelief", {"lr": 0.01}, {}),
    ("adam_atan2_pytorch", "AdamAtan2", {"lr": 0.001}, {}),
    ("adam_atan2_pytorch", "AdoptAtan2", {"lr": 0.01}, {}),
    ("adam_atan2_pytorch", "MuonAdamAtan2", {"lr": 0.001},
     {"params": "[{min_ndim: 2, argument: muon_params}, {argument: params}]"}),
    *[("madgrad", name, {"lr": 0.01}, {}) for name in ("MADGRAD", "MirrorMADGRAD")],
    ("prodigyplus", "ProdigyPlusScheduleFree", {"lr": 1.0}, {"setup": TRAIN}),
    *[("torchao.optim", name, {"lr": 0.01}, LOW_BIT) for name in ("AdamW8bit", "AdamW4bit", "AdamWFp8", "_AdamW")],
    # bitsandbytes' SGD and LARS refuse momentum 0
    *[("bitsandbytes.optim", name, {"lr": 0.01, **extra}, LOW_BIT) for name, extra in (
        ("AdamW", {}), ("AdamW8bit", {}), ("PagedAdamW8bit", {}), ("Lion8bit", {}), ("SGD8bit", {"momentum": 0.9}),
        ("RMSprop8bit", {}), ("Adagrad8bit", {}), ("LAMB8bit", {}), ("LARS8bit", {"momentum": 0.9}), ("AdEMAMix8bit", {}),
        ("AdEMAMix32bit", {}))],
]

# Not run here: they do not run on CPU (docs/ecosystem.md says so under the table)
NOT_ON_CPU = {"torchao.optim:CPUOffloadOptimizer": "its constructor asserts 'CPU Offload currently only supports CUDA & XPU' "
              "(it keeps the optimizer on the CPU for params on an accelerator), by design"}

# Mechanisms verified on torch 2.13.0+cpu; `repro.py` (repro/) shows each with plain torch.
R = "python specs/ecosystem/repro/repro.py"
ALL = ["parity", "recompile", "graph_breaks", "state_dict", "no_leak"]
NO_GRAPH = ("step {what}; dynamo breaks the graph there ({why}) and captures no graph of the step, so there is "
            "nothing compiled to compare, recompile or free (the optimizer's doing). Repro: {R} compile {path}")
ITEM = dict(what="reads a tensor back with .item()", why="Tensor.item() with capture_scalar_outputs=False")
BRANCH = dict(what="branches on a tensor's value", why="'Data-dependent branching'")
DEEPCOPY = dict(what="calls copy.deepcopy on a tensor", why="'Attempted to copy.deepcopy a tensor'")
INT_STEP = ("group['step'] is a Python int that step increments: dynamo guards its value "
            "(param_groups[0]['step'] == N) and recompiles on every step, never settling (the optimizer's doing; "
            "torch.optim keeps step as a tensor). Repro: {R} compile {path}")
LOAD_TWICE = ("loading a state_dict into the compiled optimizer recompiles twice, not once: step adds group['step'] "
              "lazily, so dynamo's guard on len(param_groups[0]) fails for the loaded group and again once step has "
              "added the key (the optimizer's doing). Repro: {R} load {path}")
LEAK_GLOBAL = ("params outlive model, optimizer and compiled step after gc.collect() and torch._dynamo.reset(): held by "
               "dynamo's __compiled_fn_* globals in the optimizer's module, installed when the step breaks the graph "
               "in a helper of that module; their graphs keep the params they lifted (torch's doing). "
               "Repro: {R} leak {path}")
LEAK_CACHE = ("params outlive model, optimizer and compiled step after gc.collect(), held where gc cannot see until "
              "torch._dynamo.reset() frees them: dynamo's compile cache keeps the graphs compiled around the step's "
              "graph break, with the params they lifted, after the optimizer is gone (torch's doing). "
              "Repro: {R} leak {path}")
BREAKS = "the step breaks the graph ({why}; the honest graph_breaks verdict). Repro: {R} compile {path}"
ALIAS = ("compiled params differ from eager (repro: max abs diff ~1-2 after 6 steps; no graph break): the momentum "
         "buffers are created with zeros_like inside the compiled step and updated in place with the grad, the "
         "pattern whose buffer inductor returns aliasing p.grad on 2.13 (likely pytorch#197893, as in "
         "examples/downstream): torch's doing, not isolated further. Repro: {R} compile {path}")
HEAVYBALL_PARITY = ("the compiled run leaves param_groups[0]['is_preconditioning'] and optimizer._is_preconditioning "
                    "None where eager sets False: heavyball writes them differently when traced. Repro: {R} compile {path}")
HEAVYBALL_STATE = ("after a state_dict round trip the compiled optimizer's group lacks '__class__' and has "
                   "is_preconditioning None where eager has False. Repro: {R} compile {path}")
EMPTY = ("{law}: the optimizer cannot step an empty (zero-size) param, which PyTorch's laws include: {what} (the "
         "optimizer's doing). Repro: {P} -k {law}")
NONCONTIGUOUS = ("{law}: a non-contiguous (transposed) param makes the step raise RuntimeError: view size is not "
                 "compatible with input tensor's size and stride (.view() where .reshape() is needed: the optimizer's "
                 "doing). Repro: {P} -k {law}")
HEAVYBALL_BREAK = BREAKS.replace("{why}", "heavyball.utils calls torch._dynamo.utils.disable_cache_limit(), a function "
                                 "dynamo skips")


# What the failure of each rule of the CI subset's specs must say (the rule's `match`), by a phrase of its reason:
# read off the failures with `pytest --runxfail` and checked on every release the subset runs on (docs/compatibility.md).
# A rule of another spec carries none until its failures are read so.
MATCHES: dict[str, list[tuple[str, str]]] = {
    "bitsandbytes.optim:AdamW8bit": [("'got mixed torch.Tensor and DTensor'", "got mixed torch.Tensor and DTensor"),
                                     ("law hooks broken", "law hooks broken")],
    "dadaptation:DAdaptAdam": [("step reads a tensor back with .item()", "captured no graph"),
                               ("law param_groups: one step size d", "Setting different lr values in different parameter "
                                                                     "groups"),
                               ("does not resume like the run that never stopped", "does not resume like the run that "
                                                                                   "never stopped"),
                               ("differs from it over whole params in one process", "differs from it over whole params"),
                               ("law group_hyperparameters broken", "law group_hyperparameters broken")],
    "heavyball:AdamW": [("heavyball writes them differently when traced", "is_preconditioning"),
                        ("dynamo's assertion on torch 2.9 to 2.11", "AttributeMutation"),
                        ("compiles its fused update itself", "BackendCompilerFailed|fusions"),
                        ("disable_cache_limit", "disable_cache_limit"),
                        ("after a state_dict round trip", "is_preconditioning|__class__")],
    "torch_optimizer:QHM": [("momentum buffers are created with zeros_like", "shares storage with")],
    "torch_optimizer:RAdam": [("raises NameError", r"NameError: name 's\d+' is not defined"),
                              ("caches its step size per state['step'] % 10", "recompile"),
                              ("law param_groups: every group shares", "law param_groups broken")],
}


def _match(module: str, cls: str, reason: str) -> str | None:
    """The failure a rule of module:cls expects, where MATCHES says."""
    return next((match for phrase, match in MATCHES.get(f"{module}:{cls}", []) if phrase in reason), None)


def spec_path(module: str, cls: str) -> str:
    """Where the spec of module:cls lives, under its package's directory."""
    return f"specs/ecosystem/{module.split('.')[0]}/{cls.lower()}.yaml"


def _rules(path: str) -> dict[str, list[Rule]]:
    spec = spec_path(*path.split(":"))

    def f(text: str, **extra: str) -> str:
        return text.format(R=R, path=path, P=f"pytest --optim-spec {spec}", **{"spec": spec, **extra})

    no_graph = lambda kind: [(ALL, f(NO_GRAPH, **kind))]  # noqa: E731
    po_int = [(["recompile"], f(INT_STEP)), (["state_dict"], f(LOAD_TWICE))]
    crash = lambda checks, what: [(checks, f(what + " Repro: {R} compile {path}"))]  # noqa: E731
    leak_break = lambda why, leak: [(["graph_breaks"], f(BREAKS, why=why)), (["no_leak"], f(leak))]  # noqa: E731
    heavyball = [(["graph_breaks"], f(HEAVYBALL_BREAK)), (["state_dict"], f(HEAVYBALL_STATE)), (["no_leak"], f(LEAK_CACHE))]
    return {
        **{f"dadaptation:{c}": no_graph(ITEM) for c in ("DAdaptSGD", "DAdaptAdaGrad", "DAdaptAdan", "DAdaptLion")},
        # DAdaptAdam, the CI subset's, run on every release: on 2.7 its sharded step meets a DTensor without torch.dot
        "dadaptation:DAdaptAdam": [
            (["fsdp", "checkpoint"], f("the eager step over FSDP2-sharded params raises NotImplementedError: Operator "
                                       "aten.dot.default does not have a sharding strategy registered (dadapt_adam.py's "
                                       "torch.dot over DTensor grads): torch 2.7's DTensor lacks it, 2.8 on has it (torch's "
                                       "doing). Repro: {R} fsdp {path}"), ["2.7"],
             "aten.dot.default does not have a sharding strategy"),
            *no_graph(ITEM)],
        "prodigyopt:Prodigy": no_graph(BRANCH),
        **{f"torch_optimizer:{c}": no_graph(BRANCH) for c in ("Lamb", "NovoGrad", "SWATS")},
        **{f"torch_optimizer:{c}": no_graph(DEEPCOPY) for c in ("A2GradExp", "A2GradInc", "A2GradUni", "AccSGD")},
        **{f"pytorch_optimizer:{c}": po_int for c in (
            "ADOPT", "AdaBelief", "AdaBound", "AdaMax", "AdaNorm", "AdaPNM", "Adai", "Adan", "DiffGrad", "EXAdam",
            "Grams", "LaProp", "Lamb", "PNM", "Yogi")},
        **{f"pytorch_optimizer:{c}": [(["state_dict"], f(LOAD_TWICE))] for c in (
            "FAdam", "Kate", "Lion", "NovoGrad", "SGDW", "SignSGD", "StableAdamW", "Tiger")},
        **{f"pytorch_optimizer:{c}": po_int + leak_break("'Data dependent operator'", LEAK_CACHE) for c in ("AvaGrad", "MADGRAD")},
        **{f"{m}:{c}": leak_break("'Data-dependent branching' in _projection: if cosine_sim.max() < delta / ...", LEAK_GLOBAL)
           for m, c in (("pytorch_optimizer", "AdamP"), ("torch_optimizer", "AdamP"), ("torch_optimizer", "SGDP"))},
        **{f"schedulefree:{c}": [(["recompile"], f(
            "the step keeps Python floats in its group (weight_sum, lr_max, k) that change every step: dynamo guards "
            "their values (param_groups[0]['weight_sum'] == ...) and recompiles on every step, never settling (the "
            "optimizer's doing). Repro: {R} compile {path}")),
            (["state_dict"], f("loading a state_dict into the compiled optimizer recompiles twice, not once: step adds "
                               "group keys lazily (scheduled_lr, ...), so dynamo's guard on len(param_groups[0]) "
                               "fails for the loaded group and again after step adds them. Repro: {R} load {path}"))]
           for c in ("AdamWScheduleFree", "SGDScheduleFree")},
        "schedulefree:RAdamScheduleFree": crash(ALL, "compiled step 2 raises TorchRuntimeError ('RuntimeError when "
                                                "making fake tensor call') inside dynamo's tracing of the step."),
        "pytorch_optimizer:Ranger": crash(ALL, "compiled step 2 raises InductorError: KeyError: 'buf19' in inductor's "
                                          "CPU code generation: torch's doing (likely pytorch#196570 or #188228, "
                                          "the CPP backend's outer-loop fusion KeyError, not confirmed)."),
        "torch_optimizer:AggMo": [(["parity", "state_dict"], f(ALIAS))],  # seen failing on 2.6, 2.9, 2.11, 2.12, 2.13
        # torch 2.6 to 2.11 compile QHM's step so that its buffers do not alias (both pass there, 2026-12-07, CPU)
        "torch_optimizer:QHM": [(["parity", "state_dict"], f(ALIAS), ["2.12", "2.13", "2.14", "2.15"])],
        "torch_optimizer:QHAdam": [(["parity", "state_dict"], f(
            "Python float state (beta1_weight, beta2_weight) updated in step: the compiled run writes back a "
            "different value (compiled beta2_weight 2.997 vs eager 5.985 after 6 steps; the guards name "
            "fx/passes/_tensorify_python_scalars.py): torch's doing. Repro: {R} compile {path}")),
        ],
        "torch_optimizer:MADGRAD": [
            (["recompile"], f(INT_STEP.replace("group['step'] is", "group['k'] (the step count) is")
                              .replace("param_groups[0]['step']", "param_groups[0]['k']"))),
            (["state_dict"], f(LOAD_TWICE.replace("group['step']", "group['k']")))],
        **{f"optimi:{c}": leak_break("Tensor.item() with capture_scalar_outputs=False", LEAK_GLOBAL)
           for c in ("Adam", "AdamW", "Adan")},
        **{f"optimi:{c}": leak_break("Tensor.item() with capture_scalar_outputs=False", LEAK_GLOBAL) + [(["recompile"], f(
            "steady step 6 recompiles: the step count, read back with .item(), feeds the Python branch `if rho > 5` "
            "(rho grows with the step), so dynamo guards that inequality and compiles again once it flips (the "
            "optimizer's doing). Repro: {R} compile {path} 8"))] for c in ("RAdam", "Ranger")},
        "optimi:StableAdamW": leak_break("Tensor.item() with capture_scalar_outputs=False", LEAK_GLOBAL) + [(["state_dict"], f(
            "loading a state_dict into the compiled optimizer recompiles twice, not once: dynamo guards the identity "
            "of the eps_sq tensors StableAdamW caches per step and the int step read back with .item() (the "
            "optimizer's doing). Repro: {R} load {path}"))],
        "adabelief_pytorch:AdaBelief": [(["parity", "recompile", "graph_breaks", "state_dict"], f(
            "compiled step 3 raises NameError: name 's12' is not defined, in the code inductor generated, once "
            "automatic dynamic shapes make the int state['step'] symbolic: torch's doing (as torch_optimizer:RAdam). "
            "Repro: {R} compile {path}"))],
        **{f"madgrad:{c}": [
            (["recompile"], f("the step count k lives in state as a tensor read back with .item() (a graph break) and "
                              "goes into math.pow: dynamo guards its value (___stack0 == k) and recompiles on every step, "
                              "never settling (the optimizer's doing). Repro: {R} compile {path} 8")),
            (["graph_breaks"], f(BREAKS, why="Tensor.item() with capture_scalar_outputs=False")),
            (["state_dict"], f("loading a state_dict into the compiled optimizer recompiles twice, not once: guards on "
                               "len(self.state) (state['k'] sits beside the params' states) and on k's value (the "
                               "optimizer's doing). Repro: {R} load {path}"))] for c in ("MADGRAD", "MirrorMADGRAD")},
        "prodigyplus:ProdigyPlusScheduleFree": [(ALL, f(
            "only the compiled step raises, TypeError: unsupported operand type(s) for -=: 'NoneType' and 'int' in "
            "on_end_step: self.parameters_to_process, set by on_start_step in the same step, reads None in the compiled "
            "run (after a graph break in step); the eager step runs: torch.compile's doing by the plugin's diagnosis, "
            "not isolated further. Repro: {P} -k parity")),
            (["law_equivalent", "law_param_groups"], f(
                "vacuous at lr 1.0: from d0 1e-6 its params move about one tolerance in 7 steps, so equal runs prove "
                "nothing (the spec's tuning; the laws need a step that moves). Repro: {P} -k law_"))],
        **{f"heavyball:{c}": [(["parity"], f(HEAVYBALL_PARITY))] + heavyball for c in ("LaProp", "RMSprop", "SGD")},
        # AdamW, the one of heavyball's run on every release (the CI subset's): parity passes on 2.7 and 2.8
        "heavyball:AdamW": [
            (["parity"], f(HEAVYBALL_PARITY), ["2.12", "2.13", "2.14", "2.15"]),
            # graph_breaks and state_dict are blocked by these two where they hold (found by their rules' `match`)
            (["parity", "graph_breaks"], f("the compiled step raises AssertionError: Attempted setattr on a user-defined "
                                           "object that does not have an AttributeMutation mutation_type, where heavyball's "
                                           "step sets an attribute: dynamo's assertion on torch 2.9 to 2.11 (torch's "
                                           "doing). Repro: {R} compile {path}"), ["2.9", "2.10", "2.11"]),
            (["parity", "graph_breaks", "state_dict"], f(
                "heavyball 3.2.1 compiles its fused update itself, and on torch 2.6 that compile fails inside the eager "
                "step (BackendCompilerFailed, heavyball/fusions.py in inductor_backend): the package's doing on a release "
                "it does not support. Repro: {R} compile {path}"), ["2.6"]),
            *heavyball],
        # the compiled step raises on 2.8 to 2.13; 2.6, 2.7, 2.14 and 2.15 compile it (2026-12-07, CPU)
        "torch_optimizer:RAdam": [
            (["parity", "recompile", "graph_breaks", "state_dict"], f(
                "compiled step 3 raises NameError: name 's21' is not defined, once automatic dynamic shapes make the int "
                "state['step'] symbolic (inductor's generated code uses an undefined symbol): torch's doing (the symptom "
                "of pytorch#104102, not confirmed the same cause). Repro: {R} compile {path}"),
             ["2.8", "2.9", "2.10", "2.11", "2.12", "2.13"]),
            (["recompile", "state_dict"], f(
                "the step recompiles on each of its first steps and never settles: it caches its step size per "
                "state['step'] % 10 in group['buffer'], and dynamo guards each slot it reads "
                "(param_groups[0]['buffer'][3][0] is None) (the optimizer's doing). Repro: {R} compile {path} 8"),
             ["2.6", "2.7", "2.14", "2.15"])],
        "heavyball:ADOPT": [(["parity"], f("vacuous: eager params do not move in 6 steps at lr 0.01 (and the compiled run "
                                           "differs in is_preconditioning, as heavyball's AdamW). Repro: {R} compile {path}"))]
                           + heavyball,
    }


def _low_bit_rules(path: str) -> dict[str, list[Rule]]:
    """torchao's and bitsandbytes' expected failures, found on torch 2.13 CPU on the low-bit model."""
    spec = spec_path(*path.split(":"))
    item = f"pytest --optim-spec {spec}"
    repro = f"{R} {{mode}} {path}"
    frozen = (ALL, "the compiled step fails at step 1 in inductor: 'cannot mutate tensors with frozen storage'. "
              "bitsandbytes' update_step runs p.data = p.data.contiguous() and then its custom op declared as mutating "
              "p; eager runs that, torch.compile does not, and without the .data assignment it compiles (torch's "
              "doing). Repro: python specs/ecosystem/repro/frozen_storage.py (plain torch, no bitsandbytes)", None,
              "frozen storage")
    float_arg = (ALL, "the compiled step fails at step 1: the step passes param_norm, a 0-d tensor (torch.norm), "
                 "for the float argument of its custom op bitsandbytes::optimizer_update_32bit; eager converts it "
                 "with an implicit .item(), and dynamo's fake tensors cannot ('cannot extract float from tensor with "
                 "meta storage'): the optimizer's doing. Repro: " + repro.format(mode="compile"))

    def no_strategy(op: str, what: str) -> tuple[list[str], str]:
        return (["fsdp", "checkpoint"], f"the eager step over FSDP2-sharded (DTensor) params raises: its custom op ({op}) "
                f"gets DTensor params and grads beside the plain-tensor state the optimizer made ({what}); the "
                "optimizer's doing (a custom op needs a DTensor sharding strategy, or the step must call it on "
                "to_local() shards). Repro: " + repro.format(mode="fsdp"))

    zero_norm = (["law_descent"], "law descent: from the law problem's zero-initialized params the loss never moves "
                 "(1.857 for 20 steps): the step clips each update's norm to max_unorm times the param's norm, which is "
                 "0 (LAMB's and LARS's trust ratio without the zero-norm guard torch-optimizer's and pytorch-optimizer's "
                 "Lamb have): the optimizer's doing. Repro: " + item + " -k law_descent")
    ademamix = (CHECKS,
                "does not run on CPU: the eager step raises RuntimeError: output with shape [10] doesn't match the "
                "broadcast shape [1024, 10] in bitsandbytes' CPU 32-bit AdEMAMix update (its state1 stacks two EMAs, "
                "[2, *shape]); AdEMAMix8bit runs (the optimizer's doing). Repro: " + item + " -k parity")
    cache_limit = (["graph_breaks"], BREAKS.format(R=R, path=path, why="torchao's step calls torch._dynamo.utils."
                                                   "disable_cache_limit(), a function dynamo skips"))
    segfault = (["fsdp", "checkpoint"], "a rank dies of a segfault (exit -11) in the eager sharded step, inside the "
                "inductor-compiled code of the single_param_adam that torchao compiles itself (the rank's Python stack "
                "is in the failure): torch's doing by where it dies, not isolated (repro.py's fsdp run of the same "
                "step does not crash). Repro: " + item + " -k fsdp")
    ao_compiled_fsdp = (["fsdp"], "the compiled step over FSDP2-sharded (DTensor) params raises NameError: name 's41' "
                        "is not defined in inductor's generated code (the same step over whole params compiles): "
                        "torch's doing. Repro: " + repro.format(mode="fsdp") + " compiled")
    four_bit = (ALL, "the compiled step fails at step 1: AssertionError: Expect size to be a plain tuple of ints but "
                "got torch.Size([s86, s52]), raised in torch's symbolic_shapes when torchao's _new_buffer (adam.py:76) "
                "makes its 4-bit state subclass from a param whose shape automatic dynamic shapes made symbolic: torch's "
                "doing by where it raises, not isolated. Repro: " + repro.format(mode="compile"))
    leak = (["no_leak"], "params outlive the model, the optimizer and the compiled step after gc.collect(), held by a "
            "cell, a defaultdict, a dict and a list: a cache around torchao's compiled step (not isolated). Repro: "
            + repro.format(mode="leak"))
    blockwise = no_strategy("bitsandbytes.optimizer_update_8bit_blockwise", "'got mixed torch.Tensor and DTensor'")
    # on 2.9 to 2.11 dynamo asserts before inductor meets the frozen storage (seen on AdamW8bit, the CI subset's, on
    # 2.9 to 2.11, and on every class of `frozen` on 2.10 and 2.11: found by its `match`)
    attribute_mutation = (ALL, "the compiled step fails at step 1 in dynamo: AssertionError: Attempted setattr on a "
                          "user-defined object that does not have an AttributeMutation mutation_type, dynamo's assertion "
                          "on torch 2.9 to 2.11 (torch's doing), before inductor meets the frozen storage it fails on "
                          "elsewhere. Repro: " + repro.format(mode="compile"), ["2.9", "2.10", "2.11"], "AttributeMutation")
    bnb_8bit = [attribute_mutation, frozen, blockwise]
    return {
        **{f"bitsandbytes.optim:{c}": bnb_8bit for c in (
            "AdamW8bit", "PagedAdamW8bit", "Lion8bit", "SGD8bit", "RMSprop8bit", "Adagrad8bit", "AdEMAMix8bit")},
        "bitsandbytes.optim:AdamW": [attribute_mutation, frozen, no_strategy("bitsandbytes.optimizer_update_32bit",
                                                                             "'does not have a sharding strategy registered'")],
        **{f"bitsandbytes.optim:{c}": [float_arg, blockwise, zero_norm]
           for c in ("LAMB8bit", "LARS8bit")},
        "bitsandbytes.optim:AdEMAMix32bit": [ademamix],
        "torchao.optim:_AdamW": [cache_limit, ao_compiled_fsdp],
        "torchao.optim:AdamW8bit": [cache_limit, leak, segfault],
        "torchao.optim:AdamWFp8": [cache_limit, segfault],
        "torchao.optim:AdamW4bit": [four_bit, segfault],
    }


def _law_rules(path: str) -> dict[str, list[Rule]]:
    """The conformance laws' expected failures, found on torch 2.13 CPU; each with the command that shows it."""
    spec = spec_path(*path.split(":"))

    def f(text: str, **extra: str) -> str:
        return text.format(P=f"pytest --optim-spec {spec}", **extra)

    diverges = {"dadaptation:DAdaptSGD": [(["law_descent"], f(
        "law descent: at lr 1.0 the loss falls for 19 steps (1.86 to 0.44) and then jumps to 44 at step 20 as d keeps "
        "growing (the optimizer's doing at this lr). Repro: {P} -k law_descent"))]}
    return _merged({
        **{f"{m}:{c}": [(["law_param_groups"], f(
            "law param_groups: one step size d is estimated across all groups, and groups with different nonzero lrs "
            "are refused by design ('Setting different lr values in different parameter groups is only supported for "
            "values of 0'), so halving one group's lr raises (the optimizer's design). Repro: {P} -k law_param_groups"))]
           for m, c in (("dadaptation", "DAdaptAdam"), ("dadaptation", "DAdaptSGD"), ("prodigyopt", "Prodigy"))},
        **{f"dadaptation:{c}": [(["law_param_groups"], f(
            "law param_groups: a group with lr 0 still moves (100+ tolerances in 7 steps), though the optimizer accepts lr "
            "0 as the one per-group lr it supports: the optimizer's doing. Repro: {P} -k law_param_groups"))]
           for c in ("DAdaptAdaGrad", "DAdaptAdan", "DAdaptLion")},
        **{f"{m}:{c}": [(["law_equivalent", "law_untouched"], f(EMPTY, what="its channel view reshapes a 0-element "
                                                                 "tensor to [0, -1]", law="law_untouched")),
                        (["law_descent"], f(NONCONTIGUOUS, law="law_descent"))]
           for m, c in (("pytorch_optimizer", "AdamP"), ("torch_optimizer", "AdamP"), ("torch_optimizer", "SGDP"))},
        "pytorch_optimizer:AvaGrad": [(["law_equivalent", "law_untouched"], f(
            EMPTY, what="torch.norm(p=-2) of an empty tensor has no identity", law="law_untouched"))],
        "torch_optimizer:SWATS": [(["law_descent"], f(NONCONTIGUOUS, law="law_descent"))],
        "pytorch_optimizer:Kate": [(["law_descent"], f(
            "law descent: at lr 0.01 its first step raises the convex loss from 1.86 to 2.91 and 20 steps leave it at "
            "2.44, above the start (the optimizer's doing, or an lr it does not suit). Repro: {P} -k law_descent"))],
        "schedulefree:RAdamScheduleFree": [(["law_equivalent"], f(
            "law equivalent[tensor_lr]: with lr a tensor the params turn NaN at step 1, with the same float they do not "
            "(the optimizer's doing). Repro: {P} -k law_equivalent"))],
        **{f"torch_optimizer:{c}": [(["law_param_groups"], f(
            "law param_groups: the lr of a group is not used (documented: 'lr: not used for this optimizer'), so an "
            "lr-0 group moves like the other (the optimizer's design). Repro: {P} -k law_param_groups"))]
           for c in ("A2GradExp", "A2GradInc", "A2GradUni")},
        "torch_optimizer:AdaBound": [(["law_param_groups"], f(
            "law param_groups: a group with lr 0 raises ZeroDivisionError (final_lr * lr / base_lr, adabound.py:170): "
            "the optimizer's doing. Repro: {P} -k law_param_groups"))],
        "torch_optimizer:MADGRAD": [(["law_param_groups"], f(
            "law param_groups: the step uses lr = group['lr'] + eps, so a group with lr 0 still moves (the optimizer's "
            "doing; madgrad's own MADGRAD adds eps only to a nonzero lr). Repro: {P} -k law_param_groups"))],
        "torch_optimizer:RAdam": [(["law_param_groups"], f(
            "law param_groups: every group shares the one `buffer` list of the defaults, which caches step_size "
            "(lr included) by step: a group with lr 0 steps with the other group's cached step size (the optimizer's "
            "doing). Repro: {P} -k law_param_groups"))],
    }, diverges)


OPTIMI_HANG = ("not asserted: the compiled step over FSDP2-sharded params (which breaks the graph at a .item()) "
               "hung one rank in a collective in some runs and passed in others, for AdamW, RAdam, Ranger and Adan "
               "(seen both on torch 2.13 CPU, 2 gloo ranks); the eager sharded step passes. Repro: "
               "python specs/ecosystem/repro/repro.py fsdp optimi:{cls} compiled, a few times")
# (module, class) -> {check: reason}: outcomes that are not one statement, so not asserted
SKIPS = {("torch_optimizer", "QHAdam"): {"recompile": (
    "not asserted: dynamo recompiles on each new value of the Python float state['beta1_weight'], and the warm-up "
    "settled on its 4th step in one run and not in another (seen both on torch 2.13 CPU). Repro: "
    "python specs/ecosystem/repro/repro.py compile torch_optimizer:QHAdam")},
    **{("optimi", cls): {check: OPTIMI_HANG.format(cls=cls) for check in ("fsdp", "checkpoint")}
       for cls in ("AdamW", "RAdam", "Ranger", "Adan")}}


def xfails(module: str, cls: str) -> list[Rule]:
    """The strict xfails of one optimizer: (checks, verified mechanism), compiled checks' then laws'."""
    key = f"{module}:{cls}"
    return _rules(key).get(key, []) + _law_rules(key).get(key, []) + _low_bit_rules(key).get(key, [])


def production_xfails(module: str, cls: str) -> list[dict]:
    """Issue 24's checks (fsdp, checkpoint, bf16 parity): the verdicts observed on torch 2.13 CPU, in
    production.json (made from that run's report; each names what differed or raised, and its repro)."""
    return [r for name in ("production.json", "laws_on_by_default.json") if (HERE / name).exists()
            for r in json.loads((HERE / name).read_text()) if r["optimizer"] == f"{module}:{cls}"]


def _merged(*tables: dict[str, list]) -> dict[str, list]:
    """One table of the rules of several, each optimizer's lists joined."""
    out: dict[str, list] = {}
    for table in tables:
        for key, rules in table.items():
            out.setdefault(key, []).extend(rules)
    return out


def spec_text(module: str, cls: str, kwargs: dict, extra: dict) -> str:
    package = module.split(".")[0]
    dist, version = PACKAGES[package]
    lines = [f"# {dist}=={version}: {module}.{cls} (generated by generate.py; edit the table there)",
             f"optimizer: {module}:{cls}",
             f"name: {_name(module, cls)}",
             f"requires: [{package}]",
             f"kwargs: {_flow(kwargs)}"]
    lines += [f"{key}: {value}" for key, value in extra.items()]
    lines += LOW_PRECISION
    lines.append(f"checks: [{', '.join(CHECKS)}]")
    lines += laws_text(module, cls, kwargs)
    rules = xfails(module, cls)
    production = production_xfails(module, cls)
    if any("did not finish within" in r["reason"] for r in production):
        lines.append("distributed: {timeout_s: 60}  # its compiled step over DTensor params hangs: fail it in a minute")
    skips = SKIPS.get((module, cls), {})
    if skips:
        lines.append("skip:")
        for check, reason in skips.items():
            lines += [f"  - checks: [{check}]", f"    reason: {_quoted(reason)}"]
    if rules or production:
        lines.append("xfail:")
        for checks, reason, *keyed in rules:
            releases, match = (keyed + [None, None])[:2]
            match = match or _match(module, cls, reason)
            lines += [f"  - checks: [{', '.join(checks)}]", f"    reason: {_quoted(reason)}"]
            lines += [f"    torch: [{', '.join(map(_quoted, releases))}]"] if releases else []
            lines += [f"    match: {_quoted(match)}"] if match else []
        for rule in production:
            match = _match(module, cls, rule["reason"])
            lines += [f"  - cases: {_quoted(rule['cases'])}", f"    checks: [{', '.join(rule['checks'])}]",
                      f"    reason: {_quoted(rule['reason'])}"] + ([f"    match: {_quoted(match)}"] if match else [])
    return "\n".join(lines) + "\n"


def laws_text(module: str, cls: str, kwargs: dict) -> list[str]:
    """The conformance laws every optimizer here is held to: a tensor lr (and foreach, where the
    constructor takes it) changes nothing, params without grads stay, each group's lr is used,
    steps descend. The constructor is read from the installed package."""
    import importlib
    import inspect

    params = inspect.signature(getattr(importlib.import_module(module), cls)).parameters
    lr = kwargs["lr"]
    lines = ["laws:", "  equivalent:"]
    if "foreach" in params:
        lines.append("    foreach: [{foreach: false}, {foreach: true}]")
    lines += [f"    tensor_lr: [{{lr: {lr!r}}}, {{lr: {{tensor: {lr!r}}}}}]", "  untouched: true", "  param_groups: true",
              "  descent: true"]
    return lines


def _name(module: str, cls: str) -> str:
    short = {"pytorch_optimizer": "po", "torch_optimizer": "to", "heavyball": "hb", "torchao.optim": "ao",
             "bitsandbytes.optim": "bnb"}.get(module, module.split("_")[0])
    return re.sub(r"[^a-z0-9_]", "", f"{short}_{cls.lower()}")


def _flow(kwargs: dict) -> str:
    return "{" + ", ".join(f"{k}: {v!r}".replace("True", "true").replace("False", "false") for k, v in kwargs.items()) + "}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main() -> None:
    # every text made before any file is touched: a package that fails to import leaves the specs as they were
    texts = {HERE.parent.parent / spec_path(module, cls): spec_text(module, cls, kwargs, extra)
             for module, cls, kwargs, extra in OPTIMIZERS}
    for old in HERE.glob("*/*.yaml"):  # its own specs only: the unseen set's (issue 32) are init's, kept as written
        if "generated by generate.py" in old.read_text().partition("\n")[0]:
            old.unlink()
    for path, text in texts.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(OPTIMIZERS)} specs under {HERE}")


if __name__ == "__main__":
    main()
