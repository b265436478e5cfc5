"""The pytest11 entry point: options, marker and fixtures, and nothing heavy.

Every pytest session of a machine with the package installed loads this module, so it
imports neither torch nor Hypothesis. A session that has specs (`--optim-spec` or the
`optim_spec` ini option) registers its `session`, which does the work; the marker and the
fixtures import what they need when a test uses them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
import pytest

from . import fixtures, supervisor


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("optimtest", "PyTorch optimizer specs")
    group.addoption("--optim-spec", action="append", default=[], metavar="PATH",
                    help="spec file or directory of *.yaml specs to generate tests from (repeatable)")
    group.addoption("--optim-device", default=None, metavar="DEVICES",
                    help="comma-separated devices to generate cases for, e.g. 'cpu' or 'cpu,cuda' "
                         "(default: the devices this machine has; cases of the others are not generated)")
    group.addoption("--optim-report", default=None, metavar="PATH.json", help="write a machine-readable report")
    group.addoption("--optim-baseline", default=None, metavar="PATH.json",
                    help="fail the run when kernel counts, recompiles or graph breaks grew against this saved report")
    group.addoption("--optim-update-expected", action="store_true",
                    help="write observed kernel/recompile/graph-break counts into the specs (running torch version)")
    group.addoption("--optim-update-force", action="store_true",
                    help="with --optim-update-expected: write even after a partial run (-k, --lf, node ids)")
    group.addoption("--optim-timeout", type=float, default=None, metavar="SECONDS",
                    help="fail a case's check still running after this many seconds (default: the spec's timeout_s, 900)")
    group.addoption("--optim-horizon", type=int, default=None, metavar="STEPS",
                    help="run parity and the conformance laws for at least this many steps (nightly runs: differences "
                         "that appear late)")
    group.addoption("--optim-in-process", action="store_true",
                    help="run a serial session in this process, not under a supervisor (a case that kills the process "
                         "then ends the session)")
    group.addoption("--optim-strict", action="store_true",
                    help="fail vacuous items (a comparison that proved nothing: nothing moved, the run diverged) "
                         "instead of skipping them; a spec's `strict: true` does it for that spec")
    group.addoption("--optim-benchmark", action="store_true",
                    help="add eager and compiled step benchmarks per plain case (pytest-benchmark's fixture)")
    parser.addini("optim_spec", type="paths", default=[], help="spec files or directories, as --optim-spec")


@pytest.hookimpl(tryfirst=True)  # before pytest's own main loop: a serial session with specs supervises its child
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    return supervisor.supervise(config) if supervisor.wanted(config, bool(_spec_roots(config))) else None


def _spec_roots(config: pytest.Config) -> list[Path]:
    return [Path(p).resolve() for p in config.getoption("optim_spec")] or [Path(p).resolve() for p in config.getini("optim_spec")]


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "optim_spec(path, case='*'): parametrize optim_case over a spec's cases")
    config.pluginmanager.register(fixtures, "optimtest-fixtures")
    roots = _spec_roots(config)
    if roots:
        # import_module, not `from . import`: pytester's in-process runs drop modules from
        # sys.modules between runs, and the package attribute would hand back the stale one.
        importlib.import_module(f"{__package__}.session").activate(config, roots)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(fixtures.MARKER)
    if marker is None or "optim_case" not in metafunc.fixturenames:
        return
    fixtures.parametrize_from_marker(metafunc, marker)
