"""The working half of the plugin, registered only in sessions with specs: spec collection,
one item per (case, check), the run cache, reports, update mode and the baseline gate."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import update
from . import report as reporting
from .cases import sections_of
from .checks import NotApplicable, RegistryError
from .harness.devices import selected_devices, unavailable_reason
from .harness.properties import register_profiles
from .session import SESSION, OptimtestSession, third_party_checks
from .spec import Case, SpecError, expand, load_spec
from .spec.errors import internal_error

SPEC_SUFFIXES = (".yaml", ".yml")


def activate(config: pytest.Config, roots: list[Path]) -> None:
    """Set this session up to run the specs under `roots` (called from the entry point's configure)."""
    register_profiles()
    session = config.stash[SESSION] = OptimtestSession(roots)
    _register_third_party_checks(config, session)
    config.pluginmanager.register(_ResultsCollector(session.results))
    config.pluginmanager.register(sys.modules[__name__], "optimtest-specs")
    if config.getoption("optim_spec") and config.args_source != pytest.Config.ArgsSource.ARGS:
        # `pytest --optim-spec specs/` runs the specs, not the testpaths.
        config.args[:] = [str(p) for p in config.getoption("optim_spec")]
    else:
        # a root is added unless an argument names it, a folder above it, or a part of it (a
        # node id copied from a report runs that node, not the whole root)
        named = [Path(a.split("::")[0]).resolve() for a in config.args]
        config.args.extend(str(r) for r in roots if not any(r == c or c in r.parents or r in c.parents for c in named))
    if getattr(config.option, "dist", "no") == "load":
        # Keep a case's checks on one worker, so its compiled run is made once: loadscope groups
        # by the node id up to its last '::', which for a check item is its case. (Not loadgroup:
        # pytest 9.2 derives nodeid from Node._id, and xdist 3.8 tags groups by writing _nodeid.)
        config.option.dist = "loadscope"


def _register_third_party_checks(config: pytest.Config, session: OptimtestSession) -> None:
    try:
        session.add_checks(third_party_checks(config))
    except RegistryError as exc:
        raise pytest.UsageError(f"pytest-optimtest: cannot register check: {exc}") from None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in SPEC_SUFFIXES:
        return None
    roots = parent.config.stash[SESSION].roots
    if any(file_path == r or r in file_path.parents for r in roots):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    """A spec: one child per case, or one error item when the spec is invalid."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        with _cyclic_gc_paused():
            yield from self._collect()

    def _collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        try:
            checks = self.config.stash[SESSION].checks
            spec, locator = load_spec(self.path, sections_of(checks))
            missing = missing_requirements(spec)
            if missing:
                yield MissingRequirementItem.from_parent(self, name="requires", reason=missing)
                return
            cases = expand(spec, locator, checks)
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name="spec-error", error=exc)
            return
        except Exception as exc:  # a bug of ours, not the spec's: this file errors, the session goes on
            yield SpecErrorItem.from_parent(self, name="spec-error", error=internal_error(self.path, exc))
            return
        chosen = selected_devices(self.config)
        absent = self.config.stash[SESSION].absent
        reasons = {d: unavailable_reason(d) for d in {c.device for c in cases}} if chosen is None else {}
        nested = self._named_below()
        for case in cases:
            if chosen is not None and case.device not in chosen:
                continue
            why = reasons.get(case.device)
            if why:  # not generated: a CPU machine shows its real results, not a wall of skips
                absent[case.device, why] += len(case.checks)
                continue
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


def missing_requirements(spec: Any) -> str | None:
    """Why a spec's `requires` cannot be met on this machine, or None."""
    import importlib

    missing = []
    for module in getattr(spec, "requires", []):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
    return f"requires {', '.join(missing)}: not importable here" if missing else None


class MissingRequirementItem(pytest.Item):
    """Stands for a spec whose `requires` are not installed: one skip, with the reason."""

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        pytest.skip(self.reason)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, "requires"


def case_items(parent: pytest.Collector, case: Case, prefix: str = "") -> Iterator[pytest.Item]:
    """A case's items: the checks the spec asks for, prerequisites first, then its benchmarks."""
    for name in case.checks:
        item = CheckItem.from_parent(parent, name=prefix + name, case=case, check=name)
        if name in case.xfail:
            item.add_marker(pytest.mark.xfail(reason=case.xfail[name], strict=True))
        yield item
    if parent.config.getoption("optim_benchmark") and isinstance(case, Case) and not case.closure \
            and case.scheduler is None:
        from .benchmark import benchmark_items

        yield from benchmark_items(parent, case, prefix)


class CaseNode(pytest.Collector):
    """One generated case, collected only when an argument names a node below its file."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def collect(self) -> Iterator[pytest.Item]:
        yield from case_items(self, self.case)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, self.case.id


class CheckItem(pytest.Item):
    """Runs one check on one case."""

    def __init__(self, *, case: Case, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.check = check
        self.summary: str | None = None

    def setup(self) -> None:
        # the record goes with every report of this item, a skip in setup's included
        self.user_properties[:] = [(reporting.RECORD_KEY, reporting.record(self, {}))]
        reason = unavailable_reason(self.case.device) or self.case.skip.get(self.check)
        if reason:
            pytest.skip(reason)
        for needed in self.config.stash[SESSION].checks[self.check].prerequisites:
            if needed in self.case.checks:
                why = self._prerequisite(needed)
                if why:
                    pytest.skip(f"prerequisite {needed!r} did not pass: {why}")

    def _prerequisite(self, name: str) -> str | None:
        """None when check `name` passed on this case (running it now if it has not run here yet)."""
        session = self.config.stash[SESSION]
        outcomes, key = session.outcomes, (self.case.id, name)
        if key not in outcomes:
            if name in self.case.skip:
                outcomes[key] = f"skipped: {self.case.skip[name]}"
            else:
                try:
                    session.checks[name].run(self.case, session.runs)
                    outcomes[key] = None
                except NotApplicable as exc:
                    outcomes[key] = f"not applicable: {exc}"
                except Exception as exc:  # any failure of the prerequisite is the reason to skip
                    outcomes[key] = _why(exc)
        return outcomes[key]

    def runtest(self) -> None:
        start = time.perf_counter()
        session = self.config.stash[SESSION]
        outcomes, key, runs = session.outcomes, (self.case.id, self.check), session.runs
        try:
            self.summary = session.checks[self.check].run(self.case, runs)
            outcomes[key] = None
            self.add_report_section("call", "optimtest", self.summary or "")  # shown by -rP / -rA
        except NotApplicable as exc:
            outcomes[key] = f"not applicable: {exc}"
            pytest.skip(str(exc))
        except Exception as exc:
            outcomes[key] = _why(exc)
            raise
        finally:
            session.check_seconds += time.perf_counter() - start
            metrics = reporting.item_metrics(session.checks[self.check], self.case, runs)
            self.user_properties[:] = [(reporting.RECORD_KEY, reporting.record(self, metrics))]

    def teardown(self) -> None:
        session = self.config.stash[SESSION]
        session.remaining[self.case.id] -= 1
        if session.remaining[self.case.id] <= 0:  # every item of the case ran, in whatever order: free its runs
            session.runs.release(self.case.id)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        exc = excinfo.value
        where = f"[{self.check}] {self.case.id} ({self.case.location})"
        if isinstance(exc, AssertionError):
            return f"{where}\n{exc}"
        return f"{where}\nerror while running the case: {type(exc).__name__}: {exc}"

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, f"{self.check}[{self.case.id}]"


def _why(exc: BaseException) -> str:
    """A failure in one line, for the skip reason of the checks that needed it."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]):
    """Count each case's items after every plugin deselected (-k, pytest-split): when the last
    one is torn down, the case's runs are freed. A case without a selected recompile item skips
    the perturbation phase of its compiled run."""
    result = yield
    session = config.stash[SESSION]
    generated, recompiled = set(), set()
    for item in items:
        if isinstance(item, CheckItem):
            session.remaining[item.case.id] += 1
            generated.add(item.case.id)
            if item.check == "recompile":
                recompiled.add(item.case.id)
    # the perturbations compile again: only where a selected recompile item reads them
    session.runs.unperturbed = generated - recompiled
    return result


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    absent = config.stash[SESSION].absent
    return [f"optimtest: {n} items of {device} cases not generated, {why.partition(': ')[2] or why} "
            f"(--optim-device {device} lists them as skips)" for (device, why), n in absent.items()]


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[SESSION].partial = True


class _ResultsCollector:
    """Receives every report (workers' too, under xdist) and keeps the generated items' records."""

    def __init__(self, results: reporting.Results) -> None:
        self.results = results

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.results.add(report)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash[SESSION]
    if session.runs.cases_run:
        terminalreporter.write_line(f"optimtest: {session.runs.cases_run} case runs (compiled, distributed); "
                                    f"{session.check_seconds:.1f}s inside checks")
    if not session.results.records:
        return
    terminalreporter.section("optimtest summary per spec")
    for line in reporting.terminal_table(session.results.rows()):
        terminalreporter.write_line(line)
    for line in session.messages:
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    config.stash[SESSION].runs.close()
    if hasattr(config, "workerinput"):  # xdist workers: the controller reports
        return
    from .harness.torch_api import torch_version

    results, messages = config.stash[SESSION].results, config.stash[SESSION].messages
    if config.getoption("optim_report"):
        reporting.write_json(config.getoption("optim_report"), results, torch_version())
        messages.append(f"optimtest: report written to {config.getoption('optim_report')}")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file and results.records:
        with open(summary_file, "a", encoding="utf-8") as f:
            f.write(reporting.markdown(results.rows(), torch_version()))
    if config.getoption("optim_baseline"):
        found = reporting.regressions(config.getoption("optim_baseline"), results)
        if found:
            messages.append(f"optimtest: {len(found)} regression(s) against {config.getoption('optim_baseline')}:")
            messages += [f"  {line}" for line in found]
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            messages.append(f"optimtest: no regression against {config.getoption('optim_baseline')} "
                            "(generated kernels, recompiles, graph breaks, checks' own gate numbers)")
    if config.getoption("optim_update_expected"):
        messages += _update_expected(config, results)


def _update_expected(config: pytest.Config, results: reporting.Results) -> list[str]:
    partial = _partial_run(config)
    if partial and not config.getoption("optim_update_force"):
        return [f"optimtest: --optim-update-expected refused: a partial run ({partial}) would mark unrun entries stale "
                "and write expectations from some cases only; rerun the whole suite, or add --optim-update-force"]
    planned = update.plan(results.records)
    lines = [f"optimtest: updated {line}" for line in update.apply(planned.changes)]
    lines += [f"optimtest: not updated: {c}" for c in planned.conflicts]
    lines += [f"optimtest: stale: {s}" for s in planned.stale]
    return lines or ["optimtest: --optim-update-expected: every expectation already matches"]


def _partial_run(config: pytest.Config) -> str | None:
    option = config.option
    reasons = []
    if getattr(option, "keyword", ""):
        reasons.append(f"-k {option.keyword!r}")
    if getattr(option, "markexpr", ""):
        reasons.append(f"-m {option.markexpr!r}")
    if getattr(option, "lf", False):
        reasons.append("--lf")
    if getattr(option, "deselect", None):
        reasons.append("--deselect")
    if any("::" in str(a) for a in config.args):
        reasons.append("node ids")
    if config.stash[SESSION].partial:
        reasons.append("deselected items")
    return ", ".join(dict.fromkeys(reasons)) or None
