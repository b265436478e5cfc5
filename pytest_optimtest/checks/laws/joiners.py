"""What the two joiner laws share: the joiners, from the step they joined, against a fresh
optimizer over them alone."""

from __future__ import annotations

from typing import Any, Literal

from ...harness.compare import listed, max_movement, snapshot_differences
from ...harness.joiner_runs import JoinerRuns
from ...harness.law_runs import coupling, lr_probes
from ..base import Blocked, NotApplicable, Vacuous
from .determinism import require_deterministic
from .section import law_steps, law_tolerance, laws_of, observed
from .untouched import check_untouched, moves_gradless_params


def joiners_judged(case: Any, runs: Any, law: str, how: Literal["late", "added"], said: str) -> dict[str, Any]:
    """The law's verdict over the joiner runs, at the case's lr or, where the joiners barely move
    (bf16), at the first larger lr of LR_PROBES that moves them."""
    require_deterministic(case, runs)
    steps = law_steps(case)
    vacuous: Vacuous | None = None
    for factor, scaled in lr_probes(case):
        try:
            runs_at_lr = runs.joiners(case, how, factor, steps, laws_of(case).min_ndim)
        except Exception as exc:
            if vacuous is not None:
                raise vacuous from None  # a larger lr it refuses: what the case's lr showed stands
            if how == "late":
                _blocked_by_untouched(case, runs, exc)
            raise  # at the case's own lr a raise is the optimizer's, and shown as such
        try:
            return {**judge_joiners(scaled, law, runs_at_lr, said), "lr_factor": factor}
        except Vacuous as exc:
            vacuous = exc
        except AssertionError as exc:
            moved = moves_gradless_params(case, runs) if how == "late" else None
            if moved is not None:
                raise Blocked(f"{case.id}: blocked by law_untouched: its step moves params whose grad is None, so the "
                              f"joiners moved before they joined ({moved})") from exc
            if observed(case, runs).run.torch_rng_used:
                raise Vacuous(f"{case.id}: vacuous: not comparable: the step draws from torch's RNG, and a run over "
                              f"other params draws in another order ({str(exc).splitlines()[-1].strip()})") from exc
            coupled = coupling(scaled, laws_of(case).min_ndim)  # at the lr that showed the red
            if coupled is None:
                raise
            if coupled.couples is None:
                raise Vacuous(f"{case.id}: vacuous: law {law}'s runs differ, and {coupled.evidence}: its premise (each "
                              "param steps as it would alone) cannot be told") from exc
            raise NotApplicable(f"{case.id}: law {law} does not apply: {coupled.evidence}; joiners then step with the others, "
                                "not as a fresh optimizer over them alone (the law's premise)") from exc
    if vacuous is not None:
        raise vacuous
    raise NotApplicable(f"{case.id}: law {law}: the case's lr cannot be read as a number")


def _blocked_by_untouched(case: Any, runs: Any, exc: Exception) -> None:
    """Params without a grad for their first steps raised: law untouched's params without a grad say
    so too where it is declared, and then its red is this one's root cause."""
    if not laws_of(case).untouched:
        return
    try:
        check_untouched(case, runs)
    except Exception as untouched:
        if type(untouched) is type(exc):
            raise Blocked(f"{case.id}: blocked by law_untouched: a step over a param whose grad is None raised "
                          f"{type(exc).__name__}: {exc}") from exc


def judge_joiners(case: Any, law: str, runs: JoinerRuns, how: str) -> dict[str, Any]:
    """Raise the law's failure where the joiners left the fresh optimizer's path; else the evidence."""
    tol = law_tolerance(case)
    for step, (joined, fresh) in enumerate(zip(runs.joined, runs.fresh)):
        problems = snapshot_differences(fresh, joined, tol, ("fresh optimizer", "joined"))
        if problems:
            raise AssertionError(f"{case.id}: law {law} broken: params that {how} after {runs.joined_at} steps must step as a "
                                 f"fresh optimizer over them alone does (own step counts, own state); they differ after "
                                 f"their step {step + 1}:" + listed(problems))
    moved = max_movement(runs.initial, runs.fresh[-1].params, tol)
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: law {law}: the fresh optimizer moved the joiners at most {moved:.3g} "
                      f"tolerances in {len(runs.fresh)} steps at {case.kwargs.get('lr', 'its default')} lr, so their agreeing "
                      "proves nothing")
    return {"joined_after_steps": runs.joined_at, "steps_compared": len(runs.fresh), "moved_tolerances": round(moved, 3)}
