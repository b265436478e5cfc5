"""Law `bounded_state`: after a warm-up, the optimizer's state stops growing: the bytes its
tensors hold and the length of its containers (per-param state and its own attributes). State
that grows every step is memory that climbs until the job dies."""

from __future__ import annotations

from typing import Any

from ...harness.compare import listed
from ...harness.ladder import MOVES
from ..base import Check, Verdict
from .section import SECTION_KEY, observed, Laws, law_steps, require_on


def check_bounded_state(case: Any, runs: Any) -> Verdict:
    require_on(case, "bounded_state")
    warmup = law_steps(case)
    seen = observed(case, runs).run
    start, middle, end = seen.sizes[warmup - 1], seen.sizes[warmup + warmup // 2 - 1], seen.sizes[-1]
    # grown over the window, and still growing in its second half: a lazy buffer made once is not growth
    grew = [path for path in end if end[path] > start.get(path, 0) and end[path] > middle.get(path, 0)]
    if grew:
        shown = [f"{path}: {start.get(path, 0)} after step {warmup}, {middle.get(path, 0)} after step "
                 f"{warmup + warmup // 2}, {end[path]} after step {2 * warmup}" for path in grew]
        raise AssertionError(f"{case.id}: law bounded_state broken: after {warmup} warm-up steps the state must stop "
                             f"growing (bytes of its tensors, len of its containers); it kept growing:" + listed(shown))
    held = sum(v for k, v in end.items() if not k.startswith("len("))
    return Verdict(f"state constant from step {warmup} to {2 * warmup}: {held} bytes in tensors, {len(end)} sizes watched",
                   {"warmup_steps": warmup, "steps_watched": warmup, "state_bytes": held, "sizes_watched": len(end)})


LAW_BOUNDED_STATE = Check("law_bounded_state", check_bounded_state, "state stops growing after a warm-up", "primary",
                          section=Laws, section_key=SECTION_KEY, rungs=MOVES,
                          proves=("Tensor bytes and container lengths of the state and of the optimizer's own attributes stop growing after a 7-step "
                                  "warm-up. Evidence: sizes over the window."),
                          red="State that grows every step (a history list, a per-step cache): a memory leak in training.")
