"""The laws and properties init proposes, and the laws it runs once the spec is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..checks.laws.section import ON_BY_DEFAULT
from ..harness.blame import one_line
from ..harness.snapshot import groups_hold_settings
from ..models import two_diagonal, two_linear_no_bias
from .probe import _construct, _PROBE_BACKWARD


def _laws(cls: type, lr: float | None, factory: Any, stored: set[str], empty: bool = True, views: bool = True,
          tensor_lr: bool = True, gradient_free: bool = False, zero_lr_refusal: str | None = None) -> list[str]:
    """The conformance laws the constructor makes checkable (`lr` None: the cases give none) over params
    shaped as `factory`'s model's; the two init cannot judge, commented out; untouched not for a step
    that moves params by its closure's loss, not their grads."""
    lines = ["laws:  # conformance laws, each its own item (docs/laws.md); drop one it does not claim"]
    if factory is two_linear_no_bias:
        lines.append("  min_ndim: 2  # its step refuses 1-D params")
    if factory is two_diagonal:
        lines.append("  max_ndim: 1  # its step refuses matrices")
    if not empty:
        lines.append("  empty: false  # its step refuses a param with a 0 side")
    if not views:
        lines.append("  views: false  # its step refuses a non-contiguous param on purpose: descent steps contiguous ones")
    variants = []
    if "foreach" in stored:
        variants.append("    foreach: [{foreach: false}, {foreach: true}]")
    if lr is not None and tensor_lr:
        variants.append(f"    tensor_lr: [{{lr: {lr!r}}}, {{lr: {{tensor: {lr!r}}}}}]")
    if variants:
        lines += ["  equivalent:  # kwargs that must not change the run", *variants]
    lines.append("  # untouched: left out: its step moves params whose grad is None (it searches by its closure's loss, "
                 "not by grads)" if gradient_free else "  untouched: true  # a param whose grad is None does not move and gets no state")
    # lr 0 refused (a constructor's check) says nothing of a group set to lr 0 later; lr 0 moving params does
    lr_moves_nothing_at_0 = zero_lr_refusal is None or not zero_lr_refusal.startswith("moved")
    if lr is not None and not _groups_hold_settings(cls, factory, lr):
        lines.append("  # param_groups: left out: its param groups are its params alone (torchopt's tuples), no group holds an lr")
    elif lr is not None and lr_moves_nothing_at_0:
        lines.append("  param_groups: true  # each group's own lr is used (schedulers rely on it)")
    elif lr is not None:  # the law holds a group whose lr is set to 0 still
        lines.append(f"  # param_groups: left out: at lr 0 a step {zero_lr_refusal}")
    lines += ["  descent: true  # closure steps on a convex problem lower the loss (raise it under maximize)",
              "  # zero_grads: true  # uncomment if zero grads from fresh state move nothing (no decay)",
              "  # complex: true  # uncomment if it supports complex params (steps like view_as_real)"]
    return lines


def _groups_hold_settings(cls: type, factory: Any, lr: float) -> bool:
    """Whether the optimizer keeps its param groups as torch.optim's dicts (True where it does not construct)."""
    try:
        return groups_hold_settings(_construct(cls, "list", factory(), {"lr": lr}))
    except Exception:  # noqa: BLE001  # the form probes already said how it constructs
        return True


def _properties(cls: type, state_follows_param: bool, stored: set[str], shapes: dict[str, Any],
                zero_lr_refusal: str | None = None, has_lr: bool = True, float64_refusal: str | None = None) -> list[str]:
    """The metamorphic properties the constructor allows; elementwise commented out (init cannot know),
    dtypes only where the state follows the param's dtype, zero_lr only where a step at lr 0 runs;
    each drawing only the shapes it steps."""
    if _PROBE_BACKWARD.get() != "plain":
        return [f"# fuzz: none: its properties step on grads set by hand, which have no graph for a step that "
                f"differentiates its closure's (backward: {_PROBE_BACKWARD.get()})"]
    bounds = "".join(f", {k}: {str(v).lower()}" for k, v in shapes.items())
    every = f"{{examples: {{ci: 10, dev: 20}}{bounds}}}"
    lines = ["fuzz:  # Hypothesis properties of the eager step over the plain cases (docs/fuzzing.md)",
             f"  determinism: {every}  # two runs from one seed are bitwise equal"]
    if state_follows_param and float64_refusal is None:
        lines.append(f"  dtypes: {every}  # params and state keep their dtype (bfloat16, float64)")
    elif state_follows_param:
        lines.append(f"  # dtypes: left out: it draws float64 params, and its step refused them ({float64_refusal})")
    if "maximize" in stored:
        lines.append(f"  maximize: {every}  # maximize on grad g equals minimize on -g, state included")
    if has_lr and zero_lr_refusal is None:
        lines.append(f"  zero_lr: {every}  # lr=0 leaves params unchanged; drop if a decay or minimum step ignores lr")
    elif has_lr:
        lines.append(f"  # zero_lr: left out: at lr 0 a step {zero_lr_refusal}")
    lines.append(f"  # elementwise: {every}  # uncomment if an element's update depends on that element alone "
                 "(Adam, SGD, Lion; not Shampoo, Muon, Adafactor)")
    return lines


# Laws init proposes on by name, not on by default, that it runs before proposing: descent (an
# ascent optimizer, GradientAscent, raises the loss by design; init cannot know it claims otherwise).
PROBED_CLAIMS = ("descent",)


def _claims_refuted(registry: Any, case: Any) -> dict[str, str]:
    """{law: the first line of its failure} for the PROBED_CLAIMS that fail on `case`."""
    return _failing_laws(registry, case, PROBED_CLAIMS)


def _failing_laws(registry: Any, case: Any, laws: Sequence[str]) -> dict[str, str]:
    """{law: the first line of its failure} for those of `laws` that the spec runs and that fail on `case`;
    one not applicable, vacuous, blocked or raising is left to the spec's own runs to judge."""
    from ..harness.run_cache import RunCache  # imports torch's harness: only init's last step needs it

    runs, failing = RunCache(), {}
    for law in laws:
        check = registry.get(f"law_{law}")
        if check is None or check.name not in case.checks or check.name in case.skip:
            continue
        try:
            check.run(case, runs)
        except AssertionError as exc:
            failing[law] = one_line(exc)[:200]
        except Exception:  # noqa: BLE001 - not applicable, vacuous, blocked, or raising: the run itself says so
            continue
    return failing


def _laws_on_by_default_failing(registry: Any, case: Any) -> list[str]:
    """Comment lines for the laws of round two that fail on `case`: each with its failure's first
    line, as a `laws.off` entry to uncomment where the optimizer means it (a red is to read, not to hide)."""
    failing = [f"  #   {law}: \"<why the optimizer means it>\"  # init saw: {seen}"
               for law, seen in _failing_laws(registry, case, ON_BY_DEFAULT).items()]
    if not failing:
        return []
    return ["  # init ran the laws that are on by default: these failed on its first case. Read each red (pytest -k law_);",
            "  # turn one off only where the optimizer breaks it by design, with the reason:", "  # off:", *failing]
