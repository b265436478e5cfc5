"""The pytest nodes of a spec run: a spec file, its cases' check items, and the items that
stand for a broken spec or a missing requirement. They hold no state: the session does."""

from __future__ import annotations

import contextlib
import gc
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .harness import torch_api
from .harness.blame import blame, bounded_message, recompile_limit_diagnosis
from .harness.containment import CaseTimedOut
from .harness.compiled_run import CompiledStepOnlyError
from .harness.ladder import RungFailure
from .spec import Case, SpecError
from .spec.case import shown_path
from .spec.errors import internal_error
from .spec.values import PackageImportFailed, import_module

if TYPE_CHECKING:
    from .session import OptimtestSession


SESSION_PLUGIN = "optimtest-session"  # the name the session registers itself under as a plugin
SESSION = pytest.StashKey["OptimtestSession"]()  # where it lives on the config


def _session(node: pytest.Item | pytest.Collector) -> OptimtestSession:
    return node.config.stash[SESSION]


class SpecFile(pytest.File):
    """A spec: its cases' items, or one error item when the spec is invalid."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        with _cyclic_gc_paused():
            yield from self._collect()

    def _collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        session = _session(self)
        try:
            spec, locator = session.registry.load_spec(self.path)
            missing = missing_requirements(spec, locator)
            if missing:
                yield MissingRequirementItem.from_parent(self, name="requires", reason=missing)
                return
            cases = session.registry.expand(spec, locator)
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name="spec-error", error=exc)
            return
        except Exception as exc:  # a bug of ours, not the spec's: this file errors, the session goes on
            yield SpecErrorItem.from_parent(self, name="spec-error", error=internal_error(self.path, exc))
            return
        nested = self._named_below()
        for case in session.generated(cases):
            if nested:
                yield CaseNode.from_parent(self, name=case.id, case=case)
            else:
                yield from case_items(self, case, prefix=f"{case.id}::")

    def _named_below(self) -> bool:
        """Whether an argument names a node inside this file (`spec.yaml::case[::check]`).

        A case's items are children of the file, named `case::check`: a collector per case
        would cost pytest as much as its items (10,000 cases). pytest matches such an argument
        one name per level, so then the file collects a node per case instead; the node ids
        are the same strings either way."""
        base, here = self.config.invocation_params.dir, self.path.resolve()
        for arg in self.config.args:
            path, sep, _ = str(arg).partition("::")
            if sep and (base / path).resolve() == here:
                return True
        return False


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Building a big spec's nodes allocates so much that the cyclic GC runs over and over: paused,
    a 10,000-case spec collects in 1.86 s instead of 2.24 s (bench/bench.py --only collect)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SpecErrorItem(pytest.Item):
    """Reports a broken spec as an error of that file alone; other specs still run."""

    def __init__(self, *, error: SpecError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def setup(self) -> None:
        pytest.fail(f"invalid optimizer spec: {self.error}", pytrace=False)

    def runtest(self) -> None:  # pragma: no cover - setup always fails
        pass

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.error.line or 1) - 1, f"spec-error: {self.error.path}"


def missing_requirements(spec: Any, locator: Any = None) -> str | None:
    """Why a spec's `requires` cannot be met on this machine, or None. A required package that is
    installed and fails to import is no skip but the spec's error, at its `requires` entry where
    `locator` (the spec's) is given."""
    missing = []
    for index, entry in enumerate(getattr(spec, "requires", [])):
        module, _, attribute = entry.partition(":")
        try:
            found = import_module(module)
        except PackageImportFailed as exc:
            if locator is None:
                raise
            raise locator.error(("requires", index), str(exc)) from None
        except ImportError as exc:
            missing.append(f"{entry} ({exc})")
            continue
        if attribute and not hasattr(found, attribute):
            package = module.partition(".")[0]
            installed = " ".join(filter(None, (package, getattr(sys.modules[package], "__version__", ""))))
            missing.append(f"{entry} (the installed {installed} has no {module}.{attribute})")
    return f"requires {', '.join(missing)}: not available here" if missing else None


class MissingRequirementItem(pytest.Item):
    """Stands for a spec whose `requires` are not installed: one skip, with the reason."""

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        pytest.skip(self.reason)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, "requires"


def case_items(parent: pytest.Collector, case: Any, prefix: str = "") -> Iterator[pytest.Item]:
    """A case's items: the checks the spec asks for, prerequisites first, then its benchmarks."""
    for name in case.checks:
        item = CheckItem.from_parent(parent, name=prefix + name, case=case, check=name)
        if name in case.xfail:
            matched = name in case.xfail_match  # then a mismatch is pytest.fail's, which raises=Exception lets through
            item.add_marker(pytest.mark.xfail(reason=case.xfail[name], strict=True, raises=Exception if matched else None))
        yield item
    if parent.config.getoption("optim_benchmark") and isinstance(case, Case) and not case.closure \
            and case.scheduler is None:
        from .benchmark import benchmark_items  # pytest-benchmark's fixture: only with --optim-benchmark

        yield from benchmark_items(parent, case, prefix)


class CaseNode(pytest.Collector):
    """One generated case, collected only when an argument names a node below its file."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def collect(self) -> Iterator[pytest.Item]:
        yield from case_items(self, self.case)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, self.case.id


class CheckItem(pytest.Item):
    """Runs one check on one case, through the session."""

    def __init__(self, *, case: Any, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.check = check
        self.root_cause: RungFailure | None = None  # set when this item is its case's one red for a failed rung
        self.diagnoses: list[str] = []  # what the case's runs show about its failure

    def setup(self) -> None:
        _session(self).setup_item(self)

    def runtest(self) -> None:
        expected = self.case.xfail_match.get(self.check)
        summary = _session(self).run_item(self) if expected is None else self._run_expecting(expected)
        self.add_report_section("call", "optimtest", str(summary or ""))  # shown by -rP / -rA; a plain str crosses to xdist's controller

    def _run_expecting(self, pattern: str) -> Any:
        """Runs an item whose xfail rule says which failure it expects: another failure is a red naming both
        (pytest's xfail, given raises=Exception, lets through what pytest.fail raises)."""
        try:
            return _session(self).run_item(self)
        except (Exception, pytest.fail.Exception) as exc:
            text = "\n".join([failure_text(exc, _session(self).registry[self.check].run), *self.diagnoses,
                              *_causes(exc)])
            if re.search(pattern, text):
                if isinstance(exc, pytest.fail.Exception):  # a crash, say, as its rule expects: failing as declared
                    raise AssertionError(str(exc)) from exc
                raise
            pytest.fail(f"{self.case.id}: it failed, but not as its xfail rule in {shown_path(self.case.spec_path)} "
                        f"expects (match: {pattern!r}; reason: {self.case.xfail[self.check]}); it failed so:\n{text}",
                        pytrace=False)

    def teardown(self) -> None:
        _session(self).teardown_item(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        where = f"[{self.check}] {self.case.id} ({self.case.location})"
        if self.root_cause is not None:
            where += (f"\nroot cause of this case: its ladder's rung {self.root_cause.rung!r} failed; every other check "
                      "of the case that needs it is skipped as blocked by it")
        check_run = _session(self).registry[self.check].run
        shown = failure_text(excinfo.value, check_run)
        extra = [d for d in self.diagnoses if d not in shown]
        text = f"{where}\n{shown}" + "".join(f"\n  diagnosis: {d}" for d in extra)
        verdict = isinstance(excinfo.value, AssertionError) and _raised_in(excinfo.value, check_run)
        return text + _whose_and_reproducer(text, verdict, self.case, self.check)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, f"{self.check}[{self.case.id}]"


def _whose_and_reproducer(text: str, verdict: bool, case: Any, check: str) -> str:
    """What a red lacks of whose doing it is and the command that shows it again: a check's verdict
    is on the optimizer unless something in it points at torch (an exception says whose it is)."""
    lines = []
    if verdict and "doing" not in text:
        hook_order = not hasattr(case, "optimizer") and not getattr(case, "cases", ())  # no optimizer in the case
        lines.append("whose doing: torch's ModTracker or the spec's model, by this check's verdict (the expected order is "
                     "the spec's, or derived from the module tree and the autograd graph)" if hook_order else
                     "whose doing: the optimizer's, by this check's verdict (nothing above points at torch)")
    spec_path = getattr(case, "spec_path", None)
    if spec_path and "reproduce" not in text.lower() and "repro:" not in text.lower():
        lines.append(f"reproduce: pytest --optim-spec {shown_path(spec_path)} -k '{case.id} and {check}'")
    return "".join(f"\n{line}" for line in lines)


def _causes(exc: BaseException) -> list[str]:
    """The whole text of the errors behind a red: a check blocked by its case's root cause fails as declared from
    that cause's error, whose one-line summary (a compiled step's, say) leaves out what inductor said."""
    found: list[str] = []
    cause = exc.__cause__
    while cause is not None and len(found) < 4:
        found.append(f"{type(cause).__name__}: {cause}")
        inner = getattr(cause, "error", None)  # CompiledStepOnlyError's, RungFailure's: the exception itself
        cause = inner if isinstance(inner, BaseException) else cause.__cause__
    return found


def failure_text(exc: BaseException, check_run: Any) -> str:
    """A failure as the user needs it: a check's verdict as it is; an exception with whose doing it
    is (the optimizer's code, torch's, or this plugin's) and the user's file and line."""
    if isinstance(exc, AssertionError) and _raised_in(exc, check_run) or isinstance(exc, pytest.fail.Exception):
        return str(exc)  # a verdict, or a red the plugin wrote with pytest.fail (a crash, an xfail's mismatch)
    cause = exc.error if isinstance(exc, CompiledStepOnlyError) else exc
    found = blame(cause, handler_frames=1 if isinstance(cause, CaseTimedOut) else 0)
    shown = bounded_message(cause)
    if isinstance(exc, (CompiledStepOnlyError, CaseTimedOut)):
        hung = found.where or found.innermost  # inside torch (compiling, say) when no frame of the optimizer's is running
        head = f"{exc}\n" + (f"  hung at {hung}\n" if isinstance(exc, CaseTimedOut) and hung else "")
        shown = ""
    elif found.owner == "optimizer" and found.compiled and not found.note:  # a note: the optimizer's whether compiled or not
        head = (f"the optimizer's code raised {shown}\n  at {found.where or found.innermost}, running as a compiled step (torch.compile "
                "rewrites its bytecode): torch's doing if the eager step does not raise, which this case's parity "
                "item tells (\"only the compiled step raised\")\n")
        shown = ""
    elif found.owner == "optimizer":
        head = (f"the optimizer's code raised {shown}\n  at {found.where or found.innermost} (the optimizer's doing, not a "
                "check's verdict)\n" + (f"  diagnosis: {found.note}\n" if found.note else ""))
        shown = ""
    elif found.owner == "torch" and found.frames and torch_api.is_recompile_limit_error(cause):
        head = recompile_limit_diagnosis(found.where, "each param shape and each optimizer instance") + "\n"
    elif found.owner == "torch":
        head = (f"torch raised it, at {found.innermost}" + (f", called from the optimizer's code at {found.where}" if found.frames
                                                             else "") + " (torch's doing, or its verdict on the optimizer's code)\n")
    else:
        head = (f"an error inside pytest-optimtest, at {found.innermost} (a bug of ours: please report it with this case's "
                "spec)\n")
    frames = found.traceback()
    return head + (f"{shown}\n" if shown else "") + (f"the optimizer's frames, innermost last:\n{frames}" if frames else "")


def _raised_in(exc: BaseException, check_run: Any) -> bool:
    """Whether the assertion is a check's verdict: raised by pytest-optimtest, or in the module of
    the check's own `run` (a third-party check's `assert`)."""
    if blame(exc).owner == "pytest-optimtest":
        return True
    code = getattr(check_run, "__code__", None)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return code is not None and tb is not None and tb.tb_frame.f_code.co_filename == code.co_filename
