"""Law `determinism`: two eager runs under the same seeds and grads are equal, bit for bit, and a
step draws from neither Python's `random` nor NumPy's global RNG (which no seed of torch's governs,
and which the user's own code shares)."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed, max_movement, snapshot_differences
from ...harness.ladder import MOVES
from ...spec.schema import Tolerance
from ..base import Blocked, Check, Vacuous, Verdict
from .section import SECTION_KEY, Laws, law_tolerance, laws_of, observed, require_on

EXACT = Tolerance(atol=0.0, rtol=0.0)


def check_determinism(case: Any, runs: Any) -> Verdict:
    require_on(case, "determinism")
    both = observed(case, runs)
    seen = both.run
    broken = determinism_broken(case, runs)
    if broken:
        raise AssertionError(broken)
    moved = max_movement(seen.initial, seen.final.params, law_tolerance(case))
    if moved < case.min_movement:
        raise Vacuous(f"{case.id}: vacuous: law determinism: the params moved at most {moved:.3g} tolerances in "
                      f"{seen.steps} steps, at up to {both.lr_factor:g}x the case's lr; equal runs that did nothing prove nothing")
    numpy = "NumPy's global RNG" if seen.numpy_checked else "NumPy's (not installed)"
    return Verdict(f"two runs of {seen.steps} steps equal bit for bit; Python's random and {numpy} untouched",
                   {"steps_compared": seen.steps, "moved_tolerances": round(moved, 3), "numpy_checked": seen.numpy_checked,
                    "lr_factor": both.lr_factor})


def determinism_broken(case: Any, runs: Any, reseeds: bool = True) -> str | None:
    """The law's failure message where the step is not deterministic, or (`reseeds`) resets a global RNG
    without drawing from it (the user's stream, not the run, is what changes), else None."""
    both = observed(case, runs)
    seen, twin = both.run, both.twin
    if seen.rng_used:
        return (f"{case.id}: law determinism broken: a step must not draw from Python's or NumPy's global RNG "
                "(torch.manual_seed does not govern them, and the user's code shares them):" + listed(sorted(set(seen.rng_used))))
    problems = snapshot_differences(seen.final, twin.final, EXACT, ("first", "second"))
    if problems:
        return (f"{case.id}: law determinism broken: two eager runs with the same seeds and grads must be equal; after "
                f"{seen.steps} steps they differ:" + listed(problems))
    if seen.rng_reseeded and reseeds:
        return (f"{case.id}: law determinism broken: a step must not reseed Python's or NumPy's global RNG (the user's "
                "code shares them: its stream restarts at each such step; the runs themselves are deterministic):"
                + listed(sorted(set(seen.rng_reseeded))))
    return None


def require_deterministic(case: Any, runs: Any) -> None:
    """A law that compares two eager runs of the case says nothing of a step that differs from itself:
    blocked by law determinism's red (unless the spec turned that law off). A step that only reseeds a
    global RNG runs the same whatever its state: no block."""
    if "determinism" in laws_of(case).off:
        return
    broken = determinism_broken(case, runs, reseeds=False)
    if broken:
        raise Blocked(f"{case.id}: blocked by law_determinism: the step is not deterministic, so runs that differ say "
                      f"nothing of this law ({broken.splitlines()[-1].strip()})")


LAW_DETERMINISM = Check("law_determinism", check_determinism, "same seeds, same run; no global RNG of Python or NumPy",
                        "primary", section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                        proves=("Two eager runs with the same seeds and grads are bitwise equal, and no step draws from Python's `random` or NumPy's "
                                "global RNG. Evidence: steps compared, RNGs watched."),
                        red="Runs that differ, or a step drawing from a global RNG of Python or NumPy (the user's own RNG use changes the run).")
