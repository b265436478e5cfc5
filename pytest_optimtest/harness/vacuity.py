"""The one guard every comparing check calls first: a comparison that did not happen is never a
pass. Nothing compiled is a finding (red); nothing moved, or a run that diverged, proves nothing
either way: `Vacuous`, a skip with the reason that the summary counts and strict mode fails."""

from __future__ import annotations

import torch

from ..spec.schema import Tolerance
from .blame import one_line
from .compare import max_movement, non_finite

Params = dict[str, torch.Tensor]

# A reference whose params grew this many times their initial scale, or toward the top of their
# dtype's range (finfo.max ** 0.75: 1e29 at float32 and bf16, 4096 at fp16), has left the regime where
# "equal within tolerance" means anything: values near 1e34 differ by 1e-5 relative through the
# amplified rounding of a run blowing up, not through the optimizer's arithmetic.
DIVERGED_GROWTH = 1e10
# Below that a run is compared, but one that grew AMPLIFYING_GROWTH times or more amplifies a rounding
# difference made early (a gradient reduced in another order, one fused op) by about its growth: at
# float32, 1e9 growth turns one ulp into a relative difference near 100. Such a difference is no
# verdict; the same growth with equal runs still passes (SGD at lr 1.0 reaching 2e5, exactly).
AMPLIFYING_GROWTH = 1e3
# A difference within this many times what one ulp, nudged into the params after the first step, grows into
# by the last is the optimizer's amplification of rounding, not a verdict (require_beyond_amplified_ulp).
AMPLIFIED_ULP_MARGIN = 4.0


class NotApplicable(Exception):
    """The check cannot say anything about this case; the reason is reported as a skip."""


class Blocked(NotApplicable):
    """Another item's red already says why this check cannot pass (a failed rung, or the run it reads
    failing for the check that owns it): one root cause, one red; this item is skipped as blocked by it."""


class Vacuous(NotApplicable):
    """The comparison ran but proves nothing (nothing moved, the run diverged): a skip that is
    counted as vacuous, and a failure under --optim-strict or the spec's `strict: true`."""


class Diverged(Vacuous):
    """The reference run blew up (NaN, inf, or values far beyond its start): not comparable."""


def require_compiled(case_id: str, graph_count: int, consequence: str) -> None:
    """Fail when torch.compile captured no graph: the step ran eagerly or traced to no tensor op."""
    if graph_count == 0:
        raise AssertionError(f"{case_id}: not compiled: torch.compile captured no graph (the step ran eagerly or "
                             f"traced to no tensor operation), so {consequence}")


def require_finite(case_id: str, initial: dict[str, torch.Tensor], params: dict[str, torch.Tensor], over: str) -> None:
    """Raise Diverged when the reference params hold NaN/inf or grew DIVERGED_GROWTH times their
    initial scale: a diverged run compares NaN with NaN, or 1e34 with 1e34, vacuously."""
    blown_up = divergence(initial, params)
    if blown_up:
        raise Diverged(f"{case_id}: diverged: reference {blown_up} {over}: not comparable; lower the case's lr")


def divergence(initial: Params, params: Params) -> str:
    """How `params` blew up from `initial` ("params [...] became NaN/inf", "param 'w' grew from scale ..."), or ""."""
    bad = non_finite(params)
    if bad:
        return f"params {bad} became NaN/inf"
    grown = diverged_params(initial, params)
    if not grown:
        return ""
    name, start, end = grown[0]
    return (f"param {name!r} grew from scale {start:.3g} to {end:.3g} ({len(grown)} param(s) beyond {DIVERGED_GROWTH:g}x "
            "or near their dtype's overflow)")


def diverged_before_raising(case_id: str, step: int, error: BaseException, blown_up: str) -> Diverged:
    """A step that raised once the run had blown up (an optimizer that refuses a non-finite loss): the
    divergence's doing, not a finding about the optimizer."""
    return Diverged(f"{case_id}: diverged: {blown_up} before eager step {step}, which then raised {one_line(error)}: "
                    "not comparable; lower the case's lr")


def diverged_params(initial: Params, params: Params) -> list[tuple[str, float, float]]:
    """(name, initial scale, final scale) of floating params whose largest magnitude grew beyond
    DIVERGED_GROWTH times their initial one (at least 1: a param that starts at zero may reach 1), or
    beyond their dtype's max ** 0.75."""
    return [(name, start, end) for name, start, end in _scales(initial, params)
            if end > DIVERGED_GROWTH * max(start, 1.0) or end > torch.finfo(params[name].dtype).max ** 0.75]


def _scales(initial: Params, params: Params) -> list[tuple[str, float, float]]:
    """(name, largest magnitude before, after) of each non-empty floating param in both."""
    scales = []
    for name, before in initial.items():
        after = params.get(name)
        if after is None or not after.is_floating_point() or after.numel() == 0 or before.numel() == 0:
            continue
        scales.append((name, float(before.detach().abs().max()), float(after.detach().abs().max())))
    return scales


def require_beyond_amplified_rounding(case_id: str, initial: Params, differing: list[tuple[Params, Params]], over: str) -> None:
    """Raise Diverged when the first run of `differing` grew AMPLIFYING_GROWTH times its start and in
    every (reference, other) pair each param differs by at most eps(dtype) x that growth of its scale:
    rounding the run's growth amplified, which no tolerance separates from the optimizer's arithmetic.
    Call it on differences only: runs that agree still pass."""
    growth = _growth(initial, differing[0][0]) if differing else 0.0
    if growth < AMPLIFYING_GROWTH:
        return
    worst, bound = 0.0, 0.0
    for reference, other in differing:
        for name, ref in reference.items():
            got = other.get(name)
            if got is None or not ref.is_floating_point() or got.shape != ref.shape:
                return
            if ref.numel() == 0:
                continue
            scale = float(ref.detach().abs().max())
            relative = float((ref.detach().double().cpu() - got.detach().double().cpu()).abs().max()) / max(scale, 1e-30)
            allowed = torch.finfo(ref.dtype).eps * growth
            if not relative <= allowed:  # NaN included
                return
            worst, bound = max(worst, relative), max(bound, allowed)
    raise Diverged(f"{case_id}: diverged: the reference params grew {growth:.3g}x {over}, which amplifies a rounding "
                   f"difference made early by as much; the runs differ by at most {worst:.3g} of a param's scale, within "
                   f"eps x growth ({bound:.3g}): not comparable; lower the case's lr")


def require_beyond_amplified_ulp(case_id: str, reference: Params, nudged: Params, differing: Params, over: str) -> None:
    """Raise Vacuous where `differing` departs from `reference` by at most AMPLIFIED_ULP_MARGIN times as
    much, param by param, as `nudged` does: the reference run again, its params nudged by one ulp after
    the first step. Then the optimizer's own update amplifies a last-bit difference into the one seen
    (gradient_ascent's momentum over the root of an uncorrected EMA, at a grad that nearly vanishes),
    and no tolerance tells rounding (a compiled kernel's, another shape's) from a fault."""
    worst, bound = 0.0, 0.0
    for name, ref in reference.items():
        got, moved = differing.get(name), nudged.get(name)
        if got is None or moved is None or not ref.is_floating_point() or got.shape != ref.shape or ref.numel() == 0:
            continue
        difference = float((ref.double() - got.double()).abs().max())
        amplified = float((ref.double() - moved.double()).abs().max())
        if not difference <= AMPLIFIED_ULP_MARGIN * amplified:  # NaN included
            return
        worst, bound = max(worst, difference), max(bound, amplified)
    if worst == 0.0:
        return
    raise Vacuous(f"{case_id}: the runs differ by at most {worst:.3g}, and the one-process run itself moves by {bound:.3g} "
                  f"{over} when its params are nudged by one ulp after the first step: the optimizer's update amplifies "
                  "rounding that much (a vanishing grad over a small denominator), so no tolerance tells this difference "
                  "from rounding: not comparable")


def _growth(initial: Params, params: Params) -> float:
    """The largest factor by which a floating param's largest magnitude grew (from at least 1)."""
    return max((end / max(start, 1.0) for _, start, end in _scales(initial, params)), default=0.0)


def require_moved(case_id: str, initial: dict[str, torch.Tensor], params: dict[str, torch.Tensor], tol: Tolerance,
                  min_movement: float, over: str, hint: str = "") -> float:
    """The params' largest movement in tolerances; Diverged when the reference diverged, Vacuous
    when it moved less than `min_movement` (a step that did nothing would match)."""
    require_finite(case_id, initial, params, over)
    moved = max_movement(initial, params, tol)
    if moved < min_movement:
        raise Vacuous(f"{case_id}: vacuous comparison: {over} the params moved at most {moved:.3g} tolerances "
                      f"(need {min_movement:g}); a step that did nothing would pass{hint}")
    return moved
