"""pytest hooks: options, spec collection, one item per (case, check), summary."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .checks import CHECKS, NotApplicable
from .harness.devices import unavailable_reason
from .harness.properties import register_profiles
from .harness.run_cache import RunCache
from .spec import Case, SpecError, expand, load_spec

SPEC_SUFFIXES = (".yaml", ".yml")
_RUNS = pytest.StashKey[RunCache]()
_SPEC_ROOTS = pytest.StashKey[list]()
_CHECK_SECONDS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("optimtest", "PyTorch optimizer specs")
    group.addoption("--optim-spec", action="append", default=[], metavar="PATH",
                    help="spec file or directory of *.yaml specs to generate tests from (repeatable)")
    group.addoption("--optim-device", default=None, metavar="DEVICES",
                    help="comma-separated devices to generate cases for, e.g. 'cpu' or 'cpu,cuda'")
    parser.addini("optim_spec", type="paths", default=[], help="spec files or directories, as --optim-spec")


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    register_profiles()
    roots = [Path(p).resolve() for p in config.getoption("optim_spec")] or [Path(p).resolve() for p in config.getini("optim_spec")]
    config.stash[_SPEC_ROOTS] = roots
    config.stash[_RUNS] = RunCache()
    config.stash[_CHECK_SECONDS] = [0.0]
    if config.getoption("optim_spec") and config.args_source != pytest.Config.ArgsSource.ARGS:
        # `pytest --optim-spec specs/` runs the specs, not the testpaths.
        config.args[:] = [str(p) for p in config.getoption("optim_spec")]
    elif roots:
        covered = [Path(a.split("::")[0]).resolve() for a in config.args]
        config.args.extend(str(r) for r in roots if not any(r == c or c in r.parents for c in covered))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in SPEC_SUFFIXES:
        return None
    roots = parent.config.stash[_SPEC_ROOTS]
    if any(file_path == r or r in file_path.parents for r in roots):
        return SpecFile.from_parent(parent, path=file_path)
    return None


def _devices(config: pytest.Config) -> set[str] | None:
    value = config.getoption("optim_device")
    return {d.strip() for d in value.split(",") if d.strip()} if value else None


class SpecFile(pytest.File):
    """A spec: one child per case, or one error item when the spec is invalid."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        try:
            spec, locator = load_spec(self.path)
            cases = expand(spec, locator)
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name="spec-error", error=exc)
            return
        devices = _devices(self.config)
        for case in cases:
            if devices is None or case.device in devices:
                yield CaseNode.from_parent(self, name=case.id, case=case)


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


class CaseNode(pytest.Collector):
    """One generated case; its children are the checks the spec asks for."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def collect(self) -> Iterator[pytest.Item]:
        for name in self.case.checks:
            item = CheckItem.from_parent(self, name=name, case=self.case, check=name)
            if name in self.case.xfail:
                item.add_marker(pytest.mark.xfail(reason=self.case.xfail[name], strict=True))
            yield item

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
        reason = unavailable_reason(self.case.device) or self.case.skip.get(self.check)
        if reason:
            pytest.skip(reason)

    def runtest(self) -> None:
        start = time.perf_counter()
        try:
            self.summary = CHECKS[self.check].run(self.case, self.config.stash[_RUNS])
            self.add_report_section("call", "optimtest", self.summary or "")  # shown by -rP / -rA
        except NotApplicable as exc:
            pytest.skip(str(exc))
        finally:
            self.config.stash[_CHECK_SECONDS][0] += time.perf_counter() - start

    def teardown(self) -> None:
        if self.check == self.case.checks[-1]:  # the case's runs are no longer needed
            self.config.stash[_RUNS].release(self.case.id)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        exc = excinfo.value
        where = f"[{self.check}] {self.case.id} ({self.case.location})"
        if isinstance(exc, AssertionError):
            return f"{where}\n{exc}"
        return f"{where}\nerror while running the case: {type(exc).__name__}: {exc}"

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.case.line or 1) - 1, f"{self.check}[{self.case.id}]"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    runs = config.stash.get(_RUNS, None)
    if runs is not None and runs.cases_run:
        seconds = config.stash[_CHECK_SECONDS][0]
        terminalreporter.write_line(
            f"optimtest: {runs.cases_run} compiled case runs; {seconds:.1f}s inside checks (model, compile, steps)"
        )
