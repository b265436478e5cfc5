"""Distributed: a compiled whole train step vs DDP on N ranks; ZeRO vs the unsharded optimizer."""

from __future__ import annotations

from typing import Any

import torch

from ..harness.blame import KnownCause
from ..harness.compare import listed, value_differences
from ..harness.diagnosis import STATE_CAST, STATE_CAST_ON_LOAD, cast_on_load, state_lost_on_load
from ..harness.vacuity import Blocked, Vacuous, require_beyond_amplified_rounding, require_moved
from ..harness.distributed_run import DistributedRun, load_into_plain, unavailable_reason, zero_takes
from ..harness.param_forms import form_name
from ..harness.state_dict_layout import FOREIGN_LAYOUT, UNKEYED_STATE, layout_of
from ..spec.values import resolve
from ..spec.schema import Tolerance
from ..harness.ladder import COMPILED, MOVES
from ..harness.law_runs import coupling
from .laws.section import laws_of
from .base import Check, NotApplicable, Verdict

EXACT = Tolerance(atol=0.0, rtol=0.0)


def _run(case, runs) -> DistributedRun:
    reason = unavailable_reason(case)
    if reason:
        raise NotApplicable(reason)
    return runs.distributed(case)


def _tolerance(case) -> Tolerance:
    return case.distributed.tolerance or case.tolerance


def _not_vacuous(run: DistributedRun) -> float:
    case, tol = run.case, _tolerance(run.case)
    return require_moved(case.id, run.initial_params, run.eager, tol, case.min_movement,
                         f"over {case.distributed.iterations} one-process eager train steps",
                         f"; raise lr or distributed.iterations in {case.location}")


def _ranks_agree(run: DistributedRun, attr: str) -> list[str]:
    """DDP keeps replicas bitwise identical; any difference between ranks is the optimizer's."""
    first = getattr(run.ranks[0], attr)
    return [
        f"rank {r} vs rank 0: {d}"
        for r, result in enumerate(run.ranks[1:], start=1)
        for d in value_differences("param", first, getattr(result, attr), EXACT, ("rank 0", f"rank {r}"))
    ]


RANKS_DISAGREE = ("replicas differ between ranks (they must stay bitwise identical: does the update depend on "
                  "the rank, e.g. draw from an unseeded generator?)")


def _report(header: str, sections: list[tuple[str, list[str]]], diagnosis: str = "", mechanism: str = "") -> None:
    """Raise one AssertionError listing each non-empty section under its title (a KnownCause where the
    root cause is known)."""
    found = [(title, problems) for title, problems in sections if problems]
    if found:
        message = header + "".join(f"\n {title}:" + listed(problems, 4).replace("\n", "\n  ") for title, problems in found)
        raise KnownCause(message + diagnosis, mechanism) if mechanism else AssertionError(message)


def check_distributed(case: Any, runs: Any) -> Verdict:
    run = _run(case, runs)
    tol, ws = _tolerance(case), case.distributed.world_size
    raised = run.compiled_error
    if raised is None and run.graph_count == 0:
        raise AssertionError(f"{case.id}: not compiled: torch.compile of the train step captured no graph; "
                             f"graph breaks: {run.graph_breaks or 'none'}")
    moved = _not_vacuous(run)
    ddp = run.ranks[0].params
    alone = [] if raised else value_differences("param", run.eager, run.compiled, tol)
    ranks_disagree = _ranks_agree(run, "params")
    eager_ddp = value_differences("param", run.eager, ddp, tol, ("one-process", "DDP rank 0"))
    # a compiled step that differs from eager in one process already is parity's red (compiled_matches), not DDP's
    compiled_ddp = [] if raised or alone else value_differences("param", ddp, run.compiled, tol, ("DDP rank 0", "compiled"))
    if not ranks_disagree:  # DDP reduces grads in another order than one process: rounding a blow-up amplifies
        require_beyond_amplified_rounding(case.id, run.initial_params, [pair for pair, found in (
            ((run.eager, ddp), eager_ddp), ((ddp, run.compiled), compiled_ddp), ((run.eager, run.compiled), alone)) if found],
            f"over {run.case.distributed.iterations} one-process eager train steps")
    sections = [
        (f"DDP {RANKS_DISAGREE}", ranks_disagree),
        ("eager DDP vs eager one-process", eager_ddp),
        ("compiled one-process vs DDP (in one process compiled equals eager: the difference shows only against DDP)", compiled_ddp),
    ]
    _report(f"{case.id}: after {run.case.distributed.iterations} train steps on a global batch of "
            f"{case.distributed.batch} (DDP: {ws} {run.backend} ranks x {case.distributed.batch // ws}):", sections)
    if raised is not None:  # the compiled-step rung's red where the step alone raises compiled too, else this check's
        failure = runs.ladder(case).first_failure(COMPILED)
        if failure is None:
            raise raised
        raise Blocked(f"{failure.blocked()}; eager DDP on {ws} ranks matches one process")
    if alone:
        raise Blocked(f"in one process the compiled train step (forward, backward and step) differs from eager already "
                      f"({len(alone)} params): no compiled reference for DDP's; the compiled step alone is parity's to judge; "
                      f"eager DDP on {ws} ranks matches one process")
    return Verdict(f"{len(ddp)} params equal: compiled train step ({run.graph_count} graphs, {len(run.graph_breaks)} "
                   f"break reasons), eager, and DDP on {ws} {run.backend} ranks ({run.seconds:.1f}s); moved {moved:.3g} tol",
                   {"steps_compared": run.case.distributed.iterations, "world_size": ws, "graphs": run.graph_count,
                    "params": len(ddp), "moved_tolerances": round(moved, 3)})


def check_zero(case: Any, runs: Any) -> Verdict:
    if not zero_takes(case):
        raise NotApplicable(f"the optimizer takes its params as {form_name(case.params)} (the spec's `params`); "
                            "ZeroRedundancyOptimizer hands it one list of params or groups")
    run = _run(case, runs)
    tol, ws = _tolerance(case), case.distributed.world_size
    if run.zero_failure is not None:  # its own job failed; DDP's run stands for the distributed check
        raise run.zero_failure
    refused = run.ranks[0].zero_refused
    if refused and refused.startswith("distributing itself"):
        raise NotApplicable(f"{case.id}: ZeroRedundancyOptimizer over it does not apply: "
                            f"{refused.removeprefix('distributing itself: ')}")
    if refused and refused.startswith("building"):
        optimizer_cls = resolve(case.optimizer)
        if not issubclass(optimizer_cls, torch.optim.Optimizer):
            raise NotApplicable(f"{case.id}: ZeroRedundancyOptimizer takes a torch.optim.Optimizer class, and "
                                f"{optimizer_cls.__qualname__} is not one: building it raised "
                                f"{refused.removeprefix('building it: ')}")
    if refused:  # one red with DCP's where the optimizer's state_dict is not torch.optim's (KnownCause)
        raise KnownCause(f"{case.id}: ZeroRedundancyOptimizer(optimizer_class={case.optimizer}) on {ws} ranks raised "
                         f"{refused}" + ("\n  ZeRO hands the optimizer class the params of its shard as torch.optim "
                                         "does, a list of params or param groups" if refused.startswith("building") else ""),
                         FOREIGN_LAYOUT if FOREIGN_LAYOUT in refused else "")
    moved = _not_vacuous(run)
    ranks_disagree = _ranks_agree(run, "zero_params")
    sharded = [(f"ZeRO vs unsharded on rank {r}", value_differences("param", result.params, result.zero_params, tol, ("unsharded", "ZeRO")))
               for r, result in enumerate(run.ranks)]
    if not ranks_disagree:
        require_beyond_amplified_rounding(case.id, run.initial_params, [
            (result.params, result.zero_params) for result, (_, found) in zip(run.ranks, sharded) if found and result.zero_params is not None],
            f"over {run.case.distributed.iterations} unsharded train steps")
    sections = [(f"ZeRO {RANKS_DISAGREE}", ranks_disagree), *sharded]
    unsharded = run.ranks[0].state_dict
    loaded, refused = load_into_plain(case, run.ranks[0].zero_state_dict)
    sections.append(("consolidated state_dict into a plain optimizer", [refused] if refused else value_differences(
        "state", unsharded["state"], loaded["state"], tol, ("unsharded", "loaded"))))
    header = f"{case.id}: ZeroRedundancyOptimizer over {ws} ranks, {run.case.distributed.iterations} steps:"
    lost = state_lost_on_load(case.id, run.ranks[0].zero_state_dict, loaded) if not refused else None
    if lost:  # torch's load, not ZeRO's sharding: the state_dict check's red
        raise KnownCause(*lost)
    consolidated = sections[-1][1]
    unkeyed = layout_of(unsharded).unkeyed  # ZeRO consolidates one entry a param: the others are dropped, or their
    if unkeyed and consolidated and all(any(repr(k) in problem for k in unkeyed) for problem in consolidated) \
            and not any(problems for _, problems in sections[:-1]):  # load raises for want of them (DoG's '_first_step')
        raise KnownCause(f"{header}\n  consolidated state_dict into a plain optimizer: " + "; ".join(consolidated)
                         + f"\n  diagnosis: {resolve(case.optimizer).__name__}.state_dict() keeps "
                         f"{', '.join(map(repr, unkeyed))} under 'state', and ZeRO consolidates one entry per param, keyed "
                         f"by its index: {UNKEYED_STATE}", UNKEYED_STATE)
    cast = cast_on_load(case.dtype, consolidated)
    if cast and cast == consolidated and not any(problems for _, problems in sections[:-1]):  # the cast alone: state_dict's cause
        _report(header, sections, STATE_CAST_ON_LOAD, STATE_CAST)
    if cast and "state_dict" in case.checks:  # state_dict's red names the cast (GPAAdamW's bool flag): this one, the rest
        sections[-1] = (f"{sections[-1][0]} (less {len(cast)} dtype cast(s) by torch's load_state_dict, state_dict's red)",
                        [p for p in consolidated if p not in cast])
    try:
        _report(header, sections)
    except AssertionError as exc:
        coupled = coupling(case, laws_of(case).min_ndim)
        if coupled is None or coupled.couples is None:
            apart = _hyperparameters_apart(unsharded, run.ranks[0].zero_state_dict)
            notes = [note for note in (apart, coupled and coupled.evidence) if note]
            if notes:
                raise AssertionError(f"{exc}\n  diagnosis: " + "; ".join(notes)) from None
            raise
        if coupled.rounding:  # no value of another param moves its update: ZeRO's shards cannot round as the whole does
            raise Vacuous(f"{case.id}: vacuous: not comparable with the unsharded optimizer at the case's tolerance, "
                          f"{coupled.evidence}; ZeroRedundancyOptimizer steps each rank's shard apart. What differed:\n"
                          + "\n".join(str(exc).splitlines()[1:])) from None
        raise AssertionError(f"{exc}\n  diagnosis: {coupled.evidence}; ZeroRedundancyOptimizer gives each rank's optimizer its shard "
                             "of the params alone, so that statistic covers the shard: the optimizer's design, which ZeRO "
                             "cannot shard (shard it with FSDP2, whose DTensors reduce over every rank)") from None
    entries = sum(len(s) for s in unsharded["state"].values())
    return Verdict(f"ZeRO params equal the unsharded optimizer's on {ws} ranks; consolidated state_dict "
                   f"({entries} state entries) loads into a plain optimizer and equals the unsharded state",
                   {"steps_compared": run.case.distributed.iterations, "world_size": ws, "state_entries": entries,
                    "moved_tolerances": round(moved, 3)})


# Group keys ZeRO sets otherwise by its own construction (it hands each rank's optimizer groups of its own): no
# hyperparameter, and no cause (GefenMuon's ZeRO red blamed its hyperparameters on them)
ZERO_NAMES = ("param_names", "param_names_synthesized")


def _hyperparameters_apart(unsharded: dict[str, Any], zero: Any) -> str | None:
    """Where the unsharded optimizer's groups end with other hyperparameters than ZeRO's (OptiRoulette scales
    the lr it is given, but not a group's own, which ZeRO's groups carry): why, in words."""
    if not isinstance(zero, dict) or len(zero.get("param_groups", [])) != len(unsharded.get("param_groups", [])):
        return None
    apart = [f"group {i} {key}: unsharded {a[key]!r}, ZeRO {b.get(key)!r}"
             for i, (a, b) in enumerate(zip(unsharded["param_groups"], zero["param_groups"]))
             for key in a if key not in ("params", *ZERO_NAMES) and not isinstance(a[key], torch.Tensor) and a[key] != b.get(key)]
    if not apart:
        return None
    return ("the optimizer's groups end with other hyperparameters unsharded than under ZeRO (" + "; ".join(apart[:3])
            + "): ZeroRedundancyOptimizer hands the optimizer param groups that carry every hyperparameter it was given, "
            "and keeps its own groups' values in step with the optimizer's; an optimizer that sets a hyperparameter over "
            "the one given (OptiRoulette scales the lr of the optimizer it picks, but not a group's own lr) steps "
            "otherwise under ZeRO: the optimizer's doing")


DISTRIBUTED = Check("distributed", check_distributed,
                    "compiled train step in one process vs DDP on N ranks; eager DDP vs eager", "distributed",
                    rungs=MOVES,
                    proves=("DDP on `world_size` ranks (gloo on CPU) equals one process eagerly and the compiled train step, and the ranks' replicas "
                            "are bitwise identical. Evidence: iterations, ranks, moved tolerances."),
                    red=("Rank-dependent updates (an unseeded generator), or compiled differing from DDP; the message says whether compiled already "
                         "differs from eager in one process."))
ZERO = Check("zero", check_zero, "ZeroRedundancyOptimizer vs the unsharded optimizer; consolidated state_dict loads back",
             "distributed", apply_after=("distributed",), rungs=MOVES,
             proves=("`ZeroRedundancyOptimizer` over the optimizer equals the unsharded one on every rank, and its consolidated state_dict loads into"
                     " a plain optimizer and equals the unsharded state. Evidence: iterations, ranks."),
             red="An optimizer that couples params (a global norm) sees only its shard: the optimizer's design, said so.")
